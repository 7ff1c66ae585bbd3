"""The real openai SDK, sync and async, against `make run` with the shipped config."""

from __future__ import annotations

import asyncio
import itertools
import json
import time

import openai
import pytest

from tests.fakeupstream import Drop, FakeUpstream, Reply, Stream, chunk

pytestmark = pytest.mark.e2e

_count = itertools.count()


def msg() -> list[dict[str, str]]:
    """A fresh conversation per call: the gateway answers an identical request that just
    failed from memory (the loop breaker), and these tests each want a fresh exchange."""
    return [{"role": "user", "content": f"Say hello #{next(_count)}"}]
OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
RATE = {"error": {"message": "Rate limit reached for requests", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}




def test_success_sync_and_async(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    c = sdk(readme_gateway)
    r = c.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=msg())
    done = r.parse()
    assert done.choices[0].message.content == "Hello from the fake upstream."
    assert r.headers["x-llm-attempts"] == "1" and r.headers["x-request-id"]
    assert upstream.chat_requests()[-1].headers["Authorization"] == "Bearer sk-client-key"

    async def run() -> str:
        ac = openai.AsyncOpenAI(base_url=readme_gateway.base + "/v1", api_key="k")
        try:
            out = await ac.chat.completions.create(model="gpt-4o-mini", messages=msg())
            return out.choices[0].message.content or ""
        finally:
            await ac.close()

    assert asyncio.run(run()) == "Hello from the fake upstream."


def test_stream_sync_and_async(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    stream = sdk(readme_gateway).chat.completions.create(model="gpt-4o-mini", messages=msg(), stream=True)
    text = "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)
    assert text == "Hello from fake."

    async def run() -> str:
        ac = openai.AsyncOpenAI(base_url=readme_gateway.base + "/v1", api_key="k")
        try:
            s = await ac.chat.completions.create(model="gpt-4o-mini", messages=msg(), stream=True)
            return "".join([ch.choices[0].delta.content or "" async for ch in s if ch.choices])
        finally:
            await ac.close()

    assert asyncio.run(run()) == "Hello from fake."


def test_429_with_retry_after_then_success(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Reply(429, RATE, {"retry-after": "1"}))
    t0 = time.monotonic()
    r = sdk(readme_gateway).chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=msg())
    assert r.parse().choices[0].message.content
    assert r.headers["x-llm-attempts"] == "2" and time.monotonic() - t0 >= 0.95


def test_429_with_long_retry_after_fails_fast_and_stamps_reset(sdk, readme_gateway_alone, upstream: FakeUpstream) -> None:
    upstream.script(Reply(429, RATE, {"retry-after": "40"}))
    t0 = time.monotonic()
    with pytest.raises(openai.RateLimitError) as e:
        sdk(readme_gateway_alone, max_retries=0).chat.completions.create(model="gpt-4o-mini", messages=msg())
    assert time.monotonic() - t0 < 5
    h = e.value.response.headers
    assert h["retry-after"] == "40" and h["x-llm-error-type"] == "rate_limit"
    reset = int(h["x-llm-error-reset-at"])
    assert abs(reset - (time.time() + 40) * 1000) < 5000


def test_insufficient_quota_is_402_after_one_attempt(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    quota = {"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}
    upstream.script(*[Reply(429, quota)] * 5)
    with pytest.raises(openai.APIStatusError) as e:
        sdk(readme_gateway).chat.completions.create(model="gpt-4o-mini", messages=msg())
    assert e.value.status_code == 402 and e.value.response.headers["x-llm-error-type"] == "budget"
    assert e.value.body == quota["error"] or e.value.body == quota
    assert len(upstream.chat_requests()) == 1  # not the SDK's 3, not the gateway's 4


@pytest.mark.parametrize(
    ("status", "body", "exc", "kind"),
    [
        (401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}}, openai.AuthenticationError, "auth"),
        (400, {"error": {"message": "Invalid 'messages[0].role'", "type": "invalid_request_error", "code": None}}, openai.BadRequestError, "unknown"),
        (413, {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}}, openai.APIStatusError, "unknown"),
    ],
)
def test_client_errors_cost_one_attempt(sdk, readme_gateway, upstream: FakeUpstream, status, body, exc, kind) -> None:
    upstream.script(*[Reply(status, body)] * 5)
    with pytest.raises(exc) as e:
        sdk(readme_gateway).chat.completions.create(model="gpt-4o-mini", messages=msg())
    assert e.value.status_code == status and e.value.response.headers["x-llm-error-type"] == kind
    assert len(upstream.chat_requests()) == 1


def test_503_three_times_then_success(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Reply(503, "busy"), Reply(503, "busy"), Reply(503, "busy"))
    r = sdk(readme_gateway).chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=msg())
    assert r.parse().choices[0].message.content and r.headers["x-llm-attempts"] == "4"


@pytest.mark.parametrize("status", [503, 529])
def test_permanent_5xx_costs_six_attempts_not_eighteen(sdk, readme_gateway_alone, upstream: FakeUpstream,
                                                       status: int) -> None:  # fmt: skip
    # docs/errors/retries.md: a permanent 503 costs exactly the gateway's 6 with the SDK's stock retries.
    body = OVERLOADED if status == 529 else {"error": {"message": "busy", "type": "server_error"}}
    upstream.script(*[Reply(status, body)] * 30)
    with pytest.raises(openai.InternalServerError) as e:
        sdk(readme_gateway_alone).chat.completions.create(model="gpt-4o-mini", messages=msg())  # SDK max_retries=2
    h = e.value.response.headers
    assert e.value.status_code == status and h["x-llm-error-type"] == "provider_unavailable"
    assert h["x-should-retry"] == "false" and h["x-llm-attempts"] == "6"
    assert len(upstream.chat_requests()) == 6


def test_connection_dropped_before_response(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Drop())
    out = sdk(readme_gateway, max_retries=0).chat.completions.create(model="gpt-4o-mini", messages=msg())
    assert out.choices[0].message.content and len(upstream.chat_requests()) == 2


def test_stream_dropped_after_two_chunks_raises(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    upstream.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}), chunk({"content": "lo"})], then="drop"))
    got = []
    with pytest.raises(openai.APIError) as e:
        for ch in sdk(readme_gateway).chat.completions.create(model="gpt-4o-mini", messages=msg(), stream=True):
            got.append(ch.choices[0].delta.content if ch.choices else None)
    assert "Hel" in got and "lo" in got
    assert "ended before the response was complete" in str(e.value.message)
    assert len(upstream.chat_requests()) == 1


def test_request_ids_and_log_line_without_secrets(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    c = sdk(readme_gateway, api_key="sk-very-secret-key-123", default_headers={"x-request-id": "trace-e2e-1"})
    r = c.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "my secret prompt text"}])
    assert r.headers["x-request-id"] == "trace-e2e-1"
    deadline = time.monotonic() + 5
    while "trace-e2e-1" not in readme_gateway.logs() and time.monotonic() < deadline:
        time.sleep(0.05)
    logs = readme_gateway.logs()
    line = next(json.loads(x) for x in logs.splitlines() if "trace-e2e-1" in x)
    assert line["status"] == 200 and line["attempts"] == 1 and line["upstream"] == "primary"
    for field in ("request_id", "model", "error_type", "compressed", "duration_ms", "ttfb_ms"):
        assert field in line
    assert "sk-very-secret-key-123" not in logs and "my secret prompt text" not in logs


def test_context_overflow_of_a_long_agent_conversation_is_rescued(sdk, readme_gateway, upstream: FakeUpstream) -> None:
    from tests.convo import agent_conversation, assert_valid_conversation

    upstream.context_limit = 20000
    messages = agent_conversation(rounds=60, output_bytes=2500)
    r = sdk(readme_gateway).chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=messages, max_tokens=2000)
    assert r.parse().choices[0].message.content  # a plain success for the agent
    assert r.headers["x-llm-compressed"] == "true" and r.headers["x-llm-attempts"] == "2"
    first, second = (req.json() for req in upstream.chat_requests())
    assert first["messages"] == messages
    assert_valid_conversation(second["messages"])
    assert second["messages"][0] == messages[0] and second["messages"][-1] == messages[-1]
