"""Claude's signed thinking through a Gemini client's tool loop (Gemini → chat → Messages).

Anthropic keeps thinking on in a tool loop only when the turn that called the tools comes back
starting with its signed thinking block; Gemini CLI sent its continuations with no thinking at
all (audit: ``thinking`` on the first request, off with ``temperature: 1.0, top_k: 64`` on the
two after). The blocks now ride sealed in the first ``functionCall`` part's ``thoughtSignature``,
which the CLI sends back as it came. Answers are Anthropic's own, recorded
(tests/corpus/answers/messages-*thinking-then-tool-use.json).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest

from gateway.apis.base import Where
from gateway.apis.gemini.wire import GeminiGenerate
from gateway.fake import messages_rules
from gateway.pipeline.reasoning_fix import gemini_passed
from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK, GEMINI_SKIP
from gateway.translate import default_translations, sealed_thinking
from gateway.translate.base import Context, Refusal, Target
from tests.unit.translate.messages_helpers import corpus_answer, run

ON_MESSAGES = default_translations().table["gemini", "messages"]
ON_CHAT = default_translations().table["gemini", "chat"]
CLAUDE = Target("claude-sonnet-4-5")
WEATHER = [{"functionDeclarations": [{"name": "weather", "parametersJsonSchema": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]}]  # fmt: skip
THINKING = {"thinkingConfig": {"includeThoughts": True, "thinkingLevel": "HIGH"}, "maxOutputTokens": 32000,
            "temperature": 1, "topK": 64}  # fmt: skip
CALL_ID = "toolu_014azqsWLU8Djh6RhmBGRC2u"  # the recorded answer's call
ASK = {"role": "user", "parts": [{"text": "What's the weather in Florence, Italy?"}]}


def request(*contents: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    """Gemini CLI's shape of request: its tools, its thinkingConfig on every call."""
    return {"contents": [ASK, *contents], "tools": WEATHER, "generationConfig": THINKING,
            "model": "gemini-3-pro-preview", "stream": stream}  # fmt: skip


def ctx(payload: dict[str, Any]) -> Context:
    return Context(requested_model="gemini-3-pro-preview", request=payload, request_id="req1")


def recorded_block() -> dict[str, Any]:
    thinking = corpus_answer("messages-thinking-then-tool-use.json")["body"]["content"][0]
    return {k: thinking[k] for k in ("type", "thinking", "signature")}


def model_turn_of_buffered() -> dict[str, Any]:
    doc = corpus_answer("messages-thinking-then-tool-use.json")["body"]
    answer = ON_MESSAGES.answer(doc, ctx(request()))
    content: dict[str, Any] = answer["candidates"][0]["content"]
    return content


def continuation(model_turn: dict[str, Any]) -> dict[str, Any]:
    """The CLI's next request: its model turn as it got it, then the function's response."""
    call = next(p["functionCall"] for p in model_turn["parts"] if "functionCall" in p)
    response = {"role": "user", "parts": [{"functionResponse": {"id": call["id"], "name": call["name"],
                                                                "response": {"output": "40 C, sunny"}}}]}  # fmt: skip
    return request(model_turn, response, stream=True)


def sent_to_claude(payload: dict[str, Any]) -> dict[str, Any]:
    out = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(out, Refusal), out
    return out


# --- the sealed string ------------------------------------------------------------------


def test_a_sealed_turn_unseals_to_the_blocks_as_anthropic_issued_them() -> None:
    blocks = [recorded_block(), {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}]
    sealed = sealed_thinking.seal([{**blocks[0], "index": 0}, blocks[1]])  # a stream's rank is not the block's
    assert sealed is not None and sealed.startswith(GATEWAY_THINKING_MARK)
    assert sealed_thinking.unseal(sealed) == blocks
    assert sealed_thinking.seal([{"type": "thinking", "thinking": "x", "signature": ""}]) is None  # unsigned


def _sealed_json(doc: Any) -> str:
    return GATEWAY_THINKING_MARK + base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()


GOOD = {"type": "thinking", "thinking": "t", "signature": "sig"}


@pytest.mark.parametrize("value", [
    None, 5, "", GEMINI_SKIP,
    "CiQBjz1rX8Qz1l3mW7s4bS9qW0R6r3dzT1aY2fJm3x0c4eC4bFQKXgGPPWtf",  # a Gemini signature: Google's own
    GATEWAY_THINKING_MARK + "%%%not base64%%%",
    GATEWAY_THINKING_MARK + base64.urlsafe_b64encode(b"not json").decode(),
    _sealed_json({"type": "thinking"}), _sealed_json([]), _sealed_json(["x"]),
    _sealed_json([{**GOOD, "cache_control": {"type": "ephemeral"}}]),  # a field Anthropic refuses
    _sealed_json([{"type": "thinking", "thinking": 5, "signature": "sig"}]),
    _sealed_json([{"type": "thinking", "thinking": "t"}]),
    _sealed_json([GOOD, {"type": "text", "text": "hi"}]),  # one entry foreign: the whole value is
    GATEWAY_THINKING_MARK + base64.urlsafe_b64encode(b"[" * 5000 + b"]" * 5000).decode(),
    _sealed_json([{**GOOD, "thinking": "x" * sealed_thinking.MAX_SEALED}]),  # larger than the gateway writes
])  # fmt: skip
def test_a_value_not_of_the_gateways_writing_unseals_to_nothing(value: Any) -> None:
    assert sealed_thinking.unseal(value) == []


def test_a_seal_names_the_model_that_made_it_and_unseals_for_that_model_only() -> None:
    """Anthropic refuses thinking made by another model (anthropic-sdk-python#1598); Gemini
    CLI's ``auto`` switches models between prompts."""
    block = recorded_block()
    sealed = sealed_thinking.seal([block], "claude-opus-4-5")
    assert sealed is not None and sealed.startswith(GATEWAY_THINKING_MARK)
    assert sealed_thinking.unseal(sealed, "claude-opus-4-5") == [block]
    assert sealed_thinking.unseal(sealed, "claude-sonnet-4-5") == []
    assert sealed_thinking.unseal(sealed) == [block]  # a reader that does not know its model
    # A seal written without a model (the Responses form, a Gemini one from before) goes to any.
    assert sealed_thinking.unseal(sealed_thinking.seal([block]), "claude-sonnet-4-5") == [block]


@pytest.mark.parametrize("doc", [
    {"model": "claude-opus-4-5", "blocks": [GOOD], "extra": 1},
    {"model": 5, "blocks": [GOOD]},
    {"blocks": [GOOD]},
    {"model": "claude-opus-4-5", "blocks": []},
    {"model": "claude-opus-4-5", "blocks": [GOOD, {"type": "text", "text": "hi"}]},
])  # fmt: skip
def test_a_named_seal_not_as_the_gateway_writes_it_unseals_to_nothing(doc: Any) -> None:
    assert sealed_thinking.unseal(_sealed_json(doc), "claude-opus-4-5") == []


def test_an_answer_seals_the_model_the_upstream_was_asked_for() -> None:
    doc = corpus_answer("messages-thinking-then-tool-use.json")["body"]
    context = ctx(request())
    context.upstream_model = "claude-sonnet-4-5"
    content = ON_MESSAGES.answer(doc, context)["candidates"][0]["content"]
    call = next(p for p in content["parts"] if "functionCall" in p)
    assert sealed_thinking.unseal(call["thoughtSignature"], "claude-sonnet-4-5") == [recorded_block()]
    assert sealed_thinking.unseal(call["thoughtSignature"], "claude-opus-4-5") == []
    turn = {**content, "parts": [p for p in content["parts"] if not p.get("thought")]}
    on_opus = ON_MESSAGES.request(continuation(turn), Target("claude-opus-4-5"))
    assert not isinstance(on_opus, Refusal), on_opus
    [assistant] = [m for m in on_opus["messages"] if m["role"] == "assistant"]
    assert [b["type"] for b in assistant["content"]] == ["tool_use"]
    assert sent_to_claude(continuation(turn))["messages"][1]["content"][0]["type"] == "thinking"


def test_a_turn_too_large_to_seal_is_not_carried() -> None:
    assert sealed_thinking.seal([{**GOOD, "thinking": "x" * sealed_thinking.MAX_SEALED}]) is None


# --- to the client -----------------------------------------------------------------------


def test_a_buffered_answer_seals_the_thinking_into_the_first_calls_signature() -> None:
    parts = model_turn_of_buffered()["parts"]
    [call] = [p for p in parts if "functionCall" in p]
    assert sealed_thinking.unseal(call["thoughtSignature"]) == [recorded_block()]
    assert next(p for p in parts if p.get("thought"))["text"] == recorded_block()["thinking"]  # includeThoughts


def test_a_streamed_answer_seals_it_into_the_last_events_call() -> None:
    raw = corpus_answer("messages-stream-thinking-then-tool-use.json")["body"].encode().rstrip(b"\n") + b"\n\n"
    payload = request(stream=True)
    out = run(ON_MESSAGES.stream(ctx(payload)), raw, chunk=97)
    docs = [json.loads(e[len(b"data: ") :]) for e in out.split(b"\r\n\r\n") if e.startswith(b"data: ")]
    parts = docs[-1]["candidates"][0]["content"]["parts"]
    [call] = parts
    [block] = sealed_thinking.unseal(call["thoughtSignature"])
    thought = "".join(p["text"] for d in docs for p in d["candidates"][0]["content"]["parts"] if p.get("thought"))
    assert block["type"] == "thinking" and block["signature"] and block["thinking"] == thought
    assert all("thoughtSignature" not in p for d in docs[:-1] for p in d["candidates"][0]["content"]["parts"])


def test_a_chat_upstreams_answer_without_thinking_blocks_has_no_signature() -> None:
    chat = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "reasoning_content": "hm",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]}}]}  # fmt: skip
    parts = ON_CHAT.answer(chat, ctx(request()))["candidates"][0]["content"]["parts"]
    assert all("thoughtSignature" not in p for p in parts)


# --- back to Claude ------------------------------------------------------------------------


def test_the_tool_continuation_starts_its_turn_with_the_signed_thinking_and_keeps_thinking_on() -> None:
    """The audit's request 3: thinking off, temperature 1.0 and top_k 64, the tool_use alone."""
    sent = sent_to_claude(continuation(model_turn_of_buffered()))
    assert sent["thinking"]["type"] in ("enabled", "adaptive")
    assert "top_k" not in sent and sent.get("temperature", 1) == 1
    [turn] = [m for m in sent["messages"] if m["role"] == "assistant"]
    assert turn["content"][0] == recorded_block() and turn["content"][-1]["type"] == "tool_use"
    assert messages_rules.refusal("/v1/messages", sent, {}, thought={CALL_ID}) is None


def test_without_the_signature_the_continuation_goes_without_thinking_as_before() -> None:
    """Before the change (and for a client that drops signatures): the fake refuses thinking on
    with the turn's tool_use first, as Anthropic does, so the translation turns it off."""
    turn = copy.deepcopy(model_turn_of_buffered())
    for p in turn["parts"]:
        p.pop("thoughtSignature", None)
    sent = sent_to_claude(continuation(turn))
    assert "thinking" not in sent or sent["thinking"]["type"] == "disabled"
    with_thinking = {**sent, "thinking": {"type": "enabled", "budget_tokens": 16384}}
    with_thinking.pop("top_k", None)
    with_thinking.pop("temperature", None)
    refused = messages_rules.refusal("/v1/messages", with_thinking, {}, thought={CALL_ID})
    assert refused is not None and "Expected `thinking` or `redacted_thinking`" in json.dumps(refused.body)


@pytest.mark.parametrize("signature", [
    GEMINI_SKIP,  # what Gemini CLI puts on a call that had none
    "CiQBjz1rX8Qz1l3mW7s4bS9qW0R6r3dzT1aY2fJm3x0c4eC4bFQKXgGPPWtf",
    GATEWAY_THINKING_MARK + "bm90IGpzb24",  # truncated, edited
    _sealed_json([{"type": "thinking", "thinking": 5, "signature": "sig"}]),
])  # fmt: skip
def test_a_foreign_or_tampered_signature_is_no_thinking_never_a_refusal(signature: str) -> None:
    turn = copy.deepcopy(model_turn_of_buffered())
    next(p for p in turn["parts"] if "functionCall" in p)["thoughtSignature"] = signature
    sent = sent_to_claude(continuation(turn))
    [assistant] = [m for m in sent["messages"] if m["role"] == "assistant"]
    assert [b["type"] for b in assistant["content"]] == ["tool_use"]
    assert "thinking" not in sent or sent["thinking"]["type"] == "disabled"
    assert messages_rules.refusal("/v1/messages", sent, {}, thought={CALL_ID}) is None


def test_on_a_chat_upstream_the_sealed_thinking_is_dropped_as_any_signature() -> None:
    out = ON_CHAT.request(continuation(model_turn_of_buffered()), Target("qwen"))
    assert not isinstance(out, Refusal), out
    assert "thinking_blocks" not in json.dumps(out) and GATEWAY_THINKING_MARK not in json.dumps(out)


# --- a Gemini upstream --------------------------------------------------------------------


def test_a_gemini_upstream_gets_googles_stand_in_for_the_gateways_seal_and_its_own_untouched() -> None:
    """A conversation moved from a Claude route to a Gemini one: Google would refuse the seal
    ("Corrupted thought signature."), costing a call before the rescue; Google's own goes as is."""
    own = "CiQBjz1rX8Qz1l3mW7s4bS9qW0R6r3dzT1aY2fJm3x0c4eC4bFQKXgGPPWtf"
    turn = model_turn_of_buffered()
    payload = continuation(turn)
    payload["contents"].insert(1, {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {}},
                                                               "thoughtSignature": own}]})  # fmt: skip
    payload["contents"].insert(2, {"role": "user", "parts": [{"functionResponse": {"name": "weather",
                                                                                    "response": {"output": "x"}}}]})  # fmt: skip
    body = json.dumps(payload).encode()
    passed = gemini_passed(body, payload)
    signatures = [p.get("thoughtSignature") for c in passed["contents"] for p in c["parts"] if "functionCall" in p]
    assert signatures == [own, GEMINI_SKIP]
    plain = request()
    assert gemini_passed(json.dumps(plain).encode(), plain) is plain


def test_the_seal_is_swapped_per_passthrough_leg_not_for_every_leg() -> None:
    """Review: ``prepare`` swapped the seal for every request, a translated leg's too (which
    reads it), walking and copying the history on each turn of a tool loop and again after each
    drop, and marked the request changed, so its body was written again whole (~0.7 ms on a
    1.7 MB history). ``prepare`` leaves it; a passthrough leg swaps it (``gemini_passed``)."""
    payload = continuation(model_turn_of_buffered())
    dialect = GeminiGenerate()
    inbound = dialect.admit(json.dumps(payload).encode(), payload, _where())
    assert not hasattr(inbound, "message"), inbound
    assert dialect.prepare(inbound, True)[0] is inbound.payload  # type: ignore[union-attr]


def _where() -> Where:
    return Where({"model": "gemini-3-pro-preview", "method": "streamGenerateContent"}, {"alt": "sse"})
