"""A request over a tokens-per-minute window: classified as such from the corpus's real bodies,
and fitted by its output budget alone, only where the refusal states the numbers."""

from __future__ import annotations

import pytest

from gateway.errors import ErrorType
from gateway.policy.per_minute_fit import MIN_OUTPUT_TOKENS, fitted_output
from tests.corpus_cases import HELD_OUT, IN_SAMPLE, classify_case

# Every corpus overflow of a per-minute window (OpenAI's and Groq's "Request too large ... Limit
# N, Requested M", xAI's, Azure's token-rate 429 asking a day), and window overflows beside them.
PER_MINUTE = {
    "openai-429-request-bigger-than-tpm-is-overflow", "openai-429-request-too-large-gpt-41-is-overflow",
    "groq-413-request-bigger-than-tpm", "groq-413-kimi-bigger-than-tpm", "groq-413-deepseek-r1-bigger-than-tpm",
    "groq-429-request-bigger-than-tpm-used-zero-is-overflow", "groq-413-llama-8b-bigger-than-tpm",
    "xai-429-team-tpm-actual-over-limit-is-overflow", "azure-429-retry-after-a-day-is-overflow",
    "litellm-429-azure-retry-after-a-day-is-overflow",
}  # fmt: skip


def _case(name: str) -> dict:
    return next(c for c in IN_SAMPLE + HELD_OUT if c["name"] == name)


def test_the_corpus_overflows_of_a_per_minute_window_are_marked_and_no_other() -> None:
    overflows = [c for c in IN_SAMPLE + HELD_OUT if classify_case(c).type is ErrorType.CONTEXT_OVERFLOW]
    marked = {c["name"] for c in overflows if classify_case(c).per_minute}
    assert marked == PER_MINUTE
    assert len(overflows) > 3 * len(marked)  # the context windows' overflows are many more, unmarked


def test_openais_numbers_lower_the_output_budget_by_the_excess() -> None:
    c = classify_case(_case("openai-429-request-bigger-than-tpm-is-overflow"))  # Limit 30000, Requested 36278
    fit = fitted_output(c.message, 16000)
    assert fit.max_tokens == 16000 - 6278 - 300  # and 1 % of the limit
    assert fit.report["turns_removed"] == 0 and fit.report["limit_source"] == "provider_per_minute"


def test_no_rescue_where_the_refusal_states_no_numbers() -> None:
    fit = fitted_output(classify_case(_case("azure-429-retry-after-a-day-is-overflow")).message, 60000)
    assert fit.max_tokens is None and not fit.prompt_over
    assert "states no tokens-per-minute numbers" in str(fit.report["reason"])


@pytest.mark.parametrize("sent", [6000, None])  # 6,578 over: no budget fits; none named: none to lower
def test_a_prompt_alone_over_the_window_is_the_prompts_to_shrink(sent: int | None) -> None:
    """Read as "no rescue" and told "a smaller max_tokens may fit", a prompt of 37,765 tokens
    against a 30,000 TPM was neither compressed nor compacted by the client (review)."""
    fit = fitted_output(classify_case(_case("openai-429-request-bigger-than-tpm-is-overflow")).message, sent)
    assert fit.max_tokens is None and fit.prompt_over and "the prompt alone" in str(fit.report["reason"])
    assert fit.report["target_tokens"] == 30000
    assert fit.prompt_tokens == 36278 - (sent or 0)  # "Requested" counts the budget sent; compression, the prompt


def test_a_budget_lowered_under_the_floor_is_no_rescue() -> None:
    message = "Request too large for gpt-4o on tokens per min (TPM): Limit 30000, Requested 31000."
    assert fitted_output(message, 1000 + 300 + MIN_OUTPUT_TOKENS).max_tokens == MIN_OUTPUT_TOKENS
    under = fitted_output(message, 1000 + 300 + MIN_OUTPUT_TOKENS - 1)
    assert under.max_tokens is None and under.prompt_over
