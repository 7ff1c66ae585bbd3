"""The output limit a provider states when it refuses a budget, read from the corpus's real
bodies (the message the classifier takes from each), and no limit read from any other body."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import UpstreamConfig
from gateway.policy.learned import LEARNED_MAX
from gateway.policy.output_limit import OutputLimits, stated_output_limit
from tests.corpus_cases import HELD_OUT, IN_SAMPLE, classify_case

STATING = [c for c in IN_SAMPLE if "output_limit" in c["expected"]]


def test_the_corpus_has_refusals_from_the_providers_agents_meet() -> None:
    providers = {c["provider"] for c in STATING}
    assert {"OpenAI", "Azure OpenAI", "Anthropic", "AWS Bedrock", "Google Vertex AI", "DeepSeek", "Groq"} <= providers


@pytest.mark.parametrize("case", STATING, ids=[c["name"] for c in STATING])
def test_the_stated_limit_is_read_from_the_message_the_gateway_keeps(case: dict[str, Any]) -> None:
    assert stated_output_limit(classify_case(case).message) == case["expected"]["output_limit"]


def test_no_other_body_in_the_corpus_states_one() -> None:
    # Window overflows ("maximum context length is ..."), OpenRouter's key limits ("max_tokens
    # limit exceeded: 100000 > 9577"), credit errors that name max_tokens: none is a model's output limit.
    stated = [c["name"] for c in IN_SAMPLE + HELD_OUT
              if "output_limit" not in c["expected"] and stated_output_limit(classify_case(c).message) is not None]
    assert stated == []


@pytest.mark.parametrize("message", [
    None, "", "max_tokens must be at least 1, got -853.",
    "max_tokens limit exceeded: 100000 > 9577. To increase, visit https://openrouter.ai/keys",
    "This model's maximum context length is 8192 tokens. However, you requested 8256 tokens "
    "(64 in the messages, 8192 in the completion).",
])  # fmt: skip
def test_messages_without_an_output_limit(message: str | None) -> None:
    assert stated_output_limit(message) is None


def up(name: str = "u", cap: int | None = None) -> UpstreamConfig:
    return UpstreamConfig(name=name, base_url="http://127.0.0.1:1/v1", max_output_tokens=cap)


def test_a_learned_limit_is_kept_per_upstream_and_model() -> None:
    limits = OutputLimits()
    assert limits.of(up(), "gpt-4o") is None
    limits.learn("u", "gpt-4o", 16384)
    assert limits.of(up(), "gpt-4o") == (16384, "learned")
    assert limits.of(up(), "gpt-4.1") is None and limits.of(up("v"), "gpt-4o") is None


def test_the_lower_of_the_configured_and_the_learned_limit_wins() -> None:
    limits = OutputLimits()
    assert limits.of(up(cap=4096), "m") == (4096, "config")
    limits.learn("u", "m", 8192)
    assert limits.of(up(cap=4096), "m") == (4096, "config")
    limits.learn("u", "m", 2048)
    assert limits.of(up(cap=4096), "m") == (2048, "learned")


def test_the_learned_table_is_bounded_but_known_entries_still_update() -> None:
    limits = OutputLimits()
    for i in range(LEARNED_MAX + 10):
        limits.learn("u", f"m{i}", 100)
    assert limits.of(up(), f"m{LEARNED_MAX + 5}") is None
    limits.learn("u", "m0", 50)
    assert limits.of(up(), "m0") == (50, "learned")
