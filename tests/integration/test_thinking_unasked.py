"""Codex and a chat agent that ask no reasoning, on a Claude that thinks unasked (Opus and Sonnet
5 on, Fable and Mythos 5 on), through the whole app: the model thinks before each call, and the
next step of the loop must give that turn its thinking back first, or Anthropic refuses it
("Expected `thinking` or `redacted_thinking`, but found `tool_use`", the fake's rules). Each
step's answer is the one the real model gives such a request: thinking, then the call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.fake.messages import sign
from tests.fakeupstream import Reply

REQUESTS = Path(__file__).parents[1] / "corpus" / "requests"
MODELS = ["claude-opus-5", "claude-sonnet-5-5", "claude-fable-5-1"]


def thinking_then_call(payload: dict[str, Any]) -> Reply:
    """Thinking (the request leaves ``thinking`` out or says adaptive: these models think either
    way), then a call of the first tool; text once the loop has had one call."""
    assert payload.get("thinking") in (None, {"type": "adaptive"}) or "block_binding" in payload["thinking"]
    called = any(b.get("type") == "tool_use" for m in payload["messages"] if m["role"] == "assistant"
                 for b in m["content"])  # fmt: skip
    said = "I should look first."
    content: list[dict[str, Any]] = [{"type": "thinking", "thinking": said, "signature": sign(said)}]
    if called:
        content.append({"type": "text", "text": "Done."})
    else:
        name = payload["tools"][0]["name"]
        content.append({"type": "tool_use", "id": "toolu_01Loop", "name": name, "input": {}})
    return Reply(200, {"id": "msg_1", "type": "message", "role": "assistant", "model": payload["model"],
                       "content": content, "stop_reason": "end_turn" if called else "tool_use",
                       "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 5}})  # fmt: skip


def body_of(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((REQUESTS / f"{name}.json").read_text())["body"]
    body.pop("stream_options", None)
    return {**body, "stream": False}


@pytest.mark.parametrize("model", MODELS)
async def test_codex_without_an_effort_goes_on_after_a_call(make_gateway, model: str) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [messages], model_map: {{'*': {model}}}")
    gw.fake.script(thinking_then_call, thinking_then_call)
    first = body_of("codex-0.169-first")
    assert "effort" not in first["reasoning"]
    status, _, raw = await gw.responses(first)
    assert status == 200, raw
    output = json.loads(raw)["output"]
    assert [o["type"] for o in output] == ["reasoning", "function_call"]
    step = {**first, "input": [*first["input"], *output,
                               {"type": "function_call_output", "call_id": output[1]["call_id"], "output": "ok"}]}  # fmt: skip
    status, _, raw = await gw.responses(step)
    assert status == 200, raw  # was a 400: the call's turn went without its thinking
    [sent] = [r.json() for r in gw.fake.messages_requests()][1:]
    assert sent["messages"][1]["content"][0]["type"] == "thinking"


@pytest.mark.parametrize("model", MODELS)
async def test_a_chat_agent_without_reasoning_effort_goes_on_after_a_call(make_gateway, model: str) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [messages], model_map: {{'*': {model}}}")
    gw.fake.script(thinking_then_call, thinking_then_call)
    first = body_of("chat-ai-sdk-tool-loop-step1")
    assert "reasoning_effort" not in first
    status, _, raw = await gw.chat(first)
    assert status == 200, raw
    message = json.loads(raw)["choices"][0]["message"]
    [called] = message["tool_calls"]
    step = {**first, "messages": [*first["messages"], message,
                                  {"role": "tool", "tool_call_id": called["id"], "content": "ok"}]}  # fmt: skip
    status, _, raw = await gw.chat(step)
    assert status == 200, raw  # was a 400: the call's turn went without its thinking
    [sent] = [r.json() for r in gw.fake.messages_requests()][1:]
    assert [b["type"] for b in sent["messages"][1]["content"]][:1] == ["thinking"]
