"""The app in-process on loopback, in front of the scriptable fake upstream.

Sleeps are recorded instead of slept, so retry waits are asserted, not waited out;
timeouts (first byte, idle) are real but configured short.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import parse_config
from gateway.server import make_runner
from tests.capture_upstream import Capture
from tests.fakeupstream import FakeUpstream


@dataclass
class Gateway:
    base: str
    fake: FakeUpstream
    session: aiohttp.ClientSession
    registry: CollectorRegistry
    app: web.Application
    slept: list[float] = field(default_factory=list)

    async def chat(self, payload: Any = None, *, data: bytes | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        if payload is None and data is None:
            payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
        kw: dict[str, Any] = {"json": payload} if data is None else {"data": data}
        async with self.session.post(self.base + "/v1/chat/completions", headers=headers, **kw) as r:
            return r.status, r.headers, await r.read()

    async def messages(self, payload: Any = None, *, data: bytes | None = None, query: str = "",
                       headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        if payload is None and data is None:
            payload = {"model": "claude-sonnet-4-5", "max_tokens": 1024,
                       "messages": [{"role": "user", "content": "hi"}]}
        kw: dict[str, Any] = {"json": payload} if data is None else {"data": data}
        hdrs = {"anthropic-version": "2023-06-01", **(headers or {})}
        async with self.session.post(self.base + "/v1/messages" + query, headers=hdrs, **kw) as r:
            return r.status, r.headers, await r.read()

    async def responses(self, payload: Any = None, *, data: bytes | None = None,
                        headers: dict[str, str] | None = None) -> tuple[int, Any, bytes]:
        if payload is None and data is None:
            payload = {"model": "gpt-5-codex", "input": "hi"}
        kw: dict[str, Any] = {"json": payload} if data is None else {"data": data}
        async with self.session.post(self.base + "/v1/responses", headers=headers, **kw) as r:
            return r.status, r.headers, await r.read()

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, labels) or 0.0

    async def scraped(self, name: str) -> dict[tuple[tuple[str, str], ...], float]:
        """Every sample of ``name`` as ``GET /metrics`` shows it now: sorted labels -> value."""
        async with self.session.get(self.base + "/metrics") as r:
            text = (await r.read()).decode()
        return {tuple(sorted(s.labels.items())): s.value
                for family in text_string_to_metric_families(text) for s in family.samples if s.name == name}


MakeGateway = Callable[..., Awaitable[Gateway]]


async def eventually(check: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Until ``check()`` holds, polled: for what the gateway finishes after its answer is out
    (a metric, a settle, a sender closed), which no event tells a test of. A fixed sleep
    guessed how long that takes, and a loaded machine could take longer."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.01)


async def same_minute(margin_s: float = 5.0) -> None:
    """Not across a minute's end: limits per minute are per calendar minute, and a test that
    counts a minute's requests or tokens saw a new minute's empty count if one ended in the
    middle of it. With less than ``margin_s`` of this minute left, the next one is waited for."""
    if time.time() % 60 > 60 - margin_s:
        await asyncio.sleep(60 - time.time() % 60 + 0.1)


# Tests of stalls (marked ``stall_timeouts``) find a silent upstream or client out after 1 s so
# they run fast. Every other test waits 10 s: on a loaded CI host an in-process fake's answer
# took over a second once, and a plain request was taken for a stall and sent to a fallback.
STALL_TIMEOUTS = "{connect_s: 2, first_byte_s: 1.0, idle_s: 1.0}"
PATIENT_TIMEOUTS = "{connect_s: 2, first_byte_s: 10.0, idle_s: 10.0}"


@pytest.fixture
async def make_gateway(request: pytest.FixtureRequest) -> AsyncIterator[MakeGateway]:
    cleanups: list[Callable[[], Awaitable[None]]] = []
    default_timeouts = STALL_TIMEOUTS if request.node.get_closest_marker("stall_timeouts") else PATIENT_TIMEOUTS

    async def make(extra_yaml: str = "", upstream_yaml: str = "", *, fake: FakeUpstream | None = None,
                   real_sleep: bool = False, upstreams: str | None = None,
                   timeouts: str | None = None,
                   wall: Callable[[], float] = time.time,
                   monotonic: Callable[[], float] = time.monotonic,
                   rand: Callable[[], float] = random.random) -> Gateway:
        timeouts = timeouts or default_timeouts
        if fake is None:
            fake = await FakeUpstream().start()
            cleanups.append(fake.close)
        if upstreams is None:
            upstreams = f"  - {{name: primary, base_url: '{fake.url}'{upstream_yaml}}}\n"
        text = (
            "upstreams:\n" + upstreams +
            f"timeouts: {timeouts}\n" + extra_yaml
        )
        if "loop_breaker:" not in text:
            # These tests resend identical requests to see each feature afresh; the loop
            # breaker, which answers such repeats from memory, has its own tests.
            text += "\nloop_breaker: {enabled: false}\n"
        cfg = parse_config(text, env={})
        registry = CollectorRegistry()
        slept: list[float] = []

        async def record_sleep(s: float) -> None:
            slept.append(s)

        app = create_app(cfg, registry=registry, sleep=asyncio.sleep if real_sleep else record_sleep, wall=wall,
                         monotonic=monotonic, rand=rand)
        runner = make_runner(app, shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        session = aiohttp.ClientSession(auto_decompress=False)
        cleanups.append(runner.cleanup)
        cleanups.append(session.close)
        port = runner.addresses[0][1]
        return Gateway(f"http://127.0.0.1:{port}", fake, session, registry, app, slept)

    yield make
    for c in reversed(cleanups):
        await c()


@pytest.fixture
async def capture() -> AsyncIterator[Capture]:
    """An upstream that records each request's head as it came on the wire."""
    upstream = await Capture().start()
    yield upstream
    await upstream.close()
