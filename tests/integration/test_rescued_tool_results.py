"""An overflow rescue of tool results through the whole app, on each kind of upstream: parallel
results in one turn (Gemini CLI's functionResponse parts, Claude Code's tool_result blocks) keep a
small one whole beside a huge one, and google-genai's ``{"result": ...}`` is cut as Gemini CLI's
``{"output": ...}`` is. Each from a real client's captured request (tests/corpus/requests/)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.integration.test_gemini_on_chat import corpus, post

LOG = "2026-11-30 log line with details\n" * 6000  # ~200 KB
CONFIG = "".join(f"setting_{i} = value_{i}\n" for i in range(200))  # ~4.5 KB
UPSTREAMS = {
    "gemini": ", apis: [gemini]",
    "chat": ", apis: [chat], model_map: {'gemini-*': qwen, 'claude-*': qwen}",
    "messages": ", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}",
}


def _sent(gw: Any) -> list[str]:
    return [r.body.decode() for r in gw.fake.requests]


def _gemini_cli_parallel_reads() -> dict[str, Any]:
    """Gemini CLI's captured tool round with the log and the config read beside its listing, in
    one turn, as the CLI sends parallel calls."""
    body = corpus("gemini-cli-0.61-tool-result")
    [call] = body["contents"][1]["parts"]
    [answer] = body["contents"][2]["parts"]
    calls, answers = [call], [answer]
    for i, output in enumerate((LOG, CONFIG)):
        fid = f"read_file_{i}"
        calls.append({**call, "functionCall": {"id": fid, "args": {"file_path": f"f{i}"}, "name": "read_file"}})
        answers.append({"functionResponse": {"name": "read_file", "response": {"output": output}, "id": fid}})
    body["contents"][1] = {**body["contents"][1], "parts": calls}
    body["contents"][2] = {**body["contents"][2], "parts": answers}
    # The CLI names no output limit; Messages needs one, and the one the translation picks is not
    # the rescue's to lower (nor in the fake's count of the prompt it refuses): named here, the
    # rescue keeps it in its budget.
    body["generationConfig"] = {**body["generationConfig"], "maxOutputTokens": 2048}
    return body


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
async def test_gemini_parallel_outputs_keep_the_small_one_whole(make_gateway, upstream: str) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAMS[upstream])
    gw.fake.context_limit = 40000
    status, headers, body = await post(gw, "/v1beta/models/gemini-2.5-flash:generateContent",
                                       _gemini_cli_parallel_reads())  # fmt: skip
    assert status == 200 and headers["x-llm-compressed"] == "true", body
    first, retried = _sent(gw)
    config = json.dumps(CONFIG)[1:-1]
    assert config in first and config in retried  # whole; in proportion it lost 60 % of its lines
    assert "truncated by llm-gateway" in retried and len(retried) < len(first)


@pytest.mark.parametrize("upstream", list(UPSTREAMS))
@pytest.mark.parametrize("shape", ["string", "object"])
async def test_a_genai_result_is_rescued(make_gateway, upstream: str, shape: str) -> None:
    """google-genai's automatic function calling answers ``{"result": ...}``: the function's
    return value, a string or an object (google/genai/_extra_utils.py). Never cut, a 76 KB one
    left the conversation unrescuable: the overflow again after one call."""
    gw = await make_gateway(upstream_yaml=UPSTREAMS[upstream])
    gw.fake.context_limit = 8000
    body = corpus("genai-3.6-function-response")
    rows = {"rows": [{"id": n, "name": "x" * 30} for n in range(1500)]}
    value = "line of file content with some words\n" * 2000 if shape == "string" else rows
    contents = copy.deepcopy(body["contents"])
    contents[2]["parts"][0]["functionResponse"]["response"] = {"result": value}
    status, headers, answer = await post(gw, "/v1/models/gemini-2.5-flash:generateContent",
                                         {**body, "contents": contents})  # fmt: skip
    assert status == 200 and headers["x-llm-compressed"] == "true", answer
    first, retried = _sent(gw)
    assert "truncated by llm-gateway" in retried and len(retried) < len(first)
    assert "get_weather" in retried  # the call and its answer are both still there


@pytest.mark.parametrize("upstream", ["messages", "chat"])
async def test_claude_codes_parallel_results_keep_the_small_one_whole(make_gateway, upstream: str) -> None:
    """Claude Code's captured tool round, its Bash call made three parallel calls answered in one
    user message: its own ``hi``, the log and the config."""
    gw = await make_gateway(upstream_yaml=UPSTREAMS[upstream])
    gw.fake.context_limit = 60000
    payload = corpus("claude-code-2.1.332-bash-result")
    *history, call_turn, result_turn = payload["messages"]
    [call] = call_turn["content"]
    [result] = result_turn["content"]
    calls, results = [call], [result]
    for i, output in enumerate((LOG, CONFIG)):
        calls.append({**call, "id": f"toolu_read{i}", "name": "Read", "input": {"file_path": f"/f{i}"}})
        results.append({"tool_use_id": f"toolu_read{i}", "type": "tool_result", "content": output})
    messages = [*history, {**call_turn, "content": calls}, {**result_turn, "content": results}]
    status, headers, body = await gw.messages({**payload, "messages": messages, "stream": False})
    assert status == 200 and headers["x-llm-compressed"] == "true", body
    first, retried = _sent(gw)
    config = json.dumps(CONFIG)[1:-1]
    assert config in first and config in retried
    assert "truncated by llm-gateway" in retried and len(retried) < len(first)
