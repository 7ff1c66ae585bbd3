"""What replicas know of pool deployments (gateway/state/pools.py), over the memory store: two
PoolStates on one store play two replicas; the clock is a list the test moves."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from multidict import CIMultiDict

from gateway.config import parse_config
from gateway.routing.pools import SitOut, relayed_scope
from gateway.state import pools
from gateway.state.memory import MemoryStore
from gateway.state.pools import OVER_WINDOW_MS, PoolState

T0 = 1_800_000_000.0
MODEL = "gpt-4o-mini"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class CountingStore(MemoryStore):
    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.syncs = 0

    async def records_sync(self, *a: Any, **kw: Any) -> Any:
        self.syncs += 1
        return await super().records_sync(*a, **kw)


def members(extra: str = "") -> Any:
    cfg = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: {k}{extra}}}\n" for k in "abc")
        + "pools: [{name: p, deployments: [a, b, c]}]\n", env={})  # fmt: skip
    return cfg.upstreams


def replicas(clock: Clock) -> tuple[PoolState, PoolState, CountingStore]:
    store = CountingStore(clock)
    return PoolState(store, clock, clock), PoolState(store, clock, clock), store


def openai_headers(remaining: int, limit: int = 100, reset: str = "30s") -> CIMultiDict[str]:
    return CIMultiDict({"x-ratelimit-limit-requests": str(limit), "x-ratelimit-remaining-requests": str(remaining),
                        "x-ratelimit-reset-requests": reset})  # fmt: skip


async def test_a_sit_out_written_by_one_replica_is_read_by_the_other_in_one_round_trip() -> None:
    clock = Clock()
    a, b, store = replicas(clock)
    ups = members()
    await a.sit_out(ups[1], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    syncs = store.syncs
    await b.refresh("p", ups, MODEL)
    assert store.syncs == syncs + 1
    views = [b.view(i, up, MODEL, T0 * 1000) for i, up in enumerate(ups)]
    assert [v.serves_at(T0 * 1000) for v in views] == [True, False, True]
    assert views[1].out_why is SitOut.RATE_LIMIT
    assert b.view(1, ups[1], "another-model", T0 * 1000).serves_at(T0 * 1000)  # a rate limit is per model
    assert b.view(1, ups[1], MODEL, (T0 + 60) * 1000).serves_at((T0 + 60) * 1000)  # until its reset


async def test_a_renamed_deployment_keeps_its_keys_sit_outs_on_every_replica() -> None:
    """A rename with the same key and base URL: its 429's reset and its refusal were the old
    name's, forgotten (audit: the key called again inside its reset). The key's follow it; a
    deployment given another key under the old name still gets the name's rate limit only."""
    clock = Clock()
    a, b, _ = replicas(clock)
    old = members()
    await a.sit_out(old[1], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    await a.sit_out(old[2], None, round((T0 + 3600) * 1000), SitOut.AUTH)
    renamed = parse_config("upstreams:\n" + "".join(
        f"  - {{name: tidy-{k}, base_url: 'http://127.0.0.1:9/v1', api_key: {k}}}\n" for k in "abc")
        + "pools: [{name: p, deployments: [tidy-a, tidy-b, tidy-c]}]\n", env={}).upstreams  # fmt: skip
    for replica in (a, b):
        await replica.refresh("p", renamed, MODEL)
        assert replica.view(0, renamed[0], MODEL, T0 * 1000).serves_at(T0 * 1000)
        assert replica.view(1, renamed[1], MODEL, T0 * 1000).out_why is SitOut.RATE_LIMIT
        assert replica.view(2, renamed[2], "any-model", T0 * 1000).out_why is SitOut.AUTH
    elsewhere = parse_config("upstreams: [{name: tidy-b, base_url: 'http://127.0.0.1:8/v1', api_key: b}]\n"
                             "pools: [{name: p, deployments: [tidy-b]}]\n", env={}).upstreams  # fmt: skip
    await b.refresh("p", elsewhere, MODEL)  # the same key sent elsewhere: another provider's limit
    assert b.view(0, elsewhere[0], MODEL, T0 * 1000).serves_at(T0 * 1000)


def upstreams(text: str) -> Any:
    names = [line.split("name: ")[1].split(",")[0] for line in text.strip().splitlines()]
    return parse_config(f"upstreams:\n{text}pools: [{{name: p, deployments: [{', '.join(names)}]}}]\n",
                        env={}).upstreams  # fmt: skip


PROJECTS = """\
  - {name: proj-a, base_url: 'https://api.openai.com/v1', api_key: sk-same-user-key, headers: {OpenAI-Project: proj_A}}
  - {name: proj-b, base_url: 'https://api.openai.com/v1', api_key: sk-same-user-key, headers: {OpenAI-Project: proj_B}}
"""


async def test_one_key_in_two_projects_sits_out_apart_on_every_replica() -> None:
    """OpenAI keeps rate limits per project: one key sent with two ``OpenAI-Project`` headers is
    two limits. Kept by key and base URL alone, project A's 429 sat project B out too, on the
    other replica as well (review)."""
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = upstreams(PROJECTS)
    await a.sit_out(ups[0], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    for replica in (a, b):
        await replica.refresh("p", ups, MODEL)
        views = [replica.view(i, up, MODEL, T0 * 1000) for i, up in enumerate(ups)]
        assert [v.serves_at(T0 * 1000) for v in views] == [False, True]
    # A rename keeps a project's sit-out, whatever the case and order its headers are written in.
    titled = upstreams(PROJECTS.replace("proj_A}", "proj_A, X-Title: t}"))
    await a.sit_out(titled[0], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    again = upstreams(PROJECTS.replace("name: proj-a,", "name: tidy-a,")
                      .replace("{OpenAI-Project: proj_A}", "{x-title: t, openai-project: proj_A}"))  # fmt: skip
    assert pools.record_id(titled[0]) == pools.record_id(again[0]) != pools.record_id(ups[0])
    await b.refresh("p", again, MODEL)
    assert b.view(0, again[0], MODEL, T0 * 1000).out_why is SitOut.RATE_LIMIT


async def test_a_reload_that_rotates_a_header_credential_is_a_new_key() -> None:
    """A gateway in front of the provider takes its own credential in a configured header: one
    rotated by a reload (a leaked ``cf-aig-authorization``) is a deployment gone for a request
    that waits for a reset, and ends its refusal's sit-out, as a rotated ``api_key`` does."""
    clock = Clock()
    ps = PoolState(MemoryStore(clock), clock, clock)
    line = "  - {{name: {n}, base_url: 'https://gateway.ai.cloudflare.com/v1/acct/gw/openai', api_key: sk-{n}, " \
           "headers: {{cf-aig-authorization: 'Bearer {t}'}}}}\n"  # fmt: skip
    before = upstreams(line.format(n="a", t="cf-token-old") + line.format(n="b", t="cf-token-old"))
    after = upstreams(line.format(n="a", t="cf-token-old") + line.format(n="b", t="cf-token-new"))
    ps.in_force({"p": before})
    assert ps.gone("p", before) == set()
    await ps.sit_out(before[1], None, round((T0 + 3600) * 1000), SitOut.AUTH)
    ps.in_force({"p": after})
    assert ps.gone("p", before) == {"b"}
    await ps.refresh("p", after, MODEL)
    assert ps.view(1, after[1], MODEL, T0 * 1000).serves_at(T0 * 1000)


async def test_with_a_secret_the_store_holds_no_plain_digest_of_a_key() -> None:
    """Keyed by ``loop_breaker.secret`` (its own derivation), a key's name in the store cannot be
    confirmed by hashing a guessed key; replicas sharing the secret still agree on it (review)."""
    clock = Clock()
    a, b, store = replicas(clock)
    written: dict[str, Any] = {}
    sync = store.records_sync

    async def recording(reads: Any, writes: Any = (), *rest: Any) -> Any:
        written.update((k, fields) for k, fields, _ in writes)
        return await sync(reads, writes, *rest)

    store.records_sync = recording  # type: ignore[method-assign]
    ups = members()
    key = pools.record_key("a shared secret")
    for replica in (a, b):
        replica.in_force({"p": ups}, key)
    await a.sit_out(ups[1], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    await a.sit_out(ups[2], None, round((T0 + 3600) * 1000), SitOut.AUTH)
    plain = pools.record_id(ups[1])
    assert plain is not None and not any(plain in k for k in written)
    assert any(k.startswith("o:~") for k in written)
    # A refused key's sit-out names it (``key_id``): keyed too, not 48 bits of its plain SHA-256.
    assert written["o:c"]["k"] != float(int(hashlib.sha256(b"c").hexdigest()[:12], 16))
    renamed = upstreams("".join(f"  - {{name: tidy-{k}, base_url: 'http://127.0.0.1:9/v1', api_key: {k}}}\n"
                                for k in "abc"))  # fmt: skip
    await b.refresh("p", renamed, MODEL)
    assert b.view(1, renamed[1], MODEL, T0 * 1000).out_why is SitOut.RATE_LIMIT  # the key's, on b
    assert b.view(2, renamed[2], MODEL, T0 * 1000).out_why is SitOut.AUTH


async def test_a_refused_key_sits_out_for_every_model() -> None:
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = members()
    await a.sit_out(ups[2], None, round((T0 + 3600) * 1000), SitOut.AUTH)
    await b.refresh("p", ups, "any-model")
    assert b.view(2, ups[2], "any-model", T0 * 1000).out_why is SitOut.AUTH


async def test_a_refused_key_replaced_in_the_config_serves_at_once_on_every_replica_that_has_the_new_one() -> None:
    """A deployment whose key was refused sat out for auth_s (an hour) whatever key the config
    gave it since: the record was the deployment's, not its key's. A rate limit stays (it is
    the account's, which a new key of the same account shares)."""
    clock = Clock()
    a, b, _ = replicas(clock)
    old = members()
    await a.sit_out(old[2], None, round((T0 + 3600) * 1000), SitOut.AUTH)
    await a.sit_out(old[1], MODEL, round((T0 + 60) * 1000), SitOut.RATE_LIMIT)
    rotated = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: {k}-new}}\n" for k in "abc")
        + "pools: [{name: p, deployments: [a, b, c]}]\n", env={}).upstreams  # fmt: skip
    await b.refresh("p", rotated, MODEL)
    assert b.view(2, rotated[2], MODEL, T0 * 1000).serves_at(T0 * 1000)  # the new key is not the refused one
    assert b.view(1, rotated[1], MODEL, T0 * 1000).out_why is SitOut.RATE_LIMIT
    await a.refresh("p", old, MODEL)
    assert a.view(2, old[2], MODEL, T0 * 1000).out_why is SitOut.AUTH  # a replica still on the old key


async def test_headroom_from_headers_is_shared_and_counted_down_by_what_was_sent_since() -> None:
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = members()
    a.observe(ups[0], MODEL, openai_headers(remaining=3))
    await a.refresh("p", ups, MODEL)  # the observation goes out with the next round trip
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, T0 * 1000).requests_left == 0.03
    for _ in range(3):
        b.sent(ups[0], MODEL, 10)
    v = b.view(0, ups[0], MODEL, T0 * 1000)
    # Predicted empty before the provider says 429: sits out until one request has refilled
    # (97 come back in the 30 s to the stated reset: one every 309 ms).
    assert v.requests_left == 0.0 and v.out_why is SitOut.HEADROOM and v.out_until_ms == T0 * 1000 + 309
    clock.now = T0 + 31
    assert b.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)  # reset: full again


async def test_an_answer_read_leaves_counted_what_was_sent_after_its_request() -> None:
    """Headers count what the provider had received up to their request: requests this process
    sent after it are still to come off them. Counting them as nothing overestimated the
    headroom under concurrency (5 sent, the first answer "4 left": 4, not 0)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    marks = [a.sent(ups[0], MODEL, 10) for _ in range(5)]
    a.observe(ups[0], MODEL, openai_headers(remaining=5, limit=6), marks[0])  # the first one's answer
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.requests_left == 1 / 6  # 5 left after the first, less the 4 sent after it
    clock.now += 1  # past the reading interval
    a.observe(ups[0], MODEL, openai_headers(remaining=1, limit=6), marks[4])  # the last one's answer
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 1 / 6  # nothing sent after it


async def test_past_its_reset_a_bucket_sent_to_since_is_not_full_again() -> None:
    """A reading of 5 of 6 left, full in 10 s, then 5 sent: at 10.5 s one request is left,
    not six (the pool once released six waiting requests there, into 429s)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    a.observe(ups[0], MODEL, openai_headers(remaining=5, limit=6, reset="10s"))
    for _ in range(5):
        a.sent(ups[0], MODEL, 10)
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.requests_left == 0.0 and v.out_until_ms == T0 * 1000 + 10_000  # one refills in 10 s
    now = (T0 + 10.5) * 1000
    v = a.view(0, ups[0], MODEL, now)
    # The bucket is full by now as if nothing had been sent, less the 5 sent: the cautious side
    # of where the sends fell in time.
    assert v.serves_at(now) and v.requests_left == pytest.approx(1 / 6)
    a.sent(ups[0], MODEL, 10)
    v = a.view(0, ups[0], MODEL, now)
    assert not v.serves_at(now) and v.out_until_ms == round(now + 10_000)  # the next one's refill


def openai_tokens(remaining: int, limit: int, reset: str) -> CIMultiDict[str]:
    """The audit's key x1 (6,000 tokens a minute) as OpenAI's headers state it."""
    return CIMultiDict({"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
                        "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": str(limit),
                        "x-ratelimit-remaining-tokens": str(remaining), "x-ratelimit-reset-tokens": reset})  # fmt: skip


async def test_a_key_sits_out_for_a_request_until_its_tokens_have_refilled() -> None:
    """311 of 6,000 tokens left, full in 56.9 s: a 2,200-token prompt asking 200 more waits for
    2,089 to come back (100 a second), a one-token request goes now. Held to one token, the
    2,200-token prompt went there and met a 429 (11-15 a minute under overload, audit)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    a.observe(ups[0], MODEL, openai_tokens(311, 6000, "56.9s"))
    now = clock.now * 1000
    rate = (6000 - 311) / 56_900  # tokens a millisecond
    v = a.view(0, ups[0], MODEL, now, (2200, 200))
    assert not v.serves_at(now) and v.out_why is SitOut.HEADROOM
    assert v.out_until_ms == int(now + (2400 - 311) / rate)
    assert a.view(0, ups[0], MODEL, now).serves_at(now)  # a request of no known size: as before
    assert a.view(0, ups[0], MODEL, now, (300, 0)).serves_at(now)
    # Bigger than the whole bucket: no refill makes it fit, so it is not held back for one.
    assert a.view(0, ups[0], MODEL, now, (7000, 0)).serves_at(now)
    # Once in, the next one waits for its own tokens as well (waiters released at a reset).
    later = v.out_until_ms + 1
    assert a.view(0, ups[0], MODEL, later, (2200, 200)).serves_at(later)
    a.sent(ups[0], MODEL, 2400)
    w = a.view(0, ups[0], MODEL, later, (2200, 200))
    assert not w.serves_at(later) and w.out_until_ms == pytest.approx(later + 2400 / rate, abs=2)


async def test_anthropics_windows_hold_a_request_to_one_token_whatever_its_size() -> None:
    """Anthropic settles its windows after the answer: OTPM "estimated based on max_tokens at the
    beginning of each request, and the estimate is adjusted at the end", cache reads not counted
    toward ITPM (its rate-limits page). A reading from an answer's start said 8,000 of 40,000
    output tokens left; held to its max_tokens, Claude Code's next turn (32,000) sat out 31 s and
    was refused 429 without a call, though the provider had given back what the answer did not
    use (review). Only a window with nothing left holds a request back."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + 60))
    a.observe(ups[0], MODEL, CIMultiDict({
        "anthropic-ratelimit-input-tokens-limit": "400000", "anthropic-ratelimit-input-tokens-remaining": "398000",
        "anthropic-ratelimit-input-tokens-reset": reset, "anthropic-ratelimit-output-tokens-limit": "40000",
        "anthropic-ratelimit-output-tokens-remaining": "8000", "anthropic-ratelimit-output-tokens-reset": reset,
    }))  # fmt: skip
    now = clock.now * 1000
    assert a.view(0, ups[0], MODEL, now, (1800, 32_000)).serves_at(now)
    assert a.view(0, ups[0], MODEL, now, (300_000, 100)).serves_at(now)  # a cached prefix, mostly


async def test_configured_limits_count_what_every_replica_sent_this_minute() -> None:
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = members(", limits: {requests_per_minute: 4}")
    for _ in range(2):
        a.sent(ups[0], MODEL, 100)
        b.sent(ups[0], MODEL, 100)
    await a.refresh("p", ups, MODEL)
    await b.refresh("p", ups, MODEL)
    await a.refresh("p", ups, MODEL)
    for replica in (a, b):
        v = replica.view(0, ups[0], MODEL, clock.now * 1000)
        assert v.requests_left == 0.0 and v.out_why is SitOut.HEADROOM
        assert v.out_until_ms == (int(T0 // 60) + 1) * 60_000  # the minute's end
    clock.now = (int(T0 // 60) + 1) * 60 + 1
    await a.refresh("p", ups, MODEL)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 1.0


async def test_a_fresh_view_asks_the_store_nothing() -> None:
    clock = Clock()
    a, _, store = replicas(clock)
    a.monotonic = lambda: 0.0
    ups = members()
    await a.refresh("p", ups, MODEL)
    assert a.fresh("p", MODEL)
    a.monotonic = lambda: 0.5  # past cache_s (0.2)
    assert not a.fresh("p", MODEL)
    assert store.syncs == 1


def test_in_flight_and_latency_are_this_process_own() -> None:
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = members()
    a.hold("a")
    a.hold("a")
    a.release("a")
    a.timed("a", 1.0)
    a.timed("a", 0.0)
    v = a.view(0, ups[0], MODEL, T0 * 1000)
    assert v.in_flight == 1 and v.latency_s == 0.7
    assert b.view(0, ups[0], MODEL, T0 * 1000).in_flight == 0


class SharedStore(CountingStore):
    """The memory store standing in for Redis: a store every replica shares, where configured
    limits are taken at the pick and sends are reported between reads."""

    backend = "redis"


def shared_replicas(clock: Clock) -> tuple[PoolState, PoolState, SharedStore]:
    store = SharedStore(clock)
    return PoolState(store, clock, clock), PoolState(store, clock, clock), store


async def test_configured_limits_are_taken_from_one_count_by_every_replica() -> None:
    """Counted after the send, each replica's own count let two replicas send the whole limit
    each in the same moment (40 calls for 20, measured): on a shared store a pick takes its
    request from the one count first, and the replica that finds it used up sits it out."""
    clock = Clock()
    a, b, store = shared_replicas(clock)
    ups = members(", limits: {requests_per_minute: 4}")
    assert a.takes(ups[0], MODEL) and not a.takes(members()[0], MODEL)  # only a limited deployment
    taken = [await replica.take(ups[0], MODEL, 10) is not None for replica in (a, b, a, b, a, b)]
    assert taken == [True, True, True, True, False, False]
    ends = (int(T0 // 60) + 1) * 60_000
    for replica in (a, b):
        v = replica.view(0, ups[0], MODEL, clock.now * 1000)
        assert not v.serves_at(clock.now * 1000) and v.out_why is SitOut.HEADROOM and v.out_until_ms == ends
    a.sent(ups[0], MODEL, 10, taken=True)  # counted at the take: not again
    await a.refresh("p", ups, MODEL)
    # (``e``: of those 40 tokens, the estimates of the calls in flight: none answered yet)
    assert (await store.records_sync([f"n:a/{MODEL}#{int(T0 // 60)}"]))[0] == [{"n": 4, "k": 40, "e": 40}]
    clock.now = ends / 1000 + 1  # the next minute: full again
    assert a.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)
    assert await b.take(ups[0], MODEL, 10)


async def test_limits_raised_by_a_reload_end_the_sit_out_of_the_replica_that_found_them_used_up() -> None:
    """A refused take sat the deployment out here until the minute's end whatever its limits:
    raised from 3 to 100 a minute by a reload in that minute, the replica that had been refused
    kept it out until the minute ended (the others served it). Limits apply at once."""
    clock = Clock()
    a, b, _ = shared_replicas(clock)
    ups = members(", limits: {requests_per_minute: 3}")
    assert [await a.take(ups[0], MODEL, 10) is not None for _ in range(4)] == [True, True, True, False]
    now_ms = clock.now * 1000
    assert not a.view(0, ups[0], MODEL, now_ms).serves_at(now_ms)
    raised = members(", limits: {requests_per_minute: 100}")  # the reload
    assert a.view(0, raised[0], MODEL, now_ms).serves_at(now_ms)
    assert b.view(0, raised[0], MODEL, now_ms).serves_at(now_ms)
    assert await a.take(raised[0], MODEL, 10)
    # Unchanged limits keep the sit-out until the minute's end.
    assert not a.view(0, ups[0], MODEL, now_ms).serves_at(now_ms)


async def test_a_token_limit_takes_a_request_only_while_it_fits() -> None:
    clock = Clock()
    a, b, _ = shared_replicas(clock)
    ups = members(", limits: {tokens_per_minute: 100}")
    assert await a.take(ups[0], MODEL, 150)  # larger than the whole limit: a minute of its own
    assert not await b.take(ups[0], MODEL, 1)
    clock.now += 60
    assert await a.take(ups[0], MODEL, 60)
    assert not await b.take(ups[0], MODEL, 41)
    assert not b.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)


async def test_limits_are_not_taken_once_headers_tell_the_headroom_nor_on_one_process_memory() -> None:
    clock = Clock()
    a, _, _ = shared_replicas(clock)
    ups = members(", limits: {requests_per_minute: 4}")
    a.observe(ups[0], MODEL, openai_headers(remaining=50))
    assert not a.takes(ups[0], MODEL)  # the headers decide, as without a shared store
    alone, _, _ = replicas(clock)
    assert not alone.takes(ups[0], MODEL)  # memory: counted as sent, as before


_AZURE = next(c for c in json.loads((Path(__file__).parents[2] / "corpus" / "ratelimit" / "headers.json")
                                    .read_text())["cases"] if c["name"] == "azure-openai-chat-real")  # fmt: skip


def azure_headers(requests: int = 79, tokens: int = 61353) -> CIMultiDict[str]:
    """A real Azure OpenAI answer's headers (the corpus's ``azure-openai-chat-real``): what is
    left of requests and tokens, no limit, no reset; the counts as a test needs them."""
    return CIMultiDict({**_AZURE["headers"], "x-ratelimit-remaining-requests": str(requests),
                        "x-ratelimit-remaining-tokens": str(tokens)})  # fmt: skip


async def test_a_reading_that_states_no_limit_leaves_the_configured_limits_counting() -> None:
    """Azure's answers say what is left and nothing else. Any reading stood for the headers
    deciding: two Azure deployments with ``requests_per_minute: 5`` were sent 20 calls of a burst
    of 20 (audit). The limits count until a reading states a limit, in one process's memory
    and, on a shared store, taken at the pick."""
    clock = Clock()
    alone, _, _ = replicas(clock)
    ups = members(", limits: {requests_per_minute: 5}")
    for left in range(5):
        mark = alone.sent(ups[0], MODEL, 10)
        assert alone.observe(ups[0], MODEL, azure_headers(requests=79 - left), mark, refused=True) is not None
    v = alone.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.out_why is SitOut.HEADROOM and v.out_until_ms == (int(T0 // 60) + 1) * 60_000
    assert v.requests_left == 0.0
    a, b, _ = shared_replicas(clock)
    a.observe(ups[0], MODEL, azure_headers())
    await a.refresh("p", ups, MODEL)
    await b.refresh("p", ups, MODEL)
    assert a.takes(ups[0], MODEL) and b.takes(ups[0], MODEL)
    assert [await r.take(ups[0], MODEL, 10) is not None for r in (a, b, a, b, a, b)] == [True] * 5 + [False]
    a.observe(ups[0], MODEL, openai_headers(remaining=50), refused=True)
    assert not a.takes(ups[0], MODEL)  # a stated limit: the headers decide


async def test_a_reading_without_a_limit_is_unknown_and_a_zero_in_it_fades_in_a_minute() -> None:
    """Without a limit a share of 1.0 for anything left, 0.0 for nothing, faded only with the
    record (120 s): an Azure deployment whose 429 asked for 7 s and said 0 tokens left got no
    request for 120 s, and one that said 79 left outranked a key with 0.998 of 10 times its
    tokens (audit). Its share is unknown; nothing left ranks last for a minute (Azure's quota
    is per minute), and a 429's reading says nothing past that 429's own wait."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    a.observe(ups[0], MODEL, azure_headers())
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert (v.requests_left, v.tokens_left, v.room) == (None, None, None)
    a.observe(ups[0], MODEL, azure_headers(tokens=0), refused=True)  # a 429's
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.room is None and v.serves_at(clock.now * 1000)
    a.monotonic = lambda: T0 + 1.0  # past OBSERVE_EVERY_S: the next answer is read
    a.observe(ups[0], MODEL, azure_headers(tokens=0))  # an answer that took the last tokens
    assert a.view(0, ups[0], MODEL, (clock.now + 59) * 1000).tokens_left == 0.0
    assert a.view(0, ups[0], MODEL, (clock.now + 59) * 1000).serves_at((clock.now + 59) * 1000)
    assert a.view(0, ups[0], MODEL, (clock.now + 60) * 1000).tokens_left is None
    # With configured limits, a reading is a share of them, refilled by the minute's end.
    limited = members(", limits: {tokens_per_minute: 30000}")
    a.monotonic = lambda: T0 + 2.0
    a.observe(limited[1], MODEL, azure_headers(tokens=15000))
    assert a.view(1, limited[1], MODEL, clock.now * 1000).tokens_left == 0.5
    assert a.view(1, limited[1], MODEL, (clock.now + 30) * 1000).tokens_left == 0.75


async def test_headroom_counts_down_by_what_the_other_replicas_sent_since_the_reading() -> None:
    """Each replica counted a reading down by its own sends alone: two replicas each spent what
    it said was left (48 upstream 429s for 100 requests, measured). Every replica reports its
    sends with its reads, by the tenth of a second they were sent in; a reading is counted down
    by those sent after its request (what the tenth it was sent in holds, in proportion)."""
    clock = Clock()
    a, b, _ = shared_replicas(clock)
    ups = members()
    clock.now = T0 + 0.099
    first = a.sent(ups[0], MODEL, 10)
    for i in range(4):
        clock.now = T0 + 0.15 + i / 10
        a.sent(ups[0], MODEL, 10)
    a.observe(ups[0], MODEL, openai_headers(remaining=19, limit=20, reset="60s"), first)
    await a.refresh("p", ups, MODEL)  # its reading and its five sends go out
    await b.refresh("p", ups, MODEL)
    left = b.view(0, ups[0], MODEL, clock.now * 1000).requests_left
    assert left == pytest.approx(15 / 20, abs=0.001)  # 19 less the 4 sent after it (and 1% of 1)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 15 / 20  # its own: exactly
    for i in range(3):
        clock.now = T0 + 0.6 + i / 10
        b.sent(ups[0], MODEL, 10)
    await b.refresh("p", ups, MODEL)
    await a.refresh("p", ups, MODEL)
    # (Plus what refilled in the 0.35 s since: the bucket is full again in 60 s.)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == pytest.approx(12 / 20, abs=0.001)
    # A newer reading, b's, holds every send made so far: none is taken off it again.
    clock.now = T0 + 1
    b.observe(ups[0], MODEL, openai_headers(remaining=12, limit=20, reset="60s"))
    await b.refresh("p", ups, MODEL)
    await a.refresh("p", ups, MODEL)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 12 / 20
    clock.now = T0 + 1.1
    a.sent(ups[0], MODEL, 10)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == pytest.approx(11 / 20, abs=0.001)


async def test_an_answer_of_429_is_always_read_and_not_counted_as_sent() -> None:
    """A 429 within OBSERVE_EVERY_S of the last reading was not read: the older reading, which
    still showed room, let every request that waited out the 429 go at once (nine 429s again,
    measured). And the provider did not count the refused request: neither does the headroom."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    first = a.sent(ups[0], MODEL, 10)
    a.observe(ups[0], MODEL, openai_headers(remaining=5, limit=20, reset="60s"), first)
    refused = a.sent(ups[0], MODEL, 10)
    a.refused(ups[0], MODEL, refused, 10)
    assert a.observe(ups[0], MODEL, openai_headers(remaining=0, limit=20, reset="60s"), refused, True) is not None
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.requests_left == 0.0 and v.out_why is SitOut.HEADROOM
    assert v.out_until_ms == T0 * 1000 + 3000  # one of the 20 refilled: 60 s / 20
    a.sent(ups[0], MODEL, 10)
    # The refused one is no longer among the sends: one sent since the 429 was read.
    assert a.view(0, ups[0], MODEL, clock.now * 1000).out_until_ms == T0 * 1000 + 6000


async def test_sends_reach_the_other_replicas_without_a_read_once_a_replica_falls_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pools, "FLUSH_S", 0.02)
    clock = Clock()
    a, b, store = shared_replicas(clock)
    ups = members()
    a.monotonic = b.monotonic = time.monotonic
    b.observe(ups[0], MODEL, openai_headers(remaining=10))
    await b.refresh("p", ups, MODEL)
    await a.refresh("p", ups, MODEL)
    syncs = store.syncs
    for _ in range(4):
        a.sent(ups[0], MODEL, 10)
    await asyncio.sleep(0.1)
    assert store.syncs == syncs + 1  # one flush for the four
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 6 / 100
    a.sent(ups[0], MODEL, 10)
    await a.close()  # at shutdown, what is left goes out
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 5 / 100


async def test_sends_count_in_the_minute_they_were_made_on_one_process_memory() -> None:
    """The memory backend counted a minute's sends into the count of the minute its next read
    came in: two sends at 00:24 left the pool refusing every request at 01:02, without a call
    (``429 … the earliest resets in 57 s``, measured). Each send counts in its own minute."""
    clock = Clock()
    a, _, store = replicas(clock)
    ups = members(", limits: {requests_per_minute: 2}")
    minute = int(T0 // 60)
    clock.now = T0 + 24
    for _ in range(2):
        a.sent(ups[0], MODEL, 100)
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.requests_left == 0.0 and v.out_until_ms == (minute + 1) * 60_000  # this minute's used up
    clock.now = T0 + 62  # the next minute, no read between
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 1.0
    await a.refresh("p", ups, MODEL)  # the first read of the new minute takes the old sends
    v = a.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.requests_left == 1.0 and v.serves_at(clock.now * 1000)
    counts = await store.records_sync([f"n:a/{MODEL}#{minute}", f"n:a/{MODEL}#{minute + 1}"])
    assert counts[0] == [{"n": 2, "k": 200}, {}]
    a.sent(ups[0], MODEL, 100)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 0.5  # one of two sent this minute


async def test_sends_reported_after_the_minute_turned_count_in_the_minute_they_were_made() -> None:
    """The same on a shared store, for sends counted after the call (the headers told the
    headroom at the pick): reported with the next minute's first read, they went into its count."""
    clock = Clock()
    a, _, store = shared_replicas(clock)
    ups = members(", limits: {requests_per_minute: 4}")
    minute = int(T0 // 60)
    clock.now = T0 + 59.9
    a.sent(ups[0], MODEL, 10)
    a.sent(ups[0], MODEL, 10)
    clock.now = T0 + 60.5
    await a.refresh("p", ups, MODEL)
    counts = await store.records_sync([f"n:a/{MODEL}#{minute}", f"n:a/{MODEL}#{minute + 1}"])
    assert counts[0] == [{"n": 2, "k": 20}, {}]
    assert a.view(0, ups[0], MODEL, clock.now * 1000).requests_left == 1.0


async def test_a_relayed_requests_sit_out_is_kept_apart_from_its_models_generation() -> None:
    """A count_tokens 429 sat the key out of Messages too (measured): Anthropic limits token
    counting apart from message creation. A relayed request's records are its own."""
    clock = Clock()
    a, b, _ = replicas(clock)
    ups = members()
    scope = relayed_scope(MODEL)
    until = round(clock.now * 1000) + 30_000
    await a.sit_out(ups[0], scope, until, SitOut.RATE_LIMIT)
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)
    assert not b.fresh("p", scope)
    await b.refresh("p", ups, MODEL, scope=scope)
    v = b.view(0, ups[0], scope, clock.now * 1000)
    assert v.out_until_ms == until and v.out_why is SitOut.RATE_LIMIT and b.fresh("p", scope)
    # Its answers' headers are its own path's limits, not the generation's headroom.
    b.observe(ups[0], scope, openai_headers(remaining=0))
    assert b.view(0, ups[0], scope, clock.now * 1000).requests_left == 0.0
    assert b.view(0, ups[0], MODEL, clock.now * 1000).requests_left is None


async def test_a_relayed_request_counts_against_the_deployments_configured_limits() -> None:
    """The operator's ``limits`` are the deployment's, one count for every path (an embedding
    finds the count the chat requests used up: test_pool_limits_redis.py)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members(", limits: {requests_per_minute: 2}")
    scope = relayed_scope(MODEL)
    a.sent(ups[0], MODEL, 10)
    a.sent(ups[0], scope, 10)
    await a.refresh("p", ups, MODEL)
    await a.refresh("p", ups, MODEL, scope=scope)
    for model in (MODEL, scope):
        v = a.view(0, ups[0], model, clock.now * 1000)
        assert v.requests_left == 0.0 and v.out_why is SitOut.HEADROOM


async def test_which_deployment_made_a_stored_object_is_remembered_for_the_providers_30_days() -> None:
    """OpenAI keeps a stored response 30 days (routing/stored.py): a chained turn a month old
    still goes where its previous response is; one older goes where the strategy picks."""
    from gateway.state.memory import MemoryStore
    from gateway.state.pools import PoolState

    now = [1_800_000_000.0]
    ps = PoolState(MemoryStore(lambda: now[0]), lambda: now[0], lambda: now[0])
    await ps.remember_stored("resp_1", "key-b")
    assert await ps.stored_on("resp_1") == "key-b" and await ps.stored_on("resp_2") is None
    now[0] += 30 * 24 * 3600 - 1
    assert await ps.stored_on("resp_1") == "key-b"
    now[0] += 2
    assert await ps.stored_on("resp_1") is None


MAPPED = ", model_map: {'gpt-*': gpt-4o}"  # docs/pools.md's relay maps a family to one model so
ALIASES = ("gpt-4o", "gpt-4o-2024-08-06")  # names a client sends, each sent upstream as gpt-4o


async def test_names_mapped_to_one_model_share_its_configured_limits_on_one_process() -> None:
    """A key's limits are the provider's for the model it is sent: kept by the client's name,
    a key mapping ``gpt-*`` to gpt-4o with ``requests_per_minute: 10`` took 20 calls in a
    minute for two names (measured, two replicas)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members(MAPPED + ", limits: {requests_per_minute: 4}")
    for name in ALIASES * 2:
        a.sent(ups[0], name, 10)
    await a.refresh("p", ups, ALIASES[0])
    for name in ALIASES:
        v = a.view(0, ups[0], name, clock.now * 1000)
        assert v.requests_left == 0.0 and v.out_why is SitOut.HEADROOM, name
    assert a.view(0, members(", limits: {requests_per_minute: 4}")[0], ALIASES[1],
                  clock.now * 1000).requests_left == 1.0  # unmapped, each name is a model of its own


async def test_names_mapped_to_one_model_share_its_count_sit_outs_and_headroom_across_replicas() -> None:
    clock = Clock()
    a, b, store = shared_replicas(clock)
    ups = members(MAPPED + ", limits: {requests_per_minute: 4}")
    taken = [await replica.take(ups[0], name, 10) is not None
             for replica, name in zip((a, b, a, b, a), ALIASES * 3, strict=False)]
    assert taken == [True, True, True, True, False]
    minute = int(T0 // 60)
    assert (await store.records_sync([f"n:a/gpt-4o#{minute}", f"n:a/gpt-4o-2024-08-06#{minute}"]))[0] == [
        {"n": 4, "k": 40, "e": 40}, {}]  # fmt: skip
    # A 429 for one name sits the key out for the other: the provider limited gpt-4o.
    until = round(clock.now * 1000) + 20_000
    await a.sit_out(ups[1], ALIASES[1], until, SitOut.RATE_LIMIT)
    await b.refresh("p", ups, ALIASES[0])
    v = b.view(1, ups[1], ALIASES[0], clock.now * 1000)
    assert v.out_until_ms == until and v.out_why is SitOut.RATE_LIMIT
    # A count_tokens 429 stays its path's, for either name.
    await a.sit_out(ups[2], relayed_scope(ALIASES[1]), until, SitOut.RATE_LIMIT)
    await b.refresh("p", ups, relayed_scope(ALIASES[0]))
    assert b.view(2, ups[2], relayed_scope(ALIASES[0]), clock.now * 1000).out_why is SitOut.RATE_LIMIT
    assert b.view(2, ups[2], ALIASES[0], clock.now * 1000).serves_at(clock.now * 1000)
    # Headroom read from one name's answer is the other's too.
    b.observe(ups[2], ALIASES[0], openai_headers(remaining=0))
    assert b.view(2, ups[2], ALIASES[1], clock.now * 1000).requests_left == 0.0


class LosingStore(SharedStore):
    """A shared store whose writes are lost while ``lost`` (Redis taken for down: the replica
    writes its own memory only; or a Redis restarted empty)."""

    lost = False

    async def records_sync(self, reads: Any, writes: Any = (), *a: Any, **kw: Any) -> Any:
        return await super().records_sync(reads, () if self.lost else writes, *a, **kw)

    async def records_least(self, key: str, tokens: float, until_ms: float, now_ms: float) -> tuple[float, float]:
        return (float(tokens), until_ms) if self.lost else await super().records_least(key, tokens, until_ms, now_ms)


async def test_a_sit_out_the_store_lost_is_written_back_not_forgotten() -> None:
    """Learnt while Redis did not answer, a 429's sit-out was read over with Redis's nothing
    once the replica rejoined, and the key called again inside its reset (measured)."""
    clock = Clock()
    store = LosingStore(clock)
    a, b = PoolState(store, clock, clock), PoolState(store, clock, clock)
    ups = members()
    until = round(clock.now * 1000) + 20_000
    store.lost = True
    await a.sit_out(ups[0], MODEL, until, SitOut.RATE_LIMIT)
    store.lost = False
    await a.refresh("p", ups, MODEL)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).out_until_ms == until  # still known here
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)  # not yet told
    await a.refresh("p", ups, MODEL)  # its next round trip writes it back
    await b.refresh("p", ups, MODEL)
    v = b.view(0, ups[0], MODEL, clock.now * 1000)
    assert v.out_until_ms == until and v.out_why is SitOut.RATE_LIMIT
    clock.now = until / 1000 + 0.5  # past its reset: nothing is written back
    await a.refresh("p", ups, MODEL)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).serves_at(clock.now * 1000)


def token_headers(remaining: int, limit: int = 1000, reset: str = "60s") -> CIMultiDict[str]:
    return CIMultiDict({"x-ratelimit-limit-tokens": str(limit), "x-ratelimit-remaining-tokens": str(remaining),
                        "x-ratelimit-reset-tokens": reset})  # fmt: skip


async def test_an_answers_usage_takes_the_place_of_its_estimate_in_the_count_once() -> None:
    """A send was counted as its bytes / 3.5, the prompt alone: the answer's usage (its prompt
    and its output) is what the window took. Counted once, and not off a reading of its own
    answer or a later one (the provider counted it there already)."""
    clock = Clock()
    a, _, _ = replicas(clock)
    ups = members()
    first = a.sent(ups[0], MODEL, 10)
    a.observe(ups[0], MODEL, token_headers(remaining=600), first)
    mark = a.sent(ups[0], MODEL, 20)  # after the reading: counted off it
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == (600 - 20) / 1000
    a.used(ups[0], MODEL, mark, 20, 320)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == (600 - 320) / 1000
    later = a.sent(ups[0], MODEL, 30)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == (600 - 320 - 30) / 1000
    a.used(ups[0], MODEL, first, 10, 50)  # the reading's own request: in the reading already
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == (600 - 320 - 30) / 1000
    a.observe(ups[0], MODEL, token_headers(remaining=200), later, True)  # its answer's reading
    a.used(ups[0], MODEL, later, 30, 90)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == 200 / 1000


async def test_an_answers_usage_counts_in_the_configured_limits_and_on_the_other_replicas() -> None:
    """An Azure deployment's configured tokens per minute (its answers state no limit), and
    the count every replica reads: the output of an answer counts there too; a usage below
    the estimate lowers it, never below nothing."""
    clock = Clock()
    alone, _, _ = replicas(clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    mark = alone.sent(ups[0], MODEL, 20)
    alone.used(ups[0], MODEL, mark, 20, 700)
    assert alone.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.3)
    mark = alone.sent(ups[0], MODEL, 500)
    alone.used(ups[0], MODEL, mark, 500, 100)
    assert alone.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.2)
    a, b, _ = shared_replicas(clock)
    plain = members()
    b.observe(plain[0], MODEL, token_headers(remaining=600))
    await b.refresh("p", plain, MODEL)
    clock.now += 0.5
    mark = a.sent(plain[0], MODEL, 20)
    a.used(plain[0], MODEL, mark, 20, 320)
    await a.refresh("p", plain, MODEL)
    await b.refresh("p", plain, MODEL)
    # (What refilled in the half second comes back too: the bucket is full again in 60 s.)
    assert b.view(0, plain[0], MODEL, clock.now * 1000).tokens_left == pytest.approx((600 - 320) / 1000, abs=0.004)


async def test_a_size_refused_as_over_a_deployments_tokens_per_minute_is_known_to_every_replica() -> None:
    """One replica's refused call marks the size for the others at their next read; the smallest
    size refused is kept, for OVER_WINDOW_MS, and an answer of one that large ends it."""
    clock = Clock()
    a, b, _ = shared_replicas(clock)
    ups = members()
    now = clock.now * 1000
    await a.over_window(ups[0], MODEL, 40_000)
    await a.over_window(ups[0], MODEL, 60_000)  # larger: the smaller stays the mark
    await b.refresh("p", ups, MODEL)
    assert b.too_big(ups[0], MODEL, 40_000, now) and not b.too_big(ups[0], MODEL, 39_999, now)
    assert not b.too_big(ups[1], MODEL, 90_000, now) and not b.too_big(ups[0], "another-model", 90_000, now)
    assert b.view(0, ups[0], MODEL, now).serves_at(now)  # never a sit-out: smaller requests go there
    clock.now += pools.OVER_WINDOW_MS / 1000
    assert not b.too_big(ups[0], MODEL, 90_000, clock.now * 1000)
    clock.now = T0
    await b.fits_window(ups[0], MODEL)
    await a.refresh("p", ups, MODEL)
    assert not a.too_big(ups[0], MODEL, 90_000, now)


async def test_a_usage_below_the_estimate_lowers_the_count_after_the_estimate_went_to_the_store() -> None:
    """The estimate leaves this process with the next read (or flush), and a ``take`` puts it in
    the store at once: a usage below it was then lost (the difference was kept at zero at
    least), and an estimate far above the usage (bytes / 3.5 of a base64 image) held the
    minute's count up to its end. The signed difference goes to the store."""
    clock = Clock()
    alone, _, _ = replicas(clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    mark = alone.sent(ups[0], MODEL, 500)
    await alone.refresh("p", ups, MODEL)  # a read while the answer is awaited
    alone.used(ups[0], MODEL, mark, 500, 100)
    assert alone.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.9)
    await alone.refresh("p", ups, MODEL)
    assert alone.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.9)
    a, b, _ = shared_replicas(clock)
    took = await a.take(ups[0], MODEL, 500)
    assert a.takes(ups[0], MODEL) and took
    mark = a.sent(ups[0], MODEL, 500, took)
    a.used(ups[0], MODEL, mark, 500, 100)
    await a.refresh("p", ups, MODEL)
    await b.refresh("p", ups, MODEL)
    for replica in (a, b):
        assert replica.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.9)


async def test_the_smallest_size_refused_over_a_window_is_kept_whichever_replica_refused_it() -> None:
    """Taken from its own last read and written over, a replica that had not read another's
    smaller refusal yet replaced it with its own larger one: the store keeps the least."""
    clock = Clock()
    a, b, _ = shared_replicas(clock)
    ups = members()
    await a.over_window(ups[0], MODEL, 40_000)
    clock.now += 10
    await b.over_window(ups[0], MODEL, 60_000)  # b had not read a's yet
    now = clock.now * 1000
    assert b.too_big(ups[0], MODEL, 50_000, now)  # told by the store's answer, no read needed
    for replica in (a, b):
        await replica.refresh("p", ups, MODEL)
        assert replica.too_big(ups[0], MODEL, 50_000, now) and not replica.too_big(ups[0], MODEL, 39_999, now)
    # The end is the later refusal's: the deployment refused within the last 5 minutes.
    clock.now += OVER_WINDOW_MS / 1000 - 5
    await a.refresh("p", ups, MODEL)
    assert a.too_big(ups[0], MODEL, 50_000, clock.now * 1000)
    clock.now += 6  # that memory ended: the next refusal's size is kept, larger or not
    await b.over_window(ups[0], MODEL, 60_000)
    await a.refresh("p", ups, MODEL)
    now = clock.now * 1000
    assert not a.too_big(ups[0], MODEL, 50_000, now) and a.too_big(ups[0], MODEL, 60_000, now)


async def test_a_size_refused_while_the_store_was_away_is_written_back() -> None:
    """As a sit-out: read over with the store's nothing at the rejoin, the refused size was
    forgotten and every other replica's next large request paid the refused call again. Written
    back as a refusal is, a smaller size another replica wrote meanwhile stays."""
    clock = Clock()
    store = LosingStore(clock)
    a, b = PoolState(store, clock, clock), PoolState(store, clock, clock)
    ups = members()
    store.lost = True
    await a.over_window(ups[0], MODEL, 40_000)
    await a.over_window(ups[1], MODEL, 40_000)
    store.lost = False
    await b.over_window(ups[1], MODEL, 30_000)  # the store's, smaller: it stays
    await a.refresh("p", ups, MODEL)  # the rejoin's read writes them back
    now = clock.now * 1000
    assert a.too_big(ups[0], MODEL, 50_000, now) and a.too_big(ups[1], MODEL, 35_000, now)
    await b.refresh("p", ups, MODEL)
    assert b.too_big(ups[0], MODEL, 40_000, now) and not b.too_big(ups[0], MODEL, 39_999, now)
    assert b.too_big(ups[1], MODEL, 30_000, now)
    syncs = store.syncs
    await a.refresh("p", ups, MODEL)  # written once: the store holds them now
    assert store.syncs == syncs + 1 and a.too_big(ups[0], MODEL, 40_000, now)
    clock.now += OVER_WINDOW_MS / 1000 + 1  # past its end: nothing is written back
    await a.refresh("p", ups, MODEL)
    assert not a.too_big(ups[0], MODEL, 1_000_000, clock.now * 1000)


class Outage(SharedStore):
    """A shared store whose epoch moves on as Redis's does: served from memory, taken off or
    back, found to have lost what it held (``StateStore.epoch``)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.epoch = 0
        self.during_take = False  # the next take is served from memory (its epoch moves)

    async def records_take(self, *a: Any, **kw: Any) -> Any:
        got = await super().records_take(*a, **kw)
        if self.during_take:
            self.epoch += 1
        return got


async def _count_after(store: Outage, lose: str) -> float:
    """The store's tokens this minute after one call of 800 used 100, ``lose`` happening
    between its send and its answer (or during its take)."""
    clock = Clock()
    a = PoolState(store, clock, clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    taken = not lose.startswith("pending")
    if taken:
        store.during_take = lose == "take"
        took = await a.take(ups[0], MODEL, 800)
        assert took is not None and (took.epoch is None) == (lose == "take")
        mark = a.sent(ups[0], MODEL, 800, took)
    else:
        mark = a.sent(ups[0], MODEL, 800)
        if lose == "pending, flushed":
            await a.refresh("p", ups, MODEL)
    if lose in ("answer", "pending, flushed"):
        store.epoch += 1
    a.used(ups[0], MODEL, mark, 800, 100)
    await a.refresh("p", ups, MODEL)
    (rec,), _, _ = await store.records_sync([f"n:a/{MODEL}#{int(T0 // 60)}"])
    return rec.get("k", 0.0)


@pytest.mark.parametrize(("lose", "count"), [
    ("nothing", 100),  # taken in the store, which kept it: lowered by the difference
    ("take", 800),  # taken while the store served from memory: it may never have held the 800
    ("answer", 800),  # the store lost it (or was left) while the answer came
    ("pending", 100),  # not yet sent to the store: the difference comes off it here
    ("pending, flushed", 800),  # flushed to the store, which lost it since
])  # fmt: skip
async def test_a_usage_below_the_estimate_lowers_the_count_only_where_the_estimate_is_known_to_be(
        lose: str, count: float) -> None:  # fmt: skip
    """Lowered wherever it was, a count that had never held the estimate (Redis restarted empty
    while the answer streamed, or taken for down at the take) went below what the other
    replicas had taken: 15,000 tokens admitted in a 10,000-a-minute minute (review). Where the
    estimate may not be, the count is held high (the cautious side)."""
    assert await _count_after(Outage(Clock()), lose) == count


async def test_a_lowering_waiting_for_the_next_read_is_dropped_when_the_store_moves_on_first() -> None:
    clock = Clock()
    store = Outage(clock)
    a = PoolState(store, clock, clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    took = await a.take(ups[0], MODEL, 800)
    assert took is not None
    a.used(ups[0], MODEL, a.sent(ups[0], MODEL, 800, took), 800, 100)
    assert a.view(0, ups[0], MODEL, clock.now * 1000).tokens_left == pytest.approx(0.9)  # counted here at once
    store.epoch += 1  # Redis lost before the difference went out
    await a.refresh("p", ups, MODEL)
    (rec,), _, _ = await store.records_sync([f"n:a/{MODEL}#{int(T0 // 60)}"])
    assert rec["k"] == 800


async def test_the_memory_store_keeps_a_count_at_zero_at_least() -> None:
    """As RECORDS_ADD keeps Redis's: a correction larger than the count (the count that held
    the estimate lost meanwhile) leaves nothing counted, not credit for the rest of the minute."""
    store = MemoryStore(Clock())
    await store.records_sync((), (), [("n:a/m#1", {"n": 1, "k": 500}, 60.0)])
    await store.records_sync((), (), [("n:a/m#1", {"k": -800}, 60.0)])
    assert (await store.records_sync(["n:a/m#1"]))[0] == [{"n": 1, "k": 0}]


@pytest.mark.parametrize(("n", "k", "credit", "tokens", "taken"), [
    (3, 800, -700, 500, True),  # 100 counted once the credit is in: 600 fit
    (3, 800, -100, 500, False),  # 700 + 500 do not
    (3, 800, 0, 100, False),  # nothing to give back: refused for what it is
    (3, 800, 200, 100, False),  # (a usage above its estimate adds, never helps)
    (4, 100, -50, 10, False),  # refused for its requests, which no credit gives back
    (3, 800, -900, 1_000, True),  # a count at nothing takes any size (as RECORDS_TAKE does)
])  # fmt: skip
def test_a_refused_take_is_asked_again_only_when_the_credit_not_yet_sent_makes_room(
        n: int, k: int, credit: int, tokens: int, taken: bool) -> None:  # fmt: skip
    limits = members(", limits: {requests_per_minute: 4, tokens_per_minute: 1000}")[0].limits
    assert pools.taken_with(n, k, credit, limits, tokens) is taken


@pytest.mark.parametrize(("size", "taken", "count"), [
    (500, True, 600),  # 100 counted once the credit is in: room for 500
    (950, False, 800),  # no room even then: refused, the credit left for the next flush
])  # fmt: skip
async def test_a_take_refused_for_a_credit_not_yet_sent_sends_it_and_asks_once_more(
        size: int, taken: bool, count: float) -> None:  # fmt: skip
    """Refused at 800 of 1,000 while its answer's 100 waited here for the next flush, the
    deployment sat out the rest of the minute (162 refusals at 8,800 of 10,000, review). The
    credit goes out at once and the take is asked again, once: it passes if the room is there."""
    clock = Clock()
    store = Outage(clock)
    a = PoolState(store, clock, clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    took = await a.take(ups[0], MODEL, 800)
    assert took is not None
    a.used(ups[0], MODEL, a.sent(ups[0], MODEL, 800, took), 800, 100)
    assert (await a.take(ups[0], MODEL, size) is not None) is taken
    (rec,), _, _ = await store.records_sync([f"n:a/{MODEL}#{int(T0 // 60)}"])
    assert rec["k"] == count
    now_ms = clock.now * 1000
    assert a.view(0, ups[0], MODEL, now_ms).serves_at(now_ms) is taken  # refused: sits out


async def test_a_count_full_of_estimates_in_flight_is_settling_on_one_process_memory() -> None:
    """The memory backend counts its own sends: four calls of 250 estimated tokens in flight fill a
    deployment's 1,000 a minute. Its view says so (``settling``: room once they are answered at
    less), and an answer wakes a request that waits for it (``answered``); taken for the
    minute's end, a burst waited 20 s for room its answers gave back in milliseconds (review).
    Answered at their estimates, the count is used: the minute's end, as before."""
    clock = Clock()
    alone, _, _ = replicas(clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    now_ms = clock.now * 1000
    marks = [alone.sent(ups[0], MODEL, 250) for _ in range(4)]
    v = alone.view(0, ups[0], MODEL, now_ms, (200, 0))
    assert not v.serves_at(now_ms) and v.settling and v.out_until_ms == (int(T0 // 60) + 1) * 60_000
    woken = alone.answered(["a"])
    assert not woken[0].done()
    alone.used(ups[0], MODEL, marks[0], 250, 19)
    assert woken[0].done()
    assert alone.view(0, ups[0], MODEL, now_ms, (200, 0)).serves_at(now_ms)  # 769 counted
    for mark in marks[1:]:
        alone.used(ups[0], MODEL, mark, 250, 250)  # at their estimates: no room comes back
    alone.sent(ups[0], MODEL, 200)
    v = alone.view(0, ups[0], MODEL, now_ms, (200, 0))
    assert not v.serves_at(now_ms) and v.settling  # (the 200 just sent is in flight)
    alone.release("a")  # none in flight here any more (its answer stated no usage)
    v = alone.view(0, ups[0], MODEL, now_ms, (200, 0))
    assert not v.serves_at(now_ms) and not v.settling  # 969 used: the minute's end


async def test_a_call_over_without_a_usage_is_in_flight_no_more() -> None:
    clock = Clock()
    alone, _, _ = replicas(clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    now_ms = clock.now * 1000
    marks = [alone.sent(ups[0], MODEL, 500) for _ in range(2)]
    assert alone.view(0, ups[0], MODEL, now_ms, (200, 0)).settling
    alone.landed(ups[0], MODEL, marks[0])  # a failure, an answer without usage: its estimate stays
    alone.landed(ups[0], MODEL, marks[0])  # (once)
    assert alone.view(0, ups[0], MODEL, now_ms, (200, 0)).settling  # the other is still in flight
    alone.refused(ups[0], MODEL, marks[1], 500)  # a 429: over too
    assert not alone.view(0, ups[0], MODEL, now_ms, (200, 0)).settling


async def test_a_take_refused_for_estimates_in_flight_serves_once_their_answers_reach_the_store() -> None:
    """Redis's count keeps the estimates of the takes in flight (``e``) beside its tokens: a take
    refused on B for A's calls in flight is ``settling``; A's answers at 10 tokens take their
    estimates off both, and B serves at its next read. A count used by usages is not settling."""
    clock = Clock()
    a, b, store = shared_replicas(clock)
    ups = members(", limits: {tokens_per_minute: 1000}")
    now_ms = clock.now * 1000
    marks = []
    for _ in range(2):
        took = await a.take(ups[0], MODEL, 400)
        assert took is not None
        marks.append(a.sent(ups[0], MODEL, 400, took))
    took = await b.take(ups[0], MODEL, 200)
    assert took is not None
    b_marks = [b.sent(ups[0], MODEL, 200, took)]
    assert await b.take(ups[0], MODEL, 400) is None
    v = b.view(0, ups[0], MODEL, now_ms, (400, 0))
    assert not v.serves_at(now_ms) and v.settling and b.settling(ups[0], MODEL, 400)
    for mark in marks:
        a.used(ups[0], MODEL, mark, 400, 10)
    await a.refresh("p", ups, MODEL)  # A's usages and answered estimates go to the store together
    (rec,), _, _ = await store.records_sync([f"n:a/{MODEL}#{int(T0 // 60)}"])
    assert (rec["k"], rec["e"]) == (220, 200)  # B's 200 still in flight
    await b.refresh("p", ups, MODEL)
    assert b.view(0, ups[0], MODEL, now_ms, (400, 0)).serves_at(now_ms)
    took = await b.take(ups[0], MODEL, 400)
    assert took is not None
    b_marks.append(b.sent(ups[0], MODEL, 400, took))
    # Used by usages: B's calls answered at their estimates, A's next ones above theirs; nothing
    # in flight would give room back.
    for mark, estimate in zip(b_marks, (200, 400), strict=True):
        b.used(ups[0], MODEL, mark, estimate, estimate)
    await b.refresh("p", ups, MODEL)
    for _ in range(2):
        took = await a.take(ups[0], MODEL, 150)
        assert took is not None
        a.used(ups[0], MODEL, a.sent(ups[0], MODEL, 150, took), 150, 180)
    await a.refresh("p", ups, MODEL)
    assert await b.take(ups[0], MODEL, 400) is None
    v = b.view(0, ups[0], MODEL, now_ms, (400, 0))
    assert not v.serves_at(now_ms) and not v.settling and not b.settling(ups[0], MODEL, 400)
