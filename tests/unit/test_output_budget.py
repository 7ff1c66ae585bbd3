"""Each wire API's output budget held to a limit: every budget it names lowered, nothing else
changed, a budget within the limit (or not a number) left alone, a missing one named only
when asked to; Anthropic's thinking budget kept below the new max_tokens."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis import output_budget
from gateway.apis.chat.wire import OpenAIChat
from gateway.apis.gemini.wire import GeminiGenerate
from gateway.apis.messages.wire import AnthropicMessages
from gateway.apis.responses.wire import OpenAIResponses

MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("payload", "lowered"), [
    ({"messages": MSG, "max_tokens": 64000}, {"messages": MSG, "max_tokens": 16384}),
    ({"messages": MSG, "max_completion_tokens": 64000}, {"messages": MSG, "max_completion_tokens": 16384}),
    ({"max_completion_tokens": 64000, "max_tokens": 100}, {"max_completion_tokens": 16384, "max_tokens": 100}),
    ({"max_tokens": 16384}, None),
    ({"max_tokens": "64000"}, None),  # not a number: the provider judges it as sent
    ({"max_tokens": True}, None),
    ({"messages": MSG}, None),
])  # fmt: skip
def test_chat(payload: dict[str, Any], lowered: dict[str, Any] | None) -> None:
    assert output_budget.chat(payload, 16384) == lowered


def test_chat_names_max_tokens_only_when_asked() -> None:
    assert output_budget.chat({"messages": MSG}, 4096, name_if_absent=True) == {"messages": MSG, "max_tokens": 4096}


def test_the_request_itself_is_never_changed() -> None:
    payload = {"messages": MSG, "max_tokens": 64000, "thinking": {"type": "enabled", "budget_tokens": 40000}}
    copy = {**payload, "thinking": dict(payload["thinking"])}
    output_budget.messages(payload, 16384)
    assert payload == copy


@pytest.mark.parametrize(("thinking", "limit", "expected"), [
    ({"type": "adaptive"}, 16384, {"type": "adaptive"}),  # Claude Code 2.1: no budget to keep below
    ({"type": "enabled", "budget_tokens": 31999}, 8192, {"type": "enabled", "budget_tokens": 8191}),
    ({"type": "enabled", "budget_tokens": 4000}, 8192, {"type": "enabled", "budget_tokens": 4000}),
    ({"type": "enabled", "budget_tokens": 2000}, 1024, None),  # no room for the 1024 minimum: dropped
    ({"type": "disabled"}, 1024, {"type": "disabled"}),
])  # fmt: skip
def test_messages_keep_thinking_valid(thinking: dict[str, Any], limit: int, expected: dict[str, Any] | None) -> None:
    out = output_budget.messages({"messages": MSG, "max_tokens": 64000, "thinking": thinking}, limit)
    assert out is not None and out["max_tokens"] == limit
    assert out.get("thinking") == expected


def test_messages_within_the_limit() -> None:
    assert output_budget.messages({"messages": MSG, "max_tokens": 1024}, 8192) is None


@pytest.mark.parametrize(("payload", "name", "lowered"), [
    ({"input": "hi", "max_output_tokens": 128000}, False, {"input": "hi", "max_output_tokens": 32768}),
    ({"input": "hi", "max_output_tokens": 100}, False, None),
    ({"input": "hi"}, False, None),
    ({"input": "hi"}, True, {"input": "hi", "max_output_tokens": 32768}),
])  # fmt: skip
def test_responses(payload: dict[str, Any], name: bool, lowered: dict[str, Any] | None) -> None:
    assert output_budget.responses(payload, 32768, name) == lowered


@pytest.mark.parametrize(("payload", "name", "lowered"), [
    ({"contents": [], "generationConfig": {"maxOutputTokens": 65536, "temperature": 0}}, False,
     {"contents": [], "generationConfig": {"maxOutputTokens": 65535, "temperature": 0}}),
    # Either spelling is accepted by Google; the one the client used is the one lowered.
    ({"contents": [], "generation_config": {"max_output_tokens": 65536}}, False,
     {"contents": [], "generation_config": {"max_output_tokens": 65535}}),
    ({"contents": [], "generationConfig": {"maxOutputTokens": 8192}}, False, None),
    ({"contents": []}, False, None),
    ({"contents": []}, True, {"contents": [], "generationConfig": {"maxOutputTokens": 65535}}),
    ({"contents": [], "generationConfig": "bad"}, True, None),
])  # fmt: skip
def test_gemini(payload: dict[str, Any], name: bool, lowered: dict[str, Any] | None) -> None:
    assert output_budget.gemini(payload, 65535, name) == lowered


def test_every_dialect_lowers_its_own_budget() -> None:
    assert OpenAIChat().lower_output({"max_tokens": 9}, 5) == {"max_tokens": 5}
    assert AnthropicMessages().lower_output({"max_tokens": 9}, 5) == {"max_tokens": 5}
    assert OpenAIResponses().lower_output({"max_output_tokens": 90}, 50) == {"max_output_tokens": 50}
    assert GeminiGenerate().lower_output({"generationConfig": {"maxOutputTokens": 9}}, 5) == {
        "generationConfig": {"maxOutputTokens": 5}}


@pytest.mark.parametrize(("payload", "budget"), [
    ({"max_tokens": 64000}, 64000),
    ({"max_completion_tokens": 500, "max_tokens": 100}, 500),  # the one a reasoning model reads
    ({"max_output_tokens": 32000}, 32000),
    ({"generation_config": {"max_output_tokens": 8192}}, 8192),
    ({"max_tokens": True}, None),
    ({"messages": MSG}, None),
])  # fmt: skip
def test_the_budget_a_request_names_for_the_log(payload: dict[str, Any], budget: int | None) -> None:
    assert output_budget.asked(payload) == budget


@pytest.mark.parametrize(("payload", "most"), [
    # The audit's request: the translations send max_completion_tokens (5000), not max_tokens.
    ({"max_tokens": 1, "max_completion_tokens": 5000}, 5000),
    ({"max_tokens": 5000, "max_completion_tokens": 1}, 5000),  # a server that reads max_tokens alone
    ({"max_completion_tokens": 700}, 700),
    ({"max_tokens": 64}, 64),  # Messages
    ({"max_output_tokens": 900}, 900),  # Responses
    ({"max_tokens": 1, "max_output_tokens": 900}, 900),  # Responses with a stray chat field
    ({"generationConfig": {"maxOutputTokens": 300}}, 300),  # Gemini, either spelling
    ({"generation_config": {"max_output_tokens": 300}}, 300),
    ({"generationConfig": {"maxOutputTokens": 10, "max_output_tokens": 300}}, 300),
    ({"generationConfig": {"maxOutputTokens": 10}, "generation_config": {"maxOutputTokens": 300}}, 300),
    ({"max_tokens": 0, "max_completion_tokens": -5}, None),  # not a budget the provider takes
    ({"max_tokens": True}, None),  # not a number, though Python's True is an int
    ({"max_tokens": "many", "max_completion_tokens": float("nan")}, None),
    # Read as a lax server reads them (vLLM's pydantic: an integral float, a numeric string;
    # llama.cpp truncates a float): the audit's 100000.0 and "100000" were reserved as 4,096.
    ({"max_tokens": 100000.0}, 100000),
    ({"max_tokens": "100000"}, 100000),
    ({"max_tokens": True, "max_completion_tokens": " 5000 "}, 5000),
    ({"max_output_tokens": "1e5"}, 100000),
    ({"max_tokens": 99.5}, 100),  # above any reading of it: truncated (llama.cpp) or refused
    ({"generationConfig": {"maxOutputTokens": "300"}}, 300),  # proto JSON takes a string int64
    ({"max_tokens": "0", "max_completion_tokens": -1.0}, None),
    ({"generationConfig": "x"}, None),
    ({"messages": MSG}, None),
])  # fmt: skip
def test_the_ceiling_is_the_largest_budget_any_upstream_may_read(payload: dict[str, Any], most: int | None) -> None:
    assert output_budget.ceiling(payload) == most


@pytest.mark.parametrize(("payload", "loose"), [
    ({"max_tokens": 100}, False),
    ({"max_tokens": None}, False),
    ({"messages": MSG}, False),
    ({"max_tokens": 100.0}, True),
    ({"max_tokens": "100"}, True),
    ({"max_tokens": True}, True),
    ({"max_tokens": 100, "generationConfig": {"maxOutputTokens": "x"}}, True),
])  # fmt: skip
def test_a_budget_a_server_may_not_read_as_a_number_is_told_apart(payload: dict[str, Any], loose: bool) -> None:
    """llama.cpp uses its own default for a field of the wrong type: such a request reserves at
    least what one naming none does (pipeline/accounting.py)."""
    assert output_budget.named_loosely(payload) is loose


def test_a_responses_budget_is_never_lowered_below_the_apis_minimum() -> None:
    """OpenAI refuses ``max_output_tokens`` below 16: a continuation left with 3 tokens of a
    100-token budget asked for 3 and got a 400 (gateway/fake/responses_rules.py cites it)."""
    assert output_budget.responses({"input": "hi", "max_output_tokens": 100}, 3) == {"input": "hi", "max_output_tokens": 16}
    assert output_budget.responses({"input": "hi", "max_output_tokens": 12}, 3) is None
