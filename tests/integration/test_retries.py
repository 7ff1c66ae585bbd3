"""Status-specific retries, waits and stamps, against the fake upstream."""

import json
import time

import pytest

from tests.fakeupstream import Drop, Hang, Reply
from tests.integration.test_gemini_on_chat import corpus, post

RATE_LIMITED = {"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on requests per min (RPM): Limit 3, Used 3, Requested 1.", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
QUOTA = {"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}


async def test_429_with_retry_after_is_waited_out_then_succeeds(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(429, RATE_LIMITED, {"retry-after": "2"}), Reply(200, {"ok": True}))
    status, headers, body = await gw.chat()
    assert (status, json.loads(body)) == (200, {"ok": True})
    assert gw.slept == [2.0]
    assert headers["x-llm-attempts"] == "2"
    assert gw.metric("llm_gateway_retries_total", upstream="primary", error_type="rate_limit") == 1


async def test_429_with_retry_after_ms_wins(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(429, RATE_LIMITED, {"retry-after-ms": "150", "retry-after": "9"}), Reply(200, {}))
    await gw.chat()
    assert gw.slept == [0.15]


async def test_long_retry_after_is_returned_at_once_with_reset_stamp(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(429, RATE_LIMITED, {"retry-after": "40"}))
    status, headers, body = await gw.chat()
    assert status == 429 and gw.slept == []
    assert headers["x-llm-error-type"] == "rate_limit"
    assert headers["x-llm-error-retryable"] == "true"
    assert headers["retry-after"] == "40"
    assert int(headers["x-llm-error-reset-at"]) > 0
    # SDKs sleep out a long retry-after themselves (the openai SDK up to 60 s, twice), blocking
    # the agent; it schedules itself from retry-after / reset-at instead.
    assert headers["x-should-retry"] == "false"
    assert json.loads(body) == RATE_LIMITED


async def test_rate_limit_gives_up_after_its_retries(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(*[Reply(429, RATE_LIMITED)] * 10)
    status, headers, _ = await gw.chat()
    assert status == 429 and headers["x-llm-attempts"] == "4"
    assert headers["x-should-retry"] == "false"
    assert len(gw.slept) == 3


async def test_insufficient_quota_is_budget_answered_402_once(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(429, QUOTA))
    status, headers, body = await gw.chat()
    assert status == 402 and json.loads(body) == QUOTA
    assert headers["x-llm-error-type"] == "budget"
    assert headers["x-llm-error-retryable"] == "false"
    assert headers["x-should-retry"] == "false"
    assert headers["x-llm-attempts"] == "1" and len(gw.fake.chat_requests()) == 1


async def test_400_401_413_are_not_retried(make_gateway) -> None:
    gw = await make_gateway()
    cases = [
        (400, {"error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error", "code": None}}, "unknown"),
        (401, {"error": {"message": "Incorrect API key provided: sk-xx", "type": "invalid_request_error", "code": "invalid_api_key"}}, "auth"),
        (413, {"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum allowed number of bytes."}}, "unknown"),
    ]
    for code, body, kind in cases:
        before = len(gw.fake.chat_requests())
        gw.fake.script(Reply(code, body))
        status, headers, got = await gw.chat()
        assert (status, json.loads(got)) == (code, body)
        assert headers["x-llm-error-type"] == kind
        assert headers["x-should-retry"] == "false"
        assert len(gw.fake.chat_requests()) == before + 1
    assert gw.slept == []


async def test_503s_then_success(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(503, "upstream connect error"), Reply(503, ""), Reply(503, ""), Reply(200, {"ok": 1}))
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-attempts"] == "4"
    assert len(gw.slept) == 3 and all(0 < s <= 10 for s in gw.slept)


async def test_permanent_529_costs_exactly_six_attempts(make_gateway) -> None:
    gw = await make_gateway()
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    gw.fake.script(*[Reply(529, overloaded)] * 20)
    status, headers, body = await gw.chat()
    assert status == 529 and json.loads(body) == overloaded
    assert headers["x-llm-attempts"] == "6" and len(gw.fake.chat_requests()) == 6
    assert headers["x-llm-error-type"] == "provider_unavailable"
    assert headers["x-should-retry"] == "false"
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="provider_unavailable") == 6


async def test_connection_dropped_before_response_is_retried(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Drop(), Reply(200, {"ok": 1}))
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-attempts"] == "2"


@pytest.mark.stall_timeouts
async def test_hung_upstream_times_out_at_first_byte_then_succeeds(make_gateway) -> None:
    gw = await make_gateway()  # first_byte_s is 1 s in the harness
    gw.fake.script(Hang(30), Reply(200, {"ok": 1}))
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-attempts"] == "2"


@pytest.mark.stall_timeouts
async def test_hung_upstream_forever_is_504(make_gateway) -> None:
    gw = await make_gateway("retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}}\n")
    gw.fake.script(Hang(30), Hang(30))
    status, headers, body = await gw.chat()
    assert status == 504 and json.loads(body)["error"]["code"] == "upstream_timeout"
    assert headers["x-llm-error-type"] == "provider_unavailable"


async def test_deadline_bounds_all_attempts(make_gateway) -> None:
    gw = await make_gateway("retry: {deadline_s: 1.5}\n", real_sleep=True)
    gw.fake.script(*[Hang(30)] * 10)
    import time
    t0 = time.monotonic()
    status, headers, _ = await gw.chat()
    assert status == 504 and time.monotonic() - t0 < 2.5


GEMINI_ON_CHAT = ", api_key: upkey, apis: [chat], model_map: {'gemini-*': auto-r429}"


async def test_a_reset_another_request_ended_on_makes_a_different_requests_429_final(make_gateway) -> None:
    """Gemini CLI's stock turn: its routing call (a flash-lite model) spends the gateway's
    retries on a 429, then its answer's model, mapped to the same upstream model, asks 0 s
    later while that reset is pending: one attempt, answered with its 429, not another round
    (measured with the CLI: 4 and 4 attempts, now 4 and 1)."""
    shift = [0.0]
    gw = await make_gateway(upstream_yaml=GEMINI_ON_CHAT, wall=lambda: time.time() + shift[0])
    gw.fake.script(*[Reply(429, RATE_LIMITED, {"retry-after": "5"})] * 20)
    status, headers, _ = await post(gw, "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                                    corpus("gemini-cli-0.61-route"))  # fmt: skip
    assert status == 429 and headers["x-llm-attempts"] == "4" and gw.slept == [5.0, 5.0, 5.0]
    status, headers, _ = await post(gw, "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
                                    corpus("gemini-cli-0.61-first"))  # fmt: skip
    assert status == 429 and headers["x-llm-attempts"] == "1" and headers["x-should-retry"] == "false"
    assert headers["retry-after"] == "5" and len(gw.fake.chat_requests()) == 5 and len(gw.slept) == 3
    # Another upstream model is another limit: its retries are its own.
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]})
    assert status == 429 and headers["x-llm-attempts"] == "4"
    shift[0] = 6.0  # the reset came: a new request is retried by the class's rule again
    status, headers, _ = await post(gw, "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent?alt=sse",
                                    corpus("gemini-cli-0.61-tool-result"))  # fmt: skip
    assert status == 429 and headers["x-llm-attempts"] == "4"
    assert len(gw.fake.chat_requests()) == 5 + 4 + 4


async def test_a_pending_reset_without_a_stated_wait_is_answered_with_what_is_left(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", api_key: upkey")
    gw.fake.script(*[Reply(429, RATE_LIMITED, {"retry-after": "8"})] * 4, Reply(429, RATE_LIMITED))
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "1"}]})
    assert status == 429 and headers["x-llm-attempts"] == "4"
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "2"}]})
    assert status == 429 and headers["x-llm-attempts"] == "1" and headers["retry-after"] in ("7", "8")
    assert json.loads(body) == RATE_LIMITED  # the provider's own answer, its wait stamped


async def test_a_forwarded_keys_pending_reset_is_its_own(make_gateway) -> None:
    """Without an ``api_key`` the client's credential goes upstream, and its limit is its own:
    another client's 429 on the same model still gets its retries."""
    gw = await make_gateway()
    gw.fake.script(*[Reply(429, RATE_LIMITED, {"retry-after": "5"})] * 20)
    alice, bob = {"Authorization": "Bearer sk-alice"}, {"Authorization": "Bearer sk-bob"}
    status, headers, _ = await gw.chat(headers=alice)
    assert status == 429 and headers["x-llm-attempts"] == "4"
    one = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "another"}]}
    status, headers, _ = await gw.chat(one, headers=bob)
    assert status == 429 and headers["x-llm-attempts"] == "4"
    status, headers, _ = await gw.chat(one, headers=alice)
    assert status == 429 and headers["x-llm-attempts"] == "1"


async def test_a_count_tokens_429_notes_no_reset_for_message_creation(make_gateway) -> None:
    """Anthropic limits token counting apart from message creation ("Token counting and message
    creation have separate and independent rate limits", its token-counting guide): a
    count_tokens request that ran out of retries on a 429 leaves a Messages request's own 429
    its retries (review: it was made final, x-should-retry false, and Claude Code's turn failed)."""
    from tests.fakeupstream import anthropic_error, anthropic_message

    gw = await make_gateway(upstream_yaml=", api_key: upkey, apis: [messages]")
    gw.fake.keys.counting_limited_until("upkey", time.time() + 30)  # the fake's 429 with its wait
    count = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", json=count,
                               headers={"anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        assert r.status == 429 and r.headers["x-llm-attempts"] == "4"  # its retries spent on the reset
    limited = anthropic_error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit.")
    gw.fake.script(Reply(429, limited.body, {"retry-after": "1"}), Reply(200, anthropic_message("claude-sonnet-4-5")))
    status, headers, _ = await gw.messages()
    assert status == 200 and headers["x-llm-attempts"] == "2"
