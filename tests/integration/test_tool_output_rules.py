"""The per-tool output policy through the app, on every API: projections and exclusions up
front (what the upstream received), exclusion as the rescue's first step (the retry keeps
everything else), a translated request, and the metrics and log counts."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from gateway.logs import JsonFormatter
from tests.fakeupstream import estimate_tokens
from tests.tool_convo import (
    chat_outputs,
    chat_payload,
    messages_outputs,
    messages_payload,
    responses_outputs,
    responses_payload,
)

SECRET = "OVERSIZED-MARKER-"
HUGE = json.dumps({"rows": [f"{SECRET}{i:05d}" for i in range(4000)]})  # ~28k tokens
SEARCH = json.dumps({"results": [{"title": f"T{i}", "url": f"https://e.org/{i}", "html": "h" * 300}
                                 for i in range(5)]})  # fmt: skip
CALLS = [("c1", "web_search", SEARCH), ("c2", "web_search", "plain text"), ("c3", "db_dump", HUGE),
         ("c4", "shell", "ok")]  # fmt: skip
RULES = """
  rules:
    - {tool: 'web_*', project: 'results[].{title: title, url: url}'}
    - {tool: 'db_*', oversized: exclude}
"""
UPFRONT = "tool_outputs:\n  upfront: true\n  max_tokens: 2000\n" + RULES
RESCUE_ONLY = "tool_outputs:\n  upfront: false\n" + RULES

API = {
    "chat": (chat_payload, chat_outputs, "chat_requests"),
    "messages": (messages_payload, messages_outputs, "messages_requests"),
    "responses": (responses_payload, responses_outputs, "responses_requests"),
}


async def send(gw: Any, api: str, payload: dict[str, Any]) -> tuple[int, Any, bytes]:
    return await getattr(gw, api)(payload)


def with_new_user_turn(api: str, payload: dict[str, Any]) -> dict[str, Any]:
    if api == "responses":
        turn = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now summarise"}]}
        return {**payload, "input": [*payload["input"], turn]}
    if api == "messages":  # after the last tool_result turn: text in the same user message
        *rest, last = payload["messages"]
        return {**payload, "messages": [*rest, {**last, "content": [*last["content"],
                                                                  {"type": "text", "text": "now summarise"}]},
                                        {"role": "assistant", "content": "Sure."},
                                        {"role": "user", "content": "now summarise"}]}  # fmt: skip
    return {**payload, "messages": [*payload["messages"], {"role": "user", "content": "now summarise"}]}


def by_id(outputs: list[tuple[str, str, Any, bool]]) -> dict[str, tuple[Any, bool]]:
    return {cid: (text, err) for cid, _, text, err in outputs}


@pytest.mark.parametrize("api", list(API))
async def test_up_front_projection_and_exclusion_reach_the_upstream(make_gateway, api: str) -> None:
    build, outputs, requests = API[api]
    gw = await make_gateway(UPFRONT)
    status, headers, body = await send(gw, api, build(CALLS))
    assert status == 200, body
    [sent] = getattr(gw.fake, requests)()
    assert SECRET not in sent.body.decode()  # no byte of the oversized output went upstream
    got = by_id(outputs(sent.json()))  # (pairs checked while reading)
    assert json.loads(got["c1"][0]) == [{"title": f"T{i}", "url": f"https://e.org/{i}"} for i in range(5)]
    assert got["c2"][0] == "plain text" and got["c4"][0] == "ok"
    result = json.loads(got["c3"][0])
    assert result["status"] == "oversized" and result["tool"] == "db_dump" and result["limit_tokens"] == 2000
    assert got["c3"][1] is (api == "messages")  # Anthropic's is_error
    assert "x-llm-compressed" not in headers
    m = gw.metric
    assert m("llm_gateway_tool_outputs_total", stage="upfront", outcome="projected", reason="none") == 1
    assert m("llm_gateway_tool_outputs_total", stage="upfront", outcome="excluded", reason="none") == 1
    assert m("llm_gateway_tool_outputs_total", stage="upfront", outcome="kept_raw", reason="not_json") == 1


@pytest.mark.parametrize("api", list(API))
async def test_without_upfront_only_the_projection_applies_before_the_first_send(make_gateway, api: str) -> None:
    build, outputs, requests = API[api]
    gw = await make_gateway(RESCUE_ONLY, ", context_window: 20000")
    status, _, _ = await send(gw, api, build(CALLS))
    assert status == 200
    [sent] = getattr(gw.fake, requests)()
    got = by_id(outputs(sent.json()))
    assert got["c3"][0] == HUGE and json.loads(got["c1"][0])[0] == {"title": "T0", "url": "https://e.org/0"}


@pytest.mark.parametrize("api", list(API))
async def test_the_rescue_excludes_the_oversized_output_and_keeps_the_rest(make_gateway, api: str) -> None:
    build, outputs, requests = API[api]
    # Responses' overflow states no numbers: the window comes from the upstream's config there.
    gw = await make_gateway(RESCUE_ONLY, ", context_window: 16000" if api == "responses" else "")
    gw.fake.context_limit = 16_000
    calls = [(f"s{i}", "shell", "line of output\n" * 60) for i in range(10)] + CALLS
    # A newer user turn: every tool turn above is old, so compression could drop any of them.
    payload = with_new_user_turn(api, build(calls))
    status, headers, body = await send(gw, api, payload)
    assert status == 200, body
    first, second = getattr(gw.fake, requests)()
    assert SECRET in first.body.decode() and SECRET not in second.body.decode()
    assert headers["x-llm-compressed"] == "true"
    before, after = outputs(first.json()), outputs(second.json())
    result = json.loads(by_id(after)["c3"][0])
    assert result["status"] == "oversized" and result["limit_tokens"] == 4800  # 30 % of 16,000
    # Excluding the one output was enough: every other output came back whole, none dropped.
    assert [o for o in after if o[0] != "c3"] == [o for o in before if o[0] != "c3"]
    assert estimate_tokens(second.json()) < 16_000
    m = gw.metric
    assert m("llm_gateway_tool_outputs_total", stage="rescue", outcome="excluded", reason="none") == 1
    assert m("llm_gateway_compressions_total", upstream="primary", outcome="applied") == 1


async def test_a_translated_request_is_handled_in_the_clients_api(make_gateway) -> None:
    # Anthropic Messages in, chat upstream: the structured result is made as a tool_result
    # (is_error) in the client's API, then translated.
    gw = await make_gateway(UPFRONT, ", apis: [chat], model_map: {'claude*': qwen}")
    status, headers, body = await gw.messages(messages_payload(CALLS))
    assert status == 200, body
    assert headers["x-llm-translated"] == "messages->chat"
    [sent] = gw.fake.chat_requests()
    assert SECRET not in sent.body.decode()
    tools = {m["tool_call_id"]: m["content"] for m in sent.json()["messages"] if m["role"] == "tool"}
    # The translator marks an error result in words (chat has no flag): "Error: " + the result.
    assert tools["c3"].startswith("Error: ")
    assert json.loads(tools["c3"].removeprefix("Error: "))["status"] == "oversized"


async def test_limits_not_enforced_up_front_change_nothing_byte_for_byte(make_gateway) -> None:
    gw = await make_gateway("tool_outputs: {upfront: false, max_tokens: 100}\n")
    body = json.dumps(chat_payload(CALLS)).encode()
    status, _, _ = await gw.chat(data=body, headers={"Content-Type": "application/json"})
    assert status == 200 and gw.fake.chat_requests()[0].body == body


async def test_the_log_line_has_the_counts_and_reasons_and_no_content(make_gateway, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    gw = await make_gateway(UPFRONT)
    status, _, _ = await gw.chat(chat_payload(CALLS))
    assert status == 200
    lines = [JsonFormatter().format(r) for r in caplog.records]
    [record] = [json.loads(line) for line in lines if '"event":"request"' in line]
    assert record["tool_outputs"] == {"upfront": {"projected": 1, "excluded": 1, "cut": 0,
                                                  "projection_fallbacks": {"not_json": 1}}}  # fmt: skip
    assert SECRET not in "\n".join(lines) and "plain text" not in "\n".join(lines)


@pytest.mark.parametrize("api", list(API))
async def test_the_readme_application_example_limits_a_tool_no_rule_names(make_gateway: Any, api: str) -> None:
    # docs/tool-outputs.md's promise, "limits enforced on every request", as printed: a file read no rule
    # names is held to the section's max_tokens like any other.
    from tests.unit.policy.test_tool_output_policy import readme_example

    build, outputs, requests = API[api]
    gw = await make_gateway(readme_example("application with API tools:"))
    read = "".join(f"line {i:05d} of a long file\n" for i in range(2000))[:50_000]
    status, headers, body = await send(gw, api, build([("r1", "read_file", read), ("c4", "shell", "ok")]))
    assert status == 200, body
    [sent] = getattr(gw.fake, requests)()
    got = by_id(outputs(sent.json()))
    text = got["r1"][0] if isinstance(got["r1"][0], str) else "".join(p["text"] for p in got["r1"][0])
    assert "truncated by llm-gateway" in text and len(text) < 20_000  # 4,000 tokens, head and tail
    assert text.startswith("line 00000") and got["c4"][0] in ("ok", [{"type": "text", "text": "ok"}])
    assert headers["x-llm-tool-outputs-capped"] == "1"
