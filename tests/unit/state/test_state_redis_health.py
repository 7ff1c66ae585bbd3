"""RedisStore's health over a stand-in client (tests/unit/state/fake_redis.py): when it takes
Redis for down, and how it finds it back, with the clock and the sleeps in the test's hands."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest

from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from tests.unit.state.fake_redis import FakeRedis

RECOVER_S = 1.0


class Sleeps:
    """The store's ``sleep``: each call waits until the test lets it go."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self.waiting: list[asyncio.Future[None]] = []

    async def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        done = asyncio.get_running_loop().create_future()
        self.waiting.append(done)
        await done

    def release(self) -> None:
        waiting, self.waiting = self.waiting, []
        for done in waiting:
            done.set_result(None)


async def until(condition: Callable[[], object], turns: int = 200) -> None:
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


def store_over(redis: FakeRedis, sleeps: Sleeps, fallbacks: list[str] | None = None) -> RedisStore:
    return RedisStore(
        redis, MemoryStore(time.time), clock=time.time, monotonic=time.monotonic,  # type: ignore[arg-type]
        timeout_s=0.05, recover_s=RECOVER_S, sleep=sleeps,
        on_fallback=lambda _b, op: (fallbacks if fallbacks is not None else []).append(op),
    )  # fmt: skip


async def test_an_idle_replica_finds_redis_back_without_a_request(caplog: pytest.LogCaptureFixture) -> None:
    """The probe ran only when an operation arrived, and a failed one scheduled no other: a
    replica with no traffic met its first request after Redis's return with Redis still taken
    for down (503 accounting_unavailable under `closed`, 5 s later a 200; audit of Redis)."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    redis, sleeps = FakeRedis(), Sleeps()
    store = store_over(redis, sleeps)
    try:
        redis.down = True
        assert await store.reset_get("up/m") is None  # from memory: Redis refused the connection
        assert not store.healthy
        for _ in range(3):  # no operation arrives; the watch asks every recover_s on its own
            await until(lambda: sleeps.waiting)
            sleeps.release()
        await until(lambda: sleeps.waiting)
        assert sleeps.asked == [RECOVER_S] * 4 and not store.healthy
        redis.down = False
        sleeps.release()
        await until(lambda: store.healthy)
        back = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == "state_store_back"]
        assert len(back) == 1
        assert store._probe is None and not sleeps.waiting  # the watch ends once Redis answers
        pings = redis.pings
        assert await store.reset_get("up/m") is None and redis.pings == pings  # from Redis, no probe
    finally:
        await store.close()


async def test_closing_the_store_ends_its_watch() -> None:
    redis, sleeps = FakeRedis(), Sleeps()
    store = store_over(redis, sleeps)
    redis.down = True
    await store.reset_get("up/m")
    await until(lambda: sleeps.waiting)
    watch = store._probe
    assert watch is not None
    await store.close()
    await asyncio.sleep(0)
    assert watch.cancelled()


async def test_requests_while_down_start_no_second_watch() -> None:
    redis, sleeps = FakeRedis(), Sleeps()
    fallbacks: list[str] = []
    store = store_over(redis, sleeps, fallbacks)
    try:
        redis.down = True
        await store.reset_get("up/m")
        await until(lambda: sleeps.waiting)
        pings = redis.pings
        for _ in range(20):
            await store.reset_get("up/m")  # from memory at once, no wait and no PING
        assert redis.pings == pings and len(sleeps.waiting) == 1
        assert fallbacks == ["reset_get"] * 21
    finally:
        await store.close()
