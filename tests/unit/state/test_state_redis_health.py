"""RedisStore's health over a stand-in client (tests/unit/state/fake_redis.py): when it takes
Redis for down, and how it finds it back, with the clock and the sleeps in the test's hands."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import pytest
from redis.exceptions import AuthenticationError, OutOfMemoryError

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


async def until(condition: Callable[[], object], within_s: float = 5.0) -> None:
    for _ in range(round(within_s / 0.002)):
        if condition():
            return
        await asyncio.sleep(0.002)
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


async def test_a_slow_redis_is_left_after_timeout_ms_not_waited_out_by_every_operation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis answers, 0.3 s late, with this process's loop on time: every operation waited its
    answers out (a request ~0.41 s behind a 0.2 s delay, 1.6-1.8 s behind 0.8 s), with no
    fallback counted and no log line (audit of Redis). Now the first operation's wait turns
    suspect at timeout_ms, the probe's PING is late too, and the replica leaves Redis: that
    operation and every later one are served from memory, said once, until a PING is on time."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    redis, sleeps, fallbacks, waits = FakeRedis(), Sleeps(), [], []
    store = RedisStore(
        redis, MemoryStore(time.time), clock=time.time, monotonic=time.monotonic,  # type: ignore[arg-type]
        timeout_s=0.02, recover_s=RECOVER_S, sleep=sleeps,
        on_fallback=lambda _b, op: fallbacks.append(op), on_wait=lambda _b, s: waits.append(s),
    )  # fmt: skip
    try:
        await store.reset_get("up/m")
        assert store.healthy and len(waits) == 1 and not fallbacks
        redis.delay_s = 0.3
        t = time.monotonic()
        assert await store.reset_get("up/m") is None  # given up on when the probe's PING was late too
        first = time.monotonic() - t
        assert first < 0.2 and not store.healthy, first  # about 2 x timeout_ms, not the 0.3 s delay
        t = time.monotonic()
        for _ in range(20):
            await store.reset_get("up/m")
        assert time.monotonic() - t < 0.05  # from memory, no wait
        assert fallbacks == ["reset_get"] * 21
        assert len(waits) == 2 and waits[1] < 0.2  # what the first one waited; the rest asked nothing
        await until(lambda: sleeps.waiting)  # the PING's answer came (0.3 s): slow, not down
        lines = [r.msg for r in caplog.records if r.levelno == logging.WARNING]
        assert len(lines) == 1 and isinstance(lines[0], dict), lines
        assert lines[0]["event"] == "state_store_slow" and lines[0]["cause"] == "redis"
        assert lines[0]["answered_ms"] >= 300 and lines[0]["timeout_ms"] == 20
        sleeps.release()  # still slow: the replica stays off Redis, and says nothing more
        await until(lambda: sleeps.waiting)
        assert not store.healthy and len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
        redis.delay_s = 0.0  # on time again
        sleeps.release()
        await until(lambda: store.healthy)
        assert await store.reset_get("up/m") is None and len(fallbacks) == 21
    finally:
        await store.close()


async def test_an_answer_a_busy_loop_reads_late_is_waited_for_redis_is_not_left() -> None:
    """This process's loop stalls 5 x timeout_ms around each operation (a saturated replica):
    the probe's PING is as late, but so is the loop's own timer, and the operation waits on
    for Redis's answer. Left at timeout_ms, two saturated replicas let a $0.01 budget serve 20-22
    answers where it holds 10 (keys audit, 2026-11-29)."""
    redis, sleeps, fallbacks = FakeRedis(), Sleeps(), []
    store = RedisStore(
        redis, MemoryStore(time.time), clock=time.time, monotonic=time.monotonic,  # type: ignore[arg-type]
        timeout_s=0.02, recover_s=RECOVER_S, sleep=sleeps, on_fallback=lambda _b, op: fallbacks.append(op),
    )  # fmt: skip
    redis.delay_s = 0.002
    try:
        for _ in range(4):
            asyncio.get_running_loop().call_soon(time.sleep, 0.1)  # the loop stalls
            await store.reset_set("up/m", int((time.time() + 60) * 1000))
            await asyncio.sleep(0)
        assert store.healthy and not fallbacks
        assert redis.values  # every one in Redis
    finally:
        await store.close()


async def test_a_full_redis_is_said_once_and_kept_for_reads_never_left_and_rejoined(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """maxmemory reached under noeviction: PINGs and reads are answered, every write is refused
    with OOM. Taken for down at each write, the replica came back at the probe's PING and left
    again at the next write, about every second (audit of Redis). Now each write is served from
    memory, the replica stays on Redis, and it is said once, until a write is taken again."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    redis, sleeps, fallbacks = FakeRedis(), Sleeps(), []
    store = store_over(redis, sleeps, fallbacks)
    try:
        redis.write_error = OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
        for _ in range(5):
            await store.reset_set("up/m", int((time.time() + 60) * 1000))  # refused: from memory
            assert await store.reset_get("up/m") is None  # read from Redis, which answers reads
            assert store.healthy
        assert fallbacks == ["reset_set"] * 5 and not sleeps.waiting
        lines = [r.msg for r in caplog.records]
        assert len(lines) == 1 and lines[0]["event"] == "state_store_full"  # type: ignore[index]
        assert "maxmemory" in lines[0]["problem"] and lines[0]["error"] == "OutOfMemoryError"  # type: ignore[index]
        redis.write_error = None
        await store.reset_set("up/m", int((time.time() + 60) * 1000))
        lines = [r.msg for r in caplog.records]
        assert len(lines) == 2 and lines[1]["event"] == "state_store_writable"  # type: ignore[index]
        assert redis.values and len(fallbacks) == 5
    finally:
        await store.close()


async def test_a_wrong_password_is_an_error_that_says_it_will_not_heal(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    redis, sleeps = FakeRedis(), Sleeps()
    store = store_over(redis, sleeps)
    try:
        redis.error = AuthenticationError("invalid username-password pair or user is disabled.")
        await store.reset_get("up/m")
        (line,) = caplog.records
        assert line.levelno == logging.ERROR and isinstance(line.msg, dict)
        assert line.msg["event"] == "state_store_down" and line.msg["error"] == "AuthenticationError"
        assert "credentials" in line.msg["problem"] and line.msg["heals"].startswith("no")
        assert "invalid username-password" not in line.getMessage()  # our words, not the server's
    finally:
        await store.close()


async def test_a_redis_about_as_slow_as_timeout_ms_is_rejoined_only_when_steady_and_later_after_each_flap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis behind 35-75 ms of delay, timeout_ms 50: one on-time PING brought the replica back,
    its next slow operation took it off again, and it flapped every 1-3 s (10 state_store_slow
    and 9 state_store_back in 20 s, review). Now the watch rejoins after several on-time PINGs
    in a row only, and a replica taken off again soon after its return waits longer each time
    (bounded) before it rejoins; a return that lasts ends the backoff."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    redis, sleeps = FakeRedis(), Sleeps()
    now = [1000.0]
    store = RedisStore(
        redis, MemoryStore(time.time), clock=time.time, monotonic=lambda: now[0],  # type: ignore[arg-type]
        timeout_s=0.02, recover_s=RECOVER_S, sleep=sleeps,
    )  # fmt: skip

    async def taken_off() -> None:
        redis.down = True
        await store.reset_get("up/m")
        assert not store.healthy
        await until(lambda: sleeps.waiting)
        redis.down = False

    def lines(event: str) -> list[dict[str, object]]:
        return [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == event]

    try:
        await taken_off()
        redis.ping_delays = [0.0, 0.1]  # one PING on time, the next late: not steady
        sleeps.release()
        await until(lambda: sleeps.waiting)
        assert not store.healthy and redis.ping_delays == [] and sleeps.asked[-1] == RECOVER_S
        sleeps.release()  # on time now, PING after PING: back, said once
        await until(lambda: store.healthy)
        assert len(lines("state_store_back")) == 1 and "held_s" not in lines("state_store_down")[0]

        holds = []
        for _ in range(8):  # taken off again within seconds of each return: a flap
            now[0] += 3.0
            await taken_off()
            sleeps.release()  # on time at once, but the hold is not over
            await until(lambda: len(sleeps.waiting) == 1 and sleeps.asked[-1] != RECOVER_S)
            assert not store.healthy
            holds.append(sleeps.asked[-1])
            now[0] += sleeps.asked[-1]
            sleeps.release()
            await until(lambda: store.healthy)
        assert holds == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
        offs = lines("state_store_down")
        assert len(offs) == 9 and len(lines("state_store_back")) == 9  # one line per change
        assert [line["held_s"] for line in offs[1:]] == holds

        now[0] += 120.0  # a return that lasted: the next time off is not a flap
        await taken_off()
        sleeps.release()
        await until(lambda: store.healthy)
        assert "held_s" not in lines("state_store_down")[-1]
    finally:
        await store.close()
