"""The OpenAI Agents SDK itself (openai-agents, stock settings) through the gateway to each
upstream API: native Responses, and Responses translated to Messages, chat completions and the
Gemini API. Runner.run and Runner.run_streamed: a text answer, a function tool, two calls at
once, an ``output_type`` beside tools, a handoff, ModelSettings (reasoning effort,
``max_tokens``, ``tool_choice="required"``), ``previous_response_id`` (native; a clear 400
elsewhere), an upstream 429 the SDK never sees, a stream cut ending in one typed error, and
OpenAIConversationsSession.

The SDK is no dependency of the gateway: it runs in its own interpreter (``AGENTS_PYTHON``, else
``.venv-agents/bin/python``, which scripts/test-deps.sh makes), driven by ``agents_driver.py``,
which prints one JSON object per case; the test reads them and what the upstream was sent.
Every case runs in one driver process, against one gateway whose upstreams are told apart by
the model's name, in front of the scenario fake (``-tool``, ``-429``, ``-cut``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.fake import ScenarioUpstream, gemini
from gateway.fake.chat import chat_completion
from gateway.fake.messages import anthropic_message
from gateway.fake.responses import response_object
from gateway.fake.steps import Recorded, Reply
from gateway.translate import thinking_room
from tests.e2e.conftest import ROOT, RunningGateway, base_env, free_port, start

pytestmark = pytest.mark.e2e

AGENTS_PYTHON = Path(os.environ.get("AGENTS_PYTHON") or ROOT / ".venv-agents" / "bin" / "python")
DRIVER = Path(__file__).with_name("agents_driver.py")
# Each upstream API, and the model a route to it is asked for (Gemini 3: 2.x refuses JSON mode
# beside functions, which an output_type with tools asks).
ROUTES = {"responses": "gpt-5", "messages": "claude-sonnet-4-5", "chat": "qwen3", "gemini": "gemini-3-flash-preview"}
MODES = ("run", "stream")
CASES = ("text", "tool", "output_type", "handoff", "settings", "previous", "429")


@pytest.fixture(scope="module")
def agents_python() -> Path:
    if not AGENTS_PYTHON.exists():
        pytest.skip(f"no interpreter with openai-agents at {AGENTS_PYTHON} (scripts/test-deps.sh makes one)")
    found = subprocess.run([str(AGENTS_PYTHON), "-c", "import agents"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.skip(f"openai-agents is not importable by {AGENTS_PYTHON}: {found.stderr.decode()[-300:]}")
    return AGENTS_PYTHON


@pytest.fixture(scope="module")
def scenario_fake() -> Iterator[ScenarioUpstream]:
    with ScenarioUpstream.in_thread() as fake:
        fake.wait_s = 0.2  # the 429's retry-after
        fake.always = two_calls  # a callable step: called with each request's body
        yield fake


@pytest.fixture(scope="module")
def agents_gateway(scenario_fake: ScenarioUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    tmp, port, url = tmp_path_factory.mktemp("agents"), free_port(), scenario_fake.url
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 5}}\n"
        "upstreams:\n"
        f"  - {{name: up-responses, base_url: '{url}', api_key: sk-fake, apis: [responses], models: ['gpt-*']}}\n"
        f"  - {{name: up-messages, base_url: '{url}', api_key: sk-fake, key_header: x-api-key, apis: [messages],"
        " models: ['claude-*']}\n"
        f"  - {{name: up-chat, base_url: '{url}', api_key: sk-fake, apis: [chat], models: ['qwen*']}}\n"
        f"  - {{name: up-gemini, base_url: '{url.removesuffix('/v1')}/v1beta', api_key: sk-fake, apis: [gemini],"
        " models: ['gemini-*']}\n"
        "timeouts: {connect_s: 2, first_byte_s: 5, idle_s: 5}\n"
        "retry: {rate_limit: {max_retries: 3, base_delay_s: 0.05, max_delay_s: 0.5}}\n"
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def runs(agents_python: Path, agents_gateway: RunningGateway, scenario_fake: ScenarioUpstream) -> dict[str, Any]:
    """Every case on every route, in one driver process: its results by case, each with the
    upstream requests made for it (``sent``, in order)."""
    specs = [f"{name}:{model}:{mode}" for model in ROUTES.values() for name in CASES for mode in MODES]
    specs += [f"{name}:{model}:{mode}" for model in ROUTES.values() for name, mode in
              (("parallel", "run"), ("cut", "stream"), ("session", "run"), ("session", "stream"),
               ("text", "ws"), ("tool", "ws"))]  # fmt: skip
    done = subprocess.run([str(agents_python), str(DRIVER), agents_gateway.base, *specs], capture_output=True,
                          text=True, timeout=120, env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    out = {}
    for line in done.stdout.splitlines():
        result = json.loads(line)
        result["sent"] = [r for r in scenario_fake.requests if f"[{result['tag']}]".encode() in r.body]
        out[result["case"]] = result
    assert len(out) == len(specs), (sorted(set(specs) - set(out)), done.stderr[-2000:])
    return out


def two_calls(payload: dict[str, Any]) -> Reply | None:
    """The ``parallel`` case's first turn: get_weather and get_time called at once, in the API the
    request came on (buffered: the case runs Runner.run); None for any other request."""
    text = json.dumps(payload)
    answered = ("function_call_output", '"role": "tool"', "tool_result", "functionResponse")
    if "[parallel/" not in text or any(a in text for a in answered):
        return None
    calls = [("get_weather", {"city": "Paris"}), ("get_time", {"city": "Paris"})]
    if "contents" in payload:
        parts = [gemini.function_call(gemini.MODEL, name, args)[0] for name, args in calls]
        return Reply(200, gemini.response(gemini.MODEL, parts, "STOP", gemini.usage(20, 9)))
    if "input" in payload:
        output = [{"id": f"fc_{n}", "type": "function_call", "status": "completed", "call_id": f"call_{n}",
                   "name": name, "arguments": json.dumps(args)} for n, (name, args) in enumerate(calls)]  # fmt: skip
        return Reply(200, {**response_object(payload["model"]), "id": "resp_two_calls", "output": output})
    if any("input_schema" in t for t in payload.get("tools") or ()):
        body = anthropic_message(payload["model"])
        body.update(content=[{"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": args}
                             for n, (name, args) in enumerate(calls)], stop_reason="tool_use")  # fmt: skip
        return Reply(200, body)
    body = chat_completion(payload["model"], "")
    body["choices"][0].update(finish_reason="tool_calls", message={"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for n, (name, args) in enumerate(calls)]})  # fmt: skip
    return Reply(200, body)


def generations(sent: list[Recorded]) -> list[dict[str, Any]]:
    """The bodies of the model calls among ``sent`` (not the conversation calls)."""
    return [r.json() for r in sent if r.path.endswith(("/responses", "/messages", "/chat/completions"))
            or ":generateContent" in r.path or ":streamGenerateContent" in r.path]  # fmt: skip


@pytest.mark.parametrize("route", ROUTES)
def test_text_tools_output_type_and_handoff_run_and_streamed(runs: dict[str, Any], route: str) -> None:
    model = ROUTES[route]
    for mode in MODES:
        text, tool, typed, handoff = (runs[f"{name}:{model}:{mode}"] for name in ("text", "tool", "output_type", "handoff"))
        for result in (text, tool, typed, handoff):
            assert "error" not in result, (route, mode, result)
        assert text["output"].startswith("Hello from")
        assert tool["items"] == ["tool_call_item", "tool_call_output_item", "message_output_item"]
        assert tool["output"] == "The tool answered: sunny in echo hello from a shell tool"
        # Tools and an output_type together: the answer after the tool's result, in the schema.
        assert typed["items"] == tool["items"] and typed["output"] == {"city": "fake", "sunny": False}
        assert handoff["last_agent"] == "Spanish"
        assert handoff["items"] == ["handoff_call_item", "handoff_output_item", "message_output_item"]


@pytest.mark.parametrize("route", ROUTES)
def test_the_websocket_transport_answers_and_loops_on_every_upstream_api(
    runs: dict[str, Any], agents_gateway: RunningGateway, route: str
) -> None:
    """``OpenAIResponsesWSModel`` (the SDK's ``"websocket"`` transport, which has no HTTP
    fallback): each response.create one request through the pipeline, translated where the
    upstream speaks another API, one log line each."""
    model = ROUTES[route]
    text, tool = runs[f"text:{model}:ws"], runs[f"tool:{model}:ws"]
    for result in (text, tool):
        assert "error" not in result, (route, result)
    assert text["output"].startswith("Hello from")
    assert tool["items"] == ["tool_call_item", "tool_call_output_item", "message_output_item"]
    assert tool["output"] == "The tool answered: sunny in echo hello from a shell tool"
    assert len(generations(text["sent"])) == 1 and len(generations(tool["sent"])) == 2
    lines = [json.loads(line) for line in agents_gateway.logs().splitlines() if '"transport":"websocket"' in line]
    assert len([r for r in lines if r["model"] in (model, model + "-tool") and r["status"] == 200]) == 3


def _pairs(route: str, body: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(the ids of the calls the second turn replays, the ids its results answer), in order,
    read in the upstream API's own shape; Gemini pairs by name and position."""
    if route == "responses":
        items = body["input"]
        return ([i["call_id"] for i in items if i.get("type") == "function_call"],
                [i["call_id"] for i in items if i.get("type") == "function_call_output"])
    if route == "chat":
        calls = next(m for m in body["messages"] if m.get("tool_calls"))["tool_calls"]
        answers = [m for m in body["messages"] if m["role"] == "tool"]
        at = body["messages"].index(answers[0])
        assert body["messages"][at - 1].get("tool_calls") == calls  # the results follow their calls at once
        return [c["id"] for c in calls], [m["tool_call_id"] for m in answers]
    if route == "messages":
        turn = next(n for n, m in enumerate(body["messages"]) if m["role"] == "assistant"
                    and any(b["type"] == "tool_use" for b in m["content"]))  # fmt: skip
        uses = [b["id"] for b in body["messages"][turn]["content"] if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in body["messages"][turn + 1]["content"] if b["type"] == "tool_result"]
        return uses, results  # both results in the one user turn after the calls, as Anthropic requires
    turn = next(n for n, c in enumerate(body["contents"]) if any("functionCall" in p for p in c["parts"]))
    calls = [p["functionCall"]["name"] for p in body["contents"][turn]["parts"] if "functionCall" in p]
    answers = [p["functionResponse"]["name"] for p in body["contents"][turn + 1]["parts"] if "functionResponse" in p]
    return calls, answers


@pytest.mark.parametrize("route", ROUTES)
def test_two_calls_at_once_come_back_paired_in_the_second_turn(runs: dict[str, Any], route: str) -> None:
    result = runs[f"parallel:{ROUTES[route]}:run"]
    assert "error" not in result, result
    assert result["items"] == ["tool_call_item", "tool_call_item", "tool_call_output_item", "tool_call_output_item",
                               "message_output_item"]  # fmt: skip
    first, second = generations(result["sent"])
    calls, answers = _pairs(route, second)
    assert len(calls) == 2 and calls == answers, (calls, answers)
    if route == "responses":
        assert first["parallel_tool_calls"] is True


def _max_tokens(route: str, body: dict[str, Any]) -> Any:
    return {"responses": lambda: body["max_output_tokens"], "messages": lambda: body["max_tokens"],
            "chat": lambda: body.get("max_completion_tokens", body.get("max_tokens")),
            "gemini": lambda: body["generationConfig"]["maxOutputTokens"]}[route]()  # fmt: skip


def _tool_choice(route: str, body: dict[str, Any]) -> Any:
    if route == "gemini":
        return body.get("toolConfig", {}).get("functionCallingConfig", {}).get("mode")
    return body.get("tool_choice")


@pytest.mark.parametrize("route", ROUTES)
def test_model_settings_reach_the_upstream_in_its_own_fields(runs: dict[str, Any], route: str) -> None:
    """``ModelSettings(reasoning=Reasoning(effort="low"), max_tokens=2048, tool_choice="required")``:
    the limit on every turn, the forced call on the first only (the SDK resets it after a tool
    ran), and reasoning as the upstream asks for it, leaving the answer its share of the output
    limit (``thinking_room``)."""
    for mode in MODES:
        result = runs[f"settings:{ROUTES[route]}:{mode}"]
        assert "error" not in result, result
        first, second = generations(result["sent"])
        assert _max_tokens(route, first) == _max_tokens(route, second) == 2048
        forced = {"responses": "required", "chat": "required", "messages": {"type": "any"}, "gemini": "ANY"}[route]
        assert _tool_choice(route, first) == forced and _tool_choice(route, second) != forced
        if route in ("responses", "chat"):
            assert (first.get("reasoning") or {}).get("effort", first.get("reasoning_effort")) == "low"
        thinking = first.get("thinking") or {}
        if route == "messages" and thinking.get("type") == "enabled":  # with a forced call Anthropic takes none
            assert thinking["budget_tokens"] <= thinking_room.room(first["max_tokens"])
        budget = first.get("generationConfig", {}).get("thinkingConfig", {}).get("thinkingBudget")
        if route == "gemini" and budget is not None:
            assert budget <= thinking_room.room(first["generationConfig"]["maxOutputTokens"])


@pytest.mark.parametrize("route", ROUTES)
def test_previous_response_id_chains_natively_and_is_refused_clearly_elsewhere(runs: dict[str, Any], route: str) -> None:
    for mode in MODES:
        result = runs[f"previous:{ROUTES[route]}:{mode}"]
        if route == "responses":
            assert "error" not in result, result
            first, second = generations(result["sent"])
            assert "previous_response_id" not in first and second["previous_response_id"].startswith("resp_")
            continue
        # A translated upstream stores nothing: the second turn is refused before it is sent.
        error = result["error"]
        assert error["type"] == "BadRequestError" and error["status"] == 400
        named = {"messages": "Anthropic Messages", "chat": "chat completions", "gemini": "the Gemini API"}[route]
        assert "'previous_response_id'" in error["message"] and f"speaks {named}" in error["message"]
        assert len(generations(result["sent"])) == 1


@pytest.mark.parametrize("route", ROUTES)
def test_an_upstream_429_is_retried_by_the_gateway_unseen_by_the_sdk(runs: dict[str, Any], route: str) -> None:
    for mode in MODES:
        result = runs[f"429:{ROUTES[route]}:{mode}"]
        assert "error" not in result and result["output"].startswith("Hello from"), result
        assert len(generations(result["sent"])) == 2  # the 429 and the gateway's retry; the SDK sent one


@pytest.mark.parametrize("route", ROUTES)
def test_a_stream_cut_ends_in_one_typed_error_the_sdk_raises(runs: dict[str, Any], route: str) -> None:
    result = runs[f"cut:{ROUTES[route]}:stream"]
    error = result["error"]
    assert error["type"] == "ModelBehaviorError"
    assert "`response.failed`" in error["message"] and "the upstream stream ended" in error["message"]
    assert len(generations(result["sent"])) == 1  # words had reached the SDK: nothing to retry


@pytest.mark.parametrize("route", ROUTES)
def test_an_openai_conversations_session_keeps_the_turns(runs: dict[str, Any], route: str,
                                                          scenario_fake: ScenarioUpstream) -> None:  # fmt: skip
    """OpenAIConversationsSession: the conversation made, each turn's items added and listed
    back before the next (the session's calls name no model: the gateway sends them to the
    upstream that speaks Responses, whatever upstream the turns go to)."""
    for mode in MODES:
        result = runs[f"session:{ROUTES[route]}:{mode}"]
        assert "error" not in result, result
        assert result["session_items"] == ["message", "function_call", "function_call_output", "message",
                                           "message", "message"]  # fmt: skip
        first, *_, last = generations(result["sent"])
        # The second turn starts from the first's items, listed back: the call and its result.
        assert "And Rome?" not in json.dumps(first)
        assert all(s in json.dumps(last) for s in ("Weather in Paris?", "sunny in echo hello", "And Rome?"))
    paths = {r.path.split("/conv_")[0] + ("/{id}/items" if r.path.endswith("/items") else "")
             for r in scenario_fake.requests if "/conversations" in r.path}
    assert paths == {"/v1/conversations", "/v1/conversations/{id}/items"}
