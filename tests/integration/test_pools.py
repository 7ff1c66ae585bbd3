"""Pools (issue #34): several deployments serve one model; a key that cannot serve is routed
around at once, and a conversation stays on the deployment whose prompt cache holds it.

Each deployment is its own fake upstream, so calls are counted per deployment. Sleeps are
recorded, not slept: a wait the gateway would make shows up in ``gw.slept``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from gateway.fake.responses_rules import seal
from gateway.live import LIVE
from gateway.policy import loop_breaker
from gateway.state.pools import record_key
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    chat_completion,
    chunk,
    data_events,
    estimate_tokens,
    overflow_error,
    stream_events,
)
from tests.integration.conftest import Gateway, eventually, same_minute

# OpenAI's per-minute wording (tests/corpus/openai.json); the wait comes from retry-after. An
# hour's wait without per-minute wording would read as a quota (budget), as it should.
RATE_LIMITED = {"error": {"message": "Rate limit reached for gpt-4o-mini in organization org-x on requests per "
                          "min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s.", "type": "requests",
                          "param": None, "code": "rate_limit_exceeded"}}  # fmt: skip
INVALID_KEY = {"error": {"message": "Incorrect API key provided: sk-xxxx.", "type": "invalid_request_error",
                         "param": None, "code": "invalid_api_key"}}  # fmt: skip
NO_QUOTA = {"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
                      "type": "insufficient_quota", "param": None, "code": "insufficient_quota"}}  # fmt: skip
UNAVAILABLE = {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}

Pool = tuple[Gateway, dict[str, FakeUpstream]]
MakePool = Callable[..., Awaitable[Pool]]


@pytest.fixture
async def make_pool(make_gateway) -> AsyncIterator[MakePool]:  # type: ignore[no-untyped-def]
    fakes: list[FakeUpstream] = []

    async def make(pool_yaml: str = "", extra: str = "", names: tuple[str, ...] = ("a", "b", "c"),
                   member_extra: dict[str, str] | None = None, more_upstreams: str = "",
                   real_sleep: bool = False, wall: Callable[[], float] = time.time,
                   timeouts: str | None = None, rand: Callable[[], float] | None = None) -> Pool:  # fmt: skip
        by_name = {}
        lines = []
        for n in names:
            fake = await FakeUpstream().start()
            fakes.append(fake)
            by_name[n] = fake
            lines.append(f"  - {{name: {n}, base_url: '{fake.url}', api_key: key-{n}, models: ['gpt-*']"
                         f"{(member_extra or {}).get(n, '')}}}\n")  # fmt: skip
        pools = f"pools:\n  - {{name: gpt, models: ['gpt-*'], deployments: [{', '.join(names)}]{pool_yaml}}}\n"
        gw = await make_gateway(pools + extra, fake=by_name[names[0]], upstreams="".join(lines) + more_upstreams,
                                real_sleep=real_sleep, wall=wall, **({"timeouts": timeouts} if timeouts else {}),
                                **({"rand": rand} if rand else {}))
        return gw, by_name

    yield make
    for fake in fakes:
        await fake.close()


async def _a_then_b(make_pool: MakePool, **kw: Any) -> Pool:
    """A pool of a and b that asks a first (weight), each request on its own (no affinity)."""
    return await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                           member_extra={"a": ", weight: 1000000"}, **kw)  # fmt: skip


def _calls(fakes: dict[str, FakeUpstream]) -> dict[str, int]:
    return {n: len(f.chat_requests()) for n, f in fakes.items()}


def _turn(i: int, session: str = "s-1") -> tuple[dict[str, Any], dict[str, str]]:
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "fix the bug"}]
    for k in range(i):
        msgs += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"ok {k}"}]
    return {"model": "gpt-4o-mini", "messages": msgs}, {"session-id": session}


async def test_a_rate_limited_key_is_routed_around_at_once_and_not_called_again_before_its_reset(
    make_pool: MakePool,
) -> None:
    gw, fakes = await make_pool()
    fakes["b"].always = Reply(429, RATE_LIMITED, {"retry-after": "3600"})
    fakes["a"].always = fakes["c"].always = None
    for i in range(30):
        status, headers, _ = await gw.chat(_chat(f"conversation {i}"))
        assert status == 200
        assert headers["x-llm-upstream"] in ("a", "b", "c")
        assert headers["x-llm-upstream"] != "b"
    assert gw.slept == []  # no backoff: the sibling took it at once
    assert _calls(fakes)["b"] <= 1  # once to learn; never again within the hour
    assert _calls(fakes)["a"] > 0 and _calls(fakes)["c"] > 0
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="b", reason="rate_limit") == 1


def _chat(text: str) -> dict[str, Any]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}


async def test_the_attempt_that_met_the_limit_counts_and_the_answer_names_the_sibling(make_pool: MakePool) -> None:
    # a is the first pick by weight (1000:1); affinity off, so nothing else decides.
    gw, fakes = await _a_then_b(make_pool)
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "60"}))
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "b"
    assert headers["x-llm-attempts"] == "2"
    assert "x-llm-fallbacks" not in headers  # a sibling is not a fallback
    assert gw.metric("llm_gateway_pool_moves_total", pool="gpt", deployment="a", error_type="rate_limit") == 1
    assert gw.metric("llm_gateway_pool_picks_total", pool="gpt", deployment="b", reason="moved") == 1


async def test_with_every_key_limited_the_client_gets_the_earliest_reset_and_no_call_is_made_after(
    make_pool: MakePool,
) -> None:
    gw, fakes = await make_pool()
    for name, wait in (("a", "3600"), ("b", "600"), ("c", "1200")):
        fakes[name].always = Reply(429, RATE_LIMITED, {"retry-after": wait})
    before = time.time()
    status, headers, body = await gw.chat()
    assert status == 429
    assert headers["x-llm-error-type"] == "rate_limit"
    assert 599 <= int(headers["retry-after"]) <= 600
    assert abs(int(headers["x-llm-error-reset-at"]) - (before + 600) * 1000) < 5000
    assert headers["x-llm-attempts"] == "3"
    assert headers["x-should-retry"] == "false"
    assert gw.slept == []
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"  # the provider's own body
    # Every key is known to be limited: the next requests are answered without a call.
    for _ in range(5):
        status, headers, body = await gw.chat(_chat("again"))
        assert status == 429 and 599 <= int(headers["retry-after"]) <= 600
        assert headers["x-llm-attempts"] == "0"
    assert sum(_calls(fakes).values()) == 3


async def test_with_every_key_limited_every_wait_the_client_gets_is_the_earliest_reset(make_pool: MakePool) -> None:
    """The relayed 429 is the last key's, stamped with the pool's earliest reset: its own
    retry-after-ms and reset headers, which the openai SDKs read before retry-after, still said
    that key's later wait (retry-after 40 beside retry-after-ms 50000, measured)."""
    gw, fakes = await make_pool(pool_yaml=", affinity: {enabled: false}", member_extra={"a": ", weight: 1000000"})
    for name, wait in (("a", 600), ("b", 700), ("c", 650)):  # a, the earliest, is tried first
        fakes[name].always = Reply(429, RATE_LIMITED, {
            "retry-after": str(wait), "retry-after-ms": str(wait * 1000), "x-ratelimit-limit-requests": "3",
            "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": f"{wait // 60}m{wait % 60}s"})
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        with pytest.raises(openai.RateLimitError) as e:
            await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()
    h = e.value.response.headers
    assert h["x-llm-upstream"] in ("b", "c") and h["x-llm-attempts"] == "3"  # the last key's 429
    assert 599 <= int(h["retry-after"]) <= 600
    assert 599_000 <= float(h.get("retry-after-ms", "600000")) <= 600_000
    assert not any("reset" in k.lower() and "ratelimit" in k.lower() for k in h)


GOOGLE_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


def _google_429(wait: int) -> dict[str, Any]:
    return {"error": {"code": 429, "message": "You exceeded your current quota, please check your plan and billing "
                      "details.", "status": "RESOURCE_EXHAUSTED",
                      "details": [{"@type": GOOGLE_RETRY_INFO, "retryDelay": f"{wait}s"}]}}  # fmt: skip


@pytest.mark.parametrize("apis", ["gemini", "chat"])
async def test_with_every_key_limited_a_gemini_client_reads_the_earliest_reset_in_the_body_too(
    make_pool: MakePool, apis: str,
) -> None:
    """Gemini CLI waits what the body's RetryInfo says (``parseDurationInSeconds(retryInfo.
    retryDelay)``), not retry-after: the relayed 429 said retry-after 40 beside the last key's
    retryDelay "50s", relayed as Google wrote it or rendered from the key's own wait (measured)."""
    member = {n: f", weight: {w}, apis: [{apis}]" for n, w in (("a", 1000000), ("b", 1), ("c", 1))}
    gw, fakes = await make_pool(pool_yaml=", affinity: {enabled: false}", member_extra=member)
    for name, wait in (("a", 600), ("b", 700), ("c", 650)):  # a, the earliest, is tried first
        body = _google_429(wait) if apis == "gemini" else RATE_LIMITED
        fakes[name].always = Reply(429, body, {"retry-after": str(wait)} if apis == "chat" else {})
    payload = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.post(gw.base + "/v1beta/models/gpt-4o-mini:generateContent", json=payload) as r:
        status, headers, doc = r.status, r.headers, await r.json()
    assert status == 429 and headers["x-llm-attempts"] == "3" and headers["x-llm-upstream"] in ("b", "c")
    assert 599 <= int(headers["retry-after"]) <= 600
    [delay] = [d["retryDelay"] for d in doc["error"]["details"] if d["@type"] == GOOGLE_RETRY_INFO]
    assert 599 <= float(delay.removesuffix("s")) <= 600


async def test_a_request_the_translation_refuses_is_the_gateways_own_refusal_not_a_keys(make_pool: MakePool) -> None:
    """No deployment is asked: counted as upstream="none" (docs/operations/alerts.md), not under the
    pool's or a key's name, where an upstream's 400 would be."""
    gw, fakes = await make_pool(names=("a", "b"), member_extra={"a": ", apis: [chat]", "b": ", apis: [chat]"})
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "input": "hi", "top_logprobs": 5})
    assert status == 400 and headers["x-llm-attempts"] == "0", body
    assert sum(_calls(fakes).values()) == 0
    answered = {dict(k)["upstream"]: v for k, v in (await gw.scraped("llm_gateway_requests_total")).items()
                if dict(k)["status"] == "400"}  # fmt: skip
    assert answered == {"none": 1}


async def test_with_every_key_limited_briefly_the_gateway_waits_for_the_earliest_reset(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"), real_sleep=True)
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "20"}))
    fakes["b"].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}))  # then answers
    started = time.monotonic()
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "b"  # the earliest reset, after its wait
    assert 0.5 < time.monotonic() - started < 5
    assert _calls(fakes) == {"a": 1, "b": 2}
    assert headers["x-llm-attempts"] == "3"


async def test_with_every_key_limited_briefly_concurrent_requests_all_wait_for_the_earliest_reset(
    make_pool: MakePool,
) -> None:
    """Two requests at once on a pool whose keys are limited for 1 s: Y's call to a is still out
    when X's 429s there and on b note their resets. Both wait for the reset, as a request
    arriving a moment later does (it skips both keys and waits). Before, Y's own 429 was made
    final by the reset X had noted (its wait "was that request's"), and Y alone was answered
    429 with `x-should-retry: false`: 4 requests at once on two keys limited for 25 s, 3 answered
    429 at once and 1 after the wait, where 4 sent 0.7 s apart were all answered."""
    gw, fakes = await _a_then_b(make_pool, real_sleep=True)
    held = asyncio.Event()
    limited = {"retry-after": "1"}
    fakes["a"].script(Reply(429, RATE_LIMITED, limited, until=held), Reply(429, RATE_LIMITED, limited))
    fakes["b"].script(Reply(429, RATE_LIMITED, limited))  # then both answer
    y = asyncio.create_task(gw.chat(_chat("request y")))
    await eventually(lambda: _calls(fakes)["a"] == 1, "Y's call to a is out")
    x = asyncio.create_task(gw.chat(_chat("request x")))
    await eventually(lambda: _calls(fakes)["b"] == 1, "X met both keys' limits")
    held.set()
    (y_status, y_headers, _), (x_status, _, _) = await asyncio.gather(y, x)
    assert x_status == 200
    assert y_status == 200, y_headers


async def test_a_request_that_waits_for_the_earliest_reset_does_not_make_a_concurrent_ones_429_final(
    make_pool: MakePool,
) -> None:
    """Two requests at once on a pool of two keys limited for a second: the first moves from
    a to b, and waits for the earliest reset; the second's 429 on a comes after that. Neither
    request ended on those limits, so the second waits too and is served (unfixed: the first's
    move noted a's reset as if it had ended there, and the second was answered 429 at once,
    `x-should-retry: false`, while the first was served after its wait)."""
    gw, fakes = await _a_then_b(make_pool, real_sleep=True)
    first_a, second_a, first_b = asyncio.Event(), asyncio.Event(), asyncio.Event()
    limited = {"retry-after": "1"}
    fakes["a"].script(Reply(429, RATE_LIMITED, limited, until=first_a), Reply(429, RATE_LIMITED, limited, until=second_a))
    fakes["b"].script(Reply(429, RATE_LIMITED, limited, until=first_b))  # then both answer
    one = asyncio.ensure_future(gw.chat(_chat("one")))
    await eventually(lambda: len(fakes["a"].chat_requests()) == 1, "the first request on a")
    two = asyncio.ensure_future(gw.chat(_chat("two")))
    await eventually(lambda: len(fakes["a"].chat_requests()) == 2, "the second request on a")
    first_a.set()
    await eventually(lambda: len(fakes["b"].chat_requests()) == 1, "the first request moved to b")
    first_b.set()
    await eventually(lambda: gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="b",
                                       reason="rate_limit") == 1, "b sitting out")  # fmt: skip
    second_a.set()
    for request in (one, two):
        status, headers, body = await request
        assert status == 200, (headers.get("x-should-retry"), body)
    assert sum(_calls(fakes).values()) == 5  # three 429s, then one answer each


async def test_a_reset_moved_later_while_a_request_waited_for_it_is_the_same_retry(make_pool: MakePool) -> None:
    """One retry allowed for a rate limit. The first request meets a's 429 (1 s) and b's (2 s)
    and waits for a's reset; meanwhile a second request sent at the same moment meets a's 429
    too, which moves a's reset 0.3 s later. Waking at the first reset, the first request waits
    those 0.3 s more and is served: the same wait going on (unfixed: counted as a second retry,
    it was answered 429, no call made after its wait, x-llm-attempts 2)."""
    gw, fakes = await _a_then_b(make_pool, real_sleep=True, extra="retry: {rate_limit: {max_retries: 1}}\n")
    first_a, second_a = asyncio.Event(), asyncio.Event()
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}, until=first_a),
                      Reply(429, RATE_LIMITED, {"retry-after": "1"}, until=second_a))  # then answers
    fakes["b"].script(Reply(429, RATE_LIMITED, {"retry-after": "2"}))
    one = asyncio.ensure_future(gw.chat(_chat("one")))
    await eventually(lambda: len(fakes["a"].chat_requests()) == 1, "the first request on a")
    two = asyncio.ensure_future(gw.chat(_chat("two")))
    await eventually(lambda: len(fakes["a"].chat_requests()) == 2, "the second request on a")
    first_a.set()
    await eventually(lambda: gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="b",
                                       reason="rate_limit") == 1, "b sitting out")  # fmt: skip
    await asyncio.sleep(0.3)
    second_a.set()  # a's reset moves 0.3 s later, while the first request waits for it
    for request in (one, two):
        status, headers, body = await request
        assert status == 200 and headers["x-llm-upstream"] == "a", (headers.get("x-llm-attempts"), body)
    assert _calls(fakes) == {"a": 4, "b": 1}


async def test_keys_limited_for_good_cost_one_first_attempt_each_plus_the_class_retries(make_pool: MakePool) -> None:
    """Both keys answer 429 (1 s) to every call, one retry allowed: a, b, the wait, one call,
    then the 429: 2 + 1 calls, the multiplication rule's bound (unfixed: every key whose reset
    had come was called again after each wait, 2 x (1 + 1) = 4; with the default 3 retries and
    three keys, 12 where the rule says 6)."""
    gw, fakes = await make_pool(names=("a", "b"), real_sleep=True, extra="retry: {rate_limit: {max_retries: 1}}\n")
    for fake in fakes.values():
        fake.always = Reply(429, RATE_LIMITED, {"retry-after": "1"})
    status, headers, _ = await gw.chat()
    assert status == 429 and headers["x-should-retry"] == "false"
    assert sum(_calls(fakes).values()) == 3 and headers["x-llm-attempts"] == "3"


async def test_a_compressed_retry_its_key_refuses_as_limited_goes_to_a_sibling(make_pool: MakePool) -> None:
    """a overflows, then answers the compressed retry 429 for an hour: the retry, compressed
    once, goes to b at once (unfixed: the 429 was the client's answer, b never asked, and the
    loop breaker answered the client's repeat with it for a minute; with a 20 s wait, that wait
    was slept on a while b was free)."""
    gw, fakes = await _a_then_b(make_pool)
    fakes["a"].script(overflow_error(2000, 5000, 100), Reply(429, RATE_LIMITED, {"retry-after": "3600"}))
    messages = []
    for i in range(20):
        messages += [{"role": "user", "content": f"question {i} " + "lorem ipsum dolor " * 40},
                     {"role": "assistant", "content": f"answer {i} " + "sit amet " * 40}]
    messages.append({"role": "user", "content": "final question"})
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "max_tokens": 100, "messages": messages})
    assert status == 200, body
    assert headers["x-llm-upstream"] == "b" and headers["x-llm-compressed"] == "true"
    assert headers["x-llm-attempts"] == "3" and gw.slept == []
    assert _calls(fakes) == {"a": 2, "b": 1}
    assert fakes["b"].chat_requests()[0].body == fakes["a"].chat_requests()[1].body  # compressed once
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="a", reason="rate_limit") == 1


async def test_a_request_resent_without_a_refused_parameter_its_key_limits_goes_to_a_sibling(
    make_pool: MakePool,
) -> None:
    """Both deployments' model refuses `temperature`; a answers the request sent again without it
    429 for 20 s: that resend goes to b at once, without it (unfixed: the 20 s were slept on a,
    3 calls there, while b was free)."""
    gw, fakes = await _a_then_b(make_pool)
    for fake in fakes.values():
        fake.refused_params = frozenset({"temperature"})
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "20"}))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "temperature": 0.2,
                                           "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-upstream"] == "b" and headers["x-llm-params-dropped"] == "temperature"
    assert gw.slept == [] and headers["x-llm-attempts"] == "3"
    assert _calls(fakes) == {"a": 2, "b": 1}
    assert "temperature" not in fakes["b"].chat_requests()[0].json()
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="a", reason="rate_limit") == 1


async def test_a_request_resent_with_its_output_budget_lowered_its_key_limits_goes_to_a_sibling(
    make_pool: MakePool,
) -> None:
    """Both deployments' model takes at most 16384 output tokens; a answers the request sent
    again lowered 429 for 20 s: that resend goes to b at once, lowered (unfixed: the 20 s were
    slept on a, 3 calls there, while b was free)."""
    gw, fakes = await _a_then_b(make_pool)
    for fake in fakes.values():
        fake.output_limit = 16384
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "20"}))
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "max_tokens": 64000,
                                           "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-upstream"] == "b" and headers["x-llm-output-capped"] == "16384"
    assert gw.slept == [] and headers["x-llm-attempts"] == "3"
    assert _calls(fakes) == {"a": 2, "b": 1}
    assert [r.json()["max_tokens"] for r in fakes["a"].chat_requests()] == [64000, 16384]
    assert fakes["b"].chat_requests()[0].json()["max_tokens"] == 16384
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="a", reason="rate_limit") == 1


async def test_a_request_resent_without_reasoning_of_another_account_its_key_limits_goes_to_a_sibling(
    make_pool: MakePool,
) -> None:
    """Each deployment is a key of its own organization, and the Codex turn carries reasoning a
    third one sealed; a refuses it, and answers the request sent again without it 429 for 20 s:
    that resend goes to b at once, without it (unfixed: the 20 s were slept on a, 3 calls there,
    while b was free)."""
    gw, fakes = await _a_then_b(make_pool)
    for name, fake in fakes.items():
        fake.orgs = {f"key-{name}": f"org-{name}"}
    fakes["a"].script(Reply(429, RATE_LIMITED, {"retry-after": "20"}))
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("org-z")}
    status, headers, body = await gw.responses({"model": "gpt-5-codex", "store": False, "input": [
        {"role": "user", "content": "Weather?"}, item,
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]})  # fmt: skip
    assert status == 200, body
    assert headers["x-llm-upstream"] == "b" and headers["x-llm-reasoning-dropped"] == "reasoning"
    assert gw.slept == [] and headers["x-llm-attempts"] == "3"
    assert {n: len(f.responses_requests()) for n, f in fakes.items()} == {"a": 2, "b": 1}
    refused, kept = (r.json()["input"] for r in fakes["a"].responses_requests())
    assert refused[1] == item and item not in kept
    assert [i.get("type", "message") for i in fakes["b"].responses_requests()[0].json()["input"]] == [
        "message", "function_call", "function_call_output"]
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="a", reason="rate_limit") == 1


async def test_after_waiting_for_the_earliest_reset_every_key_whose_reset_has_come_may_serve(
    make_pool: MakePool,
) -> None:
    """Every key answers 429 for 2 s; the first one asked (so the earliest reset) is limited
    again, the others' resets come milliseconds after it: the request goes to one of those,
    rather than waiting out the first key's limit again and again (a 429 after 6 s, while two
    keys were free, measured)."""
    gw, fakes = await make_pool(real_sleep=True, member_extra={"a": ", weight: 1000"})  # asked first
    fakes["a"].always = Reply(429, RATE_LIMITED, {"retry-after": "2"})
    for n in ("b", "c"):
        fakes[n].script(Reply(429, RATE_LIMITED, {"retry-after": "2"}))  # then answers
    started = time.monotonic()
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] in ("b", "c")
    assert time.monotonic() - started < 3.5
    assert _calls(fakes)["a"] <= 2 and int(headers["x-llm-attempts"]) <= 5


async def test_a_revoked_key_is_dropped_after_one_401_with_a_log_line(
    make_pool: MakePool, caplog: pytest.LogCaptureFixture
) -> None:
    gw, fakes = await make_pool()
    fakes["a"].always = Reply(401, INVALID_KEY)
    with caplog.at_level(logging.WARNING, logger="gateway.decisions"):
        for i in range(20):
            status, headers, _ = await gw.chat(_chat(f"c{i}"))
            assert status == 200 and headers["x-llm-upstream"] != "a"
    assert _calls(fakes)["a"] == 1
    warnings = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("reason") == "auth"]
    assert len(warnings) == 1 and warnings[0]["deployment"] == "a"
    assert "key-a" not in caplog.text
    assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="a", reason="auth") == 1


async def test_a_key_refused_one_model_sits_out_for_that_model_only(
    make_pool: MakePool, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenAI's 403 for a project limited to some models (open-webui/open-webui#2250 quotes it)
    took the key from every model for an hour: it now serves the models it may."""
    gw, fakes = await _a_then_b(make_pool)  # a is asked first
    fakes["a"].script(Reply(403, {"error": {"message": "You are not allowed to sample from this model",
                                            "type": "invalid_request_error", "param": None, "code": None}}))  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="gateway.decisions"):
        status, headers, _ = await gw.chat({**_chat("draw"), "model": "gpt-image-x"})
    assert status == 200 and headers["x-llm-upstream"] == "b"
    for i in range(5):
        status, headers, _ = await gw.chat(_chat(f"c{i}"))  # another model: a serves it
        assert status == 200 and headers["x-llm-upstream"] == "a"
    status, headers, _ = await gw.chat({**_chat("again"), "model": "gpt-image-x"})
    assert status == 200 and headers["x-llm-upstream"] == "b"  # the refused model stays off a
    (warning,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("reason") == "auth"]
    assert warning["model"] == "gpt-image-x" and "this model" in warning["message"]


async def test_an_exhausted_key_moves_to_a_sibling_and_stays_out(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"))
    fakes["a"].always = Reply(429, NO_QUOTA)
    for i in range(10):
        status, headers, _ = await gw.chat(_chat(f"c{i}"))
        assert status == 200 and headers["x-llm-upstream"] == "b"
    assert _calls(fakes)["a"] <= 1


async def test_every_key_exhausted_answers_budget_402(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"))
    fakes["a"].always = fakes["b"].always = Reply(429, NO_QUOTA)
    status, headers, _ = await gw.chat()
    assert status == 402 and headers["x-llm-error-type"] == "budget"
    status, headers, _ = await gw.chat(_chat("later"))  # known: no call
    assert status == 402 and headers["x-llm-attempts"] == "0"
    assert headers["x-llm-error-retryable"] == "false"
    assert sum(_calls(fakes).values()) == 2


async def test_a_request_error_never_moves(make_pool: MakePool) -> None:
    gw, fakes = await make_pool()
    bad = {"error": {"message": "Invalid value for 'temperature'", "type": "invalid_request_error",
                     "param": "temperature", "code": None}}  # fmt: skip
    for f in fakes.values():
        f.always = Reply(400, bad)
    status, headers, _ = await gw.chat()
    assert status == 400 and headers["x-llm-attempts"] == "1"
    assert sum(_calls(fakes).values()) == 1


async def test_an_outage_of_every_deployment_costs_one_attempt_each_plus_the_retries(make_pool: MakePool) -> None:
    gw, fakes = await make_pool()
    for f in fakes.values():
        f.always = Reply(503, UNAVAILABLE)
    status, headers, _ = await gw.chat()
    assert status == 503
    # 1 + provider_unavailable.max_retries (5), plus one first attempt per other deployment.
    assert sum(_calls(fakes).values()) == 3 + 5 == int(headers["x-llm-attempts"])


async def test_a_deployment_whose_streams_all_break_mid_answer_has_its_circuit_opened(make_pool: MakePool) -> None:
    """Its streams' heads come, then the connection is cut: each is a failed request for the
    deployment's own circuit, which opens, and the pool stops asking it."""
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                extra="circuit_breaker: {failure_threshold: 2, open_s: 30}\n",
                                member_extra={"a": ", weight: 1000"})  # fmt: skip
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "Once"}), chunk({"content": " upon"})]
    fakes["a"].always = Stream(events, then="drop")
    fakes["b"].always = Stream([*events, chunk({}, "stop")])
    request = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(50):
        if len(fakes["a"].chat_requests()) == 2:
            break
        assert (await gw.chat(request))[0] == 200
    assert gw.metric("llm_gateway_circuit_open", upstream="a", model="gpt-4o-mini") == 1
    for _ in range(5):
        status, headers, body = await gw.chat(request)
        assert status == 200 and headers["x-llm-upstream"] == "b" and b'"error"' not in body
    assert len(fakes["a"].chat_requests()) == 2


async def test_a_twenty_turn_session_stays_on_one_deployment(make_pool: MakePool) -> None:
    for strategy in ("weighted", "least_busy", "latency", "headroom"):
        gw, fakes = await make_pool(pool_yaml=f", strategy: {strategy}")
        served = set()
        for i in range(20):
            payload, headers = _turn(i)
            status, h, _ = await gw.chat(payload, headers=headers)
            assert status == 200
            served.add(h["x-llm-upstream"])
        assert len(served) == 1, strategy
        assert gw.metric("llm_gateway_pool_picks_total", pool="gpt", deployment=served.pop(),
                         reason="affinity") == 19  # fmt: skip


async def test_many_conversations_spread_over_the_pool_by_weight(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(member_extra={"a": ", weight: 3"})
    for i in range(200):
        payload, headers = _turn(0, session=f"s-{i}")
        assert (await gw.chat(payload, headers=headers))[0] == 200
    calls = _calls(fakes)
    assert calls["a"] > calls["b"] and calls["a"] > calls["c"] and min(calls.values()) > 10


async def test_two_workers_each_with_its_own_table_keep_a_conversation_on_one_key(make_gateway) -> None:  # type: ignore[no-untyped-def]
    """Fault (audit, ``server.workers: 4`` on the memory backend): each worker keeps its own
    table, and SO_REUSEPORT hands a conversation's turns to any of them. A worker meeting a
    conversation it did not know took its strategy's pick from its own view and random draw, so
    under ``headroom`` 23 of 60 turns changed keys (22 ``least_busy``), each a cache write. Two
    gateways here, each its own memory state and its own draws, the turns alternating: every
    conversation stays on one key."""
    fakes = {n: await FakeUpstream().start() for n in "abc"}
    try:
        for f in fakes.values():
            f.always = Reply(200, _completion(), {"x-ratelimit-limit-requests": "1000",
                                                  "x-ratelimit-remaining-requests": "900",
                                                  "x-ratelimit-reset-requests": "6m0s"})  # fmt: skip
        upstreams = "".join(f"  - {{name: {n}, base_url: '{f.url}', api_key: key-{n}, models: ['gpt-*']}}\n"
                            for n, f in fakes.items())  # fmt: skip
        for strategy in ("least_busy", "headroom"):
            pools = (f"pools:\n  - {{name: gpt, models: ['gpt-*'], deployments: [a, b, c], strategy: {strategy}}}\n"
                     "server: {workers: 2}\n")  # each is one of two: the strategy's view is its own
            workers = [await make_gateway(pools, fake=fakes["a"], upstreams=upstreams, rand=random.Random(seed).random)
                       for seed in (1, 2)]  # fmt: skip
            served: dict[str, list[str]] = {}
            for i in range(8):
                for t in range(4):
                    payload, headers = _turn(t, session=f"{strategy}-{i}")
                    status, h, _ = await workers[t % 2].chat(payload, headers=headers)
                    assert status == 200
                    served.setdefault(f"{strategy}-{i}", []).append(h["x-llm-upstream"])
            assert all(len(set(keys)) == 1 for keys in served.values()), (strategy, served)
            assert len({keys[0] for keys in served.values()}) > 1, (strategy, served)  # still spread
    finally:
        for f in fakes.values():
            await f.close()


async def test_a_conversation_moves_only_when_its_deployment_cannot_serve_and_the_break_is_counted(
    make_pool: MakePool,
) -> None:
    gw, fakes = await make_pool()
    payload, headers = _turn(0)
    first = (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"]
    fakes[first].script(Reply(429, RATE_LIMITED, {"retry-after": "3600"}))
    payload, headers = _turn(1)
    status, h, _ = await gw.chat(payload, headers=headers)
    moved_to = h["x-llm-upstream"]
    assert status == 200 and moved_to != first
    assert gw.metric("llm_gateway_affinity_breaks_total", pool="gpt", reason="failed") == 1
    for i in range(2, 8):
        payload, headers = _turn(i)
        assert (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"] == moved_to


async def test_a_conversation_whose_home_failed_stays_on_the_sibling_that_answered_after_the_reset(
    make_pool: MakePool,
) -> None:
    """Audit (pools across a long agent session): the home answered a 429 (20 s) mid-session,
    the sibling answered ten turns, each writing the grown prefix to its own cache, and then the
    conversation went home, whose copy was older and out of reach: the whole prefix written
    again (a 20-turn Claude Code session cost 45 % more than without the limit; staying on the
    sibling, 16 %). The home follows the cache, however brief the limit; while it sits out
    every turn goes to the same sibling (its key's rendezvous order)."""
    gw, fakes = await make_pool(real_sleep=True)
    payload, headers = _turn(0)
    home = (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"]
    fakes[home].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}))

    async def served(i: int) -> str:
        payload, headers = _turn(i)
        return str((await gw.chat(payload, headers=headers))[1]["x-llm-upstream"])

    moved = {await served(i) for i in (1, 2)}
    assert len(moved) == 1 and home not in moved  # the same sibling each turn
    await asyncio.sleep(1.2)  # the old home's reset
    for i in range(3, 6):
        assert await served(i) in moved
    assert len(fakes[home].chat_requests()) == 2  # turn 0 and the 429
    assert gw.metric("llm_gateway_affinity_breaks_total", pool="gpt", reason="failed") == 1


def _side_call(text: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A session's side call on another, smaller model (Claude Code's Haiku title or Bash
    prefix check): one user message, no history."""
    return {"model": "gpt-4.1-nano", "messages": [{"role": "user", "content": text}]}, {"session-id": "s-1"}


def _limited_for(model: str, until: asyncio.Event | None = None) -> Callable[[dict[str, Any]], Reply | None]:
    """A key rate-limited for ``model`` only (the provider limits a key per model)."""
    return lambda p: Reply(429, RATE_LIMITED, {"retry-after": "5"}, until=until) if p.get("model") == model else None


async def test_a_side_call_of_another_model_limited_on_the_home_leaves_the_home(make_pool: MakePool) -> None:
    """A prompt cache is a model's own: a side call answered by a sibling wrote nothing there of
    the main model's, so the home stays where the main turns' cache is."""
    gw, fakes = await make_pool()
    payload, headers = _turn(0)
    home = (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"]
    fakes[home].always = _limited_for("gpt-4.1-nano")
    payload, headers = _side_call("title")
    status, h, _ = await gw.chat(payload, headers=headers)
    assert status == 200 and h["x-llm-upstream"] != home
    for i in (1, 2):
        payload, headers = _turn(i)
        assert (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"] == home


async def test_a_side_call_that_claimed_the_home_leaves_it_once_the_main_turn_answered_there(
    make_pool: MakePool,
) -> None:
    """Audit (pools across a long agent session): a session's first two requests at once, a
    Haiku side call and the main turn. The side call claimed the home, met a 429 there (Haiku
    only) and, a sibling answering it, moved the home there after the main turn had written
    its cache at the home: the main turn's second turn read nothing."""
    gw, fakes = await make_pool()
    payload, headers = _side_call("title")
    home = _first_pick(payload, headers)
    held = asyncio.Event()
    fakes[home].always = _limited_for("gpt-4.1-nano", until=held)
    side = asyncio.create_task(gw.chat(payload, headers=headers))
    for _ in range(500):  # the side call is in flight at the home (its 429 held back)
        if fakes[home].chat_requests():
            break
        await asyncio.sleep(0.01)
    payload, headers = _turn(0)
    assert (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"] == home
    held.set()
    status, h, _ = await side
    assert status == 200 and h["x-llm-upstream"] != home
    payload, headers = _turn(1)
    assert (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"] == home


async def _reloaded(gw: Gateway, fakes: dict[str, FakeUpstream], deployments: str, strategy: str,
                   weights: dict[str, str] | None = None) -> None:  # fmt: skip
    """The running gateway given the same upstreams and a pool of ``deployments``, as a reload does."""
    upstreams = "".join(f"  - {{name: {n}, base_url: '{f.url}', api_key: key-{n}, models: ['gpt-*']"
                        f"{(weights or {}).get(n, '')}}}\n" for n, f in fakes.items())  # fmt: skip
    text = (f"upstreams:\n{upstreams}pools:\n  - {{name: gpt, models: ['gpt-*'], deployments: [{deployments}], "
            f"strategy: {strategy}}}\ntimeouts: {{connect_s: 2, first_byte_s: 1.0, idle_s: 1.0}}\n"
            "loop_breaker: {enabled: false}\n")  # fmt: skip
    await gw.app[LIVE].replace(parse_config(text, env={}))


@pytest.mark.parametrize("strategy", ["weighted", "least_busy", "latency", "headroom"])
async def test_a_reload_moves_only_conversations_whose_home_was_removed_each_break_counted(
    make_pool: MakePool, strategy: str,
) -> None:
    """A weight raised or a deployment added moved live conversations to another key at their
    next turn, none counted, and a removed deployment's conversations moved uncounted too
    (under weighted the pick was recomputed from the new weights: 7 of 30 moved at weight 3)."""
    gw, fakes = await make_pool(names=("a", "b", "c", "d"))
    await _reloaded(gw, fakes, "a, b, c", strategy)
    sessions = [f"s-{i}" for i in range(30)]
    served: dict[str, list[str]] = {s: [] for s in sessions}

    async def turns(i: int) -> None:
        for s in sessions:
            payload, headers = _turn(i, session=s)
            status, h, _ = await gw.chat(payload, headers=headers)
            assert status == 200
            served[s].append(h["x-llm-upstream"])

    def breaks() -> dict[str, float]:
        return {r: gw.metric("llm_gateway_affinity_breaks_total", pool="gpt", reason=r)
                for r in ("removed", "failed", "rate_limit", "circuit_open") if gw.metric(
                    "llm_gateway_affinity_breaks_total", pool="gpt", reason=r)}  # fmt: skip

    await turns(0)
    await turns(1)
    homes = {s: v[0] for s, v in served.items()}
    assert all(set(v) == {homes[s]} for s, v in served.items())
    await _reloaded(gw, fakes, "a, b, c, d", strategy, {"b": ", weight: 3"})  # b raised, d added
    await turns(2)
    await turns(3)
    assert {s: set(v) for s, v in served.items()} == {s: {h} for s, h in homes.items()}
    assert breaks() == {}
    new = set()
    for i in range(40):  # the new weights and the added deployment take new conversations
        payload, headers = _turn(0, session=f"new-{i}")
        new.add((await gw.chat(payload, headers=headers))[1]["x-llm-upstream"])
    assert "d" in new
    await _reloaded(gw, fakes, "a, b, d", strategy)  # c removed
    await turns(4)
    await turns(5)
    on_c = [s for s, h in homes.items() if h == "c"]
    assert on_c, homes
    for s, v in served.items():
        if homes[s] == "c":  # moved once, to one new home
            assert v[4] != "c" and v[5] == v[4]
        else:
            assert set(v) == {homes[s]}
    assert breaks() == {"removed": len(on_c)}


async def test_headroom_picks_the_key_with_most_left_and_skips_one_predicted_empty(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(pool_yaml=", strategy: headroom, affinity: {enabled: false}")
    left = {"a": "5", "b": "900", "c": "0"}
    for n, f in fakes.items():
        f.always = Reply(200, _completion(), {"x-ratelimit-limit-requests": "1000",
                                              "x-ratelimit-remaining-requests": left[n],
                                              "x-ratelimit-reset-requests": "6m0s"})  # fmt: skip
    # Learn every deployment's headroom once (a fresh pool knows none: all count as full).
    for _ in range(12):
        await gw.chat()
        await _expire_cache(gw)
    assert _calls(fakes)["c"] <= 1  # answered with remaining 0: predicted empty until its reset
    before = _calls(fakes)
    for _ in range(10):
        h = (await gw.chat())[1]
        assert h["x-llm-upstream"] == "b"
    assert _calls(fakes)["b"] == before["b"] + 10
    # 0.9 as read, refilled since by the seconds gone of its 6 minutes
    ratio = gw.metric("llm_gateway_deployment_headroom_ratio", deployment="b", kind="requests")
    assert ratio == pytest.approx(0.9, abs=0.005)


@pytest.mark.parametrize("affinity", ["on", "off"])
async def test_headroom_asks_a_key_it_never_heard_from_instead_of_starving_it(make_pool: MakePool,
                                                                              affinity: str) -> None:
    """pools.md: headroom picks the largest share left. Three keys of one limit, each answer
    stating its own: ranked as the median of the two it had heard from, the third was never
    asked while those two had any left (30 one-turn requests: 15, 15 and 0, measured)."""
    gw, fakes = await make_pool(pool_yaml=", strategy: headroom"
                                + (", affinity: {enabled: false}" if affinity == "off" else ""))
    for n, f in fakes.items():
        f.keys.limit(f"key-{n}", rpm=1000)
    for i in range(30):
        status, h, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"q {i}"}]})
        assert status == 200
        await _expire_cache(gw)
    calls = _calls(fakes)
    assert min(calls.values()) >= 1, calls
    # Heard from, a key ranks by what it said: none takes every request.
    assert max(calls.values()) < 30, calls


async def test_configured_limits_keep_a_deployment_without_headers_under_them(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"a": ", limits: {requests_per_minute: 3}, weight: 1000"})  # fmt: skip
    await same_minute()  # "a" takes 3 of this minute's, not 3 more of the next one's
    for _ in range(10):
        assert (await gw.chat())[0] == 200
    assert _calls(fakes)["a"] <= 3 + 1  # the cached view may be one request behind
    assert _calls(fakes)["b"] >= 6


async def test_configured_limits_used_up_in_one_minute_serve_again_in_the_next(make_pool: MakePool) -> None:
    """pools.md: one count per deployment, model and calendar minute. On the memory backend a
    minute's sends went into the count of the minute the next read came in: both keys' whole
    minute used at 00:24 left the pool answering 429 with no call at 01:02 (measured)."""
    shift = [24 - time.time() % 60]  # the gateway's clock: 24 s into a minute, running
    limits = ", limits: {requests_per_minute: 2}"
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"a": limits, "b": limits},
                                wall=lambda: time.time() + shift[0])  # fmt: skip
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        for i in range(4):  # both keys' whole minute
            r = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini",
                                                                       messages=[{"role": "user", "content": f"{i}"}])
            assert r.http_response.status_code == 200
        assert _calls(fakes) == {"a": 2, "b": 2}
        shift[0] += 38  # 02 s into the next minute
        for i in range(4):
            r = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini",
                                                                       messages=[{"role": "user", "content": f"+{i}"}])
            assert r.http_response.status_code == 200 and r.headers["x-llm-attempts"] == "1"
        assert _calls(fakes) == {"a": 4, "b": 4}
    finally:
        await client.close()


async def test_a_fallback_may_name_a_pool(make_gateway) -> None:  # type: ignore[no-untyped-def]
    solo, a, b = FakeUpstream(), FakeUpstream(), FakeUpstream()
    for f in (solo, a, b):
        await f.start()
    try:
        solo.always = Reply(503, UNAVAILABLE)
        gw = await make_gateway(
            "pools:\n  - {name: backup, models: ['never'], deployments: [a, b]}\n", fake=solo, upstreams=(
                f"  - {{name: solo, base_url: '{solo.url}', fallbacks: [backup]}}\n"
                f"  - {{name: a, base_url: '{a.url}', api_key: ka}}\n"
                f"  - {{name: b, base_url: '{b.url}', api_key: kb}}\n"))  # fmt: skip
        status, headers, _ = await gw.chat()
        assert status == 200 and headers["x-llm-upstream"] in ("a", "b")
        assert headers["x-llm-fallbacks"] == "1"
        assert gw.metric("llm_gateway_fallbacks_total", upstream="solo", fallback="backup",
                         error_type="provider_unavailable") == 1  # fmt: skip
    finally:
        for f in (solo, a, b):
            await f.close()


async def test_a_pools_fallback_takes_the_request_that_found_every_key_refused(make_gateway) -> None:  # type: ignore[no-untyped-def]
    """pools.md: a pool's fallbacks take over once none of its deployments can serve. With
    both keys revoked, the request that found it out was answered 502 auth (2 calls), while the
    next went to the fallback with no call to either key (auth is not in fallback.when)."""
    a, b, backup = FakeUpstream(), FakeUpstream(), FakeUpstream()
    for f in (a, b, backup):
        await f.start()
    try:
        for f in (a, b):
            f.always = Reply(401, INVALID_KEY)
        gw = await make_gateway(
            "pools:\n  - {name: gpt, models: ['gpt-*'], deployments: [a, b], fallbacks: [backup]}\n", fake=backup,
            upstreams=(f"  - {{name: a, base_url: '{a.url}', api_key: ka}}\n"
                       f"  - {{name: b, base_url: '{b.url}', api_key: kb}}\n"
                       f"  - {{name: backup, base_url: '{backup.url}', api_key: kz}}\n"))  # fmt: skip
        for i in range(2):
            status, headers, _ = await gw.chat(_chat(f"c{i}"))
            assert status == 200 and headers["x-llm-upstream"] == "backup", (i, status)
            assert headers["x-llm-fallbacks"] == "1"
        assert [len(f.chat_requests()) for f in (a, b, backup)] == [1, 1, 2]
    finally:
        for f in (a, b, backup):
            await f.close()


async def test_the_log_line_names_pool_deployment_and_why(make_pool: MakePool, caplog: pytest.LogCaptureFixture) -> None:
    # No first-byte timeout in play: the fixture's 1 s, met when a loaded host stalls the loop
    # (a 1.2 s answer reproduces it), sent the first turn to a sibling, logged "moved".
    gw, fakes = await make_pool(timeouts="{connect_s: 2, first_byte_s: 60, idle_s: 60}")
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        payload, headers = _turn(0)
        await gw.chat(payload, headers=headers)
        payload, headers = _turn(1)
        await gw.chat(payload, headers=headers)
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [ln["pool"] for ln in lines] == ["gpt", "gpt"]
    assert [ln["picked"] for ln in lines] == ["weighted", "affinity"]
    assert lines[0]["upstream"] == lines[1]["upstream"] in fakes


def _completion() -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}  # fmt: skip


async def _expire_cache(gw: Gateway) -> None:
    """The pool's records are read at most every state.cache_ms: forget when they were read."""
    from gateway.live import LIVE

    ps = gw.app[LIVE].services.pool_state
    assert ps is not None
    ps._read_at.clear()


async def test_a_pool_may_mix_an_anthropic_key_with_a_chat_deployment(make_gateway) -> None:  # type: ignore[no-untyped-def]
    anthropic, relay = FakeUpstream(), FakeUpstream()
    for f in (anthropic, relay):
        await f.start()
    try:
        gw = await make_gateway(
            "pools:\n  - {name: sonnet, models: ['claude-*'], deployments: [anthropic, relay]}\n",
            fake=anthropic, upstreams=(
                f"  - {{name: anthropic, base_url: '{anthropic.url}', api_key: sk-ant, key_header: x-api-key, "
                "apis: [messages], weight: 1000000}\n"
                f"  - {{name: relay, base_url: '{relay.url}', api_key: sk-or, apis: [chat], "
                "model_map: {'claude-*': anthropic/claude-sonnet-4.5}}\n"))  # fmt: skip
        status, headers, body = await gw.messages()
        assert status == 200 and headers["x-llm-upstream"] == "anthropic" and "x-llm-translated" not in headers
        anthropic.always = Reply(429, {"type": "error", "error": {
            "type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}},
            {"retry-after": "30"})  # fmt: skip
        status, headers, body = await gw.messages(headers={"x-claude-code-session-id": "other"})
        assert status == 200 and headers["x-llm-upstream"] == "relay"
        assert headers["x-llm-translated"] == "messages->chat"
        assert json.loads(body)["type"] == "message"  # the client's own API
        [sent] = relay.chat_requests()
        assert sent.json()["model"] == "anthropic/claude-sonnet-4.5"
        assert sent.headers["Authorization"] == "Bearer sk-or"
        assert "anthropic-version" not in sent.headers  # an Anthropic header has no place at a chat API
    finally:
        for f in (anthropic, relay):
            await f.close()


def test_the_pool_page_examples_load_as_printed() -> None:
    import re
    from pathlib import Path

    from gateway.config import parse_config

    section = (Path(__file__).resolve().parents[2] / "docs" / "pools.md").read_text()
    blocks = re.findall(r"```yaml[^\n]*\n(.*?)```", section, re.S)
    assert len(blocks) == 3
    env = {k: "k" for k in ("ANTHROPIC_KEY_A", "ANTHROPIC_KEY_B", "ANTHROPIC_KEY_C", "ANTHROPIC_API_KEY",
                             "OPENROUTER_API_KEY", "AZURE_EAST_KEY", "AZURE_WEST_KEY")}  # fmt: skip
    for block in blocks:
        cfg = parse_config(block, env=env)
        assert len(cfg.pools) == 1 and len(cfg.pools[0].deployments) >= 2


async def test_an_overflow_goes_to_the_sibling_with_the_larger_window_first(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(
        pool_yaml=", affinity: {enabled: false}", extra="fallback: {context_overflow: true}\n",
        member_extra={"a": ", context_window: 8000, weight: 1000000", "b": ", context_window: 4000",
                      "c": ", context_window: 128000"})  # fmt: skip
    fakes["a"].context_limit = 8000
    big = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "word " * 12000}]}
    status, headers, _ = await gw.chat(big)
    assert status == 200 and headers["x-llm-upstream"] == "c"
    assert _calls(fakes) == {"a": 1, "b": 0, "c": 1}
    assert "x-llm-compressed" not in headers


async def test_a_key_out_of_credit_last_does_not_hide_a_sibling_back_in_ten_minutes(make_pool: MakePool) -> None:
    gw, fakes = await _a_then_b(make_pool)
    fakes["a"].always = Reply(429, RATE_LIMITED, {"retry-after": "600"})
    fakes["b"].always = Reply(429, NO_QUOTA)
    status, headers, body = await gw.chat()
    # b is out of credit, but a serves again in 10 minutes: a rate limit with a's reset, not a 402.
    assert status == 429 and headers["x-llm-error-type"] == "rate_limit"
    assert 599 <= int(headers["retry-after"]) <= 600
    # a's own 429 (a provider answered one in this request), not the gateway's pool_rate_limited.
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded" and headers["x-llm-upstream"] == "a"


async def test_a_clients_own_forwarded_key_failing_takes_no_deployment_from_other_clients(
    make_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """Deployments without an api_key forward each client's credential: one client's rate limit
    or empty credit is that client's. Sitting the deployments out for it answered every other
    client 429 pool_rate_limited for an hour, with no call made (measured)."""
    fakes = [FakeUpstream(), FakeUpstream(), FakeUpstream()]
    for f in fakes:
        await f.start()
        f.keys.limited_until("client-limited", time.time() + 3600)
        f.keys.exhaust("client-poor")
    try:
        gw = await make_gateway(
            "pools:\n  - {name: gpt, models: ['gpt-*'], deployments: [a, b, c]}\n", fake=fakes[0], upstreams="".join(
                f"  - {{name: {n}, base_url: '{f.url}'}}\n" for n, f in zip("abc", fakes, strict=True)))  # fmt: skip
        status, _, _ = await gw.chat(headers={"Authorization": "Bearer client-limited"})
        assert status == 429  # the client's own key, on every deployment it was tried on
        status, _, _ = await gw.chat(headers={"Authorization": "Bearer client-poor"})
        assert status in (402, 429)
        before = sum(len(f.chat_requests()) for f in fakes)
        for _ in range(6):
            status, headers, _ = await gw.chat(headers={"Authorization": "Bearer client-good"})
            assert status == 200 and headers["x-llm-attempts"] == "1"
        assert sum(len(f.chat_requests()) for f in fakes) == before + 6
        assert gw.metric("llm_gateway_pool_sit_outs_total") in (None, 0)
    finally:
        for f in fakes:
            await f.close()


async def test_counting_tokens_and_embeddings_route_around_a_refused_key(make_pool: MakePool) -> None:
    """Paths relayed as they are (count_tokens, embeddings) picked a deployment and kept calling a
    revoked key; its 401 now sits it out, as a chat request's does, and the next is tried."""
    gw, fakes = await make_pool(names=("a", "b"))
    fakes["a"].keys.revoke("key-a")
    fakes["b"].keys.revoke("nobody")
    for _ in range(6):
        async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "gpt-4o-mini", "input": "x"}) as r:
            assert r.status == 200 and r.headers["x-llm-upstream"] == "b"
    refused = [r for r in fakes["a"].requests if r.path.endswith("/embeddings")]
    assert len(refused) <= 1  # one call at most, then it sits out


async def test_counting_tokens_limited_on_one_key_moves_on_at_once_and_leaves_its_messages(
    make_gateway,  # type: ignore[no-untyped-def]
) -> None:
    """pools.md: a request not retried along the pool tries each deployment once. A count_tokens
    429 was waited out on the same key (calls at 0, 3, 6 and 9 s, then the next key:
    x-llm-attempts 5, measured), and sat that key out of Messages too, whose limits are apart
    (Anthropic: "Token counting and message creation have separate and independent rate
    limits", https://docs.anthropic.com/en/docs/build-with-claude/token-counting)."""
    fakes: dict[str, FakeUpstream] = {}
    lines = []
    for n in ("a", "b", "c"):
        fakes[n] = await FakeUpstream().start()
        weight = ", weight: 1000000" if n == "a" else ""  # the first pick, whatever the coin
        lines.append(f"  - {{name: {n}, base_url: '{fakes[n].url}', api_key: key-{n}, key_header: x-api-key, "
                     f"apis: [messages], models: ['claude-*']{weight}}}\n")  # fmt: skip
    pools = "pools:\n  - {name: claude, models: ['claude-*'], deployments: [a, b, c], affinity: {enabled: false}}\n"
    client = None
    try:
        gw = await make_gateway(pools, fake=fakes["a"], upstreams="".join(lines))
        fakes["a"].keys.counting_limited_until("key-a", time.time() + 30)
        client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client", max_retries=0)
        asked: Any = [{"role": "user", "content": "How many tokens is this?"}]

        def counted(name: str) -> int:
            return len([r for r in fakes[name].requests if r.path.endswith("/messages/count_tokens")])

        r = await client.messages.with_raw_response.count_tokens(model="claude-sonnet-4-6", messages=asked)
        assert r.http_response.status_code == 200 and (await r.parse()).input_tokens > 0
        assert r.headers["x-llm-upstream"] in ("b", "c") and r.headers["x-llm-attempts"] == "2"
        assert gw.slept == [] and counted("a") == 1  # moved on at once, no wait on the limited key
        # Its messages are not limited: the key still serves them.
        m = await client.messages.with_raw_response.create(model="claude-sonnet-4-6", max_tokens=16, messages=asked)
        assert m.http_response.status_code == 200 and m.headers["x-llm-upstream"] == "a"
        # Its token counting sits out until the reset: the next count goes elsewhere at once.
        r = await client.messages.with_raw_response.count_tokens(model="claude-sonnet-4-6", messages=asked)
        assert r.headers["x-llm-upstream"] in ("b", "c") and r.headers["x-llm-attempts"] == "1"
        assert counted("a") == 1
        assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="claude", deployment="a",
                         reason="rate_limit") == 1  # fmt: skip
    finally:
        if client is not None:
            await client.close()
        for fake in fakes.values():
            await fake.close()


async def test_every_key_out_after_a_provider_429_answers_that_429_whatever_failed_after_it(
    make_pool: MakePool,
) -> None:
    """pools.md: the provider's body when one answered in this request; the gateway's own 429
    only when no call was made. It depended on which key was tried last (measured)."""
    for order in range(6):
        gw, fakes = await make_pool()
        fakes["a"].always = Reply(429, RATE_LIMITED, {"retry-after": "3600"})
        fakes["b"].always = Reply(401, INVALID_KEY)
        fakes["c"].always = Reply(429, NO_QUOTA)
        status, headers, body = await gw.chat(_chat(f"conversation {order}"))
        assert status == 429, order
        assert json.loads(body) == RATE_LIMITED and headers["x-llm-upstream"] == "a"
        assert headers["x-llm-attempts"] == "3"


async def test_a_relayed_request_in_flight_counts_toward_least_busy(make_pool: MakePool) -> None:
    """A legacy completion (a path relayed as it is) held a deployment without counting in it:
    a least_busy pool sent the next request to the same busy key."""
    gw, fakes = await make_pool(", strategy: least_busy", names=("a", "b"), real_sleep=True)
    # Out until the test lets it answer: a 1 s answer and a 0.3 s sleep to see it sent were
    # both guesses a loaded machine could miss (no request yet after 0.3 s under loop stalls).
    answered = asyncio.Event()
    for fake in fakes.values():
        fake.script(Reply(200, {"object": "text_completion", "choices": []}, until=answered))
    legacy = {"model": "gpt-4o-mini", "prompt": "x"}
    slow = asyncio.create_task(gw.session.post(gw.base + "/v1/completions", json=legacy))
    deadline = time.monotonic() + 10
    while not any(f.requests for f in fakes.values()) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    busy = [n for n, f in fakes.items() if f.requests]
    assert len(busy) == 1 and not slow.done()
    for fake in fakes.values():
        fake.steps.clear()  # the idle one answers at once
    for _ in range(3):  # a coin would pick the busy one once in eight
        status, headers, _ = await gw.chat(_chat("while the completion is out"))
        assert status == 200 and headers["x-llm-upstream"] != busy[0]
    answered.set()
    async with await slow as r:
        assert r.status == 200 and r.headers["x-llm-upstream"] == busy[0]


# A request error every sibling would meet the same way (OpenAI's, tests/corpus/openai.json): not moved.
STRING_TOO_LONG = {"error": {"message": "Invalid 'messages[0].content': string too long. Expected a string with "
                             "maximum length 10485760, but got a string with length 62114761 instead.",
                             "type": "invalid_request_error", "param": "messages[0].content",
                             "code": "string_above_max_length"}}  # fmt: skip


async def _remembered_turns(gw: Gateway, n: int) -> list[tuple[int, str, str, str | None]]:
    out = []
    for _ in range(n):
        status, h, _ = await gw.chat(_chat("the same turn"))
        out.append((status, h["x-llm-upstream"], h["x-llm-attempts"], h.get("x-llm-from-memory")))
    return out


async def test_an_answer_from_memory_names_the_deployment_that_answered(
    make_pool: MakePool, caplog: pytest.LogCaptureFixture
) -> None:
    # b is picked (weight) and answers 400; a, the pool's first deployment, is never asked. The
    # repeats answered from memory name b, as the answer they replay did, in header and log.
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"b": ", weight: 1000000"}, extra="loop_breaker: {enabled: true}\n")
    fakes["b"].always = Reply(400, STRING_TOO_LONG)
    caplog.set_level(logging.INFO, logger="gateway.access")
    assert await _remembered_turns(gw, 3) == [(400, "b", "1", None), (400, "b", "0", "1"), (400, "b", "0", "2")]
    assert _calls(fakes) == {"a": 0, "b": 1}
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [(ln["upstream"], ln.get("from_memory")) for ln in lines] == [("b", None), ("b", 1), ("b", 2)]


async def test_an_answer_remembered_without_its_deployment_names_the_pool(
    make_pool: MakePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Remembered without who answered (as a version before the name was kept wrote it): the
    # pool is named, not a deployment that was never asked.
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"b": ", weight: 1000000"}, extra="loop_breaker: {enabled: true}\n")
    fakes["b"].always = Reply(400, STRING_TOO_LONG)
    encode = loop_breaker.encode
    monkeypatch.setattr(loop_breaker, "encode",
                        lambda answer, *a, **k: encode(dataclasses.replace(answer, upstream=None), *a, **k))  # fmt: skip
    assert await _remembered_turns(gw, 1) == [(400, "b", "1", None)]
    assert await _remembered_turns(gw, 1) == [(400, "gpt", "0", "1")]
    assert _calls(fakes) == {"a": 0, "b": 1}


# OpenAI's 404 for a model a key has no access to (tests/corpus/wild.json).
NO_SUCH_MODEL = {"error": {"message": "The model `gpt-x` does not exist or you do not have access to it.",
                           "type": "invalid_request_error", "param": None, "code": "model_not_found"}}  # fmt: skip
# And its 403 for a project not given the model (Aider-AI/aider#604, tests/corpus/wild.json).
PROJECT_WITHOUT_MODEL = {"error": {"message": "Project `proj_uFBGSkr9FAbFof6HIsCIszAP` does not have access to "
                                   "model `gpt-x`", "type": "invalid_request_error", "param": None,
                                   "code": "model_not_found"}}  # fmt: skip


@pytest.mark.parametrize(("status", "body"), [(404, NO_SUCH_MODEL), (403, PROJECT_WITHOUT_MODEL)])
async def test_a_deployment_without_the_model_moves_the_request_and_sits_out_for_that_model(
    make_pool: MakePool, status: int, body: dict[str, Any],
) -> None:
    """A 404 that says the model is not there (an Azure deployment never made, a key without
    access, a model not pulled) was relayed though a sibling had the model; so was OpenAI's 403
    for a project without it, on every conversation that landed on that key (audit)."""
    gw, fakes = await _a_then_b(make_pool)  # a is asked first
    fakes["a"].always = Reply(status, body)
    status, headers, _ = await gw.chat({**_chat("x1"), "model": "gpt-x"})
    assert status == 200 and headers["x-llm-upstream"] == "b" and headers["x-llm-attempts"] == "2"
    for i in range(3):  # a sits out for gpt-x: no call
        status, headers, _ = await gw.chat({**_chat(f"x{i + 2}"), "model": "gpt-x"})
        assert status == 200 and headers["x-llm-upstream"] == "b" and headers["x-llm-attempts"] == "1"
    assert _calls(fakes)["a"] == 1
    # Only for that model: another one is still asked of a first.
    await gw.chat(_chat("other"))
    assert _calls(fakes)["a"] == 2


async def test_no_deployment_with_the_model_answers_404_without_a_call(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"))
    fakes["a"].always = fakes["b"].always = Reply(404, NO_SUCH_MODEL)
    status, headers, _ = await gw.chat({**_chat("x1"), "model": "gpt-x"})
    assert status == 404 and headers["x-llm-attempts"] == "2"  # the provider's own answer, relayed
    status, headers, body = await gw.chat({**_chat("x2"), "model": "gpt-x"})
    assert status == 404 and headers["x-llm-attempts"] == "0"
    error = json.loads(body)["error"]
    assert error["code"] == "pool_model_not_found" and "gpt-x" in error["message"]
    assert sum(_calls(fakes).values()) == 2


def _first_pick(payload: dict[str, Any], headers: dict[str, str], names: tuple[str, ...] = ("a", "b", "c")) -> str:
    """The deployment ``weighted`` picks first for this conversation: its key's rendezvous order."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    key = conversation_key("chat", headers, payload)
    assert key is not None
    return _rendezvous([Deployment(i, n) for i, n in enumerate(names)], key)[0].name


@pytest.mark.parametrize("session", [True, False], ids=["session-id", "opening"])
async def test_a_conversations_home_is_the_deployment_that_answered_not_the_pick_that_failed(
    make_pool: MakePool, session: bool,
) -> None:
    """Audit (pools, 2026-11-30): the conversation's pick answered one 429 and a sibling answered
    the turn, so the sibling holds the prompt cache; the home stayed on the pick, and once its
    reset came every later turn went there, to a key that never held the conversation (an-b,
    an-b, an-c, an-c). The failover was also counted as an affinity break."""
    gw, fakes = await make_pool(real_sleep=True)
    payload, headers = _turn(0, session="s-home")
    headers = headers if session else {}
    picked = _first_pick(payload, headers)
    fakes[picked].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}))
    status, h, _ = await gw.chat(payload, headers=headers)
    answered = h["x-llm-upstream"]
    assert status == 200 and answered != picked
    await asyncio.sleep(1.2)  # the pick's reset: it may serve again
    for i in range(1, 4):
        payload, headers = _turn(i, session="s-home")
        status, h, _ = await gw.chat(payload, headers=headers if session else {})
        assert status == 200 and h["x-llm-upstream"] == answered, i
    assert len(fakes[picked].chat_requests()) == 1  # the 429 only
    assert gw.metric("llm_gateway_affinity_breaks_total", pool="gpt", reason="failed") == 0


async def test_names_mapped_to_one_model_share_its_configured_limits(make_pool: MakePool) -> None:
    """A key's limits and rate limits are the provider's for the model the key is sent: two
    names its ``model_map`` sends as gpt-4o took each name's own ``requests_per_minute`` (20
    calls a minute per key for 10, measured), and a 429 on one name left the key in use for
    the other (one more call each, and its wait)."""
    mapped = ", model_map: {'gpt-*': gpt-4o}, limits: {requests_per_minute: 3}"
    gw, fakes = await make_pool(names=("a", "b"), member_extra={"a": mapped, "b": mapped})
    await same_minute()
    statuses = [(await gw.chat(_chat(f"question {i}") | {"model": name}))[0]
                for i in range(6) for name in ("gpt-4o", "gpt-4o-2024-08-06")]  # fmt: skip
    assert _calls(fakes) == {"a": 3, "b": 3}  # 6 each before
    assert statuses.count(200) == 6 and statuses.count(429) == 6
    sent = {json.loads(r.body)["model"] for f in fakes.values() for r in f.chat_requests()}
    assert sent == {"gpt-4o"}


async def test_a_429_for_one_name_sits_the_key_out_for_every_name_sent_as_its_model(make_pool: MakePool) -> None:
    gw, fakes = await make_pool(names=("a", "b"), member_extra={"a": ", model_map: {'gpt-*': gpt-4o}",
                                                                "b": ", model_map: {'gpt-*': gpt-4o}"})  # fmt: skip
    for f in fakes.values():
        f.always = Reply(429, RATE_LIMITED, {"retry-after": "3600"})
    status, _, _ = await gw.chat(_chat("one") | {"model": "gpt-4o"})
    assert status == 429 and _calls(fakes) == {"a": 1, "b": 1}
    status, headers, _ = await gw.chat(_chat("two") | {"model": "gpt-4o-2024-08-06"})
    assert status == 429 and headers["x-llm-error-type"] == "rate_limit"
    assert _calls(fakes) == {"a": 1, "b": 1}  # no call: both keys sit out for gpt-4o


@pytest.mark.parametrize("trouble", ["limited", "revoked"])
@pytest.mark.stall_timeouts
async def test_a_stalled_streams_continuation_skips_a_sibling_that_sits_out(make_pool: MakePool, trouble: str) -> None:
    """Audit (pools across a long agent session): the home stalled mid-answer and its
    continuation went to the first other deployment in config order, which the gateway knew
    sat out (a 429 for 2 minutes: it answered 429 again and the client's stream ended on
    idle_timeout, a third key free; revoked: called inside its hour's sit-out, which the docs
    say never happens). It goes where the turn would: the next that may serve."""
    gw, fakes = await make_pool(member_extra={n: ", continuation: prefix" for n in ("a", "b", "c")})
    payload, headers = _turn(0, session="s-cont")
    home = _first_pick(payload, headers)
    out, free = [n for n in ("a", "b", "c") if n != home]  # ``out``: first in config order
    fakes[out].always = (Reply(429, RATE_LIMITED, {"retry-after": "120"}) if trouble == "limited"
                         else Reply(401, INVALID_KEY))  # fmt: skip
    probe = next(s for i in range(100) if _first_pick(*_turn(0, session=(s := f"probe-{i}"))) == out)
    payload_, headers_ = _turn(0, session=probe)
    assert (await gw.chat(payload_, headers=headers_))[0] == 200  # ``out`` told the gateway; a sibling answered
    assert len(fakes[out].chat_requests()) == 1
    fakes[home].script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": "Once upon"})],
                              then="stall"))  # fmt: skip
    fakes[free].script(Stream([chunk({"content": " a time."}), chunk({}, "stop")]))
    status, h, body = await asyncio.wait_for(gw.chat({**payload, "stream": True}, headers=headers), 10)
    assert status == 200 and h["x-llm-upstream"] == home
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                   for e in data_events(body) if e != "[DONE]" and json.loads(e).get("choices"))  # fmt: skip
    assert text == "Once upon a time."
    assert len(fakes[out].chat_requests()) == 1  # never called inside its sit-out
    assert fakes[free].chat_requests()[-1].json()["messages"][-1]["content"] == "Once upon"


# A pool of one revoked key, one out of credit and one healthy key that answers one 503 (the
# audit's three keys). ``rand`` at 0 picks the first that may serve in config order, so each
# order is scripted: the healthy key first, second, last.
HEALTHY_FIRST, HEALTHY_SECOND, HEALTHY_LAST = ("c", "a", "b"), ("b", "c", "a"), ("a", "b", "c")


def _broken(fakes: dict[str, FakeUpstream]) -> None:
    fakes["a"].always = Reply(401, INVALID_KEY)
    fakes["b"].always = Reply(429, NO_QUOTA)


@pytest.mark.parametrize("names", [HEALTHY_FIRST, HEALTHY_SECOND, HEALTHY_LAST])
async def test_a_healthy_key_that_blipped_gets_its_retries_when_every_sibling_is_broken(
    make_pool: MakePool, names: tuple[str, ...]
) -> None:
    """Tried first or second, its 503 moved on at once to the broken keys, and the last one's
    401 (or 402) ended the request, not retryable, while the next request was served."""
    gw, fakes = await make_pool(names=names, pool_yaml=", affinity: {enabled: false}", rand=lambda: 0.0)
    _broken(fakes)
    fakes["c"].script(Reply(503, UNAVAILABLE))
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "c"
    assert _calls(fakes) == {"a": 1, "b": 1, "c": 2} and headers["x-llm-attempts"] == "4"
    assert len(gw.slept) == 1  # the 503's backoff, once


@pytest.mark.parametrize("names", [HEALTHY_FIRST, HEALTHY_SECOND])
async def test_a_key_that_stays_down_among_broken_ones_costs_one_attempt_each_plus_its_retries(
    make_pool: MakePool, names: tuple[str, ...]
) -> None:
    gw, fakes = await make_pool(names=names, pool_yaml=", affinity: {enabled: false}", rand=lambda: 0.0)
    _broken(fakes)
    fakes["c"].always = Reply(503, UNAVAILABLE)
    status, headers, _ = await gw.chat()
    assert status == 503 and headers["x-llm-upstream"] == "c"
    assert headers["x-llm-error-type"] == "provider_unavailable"
    # As for an outage of every deployment: one first attempt each, provider_unavailable's 5 retries.
    assert sum(_calls(fakes).values()) == 3 + 5 == int(headers["x-llm-attempts"])
    assert _calls(fakes) == {"a": 1, "b": 1, "c": 6}


@pytest.mark.parametrize("names", [HEALTHY_FIRST, HEALTHY_SECOND])
async def test_a_healthy_key_limited_for_seconds_is_waited_for_when_every_sibling_is_broken(
    make_pool: MakePool, names: tuple[str, ...]
) -> None:
    """A rate limit sits its key out until its reset, which the pool waits for (one retry of
    the class), whatever its siblings sit out for: so it was before this fix, and stays."""
    gw, fakes = await make_pool(names=names, pool_yaml=", affinity: {enabled: false}", rand=lambda: 0.0,
                                real_sleep=True)  # fmt: skip
    _broken(fakes)
    fakes["c"].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}))
    started = time.monotonic()
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "c"
    assert _calls(fakes) == {"a": 1, "b": 1, "c": 2} and headers["x-llm-attempts"] == "4"
    assert 0.5 < time.monotonic() - started < 5  # its reset, waited once


async def test_with_the_healthy_key_down_and_the_others_broken_the_answer_is_its_circuit(
    make_pool: MakePool,
) -> None:
    """Once its circuit opened, every request was answered 402 "every deployment of pool 'gpt'
    is out of credit", with the budget sit-out's 5-minute reset, though one key was revoked,
    one only down, and the pool served again seconds later (audit)."""
    gw, fakes = await make_pool(names=HEALTHY_FIRST, pool_yaml=", affinity: {enabled: false}", rand=lambda: 0.0,
                                extra="circuit_breaker: {failure_threshold: 2}\n")  # fmt: skip
    _broken(fakes)
    fakes["c"].always = Reply(503, UNAVAILABLE)
    assert (await gw.chat(_chat("one")))[0] == 503  # c's own answer, after its retries
    assert (await gw.chat(_chat("two")))[0] == 503  # the second request failed there: its circuit opens
    assert gw.metric("llm_gateway_circuit_open", upstream="c", model="gpt-4o-mini") == 1
    calls = _calls(fakes)
    status, headers, body = await gw.chat(_chat("three"))
    assert status == 503 and headers["x-llm-attempts"] == "0" and _calls(fakes) == calls
    assert headers["x-llm-error-type"] == "provider_unavailable" and headers["x-llm-error-retryable"] == "true"
    assert 0 < int(headers["retry-after"]) <= 5  # the circuit's first period, not the 5-minute budget sit-out
    error = json.loads(body)["error"]
    assert error["code"] == "circuit_open"
    assert error["message"] == ("no deployment of pool 'gpt' can serve now: 1 out of credit, 1 refused its key "
                                f"(the gateway's, not yours), 1 down (circuit open, back in {headers['retry-after']} s)")


@pytest.mark.parametrize(("cooldowns", "status", "code"), [("", 402, "pool_budget"),
                                                           (", cooldowns: {auth_s: 60}", 502, "pool_auth")])
async def test_with_every_key_out_for_mixed_reasons_the_answer_counts_them_in_the_class_of_the_soonest_back(
    make_pool: MakePool, cooldowns: str, status: int, code: str
) -> None:
    gw, fakes = await make_pool(pool_yaml=", affinity: {enabled: false}" + cooldowns, rand=lambda: 0.0)
    fakes["a"].always = fakes["b"].always = Reply(401, INVALID_KEY)
    fakes["c"].always = Reply(429, NO_QUOTA)
    assert (await gw.chat(_chat("one")))[0] in (402, 502)  # the last key's own answer
    answered, headers, body = await gw.chat(_chat("two"))
    assert (answered, headers["x-llm-attempts"]) == (status, "0") and sum(_calls(fakes).values()) == 3
    # Out of credit for 5 minutes (cooldowns.budget_s), refused for an hour, or here for 60 s.
    reset_in_s = int(headers["x-llm-error-reset-at"]) / 1000 - time.time()
    assert (290 < reset_in_s <= 300) if code == "pool_budget" else (50 < reset_in_s <= 60)
    error = json.loads(body)["error"]
    assert error["code"] == code
    assert error["message"] == ("no deployment of pool 'gpt' can serve now: 1 out of credit, 2 refused their keys "
                                "(the gateway's, not yours)")


async def test_a_renamed_deployment_keeps_its_keys_rate_limit_and_its_conversations(make_pool: MakePool) -> None:
    """A rename that tidies a config is the same key: kept by the deployment's name, its 429's
    sit-out was forgotten (the key called again inside its reset) and every conversation homed
    there moved, counted ``removed``, away from the prompt cache on that same key (audit)."""
    gw, fakes = await make_pool()
    sessions = [f"s-{i}" for i in range(12)]
    homes = {}
    for s in sessions:
        payload, headers = _turn(1, session=s)
        status, h, _ = await gw.chat(payload, headers=headers)
        assert status == 200
        homes[s] = h["x-llm-upstream"]
    limited = homes[sessions[0]]
    fakes[limited].always = Reply(429, RATE_LIMITED, {"retry-after": "3600"})
    payload, headers = _turn(2, session=sessions[0])
    assert (await gw.chat(payload, headers=headers))[0] == 200  # the sibling answered: it sits out
    payload, headers = _turn(3, session=sessions[0])
    homes[sessions[0]] = moved = (await gw.chat(payload, headers=headers))[1]["x-llm-upstream"]
    assert moved != limited
    before = _calls(fakes)
    upstreams = "".join(f"  - {{name: tidy-{n}, base_url: '{f.url}', api_key: key-{n}, models: ['gpt-*']}}\n"
                        for n, f in fakes.items())  # fmt: skip
    text = (f"upstreams:\n{upstreams}pools:\n  - {{name: gpt, models: ['gpt-*'], "
            "deployments: [tidy-a, tidy-b, tidy-c]}\nloop_breaker: {enabled: false}\n")  # fmt: skip
    await gw.app[LIVE].replace(parse_config(text, env={}))
    for s in sessions:
        payload, headers = _turn(4, session=s)
        status, h, _ = await gw.chat(payload, headers=headers)
        assert status == 200
        if homes[s] == limited:  # sitting out still: the break is the 429's
            assert h["x-llm-upstream"] != "tidy-" + limited
        else:
            assert h["x-llm-upstream"] == "tidy-" + homes[s]
    assert list(homes.values()).count(limited) < len(sessions) - 1  # some stayed at home
    for i in range(10):  # new conversations too: none reaches the limited key
        assert (await gw.chat(_chat(f"new {i}")))[1]["x-llm-upstream"] != "tidy-" + limited
    assert _calls(fakes)[limited] == before[limited]
    assert gw.metric("llm_gateway_affinity_breaks_total", pool="gpt", reason="removed") == 0


@pytest.mark.parametrize("project", ["proj_B", "proj_A"])
async def test_a_rename_that_changes_a_configured_header_is_another_deployment(
    make_pool: MakePool, project: str,
) -> None:
    """The same key in another ``OpenAI-Project`` is another project's rate limits and prompt
    cache: taken for a rename (same key and base URL), its conversations stayed, uncounted, on
    a project that held nothing of theirs (review). The same headers written in another case
    and order are a rename still, with the store's names keyed by ``loop_breaker.secret``."""
    headers = ", headers: {OpenAI-Project: proj_A, X-Title: agents}"
    secret = "loop_breaker: {enabled: false, secret: a-shared-secret}\n"
    gw, fakes = await make_pool(member_extra={"b": headers}, extra=secret)
    renamed = f", headers: {{x-title: agents, openai-project: {project}}}"
    upstreams = "".join(f"  - {{name: {'b2' if n == 'b' else n}, base_url: '{f.url}', api_key: key-{n}, "
                        f"models: ['gpt-*']{renamed if n == 'b' else ''}}}\n" for n, f in fakes.items())  # fmt: skip
    text = f"upstreams:\n{upstreams}pools:\n  - {{name: gpt, models: ['gpt-*'], deployments: [a, b2, c]}}\n{secret}"
    await gw.app[LIVE].replace(parse_config(text, env={}))
    assert gw.app[LIVE].services.pool_state.record_key == record_key("a-shared-secret")
    assert gw.app[LIVE].services.pools["gpt"].renamed == ({"b": "b2"} if project == "proj_A" else {})


async def test_a_request_retrying_an_outage_does_not_call_a_deployment_a_reload_removed(make_pool: MakePool) -> None:
    """a and b answer 503; the request's retries are spent on b, the last tried. A reload takes b
    out of the pool during the first backoff (an operator removing the broken deployment): b got
    5 more calls from that request after the reload, one per retry. It gets none now; the
    request is answered with b's 503, retryable, and the client's retry goes to the pool in force."""
    gw, fakes = await _a_then_b(make_pool)  # a is asked first
    fakes["a"].always = Reply(503, UNAVAILABLE)
    fakes["b"].always = Reply(503, UNAVAILABLE)
    svc = gw.app[LIVE].services
    at_reload: list[dict[str, int]] = []

    async def reload_at_the_first_backoff(s: float) -> None:
        gw.slept.append(s)
        if len(gw.slept) == 1:
            at_reload.append(_calls(fakes))
            await _reloaded(gw, fakes, "a", "weighted")

    svc.sleep = reload_at_the_first_backoff
    status, headers, _ = await gw.chat()
    assert at_reload == [{"a": 1, "b": 1}]
    assert _calls(fakes)["b"] == 1, _calls(fakes)
    assert status == 503 and headers["x-llm-error-retryable"] == "true"


async def test_a_request_waiting_for_a_reset_does_not_go_back_to_a_deployment_a_reload_removed(
    make_pool: MakePool,
) -> None:
    """Every key limited, a's reset the earliest (8 s), b's a second later: the request waits
    for a's. A reload meanwhile takes a out of the pool (a leaked key, say): the request went
    back to a at its reset all the same, 4.5 s after the reload (audit: limits a=8 s, b=c=60 s,
    the reload at +1.5 s). It finishes on its own config, but on a key still in force, or one the
    reload added; with the pool taken out of the config, it is answered 503 `pool_reloaded`."""
    shift = [0.0]
    gw, fakes = await make_pool(pool_yaml=", affinity: {enabled: false}", wall=lambda: time.time() + shift[0])
    for name, wait in (("a", "8"), ("b", "9"), ("c", "60")):
        fakes[name].script(Reply(429, RATE_LIMITED, {"retry-after": wait}))
    svc = gw.app[LIVE].services

    async def reload_during_the_wait(s: float) -> None:
        gw.slept.append(s)
        if len(gw.slept) == 1:
            await _reloaded(gw, fakes, "b, c", "weighted")
        shift[0] += s

    svc.sleep = reload_during_the_wait
    status, headers, _ = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "b", headers
    assert _calls(fakes) == {"a": 1, "b": 2, "c": 1}
    assert gw.slept[0] == pytest.approx(8, abs=0.5)

    # Every deployment it could go to replaced: it goes to the one the reload put in.
    shift[0] += 120
    for name, wait in (("b", "8"), ("c", "60")):
        fakes[name].script(Reply(429, RATE_LIMITED, {"retry-after": wait}))
    svc = gw.app[LIVE].services
    gw.slept.clear()

    async def reload_again(s: float) -> None:
        gw.slept.append(s)
        await _reloaded(gw, fakes, "a", "weighted")
        shift[0] += s

    svc.sleep = reload_again
    status, headers, body = await gw.chat()
    assert status == 200 and headers["x-llm-upstream"] == "a", body
    assert _calls(fakes) == {"a": 2, "b": 3, "c": 2}

    # The pool taken out of the config: the client is told to retry, on the new config.
    shift[0] += 120
    await _reloaded(gw, fakes, "b, c", "weighted")
    for name, wait in (("b", "8"), ("c", "60")):
        fakes[name].script(Reply(429, RATE_LIMITED, {"retry-after": wait}))
    svc = gw.app[LIVE].services
    gw.slept.clear()
    upstreams = "".join(f"  - {{name: {n}, base_url: '{f.url}', api_key: key-{n}, models: ['gpt-*']}}\n"
                        for n, f in fakes.items())  # fmt: skip

    async def reload_without_the_pool(s: float) -> None:
        gw.slept.append(s)
        await gw.app[LIVE].replace(parse_config(f"upstreams:\n{upstreams}loop_breaker: {{enabled: false}}\n", env={}))
        shift[0] += s

    svc.sleep = reload_without_the_pool
    status, headers, body = await gw.chat()
    assert status == 503 and json.loads(body)["error"]["code"] == "pool_reloaded", body
    assert headers["x-llm-error-retryable"] == "true"
    assert _calls(fakes) == {"a": 2, "b": 4, "c": 3}


async def test_requests_waiting_for_the_earliest_reset_go_to_a_key_a_reload_adds(make_pool: MakePool) -> None:
    """a and b answer 429 with retry-after 25 s (within max_retry_after_s): two requests wait for
    the pool's earliest reset. A reload adds c to the pool (an operator ending the outage): both
    go to c at once (unfixed: both were answered by a and b 25 s later, c got 0 calls). Through
    the openai SDK at its stock settings, as an agent sends them."""
    gw, fakes = await make_pool(real_sleep=True)
    await _reloaded(gw, fakes, "a, b", "weighted")  # c configured, not in the pool
    for name in ("a", "b"):
        fakes[name].script(Reply(429, RATE_LIMITED, {"retry-after": "25"}))  # then answers
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client")

    async def ask(text: str) -> tuple[str, float]:
        started = time.monotonic()
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": text}])
        raw.parse()
        return raw.headers["x-llm-upstream"], time.monotonic() - started

    try:
        first = asyncio.ensure_future(ask("first"))
        await eventually(lambda: _calls(fakes) == {"a": 1, "b": 1, "c": 0}, "both keys limited")
        second = asyncio.ensure_future(ask("second"))
        await asyncio.sleep(0.5)  # both wait for the earliest reset
        assert not first.done() and not second.done()
        await _reloaded(gw, fakes, "a, b, c", "weighted")
        answers = await asyncio.wait_for(asyncio.gather(first, second), 10)
    finally:
        await client.close()
    assert [name for name, _ in answers] == ["c", "c"], answers
    assert all(took_s < 5 for _, took_s in answers), answers
    assert _calls(fakes) == {"a": 1, "b": 1, "c": 2}


class _Clock:
    """The gateway's wall clock and the fake provider's, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _prompt(tokens: int) -> dict[str, Any]:
    """A chat request of about ``tokens`` input tokens, by the fake's count (3.5 bytes each)."""
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x " * round(tokens * 1.75)}]}


async def _tokens_pool(make_pool: MakePool, tpm: int) -> tuple[Gateway, dict[str, FakeUpstream], _Clock]:
    """Key a (asked first) meters ``tpm`` tokens a minute and answers its 429s as openai-node#1477
    quotes one, without retry-after; key b has no limit."""
    clock = _Clock()
    gw, fakes = await make_pool(names=("a", "b"), member_extra={"a": ", weight: 1000"}, wall=clock,
                                pool_yaml=", affinity: {enabled: false}")  # fmt: skip
    fakes["a"].keys.clock = clock
    fakes["a"].keys.limit("key-a", tpm=tpm)
    fakes["a"].keys.retry_after = False
    # No usage in its answers: the fake charges a request what it estimates its input at.
    fakes["a"].always = Reply(200, {k: v for k, v in _completion().items() if k != "usage"})
    return gw, fakes, clock


async def test_a_429_without_retry_after_sits_its_key_out_until_the_request_fits_not_until_it_is_full(
    make_pool: MakePool,
) -> None:
    """The key's 429 says when its tokens window is full again (x-ratelimit-reset-tokens, about
    42 s here) and, in its body, when the request fits (about 24 s): past the latter the key
    serves again. Ranked first, the header's reset kept a key out of a pool for a minute (the
    whole pool idle 36 s under two replicas, audit)."""
    gw, fakes, clock = await _tokens_pool(make_pool, tpm=1000)
    assert (await gw.chat(_prompt(10)))[1]["x-llm-upstream"] == "a"
    fakes["a"].keys.charge("key-a", 700)  # spent by another client of the key: the gateway cannot know
    status, headers, _ = await gw.chat(_prompt(700))
    assert status == 200 and headers["x-llm-upstream"] == "b" and headers["x-llm-attempts"] == "2"
    assert len(fakes["a"].chat_requests()) == 2  # a answered 429 and sat out
    clock.now += 30  # past "try again in", well before the bucket is full again
    await _expire_cache(gw)
    status, headers, _ = await gw.chat(_prompt(700))
    assert status == 200 and headers["x-llm-upstream"] == "a"


async def test_a_key_predicted_short_of_a_requests_tokens_is_skipped_without_a_call(make_pool: MakePool) -> None:
    """Key a's answer said a few hundred tokens left: a 700-token request goes to b at once, not
    to a for a 429 first; one that fits still goes to a."""
    gw, fakes, clock = await _tokens_pool(make_pool, tpm=1000)
    assert (await gw.chat(_prompt(700)))[1]["x-llm-upstream"] == "a"
    calls = len(fakes["a"].chat_requests())
    status, headers, _ = await gw.chat(_prompt(700))
    assert status == 200 and headers["x-llm-upstream"] == "b"
    assert len(fakes["a"].chat_requests()) == calls  # never asked
    assert headers["x-llm-attempts"] == "1"
    assert (await gw.chat(_prompt(20)))[1]["x-llm-upstream"] == "a"


def _corpus_case(path: str, name: str) -> dict[str, Any]:
    cases = json.loads((Path(__file__).parents[1] / "corpus" / path).read_text())
    return next(c for c in (cases["cases"] if isinstance(cases, dict) else cases) if c["name"] == name)


# A real Azure OpenAI answer's rate-limit headers: what is left, no limit, no reset
# (tests/corpus/ratelimit/headers.json, from EvolvingPrograms/oaib#11).
_AZURE_OK = _corpus_case("ratelimit/headers.json", "azure-openai-chat-real")["headers"]
AZURE_LEFT = {k: v for k, v in _AZURE_OK.items() if k.startswith("x-ratelimit-")}
# Azure's 429 (tests/corpus/openai.json), carrying what is left as its 200s do (an Azure 429's
# x-ratelimit-remaining-requests: openai/openai-python#937).
_AZURE_429 = _corpus_case("openai.json", "azure-429-token-rate")


async def test_configured_limits_hold_on_deployments_whose_answers_state_only_what_is_left(
    make_pool: MakePool,
) -> None:
    """Any reading stood for the headers deciding: two Azure deployments with
    ``requests_per_minute: 5`` were sent 20 calls of a burst of 20 (audit; 10 without headers)."""
    limits = ", limits: {requests_per_minute: 5, tokens_per_minute: 100000}"
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"a": limits, "b": limits},
                                extra="retry: {max_retry_after_s: 0}\n")  # fmt: skip
    for f in fakes.values():
        f.always = Reply(200, _completion(), AZURE_LEFT)
    await same_minute()
    statuses = []
    for i in range(20):  # one by one: every pick after the first answer has a reading to go by
        statuses.append((await gw.chat(_chat(f"q{i}")))[0])
        await _expire_cache(gw)
    assert _calls(fakes) == {"a": 5, "b": 5}
    assert statuses.count(200) == 10 and statuses.count(429) == 10
    # A share of the configured limit, as the strategy reads it: 61,353 of 100,000 tokens left.
    ratio = gw.metric("llm_gateway_deployment_headroom_ratio", deployment="a", kind="tokens")
    assert ratio == pytest.approx(0.61353, abs=0.02)


async def test_headroom_takes_an_azure_reading_as_unknown_and_its_429_for_its_wait_only(
    make_pool: MakePool,
) -> None:
    """Azure's answers state what is left and no limit. Read as full, an Azure deployment got
    every request beside a key with 0.998 left; read as empty after a 429 that asked for 5.5 s,
    the other got none for 120 s (audit). Unknown ranks as the median of the known: here it
    ties with the known key, and the weighted draw shares the picks."""
    shift = [0.0]
    gw, fakes = await make_pool(names=("az", "oai", "az2"), pool_yaml=", strategy: headroom, affinity: {enabled: false}",
                                wall=lambda: time.time() + shift[0])  # fmt: skip
    fakes["az"].always = fakes["az2"].always = Reply(200, _completion(), AZURE_LEFT)
    fakes["oai"].always = Reply(200, _completion(), {"x-ratelimit-limit-tokens": "1000000",
                                                     "x-ratelimit-remaining-tokens": "998000",
                                                     "x-ratelimit-reset-tokens": "6ms"})  # fmt: skip
    for i in range(60):
        assert (await gw.chat(_chat(f"q{i}")))[0] == 200
        await _expire_cache(gw)
    calls = _calls(fakes)
    assert min(calls.values()) >= 8, calls  # before: oai 0-1 of 60
    fakes["az"].script(Reply(429, _AZURE_429["body"], {**_AZURE_429["headers"], **AZURE_LEFT,
                                                       "x-ratelimit-remaining-tokens": "0"}))  # fmt: skip
    while _calls(fakes)["az"] == calls["az"]:  # until az has met its 429
        await gw.chat(_chat("until the 429"))
        await _expire_cache(gw)
    shift[0] += 6  # past its retry-after-ms (5.5 s)
    before = _calls(fakes)["az"]
    for i in range(60):
        assert (await gw.chat(_chat(f"after {i}")))[0] == 200
        await _expire_cache(gw)
    assert _calls(fakes)["az"] - before >= 8  # before: none for 120 s


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answers_usage_counts_against_a_deployments_configured_tokens_per_minute(
    make_pool: MakePool, stream: bool
) -> None:
    """A deployment's tokens per minute counted each request as its estimate, the prompt's bytes
    / 3.5: an answer of 1,990 output tokens on a 2,000-token minute left it taking the next
    request as though nearly all were left. The answer's usage, buffered or a stream's last
    chunk, is what the minute counts."""
    gw, fakes = await make_pool(names=("a", "b"), pool_yaml=", affinity: {enabled: false}",
                                member_extra={"a": ", limits: {tokens_per_minute: 2000}, weight: 1000"})  # fmt: skip
    if stream:
        events = stream_events(include_usage=True)
        events[-1]["usage"] = {"prompt_tokens": 12, "completion_tokens": 1990, "total_tokens": 2002}
        fakes["a"].always = Stream(events)
    else:
        fakes["a"].always = Reply(200, chat_completion(completion_tokens=1990))
    await same_minute()
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        served = []
        for i in range(2):
            asked: dict[str, Any] = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"{i}"}]}
            if stream:
                asked |= {"stream": True, "stream_options": {"include_usage": True}}
            r = await client.chat.completions.with_raw_response.create(**asked)
            if stream:
                async for _ in r.parse():
                    pass
            served.append(r.headers["x-llm-upstream"])
    finally:
        await client.close()
    assert served == ["a", "b"]


def _long_turn(i: int) -> tuple[dict[str, Any], dict[str, str]]:
    """Turn ``i`` of a session whose steps are long (an overflow's compression has turns to drop)."""
    msgs = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "fix the bug"}]
    for k in range(6 + i):
        msgs += [{"role": "assistant", "content": f"step {k}: " + "log line " * 120},
                 {"role": "user", "content": f"ok {k}"}]  # fmt: skip
    return {"model": "gpt-4o-mini", "messages": msgs}, {"session-id": "s-compressed"}


async def test_a_compress_and_retry_on_a_sibling_leaves_the_home_where_it_was(make_pool: MakePool) -> None:
    """The pick answered a 429 and its sibling refused the turn as over its context window: the
    compress-and-retry there answered it. The client sends the next turn whole again, which the
    sibling's window refuses as it did this one, and whose prefix the pick's cache holds: the
    home stays on the pick, and the next turns, after its reset, go there uncompressed in one
    call. Moved to the sibling (as a fixed resend's answer moves it), every later turn was
    refused and compressed there: two calls each, the conversation cut each time."""
    gw, fakes = await make_pool(names=("a", "b"), real_sleep=True)
    payload, headers = _long_turn(0)
    picked = _first_pick(payload, headers, ("a", "b"))
    sibling = "b" if picked == "a" else "a"
    fakes[picked].script(Reply(429, RATE_LIMITED, {"retry-after": "1"}))
    limit = estimate_tokens(payload) * 2 // 3

    def window(p: dict[str, Any]) -> Reply | None:
        used = estimate_tokens(p)
        return overflow_error(limit, used, None) if used > limit else None

    fakes[sibling].always = window  # the sibling's window is the same on every turn
    status, h, _ = await gw.chat(payload, headers=headers)
    assert status == 200 and h["x-llm-upstream"] == sibling and h["x-llm-compressed"] == "true"
    await asyncio.sleep(1.2)  # the pick's reset: it may serve again
    for i in (1, 2):
        payload, headers = _long_turn(i)
        status, h, _ = await gw.chat(payload, headers=headers)
        assert status == 200 and h["x-llm-upstream"] == picked and h["x-llm-attempts"] == "1"
        assert "x-llm-compressed" not in h
    assert len(fakes[picked].chat_requests()) == 3  # the 429, then the two turns
    assert len(fakes[sibling].chat_requests()) == 2  # refused, answered compressed


async def test_a_burst_refused_for_estimates_in_flight_is_served_when_their_answers_come(make_pool: MakePool) -> None:
    """docs/pools.md's burst on one process's memory: 60 requests estimated at ~200 tokens (their
    bytes / 3.5) at 0:40 of a minute over three deployments of 2,000 tokens a minute, answered in
    50 ms at 19 tokens each. The counts full of the estimates of requests in flight, a request
    waited for the minute's end, 20 s; it now waits for those answers (a settle here wakes it)
    and tries again: each served in one call, and no count past its limit."""
    shift = 40.0 - time.time() % 60
    limits = ", limits: {tokens_per_minute: 2000}"
    gw, fakes = await make_pool(pool_yaml=", affinity: {enabled: false}", real_sleep=True,
                                member_extra={n: limits for n in ("a", "b", "c")},
                                wall=lambda: time.time() + shift)  # fmt: skip
    for f in fakes.values():
        f.always = Reply(200, chat_completion(), delay_s=0.05)  # 19 tokens: 12 in, 7 out
    text = "x" * 640
    started = time.monotonic()
    got = await asyncio.gather(*(gw.chat(_chat(f"{i:03d} {text}")) for i in range(60)))
    took = time.monotonic() - started
    statuses = [s for s, _, _ in got]
    assert statuses.count(200) == 60, (statuses, [h.get("retry-after") for s, h, _ in got if s != 200])
    assert took < 10, took  # not the minute's end, 20 s away
    assert all(h["x-llm-attempts"] == "1" for _, h, _ in got)
    calls = _calls(fakes)
    assert sum(calls.values()) == 60, calls
    # Each minute's count: the usages, never past the limit.
    ps = gw.app[LIVE].services.pool_state
    assert ps is not None
    await ps._flush()  # (what the process holds goes to its store)
    minute = int((time.time() + shift) // 60)
    keys = [f"{ps._keys_of(name, 'gpt-4o-mini')[4]}#{minute}" for name in calls]
    counts, _, _ = await ps.store.records_sync(keys)
    assert {n: (c.get("n"), c.get("k")) for n, c in zip(calls, counts, strict=True)} == \
        {n: (c, 19 * c) for n, c in calls.items()}  # fmt: skip


async def test_a_request_that_cannot_wait_for_estimates_in_flight_is_told_the_short_wait(make_pool: MakePool) -> None:
    """With ``retry.max_retry_after_s: 0`` the gateway waits for nothing: a request refused only
    for the estimates of two calls still in flight was answered 429 with the minute's end as its
    ``retry-after`` (20 s at 0:40), where their answers give the room back within moments. It is
    told 1 s, and its SDK may retry then (no ``x-should-retry: false``). A count used by what
    the answers used is the minute's end, as before."""
    shift = 40.0 - time.time() % 60
    gw, fakes = await make_pool(names=("a",), pool_yaml=", affinity: {enabled: false}",
                                extra="retry: {max_retry_after_s: 0}\n",
                                member_extra={"a": ", limits: {tokens_per_minute: 500}"},
                                wall=lambda: time.time() + shift)  # fmt: skip
    answer = asyncio.Event()
    fakes["a"].always = Reply(200, chat_completion(), until=answer)  # 19 tokens
    text = "x" * 640  # ~200 tokens estimated
    held = [asyncio.ensure_future(gw.chat(_chat(f"{i} {text}"))) for i in range(2)]
    await eventually(lambda: len(fakes["a"].chat_requests()) == 2, "two calls in flight")
    status, headers, body = await gw.chat(_chat(f"2 {text}"))
    assert status == 429 and headers["retry-after"] == "1", (status, dict(headers), body)
    assert "x-should-retry" not in headers and b"requests in flight" in body
    answer.set()
    assert [r[0] for r in await asyncio.gather(*held)] == [200, 200]
    assert (await gw.chat(_chat(f"3 {text}")))[0] == 200  # the room the answers gave back
    # Used: answered far above their estimates, nothing in flight gives room back.
    fakes["a"].always = Reply(200, chat_completion(completion_tokens=400))
    assert (await gw.chat(_chat(f"4 {text}")))[0] == 200
    status, headers, _ = await gw.chat(_chat(f"5 {text}"))
    assert status == 429 and int(headers["retry-after"]) >= 15, dict(headers)  # the minute's end
    assert len(fakes["a"].chat_requests()) == 4
