"""The per-tool output policy on each wire API, one table for all three: the same tool calls
and outputs written in chat, Anthropic Messages and Responses shapes, each output found by
the name of the call it answers, projected, kept raw (with the reason) or excluded with
the structured result in that API's tool-result shape. Ids and pairs stay valid; nothing
of an excluded output is left."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.apis.chat.tool_outputs import apply_tool_policy as chat_apply
from gateway.apis.messages.tool_outputs import apply_tool_policy as messages_apply
from gateway.apis.responses.tool_outputs import apply_tool_policy as responses_apply
from gateway.policy.tool_outputs import RECOMMENDATION, Stage, Tally, ToolOutputPolicy, ToolRule
from tests.tool_convo import (
    chat_outputs,
    chat_payload,
    messages_outputs,
    messages_payload,
    responses_outputs,
    responses_payload,
)

SEARCH = {"query": "jmespath", "took_ms": 41, "results": [
    {"title": f"Result {i}", "url": f"https://example.org/{i}", "snippet": f"snippet {i}",
     "html": "<div>" + "x" * 400 + "</div>", "score": i / 10} for i in range(5)]}  # fmt: skip
SECRET = "OVERSIZED-MARKER-"  # every byte of the oversized output carries it
HUGE = json.dumps({"rows": [f"{SECRET}{i:05d}" for i in range(4000)]})  # ~100 KB, ~28k tokens
SHELL = "total 12\n-rw-r--r-- 1 me me 120 main.py\n"  # not JSON

# (call id, tool name, output)
CALLS = [
    ("c1", "web_search", json.dumps(SEARCH)),
    ("c2", "web_search", "Error: rate limited, try later"),  # a projected tool answering in plain text
    ("c3", "api_get", json.dumps({"status": 404, "id": "r-1", "error": "not found", "trace": "t" * 300})),
    ("c4", "api_list", json.dumps({"items": "not a list"})),  # the expression fails on this shape
    ("c5", "db_dump", HUGE),
    ("c6", "shell", SHELL),  # no rule: untouched
    ("c7", "db_dump", json.dumps({"rows": ["small"]})),  # under the limit: untouched
]
POLICY = ToolOutputPolicy(rules=(
    ToolRule.of("web_*", "results[].{title: title, url: url, snippet: snippet}"),
    ToolRule.of("api_get", "{status: status, id: id, error: error}"),
    ToolRule.of("api_list", "sort_by(items, &name)"),
    ToolRule.of("db_*", None, "exclude", max_tokens=2000),
))  # fmt: skip
UPFRONT = Stage("upfront", project=True, cut=True, exclude=True, window=None)


@dataclass(frozen=True)
class Api:
    name: str
    build: Callable[[list[tuple[str, str, str]]], dict[str, Any]]
    apply: Callable[[Any, ToolOutputPolicy, Stage], tuple[dict[str, Any] | None, Tally]]
    outputs: Callable[[dict[str, Any]], list[tuple[str, str, Any, bool]]]
    excluded_is_error: bool  # Anthropic marks the structured result an error; chat and Responses have no flag


APIS = [
    Api("chat", chat_payload, chat_apply, chat_outputs, False),
    Api("messages", messages_payload, messages_apply, messages_outputs, True),
    Api("responses", responses_payload, responses_apply, responses_outputs, False),
]


def run(api: Api, stage: Stage = UPFRONT) -> tuple[dict[str, Any], dict[str, Any], Tally]:
    payload = api.build(CALLS)
    frozen = copy.deepcopy(payload)
    out, tally = api.apply(payload, POLICY, stage)
    assert payload == frozen  # the client's payload is never mutated
    assert out is not None
    return payload, out, tally


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_projection_keeps_the_named_fields(api: Api) -> None:
    _, out, _ = run(api)
    by_id = {cid: text for cid, _, text, _ in api.outputs(out)}
    assert json.loads(by_id["c1"]) == [{"title": f"Result {i}", "url": f"https://example.org/{i}",
                                        "snippet": f"snippet {i}"} for i in range(5)]  # fmt: skip
    assert json.loads(by_id["c3"]) == {"status": 404, "id": "r-1", "error": "not found"}
    assert len(by_id["c1"]) < len(json.dumps(SEARCH)) / 5


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_outputs_the_projection_cannot_apply_to_stay_raw_with_the_reason(api: Api) -> None:
    _, out, tally = run(api)
    by_id = {cid: text for cid, _, text, _ in api.outputs(out)}
    assert by_id["c2"] == "Error: rate limited, try later"  # not JSON
    assert by_id["c4"] == json.dumps({"items": "not a list"})  # the expression failed
    assert by_id["c6"] == SHELL and by_id["c7"] == json.dumps({"rows": ["small"]})
    assert tally.projected == 2 and tally.fallbacks == {"not_json": 1, "expression_error": 1}


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_an_oversized_output_is_replaced_by_the_structured_result(api: Api) -> None:
    _, out, tally = run(api)
    [(cid, name, text, is_error)] = [o for o in api.outputs(out) if o[0] == "c5"]
    result = json.loads(text)
    assert result == {"status": "oversized", "tool": "db_dump", "original_tokens": result["original_tokens"],
                      "limit_tokens": 2000, "recommendation": RECOMMENDATION}  # fmt: skip
    assert result["original_tokens"] > 20_000
    assert is_error is api.excluded_is_error
    assert SECRET not in json.dumps(out)  # nothing of it is left anywhere in the request
    assert tally.excluded == 1 and tally.tokens_removed > 20_000


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_every_output_keeps_its_call_id_and_order(api: Api) -> None:
    payload, out, _ = run(api)
    before, after = api.outputs(payload), api.outputs(out)
    assert [(cid, name) for cid, name, _, _ in after] == [(cid, name) for cid, name, _ in CALLS]
    assert [(cid, name) for cid, name, _, _ in before] == [(cid, name) for cid, name, _, _ in after]
    untouched = {"c2", "c4", "c6", "c7"}  # the very objects, not copies
    key = {"chat": "messages", "messages": "messages", "responses": "input"}[api.name]
    same = [a is b for a, b in zip(payload[key], out[key], strict=True)]
    assert sum(same) == len(same) - 3  # only the three changed outputs were rebuilt
    assert {cid for cid, *_ in after} >= untouched


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_without_upfront_limits_only_the_projection_runs_up_front(api: Api) -> None:
    stage = Stage("upfront", project=True, cut=False, exclude=False, window=None)
    _, out, tally = run(api, stage)
    assert SECRET in json.dumps(out) and tally.excluded == 0 and tally.projected == 2


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_the_rescue_excludes_against_a_share_of_the_window_and_does_not_project(api: Api) -> None:
    policy = ToolOutputPolicy(rules=(ToolRule.of("db_*", None, "exclude"), *POLICY.rules[:1]))
    payload = api.build(CALLS)
    stage = Stage("rescue", project=False, cut=False, exclude=True, window=50_000)  # 30 %: 15,000 tokens
    out, tally = api.apply(payload, policy, stage)
    assert out is not None and tally.excluded == 1 and tally.projected == 0
    [excluded] = [json.loads(t) for cid, _, t, _ in api.outputs(out) if cid == "c5"]
    assert excluded["limit_tokens"] == 15_000
    assert {cid: t for cid, _, t, _ in api.outputs(out)}["c1"] == json.dumps(SEARCH)


@pytest.mark.parametrize("api", APIS, ids=lambda a: a.name)
def test_no_matching_rule_changes_nothing(api: Api) -> None:
    payload = api.build(CALLS)
    out, tally = api.apply(payload, ToolOutputPolicy(rules=(ToolRule.of("other", "a"),)), UPFRONT)
    assert out is None and not tally.changed and not tally.fallbacks


def test_a_result_whose_call_is_not_in_the_request_only_matches_a_catch_all() -> None:
    # Responses with previous_response_id: the call is stored upstream, only its output is sent.
    payload = {"model": "m", "previous_response_id": "resp_1",
               "input": [{"type": "function_call_output", "call_id": "c9", "output": HUGE}]}  # fmt: skip
    out, _ = responses_apply(payload, POLICY, UPFRONT)
    assert out is None
    catch_all = ToolOutputPolicy(rules=(ToolRule.of("*", None, "exclude", max_tokens=2000),))
    out, tally = responses_apply(payload, catch_all, UPFRONT)
    assert out is not None and json.loads(out["input"][0]["output"])["tool"] is None and tally.excluded == 1


def test_a_namespaced_responses_tool_matches_by_either_name() -> None:
    # Codex's namespace tools (tests/corpus/requests/codex-0.169-namespace-result.json).
    item = {"type": "function_call", "call_id": "c1", "name": "close_agent", "namespace": "multi_agent_v1",
            "arguments": "{}"}  # fmt: skip
    payload = {"model": "m", "input": [item, {"type": "function_call_output", "call_id": "c1", "output": HUGE}]}
    for pattern in ("multi_agent_v1.*", "close_agent"):
        policy = ToolOutputPolicy(rules=(ToolRule.of(pattern, None, "exclude", max_tokens=2000),))
        out, _ = responses_apply(payload, policy, UPFRONT)
        assert out is not None and json.loads(out["input"][1]["output"])["tool"] == "multi_agent_v1.close_agent"


def test_a_cut_rule_cuts_head_and_tail_up_front() -> None:
    policy = ToolOutputPolicy(rules=(ToolRule.of("db_*", None, "cut", max_tokens=2000),))
    out, tally = chat_apply(chat_payload(CALLS), policy, UPFRONT)
    assert out is not None and tally.cut == 1 and tally.excluded == 0
    [text] = [t for cid, _, t, _ in chat_outputs(out) if cid == "c5"]
    assert text.startswith(HUGE[:100]) and text.endswith(HUGE[-100:]) and "truncated by llm-gateway" in text


def test_a_projection_that_still_leaves_too_much_is_then_excluded() -> None:
    policy = ToolOutputPolicy(rules=(ToolRule.of("db_*", "rows", "exclude", max_tokens=2000),))
    out, tally = messages_apply(messages_payload(CALLS), policy, UPFRONT)
    assert out is not None and tally.projected == 2 and tally.excluded == 1
    assert SECRET not in json.dumps(out)
    [(_, _, small, err)] = [o for o in messages_outputs(out) if o[0] == "c7"]
    assert small == '["small"]' and err is False
