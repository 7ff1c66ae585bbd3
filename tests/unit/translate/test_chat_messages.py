"""Chat completions client → Anthropic Messages upstream (``translate/chat_messages/``).

Requests are the real ones the openai SDK and the Vercel AI SDK sent (tests/corpus/requests/
chat-*.json); answers and streams are real Anthropic ones (tests/corpus/answers/messages-*).
Every translated stream is read back with the openai SDK's own stream accumulation
(``client.chat.completions.stream`` over an httpx MockTransport serving the bytes) and compared
with what the anthropic SDK's ``MessageStream`` makes of the upstream stream, translated as a
buffered answer: the two paths must agree on text, reasoning, tool calls, finish and usage.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import itertools
import json
import random
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from gateway.apis.base import Ending
from gateway.apis.messages import binding
from gateway.apis.messages.claude_models import thinking_for
from gateway.errors import Classification, ErrorType
from gateway.fake import messages_rules
from gateway.fake.messages import anthropic_head, anthropic_message, anthropic_tail, sign, sse
from gateway.sse import EventSplitter, parse_event
from gateway.translate import default_translations
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.chat_messages import BUFFERED_MAX_TOKENS, ChatToMessages, default_max_tokens
from gateway.translate.chat_messages.request import JSON_NOTE
from gateway.translate.tool_ids import from_anthropic_id, to_anthropic_id
from tests import images
from tests.unit.translate.wrong_types import CHAT, mutated

CORPUS = Path(__file__).parents[2] / "corpus"
T = ChatToMessages(clock=lambda: 1_764_000_000)
TARGET = Target(model="claude-sonnet-4-5-20250929")


def corpus(kind: str, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / kind / f"{name}.json").read_text())
    assert doc["source"]
    return doc


def client_request(name: str) -> dict[str, Any]:
    return corpus("requests", name)["body"]


def req(payload: dict[str, Any], target: Target = TARGET) -> dict[str, Any]:
    out = T.request(payload, target)
    assert not isinstance(out, Refusal), out
    return out


def refused(payload: dict[str, Any]) -> str:
    out = T.request(payload, TARGET)
    assert isinstance(out, Refusal), out
    return out.message


def user(text: str = "hi") -> dict[str, Any]:
    return {"role": "user", "content": text}


def call(call_id: str, name: str = "get_weather", arguments: str = '{"city": "Paris"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
                                            "parameters": {"type": "object", "properties": {}}}}  # fmt: skip


# --- requests from real clients ---------------------------------------------------------------


def test_openai_sdk_tools_images_and_results() -> None:
    out = req(client_request("chat-openai-python-tools-images"))
    # developer first, the system message from the middle of the conversation after it
    assert out["system"] == [{"type": "text", "text": "Use tools when asked about weather."},
                             {"type": "text", "text": "Answer in French."}]  # fmt: skip
    assert [m["role"] for m in out["messages"]] == ["user", "assistant", "user"]
    first = out["messages"][0]["content"]
    assert first[1]["source"]["type"] == "base64" and first[1]["source"]["media_type"] == "image/png"
    assert first[2]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}
    assert out["messages"][1]["content"] == [
        {"type": "tool_use", "id": "call_a1", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b2", "name": "get_weather", "input": {"city": "Rome"}},
    ]
    # both tool messages and the following user text in one user turn, results first
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_a1", "content": "18C, cloudy"},
        {"type": "tool_result", "tool_use_id": "call_b2", "content": [{"type": "text", "text": "24C, sunny"}]},
        {"type": "text", "text": "And tomorrow?"},
    ]
    assert out["tools"] == [{"name": "get_weather", "description": "Current weather in a city", "input_schema": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]  # fmt: skip
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert out["max_tokens"] == BUFFERED_MAX_TOKENS and "stream" not in out


def test_openai_sdk_stream_knobs() -> None:
    out = req(client_request("chat-openai-python-stream-knobs"))
    assert out["stream"] is True and out["max_tokens"] == 256
    # stop ["\n\n"]: Anthropic refuses a blank stop sequence (LiteLLM #3286), so it goes
    assert "stop_sequences" not in out
    assert out["temperature"] == 1.0  # 1.5 clamped to Anthropic's maximum
    assert "top_p" not in out  # newer Claude models refuse temperature and top_p together
    assert out["metadata"] == {"user_id": "user-42"}
    # reasoning_effort "low" with max 256 tokens: no room for the 1024-token minimum budget
    assert "thinking" not in out
    for dropped in ("seed", "presence_penalty", "frequency_penalty", "stream_options", "reasoning_effort", "user"):
        assert dropped not in out


def test_openai_sdk_uncarried_fields_are_refused_not_dropped() -> None:
    payload = client_request("chat-openai-python-uncarried")
    assert "'n' > 1" in refused(payload)
    assert "logprobs" in refused({**payload, "n": 1})
    out = req({k: v for k, v in payload.items() if k not in ("n", "logprobs", "top_logprobs")})
    assert out["output_config"] == {"format": {"type": "json_schema",
                                               "schema": payload["response_format"]["json_schema"]["schema"]}}
    assert out["tool_choice"] == {"type": "tool", "name": "get_weather"}


@pytest.mark.parametrize("step", ["chat-ai-sdk-tool-loop-step1", "chat-ai-sdk-tool-loop-step2"])
def test_ai_sdk_tool_loop(step: str) -> None:
    payload = client_request(step)
    out = req(payload)
    assert out["system"] == [{"type": "text", "text": "You are a weather assistant."}]
    assert out["stream"] is True and out["max_tokens"] == 64000  # the Sonnet 4 family's default
    assert out["tools"][0]["input_schema"] == payload["tools"][0]["function"]["parameters"]
    assert out["tool_choice"] == {"type": "auto"}
    if step.endswith("step2"):
        assert out["messages"][1] == {"role": "assistant", "content": [
            {"type": "tool_use", "id": "call_capture_1", "name": "get_weather", "input": {"city": "Paris"}}]}
        assert out["messages"][2] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "call_capture_1", "content": '{"city":"Paris","celsius":18}'}]}


def test_opencode_title_request_merges_its_two_user_messages() -> None:
    payload = client_request("chat-opencode-title")
    out = req(payload)
    assert [m["role"] for m in out["messages"]] == ["user"]
    assert [b["text"] for b in out["messages"][0]["content"]] == [m["content"] for m in payload["messages"][1:]]
    assert out["max_tokens"] == 32000 and out["system"][0]["text"] == payload["messages"][0]["content"]


def test_opencode_agent_tool_loop() -> None:
    payload = client_request("chat-opencode-agent-step2")
    out = req(payload)
    assert [t["name"] for t in out["tools"]] == [t["function"]["name"] for t in payload["tools"]]
    assert all(t["input_schema"] == p["function"]["parameters"] for t, p in zip(out["tools"], payload["tools"], strict=True))
    # opencode sends content "" next to its tool calls: no empty text block reaches Anthropic
    assert out["messages"][1]["content"] == [{"type": "tool_use", "id": "call_capture_1", "name": "read",
                                              "input": {"filePath": "/tmp/capture-opencode/opencode.json"}}]
    assert out["messages"][2]["content"][0]["tool_use_id"] == "call_capture_1"
    assert out["messages"][2]["content"][0]["content"] == payload["messages"][3]["content"]


CAPTURED = sorted(p.stem for p in (CORPUS / "requests").glob("chat-*.json") if "uncarried" not in p.stem)


@pytest.mark.parametrize("name", CAPTURED)
def test_every_captured_request_makes_a_valid_messages_request(name: str) -> None:
    """What Anthropic checks: alternating turns, no empty text, every tool_result answering a
    tool_use of the turn before it and standing first in its turn, ids in its alphabet."""
    out = req(client_request(name))
    roles = [m["role"] for m in out["messages"]]
    assert roles[0] == "user" and all(a != b for a, b in itertools.pairwise(roles))
    for k, turn in enumerate(out["messages"]):
        kinds = [b["type"] for b in turn["content"]]
        assert turn["content"] and all(b.get("text") != "" for b in turn["content"])
        assert kinds == sorted(kinds, key=lambda t: t != "tool_result")
        asked = {b["id"] for b in out["messages"][k - 1]["content"] if b["type"] == "tool_use"} if k else set()
        assert {b["tool_use_id"] for b in turn["content"] if b["type"] == "tool_result"} <= asked
    ids = [b["id"] for m in out["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert all(i.replace("-", "").replace("_", "").isalnum() for i in ids)
    assert 0 < out["max_tokens"] and out["model"] == TARGET.model


# --- request mapping tables -------------------------------------------------------------------


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    ("auto", None, {"type": "auto"}),
    ("none", None, {"type": "none"}),
    ("required", None, {"type": "any"}),
    ({"type": "function", "function": {"name": "get_weather"}}, None, {"type": "tool", "name": "get_weather"}),
    (None, None, None),
    (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
    ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
    ("none", False, {"type": "none"}),
    ("auto", True, {"type": "auto"}),
])  # fmt: skip
def test_tool_choice_bifrost_3596(choice: Any, parallel: bool | None, expected: dict[str, Any] | None) -> None:
    """Bifrost #3596 / #6887: tool_choice mistranslated between the APIs ("required" is
    Anthropic's "any", a named function its "tool")."""
    payload: dict[str, Any] = {"model": "m", "messages": [user()], "tools": [WEATHER]}
    if choice is not None:
        payload["tool_choice"] = choice
    if parallel is not None:
        payload["parallel_tool_calls"] = parallel
    assert req(payload).get("tool_choice") == expected


def test_allowed_tools_and_parallel_tool_calls_are_carried_bifrost_7348() -> None:
    other = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}
    out = req({"model": "m", "messages": [user()], "tools": [WEATHER, other], "parallel_tool_calls": False,
               "tool_choice": {"type": "allowed_tools", "allowed_tools": {
                   "mode": "required", "tools": [{"type": "function", "function": {"name": "other"}}]}}})  # fmt: skip
    assert [t["name"] for t in out["tools"]] == ["other"]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


FORCED_REFUSED = ["claude-fable-5-1", "claude-mythos-5-1", "claude-fable-5-2", "claude-opus-5-5", "claude-sonnet-5-5",
                  "anthropic/claude-fable-5.1", "us.anthropic.claude-opus-5-5-v1:0", "claude-fable-5-1@20260901"]
FORCED_TAKEN = ["claude-fable-5", "claude-mythos-5", "claude-opus-5", "claude-sonnet-5", "claude-sonnet-4-5",
                "claude-opus-4-8", "claude-haiku-5-5", "claude-mythos-preview", "qwen3-coder"]
OTHER = {"type": "function", "function": {"name": "other", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize("model", FORCED_REFUSED)
@pytest.mark.parametrize(("choice", "parallel", "names", "expected"), [
    ("required", None, ["get_weather", "other"], {"type": "auto"}),
    ({"type": "function", "function": {"name": "other"}}, None, ["other"], {"type": "auto"}),
    ({"type": "function", "function": {"name": "missing"}}, None, ["get_weather", "other"], {"type": "auto"}),
    ("required", False, ["get_weather", "other"], {"type": "auto", "disable_parallel_tool_use": True}),
    ({"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
        {"type": "function", "function": {"name": "get_weather"}}]}}, None, ["get_weather"], {"type": "auto"}),
])  # fmt: skip
def test_a_forced_tool_goes_as_auto_to_the_models_that_refuse_forcing_fable_5_1(
    model: str, choice: Any, parallel: bool | None, names: list[str], expected: dict[str, Any]
) -> None:
    """Claude Fable 5.1, Mythos 5.1, Opus 5.5 and Sonnet 5.5 answer a forced choice with "tool_choice:
    type "tool" and "any" are not supported for this model." (inspect_ai #5176; the Fable 5.1
    migration guide): the call goes as `auto`, the tools narrowed to the one named, and the
    client's effort, dropped before to keep the forced call, is sent."""
    payload: dict[str, Any] = {"model": "m", "messages": [user()], "tools": [WEATHER, OTHER], "tool_choice": choice,
                               "reasoning_effort": "high", "max_tokens": 8000}  # fmt: skip
    if parallel is not None:
        payload["parallel_tool_calls"] = parallel
    out = req(payload, Target(model))
    assert out["tool_choice"] == expected and [t["name"] for t in out["tools"]] == names
    assert out["thinking"] == {"type": "adaptive"} and out["output_config"] == {"effort": "high"}
    assert messages_rules.refusal("/v1/messages", out, {}) is None


@pytest.mark.parametrize("model", FORCED_TAKEN)
def test_a_forced_tool_stays_forced_where_the_model_takes_it(model: str) -> None:
    named = {"type": "function", "function": {"name": "other"}}
    out = req({"model": "m", "messages": [user()], "tools": [WEATHER, OTHER], "tool_choice": named,
               "reasoning_effort": "high", "max_tokens": 8000}, Target(model))  # fmt: skip
    assert out["tool_choice"] == {"type": "tool", "name": "other"} and len(out["tools"]) == 2
    # Anthropic refuses thinking with a forced tool: the call is kept, and Opus 5 and Sonnet 5,
    # which would think unasked, are told not to.
    assert out.get("thinking") == ({"type": "disabled"} if thinking_for(model).off == "disabled" else None)
    assert messages_rules.refusal("/v1/messages", out, {}) is None


@pytest.mark.parametrize(("model", "thinks"), [
    ("claude-3-5-sonnet-20241022", False), ("claude-3-opus-20240229", False), ("anthropic/claude-3.5-haiku", False),
    ("claude-3-7-sonnet-20250219", True), ("claude-sonnet-4-5", True), ("my-local-model", True),
])  # fmt: skip
def test_claude_3_and_3_5_are_asked_no_thinking(model: str, thinks: bool) -> None:
    """"'claude-3-5-sonnet-20241022' does not support thinking." (claude-code #2245, the corpus's
    anthropic-400-model-does-not-support-thinking): a client's effort on them would cost a refused
    call and a rescue. A name the gateway does not know still gets a budget (the rescue's case)."""
    out = req({"model": "m", "messages": [user()], "reasoning_effort": "high", "max_tokens": 20000}, Target(model))
    assert ("thinking" in out) is thinks, out
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_gemini_any_and_a_responses_forced_function_reach_fable_5_1_as_auto() -> None:
    """Gemini's `functionCallingConfig.mode: ANY` (with `allowedFunctionNames`) and a Responses
    `tool_choice` naming a function go through chat, and so as `auto` too."""
    table = default_translations().table
    fable = Target("claude-fable-5-1")
    gemini = {"model": "gemini-2.5-pro", "contents": [{"role": "user", "parts": [{"text": "x"}]}],
              "tools": [{"functionDeclarations": [{"name": "Answer"}, {"name": "Other"}]}],
              "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["Answer"]}}}
    out = table["gemini", "messages"].request(gemini, fable)
    assert not isinstance(out, Refusal), out
    assert out["tool_choice"] == {"type": "auto"} and [t["name"] for t in out["tools"]] == ["Answer"]
    responses = {"model": "gpt-5", "input": "x", "tool_choice": {"type": "function", "name": "Answer"},
                 "tools": [{"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
                           for name in ("Answer", "Other")]}  # fmt: skip
    out = table["responses", "messages"].request(responses, fable)
    assert not isinstance(out, Refusal), out
    assert out["tool_choice"] == {"type": "auto"} and [t["name"] for t in out["tools"]] == ["Answer"]
    for sent in (out, table["gemini", "messages"].request(gemini, fable)):
        assert isinstance(sent, dict) and messages_rules.refusal("/v1/messages", sent, {}) is None


def test_no_tools_means_no_tool_choice() -> None:
    assert "tool_choice" not in req({"model": "m", "messages": [user()], "tool_choice": "auto"})


SUMMARIZE = [user("weather?"), {"role": "assistant", "content": None, "tool_calls": [call("call_1"), call("call_2")]},
             {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
             {"role": "tool", "tool_call_id": "call_2", "content": "warm"},
             {"role": "assistant", "content": "Sunny and warm."}, user("Summarize this conversation.")]  # fmt: skip


@pytest.mark.parametrize("payload", [
    {},  # an agent's summary request: its history, no tools
    {"tools": [], "tool_choice": "auto", "parallel_tool_calls": False},  # Codex's compaction, through chat
    {"tools": [WEATHER], "tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
])  # fmt: skip
def test_tool_history_without_tools_declares_the_called_ones_uncallable_sdk_python_494(
    payload: dict[str, Any],
) -> None:
    """Anthropic refuses tool blocks in a request that declares no tools ("Requests which
    include `tool_use` or `tool_result` blocks must define tools.", anthropic-sdk-python #494):
    the names called are declared, and ``tool_choice: none`` keeps them uncallable, as the
    client asked by offering none."""
    out = req({"model": "m", "messages": SUMMARIZE, **payload})
    assert out["tools"] == [{"name": "get_weather", "description": "Called earlier in this conversation; not "
                             "offered now.", "input_schema": {"type": "object", "properties": {}}}]  # fmt: skip
    assert out["tool_choice"] == {"type": "none"}
    assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_use", "tool_use"]  # the rounds as they were
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    # Thinking stays possible: Anthropic refuses it only with a forced tool.
    thought = req({"model": "m", "messages": SUMMARIZE, "reasoning_effort": "low", "max_tokens": 4000, **payload})
    assert thought["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert messages_rules.refusal("/v1/messages", thought, {}) is None


@pytest.mark.parametrize(("effort", "max_tokens", "budget"), [
    ("minimal", 4000, 1024), ("low", 4000, 2048), ("medium", 4000, 2976), ("high", 20000, 15000),
    ("xhigh", 40000, 30000), ("xhigh", 64000, 32768), ("high", 2048, 1024), ("medium", 2047, None),
    ("medium", 1025, None), ("low", 1024, None), ("high", 500, None), ("none", 4000, None),
])  # fmt: skip
def test_thinking_budget_is_at_least_1024_and_leaves_the_answer_its_share_bifrost_1479(
    effort: str, max_tokens: int, budget: int | None
) -> None:
    """Bifrost #1479: a budget under 1024 is refused by Anthropic; never send one. The answer
    keeps max(1024, max_tokens // 4) (``thinking_room``): the budget was max_tokens − 1."""
    out = req({"model": "m", "messages": [user()], "reasoning_effort": effort, "max_tokens": max_tokens})
    if budget is None:
        assert "thinking" not in out
    else:
        assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
        assert MIN <= out["thinking"]["budget_tokens"] <= out["max_tokens"] - max(MIN, out["max_tokens"] // 4)


MIN = 1024


def test_thinking_takes_the_sampling_rules_anthropic_imposes() -> None:
    base = {"model": "m", "messages": [user()], "reasoning_effort": "low", "max_completion_tokens": 8000}
    out = req({**base, "temperature": 0.2, "top_k": 40})
    assert out["thinking"]["budget_tokens"] == 2048 and "temperature" not in out
    assert "top_k" not in out  # "thinking isn't compatible with temperature or top_k modifications"
    assert req({**base, "reasoning_effort": "none", "top_k": 40})["top_k"] == 40
    assert "top_p" not in req({**base, "top_p": 0.5})
    assert req({**base, "top_p": 0.97})["top_p"] == 0.97


def test_no_thinking_with_a_forced_tool_mid_tool_loop_or_with_prefill() -> None:
    base = {"model": "m", "reasoning_effort": "high", "max_tokens": 32000, "tools": [WEATHER]}
    assert "thinking" not in req({**base, "messages": [user()], "tool_choice": "required"})
    loop = [user(), {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]  # fmt: skip
    assert "thinking" not in req({**base, "messages": loop})
    done = [*loop, {"role": "assistant", "content": "It is sunny."}, user("thanks")]
    assert req({**base, "messages": done})["thinking"]["budget_tokens"] == 16384
    prefill = [*done, {"role": "assistant", "content": "Sure,"}]
    assert "thinking" not in req({**base, "messages": prefill})


@pytest.mark.parametrize(("model", "effort"), [
    ("claude-opus-5-5", "low"), ("claude-opus-4-7", "low"), ("claude-opus-4-6", "low"), ("claude-fable-5-1", "low"),
    ("claude-sonnet-4-6", "high"), ("claude-sonnet-4-5", None), ("claude-opus-4-5", "low"), ("qwen3-coder", None),
    ("claude-3-5-sonnet-20241022", None),
])  # fmt: skip
def test_a_step_without_thinking_keeps_the_effort_where_the_model_takes_one(model: str, effort: str | None) -> None:
    """Effort "doesn't require thinking to be enabled" (platform.claude.com's effort page): a step
    mid tool loop went without `output_config`, so a chat client's `low` became Anthropic's
    default there (audit, a chat client on claude-opus-5-5). Thinking stays off, as Anthropic
    refuses a final tool-calling turn without its thinking block; the effort goes only to the
    models that take one (`efforts` in claude_models.py)."""
    loop = [user(), {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]  # fmt: skip
    asked = "xhigh" if model == "claude-sonnet-4-6" else "low"  # 4.6 takes no xhigh: high
    out = req({"model": "m", "reasoning_effort": asked, "max_tokens": 32000, "tools": [WEATHER], "messages": loop},
              Target(model))  # fmt: skip
    assert "thinking" not in out
    assert out.get("output_config") == ({"effort": effort} if effort else None)
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    if model in FORCED_TAKEN or model == "claude-opus-4-7":  # a forced tool: the call kept, the effort too
        forced = req({"model": "m", "reasoning_effort": asked, "max_tokens": 32000, "tools": [WEATHER],
                      "messages": [user()], "tool_choice": "required"}, Target(model))  # fmt: skip
        assert "thinking" not in forced and forced.get("output_config") == ({"effort": effort} if effort else None)


SIGNED = {"type": "thinking", "thinking": "Paris first.", "signature": "EqQBCkYIBxgCKkA"}


def test_signed_thinking_goes_first_in_its_turn_and_keeps_thinking_on_mid_tool_loop() -> None:
    base = {"model": "m", "reasoning_effort": "high", "max_tokens": 32000, "tools": [WEATHER]}
    redacted = {"type": "redacted_thinking", "data": "EmwKAhgB"}
    turn = {"role": "assistant", "content": "Looking.", "tool_calls": [call("call_1")],
            "thinking_blocks": [{**SIGNED, "index": 0}, redacted, {"type": "thinking", "thinking": "unsigned"}]}
    loop = [user(), turn, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    out = req({**base, "messages": loop})
    assert out["thinking"]["budget_tokens"] == 16384
    assert [b["type"] for b in out["messages"][1]["content"]] == ["thinking", "redacted_thinking", "text", "tool_use"]
    assert out["messages"][1]["content"][:2] == [SIGNED, redacted]  # as issued: no index, nothing added
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_signed_thinking_is_not_sent_with_thinking_off() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [call("call_1")], "thinking_blocks": [SIGNED]}
    loop = [user(), turn, {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    for extra in ({}, {"reasoning_effort": "high", "tool_choice": "required"}):
        out = req({"model": "m", "max_tokens": 32000, "tools": [WEATHER], "messages": loop, **extra})
        assert "thinking" not in out and [b["type"] for b in out["messages"][1]["content"]] == ["tool_use"]


THINK_UNASKED = ["claude-opus-5", "claude-sonnet-5", "claude-opus-5-5", "claude-sonnet-5-5", "claude-fable-5-1",
                 "claude-mythos-5"]  # fmt: skip


@pytest.mark.parametrize("model", THINK_UNASKED)
@pytest.mark.parametrize("effort", [None, "none"])
def test_a_model_that_thinks_unasked_gets_its_tool_loops_thinking_back(model: str, effort: str | None) -> None:
    """Opus and Sonnet 5 on, Fable and Mythos think on a request that leaves ``thinking`` out
    (the Opus 5 migration guide) and the 5.5 ones on every request: a client that asks for no
    reasoning (the openai SDK, Codex without an effort) still gets thinking with each call, and
    its next step must start that turn with it ("Expected `thinking` or `redacted_thinking`, but
    found `tool_use`"). It was dropped as for a model that thinks only when asked."""
    signed = {"type": "thinking", "thinking": "Paris first.", "signature": sign("Paris first.")}
    turn = {"role": "assistant", "content": None, "tool_calls": [call("toolu_1")], "thinking_blocks": [signed]}
    loop = [user(), turn, {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"}]
    asked = {} if effort is None else {"reasoning_effort": effort}
    out = req({"model": "m", "tools": [WEATHER], "messages": loop, **asked}, Target(model))
    if out.get("thinking") == {"type": "disabled"}:  # Opus and Sonnet 5 take "none" as thinking off
        assert effort == "none" and thinking_for(model).off == "disabled"
        assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_use"]
    else:
        assert out["thinking"]["type"] == "adaptive"  # said: a replay then gets drop_block where bound
        assert out["messages"][1]["content"][0] == signed
    sent = dict(binding.betas(out))  # the pipeline's beta header for drop_block
    assert messages_rules.refusal("/v1/messages", json.loads(json.dumps(out)), sent, {"toolu_1"}) is None
    forced = req({"model": "m", "tools": [WEATHER], "messages": loop, "tool_choice": "required", **asked},
                 Target(model))  # thinking stays unsaid beside a forced call, on the models that take one
    assert messages_rules.refusal("/v1/messages", forced, dict(binding.betas(forced)), {"toolu_1"}) is None
    first = req({"model": "m", "tools": [WEATHER], "messages": [user()], **asked}, Target(model))
    assert first.get("thinking") in (None, {"type": "disabled"})  # nothing replayed: left as before


def test_thinking_of_a_merged_turn_is_moved_first() -> None:
    """Anthropic: "If an assistant message contains any thinking blocks, the first block must
    be thinking or redacted_thinking" (claude-code #20705)."""
    loop = [user(), {"role": "assistant", "content": "Let me see."},
            {"role": "assistant", "content": None, "tool_calls": [call("call_1")], "thinking_blocks": [SIGNED]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]  # fmt: skip
    out = req({"model": "m", "reasoning_effort": "low", "max_tokens": 32000, "tools": [WEATHER], "messages": loop})
    assert [b["type"] for b in out["messages"][1]["content"]] == ["thinking", "text", "tool_use"]
    assert "thinking" in out


def test_thinking_blocks_of_the_wrong_type_are_a_refusal() -> None:
    turn = {"role": "assistant", "content": "x", "thinking_blocks": [{**SIGNED, "thinking": 5}]}
    assert "thinking_blocks" in refused({"model": "m", "messages": [user(), turn, user()]})


def test_unknown_reasoning_effort_is_refused() -> None:
    assert "reasoning_effort" in refused({"model": "m", "messages": [user()], "reasoning_effort": "extreme"})


@pytest.mark.parametrize(("model", "stream", "expected"), [
    ("claude-opus-4-1-20250805", True, 32000), ("claude-sonnet-4-5", True, 64000),
    ("claude-sonnet-4-5", False, BUFFERED_MAX_TOKENS), ("claude-haiku-4-5", True, 64000),
    ("claude-3-7-sonnet-latest", True, 64000), ("claude-3-5-haiku-latest", True, 8192),
    ("claude-3-haiku-20240307", False, 4096), ("us.anthropic.claude-sonnet-4-20250514-v1:0", True, 64000),
    ("my-private-model", True, 4096),
    ("claude-fable-5", True, 128000), ("claude-fable-5-1", True, 128000), ("claude-mythos-5-1", True, 128000),
    ("us.anthropic.claude-fable-5-2-v1:0", True, 128000), ("claude-fable-5-1", False, BUFFERED_MAX_TOKENS),
    ("claude-mythos-preview", True, 4096),
    ("claude-sonnet-5-5", True, 128000), ("claude-opus-5-5", True, 128000), ("claude-haiku-5-5", True, 128000),
    ("claude-opus-5", True, 128000), ("claude-sonnet-5-5", False, BUFFERED_MAX_TOKENS),
])  # fmt: skip
def test_default_max_tokens(model: str, stream: bool, expected: int) -> None:
    assert default_max_tokens(model, stream) == expected
    payload = {"model": "x", "messages": [user()], "stream": stream}
    assert req(payload, Target(model))["max_tokens"] == expected


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    out = req({"model": "m", "messages": [user()], "max_tokens": 100, "max_completion_tokens": 200})
    assert out["max_tokens"] == 200 and out["model"] == TARGET.model


@pytest.mark.parametrize(("stop", "expected"), [
    ("END", ["END"]), (["a", "b"], ["a", "b"]), (None, None),
    # "stop_sequences: each stop sequence must contain non-whitespace" (LiteLLM #3286)
    ("\n", None), ("", None), (["\n\n", "END", " "], ["END"]), (["\t"], None), ([" x "], [" x "]),
])  # fmt: skip
def test_stop(stop: Any, expected: list[str] | None) -> None:
    assert req({"model": "m", "messages": [user()], "stop": stop}).get("stop_sequences") == expected


@pytest.mark.parametrize(("temperature", "expected"), [(0, 0.0), (0.7, 0.7), (1, 1.0), (2, 1.0)])
def test_temperature_is_clamped_to_anthropics_range(temperature: float, expected: float) -> None:
    assert req({"model": "m", "messages": [user()], "temperature": temperature})["temperature"] == expected


@pytest.mark.parametrize(("model", "kept"), [
    ("claude-opus-4-7", False), ("claude-opus-4-8-20260501", False), ("anthropic/claude-opus-4.7", False),
    ("claude-opus-5", False), ("claude-sonnet-5", False), ("claude-haiku-5-5", False), ("claude-fable-5", False),
    ("claude-fable-5-1", False), ("claude-mythos-5-1", False), ("claude-mythos-preview", False),
    ("claude-opus-4-6", True), ("claude-sonnet-4-5-20250929", True), ("claude-3-7-sonnet-latest", True),
    ("qwen3-coder", True),
])  # fmt: skip
def test_sampling_knobs_are_not_sent_to_the_models_that_removed_them_roocode_12162(model: str, kept: bool) -> None:
    """Opus 4.7 on, the 5 generation, Fable and Mythos answer each with a 400 ("`temperature` is
    deprecated for this model.", RooCode #12162; models.dev #1468: Opus 4.7 "removed the
    `temperature`, `top_p`, and `top_k` sampling parameters"); they went first and were learnt
    from the refusal, a wasted call per model and process."""
    for knobs in ({"temperature": 0.3, "top_k": 5}, {"top_p": 0.9}):
        out = req({"model": "m", "messages": [user()], **knobs}, Target(model))
        assert {k: out[k] for k in knobs if k in out} == (knobs if kept else {})
        assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_user_and_safety_identifier_become_metadata_user_id() -> None:
    assert req({"model": "m", "messages": [user()], "user": "u1"})["metadata"] == {"user_id": "u1"}
    assert req({"model": "m", "messages": [user()], "safety_identifier": "s1"})["metadata"] == {"user_id": "s1"}


@pytest.mark.parametrize("who", ["alice@example.com", "x" * 257])
def test_a_user_anthropic_would_refuse_is_sent_as_its_digest_litellm_10106(who: str) -> None:
    """Anthropic refuses an email address in metadata.user_id ("user_id appears to contain an
    email address", LiteLLM #10106) and allows 256 characters: the SHA-256 tells users apart
    as well and names no one."""
    sent = req({"model": "m", "messages": [user()], "user": who})["metadata"]["user_id"]
    assert sent == hashlib.sha256(who.encode()).hexdigest()
    assert messages_rules.refusal("/v1/messages", req({"model": "m", "messages": [user()], "user": who}), {}) is None


@pytest.mark.parametrize("blank", [" ", "\n\n", "\t \n"])
def test_whitespace_only_text_is_dropped_as_empty_text_is_claude_code_23440(blank: str) -> None:
    """Anthropic: "messages: text content blocks must contain non-whitespace text"
    (anthropics/claude-code #23440). Chat models often answer "\n\n" before a tool call."""
    out = req({"model": "m", "tools": [WEATHER], "messages": [
        {"role": "system", "content": blank}, user("weather?"),
        {"role": "assistant", "content": blank, "tool_calls": [call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "user", "content": [{"type": "text", "text": blank}, {"type": "text", "text": "thanks"}]},
    ]})  # fmt: skip
    assert "system" not in out
    assert [b["type"] for b in out["messages"][1]["content"]] == ["tool_use"]
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}, {"type": "text", "text": "thanks"}]
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_a_prefill_loses_its_trailing_whitespace_forgecode_1872() -> None:
    """Anthropic: "messages: final assistant content cannot end with trailing whitespace"."""
    out = req({"model": "m", "messages": [user(), {"role": "assistant", "content": "Here is the JSON:\n"}]})
    assert out["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "Here is the JSON:"}]}
    # Whitespace inside the conversation is the conversation's: only the final answer's end is trimmed.
    out = req({"model": "m", "messages": [user(), {"role": "assistant", "content": "a \n"}, user("b ")]})
    assert out["messages"][1]["content"][0]["text"] == "a \n" and out["messages"][2]["content"][0]["text"] == "b "


@pytest.mark.parametrize("model", ["claude-sonnet-4-5-20250929", "claude-haiku-4-5", "claude-3-7-sonnet-latest",
                                   "claude-opus-4-8"])  # fmt: skip
def test_a_conversation_ending_on_the_assistant_asks_to_continue_when_the_answer_has_a_schema(model: str) -> None:
    """The structured-outputs guide's "Feature compatibility": "Message Prefilling: Incompatible
    with JSON outputs". Where a schema is sent, the last assistant turn is no prefill: a user turn
    asks to go on, as from Claude 4.6 on, which takes no prefill at all."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {}}}}
    convo = [user("JSON please"), {"role": "assistant", "content": '{"name":'}]
    out = req({"model": "m", "messages": convo, "response_format": fmt}, Target(model))
    assert out["messages"][1:] == [{"role": "assistant", "content": [{"type": "text", "text": '{"name":'}]},
                                   {"role": "user", "content": [{"type": "text", "text": "Continue."}]}]  # fmt: skip
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    thought = req({"model": "m", "messages": convo, "response_format": fmt, "reasoning_effort": "low",
                   "max_tokens": 4000}, Target(model))  # fmt: skip
    assert "thinking" in thought  # a prefill ruled it out; a user turn does not
    if model.startswith(("claude-sonnet-4-5", "claude-haiku-4-5", "claude-3")):
        kept = req({"model": "m", "messages": convo}, Target(model))  # no schema: still a prefill
        assert kept["messages"][-1]["role"] == "assistant"


def test_a_model_behind_a_compatible_server_keeps_its_prefill_beside_a_schema() -> None:
    """The structured-outputs guide binds Claude; a local model behind a Messages-compatible
    server (vLLM, llama.cpp) is sent the conversation as the client wrote it."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {}}}}
    convo = [user("JSON please"), {"role": "assistant", "content": '{"name":'}]
    out = req({"model": "m", "messages": convo, "response_format": fmt}, Target("qwen3-coder"))
    assert out["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": '{"name":'}]}


def test_every_object_of_a_structured_output_schema_is_closed_veryfront_3918() -> None:
    """Anthropic's structured outputs: "For 'object' type, 'additionalProperties' must be
    explicitly set to false" (veryfront-code #3918); `true` is refused too (LiteLLM #35808)."""
    schema = {"type": "object", "properties": {
        "a": {"type": "string"},
        "b": {"type": "object", "properties": {"c": {"type": "integer"}}, "additionalProperties": True},
        "d": {"type": "array", "items": {"type": "object", "properties": {"e": {"type": "string"}}}},
        "f": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/g"}]},
    }, "$defs": {"g": {"type": ["object", "null"], "properties": {"h": {"type": "string"}}}}}  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    sent = req({"model": "m", "messages": [user()], "response_format": fmt})["output_config"]["format"]["schema"]
    assert sent["additionalProperties"] is False
    assert sent["properties"]["b"]["additionalProperties"] is False
    assert sent["properties"]["d"]["items"]["additionalProperties"] is False
    assert sent["$defs"]["g"]["additionalProperties"] is False
    assert "additionalProperties" not in sent["properties"]["a"] and sent["properties"]["f"] == schema["properties"]["f"]
    assert schema["properties"]["b"]["additionalProperties"] is True  # the client's document is not changed


def test_constraints_structured_outputs_lack_move_into_the_description_job_ops_654() -> None:
    """Anthropic refuses them ("For 'array' type, property 'maxItems' is not supported",
    job-ops #654; "For 'integer' type, property 'minimum' is not supported", req_llm #302);
    its SDKs' transform_schema moves them into the description, where the model reads them."""
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "description": "Who it is"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 5, "minItems": 2},
        "some": {"type": "array", "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
        "when": {"type": "string", "format": "date-time", "pattern": "^2"},
        "secret": {"type": "string", "format": "password"},
        "score": {"anyOf": [{"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.5}, {"type": "null"}]},
        "minimum": {"type": "integer", "enum": [1, 2], "default": 1},
    }, "$defs": {"Pet": {"type": "object", "properties": {}, "minProperties": 1}}}  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    sent = req({"model": "m", "messages": [user()], "response_format": fmt})["output_config"]["format"]["schema"]
    props = sent["properties"]
    assert props["name"] == {"type": "string", "description": "Who it is\n\n{minLength: 1}"}
    assert props["age"] == {"type": "integer", "description": "{minimum: 0, maximum: 150}"}
    assert props["tags"] == {"type": "array", "description": "{maxItems: 5, minItems: 2}",
                             "items": {"type": "string", "description": "{maxLength: 20}"}}  # fmt: skip
    assert props["some"] == {"type": "array", "items": {"type": "string"}, "minItems": 1,
                             "description": "{uniqueItems: true}"}  # fmt: skip
    assert props["when"] == schema["properties"]["when"]  # a format and a pattern Anthropic takes
    assert props["secret"] == {"type": "string", "description": '{format: "password"}'}
    assert props["score"]["anyOf"][0] == {"type": "number", "description": "{exclusiveMinimum: 0, multipleOf: 0.5}"}
    assert props["minimum"] == schema["properties"]["minimum"]  # a property's name is no keyword
    assert sent["$defs"]["Pet"] == {"type": "object", "properties": {}, "additionalProperties": False,
                                    "description": "{minProperties: 1}"}  # fmt: skip
    assert schema["properties"]["age"]["minimum"] == 0  # the client's document is not changed


def test_one_of_goes_as_any_of_as_anthropics_sdks_send_it_vercel_ai() -> None:
    """Anthropic refuses `oneOf` ("output_config.format.schema: Schema type 'oneOf' is not
    supported"; vercel/ai "convert oneOf to anyOf in tool and output_format schemas"): the
    structured-outputs guide supports "`anyOf` and `allOf` (with limitations)". A discriminated
    union (zod's, pydantic's with a discriminator) is `oneOf` of objects no value can match two
    of, so `anyOf` takes the same values; the SDKs' `transform_schema` sends it so."""
    cat = {"type": "object", "properties": {"kind": {"const": "cat"}}, "required": ["kind"]}
    dog = {"type": "object", "properties": {"kind": {"const": "dog"}}, "required": ["kind"]}
    schema = {"type": "object", "properties": {
        "pet": {"oneOf": [cat, {"$ref": "#/$defs/Dog"}], "discriminator": {"propertyName": "kind"}},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}], "oneOf": [{"minLength": 1}, {"type": "null"}]},
    }, "$defs": {"Dog": dog}, "oneOf": [{"required": ["pet"]}, {"required": ["either"]}]}  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    out = req({"model": "m", "messages": [user()], "response_format": fmt})
    sent = out["output_config"]["format"]["schema"]
    assert "oneOf" not in json.dumps(sent)
    assert sent["anyOf"] == [{"required": ["pet"]}, {"required": ["either"]}]
    pet = sent["properties"]["pet"]
    assert pet["anyOf"] == [{**cat, "additionalProperties": False}, {"$ref": "#/$defs/Dog"}]
    assert pet["description"] == '{discriminator: {"propertyName": "kind"}}'  # no keyword Anthropic lists
    assert sent["properties"]["either"]["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert sent["properties"]["either"]["allOf"] == [{"anyOf": [{"description": "{minLength: 1}"}, {"type": "null"}]}]
    assert "oneOf" in schema["properties"]["pet"]  # the client's document is not changed
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_keywords_structured_outputs_do_not_list_move_into_the_description_as_the_sdks_move_them() -> None:
    """The guide's "JSON Schema limitations" list what is supported ("If you use an unsupported
    feature, you'll receive a 400 error"), and "Complex types within enums" among what is not;
    `transform_schema` moves each keyword off its list into the description."""
    schema = {"type": "object", "properties": {
        "point": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
        "tags": {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "propertyNames": {"maxLength": 9}},
        "code": {"type": "string", "not": {"const": "x"}, "pattern": "^[a-z]+$", "enum": ["a", "b"], "default": "a"},
        "size": {"if": {"type": "integer"}, "then": {"type": "integer"}, "else": {"type": "string"}},
        "pair": {"enum": [[1, 2], {"a": 1}]},
        "list": {"type": "array", "items": {"type": "string"}, "contains": {"const": "x"}},
    }}  # fmt: skip
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    props = req({"model": "m", "messages": [user()], "response_format": fmt})["output_config"]["format"]["schema"][
        "properties"]  # fmt: skip
    assert props["point"] == {"type": "array", "description": '{prefixItems: [{"type": "number"}, {"type": "number"}]}'}
    assert props["tags"] == {"type": "object", "additionalProperties": False, "description": (
        '{patternProperties: {"^x-": {"type": "string"}}, propertyNames: {"maxLength": 9}}')}
    assert props["code"] == {"type": "string", "pattern": "^[a-z]+$", "enum": ["a", "b"], "default": "a",
                             "description": '{not: {"const": "x"}}'}  # fmt: skip
    assert props["size"] == {"description": '{if: {"type": "integer"}, then: {"type": "integer"}, else: {"type": "string"}}'}
    assert props["pair"] == {"description": '{enum: [[1, 2], {"a": 1}]}'}
    assert props["list"] == {"type": "array", "items": {"type": "string"}, "description": '{contains: {"const": "x"}}'}


@pytest.mark.parametrize(("model", "effort", "expected"), [
    ("claude-opus-4-7", "high", "high"), ("claude-opus-4-8-20260501", "xhigh", "xhigh"),
    ("us.anthropic.claude-opus-4-7-v1:0", "minimal", "low"), ("anthropic/claude-opus-4.7", "medium", "medium"),
    ("claude-sonnet-4-6", "xhigh", "high"), ("claude-opus-4-6", "low", "low"), ("claude-sonnet-5", "xhigh", "xhigh"),
    ("claude-fable-5", "high", "high"), ("claude-mythos-preview", "low", "low"),
])  # fmt: skip
def test_newer_models_think_adaptively_with_an_effort_pi_3297(model: str, effort: str, expected: str) -> None:
    """Opus 4.7 on refuses `thinking: {type: enabled}` ("\"thinking.type.enabled\" is not
    supported for this model. Use \"thinking.type.adaptive\" and \"output_config.effort\"",
    jetbrains-cc-gui #1003; AWS Bedrock's "Adaptive thinking" guide); 4.6 takes both, adaptive
    preferred; xhigh arrived with 4.7."""
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}
    out = req({"model": "x", "messages": [user()], "reasoning_effort": effort, "max_tokens": 4000, "top_k": 5,
               "temperature": 0.3, "response_format": fmt}, Target(model))  # fmt: skip
    assert out["thinking"] == {"type": "adaptive"}
    assert out["output_config"] == {"effort": expected, "format": {"type": "json_schema", "schema": {
        "type": "object", "additionalProperties": False}}}  # fmt: skip
    assert "top_k" not in out and "temperature" not in out


@pytest.mark.parametrize("model", [
    "claude-sonnet-4-5-20250929", "claude-opus-4-1-20250805", "claude-haiku-4-5", "claude-3-7-sonnet-latest",
    "us.anthropic.claude-sonnet-4-20250514-v1:0", "claude-opus-4-20250514", "qwen3-coder",
])  # fmt: skip
def test_older_models_and_other_names_think_on_a_budget(model: str) -> None:
    out = req({"model": "x", "messages": [user()], "reasoning_effort": "low", "max_tokens": 4000}, Target(model))
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 2048} and "output_config" not in out


def test_text_format_is_ignored() -> None:
    out = req({"model": "m", "messages": [user()], "response_format": {"type": "text"}})
    assert "output_config" not in out and "system" not in out


def test_json_object_from_the_ai_sdks_generate_object_is_asked_in_words() -> None:
    """The AI SDK 7's generateObject on createOpenAICompatible sends json_object and no word of
    JSON (audit s68): dropped, Claude answered in prose and generateObject failed. Anthropic has
    no schema-less JSON mode, so the instructions end asking for one bare object."""
    payload = client_request("chat-ai-sdk-7-generate-object")
    assert payload["response_format"] == {"type": "json_object"}
    assert "json" not in json.dumps(payload["messages"]).lower()
    out = req(payload)
    assert "output_config" not in out
    assert out["system"] == [{"type": "text", "text": JSON_NOTE}]
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    # After the client's own instructions, which stay first.
    with_system = req({**payload, "messages": [{"role": "system", "content": "Be brief."}, *payload["messages"]]})
    assert with_system["system"] == [{"type": "text", "text": "Be brief."}, {"type": "text", "text": JSON_NOTE}]


def test_consecutive_same_role_messages_merge_and_empty_ones_vanish() -> None:
    out = req({"model": "m", "messages": [
        user("a"), {"role": "user", "content": [{"type": "text", "text": "b"}]}, {"role": "assistant", "content": ""},
        {"role": "assistant", "content": "c"}, {"role": "assistant", "content": [{"type": "text", "text": "d"}]},
    ]})  # fmt: skip
    assert out["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]},
    ]


def test_reasoning_content_of_an_earlier_turn_is_not_sent_back() -> None:
    out = req({"model": "m", "messages": [
        user(), {"role": "assistant", "content": "4", "reasoning_content": "2+2"}, user("ok")]})  # fmt: skip
    assert out["messages"][1] == {"role": "assistant", "content": [{"type": "text", "text": "4"}]}


def test_cache_control_on_a_text_part_is_anthropics_own_and_carried() -> None:
    marked = {"type": "text", "text": "long instructions", "cache_control": {"type": "ephemeral"}}
    out = req({"model": "m", "messages": [{"role": "system", "content": [marked]}, user()]})
    assert out["system"] == [marked]


def test_jpeg_named_image_jpg_goes_as_image_jpeg() -> None:
    """Anthropic takes only the registered name; clients (and Gemini) write both."""
    part = {"type": "image_url", "image_url": {"url": "data:image/jpg;base64,/9j/4AAQ"}}
    out = req({"model": "m", "messages": [{"role": "user", "content": [part]}]})
    assert out["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}]


def test_pdf_file_data_becomes_a_document() -> None:
    part = {"type": "file", "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64,JVBERi0x"}}
    out = req({"model": "m", "messages": [{"role": "user", "content": [part]}]})
    assert out["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}}]


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# The first bytes of each of the four types Anthropic reads.
MAGIC = {"image/jpeg": bytes.fromhex("ffd8ffe000104a464946000101"), "image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
         "image/gif": b"GIF89a\x01\x00\x01\x00\x80\x00", "image/webp": b"RIFF\x24\x00\x00\x00WEBPVP8 "}  # fmt: skip


def image_part(media_type: str, data: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": f"data:{media_type};base64,{data}"}}


@pytest.mark.parametrize(("said", "actual"), [
    ("image/png", "image/jpeg"), ("image/jpeg", "image/png"), ("image/png", "image/webp"), ("image/jpeg", "image/gif"),
    ("image/heic", "image/jpeg"), ("application/octet-stream", "image/png"), ("image/jpg", "image/png"),
])  # fmt: skip
def test_an_image_goes_as_the_type_its_bytes_are_claude_code_15746(said: str, actual: str) -> None:
    """JPEG bytes sent as ``data:image/png`` (a screenshot tool set to JPEG, a file named .png):
    OpenAI reads them, Anthropic answers "messages.6.content.5.image.source.base64.data: Image does
    not match the provided media type image/png" (claude-code #15746) on that turn and every later
    one. The bytes' signature says what they are."""
    data = b64(MAGIC[actual])
    out = req({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "what"},
                                                                       image_part(said, data)]}]})  # fmt: skip
    assert out["messages"][0]["content"][1] == {"type": "image", "source": {"type": "base64", "media_type": actual,
                                                                            "data": data}}  # fmt: skip
    assert messages_rules.refusal("/v1/messages", out, {}) is None


IMAGE_MAX = 5 * 1024 * 1024


def big_png(size: int) -> str:
    head = b64(MAGIC["image/png"])
    return head + "A" * (size - len(head))


def test_an_image_over_anthropics_5_mb_in_the_newest_turn_is_refused_naming_it() -> None:
    """Anthropic refuses an image whose base64 is over 5 MB ("image exceeds 5 MB maximum: 6275800
    bytes > 5242880 bytes", lobehub #14711); OpenAI takes it. The gateway cannot resize it: the
    turn that sends it is refused before any call, naming the part and the limit."""
    convo = [user("hi"), {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                          image_part("image/png", big_png(IMAGE_MAX + 1))]}]  # fmt: skip
    words = refused({"model": "m", "messages": convo})
    assert words.startswith("messages[2].content[1]: ") and f"{IMAGE_MAX + 1:,} bytes" in words, words
    assert "5 MB" in words and f"{IMAGE_MAX:,}" in words
    convo[2]["content"][1] = image_part("image/png", big_png(IMAGE_MAX))  # at the limit: taken
    assert req({"model": "m", "messages": convo})["messages"][2]["content"][1]["type"] == "image"


def test_an_image_over_5_mb_earlier_in_the_conversation_becomes_a_note_and_the_session_goes_on() -> None:
    """Refused there, it would fail every later turn of the session, which keeps it in its history
    (Claude Code's sessions stuck on it: claude-code #12167, #20021): the model is told instead."""
    big = image_part("image/png", big_png(IMAGE_MAX + 1))
    convo = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, big]},
             {"role": "assistant", "content": "I could not see it."}, user("and now?")]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    note = (f"[image (image/png) left out: its {IMAGE_MAX + 1:,} bytes of base64 are over the 5 MB "
            f"({IMAGE_MAX:,} bytes) Anthropic takes per image]")
    assert out["messages"][0]["content"] == [{"type": "text", "text": "what is this?"}, {"type": "text", "text": note}]
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    convo.append({"role": "user", "content": [big]})  # the same image sent again, now: refused
    assert refused({"model": "m", "messages": convo}).startswith("messages[3].content[0]: ")


def shot(width: int, height: int = 2) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": images.data_url("image/png", images.png(width, height))}}


def test_an_image_over_8000_pixels_a_side_is_refused_now_and_a_note_in_history() -> None:
    """"messages.7.content.2.image.source.base64.data: At least one of the image dimensions exceed
    max allowed size: 8000 pixels" (claude-code #5147, #4778), for a file well under 5 MB: refused
    the way one too large in bytes is, naming the part and its size; a note once in the history."""
    convo = [user("hi"), {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": [{"type": "text", "text": "read this page"}, shot(8001)]}]  # fmt: skip
    words = refused({"model": "m", "messages": convo})
    assert words == ("messages[2].content[1]: the image is 8001x2 pixels, over the 8,000 pixels a side Anthropic "
                     "takes, and the gateway cannot make it smaller: resize it and send it again"), words
    tall = images.data_url("image/jpeg", images.jpeg(width=600, height=8001))
    convo[2]["content"][1] = {"type": "image_url", "image_url": {"url": tall}}
    assert refused({"model": "m", "messages": convo}).startswith("messages[2].content[1]: the image is 600x8001 pixels")
    convo[2]["content"][1] = shot(8000)  # at the limit: taken
    assert req({"model": "m", "messages": convo})["messages"][2]["content"][1]["type"] == "image"
    later = [{"role": "user", "content": [shot(8001)]}, {"role": "assistant", "content": "A page."}, user("thanks")]
    out = req({"model": "m", "messages": later})
    note = "[image (image/png) left out: its 8001x2 pixels are over the 8,000 a side Anthropic takes]"
    assert out["messages"][0]["content"] == [{"type": "text", "text": note}]
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_in_a_request_of_more_than_20_images_a_side_over_2000_is_refused_now_and_a_note_in_history() -> None:
    """"messages.108.content.3.image.source.base64.data: At least one of the image dimensions exceed
    max allowed size for many-image requests: 2000 pixels" (claude-code #49537, #52220): an agent's
    21st screenshot makes every earlier one of over 2000 pixels a refusal, turn after turn."""
    shots = [shot(2001)] + [shot(100) for _ in range(19)]
    history = [{"role": "user", "content": shots}, {"role": "assistant", "content": "Seen."}]
    assert req({"model": "m", "messages": [*history, user("and?")]})["messages"][0]["content"][0]["type"] == "image"
    out = req({"model": "m", "messages": [*history, {"role": "user", "content": [shot(100)]}]})  # the 21st
    note = ("[image (image/png) left out: its 2001x2 pixels are over the 2,000 a side Anthropic takes in a request "
            "of more than 20 images]")
    assert out["messages"][0]["content"][0] == {"type": "text", "text": note}
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    words = refused({"model": "m", "messages": [*history, {"role": "user", "content": [shot(100), shot(2001)]}]})
    assert words == ("messages[2].content[1]: the image is 2001x2 pixels, over the 2,000 pixels a side Anthropic "
                     "takes in a request of more than 20 images, and the gateway cannot make it smaller: resize it "
                     "and send it again"), words


RETINA = images.data_url("image/png", images.png(2880, 1800))  # a MacBook's screenshot


def screenshots(turns: int) -> list[dict[str, Any]]:
    """A session of ``turns`` answered turns, each with a Retina screenshot."""
    part = {"type": "image_url", "image_url": {"url": RETINA}}
    return [m for k in range(turns) for m in ({"role": "user", "content": [{"type": "text", "text": f"shot {k}"}, part]},
                                              {"role": "assistant", "content": "Seen."})]  # fmt: skip


def kinds(out: dict[str, Any]) -> list[str]:
    return [b["type"] if b["type"] == "image" or not b["text"].startswith("[image") else "note"
            for m in out["messages"] for b in m["content"] if b["type"] in ("image", "text")]  # fmt: skip


def test_a_21st_screenshot_is_sent_and_only_the_oldest_earlier_one_becomes_a_note() -> None:
    """The 2000-pixel limit holds for the images sent: the 21st Retina screenshot (2880x1800) of a
    session was refused, counted with the 20 earlier ones that it then made notes; and a small
    21st made all 20 notes, where leaving out the oldest keeps the request at 20 (review)."""
    for last in (RETINA, images.data_url("image/png", images.png(500, 500))):
        convo = [*screenshots(20), {"role": "user", "content": [{"type": "image_url", "image_url": {"url": last}}]}]
        out = req({"model": "m", "messages": convo})
        assert [k for k in kinds(out) if k != "text"] == ["note"] + ["image"] * 20
        assert out["messages"][0]["content"][1]["text"] == (
            "[image (image/png) left out: its 2880x1800 pixels are over the 2,000 a side Anthropic takes in a "
            "request of more than 20 images]")
        assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_an_earlier_image_left_out_for_its_bytes_does_not_count_toward_the_20() -> None:
    """A note is no image: 19 small images, one of 6 MB noted, and a screenshot asked about now
    are 20 images, under the 8000-pixel limit (it was refused for the 2000 one)."""
    small = [{"type": "image_url", "image_url": {"url": images.data_url("image/png", images.png(10, 10))}}] * 19
    big = image_part("image/png", big_png(IMAGE_MAX + 1))
    convo = [{"role": "user", "content": [*small, big]}, {"role": "assistant", "content": "Seen."},
             {"role": "user", "content": [{"type": "image_url", "image_url": {"url": RETINA}}]}]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    assert kinds(out).count("image") == 20 and kinds(out).count("note") == 1
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_over_100_images_the_oldest_earlier_ones_become_notes_url_ones_too() -> None:
    """Anthropic takes 100 images a request on a 200k-context model ("Too much media: 0 document
    pages + 103 images > 100", claude-code #3397, #19822): a session of 102 small screenshots, the
    oldest given by URL, failed every later turn. The two oldest are notes now, 100 go."""
    small = images.data_url("image/png", images.png(10, 10))
    parts = [{"type": "image_url", "image_url": {"url": "https://example.com/first.png"}}]
    parts += [{"type": "image_url", "image_url": {"url": small}}] * 100
    convo = [{"role": "user", "content": parts}, {"role": "assistant", "content": "Seen."},
             {"role": "user", "content": [{"type": "image_url", "image_url": {"url": small}}]}]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    assert kinds(out).count("image") == 100 and kinds(out)[:2] == ["note", "note"]
    assert out["messages"][0]["content"][0]["text"] == (
        "[image (by URL) left out: the conversation holds more than the 100 images Anthropic takes in a "
        "request, and the oldest go first]")


@pytest.mark.parametrize(("media_type", "text"), [
    ("text/plain", "alpha\nbeta"), ("text/markdown", "# Title\n\nbody"), ("text/csv", "a,b\n1,2"),
    ("application/json", '{"a": 1}'), ("text/plain", "caf\u00e9 \u2014 na\u00efve"),
])  # fmt: skip
def test_a_text_file_becomes_a_plain_text_document(media_type: str, text: str) -> None:
    """Anthropic's document block takes plain text (``{type: text, media_type: text/plain, data}``,
    the SDK's PlainTextSource) as well as a PDF; it was refused ("only a PDF ... not a file id")."""
    part = {"type": "file", "file": {"filename": "notes", "file_data": f"data:{media_type};base64,{b64(text.encode())}"}}
    out = req({"model": "m", "messages": [{"role": "user", "content": [part, {"type": "text", "text": "sum up"}]}]})
    assert out["messages"][0]["content"][0] == {
        "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": text}}
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_a_file_by_url_becomes_a_url_document() -> None:
    """Anthropic fetches a PDF by its URL (URLPDFSource); a Responses ``input_file`` by ``file_url``
    reaches this translator so."""
    part = {"type": "file", "file": {"file_url": "https://example.com/report.pdf"}}
    out = req({"model": "m", "messages": [{"role": "user", "content": [part]}]})
    assert out["messages"][0]["content"] == [
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}}]


@pytest.mark.parametrize(("file", "says", "not_said"), [
    ({"file_data": "data:application/zip;base64,UEsDBA=="}, "application/zip", "file id"),
    ({"file_data": "UEsDBA==", "filename": "a.zip"}, "data URL", "file id"),
    ({"filename": "a.pdf"}, "file_data", "file id"),
    ({"file_id": "file-abc"}, "file_id", "data URL (data:"),
])  # fmt: skip
def test_a_file_claude_cannot_read_is_refused_saying_why(file: dict[str, Any], says: str, not_said: str) -> None:
    """It said "only a PDF as file_data ... can be carried, not a file id" whatever was sent."""
    words = refused({"model": "m", "messages": [user(), {"role": "user", "content": [{"type": "file", "file": file}]}]})
    assert words.startswith("messages[1].content[0]: ") and says in words and not_said not in words, words


@pytest.mark.parametrize("arguments", ['{"command": "echo hi", ', "{bad", "[1, 2]", '"ls"', "null"])
def test_a_call_whose_arguments_are_no_json_object_goes_with_its_text_openai_agents_2061(arguments: str) -> None:
    """Cut short by max_tokens, or a model's malformed output: OpenAI keeps arguments as an
    opaque string, so the history is valid in the client's API, and refusing it stuck the
    session for good (openai-agents-python #2061, livekit/agents #6308). Anthropic needs an
    object: the text goes in one, for the model to see what it wrote."""
    convo = [user(), {"role": "assistant", "content": None, "tool_calls": [call("c1", name="sh", arguments=arguments)]},
             {"role": "tool", "tool_call_id": "c1", "content": "error: the arguments are not valid JSON"}, user("again")]
    out = req({"model": "m", "messages": convo})
    assert out["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "sh", "input": {"unparsed_arguments": arguments}}]
    assert out["messages"][2]["content"][0]["type"] == "tool_result"


def test_a_call_with_arguments_of_the_wrong_json_type_is_refused() -> None:
    """A string is what the chat API takes; a number is the client's mistake, named."""
    message = {"role": "assistant", "content": None, "tool_calls": [call("c1")]}
    message["tool_calls"][0]["function"]["arguments"] = 3
    assert "JSON object" in refused({"model": "m", "messages": [user(), message]})


@pytest.mark.parametrize(("message", "words"), [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/bmp;base64,Qk0="}}]},
     "image/bmp"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}, "http(s)"),
    ({"role": "user", "content": [{"type": "file", "file": {"file_id": "file-abc"}}]}, "file id"),
    ({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}]},
     "'input_audio'"),
    ({"role": "function", "name": "f", "content": "x"}, "role 'function'"),
])  # fmt: skip
def test_what_cannot_be_carried_is_refused_with_a_clear_message(message: dict[str, Any], words: str) -> None:
    assert words in refused({"model": "m", "messages": [user(), message]})


def test_legacy_functions_and_non_function_tools_are_refused() -> None:
    assert "tools" in refused({"model": "m", "messages": [user()], "functions": [{"name": "f"}]})
    assert "tools[0]" in refused({"model": "m", "messages": [user()], "tools": [{"type": "custom", "custom": {}}]})


@pytest.mark.parametrize("client_id", ["call_abc123", "functions.get_weather:0", "tool call #1", "gwid_x", "",
                                       "call_1\n"])  # fmt: skip
def test_tool_ids_are_mapped_reversibly_and_consistently(client_id: str) -> None:
    """Anthropic: "messages.92.content.0.tool_use.id: String should match pattern
    '^[a-zA-Z0-9_-]+$'" (ClawRouter #17), the whole id: a final newline is no letter."""
    mapped = to_anthropic_id(client_id)
    assert from_anthropic_id(mapped) == client_id
    assert mapped.replace("-", "").replace("_", "").isalnum()
    out = req({"model": "m", "messages": [
        user(), {"role": "assistant", "content": None, "tool_calls": [call(client_id)]},
        {"role": "tool", "tool_call_id": client_id, "content": "ok"}]})  # fmt: skip
    assert out["messages"][1]["content"][0]["id"] == out["messages"][2]["content"][0]["tool_use_id"] == mapped
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def unnamed(city: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


@pytest.mark.parametrize(("first", "second", "answers"), [
    (call("call_0"), call("call_0", arguments='{"city": "Rome"}'), ("call_0", "call_0")),
    (call(""), call("", arguments='{"city": "Rome"}'), ("", "")),
    (unnamed("Paris"), unnamed("Rome"), (None, None)),  # a server that gives calls no id at all
    (call("x"), call("x", arguments='{"city": "Rome"}'), ("x", "x")),
])  # fmt: skip
def test_two_calls_of_one_turn_under_one_id_are_told_apart_trycua_524(
    first: dict[str, Any], second: dict[str, Any], answers: tuple[str | None, str | None]
) -> None:
    """Anthropic: "messages.1.content.1: `tool_use` ids must be unique". The results answer the
    calls in order, as chat pairs them when the ids say nothing."""
    results = [{"role": "tool", "content": text, **({} if a is None else {"tool_call_id": a})}
               for a, text in zip(answers, ("Paris: 18C", "Rome: 24C"), strict=True)]  # fmt: skip
    convo = [user(), {"role": "assistant", "content": None, "tool_calls": [first, second]}, *results, user("and?")]
    out = req({"model": "m", "tools": [WEATHER], "messages": convo})
    calls, answered = out["messages"][1]["content"], out["messages"][2]["content"]
    assert len({c["id"] for c in calls}) == 2 and calls[0]["id"] == to_anthropic_id(answers[0] or "")
    assert [r["tool_use_id"] for r in answered[:2]] == [c["id"] for c in calls]
    assert [c["input"]["city"] for c in calls] == ["Paris", "Rome"]
    assert [r["content"] for r in answered[:2]] == ["Paris: 18C", "Rome: 24C"]
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    assert req({"model": "m", "tools": [WEATHER], "messages": convo}) == out  # the same ids every time


def test_a_renamed_call_takes_a_suffix_no_other_call_of_its_turn_has() -> None:
    convo = [user(), {"role": "assistant", "content": None, "tool_calls": [call("a"), call("a"), call("a_2")]},
             *({"role": "tool", "tool_call_id": i, "content": "ok"} for i in ("a", "a", "a_2"))]  # fmt: skip
    out = req({"model": "m", "tools": [WEATHER], "messages": convo})
    assert [c["id"] for c in out["messages"][1]["content"]] == ["a", "a_3", "a_2"]
    assert [r["tool_use_id"] for r in out["messages"][2]["content"]] == ["a", "a_3", "a_2"]
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_one_id_in_two_turns_is_left_as_it_is() -> None:
    """Anthropic takes an id used again in a later turn (gateway/fake/messages_rules.py)."""
    rounds = [user(), {"role": "assistant", "content": None, "tool_calls": [call("call_0")]},
              {"role": "tool", "tool_call_id": "call_0", "content": "18C"},
              {"role": "assistant", "content": None, "tool_calls": [call("call_0")]},
              {"role": "tool", "tool_call_id": "call_0", "content": "19C"}]  # fmt: skip
    out = req({"model": "m", "tools": [WEATHER], "messages": rounds})
    assert {b.get("id") or b.get("tool_use_id") for t in out["messages"][1:] for b in t["content"]} == {"call_0"}


def test_tool_parameters_that_leave_the_type_unsaid_are_an_object_kilocode_12238() -> None:
    """Anthropic: "tools.0.custom.input_schema.type: Field required"."""
    typeless = {"type": "function", "function": {"name": "f", "parameters": {"properties": {"q": {"type": "string"}}}}}
    out = req({"model": "m", "tools": [typeless], "messages": [user()]})
    assert out["tools"][0]["input_schema"] == {"type": "object", "properties": {"q": {"type": "string"}}}
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def marked(text: str, ttl: str | None = None) -> dict[str, Any]:
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}}


def test_a_one_hour_breakpoint_the_system_text_moved_ahead_of_is_sent_as_five_minutes() -> None:
    """Anthropic: "a ttl='1h' cache_control block must not come after a ttl='5m' cache_control
    block. Note that blocks are processed in the following order: `tools`, `system`, `messages`."
    (claude-code-cache-fix #44). A system message late in the conversation goes ahead of it."""
    convo = [{"role": "user", "content": [marked("long context", "1h")]}, {"role": "assistant", "content": "ok"},
             {"role": "system", "content": [marked("rules")]}, user("go")]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    assert out["system"] == [marked("rules")]
    assert out["messages"][0]["content"] == [marked("long context", "5m")]
    assert convo[0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}  # the client's untouched
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    in_order = [{"role": "system", "content": [marked("rules", "1h")]}, {"role": "user", "content": [marked("hi")]}]
    out = req({"model": "m", "messages": in_order})
    assert out["system"] == [marked("rules", "1h")] and out["messages"][0]["content"] == [marked("hi")]


def test_only_the_last_four_breakpoints_go_to_anthropic() -> None:
    """Anthropic takes at most four blocks with cache_control ("A maximum of 4 blocks with
    cache_control may be provided. Found 5."). A client that marks each system part and its
    newest user parts (the audit's openai SDK request: two system parts, three user parts) got
    that 400 on every call. The latest four stay, in Anthropic's order (tools, system, messages):
    they are the ones a growing conversation reads most of from the cache."""
    convo = [{"role": "system", "content": [marked("sys A"), marked("sys B")]},
             {"role": "user", "content": [marked("u1")]}, {"role": "assistant", "content": "a1"},
             {"role": "user", "content": [marked("u2"), marked("u3")]}]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    assert out["system"] == [{"type": "text", "text": "sys A"}, marked("sys B")]
    assert out["messages"][0]["content"] == [marked("u1")] and out["messages"][2]["content"] == [marked("u2"), marked("u3")]
    assert "cache_control" not in out  # the client's own breakpoints: no automatic one beside them
    assert convo[0]["content"][0]["cache_control"] == {"type": "ephemeral"}  # the client's untouched
    assert messages_rules.refusal("/v1/messages", out, {}) is None


def test_a_tool_results_breakpoints_count_among_the_four_and_the_ttl_order_holds_after() -> None:
    """A tool result's own text parts carry the client's markers too, and count. Once the
    earlier markers are gone a one-hour one that followed only them keeps its hour."""
    convo = [{"role": "system", "content": [marked("rules")]},
             {"role": "user", "content": [marked("ctx", "1h")]},
             {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
             {"role": "tool", "tool_call_id": "call_1", "content": [marked("r1", "1h"), marked("r2", "1h")]},
             {"role": "user", "content": [marked("go", "1h")]}]  # fmt: skip
    out = req({"model": "m", "messages": convo})
    assert out["system"] == [{"type": "text", "text": "rules"}]
    assert out["messages"][0]["content"] == [marked("ctx", "1h")]
    assert out["messages"][2]["content"][0]["content"] == [marked("r1", "1h"), marked("r2", "1h")]
    assert out["messages"][2]["content"][1] == marked("go", "1h")
    assert messages_rules.refusal("/v1/messages", out, {}) is None


# --- buffered answers -------------------------------------------------------------------------


def ctx(include_usage: bool = False, model: str = "gpt-4o-mini") -> Context:
    options = {"stream_options": {"include_usage": True}} if include_usage else {}
    return Context(requested_model=model, request={"model": model, "messages": [], **options}, request_id="req_1")


def test_answer_api_reference_example() -> None:
    doc = corpus("answers", "messages-api-reference-example")["body"]
    out = T.answer(doc, ctx())
    assert out == {
        "id": "chatcmpl-msg_013Zva2CMHLNnXjNJJKqJ2EF", "object": "chat.completion", "created": 1_764_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi! My name is Claude."},
                     "logprobs": None, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 2095 + 2051 + 2051, "completion_tokens": 503, "total_tokens": 6197 + 503,
                  "prompt_tokens_details": {"cached_tokens": 2051, "cache_write_tokens": 2051},
                  "completion_tokens_details": {"reasoning_tokens": 0}},
    }  # fmt: skip


def test_answer_thinking_and_tool_use() -> None:
    doc = corpus("answers", "messages-thinking-then-tool-use")["body"]
    message = T.answer(doc, ctx())["choices"][0]["message"]
    assert message["content"] is None
    assert message["reasoning_content"] == doc["content"][0]["thinking"]
    assert message["tool_calls"] == [{"id": "toolu_014azqsWLU8Djh6RhmBGRC2u", "type": "function", "function": {
        "name": "weather", "arguments": '{"location": "Florence, Italy"}'}}]  # fmt: skip
    assert T.answer(doc, ctx())["choices"][0]["finish_reason"] == "tool_calls"
    [signed] = message["thinking_blocks"]
    assert signed == {"type": "thinking", "thinking": doc["content"][0]["thinking"],
                      "signature": doc["content"][0]["signature"]}  # fmt: skip


def test_answer_carries_redacted_thinking_and_leaves_unsigned_thinking_out() -> None:
    doc = {"id": "msg_1", "content": [{"type": "redacted_thinking", "data": "EmwKAhgB"},
                                      {"type": "thinking", "thinking": "no signature", "signature": ""},
                                      {"type": "text", "text": "hi"}], "stop_reason": "end_turn"}  # fmt: skip
    message = T.answer(doc, ctx())["choices"][0]["message"]
    assert message["thinking_blocks"] == [{"type": "redacted_thinking", "data": "EmwKAhgB"}]


def test_streamed_signed_thinking_comes_whole_when_its_block_closes() -> None:
    events = upstream_events("messages-stream-thinking-then-tool-use")
    _, body = translate(events, ctx())
    docs = [e.json() for e in map(parse_event, EventSplitter().feed(body)) if not e.is_done]
    carried = [d["choices"][0]["delta"]["thinking_blocks"] for d in docs if "thinking_blocks" in d["choices"][0]["delta"]]
    [[block]] = carried
    assert block["index"] == 0 and block["type"] == "thinking" and block["signature"] and block["thinking"]


@pytest.mark.parametrize(("stop_reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
    ("refusal", "content_filter"), ("pause_turn", "stop"), ("model_context_window_exceeded", "length"), (None, "stop"),
])  # fmt: skip
def test_finish_reasons(stop_reason: str | None, finish: str) -> None:
    doc = copy.deepcopy(corpus("answers", "messages-text-after-tool-result")["body"])
    doc["stop_reason"] = stop_reason
    assert T.answer(doc, ctx())["choices"][0]["finish_reason"] == finish


def test_answer_maps_encoded_tool_ids_back() -> None:
    doc = copy.deepcopy(corpus("answers", "messages-thinking-then-tool-use")["body"])
    doc["content"][1]["id"] = to_anthropic_id("functions.weather:0")
    assert T.answer(doc, ctx())["choices"][0]["message"]["tool_calls"][0]["id"] == "functions.weather:0"


# --- streams ----------------------------------------------------------------------------------

STREAMS = ["messages-stream-sdk-text-then-tool", "messages-stream-thinking-then-tool-use",
           "messages-stream-text-after-tool-result", "messages-stream-text-then-two-tools"]  # fmt: skip


def upstream_events(name: str) -> list[bytes]:
    return EventSplitter().feed(corpus("answers", name)["body"].encode().rstrip(b"\n") + b"\n\n")


def translate(events: list[bytes], c: Context, *, close: bool = True) -> tuple[list[bytes], bytes]:
    s = T.stream(c)
    per_event = [s.event(e) for e in events]
    return per_event, b"".join(per_event) + (s.close() if close else b"")


def _serving(body: bytes) -> httpx2.Client:
    def reply(_: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    return httpx2.Client(transport=httpx2.MockTransport(reply))


def openai_final(body: bytes, include_usage: bool) -> Any:
    client = openai.OpenAI(api_key="k", base_url="http://gateway/v1", http_client=_serving(body), max_retries=0)
    options: Any = {"include_usage": True} if include_usage else openai.omit
    with client.chat.completions.stream(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                        stream_options=options) as stream:  # fmt: skip
        return stream.get_final_completion()


def anthropic_final(name: str) -> dict[str, Any]:
    body = b"".join(upstream_events(name))
    client = anthropic.Anthropic(api_key="k", base_url="http://up", http_client=_serving(body), max_retries=0)
    with client.messages.stream(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}]) as s:
        return s.get_final_message().to_dict()


@pytest.mark.parametrize("name", STREAMS)
def test_stream_read_by_the_openai_sdk_agrees_with_the_buffered_translation(name: str) -> None:
    _, body = translate(upstream_events(name), ctx(include_usage=True))
    got = openai_final(body, include_usage=True)
    want = T.answer(anthropic_final(name), ctx())
    assert got.id == want["id"] and got.model == "gpt-4o-mini"
    choice, expected = got.choices[0], want["choices"][0]
    assert choice.finish_reason == expected["finish_reason"]
    assert (choice.message.content or None) == expected["message"]["content"]
    assert getattr(choice.message, "reasoning_content", None) == expected["message"].get("reasoning_content")
    streamed = [{k: v for k, v in b.items() if k != "index"} for b in getattr(choice.message, "thinking_blocks", [])]
    assert streamed == expected["message"].get("thinking_blocks", [])
    calls = [{"id": c.id, "type": c.type, "function": {"name": c.function.name, "arguments": c.function.arguments}}
             for c in choice.message.tool_calls or []]  # fmt: skip
    assert [c["id"] for c in calls] == [c["id"] for c in expected["message"].get("tool_calls", [])]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [
        json.loads(c["function"]["arguments"]) for c in expected["message"].get("tool_calls", [])]
    assert got.usage is not None and got.usage.model_dump(exclude_none=True) == want["usage"]


@pytest.mark.parametrize("name", STREAMS)
def test_stream_grammar(name: str) -> None:
    events = upstream_events(name)
    per_event, body = translate(events, ctx(include_usage=True))
    chunks = [parse_event(e) for e in EventSplitter().feed(body)]
    assert chunks[-1].is_done and sum(c.is_done for c in chunks) == 1
    docs = [c.json() for c in chunks[:-1]]
    assert docs[0]["choices"][0]["delta"]["role"] == "assistant"
    assert [d["choices"][0]["finish_reason"] for d in docs if d["choices"]].count(None) == len(docs) - 2
    assert docs[-1]["choices"] == [] and docs[-1]["usage"]["total_tokens"] > 0  # the usage chunk, last
    assert all(d["object"] == "chat.completion.chunk" and d["model"] == "gpt-4o-mini" for d in docs)
    # Unbuffered: every upstream delta that shows something gives its chunk at once.
    for raw, out in zip(events, per_event, strict=True):
        doc = parse_event(raw).json()
        delta = doc.get("delta") if isinstance(doc, dict) else None
        if isinstance(delta, dict) and (delta.get("text") or delta.get("thinking") or delta.get("partial_json")):
            assert out, raw
    # Tool calls: index, id, type and name come first, arguments after.
    firsts: dict[int, dict[str, Any]] = {}
    for d in docs[:-1]:
        for tc in d["choices"][0]["delta"].get("tool_calls", []):
            if tc["index"] not in firsts:
                firsts[tc["index"]] = tc
                assert tc["id"] and tc["type"] == "function" and tc["function"]["name"]
            else:
                assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
    assert sorted(firsts) == list(range(len(firsts)))


def test_no_usage_chunk_unless_asked_but_usage_noted() -> None:
    c = ctx(include_usage=False)
    _, body = translate(upstream_events("messages-stream-sdk-text-then-tool"), c)
    docs = [e.json() for e in map(parse_event, EventSplitter().feed(body)) if not e.is_done]
    assert all(d["choices"] for d in docs)
    assert c.notes["usage"] == {"prompt": 377, "completion": 65}
    assert openai_final(body, include_usage=False).usage is None


def test_thinking_delta_inside_a_text_block_is_reasoning_litellm_33224() -> None:
    events = upstream_events("messages-stream-text-after-tool-result")
    stray = (b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
             b'"delta":{"type":"thinking_delta","thinking":"hmm"}}\n\n')  # fmt: skip
    s = T.stream(ctx())
    for e in events[:3]:
        s.event(e)
    out = parse_event(s.event(stray)).json()
    assert out["choices"][0]["delta"] == {"reasoning_content": "hmm"}


def test_encoded_tool_ids_come_back_in_the_stream() -> None:
    events = upstream_events("messages-stream-sdk-text-then-tool")
    encoded = to_anthropic_id("functions.get_weather:0")
    events = [e.replace(b"toolu_01NRLabsLyVHZPKxbKvkfSMn", encoded.encode()) for e in events]
    _, body = translate(events, ctx())
    tool_calls = openai_final(body, include_usage=False).choices[0].message.tool_calls
    assert tool_calls is not None and tool_calls[0].id == "functions.get_weather:0"


def _messages_sse(*events: dict[str, Any]) -> list[bytes]:
    return [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events]


def _no_argument_call(*, empty_fragment: bool, block_stop: bool) -> list[bytes]:
    """A call to a tool without parameters as Anthropic streams it: ``input: {}`` at the
    block's start, then one empty ``input_json_delta`` or none."""
    start = {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
             "model": "m", "content": [], "stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1}}}
    begin = {"type": "content_block_start", "index": 0,
             "content_block": {"type": "tool_use", "id": "toolu_N", "name": "noargs", "input": {}}}
    fragment = {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}
    end = [{"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
           {"type": "message_stop"}]  # fmt: skip
    return _messages_sse(start, begin, *([fragment] if empty_fragment else []),
                         *([{"type": "content_block_stop", "index": 0}] if block_stop else []), *end)  # fmt: skip


@pytest.mark.parametrize(("empty_fragment", "block_stop"), [(False, True), (True, True), (False, False)])
def test_a_streamed_call_without_arguments_ends_with_an_empty_object(empty_fragment: bool, block_stop: bool) -> None:
    """The buffered answer gives ``{}``; the stream gave ``""``, which clients parsing the
    arguments as JSON (the openai SDK's ``responses.stream()`` with a strict tool) raise on."""
    _, body = translate(_no_argument_call(empty_fragment=empty_fragment, block_stop=block_stop), ctx())
    [call] = openai_final(body, include_usage=False).choices[0].message.tool_calls
    assert call.function.name == "noargs" and call.function.arguments == "{}"
    fragments = [tc["function"].get("arguments") for d in data_chunks(body) for ch in d["choices"]
                 for tc in ch["delta"].get("tool_calls") or []]  # fmt: skip
    assert fragments == ["", "{}"]  # named first, as every call; the empty object once


def data_chunks(body: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in body.decode().split("\n") if line.startswith("data: {")]


def test_close_completes_a_stream_once() -> None:
    events = upstream_events("messages-stream-sdk-text-then-tool")
    s = T.stream(ctx())
    body = b"".join(s.event(e) for e in events)
    assert body.endswith(b"data: [DONE]\n\n") and s.close() == b""
    s = T.stream(ctx())
    cut = b"".join(s.event(e) for e in events[:-2]) + s.close()  # no message_delta / message_stop seen
    final = openai_final(cut, include_usage=False)
    assert final.choices[0].finish_reason == "stop" and cut.count(b"[DONE]") == 1


def test_broken_stream_ends_in_the_chat_error_chunk_without_done() -> None:
    events = upstream_events("messages-stream-sdk-text-then-tool")
    s = T.stream(ctx())
    shown = b"".join(s.event(e) for e in events[:5])
    ending = Ending(Classification(ErrorType.PROVIDER_UNAVAILABLE, retryable=True), "upstream went away", None)
    last = s.broken(ending)
    assert b"[DONE]" not in last and s.event(events[-1]) == b"" and s.close() == b""
    doc = parse_event(last).json()
    assert doc["id"] == "chatcmpl-msg_019Q1hrJbZG26Fb9BQhrkHEr" and doc["model"] == "gpt-4o-mini"
    assert doc["choices"] == [{"index": 0, "delta": {}, "finish_reason": "error"}]
    assert doc["error"]["message"] == "upstream went away" and doc["error"]["x_llm_error_type"] == "provider_unavailable"
    assert shown and b"[DONE]" not in shown


@pytest.mark.parametrize("raw", [
    b'event: content_block_delta\r\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hi"}}\r\n\r\n',
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,\n'
    b'data: "delta":{"type":"text_delta","text":"Hi"}}\n\n',
    b'data:{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n',
])  # fmt: skip
def test_any_sse_framing_of_an_event_is_read(raw: bytes) -> None:
    s = T.stream(ctx())
    s.event(upstream_events("messages-stream-sdk-text-then-tool")[0])
    assert parse_event(s.event(raw)).json()["choices"][0]["delta"] == {"content": "Hi"}


# --- every chat conversation the chat API takes becomes one the Messages API takes ------------


def _chat_conversation(r: random.Random) -> list[dict[str, Any]]:
    """A conversation OpenAI's chat API takes: tool rounds answered in any order, empty and
    blank contents, consecutive turns of one role, system and developer turns anywhere, an
    answer ending in whitespace."""
    empty_parts = [{"type": "text", "text": r.choice(["", " ", "\n\n"])}]
    msgs: list[dict[str, Any]] = []
    if r.random() < 0.5:
        msgs.append({"role": "system", "content": r.choice(["be brief", "", [{"type": "text", "text": "sys"}]])})
    msgs.append({"role": "user", "content": r.choice(["hi", "", [{"type": "text", "text": "hey"}]])})
    for _ in range(r.randint(0, 6)):
        kind = r.choice(["user", "assistant", "tool_round", "system", "developer"])
        if kind == "user":
            msgs.append({"role": "user", "content": r.choice(["hi", "", empty_parts, [*empty_parts, {"type": "text", "text": "x"}]])})
        elif kind == "assistant":
            msgs.append({"role": "assistant", "content": r.choice(["ok", "", None, empty_parts, "\n\n", "ok \n"])})
        elif kind == "tool_round":
            calls = [{"id": f"call_{r.randint(0, 99999)}", "type": "function",
                      "function": {"name": "f", "arguments": r.choice(['{"a":1}', "", "{}"])}}
                     for _ in range(r.randint(1, 3))]  # fmt: skip
            msgs.append({"role": "assistant", "content": r.choice([None, "", "calling", empty_parts, "\n\n"]),
                         "tool_calls": calls})  # fmt: skip
            for c in r.sample(calls, len(calls)):
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": r.choice(["res", "", empty_parts])})
        else:
            msgs.append({"role": kind, "content": r.choice(["mid", ""])})
    return msgs


@pytest.mark.parametrize("seed", range(0, 4000, 500))
def test_a_conversation_the_chat_api_takes_is_sent_as_one_anthropic_takes_or_refused(seed: int) -> None:
    """Held to Anthropic's rules on a conversation's shape (gateway/fake/messages_rules.py): a
    request the real API would refuse must never leave the gateway translated."""
    for k in range(seed, seed + 500):
        r = random.Random(k)
        payload: dict[str, Any] = {"model": "gpt-4o", "messages": _chat_conversation(r)}
        if r.random() < 0.5:
            payload["tools"] = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
        # The request's knobs Anthropic also holds to rules: blank stops, thinking with sampling.
        payload |= r.choice([{}, {"stop": ["\n"]}, {"stop": [" ", "END"]}, {"user": "a@b.co"}])
        payload |= r.choice([{}, {"reasoning_effort": "high", "max_tokens": 20000, "top_k": 3, "top_p": 0.5}])
        model = r.choice([TARGET, Target("claude-opus-4-8")])
        out = T.request(payload, model)
        if isinstance(out, Refusal):
            assert "no content" in out.message, (k, out.message)
            continue
        assert messages_rules.refusal("/v1/messages", out, {}) is None, (k, payload["messages"], out["messages"])


def test_a_conversation_with_nothing_in_it_is_refused_before_any_call() -> None:
    # Its empty messages vanish, and Anthropic refuses a request with none left.
    message = refused({"model": "gpt-4o", "messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]})
    assert "no content" in message


def test_a_conversation_ending_on_the_assistant_asks_the_newer_models_to_go_on() -> None:
    """Claude 4.6 and later refuse a prefill ("This model does not support assistant message
    prefill. The conversation must end with a user message.", opencode-dynamic-context-pruning
    #520); a chat conversation may end on the assistant, which OpenAI answers with the next turn."""
    convo = [user("write JSON"), {"role": "assistant", "content": "{"}]
    out = req({"model": "x", "messages": convo}, Target("claude-opus-4-8"))
    assert out["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "Continue."}]}
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    older = req({"model": "x", "messages": convo}, Target("claude-sonnet-4-5"))
    assert older["messages"][-1]["role"] == "assistant"  # a prefill it continues


# The audit fuzz's crashes on this direction (each a 500 internal_error), one per site, and the
# other fields it reads: a 400 naming the field as OpenAI does. The sweep over every field and
# type is tests/unit/translate/test_wrong_types.py.
@pytest.mark.parametrize(("field", "value", "says"), [
    ("messages.0.content", 5, "Invalid type for 'messages[0].content': expected one of a string or an array, "
                              "but got an integer instead."),
    ("messages.1.content", -1, "'messages[1].content': expected one of a string or an array, but got an integer"),
    ("messages.1.content.0.text", {"a": 1}, "'messages[1].content[0].text': expected a string, but got an object"),
    ("messages.2.tool_calls", True, "'messages[2].tool_calls': expected an array, but got a boolean"),
    ("messages.2.tool_calls.0", 5, "'messages[2].tool_calls[0]': expected an object, but got an integer"),
    ("messages.2.tool_calls.0.function.name", 5, "'messages[2].tool_calls[0].function.name': expected a string"),
    ("messages.3.content", {"a": 1}, "'messages[3].content': expected one of a string or an array, but got an object"),
    ("tools", "x", "'tools': expected an array, but got a string"),
    ("tools.0", [5], "'tools[0]': expected an object, but got an array"),
    ("tools.0.function.parameters", "x", "'tools[0].function.parameters': expected an object, but got a string"),
    ("tool_choice.function", 5, "'tool_choice.function': expected an object, but got an integer"),
    ("reasoning_effort", {"a": 1}, "'reasoning_effort': expected a string, but got an object"),
    ("response_format", {"type": "json_schema", "json_schema": "x"},
     "'response_format.json_schema': expected an object, but got a string"),
    ("response_format", "json", "'response_format': expected an object, but got a string"),
    ("modalities", 1.5, "'modalities': expected an array, but got a number"),
    ("stop", 5, "'stop': expected one of a string or an array, but got an integer"),
    ("top_p", [1], "'top_p': expected a number, but got an array"),
    ("max_completion_tokens", "20", "'max_completion_tokens': expected an integer, but got a string"),
    ("user", 5, "'user': expected a string, but got an integer"),
    ("parallel_tool_calls", "no", "'parallel_tool_calls': expected a boolean, but got a string"),
])  # fmt: skip
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it_as_openai_does(field: str, value: Any, says: str) -> None:
    out = T.request(mutated(CHAT, field, value), TARGET)
    assert isinstance(out, Refusal) and out.code == "invalid_type" and says in out.message, out


def test_a_conversation_is_cached_automatically_unless_the_client_placed_its_own_breakpoint() -> None:
    """OpenAI caches long prompts itself; Anthropic only where asked: an agent's history went
    at the full input price every turn. Asked at the top level (Anthropic's automatic caching);
    a client's own cache_control (carried from its content parts) is left as the only one."""
    out = req(client_request("chat-opencode-agent-step2"))
    assert out["cache_control"] == {"type": "ephemeral"}
    marked = {"model": "gpt-4o", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}]},
        user()]}  # fmt: skip
    out = req(marked)
    assert "cache_control" not in out and out["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert messages_rules.refusal("/v1/messages", req(client_request("chat-opencode-agent-step2")), {}) is None


def test_a_tool_name_declared_twice_is_sent_once() -> None:
    """OpenAI takes two tools of one name (an MCP server's ``read`` beside opencode's own; the
    same agent on OpenAI's models works, theia #16122, LibreChat #13162); Anthropic refuses the
    request ("tools: Tool names must be unique.", claude-code #10687). The first is kept: the
    model calls a tool by name, so only one of them could be run for it anyway."""
    payload = client_request("chat-opencode-agent-step1")
    first = payload["tools"][4]["function"]
    assert first["name"] == "read"
    again = {"type": "function", "function": {"name": "read", "description": "Read a resource of the MCP server.",
                                              "parameters": {"type": "object", "properties": {"uri": {"type": "string"}}}}}
    out = req({**payload, "tools": [*payload["tools"], again]})
    names = [t["name"] for t in out["tools"]]
    assert names == [t["function"]["name"] for t in payload["tools"]]
    assert out["tools"][4]["input_schema"] == first["parameters"]
    assert messages_rules.refusal("/v1/messages", out, {}) is None


@pytest.mark.parametrize("content", ["\n", "", "  \r\n", [{"type": "text", "text": " "}], [], None])
def test_a_blank_tool_result_says_so_in_words(content: Any) -> None:
    """opencode's `echo` printed "\n", sent on as a tool result's text, which Anthropic refuses as
    a blank text block (audit); an empty string is refused too: such a result says "(no output)",
    as opencode's own results do."""
    payload = {"model": "claude-sonnet-4-6", "max_tokens": 64, "tools": [WEATHER], "messages": [
        user("weather?"), {"role": "assistant", "content": None, "tool_calls": [call("call_1")]},
        {"role": "tool", "tool_call_id": "call_1", "content": content}]}  # fmt: skip
    out = req(payload)
    assert out["messages"][-1]["content"] == [{"type": "tool_result", "tool_use_id": "call_1",
                                               "content": "(no output)"}]  # fmt: skip
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    # A result with text keeps it as it came.
    kept = req({**payload, "messages": [*payload["messages"][:2], {**payload["messages"][2], "content": "\nok\n"}]})
    assert kept["messages"][-1]["content"][0]["content"] == "\nok\n"


def test_two_results_for_one_call_are_one_result_with_both() -> None:
    """Chat takes two ``tool`` messages for one id; Anthropic refuses two results for one call
    ("messages.2.content.1: each tool_use must have a single result. Found multiple
    `tool_result` blocks with id: ...", LiteLLM's regression test): Codex's code mode sends a
    script's output and each ``notify()`` that way, and its session was stuck on it (audit).
    The later results' blocks follow the first's, in order; a blank one adds nothing."""
    asked = [user("weather?"), {"role": "assistant", "content": None, "tool_calls": [call("call_1"), call("call_2")]}]
    payload = {"model": "claude-sonnet-4-6", "max_tokens": 64, "tools": [WEATHER], "messages": [*asked,
        {"role": "tool", "tool_call_id": "call_1", "content": "Script completed"},
        {"role": "tool", "tool_call_id": "call_2", "content": "warm"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "step one done"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "\n"},
        {"role": "tool", "tool_call_id": "call_1", "content": "step two done"}]}  # fmt: skip
    out = req(payload)
    assert out["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": [
            {"type": "text", "text": "Script completed"}, {"type": "text", "text": "step one done"},
            {"type": "text", "text": "step two done"}]},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "warm"}]  # fmt: skip
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    # Sent as they came, the fake refuses them in Anthropic's words.
    twice = {**out, "messages": [*out["messages"][:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "a"},
        {"type": "tool_result", "tool_use_id": "call_2", "content": "b"},
        {"type": "tool_result", "tool_use_id": "call_1", "content": "c"}]}]}  # fmt: skip
    refusal = messages_rules.refusal("/v1/messages", twice, {})
    assert refusal is not None and refusal.body["error"]["message"] == (
        "messages.2.content.2: each tool_use must have a single result. Found multiple `tool_result` blocks with "
        "id: call_1")
    # Blank results alone still say so once.
    blank = req({**payload, "messages": [*asked[:1], {**asked[1], "tool_calls": [call("call_1")]},
                                         *({"role": "tool", "tool_call_id": "call_1", "content": ""} for _ in "ab")]})
    assert blank["messages"][-1]["content"] == [{"type": "tool_result", "tool_use_id": "call_1",
                                                 "content": "(no output)"}]  # fmt: skip


def test_a_repeated_calls_results_still_answer_it_by_order_before_folding() -> None:
    """Two calls with one id (servers that give none) get their own ids, and their results by
    order; a third result for that id is folded into the first's, not left a duplicate."""
    convo = [user(), {"role": "assistant", "content": None, "tool_calls": [call(""), call("")]},
             *({"role": "tool", "tool_call_id": "", "content": t} for t in ("one", "two", "three"))]  # fmt: skip
    out = req({"model": "m", "max_tokens": 64, "tools": [WEATHER], "messages": convo})
    results = out["messages"][2]["content"]
    assert [r["tool_use_id"] for r in results] == [c["id"] for c in out["messages"][1]["content"]]
    assert [r["content"] for r in results] == [[{"type": "text", "text": "one"}, {"type": "text", "text": "three"}],
                                               "two"]  # fmt: skip


# --- the image cap by context window, "none" on a Claude that thinks unasked, Opus 4.5's effort -------


@pytest.mark.parametrize(("target", "most"), [
    (Target("claude-opus-5"), 600), (Target("claude-opus-4-6"), 600), (Target("claude-sonnet-5-5"), 600),
    (Target("claude-haiku-5-5"), 600), (Target("us.anthropic.claude-fable-5-1"), 600),
    (Target("claude-sonnet-4-5-20250929"), 100), (Target("claude-opus-4-5-20251101"), 100),
    (Target("claude-haiku-4-5"), 100), (Target("claude-3-7-sonnet-latest"), 100), (Target("qwen3-vl"), 100),
    # a window the upstream's config states, where the name says none; the name's wins where it does
    (Target("qwen3-vl", context_window=1_000_000), 600), (Target("qwen3-vl", context_window=200_000), 100),
    (Target("claude-sonnet-4-5", context_window=1_000_000), 100),
])  # fmt: skip
def test_the_images_a_request_keeps_follow_the_models_context_window(target: Target, most: int) -> None:
    """Anthropic's vision guide: "up to 600 for API requests (100 for models with a 200k-token
    context window)"; Opus 4.6 and 5, Sonnet 5.5, Haiku 5.5 and Fable 5.1 have 1M (their model
    pages). 150 small PNGs reached claude-opus-5 as 100 images and 50 notes (audit), and 601 there
    still leave out the oldest one, in words that name the cap."""
    small = images.data_url("image/png", images.png(10, 10))
    for count in (150, 601):
        convo = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": small}}] * count},
                 {"role": "assistant", "content": "Seen."}, {"role": "user", "content": "And now?"}]  # fmt: skip
        out = req({"model": "m", "messages": convo}, target)
        assert kinds(out).count("image") == min(count, most) and kinds(out).count("note") == count - min(count, most)
        assert messages_rules.refusal("/v1/messages", out, {}) is None
    assert out["messages"][0]["content"][0]["text"] == (
        f"[image (image/png) left out: the conversation holds more than the {most} images Anthropic takes in "
        "a request, and the oldest go first]")


def knobs(effort: str) -> dict[str, Any]:
    """The openai SDK's request with every knob (a real one), asking for ``effort``."""
    return {**client_request("chat-openai-python-stream-knobs"), "reasoning_effort": effort}


@pytest.mark.parametrize(("model", "thinking", "config"), [
    ("claude-opus-5", {"type": "disabled"}, None), ("claude-sonnet-5", {"type": "disabled"}, None),
    ("claude-opus-5-5", None, {"effort": "low"}), ("claude-sonnet-5-5", None, {"effort": "low"}),
    ("claude-fable-5-1", None, {"effort": "low"}), ("anthropic/claude-mythos-5.2", None, {"effort": "low"}),
    ("claude-fable-5", None, {"effort": "low"}), ("claude-mythos-5", None, {"effort": "low"}),
    ("claude-opus-4-8", None, None), ("claude-sonnet-4-6", None, None), ("claude-opus-4-5", None, None),
    ("qwen3-coder", None, None),
])  # fmt: skip
def test_reasoning_effort_none_keeps_a_claude_that_thinks_unasked_from_thinking(
    model: str, thinking: dict[str, Any] | None, config: dict[str, Any] | None
) -> None:
    """`reasoning_effort: "none"` went out with no `thinking` and no effort, and Opus 5 thinks on a
    request without `thinking` ("To preserve the old behavior, pass thinking: {type: "disabled"}",
    the Opus 5 migration guide; Sonnet 5 the same). Opus 5.5, Sonnet 5.5 and Fable and Mythos 5.1
    on refuse `disabled` (their migration guides), and so do Fable and Mythos 5 ("Both thinking:
    {type: "disabled"} and manual extended thinking [...] return a 400 error", the Fable 5
    migration guide; they got nothing, and thought): the least effort is the nearest to none. The
    models that think only when asked are left as they were."""
    out = req(knobs("none"), Target(model))
    assert out.get("thinking") == thinking and out.get("output_config") == config
    assert messages_rules.refusal("/v1/messages", out, {}) is None


@pytest.mark.parametrize("effort", [None, "medium", "xhigh"])
def test_where_thinking_must_stay_off_opus_5_is_told_so(effort: str | None) -> None:
    """A forced tool and a tool loop without its turn's signed thinking left `thinking` out,
    which keeps the older models from thinking; Opus 5 thinks on a request without it (the Opus 5
    migration guide: "To preserve the old behavior, pass thinking: {type: "disabled"}", taken at
    effort high or lower), so it is told so, and an effort above high goes as high."""
    asked = {} if effort is None else {"reasoning_effort": effort}
    forced = req({"model": "m", "messages": [user()], "tools": [WEATHER], "tool_choice": "required",
                  **asked}, Target("claude-opus-5"))  # fmt: skip
    loop = req({"model": "m", "tools": [WEATHER], **asked, "messages": [
        user("weather?"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]}, Target("claude-opus-5"))  # fmt: skip
    for out in (forced, loop):
        assert out["thinking"] == {"type": "disabled"}
        assert out.get("output_config", {}).get("effort") == {None: None, "medium": "medium", "xhigh": "high"}[effort]
        assert messages_rules.refusal("/v1/messages", out, {}) is None
    # A model that thinks only when asked is left without `thinking`, as before.
    older = req({"model": "m", "messages": [user()], "tools": [WEATHER], "tool_choice": "required", **asked},
                Target("claude-opus-4-8"))  # fmt: skip
    assert "thinking" not in older


def test_fake_refuses_thinking_off_on_fable_5() -> None:
    """Fable and Mythos 5 refuse `thinking: {type: disabled}` (the Fable 5 migration guide)."""
    for model in ("claude-fable-5", "claude-mythos-5"):
        body = {"model": model, "max_tokens": 100, "thinking": {"type": "disabled"}, "messages": [user()]}
        assert messages_rules.refusal("/v1/messages", body, {}) is not None


def test_no_thinking_from_a_responses_or_gemini_client_keeps_opus_5_from_thinking() -> None:
    """The same through chat: the Agents SDK's `reasoning.effort` (a real request) set to "none",
    and Gemini CLI's `thinkingBudget` (a real request) set to 0, "0 is DISABLED"; the budget 0
    reached Claude as no effort at all, and so as Opus 5's default thinking."""
    table = default_translations().table
    responses = client_request("agents-sdk-0.24-first")
    responses = {**responses, "reasoning": {**responses["reasoning"], "effort": "none"}}
    gemini = client_request("gemini-cli-0.61-first")
    config = gemini["generationConfig"]
    gemini = {**gemini, "generationConfig": {**config, "thinkingConfig": {**config["thinkingConfig"],
                                                                           "thinkingBudget": 0}}}  # fmt: skip
    for api, payload in (("responses", responses), ("gemini", gemini)):
        for model, thinking, effort in (("claude-opus-5", {"type": "disabled"}, None),
                                        ("claude-opus-5-5", None, {"effort": "low"})):  # fmt: skip
            out = table[api, "messages"].request(payload, Target(model))
            assert isinstance(out, dict), out
            assert out.get("thinking") == thinking and out.get("output_config", {}).get("effort") == (
                effort and effort["effort"]), (api, model)
            assert messages_rules.refusal("/v1/messages", out, {}) is None


@pytest.mark.parametrize(("asked", "effort", "budget"), [
    ("minimal", "low", 1024), ("low", "low", 2048), ("medium", "medium", 6000), ("high", "high", 6000),
    ("xhigh", "high", 6000),
])  # fmt: skip
def test_opus_4_5_gets_the_clients_effort_beside_its_thinking_budget(asked: str, effort: str, budget: int) -> None:
    """Claude Opus 4.5 takes `output_config.effort` low, medium or high, beside a budget or without
    thinking ("Requires beta flag `effort-2025-11-24`", the claude-code Opus 4.5 migration skill's
    effort.md): it got none, every model below 4.6 taken as budget-only. xhigh is held to high."""
    out = req({"model": "m", "messages": [user()], "reasoning_effort": asked, "max_tokens": 8000},
              Target("claude-opus-4-5-20251101"))  # fmt: skip
    assert out["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert out["output_config"] == {"effort": effort}
    forced = req({"model": "m", "messages": [user()], "reasoning_effort": asked, "tools": [WEATHER],
                  "tool_choice": "required"}, Target("claude-opus-4-5"))  # fmt: skip
    assert "thinking" not in forced and forced["output_config"] == {"effort": effort}  # thinking dropped, effort kept
    sonnet = req({"model": "m", "messages": [user()], "reasoning_effort": asked, "max_tokens": 8000},
                 Target("claude-sonnet-4-5"))  # fmt: skip
    assert "output_config" not in sonnet  # "the only model that supports the effort parameter" (Claude 4.5)


def _dialect(path: str) -> str:
    for prefix, dialect in (("/v1/responses", "responses"), ("/v1/chat", "chat"), ("/v1/messages", "messages")):
        if path.startswith(prefix):
            return dialect
    return "gemini"


def test_the_fold_of_results_runs_only_where_a_turn_answers_a_call_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """#38: the fold cost every request onto Messages a dict and a list per user turn (~35 µs on a
    200-turn history, review). It runs now only where a turn's results name one id twice: not for
    any captured request but Codex's notify one, and what each of them becomes is unchanged (the
    output has nothing left to fold)."""
    from gateway.translate.chat_messages import request as module

    folds: list[str] = []
    fold = module._one_result_per_call
    monkeypatch.setattr(module, "_one_result_per_call", lambda turns: (folds.append(name), fold(turns)))
    table = default_translations().table
    sent: list[str] = []
    for path in sorted((CORPUS / "requests").glob("*.json")):
        doc = json.loads(path.read_text())
        onto = table.get((_dialect(doc["path"]), "messages"))
        if onto is None or "countTokens" in doc["path"]:
            continue
        name = path.stem
        out = onto.request(copy.deepcopy(doc["body"]), TARGET)
        if isinstance(out, Refusal):
            continue
        sent.append(name)
        again = copy.deepcopy(out["messages"])
        fold(again)
        assert again == out["messages"], name
    assert len(sent) > 20 and folds == ["codex-0.171-lite-notify-result"]


# --- function names Anthropic refuses -------------------------------------------------------

# (the client's name, whether it goes as it is): Anthropic takes ^[a-zA-Z0-9_-]{1,128}$
# (messages_rules), where OpenAI takes 64 and chat servers an MCP tool's dotted name.
NAMES = [("github.create_issue", False), ("github/create_issue", False), ("run shell", False),
         ("mcp__" + "x" * 124, False), ("y" * 70, True), ("ls", True)]  # fmt: skip


def _named_request(**extra: Any) -> dict[str, Any]:
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
             for n, _ in NAMES]  # fmt: skip
    calls = [call(f"call_{k}", n, "{}") for k, (n, _) in enumerate(NAMES)]
    return {"model": "gpt-4o", "tools": tools, "messages": [
        user("go"), {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls)], **extra}  # fmt: skip


@pytest.mark.parametrize("chosen", [n for n, _ in NAMES], ids=[n[:20] for n, _ in NAMES])
def test_function_names_anthropic_refuses_go_as_valid_ones_everywhere_the_request_names_them(chosen: str) -> None:
    out = req(_named_request(tool_choice={"type": "function", "function": {"name": chosen}}))
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    sent = [t["name"] for t in out["tools"]]
    assert [(u == n) for (n, _), u in zip(NAMES, sent, strict=True)] == [kept for _, kept in NAMES]
    assert len(set(sent)) == len(NAMES) and all(len(u) <= 128 for u in sent)
    assert [b["name"] for t in out["messages"] for b in t["content"] if b["type"] == "tool_use"] == sent
    assert out["tool_choice"]["name"] == sent[[n for n, _ in NAMES].index(chosen)]
    allowed = req(_named_request(tool_choice={"type": "allowed_tools", "allowed_tools": {
        "mode": "auto", "tools": [{"type": "function", "function": {"name": chosen}}]}}))  # fmt: skip
    assert [t["name"] for t in allowed["tools"]] == [out["tool_choice"]["name"]]
    summary = req({**_named_request(), "tools": []})  # declares none: the called ones, uncallable
    assert [t["name"] for t in summary["tools"]] == sent
    assert messages_rules.refusal("/v1/messages", summary, {}) is None


def test_calls_under_the_names_sent_come_back_under_the_clients_buffered_and_streamed() -> None:
    request = _named_request()
    sent = [t["name"] for t in req(request)["tools"]]
    held = T.held(Context("gpt-4o", request, "req_1"))
    assert "messages" not in held.request  # the tools stay: the answer names calls by them
    doc = {**anthropic_message(), "stop_reason": "tool_use",
           "content": [{"type": "tool_use", "id": f"toolu_{k}", "name": n, "input": {}} for k, n in enumerate(sent)]}
    buffered = T.answer(doc, held)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in buffered] == [n for n, _ in NAMES]
    events = [anthropic_head()[0]] + [sse(kind, {"type": kind, "index": k, **body}) for k, n in enumerate(sent)
              for kind, body in (("content_block_start", {"content_block": {"type": "tool_use", "id": f"toolu_{k}",
                                                                             "name": n, "input": {}}}),
                                 ("content_block_stop", {}))] + anthropic_tail(stop_reason="tool_use")  # fmt: skip
    _, body = translate([e for raw in events for e in EventSplitter().feed(raw)], T.held(Context("gpt-4o", request, "r")))
    final = openai_final(body, include_usage=False)
    assert [t.function.name for t in final.choices[0].message.tool_calls or ()] == [n for n, _ in NAMES]
