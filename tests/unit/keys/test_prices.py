"""Prices and costs (gateway/keys/prices.py): the shipped table, overrides, usage to dollars."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.keys.prices import SHIPPED, Cost, Price, PriceTable, asks_hour_cache, cost_of, worst_case

# Claude Sonnet 4 and 4.5 above 200k prompt tokens (Anthropic's "Long context pricing"; cache
# multipliers on top), which Sonnet 4.6 has not.
SONNET_4_LONG = Price(3.0, 15.0, 0.30, 3.75, long=(200_000, Price(6.0, 22.50, 0.60, 7.50, 12.0)))


@pytest.mark.parametrize(("model", "expected"), [
    ("claude-sonnet-4-5", SONNET_4_LONG),
    ("claude-sonnet-4-5-20250929", SONNET_4_LONG),
    ("claude-sonnet-4-20250514", SONNET_4_LONG),
    ("claude-sonnet-4-0", SONNET_4_LONG),
    ("claude-sonnet-4-6", Price(3.0, 15.0, 0.30, 3.75)),
    ("claude-opus-4-8", Price(5.0, 25.0, 0.50, 6.25)),
    ("claude-opus-4-1-20250805", Price(15.0, 75.0, 1.50, 18.75)),
    ("claude-haiku-4-5", Price(1.0, 5.0, 0.10, 1.25)),
    # The agents' own defaults and aliases (Claude Code's sonnet, haiku, opusplan; Codex's default):
    # refused to budgeted keys while they had no price.
    ("claude-sonnet-5-5", Price(2.0, 10.0, 0.20, 2.50, 4.0)),
    ("claude-opus-5-5", Price(4.0, 20.0, 0.20, 5.0, 8.0)),
    ("claude-opus-5", Price(5.0, 25.0, 0.50, 6.25)),
    ("claude-haiku-5-5", Price(0.10, 0.50, cache_write=0.125, cache_write_1h=0.20,
                               long=(100_000, Price(0.50, 2.50, cache_write=0.625)))),
    ("gpt-6.2-sol", Price(2.0, 10.0, 0.10, 2.50, long=(272_000, Price(4.0, 15.0, 0.20, 5.0)))),
    ("gemini-3.8-flash", None),  # only resellers' prices found
    ("gpt-5-codex", Price(1.25, 10.0, 0.125)),
    ("gpt-5-mini", Price(0.25, 2.0, 0.025)),
    ("gpt-4o-mini-2024-07-18", Price(0.15, 0.60, 0.075)),
    ("gpt-4o", Price(2.50, 10.0, 1.25)),
    ("gpt-4o-2024-08-06", Price(2.50, 10.0, 1.25)),
    ("gpt-4o-2024-05-13", Price(5.0, 15.0)),  # priced as gpt-4o's $2.50 / $10 before (audit)
    ("gpt-4o-mini", Price(0.15, 0.60, 0.075)),
    # Audio tokens, realtime sessions and searches billed otherwise: unpriced, not gpt-4o's text.
    ("gpt-4o-audio-preview", None),
    ("gpt-4o-audio-preview-2024-12-17", None),
    ("gpt-4o-realtime-preview", None),
    ("gpt-4o-search-preview", None),
    ("gpt-4o-transcribe", None),
    ("gpt-4o-mini-audio-preview", None),
    ("gpt-4o-mini-search-preview", None),
    ("gpt-4o-mini-transcribe", None),
    ("gpt-4o-mini-tts", None),
    ("gpt-4.1-nano", Price(0.10, 0.40, 0.025)),
    ("o4-mini", Price(1.10, 4.40, 0.275)),
    ("gpt-5.2-2025-12-11", Price(1.75, 14.0, 0.175)),
    ("gpt-5.2-pro", Price(21.0, 168.0)),
    ("o3-pro-2025-06-10", Price(20.0, 80.0)),
    ("o3", Price(2.0, 8.0, 0.50)),
    # The deep-research models had taken o4-mini's and o3's prices (audit).
    ("o4-mini-deep-research", Price(2.0, 8.0, 0.50)),
    ("o4-mini-deep-research-2025-06-26", Price(2.0, 8.0, 0.50)),
    ("o3-deep-research", Price(10.0, 40.0, 2.50)),
    ("o1", Price(15.0, 60.0, 7.50)),
    ("o1-2024-12-17", Price(15.0, 60.0, 7.50)),
    ("o1-pro", Price(150.0, 600.0)),
    ("o1-mini", None),  # priced otherwise, and no copy of its price was found
    ("gpt-4-turbo", None),
    ("text-embedding-3-small", Price(0.02, 0.0)),
    ("gemini-2.5-flash", Price(0.30, 2.50)),
    ("gemini-2.5-flash-lite", Price(0.10, 0.40)),
    ("gemini-2.5-flash-image", None),  # image output is priced otherwise
    # Gemini CLI's google_web_search tool posts to it: unpriced, a budgeted key's search failed.
    ("gemini-3-flash-preview", Price(0.50, 3.0, 0.05)),
    ("qwen3-coder", None),
    (None, None),
])  # fmt: skip
def test_the_shipped_table_picks_the_most_specific_price(model: str | None, expected: Price | None) -> None:
    assert _tokens(PriceTable().price_for(model)) == expected


def _tokens(price: Price | None) -> Price | None:
    """A price's token rates, less its web search fee (tests/unit/keys/test_fees.py)."""
    return None if price is None else replace(price, web_search=None, web_search_per_request=False)


def test_every_shipped_glob_is_reachable() -> None:
    """No glob is shadowed by an earlier, broader one (the table is ordered specific first)."""
    table = PriceTable()
    for pattern, price in SHIPPED:
        assert table.price_for(pattern.rstrip("*") + "x") is price or table.price_for(pattern.rstrip("*")) is price, pattern


def test_an_operator_price_comes_before_the_shipped_one() -> None:
    table = PriceTable.of({"gpt-4o*": Price(1.0, 2.0), "my-local-*": Price(0.0, 0.0)})
    assert _tokens(table.price_for("gpt-4o-mini")) == Price(1.0, 2.0)
    assert table.price_for("my-local-model") == Price(0.0, 0.0)
    assert _tokens(table.price_for("claude-haiku-4-5")) == Price(1.0, 5.0, 0.10, 1.25)


def test_cost_splits_the_prompt_into_fresh_cached_and_written_tokens() -> None:
    sonnet = Price(3.0, 15.0, 0.30, 3.75)
    # Claude Code's second turn: 1,000 fresh, 20,000 read from the cache, 2,000 written, 500 out.
    usage = {"prompt": 23_000, "cache_read": 20_000, "cache_write": 2_000, "completion": 500}
    expected = (1_000 * 3.0 + 20_000 * 0.30 + 2_000 * 3.75 + 500 * 15.0) / 1e6
    assert cost_of(sonnet, usage) == Cost(pytest.approx(expected), True)  # type: ignore[arg-type]
    # OpenAI: no cache-write price, cached input at its own.
    mini = Price(0.15, 0.60, 0.075)
    assert cost_of(mini, {"prompt": 1_000, "cache_read": 600, "completion": 100}).usd == pytest.approx(
        (400 * 0.15 + 600 * 0.075 + 100 * 0.60) / 1e6)


def test_a_model_without_a_price_costs_nothing_and_says_so() -> None:
    assert cost_of(None, {"prompt": 10, "completion": 10}) == Cost(0.0, False)
    assert worst_case(None, 1000, 1000) == 0.0


def test_inconsistent_counts_are_clamped_never_negative() -> None:
    p = Price(1.0, 1.0, 0.5, 2.0)
    assert cost_of(p, {"prompt": 10, "cache_read": 50, "cache_write": 50}).usd == pytest.approx(10 * 0.5 / 1e6)


def test_the_worst_case_is_the_whole_prompt_written_to_the_cache_and_every_output_token() -> None:
    # A prompt written to Anthropic's cache costs 1.25x the input price: reserved at that,
    # so that a budget's reservations hold what a turn that writes its history can cost.
    assert worst_case(Price(3.0, 15.0, 0.30, 3.75), 20_000, 64_000) == pytest.approx((20_000 * 3.75 + 64_000 * 15) / 1e6)
    assert worst_case(Price(2.5, 10.0, 1.25), 20_000, 1_000) == pytest.approx((20_000 * 2.5 + 1_000 * 10) / 1e6)


def test_a_prompt_above_a_threshold_is_priced_at_the_long_rate_whole() -> None:
    """Gemini 2.5 Pro: $1.25 in, $10 out, $0.125 cached for prompts up to 200k tokens; $2.50,
    $15 and $0.25 for every token of a request whose prompt is longer."""
    pro = PriceTable().price_for("gemini-2.5-pro")
    assert pro is not None
    short = {"prompt": 200_000, "cache_read": 100_000, "completion": 1_000}
    assert cost_of(pro, short).usd == pytest.approx((100_000 * 1.25 + 100_000 * 0.125 + 1_000 * 10) / 1e6)
    long = {"prompt": 200_001, "cache_read": 100_000, "completion": 1_000}
    assert cost_of(pro, long).usd == pytest.approx((100_001 * 2.50 + 100_000 * 0.25 + 1_000 * 15) / 1e6)
    assert worst_case(pro, 150_000, 1_000) == pytest.approx((150_000 * 1.25 + 1_000 * 10) / 1e6)
    assert worst_case(pro, 250_000, 1_000) == pytest.approx((250_000 * 2.50 + 1_000 * 15) / 1e6)


def test_one_hour_cache_writes_cost_twice_the_input_price() -> None:
    """Anthropic: "5-minute cache writes: 1.25x ... 1-hour cache writes: 2x the base input tokens
    price". The audit's answer on claude-sonnet-4-5, a 1,000,000-token prompt of which 300,000
    were written for an hour, was logged at $3.225 (the write at the five-minute price); $3.90
    is right at Sonnet 4.6's price, which has no long-prompt tier (4.5's has since: below)."""
    sonnet = PriceTable().price_for("claude-sonnet-4-6")
    assert sonnet is not None
    written = {"prompt": 1_000_000, "cache_write": 300_000}
    assert cost_of(sonnet, written).usd == pytest.approx(3.225)
    assert cost_of(sonnet, {**written, "cache_write_1h": 300_000}).usd == pytest.approx(3.90)
    mixed = {"prompt": 300, "cache_write": 300, "cache_write_1h": 100}
    assert cost_of(sonnet, mixed).usd == pytest.approx((200 * 3.75 + 100 * 6.0) / 1e6)
    # An operator's price names its own, or takes twice its input price.
    assert cost_of(Price(1.0, 1.0, cache_write_1h=3.0), {"prompt": 10, "cache_write": 10, "cache_write_1h": 10}
                   ).usd == pytest.approx(30 / 1e6)  # fmt: skip
    assert cost_of(Price(0.0, 0.0), {"prompt": 10, "cache_write": 10, "cache_write_1h": 10}).usd == 0


def test_a_request_asking_for_one_hour_writes_reserves_its_prompt_at_that_price() -> None:
    sonnet = Price(3.0, 15.0, 0.30, 3.75)
    assert worst_case(sonnet, 20_000, 1_000, hour_cache=True) == pytest.approx((20_000 * 6.0 + 1_000 * 15) / 1e6)
    assert worst_case(sonnet, 20_000, 1_000) == pytest.approx((20_000 * 3.75 + 1_000 * 15) / 1e6)


@pytest.mark.parametrize(("payload", "hour"), [
    ({"system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}, True),
    ({"tools": [{"name": "t", "input_schema": {}, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}, True),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}, True),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "text", "text": "out", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}]}, True),
    ({"cache_control": {"type": "ephemeral", "ttl": "1h"}, "messages": []}, True),  # automatic caching
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]}, False),  # 5 minutes
    ({"messages": [{"role": "user", "content": 'say "ttl": "1h"'}]}, False),
    ({"messages": "x", "system": "s", "tools": None}, False),
])  # fmt: skip
def test_which_requests_ask_for_one_hour_writes(payload: dict[str, Any], hour: bool) -> None:
    assert asks_hour_cache(payload) is hour


def test_a_catch_all_of_the_operators_prices_only_what_nothing_else_does() -> None:
    """The load warning tells an operator to add a ``"*"`` catch-all: it must not reprice every
    shipped model."""
    table = PriceTable.of({"*": Price(9.0, 90.0), "my-model*": Price(1.0, 2.0)})
    assert _tokens(table.price_for("claude-sonnet-4-5")) == SONNET_4_LONG
    assert table.price_for("my-model-7") == Price(1.0, 2.0)
    assert _tokens(table.price_for("gemini-3.8-flash")) == Price(9.0, 90.0)
