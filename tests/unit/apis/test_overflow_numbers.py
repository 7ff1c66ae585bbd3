"""The numbers a translated overflow states (``apis/common.py`` ``overflow_numbers``), in each
client API's own sentence: agents read them (Claude Code's compaction takes N - M)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.apis import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from gateway.apis.base import ForeignError
from gateway.errors import Classification, ErrorType
from tests.corpus_cases import IN_SAMPLE, classify_case


@pytest.mark.parametrize(("prompt", "limit", "said"), [
    (5000, 2000, (5000, 2000)),  # the provider's own numbers
    (2500, 2000, (2500, 2000)),  # an estimate over the upstream's context_window
    # Audit E: a Responses upstream states no numbers, the estimate (42) is under the configured
    # window (2000). Not "42 > 41": the window is the limit, and the size the least that is true.
    (42, 2000, (2001, 2000)),
    (2000, 2000, (2001, 2000)),
    (7000, 8192, (8193, 8192)),  # "7000 in the messages, 2000 in the completion": over all the same
    (42, None, (42, 41)),  # no window known anywhere: one under the request
    (None, None, (1, 0)),
])  # fmt: skip
def test_a_translated_overflow_states_the_window_and_a_size_over_it(
    prompt: int | None, limit: int | None, said: tuple[int, int]
) -> None:
    c = Classification.of(ErrorType.CONTEXT_OVERFLOW)
    e = ForeignError(400, c, "responses", 400, b"{}", prompt, limit)
    n, m = said
    _, body = ANTHROPIC_MESSAGES.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == f"prompt is too long: {n} tokens > {m} maximum"
    _, body = OPENAI_CHAT.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == (
        f"This model's maximum context length is {m} tokens. However, your messages resulted in {n} tokens.")
    _, body = GEMINI.foreign_error(e, "r")
    assert json.loads(body)["error"]["message"] == (
        f"The input token count ({n}) exceeds the maximum number of tokens allowed ({m}).")


# Each client's own overflow wording or code makes it compact: Claude Code on "prompt is too
# long: N tokens > M maximum", Codex and opencode on context_length_exceeded. None of that helps
# a request whose max_tokens is over its upstream's tokens per minute.
_COMPACTS_ON = ("prompt is too long", "maximum context length", "context_length_exceeded",
                "exceeds the maximum number of tokens allowed")  # fmt: skip


@pytest.mark.parametrize(("dialect", "field"), [
    (ANTHROPIC_MESSAGES, "max_tokens"), (OPENAI_CHAT, "max_tokens"),
    (OPENAI_RESPONSES, "max_output_tokens"), (GEMINI, "maxOutputTokens"),
])  # fmt: skip
def test_a_per_minute_overflow_is_told_as_itself_in_every_client_api(dialect: Any, field: str) -> None:
    """Azure's day-long token-rate 429 read as a window overflow reached Claude Code as "prompt is
    too long: 128001 tokens > 128000 maximum" for a prompt of a few tokens (review)."""
    case = next(c for c in IN_SAMPLE if c["name"] == "azure-429-retry-after-a-day-is-overflow")
    c = classify_case(case)
    assert c.per_minute
    e = ForeignError(400, c, "chat", 429, json.dumps(case["body"]).encode(), 12, 128000, output_tokens=32000)
    status, body = dialect.foreign_error(e, "r")
    error = json.loads(body)["error"]
    assert status == 400
    said = json.dumps(error)
    assert not any(w in said for w in _COMPACTS_ON), said
    assert f"{field} 32000" in error["message"] and "tokens per minute" in error["message"]
    assert f"a smaller {field} may fit" in error["message"]  # Azure's refusal states no numbers
    assert "exceeded token rate limit" in error["message"]


_TPM = "openai-429-request-bigger-than-tpm-is-overflow"  # Limit 30000, Requested 36278
_OVERFLOW_SENTENCE = {ANTHROPIC_MESSAGES: "prompt is too long: 36278 tokens > 30000 maximum",
                      OPENAI_CHAT: "maximum context length is 30000 tokens",
                      OPENAI_RESPONSES: "maximum context length is 30000 tokens",
                      GEMINI: "The input token count (36278) exceeds the maximum number of tokens allowed (30000)"}  # fmt: skip


def _tpm_error(output_tokens: int | None) -> ForeignError:
    case = next(c for c in IN_SAMPLE if c["name"] == _TPM)
    c = classify_case(case)
    assert c.per_minute
    return ForeignError(400, c, "chat", 429, json.dumps(case["body"]).encode(), 36278, 30000,
                        output_tokens=output_tokens)  # fmt: skip


@pytest.mark.parametrize("dialect", [ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES, GEMINI])
@pytest.mark.parametrize("output_tokens", [6000, None])
def test_a_prompt_alone_over_the_tokens_per_minute_is_told_in_the_apis_overflow_sentence(
    dialect: Any, output_tokens: int | None
) -> None:
    """With 6,000 of 36,278 tokens asked as output against a 30,000 TPM, no max_tokens fits:
    told "a smaller max_tokens may fit", Claude Code never compacted and every later turn met
    the same refusal (review). The API's own overflow sentence makes it compact."""
    status, body = dialect.foreign_error(_tpm_error(output_tokens), "r")
    error = json.loads(body)["error"]
    assert status == 400 and _OVERFLOW_SENTENCE[dialect] in error["message"], error
    assert "tokens per minute" not in error["message"]
    if dialect in (OPENAI_CHAT, OPENAI_RESPONSES):
        assert error["code"] == "context_length_exceeded"


@pytest.mark.parametrize(("dialect", "field"), [
    (ANTHROPIC_MESSAGES, "max_tokens"), (OPENAI_CHAT, "max_tokens"),
    (OPENAI_RESPONSES, "max_output_tokens"), (GEMINI, "maxOutputTokens"),
])  # fmt: skip
def test_a_budget_over_the_tokens_per_minute_is_told_by_the_apis_own_field_and_the_numbers(
    dialect: Any, field: str
) -> None:
    """16,000 output tokens of 36,278 against 30,000: a budget of 16,000 − 6,278 − 1 % fits."""
    _, body = dialect.foreign_error(_tpm_error(16000), "r")
    message = json.loads(body)["error"]["message"]
    assert f"with {field} 16000" in message and f"a {field} of at most 9422 may fit" in message, message
    if field != "max_tokens":
        assert "max_tokens" not in message.split("The upstream said")[0]
