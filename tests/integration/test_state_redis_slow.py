"""A slow Redis, through a gateway: a real redis-server behind a proxy that delays each of
its answers (the audit of Redis measured every request at ~0.41 s behind a 0.2 s delay, 1.6-1.8 s
behind 0.8 s, with no fallback counted and no log line). A replica now waits on a Redis slower
than ``state.timeout_ms`` about twice that once, then serves from its own memory, counted and
said, until Redis answers in time again; what it spent meanwhile is added to Redis then."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest

from gateway.live import LIVE
from tests.integration.conftest import MakeGateway
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

KEY = {"Authorization": "Bearer gk-ci"}


class DelayProxy:
    """Loopback TCP to the Redis port; each chunk Redis sends is passed on ``delay_s`` after it
    came (what the audit's slowproxy.py did), its order kept."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.delay_s = 0.0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.target_port)
            await asyncio.gather(self._pipe(client_r, server_w, slow=False), self._pipe(server_r, client_w, slow=True))
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            client_w.close()

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter, *, slow: bool) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                w.write(chunk)
                await w.drain()

        sender = asyncio.ensure_future(send())
        try:
            while chunk := await r.read(65536):
                queue.put_nowait((time.monotonic() + (self.delay_s if slow else 0.0), chunk))
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await sender
            w.close()


async def timed(gw: Any) -> tuple[int, float]:
    t = time.monotonic()
    status, _, _ = await gw.chat(headers=KEY)
    return status, time.monotonic() - t


async def spent(gw: Any) -> float:
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=KEY) as r:
        return float((await r.json())["budget"]["spent_usd"])


async def settled(gw: Any, requests: int) -> float:
    """The key's spend once its requests are settled in Redis: ``requests`` times one's cost."""
    seen: list[float] = []
    for _ in range(200):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=KEY) as r:
            state = await r.json()
        if "state_unavailable" not in state and state["in_flight"] == 0 and state["budget"]["reserved_usd"] == 0:
            seen.append(float(state["budget"]["spent_usd"]))
            if len(seen) >= 2 and seen[-1] == seen[-2] > 0 and gw.app[LIVE].services.store.unsettled == 0:
                return seen[-1] / requests
        await asyncio.sleep(0.05)
    raise AssertionError(f"never settled: {seen}")


async def test_a_slow_redis_is_waited_on_once_then_served_from_memory_counted_and_said(
    make_gateway: MakeGateway, redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    proxy = DelayProxy(redis_server.port)
    port = await proxy.start()
    try:
        gw = await make_gateway(
            "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
            "keys: [{name: ci, key: gk-ci, budget: {usd: 100000, period: day}}]\n"
            f"state: {{backend: redis, url: 'redis://127.0.0.1:{port}/0', timeout_ms: 50, recover_s: 0.5}}\n"
        )
        store = gw.app[LIVE].services.store
        assert await store.check(1.0) is None  # as the server's start-up does
        for _ in range(3):
            assert (await timed(gw))[0] == 200
        per_request = await settled(gw, 3)
        assert store.healthy

        proxy.delay_s = 0.4  # each Redis answer 0.4 s late; this process's loop on time
        slow = [await timed(gw) for _ in range(8)]
        assert [status for status, _ in slow] == [200] * 8
        took = [s for _, s in slow]
        # The first waits until the probe's PING is late too (about 2 x timeout_ms), not 0.4 s
        # per operation; the rest are served from memory at once.
        assert took[0] < 0.3 and max(took[1:]) < 0.15, took
        assert not store.healthy
        assert gw.metric("llm_gateway_state_fallbacks_total", backend="redis", op="ledger_admit") >= 8
        assert gw.metric("llm_gateway_state_operation_duration_seconds_count", backend="redis") > 0
        for _ in range(100):  # said once the PING's late answer came (0.4 s)
            lines = [r.msg for r in caplog.records if r.levelno == logging.WARNING and isinstance(r.msg, dict)]
            if lines:
                break
            await asyncio.sleep(0.02)
        assert [(m["event"], m["cause"]) for m in lines] == [("state_store_slow", "redis")], lines
        assert lines[0]["answered_ms"] >= 400

        proxy.delay_s = 0.0  # on time again: the watch finds it within recover_s
        for _ in range(100):
            if store.healthy:
                break
            await asyncio.sleep(0.02)
        assert store.healthy
        fell_back = gw.metric("llm_gateway_state_fallbacks_total", backend="redis", op="ledger_admit")
        assert (await timed(gw))[0] == 200
        assert gw.metric("llm_gateway_state_fallbacks_total", backend="redis", op="ledger_admit") == fell_back
        # What the slow spell spent in memory, added to Redis once: 12 requests' worth in all.
        assert await settled(gw, 12) == pytest.approx(per_request)
    finally:
        await proxy.close()
