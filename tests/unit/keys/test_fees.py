"""Server-side tools' per-call fees and the long-prompt tiers (gateway/keys/prices.py), from the
usage the providers document (tests/corpus/usage/server_tools.json) read by each API's reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis.gemini.wire import GeminiGenerate, GeminiStreamReader
from gateway.apis.messages.wire import AnthropicMessages, AnthropicStreamReader, anthropic_usage
from gateway.apis.responses.wire import OpenAIResponses, ResponsesStreamReader
from gateway.keys.ledger import Accounts, LimitHit, Reservation
from gateway.keys.prices import DEFAULT_SEARCHES, Price, PriceTable, cost_of, declared_searches, worst_case
from gateway.keys.registry import Budget, KeySpec
from gateway.state.memory import MemoryStore

USAGE = {c["name"]: c for c in json.loads(
    (Path(__file__).parents[2] / "corpus" / "usage" / "server_tools.json").read_text())["cases"]}  # fmt: skip
TABLE = PriceTable()


def _body(name: str) -> dict[str, Any]:
    case = USAGE[name]
    assert case["source"]
    body: dict[str, Any] = case["body"]
    return body


def _price(model: str) -> Price:
    price = TABLE.price_for(model)
    assert price is not None
    return price


def test_each_apis_documented_search_usage_counts_its_searches() -> None:
    assert AnthropicMessages().body_usage(_body("anthropic-web-search-usage")) == {
        "prompt": 105 + 7345 + 7123, "completion": 6039, "cache_read": 7123, "cache_write": 7345, "web_search": 1}
    assert OpenAIResponses().body_usage(_body("openai-responses-web-search-output")) == {"web_search": 1}
    assert GeminiGenerate().body_usage(_body("gemini-grounding-with-google-search")) == {"web_search": 2}


def test_streams_count_the_searches_as_their_final_events_state_them() -> None:
    """Anthropic's message_delta carries the usage's totals; the Responses API's
    response.completed the response whole; a Gemini chunk its candidate's grounding."""
    usage = _body("anthropic-web-search-usage")["usage"]
    anthropic = AnthropicStreamReader()
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": usage}
    anthropic.kind(b"event: message_delta\ndata: " + json.dumps(delta).encode() + b"\n\n", committed=False)
    assert anthropic.usage["web_search"] == 1
    responses = ResponsesStreamReader()
    done = {"type": "response.completed", "response": {**_body("openai-responses-web-search-output"),
                                                        "usage": {"input_tokens": 10, "output_tokens": 5}}}
    responses.kind(b"event: response.completed\ndata: " + json.dumps(done).encode() + b"\n\n", committed=False)
    assert responses.usage == {"prompt": 10, "completion": 5, "web_search": 1}
    gemini = GeminiStreamReader()
    gemini.kind(b"data: " + json.dumps(_body("gemini-grounding-with-google-search")).encode() + b"\r\n\r\n",
                committed=False)  # fmt: skip
    assert gemini.usage == {"web_search": 2}


def _sse(name: str, doc: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode()


def test_a_responses_stream_counts_each_search_as_its_item_is_done() -> None:
    """Searches were counted only from response.completed's output, which a stream cut or
    continued before it never gets (audit: 3 searches Codex had received, uncharged). The item
    is the web search guide's; ``response.output_item.done`` carries it whole (the API
    reference's streaming events: ``type``, ``output_index``, ``item``, ``sequence_number``)."""
    output = _body("openai-responses-web-search-output")["output"]
    item = output[0]
    reader = ResponsesStreamReader()
    added = {"type": "response.output_item.added", "output_index": 0, "sequence_number": 2,
             "item": {**item, "status": "in_progress", "action": {"type": "search"}}}  # fmt: skip
    reader.kind(_sse(added["type"], added), committed=False)
    for n, name in enumerate(("response.web_search_call.in_progress", "response.web_search_call.searching",
                              "response.web_search_call.completed")):  # fmt: skip
        doc = {"type": name, "output_index": 0, "item_id": item["id"], "sequence_number": 3 + n}
        reader.kind(_sse(name, doc), committed=True)
    assert reader.usage == {}  # a search is counted once, when its item is done
    done = {"type": "response.output_item.done", "output_index": 0, "item": item, "sequence_number": 6}
    reader.kind(_sse(done["type"], done), committed=True)
    assert reader.usage == {"web_search": 1}  # what a cut here is charged
    final = {"type": "response.completed", "sequence_number": 9,
             "response": {"output": output, "usage": {"input_tokens": 10, "output_tokens": 5}}}  # fmt: skip
    reader.kind(_sse(final["type"], final), committed=True)
    assert reader.usage == {"prompt": 10, "completion": 5, "web_search": 1}  # the same search, not two
    # The greater of the two counts: a final output that lists fewer keeps those streamed.
    again = ResponsesStreamReader()
    again.kind(_sse(done["type"], done), committed=True)
    again.kind(_sse(done["type"], {**done, "output_index": 1}), committed=True)
    again.kind(_sse(final["type"], final), committed=True)
    assert again.usage["web_search"] == 2


def test_a_messages_stream_counts_each_search_as_its_block_starts() -> None:
    """The count is in message_delta's usage alone, which a stream cut or continued never gets:
    each ``server_tool_use`` block of ``web_search`` counts as it starts (the tool's streaming
    example), and a message_delta's count, when one comes, replaces them (a search that failed
    is not billed)."""
    reader = AnthropicStreamReader()
    for doc in _body("anthropic-web-search-stream")["events"]:
        reader.kind(_sse(doc["type"], doc), committed=False)
    assert reader.usage == {"web_search": 1}
    fetch = {"type": "content_block_start", "index": 3,
             "content_block": {"type": "server_tool_use", "id": "srvtoolu_f", "name": "web_fetch"}}  # fmt: skip
    reader.kind(_sse(fetch["type"], fetch), committed=True)
    assert reader.usage == {"web_search": 1}  # web fetch is not billed apart
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9,
             "server_tool_use": {"web_search_requests": 0}}}  # fmt: skip
    reader.kind(_sse(delta["type"], delta), committed=True)
    assert reader.usage == {"completion": 9}


def test_a_search_is_charged_on_top_of_the_tokens() -> None:
    """The audit: 50 searches on claude-sonnet-4-5, 1,000 in and 500 out, were recorded at $0.0105;
    Anthropic bills "$10 per 1,000 searches" on top: $0.5105."""
    used = anthropic_usage({"input_tokens": 1000, "output_tokens": 500, "server_tool_use": {"web_search_requests": 50}})
    assert cost_of(_price("claude-sonnet-4-5"), used).usd == pytest.approx(0.5105)
    # The documented answer: its tokens at Sonnet 4.5's rates, and one search.
    doc = AnthropicMessages().body_usage(_body("anthropic-web-search-usage"))
    tokens = (105 * 3.0 + 7123 * 0.30 + 7345 * 3.75 + 6039 * 15.0) / 1e6
    assert cost_of(_price("claude-sonnet-4-5"), doc).usd == pytest.approx(tokens + 0.01)
    # A web fetch is not billed apart (the API reference's example fetches twice, searches never).
    assert "web_search" not in anthropic_usage({"server_tool_use": {"web_fetch_requests": 2, "web_search_requests": 0}})


@pytest.mark.parametrize(("model", "usd"), [
    ("claude-sonnet-4-5", 2 * 0.01),
    ("claude-opus-4-1", 2 * 0.01),
    ("gpt-5", 2 * 0.01),
    ("o3", 2 * 0.01),
    ("gpt-4o", 2 * 0.01),  # the GA tool's rate; the preview's $25 only where prices: says so
    ("gpt-4.1-mini", 2 * 0.01),
    ("gemini-3.1-pro-preview", 2 * 0.014),  # per query
    ("gemini-2.5-flash", 0.035),  # per grounded answer, however many queries
    ("text-embedding-3-small", 0.0),
])  # fmt: skip
def test_each_familys_fee(model: str, usd: float) -> None:
    """Two searches (the documented Gemini answer ran two queries), no tokens."""
    grounded = GeminiGenerate().body_usage(_body("gemini-grounding-with-google-search"))
    assert cost_of(_price(model), grounded).usd == pytest.approx(usd)


def test_an_operator_sets_or_removes_the_fee() -> None:
    table = PriceTable.of({"claude-haiku*": Price(1.0, 5.0, web_search=0.0), "grok-*": Price(3.0, 15.0, web_search=0.025),
                           "claude-*": Price(3.0, 15.0)})  # fmt: skip
    assert cost_of(table.price_for("claude-haiku-4-5"), {"web_search": 3}).usd == 0.0
    assert cost_of(table.price_for("grok-4"), {"web_search": 4}).usd == pytest.approx(0.10)
    assert cost_of(table.price_for("claude-sonnet-9"), {"web_search": 2}).usd == pytest.approx(0.02)  # the family's
    assert cost_of(table.price_for("qwen3"), {"web_search": 2}).priced is False


def test_a_free_or_open_weight_model_takes_no_familys_fee() -> None:
    """An operator's $0 price for gpt-oss-120b (a local open-weight model on vLLM) took OpenAI's
    ``gpt-*`` fee: Codex on it, declaring ``web_search``, was refused on a $0.05 key that had
    spent nothing (audit). gpt-oss is not OpenAI's served family, and a free price takes no
    family's fee unless it names one."""
    table = PriceTable.of({"gpt-oss*": Price(0.0, 0.0), "claude-local*": Price(0.0, 0.0),
                           "gpt-oss-hosted": Price(0.10, 0.50), "gpt-free": Price(0.0, 0.0, web_search=0.01)})  # fmt: skip
    for model in ("gpt-oss-120b", "claude-local-7b", "gpt-oss-hosted"):
        price = table.price_for(model)
        assert price is not None and cost_of(price, {"web_search": 3}).usd == 0.0, model
        assert worst_case(price, 0, 0, searches=5) == 0.0, model
    assert cost_of(table.price_for("gpt-free"), {"web_search": 3}).usd == pytest.approx(0.03)  # named: kept
    assert cost_of(table.price_for("gpt-5"), {"web_search": 3}).usd == pytest.approx(0.03)  # OpenAI's own


@pytest.mark.parametrize(("payload", "searches"), [
    # Anthropic's docs' tool definition, "max_uses": 5; two such tools add up.
    ({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]}, 5),
    ({"tools": [{"type": "web_search_20260209", "name": "web_search", "max_uses": 2},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}, 5),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, DEFAULT_SEARCHES),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": True}]}, DEFAULT_SEARCHES),
    ({"tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}]}, 0),  # no fee
    ({"tools": [{"name": "web_search", "input_schema": {"type": "object"}}]}, 0),  # the client's own tool
    ({"tools": [{"type": "web_search"}]}, DEFAULT_SEARCHES),  # Codex sends this on every request
    ({"tools": [{"type": "web_search_preview"}], "max_tool_calls": 2}, 2),
    ({"tools": [{"googleSearch": {}}]}, DEFAULT_SEARCHES),
    ({"tools": [{"google_search": {}}]}, DEFAULT_SEARCHES),
    ({"tools": [{"functionDeclarations": []}]}, 0),
    ({"messages": []}, 0),
])  # fmt: skip
def test_the_searches_a_request_may_make(payload: dict[str, Any], searches: int) -> None:
    assert declared_searches(payload) == searches


def test_the_reservation_holds_the_searches_fees() -> None:
    sonnet = _price("claude-sonnet-4-6")
    assert worst_case(sonnet, 1_000, 1_000, searches=5) == pytest.approx((1_000 * 3.75 + 1_000 * 15) / 1e6 + 0.05)
    assert worst_case(_price("gemini-2.5-pro"), 1_000, 0, searches=5) == pytest.approx(1_000 * 1.25 / 1e6 + 0.035)


def test_sonnet_4_and_4_5_prompts_above_200k_are_priced_at_the_long_rate_whole() -> None:
    """Anthropic's "Long context pricing": Sonnet 4.5 / 4 above 200k input tokens, $6 in and $22.50
    out, cache multipliers on top, the threshold counting cache reads and writes; Sonnet 4.6
    "include[s] the full 1M token context window at standard pricing". The usage is the pricing
    page's own example of a request charged at the 1M rates."""
    example = anthropic_usage({"input_tokens": 250000, "cache_creation_input_tokens": 0,
                               "cache_read_input_tokens": 0, "output_tokens": 500})  # fmt: skip
    assert cost_of(_price("claude-sonnet-4-5"), example).usd == pytest.approx((250_000 * 6.0 + 500 * 22.50) / 1e6)
    assert cost_of(_price("claude-sonnet-4-20250514"), example).usd == pytest.approx((250_000 * 6.0 + 500 * 22.50) / 1e6)
    assert cost_of(_price("claude-sonnet-4-6"), example).usd == pytest.approx((250_000 * 3.0 + 500 * 15.0) / 1e6)
    # 100k fresh is below the line; with 150k read from the cache and 10k written, above it.
    cached = anthropic_usage({"input_tokens": 100_000, "cache_read_input_tokens": 150_000,
                              "cache_creation_input_tokens": 10_000, "output_tokens": 1_000,
                              "cache_creation": {"ephemeral_1h_input_tokens": 4_000}})  # fmt: skip
    expected = (100_000 * 6.0 + 150_000 * 0.60 + 6_000 * 7.50 + 4_000 * 12.0 + 1_000 * 22.50) / 1e6
    assert cost_of(_price("claude-sonnet-4-5"), cached).usd == pytest.approx(expected)
    # The reservation takes the tier of the prompt's estimate.
    assert worst_case(_price("claude-sonnet-4-5"), 300_000, 0) == pytest.approx(300_000 * 7.50 / 1e6)


async def test_admission_reserves_the_searches_fees() -> None:
    """``Accounts.admit`` holds a request's declared searches against the budget, so concurrent
    searching requests cannot overspend it: a $0.05 key holding one request that may search 10
    times ($0.10 of fees) refuses the next while it runs."""
    def wall() -> float:
        return 1_800_000_000.0

    acc = Accounts(MemoryStore(wall), PriceTable(), wall)
    key = KeySpec("bob", budget=Budget(0.05, "day"))
    first = await acc.admit(key, "claude-sonnet-4-5", 100, 100, searches=10)
    assert isinstance(first, Reservation)
    assert first.reserve_usd == pytest.approx((100 * 3.75 + 100 * 15.0) / 1e6 + 0.10)
    held = await acc.admit(key, "claude-sonnet-4-5", 100, 100)
    assert isinstance(held, LimitHit) and held.kind == "budget_held"
    await acc.settle(first, {"prompt": 100, "completion": 100, "web_search": 1})
    assert isinstance(await acc.admit(key, "claude-sonnet-4-5", 100, 100), Reservation)
