"""What OpenAI's chat completions refuses of a request another API's agent made, met through
the whole app on a chat upstream (the fake, which refuses it in OpenAI's words): Claude Code's
and Gemini CLI's effort beside their tools on gpt-5.4 and later, tool call ids longer than 40
characters (the gateway's own Gemini ids, Gemini CLI's own), stop sequences a reasoning model
refuses or more than it takes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "requests"
BASH = {"name": "Bash", "description": "run a command",
        "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}  # fmt: skip
# The gateway's own id for a Gemini call, carrying its thought signature (chat_gemini/signature.py):
# what a client holds after a turn on a Gemini upstream, and sends to the fallback after it.
GEMINI_CARRIED = "call_5a1e__gsig_" + "Q2lSQ0FRUUJRRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVF" * 2


def corpus(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())["body"]
    return body


def _anthropic(gw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="dummy", base_url=gw.base, max_retries=0)


async def test_claude_code_on_gpt_5_4_sends_its_effort_as_none_beside_tools_once_refused(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'claude-*': gpt-5.4}")
    first = {**corpus("claude-code-2.1.197-first"), "stream": False}
    status, headers, body = await gw.messages(first)
    assert status == 200, body
    # The translation's max_tokens, which a reasoning model refuses, costs a call first.
    assert headers["x-llm-attempts"] == "3"
    assert headers["x-llm-params-dropped"] == "max_tokens->max_completion_tokens,reasoning_effort=none"
    assert [r.json().get("reasoning_effort") for r in gw.fake.chat_requests()] == ["high", "high", "none"]
    status, headers, _ = await gw.messages(first)  # learned: one call
    assert status == 200 and headers["x-llm-attempts"] == "1"
    # A turn without tools keeps Claude Code's effort: the model takes it there.
    status, headers, _ = await gw.messages({**first, "tools": []})
    assert status == 200 and headers["x-llm-params-dropped"] == "max_tokens->max_completion_tokens"
    assert gw.fake.chat_requests()[-1].json()["reasoning_effort"] == "high"


async def test_gemini_cli_on_gpt_5_6_is_sent_with_effort_none_though_it_asked_none(make_gateway) -> None:
    """gpt-5.6 refuses its own default effort beside tools too: Gemini CLI's first request, whose
    thinking budget is not carried (it is dropped here), asks for no effort and is still refused."""
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'gemini-*': gpt-5.6-terra}")
    payload = corpus("gemini-cli-0.61-first")
    del payload["generationConfig"]["thinkingConfig"]
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-pro:generateContent", json=payload,
                               headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        status, headers, body = r.status, r.headers, await r.read()
    assert status == 200, body
    # Gemini CLI's topP, which a reasoning model refuses, is left out in the same call.
    assert headers["x-llm-params-dropped"] == "top_p,reasoning_effort=none"
    first, second, third = (r.json() for r in gw.fake.chat_requests())
    assert "reasoning_effort" not in first and "top_p" in first and "top_p" not in second
    assert "reasoning_effort" not in second and third["reasoning_effort"] == "none"


async def test_a_claude_code_conversation_begun_on_gemini_goes_on_on_an_openai_chat_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'gemini-*': gpt-4o}")
    async with _anthropic(gw) as client:
        message = await client.messages.create(model="gemini-3-pro", max_tokens=256, tools=[BASH], messages=[
            {"role": "user", "content": "run ls"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": GEMINI_CARRIED, "name": "Bash",
                                               "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": GEMINI_CARRIED, "content": "a.txt"}]},
        ])  # fmt: skip
    assert message.stop_reason == "end_turn"
    [sent] = gw.fake.chat_requests()
    call, result = sent.json()["messages"][1:3]
    assert len(call["tool_calls"][0]["id"]) <= 40 and call["tool_calls"][0]["id"] == result["tool_call_id"]


async def test_a_chat_clients_conversation_begun_on_gemini_goes_on_on_an_openai_chat_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    calls = [{"id": GEMINI_CARRIED, "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]
    async with openai.AsyncOpenAI(api_key="dummy", base_url=gw.base + "/v1", max_retries=0) as client:
        answer = await client.chat.completions.create(model="gpt-4o", messages=[
            {"role": "user", "content": "run ls"}, {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": GEMINI_CARRIED, "content": "a.txt"}])  # type: ignore[list-item]  # fmt: skip
    assert answer.choices[0].finish_reason == "stop"
    [sent] = gw.fake.chat_requests()
    call, result = sent.json()["messages"][1:3]
    assert len(call["tool_calls"][0]["id"]) <= 40 and call["tool_calls"][0]["id"] == result["tool_call_id"]
    # A chat client's own id is its own to send: only the gateway's carriage is rewritten.
    own = "call_" + "x" * 40
    status, _, body = await gw.chat({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "run ls"},
        {"role": "assistant", "content": None, "tool_calls": [{**calls[0], "id": own}]},
        {"role": "tool", "tool_call_id": own, "content": "a.txt"}]})  # fmt: skip
    assert status == 400 and b"string too long" in body


async def test_stop_sequences_a_reasoning_model_refuses_are_left_out_and_more_than_four_kept_to_four(
    make_gateway,
) -> None:  # fmt: skip
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'claude-haiku-*': o3, 'claude-*': gpt-4o}")
    asked = {"max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], "stop_sequences": list("abcde")}
    status, headers, body = await gw.messages({**asked, "model": "claude-haiku-4-5"})
    assert status == 200, body
    # o3 refuses the translation's max_tokens first: its stop goes in the same call.
    assert headers["x-llm-params-dropped"] == "max_tokens->max_completion_tokens,stop"
    refused, sent = (r.json() for r in gw.fake.chat_requests())
    assert refused["stop"] == list("abcd") and "stop" not in sent
    status, headers, _ = await gw.messages({**asked, "model": "claude-sonnet-4-5"})
    assert status == 200 and "x-llm-params-dropped" not in headers
    assert gw.fake.chat_requests()[-1].json()["stop"] == list("abcd")


async def test_an_upstream_listing_responses_first_keeps_claude_codes_effort_beside_its_tools(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [responses, chat], model_map: {'claude-*': gpt-5.4}")
    status, headers, body = await gw.messages({**corpus("claude-code-2.1.197-first"), "stream": False})
    assert status == 200, body
    assert headers["x-llm-attempts"] == "1" and "x-llm-params-dropped" not in headers
    [sent] = gw.fake.responses_requests()
    assert sent.json()["reasoning"]["effort"] == "high" and sent.json()["tools"]
    assert not gw.fake.chat_requests()
