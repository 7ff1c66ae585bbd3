"""Failing over like a careful client (issue #29): a silent upstream is left after one
timeout while a fallback remains, and the stock ``openai`` SDK sees one complete answer.

Upstream calls are counted per upstream; nothing here asserts a duration.
"""

from __future__ import annotations

import logging
import random
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import openai
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from gateway.config import parse_config
from gateway.server import make_runner
from tests.fakeupstream import FakeUpstream, Hang, Reply, Stream, chunk
from tests.integration.conftest import Gateway

UNAVAILABLE = Reply(503, {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}})
PROMPT = [{"role": "user", "content": "hi"}]

MakePair = Callable[..., Awaitable[tuple[Gateway, FakeUpstream, FakeUpstream]]]


@pytest.fixture
async def make_pair(make_gateway) -> AsyncIterator[MakePair]:  # type: ignore[no-untyped-def]
    fakes: list[FakeUpstream] = []

    async def make(extra: str = "", primary_extra: str = "", backup_extra: str = "",
                   primary_url: str | None = None) -> tuple[Gateway, FakeUpstream, FakeUpstream]:
        primary = await FakeUpstream().start()
        backup = await FakeUpstream().start()
        fakes.extend((primary, backup))
        gw = await make_gateway(extra, fake=primary, upstreams=(
            f"  - {{name: primary, base_url: '{primary_url or primary.url}', fallbacks: [backup]{primary_extra}}}\n"
            f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here']{backup_extra}}}\n"))
        return gw, primary, backup

    yield make
    for fake in fakes:
        await fake.close()


async def _streamed_text(gw: Gateway) -> tuple[str, dict[str, str]]:
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")  # stock settings: max_retries=2
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=PROMPT, stream=True)  # type: ignore[arg-type]
        text = "".join([c.choices[0].delta.content or "" async for c in raw.parse() if c.choices])
        return text, dict(raw.headers)
    finally:
        await client.close()


@pytest.mark.stall_timeouts
async def test_a_silent_primary_is_left_after_one_first_byte_timeout(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(Hang(30), Hang(30))
    text, headers = await _streamed_text(gw)
    assert text == "Hello from fake."
    assert headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
    # One first_byte_s on the silent primary, not two: no retry while a fallback is left.
    assert len(primary.chat_requests()) == 1 and len(backup.chat_requests()) == 1
    assert headers["x-llm-attempts"] == "2"


async def test_a_5xx_still_gets_its_retry_on_the_primary_before_the_fallback(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(UNAVAILABLE, UNAVAILABLE)
    text, headers = await _streamed_text(gw)
    assert text == "Hello from fake." and headers["x-llm-upstream"] == "backup"
    assert len(primary.chat_requests()) == 2 and len(backup.chat_requests()) == 1


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A loopback port whose accept queue is full: the kernel drops further SYNs, so a
    connect times out exactly as against a host that has gone silent."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(c)
    try:
        yield port
    finally:
        for c in fillers:
            c.close()
        server.close()


async def test_a_primary_that_never_accepts_is_left_after_one_connect_timeout(
    make_pair: MakePair, unanswered_port: int
) -> None:
    gw, _, backup = await make_pair(primary_url=f"http://127.0.0.1:{unanswered_port}/v1")
    text, headers = await _streamed_text(gw)
    assert text == "Hello from fake." and headers["x-llm-upstream"] == "backup"
    assert headers["x-llm-attempts"] == "2" and len(backup.chat_requests()) == 1
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary",
                     outcome="provider_unavailable") == 1


# A head at once, then only keep-alive comments for ~9 s before the first token: no idle
# timeout ever fires, only a limit on the time to the first visible event can.
SLOW_FIRST_TOKEN = Stream([b": ping\n\n"] * 30 + [chunk({"role": "assistant", "content": "late"}),
                                                  chunk({}, finish="stop")], delay_s=0.3)


async def test_a_slow_first_token_falls_over_before_anything_reached_the_client(
    make_pair: MakePair, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.decisions")
    gw, primary, backup = await make_pair(primary_extra=", first_token_s: 0.5")
    primary.script(SLOW_FIRST_TOKEN, SLOW_FIRST_TOKEN)
    text, headers = await _streamed_text(gw)
    assert text == "Hello from fake."  # the backup's answer alone: nothing of the primary's
    assert headers["x-llm-upstream"] == "backup" and headers["x-llm-attempts"] == "2"
    assert len(primary.chat_requests()) == 1 and len(backup.chat_requests()) == 1
    assert gw.metric("llm_gateway_upstream_timeouts_total", upstream="primary", kind="first_token_timeout") == 1
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary",
                     outcome="provider_unavailable") == 1
    logged = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "first_token_timeout"]
    assert len(logged) == 1 and logged[0]["upstream"] == "primary" and "first_token_s" in logged[0]["reason"]


async def test_without_a_fallback_a_slow_first_token_is_retried_on_the_same_upstream(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway("", ", first_token_s: 0.5")
    gw.fake.script(SLOW_FIRST_TOKEN)
    text, headers = await _streamed_text(gw)
    assert text == "Hello from fake." and headers["x-llm-attempts"] == "2"
    assert len(gw.fake.chat_requests()) == 2


async def test_the_limit_ends_at_the_first_visible_event(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair(primary_extra=", first_token_s: 1.0")
    words = [chunk({"role": "assistant", "content": w}) for w in "a slow but steady answer".split()]
    # The first word comes in time; the whole answer takes several times the limit.
    primary.script(Stream([*words, *words, chunk({}, finish="stop")], delay_s=0.2))
    text, headers = await _streamed_text(gw)
    assert text == "aslowbutsteadyanswer" * 2 and headers["x-llm-upstream"] == "primary"
    assert backup.chat_requests() == []


def test_first_token_s_is_on_by_default_and_per_upstream() -> None:
    cfg = parse_config("upstreams: [{name: a, base_url: 'http://x/v1'}, {name: b, base_url: 'http://y/v1', "
                       "first_token_s: 20}]\n", env={})
    assert cfg.timeouts.first_token_s == cfg.timeouts.first_byte_s == 300
    assert cfg.upstreams[0].first_token_s is None and cfg.upstreams[1].first_token_s == 20
    off = parse_config("upstreams: [{name: a, base_url: 'http://x/v1'}]\ntimeouts: {first_token_s: null}\n", env={})
    assert off.timeouts.first_token_s is None


class Clock:
    """Wall-clock time for the circuits, moved by the test: one request per simulated second."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def __call__(self) -> float:
        return self.t


async def _gateway_on(clock: Clock, primary: FakeUpstream, backup: FakeUpstream) -> AsyncIterator[Gateway]:
    cfg = parse_config(
        "upstreams:\n"
        f"  - {{name: primary, base_url: '{primary.url}', fallbacks: [backup]}}\n"
        f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here']}}\n"
        "loop_breaker: {enabled: false}\n", env={})  # the defaults otherwise (docs/reference/configuration.md): threshold 5, open_s 30, interval 5
    registry = CollectorRegistry()

    async def no_sleep(_s: float) -> None:
        return None

    app = create_app(cfg, registry=registry, sleep=no_sleep, wall=clock, rand=random.Random(29).random)
    runner = make_runner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    async with aiohttp.ClientSession() as session:
        yield Gateway(f"http://127.0.0.1:{runner.addresses[0][1]}", primary, session, registry, app)
    await runner.cleanup()


@pytest.mark.parametrize("outage_s", [40, 60, 100])
async def test_a_recovered_primary_is_used_again_within_seconds_under_steady_traffic(outage_s: int) -> None:
    clock = Clock()
    start = clock.t
    async with FakeUpstream() as primary, FakeUpstream() as backup:
        primary.script(*[lambda _p: UNAVAILABLE if clock.t < start + outage_s else None] * 1000)
        gateways = _gateway_on(clock, primary, backup)
        gw = await anext(gateways)
        served_by: list[tuple[float, str, int]] = []  # (second, upstream, primary calls so far)
        for second in range(outage_s + 30):
            clock.t = start + second
            status, headers, _ = await gw.chat()
            assert status == 200  # every request answered: by the backup during the outage
            served_by.append((second, headers["x-llm-upstream"], len(primary.chat_requests())))
        await anext(gateways, None)
    back = next(s for s, up, _ in served_by if up == "primary" and s >= outage_s)
    assert back - outage_s <= 10  # the goal: back on the primary within 10 s of its recovery
    assert all(up == "primary" for s, up, _ in served_by if s >= back)  # and it stays there
    # The cost while the fallback carried the traffic: after the circuit opened (5 failed
    # requests, 2 calls each), one probe per period of at least 0.8 x 5 s.
    calls_in_outage = next(n for s, _, n in served_by if s == outage_s - 1)
    assert calls_in_outage <= 5 * 2 + outage_s / 4


async def test_a_stream_that_shows_nothing_does_not_outlive_the_deadline(make_gateway) -> None:  # type: ignore[no-untyped-def]
    gw = await make_gateway("retry: {deadline_s: 1.5}\n")  # first_token_s at its default, 300 s
    gw.fake.script(SLOW_FIRST_TOKEN)  # pings for ~9 s, then an answer
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True, "messages": PROMPT})
    assert status == 504 and b"upstream_timeout" in body and b"late" not in body
    assert headers["x-llm-error-type"] == "provider_unavailable" and len(gw.fake.chat_requests()) == 1
    assert gw.metric("llm_gateway_upstream_timeouts_total", upstream="primary", kind="first_token_timeout") == 1


def _asked(n: int) -> dict[str, object]:
    return {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"request {n}"}]}


def _fallbacks(gw: Gateway, error_type: str, frm: str = "primary") -> float:
    return gw.metric("llm_gateway_fallbacks_total", upstream=frm, fallback="backup", error_type=error_type)


async def test_traffic_steered_past_an_open_circuit_counts_as_a_fallback(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair("circuit_breaker: {failure_threshold: 1, open_s: 60}\n"
                                          "fallback: {when: [rate_limit, budget]}\n")  # fmt: skip
    primary.script(UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE, UNAVAILABLE)
    assert (await gw.chat(_asked(0)))[0] == 503  # not a class that falls over here: the circuit opens
    for n in (1, 2):
        status, headers, _ = await gw.chat(_asked(n))
        assert status == 200 and headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
    assert _fallbacks(gw, "provider_unavailable") == 2


async def test_traffic_steered_past_a_known_rate_limit_reset_counts_as_a_fallback(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair()
    primary.script(Reply(429, {"error": {"message": "Rate limit reached", "type": "requests",
                                         "code": "rate_limit_exceeded"}}, {"retry-after": "120"}))  # fmt: skip
    await gw.chat(_asked(0))  # falls over, and the reset is remembered
    assert _fallbacks(gw, "rate_limit") == 1
    status, headers, _ = await gw.chat(_asked(1))
    assert status == 200 and headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
    assert len(primary.chat_requests()) == 1 and _fallbacks(gw, "rate_limit") == 2


async def test_a_pool_passed_over_because_no_deployment_may_serve_counts_as_a_fallback(make_gateway) -> None:  # type: ignore[no-untyped-def]
    a, backup = await FakeUpstream().start(), await FakeUpstream().start()
    try:
        a.always = Reply(429, {"error": {"message": "Rate limit reached for gpt-4o-mini on requests per min (RPM)",
                                         "type": "requests", "code": "rate_limit_exceeded"}}, {"retry-after": "600"})
        gw = await make_gateway(
            "pools:\n  - {name: gpt, models: ['gpt-*'], deployments: [a], fallbacks: [backup]}\n", fake=a, upstreams=(
                f"  - {{name: a, base_url: '{a.url}', api_key: ka}}\n"
                f"  - {{name: backup, base_url: '{backup.url}', models: ['never-routed-here']}}\n"))  # fmt: skip
        await gw.chat(_asked(0))  # the key sits out until its reset
        status, headers, _ = await gw.chat(_asked(1))
        assert status == 200 and headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
        assert len(a.chat_requests()) == 1 and _fallbacks(gw, "rate_limit", frm="gpt") == 2
    finally:
        await a.close()
        await backup.close()


async def test_a_fallback_without_the_primarys_output_cap_is_not_said_to_be_capped(make_pair: MakePair) -> None:
    gw, primary, backup = await make_pair(primary_extra=", max_output_tokens: 4096")
    primary.script(UNAVAILABLE, UNAVAILABLE)
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "max_tokens": 30000, "messages": PROMPT})
    assert status == 200 and headers["x-llm-upstream"] == "backup" and "x-llm-output-capped" not in headers
    assert [r.json()["max_tokens"] for r in primary.chat_requests()] == [4096, 4096]
    assert backup.chat_requests()[0].json()["max_tokens"] == 30000


async def test_a_request_sent_again_without_a_refused_parameter_still_fails_over(make_pair: MakePair) -> None:
    """The primary refuses a parameter (left out and sent again, param_fix.py), then is
    overloaded: the fixed request still moves to the fallback after the primary's one retry,
    as any request would, instead of spending every retry there and answering 503."""
    gw, primary, backup = await make_pair()
    primary.refused_params = frozenset({"reasoning_effort"})
    primary.always = UNAVAILABLE
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")  # stock settings
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=PROMPT, reasoning_effort="low")  # type: ignore[arg-type]
    finally:
        await client.close()
    assert raw.parse().choices[0].message.content
    headers = raw.headers
    assert headers["x-llm-upstream"] == "backup" and headers["x-llm-fallbacks"] == "1"
    assert headers["x-llm-params-dropped"] == "reasoning_effort"
    # The refusal, the fixed request and its one retry (fallback.retries_per_upstream), then the backup.
    assert len(primary.chat_requests()) == 3 and len(backup.chat_requests()) == 1
    # What the primary refused is the primary's: the backup is asked as the client asked.
    assert backup.chat_requests()[0].json()["reasoning_effort"] == "low"
