"""A pool's configured limits on two replicas sharing a real redis-server: two apps in one
test, each in front of the same two deployments (each its own fake upstream, so calls are
counted per deployment). The limits are the operator's hard caps: every replica's picks take
from one count in Redis, so the deployments get what their limits allow, not that per replica
(40 calls for 20, measured before: each replica counted only its own sends)."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.live import LIVE
from gateway.state.pools import PoolState
from tests.fakeupstream import FakeUpstream, Reply, chat_completion
from tests.integration.conftest import Gateway, MakeGateway, same_minute
from tests.integration.test_state_redis import REDIS, RedisServer, Replica, patient_replicas, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["patient_replicas", "redis_server"]  # fixtures

RPM = 10


@pytest.fixture
async def fakes() -> AsyncIterator[dict[str, FakeUpstream]]:
    made = {n: await FakeUpstream().start() for n in ("c1", "c2")}
    yield made
    for f in made.values():
        await f.close()


async def _replicas(make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis: RedisServer,
                    limits: str = f"{{requests_per_minute: {RPM}}}", extra_up: str = "") -> list[Gateway]:  # fmt: skip
    upstreams = "".join(f"  - {{name: {n}, base_url: '{f.url}', api_key: key-{n}, limits: {limits}{extra_up}}}\n"
                        for n, f in fakes.items())  # fmt: skip
    # A patient store: a loaded test machine may take longer than the default 50 ms to answer,
    # and an operation Redis did not answer in time is counted in this replica alone.
    extra = (f"pools: [{{name: gpt, models: ['gpt-*'], deployments: [{', '.join(fakes)}]}}]\n"
             f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 2000}}\n")  # fmt: skip
    return [await make_gateway(extra, fake=fakes["c1"], upstreams=upstreams) for _ in range(2)]


def _calls(fakes: dict[str, FakeUpstream]) -> dict[str, int]:
    return {n: len(f.chat_requests()) for n, f in fakes.items()}


async def _burst(gw: Gateway, n: int, models: tuple[str, ...] = ("gpt-4o-mini",)) -> list[int]:
    got = await asyncio.gather(*(gw.chat({"model": models[i % len(models)], "messages": [
        {"role": "user", "content": f"question {i}"}]}) for i in range(n)))  # fmt: skip
    return [status for status, _, _ in got]


async def test_two_replicas_send_each_deployment_its_limit_not_twice_it(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    a, b = await _replicas(make_gateway, fakes, redis_server)
    await same_minute()
    statuses = [s for got in await asyncio.gather(_burst(a, 20), _burst(b, 20)) for s in got]
    assert _calls(fakes) == {"c1": RPM, "c2": RPM}  # 20 each before: each replica sent its own 10
    assert statuses.count(200) == 2 * RPM and statuses.count(429) == 40 - 2 * RPM
    # The rest of the minute, neither replica calls them again.
    for gw in (a, b):
        status, headers, _ = await gw.chat()
        assert status == 429 and headers["x-llm-error-type"] == "rate_limit"
    assert _calls(fakes) == {"c1": RPM, "c2": RPM}


async def test_names_mapped_to_one_model_take_from_its_one_count(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    """The limits are the key's for the model it is sent: two names each deployment's
    ``model_map`` sends as gpt-4o, alternating on two replicas, took 20 calls per key for 10
    (a count per name the client sent, measured)."""
    a, b = await _replicas(make_gateway, fakes, redis_server, extra_up=", model_map: {'gpt-*': gpt-4o}")
    await same_minute()
    names = ("gpt-4o", "gpt-4o-2024-08-06")
    statuses = [s for got in await asyncio.gather(_burst(a, 30, names), _burst(b, 30, names)) for s in got]
    assert _calls(fakes) == {"c1": RPM, "c2": RPM}
    assert statuses.count(200) == 2 * RPM


async def test_a_token_limit_holds_across_replicas(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    a, b = await _replicas(make_gateway, fakes, redis_server, "{tokens_per_minute: 200}")
    await same_minute()
    await asyncio.gather(_burst(a, 20), _burst(b, 20))
    calls = _calls(fakes)
    # Each request estimates at about 20 tokens (its bytes / 4): 200 a minute is ten of them.
    tokens = {n: sum(round(len(r.body) / 4) for r in f.chat_requests()) for n, f in fakes.items()}
    assert all(t <= 200 for t in tokens.values()), tokens
    assert all(c >= 5 for c in calls.values()), calls


async def test_retries_on_a_limited_deployment_stop_at_its_limit(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    """An outage retried on the last deployment left is one call per retry: each takes from the
    same count as a pick does, and none goes once the limit is used up (no call is made)."""
    a, _ = await _replicas(make_gateway, fakes, redis_server, "{requests_per_minute: 3}")
    for f in fakes.values():
        f.always = Reply(503, {"error": {"message": "The server is overloaded", "type": "server_error"}})
    await same_minute()
    status, headers, _ = await a.chat()
    # The first deployment is left after one attempt; the last one left gets the retries: 1 + 5
    # of them before, now as many as its limit allows.
    assert sorted(_calls(fakes).values()) == [1, 3]
    assert status == 429 and headers["x-llm-error-type"] == "rate_limit", (status, headers)


async def test_a_request_not_retried_along_the_pool_takes_from_the_same_count(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    a, b = await _replicas(make_gateway, fakes, redis_server, "{requests_per_minute: 1}")
    await same_minute()
    assert [s for s, _, _ in [await gw.chat() for gw in (a, b)]] == [200, 200]
    async with a.session.post(a.base + "/v1/embeddings", json={"model": "gpt-4o-mini", "input": "hi"}) as r:
        assert r.status == 429 and r.headers["x-llm-error-type"] == "rate_limit"
    assert sum(len(f.requests) for f in fakes.values()) == 2  # the embedding reached neither


async def test_the_limits_hold_on_deployments_whose_answers_state_only_what_is_left(
    make_gateway: MakeGateway, fakes: dict[str, FakeUpstream], redis_server: RedisServer,
) -> None:
    """Azure's answers carry ``x-ratelimit-remaining-*`` and no limit (a real answer's, from
    tests/corpus/ratelimit/headers.json). Any reading stood for the headers deciding, and the
    limits were no longer taken: 15 calls each here, 30 for 20 (audit: 20 of 20 sent)."""
    corpus = Path(__file__).parents[1] / "corpus" / "ratelimit" / "headers.json"
    real = next(c for c in json.loads(corpus.read_text())["cases"] if c["name"] == "azure-openai-chat-real")
    left = {k: v for k, v in real["headers"].items() if k.startswith("x-ratelimit-")}
    for f in fakes.values():
        f.always = Reply(200, {"id": "c", "object": "chat.completion", "created": 0, "model": "gpt-4o-mini",
                               "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                            "finish_reason": "stop"}]}, left)  # fmt: skip
    a, b = await _replicas(make_gateway, fakes, redis_server)
    await same_minute()
    statuses = [(await gw.chat())[0] for _ in range(15) for gw in (a, b)]  # one by one: each has a reading
    assert _calls(fakes) == {"c1": RPM, "c2": RPM}
    assert statuses.count(200) == 2 * RPM and statuses.count(429) == 30 - 2 * RPM


async def _b_takes_after_a_used_less(replicas: tuple[Replica, Replica], redis: RedisServer, lose: str) -> list[bool]:
    """Replica A takes 8,000 of a deployment's 10,000 tokens a minute, ``lose`` happens, B takes
    2,000, A's answer's usage says 100; then how many takes of 5,000 B is given."""
    a, b = replicas
    await a.store.check(2.0)  # (start-up's: learns the ``kept`` marker Redis holds)
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}, limits: {{tokens_per_minute: 10000}}}}\n"
        for k in "xy") + "pools: [{name: p, deployments: [x, y]}]\n", env={}).upstreams  # fmt: skip
    pa, pb = (PoolState(r.store, time.time, time.monotonic, cache_s=0) for r in replicas)
    await same_minute(20.0)  # (an outage and a return take seconds on a loaded machine)
    try:
        if lose == "take":  # Redis taken for down: counted in A's memory alone
            with a.bounded():
                redis.freeze()
                try:
                    for _ in range(250):
                        await pa.refresh("p", ups, "m")
                        if not a.store.healthy:
                            break
                        await asyncio.sleep(0.02)
                    assert not a.store.healthy
                    took = await pa.take(ups[0], "m", 8000)
                finally:
                    redis.thaw()
            for _ in range(500):  # the answer ends after A is back on Redis
                if a.store.healthy:
                    break
                await asyncio.sleep(0.02)
            assert a.store.healthy
        else:
            if lose == "crash":
                _command(redis, b"SAVE\r\n")  # a snapshot (Redis's default persistence) holds the marker
            took = await pa.take(ups[0], "m", 8000)
        assert took is not None
        mark = pa.sent(ups[0], "m", 8000, took)
        if lose == "answer":
            redis.flush()  # restarted empty while the answer streamed
        elif lose == "crash":  # killed and restarted from the snapshot: A's 8,000 gone, the marker kept
            redis.stop()
            redis.start()
        assert await pb.take(ups[0], "m", 2000) is not None
        pa.used(ups[0], "m", mark, 8000, 100)
        await pa.refresh("p", ups, "m")
        return [await pb.take(ups[0], "m", 5000) is not None for _ in range(4)]
    finally:
        await pa.close()
        await pb.close()


def _command(redis: RedisServer, command: bytes) -> None:
    with socket.create_connection(("127.0.0.1", redis.port), timeout=5) as s:
        s.sendall(command)
        assert s.recv(64).startswith(b"+OK")


@pytest.mark.parametrize("lose", ["nothing", "answer", "take", "crash"])
async def test_a_usage_below_the_estimate_lowers_only_a_count_that_holds_it(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer, lose: str,
) -> None:
    """Held, A's 8,000 comes down to 100: 2,100 counted, room for one more 5,000. Lost (Redis
    flushed while the answer came) or never there (taken for down at the take), lowered by
    7,900 it left B credit beyond its own 2,000: 15,000 tokens in a minute of 10,000 (review).
    Lost to a crash (Redis restarted from a snapshot taken before the take: its ``kept`` marker
    the same, A's 8,000 not there), it lowered B's 2,000 and more: 12,100 tokens (review); now
    by no more than A's own estimates still held there, none: 7,100.
    What A counted in its memory alone is lost to B either way; no more is."""
    assert await _b_takes_after_a_used_less(patient_replicas, redis_server, lose) == [True, False, False, False]


async def test_a_usage_below_the_estimate_takes_off_no_more_than_the_replica_s_own_share(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """The count holds 3,000 of A's (its take and a send's add) and 5,000 of B's: a difference of
    4,000 from A (an estimate the count lost, to a snapshot restored) lowers it by A's 3,000
    alone, never into B's share; a second one, by nothing more. B's own share is B's to lower."""
    a, b = patient_replicas
    await a.store.check(2.0)
    await b.store.check(2.0)
    key = "u:x#1"
    assert (await a.store.records_take(key, None, 10_000, 2_000, 120.0))[0]
    assert (await b.store.records_take(key, None, 10_000, 5_000, 120.0))[0]
    await a.store.records_sync((), adds=[(key, {"n": 1, "k": 1_000}, 120.0)])
    got, _, _ = await a.store.records_sync([key], adds=[(key, {"k": -4_000}, 120.0)])
    # (the shares are not read back as counts; ``e``: the takes' estimates, none answered)
    assert got == [{"n": 3.0, "k": 5_000.0, "e": 7_000.0}]
    got, _, _ = await a.store.records_sync([key], adds=[(key, {"k": -100}, 120.0)])
    assert got[0]["k"] == 5_000.0
    got, _, _ = await b.store.records_sync([key], adds=[(key, {"k": -4_900}, 120.0)])
    assert got[0]["k"] == 100.0


async def test_answers_below_their_estimates_under_load_leave_the_count_at_what_was_used(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """Two replicas, 40 calls at once in each of 3 rounds, starts staggered by up to 10 ms (so a
    replica's writes may reach Redis over its pooled connections out of order), each estimated
    at 60,000 tokens and answered at 1,000-5,000 (Claude Code's cached prompts): the count ends
    at the sum of the usages. A version that inferred lost writes from the order they arrived
    in kept 4.8-12× that, and a limited deployment refused every call after the first round
    (review)."""
    a, b = patient_replicas
    await a.store.check(2.0)
    await b.store.check(2.0)
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}, limits: {{tokens_per_minute: 100000000}}}}\n"
        for k in "xy") + "pools: [{name: p, deployments: [x, y]}]\n", env={}).upstreams  # fmt: skip
    pools = [PoolState(r.store, time.time, time.monotonic, cache_s=0) for r in patient_replicas]
    await same_minute(30.0)
    draw = random.Random(1)
    used = 0

    async def call(pool: PoolState, usage: int) -> None:
        nonlocal used
        await asyncio.sleep(draw.random() * 0.01)
        taken = await pool.take(ups[0], "m", 60_000)
        assert taken is not None
        mark = pool.sent(ups[0], "m", 60_000, taken)
        await asyncio.sleep(draw.random() * 0.05)
        pool.used(ups[0], "m", mark, 60_000, usage)
        used += usage

    try:
        for _ in range(3):
            await asyncio.gather(*(call(pools[i % 2], draw.randint(1_000, 5_000)) for i in range(40)))
            for pool in pools:
                await pool.refresh("p", ups, "m")
        key = f"{pools[0]._keys_of('x', 'm')[4]}#{pools[0]._minute()}"
        got, _, _ = await a.store.records_sync([key])
        assert got[0]["k"] == used
    finally:
        for pool in pools:
            await pool.close()


async def test_a_token_count_full_of_estimates_in_flight_serves_again_once_they_are_answered(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """A's two calls of 4,000 estimated tokens are in flight on a deployment of 10,000 a minute;
    B takes 2,000 and is refused a third 4,000: the count is full of estimates. The calls are
    answered at 100 tokens each, and B's next read finds 2,200 counted: B serves there again.
    Held out for the rest of the minute, a burst of 60 requests over three deployments of 2,000
    tokens left the pool answering 429 without a call for 55 s at 10 % of its tokens used
    (review). A count of requests only grows: refused for it, the deployment sits out the minute."""
    a, b = patient_replicas
    await a.store.check(2.0)
    await b.store.check(2.0)
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}, limits: {{tokens_per_minute: 10000}}}}\n"
        for k in "xy") + "  - {name: r, base_url: 'http://127.0.0.1:9/v1', api_key: key-r, limits: "
                         "{requests_per_minute: 1}}\npools: [{name: p, deployments: [x, y, r]}]\n",
        env={}).upstreams  # fmt: skip
    x, r = ups[0], ups[2]
    pa, pb = (PoolState(rep.store, time.time, time.monotonic, cache_s=0) for rep in patient_replicas)
    await same_minute(20.0)
    try:
        marks = []
        for _ in range(2):
            took = await pa.take(x, "m", 4000)
            assert took is not None
            marks.append(pa.sent(x, "m", 4000, took))
        assert await pb.take(x, "m", 2000) is not None
        assert await pb.take(x, "m", 4000) is None
        now_ms = time.time() * 1000
        assert not pb.view(0, x, "m", now_ms, (4000, 0)).serves_at(now_ms)
        for mark in marks:
            pa.used(x, "m", mark, 4000, 100)
        await pa.refresh("p", ups, "m")  # A's answers' differences go to Redis
        await pb.refresh("p", ups, "m")
        now_ms = time.time() * 1000
        assert pb.view(0, x, "m", now_ms, (4000, 0)).serves_at(now_ms)
        assert await pb.take(x, "m", 4000) is not None
        # Requests: one a minute, taken; the next refused and held so after any read.
        assert await pb.take(r, "m", 10) is not None
        assert await pb.take(r, "m", 10) is None
        await pb.refresh("p", ups, "m")
        now_ms = time.time() * 1000
        assert not pb.view(2, r, "m", now_ms, (10, 0)).serves_at(now_ms)
    finally:
        await pa.close()
        await pb.close()


async def test_a_token_count_refused_before_redis_restarted_empty_holds_to_the_minute_s_end(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """Refused for its tokens, then Redis restarted empty: the count read since is not the
    minute's (the takes before the restart are lost with it), so the refusal holds to the
    minute's end as it did before a read could end it."""
    b = patient_replicas[1]
    await b.store.check(2.0)
    ups = parse_config("upstreams:\n  - {name: x, base_url: 'http://127.0.0.1:9/v1', api_key: key-x, "
                       "limits: {tokens_per_minute: 10000}}\npools: [{name: p, deployments: [x]}]\n",
                       env={}).upstreams  # fmt: skip
    pb = PoolState(b.store, time.time, time.monotonic, cache_s=0)
    await same_minute(20.0)
    try:
        assert await pb.take(ups[0], "m", 8000) is not None
        assert await pb.take(ups[0], "m", 4000) is None
        epoch = b.store.epoch
        redis_server.stop()
        redis_server.start()
        for _ in range(100):  # the reconnection finds the ``kept`` marker gone
            await pb.refresh("p", ups, "m")
            if b.store.epoch != epoch and b.store.healthy:
                break
            await asyncio.sleep(0.05)
        await pb.refresh("p", ups, "m")
        assert b.store.epoch != epoch
        now_ms = time.time() * 1000
        assert not pb.view(0, ups[0], "m", now_ms, (4000, 0)).serves_at(now_ms)
    finally:
        await pb.close()


BURST_TPM = 2000


@dataclass
class Burst:
    answers: list[tuple[int, Any, float]]  # (status, headers, seconds from the burst's start) of each
    calls: dict[str, int]  # upstream calls per deployment
    counts: dict[str, tuple[int, int]]  # each deployment's (requests, tokens) counted in Redis
    took_s: float


async def _burst_at_40(make_gateway: MakeGateway, redis: RedisServer, replicas: int = 2, usage: int = 19,
                       requests: int = 60, retry: str = "") -> Burst:  # fmt: skip
    """docs/pools.md's burst: 60 requests estimated at ~200 tokens each (their bytes / 3.5), at
    0:40 of a minute (the gateways' clock), over three deployments of 2,000 tokens a minute,
    answered in 50 ms at ``usage`` tokens each, split over ``replicas`` gateways on one Redis.
    ``retry``: the gateways' ``retry`` section."""
    made = [await FakeUpstream().start() for _ in range(3)]
    fakes = {f"t{i}": f for i, f in enumerate(made)}
    for f in made:
        f.always = Reply(200, chat_completion(prompt_tokens=usage - 7, completion_tokens=7), delay_s=0.05)
    shift = 40.0 - time.time() % 60  # the gateways' clock reads 0:40 now
    if shift < -20:
        shift += 60

    def wall() -> float:
        return time.time() + shift

    upstreams = "".join(f"  - {{name: {n}, base_url: '{f.url}', api_key: key-{n}, "
                        f"limits: {{tokens_per_minute: {BURST_TPM}}}}}\n" for n, f in fakes.items())  # fmt: skip
    extra = (f"pools: [{{name: gpt, models: ['gpt-*'], deployments: [{', '.join(fakes)}], "
             "affinity: {enabled: false}}]\n"
             f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 2000}}\n"
             + (f"retry: {retry}\n" if retry else ""))  # fmt: skip
    gws = [await make_gateway(extra, fake=made[0], upstreams=upstreams, real_sleep=True, wall=wall)
           for _ in range(replicas)]  # fmt: skip
    for gw in gws:
        # As a server's does within seconds of its start (``RedisStore._watch_kept``): until it
        # knows the marker, no usage below an estimate lowers a count in Redis.
        await gw.app[LIVE].services.store._kept_checked()
    minute = int(wall() // 60)
    text = "x" * 640  # with the envelope, ~200 tokens at 3.5 bytes each
    started = time.monotonic()

    async def one(gw: Gateway, i: int) -> tuple[int, Any, float]:
        status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": [
            {"role": "user", "content": f"{i:03d} {text}"}]})  # fmt: skip
        return status, headers, time.monotonic() - started

    answers = list(await asyncio.gather(*(one(gws[i % replicas], i) for i in range(requests))))
    took = time.monotonic() - started
    for gw in gws:  # what each replica holds goes to Redis
        ps = gw.app[LIVE].services.pool_state
        assert ps is not None
        await ps.close()
    ps = gws[0].app[LIVE].services.pool_state
    assert ps is not None
    keys = [f"{ps._keys_of(n, 'gpt-4o-mini')[4]}#{minute}" for n in fakes]
    got, _, _ = await gws[0].app[LIVE].services.store.records_sync(keys)
    counts = {n: (int(rec.get("n", 0)), int(rec.get("k", 0))) for n, rec in zip(fakes, got, strict=True)}
    for f in made:
        await f.close()
    return Burst(answers, {n: len(f.chat_requests()) for n, f in fakes.items()}, counts, took)


async def test_a_burst_refused_for_estimates_in_flight_is_served_when_their_answers_come(
    make_gateway: MakeGateway, redis_server: RedisServer,
) -> None:
    """Every deployment's count full of the estimates of requests still in flight: the answers
    put 19 tokens each in place of ~200 within milliseconds. A request refused for those
    estimates waited for the minute's end (27 answered at once, 27 after 20 s, 6 answered 429
    after 20 s with ``retry-after: 60``); it now waits for those answers and tries again. One
    call per request, each counted at its usage: no count past its limit."""
    burst = await _burst_at_40(make_gateway, redis_server)
    statuses = [s for s, _, _ in burst.answers]
    assert statuses.count(200) == 60, (statuses, [h.get("retry-after") for s, h, _ in burst.answers if s != 200])
    assert burst.took_s < 10, burst.took_s  # not the minute's end, 20 s away
    assert all(h["x-llm-attempts"] == "1" for _, h, _ in burst.answers)
    assert sum(burst.calls.values()) == 60, burst.calls  # one upstream call per request
    assert burst.counts == {n: (c, 19 * c) for n, c in burst.calls.items()}


async def test_a_burst_past_the_limits_is_told_the_minutes_end_once_usages_fill_them(
    make_gateway: MakeGateway, redis_server: RedisServer,
) -> None:
    """300 requests of the same burst: the waits for estimates in flight end where the usages
    fill the counts (each take passes only while its estimate fits beside them). The rest are
    answered 429 with the minute's end (``retry.max_retry_after_s: 10``, 20 s away), no count
    past its limit, one call per request served and none for the others."""
    burst = await _burst_at_40(make_gateway, redis_server, requests=300, retry="{max_retry_after_s: 10}")
    served = [h for s, h, _ in burst.answers if s == 200]
    refused = [(h, at) for s, h, at in burst.answers if s != 200]
    assert sum(burst.calls.values()) == len(served) and all(h["x-llm-attempts"] == "1" for h in served)
    assert all(k <= BURST_TPM for _, k in burst.counts.values()), burst.counts
    assert burst.counts == {n: (c, 19 * c) for n, c in burst.calls.items()}
    assert all(k > BURST_TPM - 2 * 204 for _, k in burst.counts.values()), burst.counts  # (filled)
    # The minute's end (at 0:40 + the seconds since the burst began), not a short wait.
    assert refused and all(abs(int(h["retry-after"]) - (20 - at)) <= 1.5 for h, at in refused), refused[:3]
