"""The real `anthropic` SDK (sync, async, streaming) against the gateway as a subprocess,
in front of the fake upstream speaking Anthropic Messages. Upstream calls are counted
at the fake: the SDK's own retries (2 by default, honouring `x-should-retry` and any
`retry-after`, see CLAUDE_CODE_NOTES.md) must never multiply the gateway's."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.anthropic_convo import (
    CLAUDE_CODE_BETA,
    SYSTEM,
    TOOLS,
    assert_valid_messages,
    messages_conversation,
)
from tests.e2e.conftest import RunningGateway
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    anthropic_error,
    anthropic_head,
    anthropic_overflow,
    estimate_tokens,
    text_delta,
)

pytestmark = pytest.mark.e2e

MODEL = "claude-opus-4-8"
OVERLOADED = anthropic_error(529, "overloaded_error", "Overloaded")
RATE = {"type": "error", "error": {"type": "rate_limit_error",
                                   "message": "Number of request tokens has exceeded your per-minute rate limit"}}  # fmt: skip
BILLING = ("Your credit balance is too low to access the Anthropic API. "
           "Please go to Plans & Billing to upgrade or purchase credits.")  # fmt: skip


def msgs() -> list[dict[str, Any]]:
    """A fresh prompt per call, so no test meets another's remembered failure."""
    return [{"role": "user", "content": f"Say hello ({uuid.uuid4().hex[:8]})"}]


@pytest.fixture
def claude() -> Iterator[Any]:
    """`claude(gateway, **options)` → an anthropic.Anthropic client for it, closed after the test."""
    made: list[anthropic.Anthropic] = []

    def make(gw: RunningGateway, **kw: Any) -> anthropic.Anthropic:
        c = anthropic.Anthropic(base_url=gw.base, api_key="sk-ant-client-key", **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def test_success_sync_and_async(claude, readme_gateway, upstream: FakeUpstream) -> None:
    r = claude(readme_gateway).messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=msgs())
    out = r.parse()
    assert out.content[0].text == "Hello from the fake upstream." and out.stop_reason == "end_turn"
    assert r.headers["x-llm-attempts"] == "1" and r.headers["x-request-id"]
    [sent] = upstream.messages_requests()
    # What the SDK sent is what the provider gets: its version header and its credential.
    assert sent.headers["anthropic-version"] == r.http_request.headers["anthropic-version"]
    assert "sk-ant-client-key" in (sent.headers.get("x-api-key", "") + sent.headers.get("Authorization", ""))

    async def run() -> str:
        ac = anthropic.AsyncAnthropic(base_url=readme_gateway.base, api_key="k")
        try:
            done = await ac.messages.create(model=MODEL, max_tokens=64, messages=msgs())
            return done.content[0].text  # type: ignore[union-attr]
        finally:
            await ac.close()

    assert asyncio.run(run()) == "Hello from the fake upstream."
    assert len(upstream.messages_requests()) == 2


def test_stream_sync_and_async(claude, readme_gateway, upstream: FakeUpstream) -> None:
    with claude(readme_gateway).messages.stream(model=MODEL, max_tokens=64, messages=msgs()) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text == "Hello from fake." and final.stop_reason == "end_turn"
    assert final.usage.input_tokens == 25 and final.usage.output_tokens == 15

    async def run() -> tuple[str, list[str]]:
        ac = anthropic.AsyncAnthropic(base_url=readme_gateway.base, api_key="k")
        try:
            raw = await ac.messages.create(model=MODEL, max_tokens=64, messages=msgs(), stream=True)
            kinds, out = [], ""
            async for ev in raw:
                kinds.append(ev.type)
                if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                    out += ev.delta.text
            return out, kinds
        finally:
            await ac.close()

    out, kinds = asyncio.run(run())
    assert out == "Hello from fake." and kinds[0] == "message_start" and kinds[-1] == "message_stop"


def test_overloaded_twice_then_success_costs_three_upstream_calls(claude, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(OVERLOADED, OVERLOADED)
    r = claude(readme_gateway).messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=msgs())
    assert r.parse().content[0].text == "Hello from the fake upstream."
    assert r.headers["x-llm-attempts"] == "3" and len(upstream.messages_requests()) == 3


def test_permanent_overload_is_retried_by_the_gateway_only(claude, readme_gateway_alone, upstream: FakeUpstream) -> None:
    upstream.script(*[OVERLOADED] * 30)
    with pytest.raises(anthropic.InternalServerError) as e:  # OverloadedError in newer SDKs
        claude(readme_gateway_alone).messages.create(model=MODEL, max_tokens=64, messages=msgs())  # SDK max_retries=2
    h = e.value.response.headers
    assert e.value.status_code == 529 and e.value.body == OVERLOADED.body  # passed through unmodified
    assert h["x-should-retry"] == "false" and h["x-llm-error-type"] == "provider_unavailable"
    assert len(upstream.messages_requests()) == int(h["x-llm-attempts"]) == 6  # not 18


def test_rate_limit_with_short_retry_after_is_waited_out(claude, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Reply(429, RATE, {"retry-after": "1"}))
    t0 = time.monotonic()
    r = claude(readme_gateway).messages.with_raw_response.create(model=MODEL, max_tokens=64, messages=msgs())
    assert r.parse().content[0].text == "Hello from the fake upstream."
    assert time.monotonic() - t0 >= 0.95
    assert r.headers["x-llm-attempts"] == "2" and len(upstream.messages_requests()) == 2


def test_rate_limit_with_long_retry_after_fails_fast_and_the_sdk_does_not_wait_it_out(
    claude, readme_gateway_alone, upstream: FakeUpstream
) -> None:
    # Unstamped, this SDK would sleep the full 40 s twice (it honours retry-after uncapped),
    # and Claude Code ~10 times: so look at the stamp first, without SDK retries.
    upstream.script(*[Reply(429, RATE, {"retry-after": "40"})] * 5)
    t0 = time.monotonic()
    with pytest.raises(anthropic.RateLimitError) as e:
        claude(readme_gateway_alone, max_retries=0).messages.create(model=MODEL, max_tokens=64, messages=msgs())
    assert time.monotonic() - t0 < 5
    h = e.value.response.headers
    assert h["retry-after"] == "40" and h["x-llm-error-type"] == "rate_limit"
    assert abs(int(h["x-llm-error-reset-at"]) - (time.time() + 40) * 1000) < 5000
    assert e.value.body == RATE
    assert h.get("x-should-retry") == "false"
    assert len(upstream.messages_requests()) == 1
    # With the SDK's default retries: still one upstream call, still fast.
    t0 = time.monotonic()
    with pytest.raises(anthropic.RateLimitError):
        claude(readme_gateway_alone).messages.create(model=MODEL, max_tokens=64, messages=msgs())
    assert time.monotonic() - t0 < 5
    assert len(upstream.messages_requests()) == 2


@pytest.mark.parametrize("status", [402, 400])
def test_billing_error_is_402_after_one_upstream_call(claude, readme_gateway, upstream: FakeUpstream, status) -> None:
    kind = "billing_error" if status == 402 else "invalid_request_error"
    upstream.script(*[anthropic_error(status, kind, BILLING)] * 5)
    with pytest.raises(anthropic.APIStatusError) as e:
        claude(readme_gateway).messages.create(model=MODEL, max_tokens=64, messages=msgs())
    assert e.value.status_code == 402 and e.value.response.headers["x-llm-error-type"] == "budget"
    assert e.value.response.headers["x-should-retry"] == "false"
    assert e.value.body["error"]["message"] == BILLING  # type: ignore[index]
    assert len(upstream.messages_requests()) == 1


def test_stream_cut_after_two_deltas_raises_and_never_stops_cleanly(claude, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Stream([*anthropic_head(), text_delta("Hel"), text_delta("lo")], then="drop"))
    kinds: list[str] = []
    text = ""
    with pytest.raises(anthropic.APIStatusError) as e:
        for ev in claude(readme_gateway).messages.create(model=MODEL, max_tokens=64, messages=msgs(), stream=True):
            kinds.append(ev.type)
            if ev.type == "content_block_delta":
                text += ev.delta.text  # type: ignore[union-attr]
    assert text == "Hello" and "message_stop" not in kinds
    body = e.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["type"]
    assert len(upstream.messages_requests()) == 1  # nothing is retried once bytes reached the client


def test_stream_cut_is_an_error_for_the_async_stream_helper(readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Stream([*anthropic_head(), text_delta("Hel"), text_delta("lo")], then="drop"))

    async def run() -> str:
        ac = anthropic.AsyncAnthropic(base_url=readme_gateway.base, api_key="k")
        got = ""
        try:
            async with ac.messages.stream(model=MODEL, max_tokens=64, messages=msgs()) as s:
                async for t in s.text_stream:
                    got += t
        finally:
            await ac.close()
        return got

    with pytest.raises(anthropic.APIStatusError):
        asyncio.run(run())


def test_stalled_stream_errors_within_the_idle_timeout(claude, fast_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Stream([*anthropic_head(), text_delta("Hel"), text_delta("lo")], then="stall"))
    t0 = time.monotonic()
    kinds: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as e:  # fast_gateway: idle_s 1
        for ev in claude(fast_gateway).messages.create(model=MODEL, max_tokens=64, messages=msgs(), stream=True):
            kinds.append(ev.type)
    assert 0.9 <= time.monotonic() - t0 < 5
    assert "message_stop" not in kinds and kinds.count("content_block_delta") == 2
    assert isinstance(e.value.body, dict) and e.value.body["type"] == "error"


def _blocks(m: dict[str, Any]) -> list[dict[str, Any]]:
    c = m["content"]
    return c if isinstance(c, list) else [{"type": "text", "text": c}]


def test_overflowing_agent_conversation_is_rescued_in_one_retry(claude, readme_gateway, upstream: FakeUpstream) -> None:
    convo = messages_conversation(rounds=30, output_bytes=2000)
    payload: dict[str, Any] = {"model": MODEL, "max_tokens": 2048, "system": SYSTEM, "messages": convo, "tools": TOOLS,
                               "thinking": {"type": "adaptive"}}  # fmt: skip  (Opus 4.8 thinks adaptively only)
    used = estimate_tokens(payload)
    limit = used * 6 // 10  # Anthropic's own 400, computed from what the fake actually received
    upstream.context_limit = limit
    # The conversation has Claude Code's mid-conversation system turns, and so its beta header.
    with claude(readme_gateway).messages.with_streaming_response.create(**payload, stream=True,
                                                                         extra_headers=CLAUDE_CODE_BETA) as r:
        assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
        kinds = [json.loads(line[6:])["type"] for line in r.iter_lines() if line.startswith("data: ")]
    assert kinds[-1] == "message_stop"

    first, second = upstream.messages_requests()
    assert first.json() == {**payload, "stream": True}
    sent = second.json()
    assert estimate_tokens(sent) + sent["max_tokens"] <= limit
    assert_valid_messages(sent["messages"])  # every tool_use answered in the next user message, ends with user
    assert sent["system"] == SYSTEM and sent["thinking"] == payload["thinking"] and sent["model"] == MODEL
    # The newest user turn and everything after it (the current tool round) are untouched.
    newest = max(i for i, m in enumerate(convo) if m["role"] == "user"
                 and not any(b.get("type") == "tool_result" for b in _blocks(m)))  # fmt: skip
    tail = len(convo) - newest
    assert sent["messages"][-tail:] == convo[newest:]
    # The last assistant turn's signed thinking block reaches the provider byte for byte.
    last_thinking = next(b for b in convo[-2]["content"] if b["type"] == "thinking")
    assert json.dumps(last_thinking).encode() in second.body or (
        last_thinking["signature"].encode() in second.body
        and next(b for b in sent["messages"][-2]["content"] if b["type"] == "thinking") == last_thinking)
    # Every kept thinking block is unmodified (signed content must never be edited).
    originals = {b["signature"]: b for m in convo for b in _blocks(m) if b.get("type") == "thinking"}
    for m in sent["messages"]:
        for b in _blocks(m):
            if b.get("type") == "thinking":
                assert originals[b["signature"]] == b
    assert len(upstream.messages_requests()) == 2


def test_overflow_the_gateway_cannot_fix_reaches_the_sdk_once(claude, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(*[anthropic_overflow(200000, 210000)] * 5)
    with pytest.raises(anthropic.BadRequestError) as e:
        claude(readme_gateway).messages.create(model=MODEL, max_tokens=64, messages=msgs())
    assert "prompt is too long" in e.value.message
    assert e.value.response.headers["x-llm-error-type"] == "context_overflow"
    assert len(upstream.messages_requests()) <= 2  # at most one compress-and-retry, never a loop
