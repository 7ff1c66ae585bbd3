"""Thinking replayed through the chat → Messages translation to a model that binds it to its
prefix: asked to be dropped, not refused, when that prefix is the gateway's to write. Built from
a real openai SDK request (tests/corpus/requests/) and a real Anthropic answer carrying signed
thinking (tests/corpus/answers/), translated back as the chat client receives it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis.messages import binding
from gateway.fake.messages_rules import refusal
from gateway.routing.headers import with_added
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.chat_messages import ChatToMessages

CORPUS = Path(__file__).parents[2] / "corpus"
T = ChatToMessages(clock=lambda: 1_764_000_000)
DROPPING = {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}


def corpus(kind: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / kind / f"{name}.json").read_text())
    assert doc["source"]
    return doc


def with_thinking_replayed() -> dict[str, Any]:
    """The openai SDK's request (a developer message, a tool round, a system message from
    mid-conversation, ``tool_choice="required"``), its tool-calling turn carrying the signed
    thinking a real Anthropic answer came back with, asked with an effort."""
    payload = corpus("requests", "chat-openai-python-tools-images")["body"]
    answer = corpus("answers", "messages-thinking-then-tool-use")["body"]
    said = T.answer(answer, Context("gpt-4o-mini", {}, "req"))["choices"][0]["message"]
    messages = [dict(m) for m in payload["messages"]]
    assert messages[2]["role"] == "assistant" and messages[2]["tool_calls"]
    messages[2]["thinking_blocks"] = said["thinking_blocks"]
    return {**payload, "messages": messages, "reasoning_effort": "high"}


def sent(payload: dict[str, Any], model: str) -> dict[str, Any]:
    out = T.request(payload, Target(model))
    assert not isinstance(out, Refusal), out
    return out


@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "claude-opus-5-5", "claude-fable-5-1",
                                   "us.anthropic.claude-fable-5-2-v1:0"])  # fmt: skip
def test_replayed_thinking_on_a_binding_model_asks_for_drop_block(model: str) -> None:
    """The gateway wrote this request's prefix (the mid-conversation system message moved into
    ``system``, the forced choice sent as auto), which the client can neither see nor keep."""
    out = sent(with_thinking_replayed(), model)
    assert out["messages"][1]["content"][0]["type"] == "thinking"  # replayed, signed, as it came
    assert [b["text"] for b in out["system"]] == ["Use tools when asked about weather.",
                                                  "Answer in French."]  # fmt: skip
    assert out["thinking"] == DROPPING
    assert binding.betas(out) == (("anthropic-beta", "thinking-binding-controls-2026-08-01"),)
    assert refusal("/v1/messages", out, dict(binding.betas(out))) is None
    assert refusal("/v1/messages", out, {}) is not None  # the field without its beta is a 400


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "claude-opus-5", "claude-fable-5", "claude-mythos-5-1",
                                   "local-model"])  # fmt: skip
def test_a_model_without_the_prefix_check_is_asked_as_before(model: str) -> None:
    out = sent(with_thinking_replayed(), model)
    assert "block_binding" not in out.get("thinking", {}) and binding.betas(out) == ()


def test_a_request_that_replays_no_thinking_is_asked_as_before() -> None:
    first = corpus("requests", "chat-openai-python-tools-images")["body"]
    out = sent({**first, "reasoning_effort": "high"}, "claude-sonnet-5-5")  # no thinking_blocks: none on
    assert "thinking" not in out and binding.betas(out) == ()
    opening = {**first, "messages": first["messages"][:2], "reasoning_effort": "high"}
    out = sent(opening, "claude-sonnet-5-5")
    assert out["thinking"] == {"type": "adaptive"} and binding.betas(out) == ()
    # Sonnet 5.5 thinks on every request: "none" is its least effort, and the replayed thinking
    # stays (the tool loop's turn must start with it), so it is asked to be dropped where bound.
    least = sent({**with_thinking_replayed(), "reasoning_effort": "none"}, "claude-sonnet-5-5")
    assert least["thinking"] == DROPPING and least["output_config"]["effort"] == "low"
    assert binding.replays_thinking(least["messages"])
    assert refusal("/v1/messages", least, dict(binding.betas(least))) is None


def test_the_beta_joins_the_ones_already_sent_once() -> None:
    """The client's or the config's betas stay; the binding one is added once, never twice."""
    needed = binding.betas({"thinking": DROPPING})
    assert with_added({"anthropic-beta": "interleaved-thinking-2025-05-14"}, needed) == {
        "anthropic-beta": "interleaved-thinking-2025-05-14,thinking-binding-controls-2026-08-01"}
    already = {"Anthropic-Beta": "thinking-binding-controls-2026-08-01, interleaved-thinking-2025-05-14"}
    assert with_added(already, needed) == {
        "anthropic-beta": "thinking-binding-controls-2026-08-01,interleaved-thinking-2025-05-14"}


def test_drop_block_keeps_the_binding_settings_a_request_had() -> None:
    kept = binding.dropping_bound({"type": "adaptive", "display": "summarized", "block_binding": {"x": 1}})
    assert kept == {"type": "adaptive", "display": "summarized",
                    "block_binding": {"x": 1, "prefix_mismatch_behavior": "drop_block"}}  # fmt: skip
    assert binding.dropping_bound(None) == DROPPING
