"""The scenario fake (gateway/fake/scenarios.py, tool_call.py) over HTTP: the `tool` scenario in
each API's own shape, streamed and not; failing scenarios alternating per model and API; and
`--help` in plain text."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.fake import ScenarioUpstream
from gateway.fake.scenarios import OPENROUTER_ERROR_200
from gateway.fake.tool_call import COMMAND

ROOT = Path(__file__).resolve().parents[2]
PATHS = {"chat": "/chat/completions", "messages": "/messages", "responses": "/responses"}
HEADERS = {"anthropic-version": "2023-06-01"}
FN = {"type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q", "n"]}


@pytest.fixture
async def fake() -> AsyncIterator[tuple[ScenarioUpstream, list[str], aiohttp.ClientSession]]:
    lines: list[str] = []
    f = ScenarioUpstream(log=lines.append)
    await f.start()
    try:
        async with aiohttp.ClientSession() as http:
            yield f, lines, http
    finally:
        await f.close()


async def post(http: aiohttp.ClientSession, fake: ScenarioUpstream, api: str, body: dict[str, Any]) -> Any:
    """The JSON answer, or a streamed one's events (data lines) as a list."""
    async with http.post(fake.url + PATHS[api], json=body, headers=HEADERS) as r:
        if not body.get("stream"):
            return {"status": r.status, **(await r.json())}
        text = await r.text()
    return [json.loads(d) for d in re.findall(r"^data: (.*)$", text, re.M) if d != "[DONE]"]


def tools(api: str, names: list[str], schema: dict[str, Any] = FN) -> list[dict[str, Any]]:
    if api == "chat":
        return [{"type": "function", "function": {"name": n, "parameters": schema}} for n in names]
    if api == "messages":
        return [{"type": "web_search_20250305", "name": "web_search"}, *({"name": n, "input_schema": schema} for n in names)]
    return [{"type": "web_search"}, *({"type": "function", "name": n, "parameters": schema} for n in names)]


def request(api: str, model: str, names: list[str], stream: bool, result: str | None = None,
            schema: dict[str, Any] = FN) -> dict[str, Any]:  # fmt: skip
    body: dict[str, Any] = {"model": model, "stream": stream, "tools": tools(api, names, schema)}
    if api == "responses":
        body["input"] = [{"type": "message", "role": "user", "content": "list files"}]
        if result is not None:
            body["input"] += [{"type": "function_call", "call_id": "c1", "name": names[0], "arguments": "{}"},
                              {"type": "function_call_output", "call_id": "c1", "output": result}]  # fmt: skip
        return body
    body["messages"] = [{"role": "user", "content": "list files"}]
    if api == "messages":
        body["max_tokens"] = 64
        if result is not None:
            body["messages"] += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": names[0], "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                              "content": [{"type": "text", "text": result}]}]},
            ]  # fmt: skip
    elif result is not None:
        body["messages"] += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": names[0], "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": result},
        ]  # fmt: skip
    return body


def the_call(api: str, answer: Any) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of the one call an answer makes, checked in its API's shape."""
    if api == "chat" and isinstance(answer, dict):
        choice = answer["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        [call] = choice["message"]["tool_calls"]
        return call["function"]["name"], json.loads(call["function"]["arguments"])
    if api == "chat":
        assert answer[-1]["choices"][0]["finish_reason"] == "tool_calls"
        head = answer[0]["choices"][0]["delta"]["tool_calls"][0]
        args = "".join(c["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                       for c in answer if c["choices"] and "tool_calls" in c["choices"][0]["delta"])  # fmt: skip
        assert head["id"].startswith("call_")
        return head["function"]["name"], json.loads(args)
    if api == "messages" and isinstance(answer, dict):
        assert answer["stop_reason"] == "tool_use"
        [block] = answer["content"]
        assert block["type"] == "tool_use"
        return block["name"], block["input"]
    if api == "messages":
        assert [e["type"] for e in answer] == ["message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"]  # fmt: skip
        assert answer[4]["delta"]["stop_reason"] == "tool_use"
        return answer[1]["content_block"]["name"], json.loads(answer[2]["delta"]["partial_json"])
    if isinstance(answer, dict):
        [item] = answer["output"]
    else:
        assert [e["sequence_number"] for e in answer] == list(range(len(answer)))
        assert answer[-1]["type"] == "response.completed"
        [item] = answer[-1]["response"]["output"]
        assert next(e for e in answer if e["type"] == "response.function_call_arguments.done")["arguments"] \
            == item["arguments"]  # fmt: skip
    assert item["type"] == "function_call" and item["call_id"]
    return item["name"], json.loads(item["arguments"])


def text_of(api: str, answer: Any) -> str:
    if isinstance(answer, dict):
        if api == "chat":
            return str(answer["choices"][0]["message"]["content"])
        if api == "messages":
            return str(answer["content"][0]["text"])
        return str(answer["output"][0]["content"][0]["text"])
    if api == "chat":
        return "".join(c["choices"][0]["delta"].get("content") or "" for c in answer if c["choices"])
    kind = "text_delta" if api == "messages" else "response.output_text.delta"
    if api == "messages":
        return "".join(e["delta"]["text"] for e in answer if e.get("delta", {}).get("type") == kind)
    return "".join(e["delta"] for e in answer if e["type"] == kind)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
@pytest.mark.parametrize(("api", "names", "called", "args"), [
    ("chat", ["Read", "Bash"], "Bash", {"command": COMMAND, "description": "Print a greeting"}),  # Claude Code, translated
    ("messages", ["Read", "Bash"], "Bash", {"command": COMMAND, "description": "Print a greeting"}),  # Claude Code
    ("responses", ["update_plan", "exec_command"], "exec_command", {"cmd": COMMAND}),  # Codex
    # No shell: the first function, its required text the command, the rest the least its schema allows.
    ("chat", ["lookup", "other"], "lookup", {"q": COMMAND, "n": 1}),
])  # fmt: skip
async def test_the_tool_scenario_calls_a_declared_shell_then_answers_with_its_result(
    fake: Any, api: str, names: list[str], called: str, args: dict[str, Any], stream: bool
) -> None:
    f, lines, http = fake
    model = "claude-sonnet-4-5-tool" if api == "messages" else "gpt-4o-mini-tool"
    first = await post(http, f, api, request(api, model, names, stream))
    assert the_call(api, first) == (called, args)
    second = await post(http, f, api, request(api, model, names, stream, result="README.md\nsrc"))
    assert text_of(api, second) == "The tool answered: README.md\nsrc"
    assert lines[0].endswith(f"scenario=tool -> tool call {called}")
    assert lines[1].endswith("-> answer (tool result came back: 'README.md\\nsrc')")


async def test_a_request_declaring_no_tool_gets_a_normal_answer(fake: Any) -> None:
    f, lines, http = fake
    answer = await post(http, f, "messages", {**request("messages", "claude-tool", [], False), "tools": []})
    assert answer["content"][0]["text"] == "Hello from the fake upstream."
    assert lines == ["messages model=claude-tool scenario=tool -> answer (no tool declared)"]


async def test_failing_scenarios_alternate_per_model_and_api(fake: Any) -> None:
    f, lines, http = fake
    hi = [{"role": "user", "content": "hi"}]
    asked = [("chat", "gpt-4o-mini-503"), ("chat", "gpt-4.1-503"), ("messages", "gpt-4o-mini-503"),
             ("chat", "gpt-4o-mini-503"), ("chat", "gpt-4.1-503"), ("messages", "gpt-4o-mini-503")]  # fmt: skip
    statuses = [(await post(http, f, api, {"model": m, "max_tokens": 8, "messages": hi}))["status"] for api, m in asked]
    # Each model on each API fails first, then answers: two people trying 503 both see it work.
    assert statuses == [503, 503, 503, 200, 200, 200]


def _asked(api: str, model: str, stream: bool) -> dict[str, Any]:
    hi = [{"role": "user", "content": "hi"}]
    if api == "responses":
        return {"model": model, "input": "hi", "stream": stream}
    return {"model": model, "max_tokens": 8, "messages": hi, "stream": stream}


async def _raw(http: aiohttp.ClientSession, fake: ScenarioUpstream, api: str, model: str,
               stream: bool) -> tuple[int, str, bytes]:  # fmt: skip
    if api == "gemini":
        method = "streamGenerateContent?alt=sse" if stream else "generateContent"
        url = f"{fake.url.removesuffix('/v1')}/v1beta/models/{model}:{method}"
        body: dict[str, Any] = {"contents": [{"parts": [{"text": "hi"}]}]}
    else:
        url, body = fake.url + PATHS[api], _asked(api, model, stream)
    async with http.post(url, json=body, headers={**HEADERS, "x-goog-api-key": "k"}) as r:
        return r.status, r.headers["Content-Type"], await r.read()


@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
async def test_error200_is_openrouters_error_under_a_200_then_an_answer(fake: Any, api: str) -> None:
    f, lines, http = fake
    for stream in (False, True):
        model = f"{'gemini-2.5-flash' if api == 'gemini' else 'gpt-4o-mini'}-{'s' if stream else 'b'}-error200"
        status, ctype, body = await _raw(http, f, api, model, stream)
        assert (status, ctype.split(";")[0], json.loads(body)) == (200, "application/json", OPENROUTER_ERROR_200)
        status, _, body = await _raw(http, f, api, model, stream)
        assert status == 200 and b"Provider returned error" not in body  # the next one answers
    assert "scenario=error200 -> 200" in lines[0]


@pytest.mark.parametrize("api", ["chat", "messages", "responses", "gemini"])
async def test_nostream_answers_json_and_alwaysstream_a_stream_whatever_was_asked(fake: Any, api: str) -> None:
    f, _, http = fake
    model = "gemini-2.5-flash" if api == "gemini" else "gpt-4o-mini"
    for stream in (False, True):
        status, ctype, body = await _raw(http, f, api, f"{model}-nostream", stream)
        assert status == 200 and ctype.startswith("application/json") and isinstance(json.loads(body), dict)
        status, ctype, body = await _raw(http, f, api, f"{model}-alwaysstream", stream)
        assert status == 200 and ctype.startswith("text/event-stream") and body.startswith((b"data: ", b"event: "))


def test_help_is_plain_text_in_80_columns() -> None:
    env = {**os.environ, "COLUMNS": "80", "FORCE_COLOR": "1", "PYTHON_COLORS": "1"}
    r = subprocess.run([sys.executable, "-m", "gateway.fake", "--help"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=30)  # fmt: skip
    assert r.returncode == 0 and r.stderr == ""
    assert "\x1b" not in r.stdout and "``" not in r.stdout and ":mod:" not in r.stdout
    assert [line for line in r.stdout.splitlines() if len(line) > 80] == []
    assert re.search(r"^    tool      a call of a shell tool", r.stdout, re.M)
    assert "alternates per model and API" in r.stdout
    assert re.search(r"^    error200  OpenRouter's error", r.stdout, re.M)
    assert re.search(r"^    nostream  ", r.stdout, re.M) and re.search(r"^    alwaysstream  ", r.stdout, re.M)


async def test_the_log_line_masks_the_credential_it_was_sent(fake: Any) -> None:
    """The fake printed the whole key a client or a gateway sent (`key=sk-...`)."""
    f, lines, http = fake
    key = "sk-fake-0123456789abcdefXYZ"
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with http.post(f.url + PATHS["chat"], json=body, headers={"Authorization": f"Bearer {key}"}) as r:
        assert r.status == 200
    assert lines and all(key not in line for line in lines), lines
    assert "key=sk-***XYZ" in lines[-1]


def corpus(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ROOT / "tests/corpus/requests" / f"{name}.json").read_text())["body"]
    return doc


# The OpenAI Agents SDK's strict schemas (tests/corpus/requests/agents-sdk-0.24-forecast-*.json): a
# tool taking a nested model and an enum, and an output type.
FORECAST = corpus("agents-sdk-0.24-forecast-first")
TOOL_SCHEMA = FORECAST["tools"][0]["parameters"]
ANSWER_SCHEMA = FORECAST["text"]["format"]["schema"]


def forecast_request(api: str, stream: bool, result: str | None = None, *, asks_json: bool = True) -> dict[str, Any]:
    """The SDK's forecast turn on ``api``: on Responses its own body, on chat and Messages the
    same tool and output schemas in their fields (as the gateway translates them)."""
    if api == "responses":
        body = corpus("agents-sdk-0.24-forecast-tool-result" if result is not None else "agents-sdk-0.24-forecast-first")
        body = {**body, "model": "gpt-5-tool", "stream": stream}
        return body if asks_json else {**body, "text": {"verbosity": "low"}}
    model = "claude-sonnet-4-5-tool" if api == "messages" else "gpt-4o-mini-tool"
    body = request(api, model, ["forecast"], stream, result, TOOL_SCHEMA)
    if asks_json and api == "chat":
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "final_output", "strict": True,
                                                                          "schema": ANSWER_SCHEMA}}  # fmt: skip
    elif asks_json:
        body["output_config"] = {"format": {"type": "json_schema", "schema": ANSWER_SCHEMA}}
    return body


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_the_tool_scenario_calls_a_tool_with_arguments_in_its_schema_then_answers_in_the_asked_one(
    fake: Any, api: str, stream: bool
) -> None:
    """The Agents SDK validates both (ModelBehaviorError): called with {} its ``forecast`` lacked
    its nested ``place`` and enum ``unit``, and a prose answer is no ``Answer``."""
    f, lines, http = fake
    first = await post(http, f, api, forecast_request(api, stream))
    assert the_call(api, first) == ("forecast", {"place": {"city": "fake", "country": "fake"}, "unit": "c"})
    second = await post(http, f, api, forecast_request(api, stream, result="18 c and sunny in Paris"))
    assert json.loads(text_of(api, second)) == {"city": "fake", "sunny": False}
    assert lines[1].endswith("-> answer (tool result came back: '18 c and sunny in Paris') in JSON")
    # Not asked for JSON: the result quoted, as before.
    third = await post(http, f, api, forecast_request(api, stream, result="sunny", asks_json=False))
    assert text_of(api, third).startswith("The tool answered: ")
