"""A Redis restarted empty (no append-only file) mid-period, on a real redis-server: each replica
says so and counts it, and the budgets' spend it knew goes back as a floor.

An audit found it silent: every replica counted every key's spend from $0 again, and a $1 key
that had spent $0.874 spent $1.007 more.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.keys.ledger import Accounts, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state import redis_store
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore, connect
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})  # $1 per token: 12 in and 7 out cost $19


@dataclass
class Replica:
    store: RedisStore
    accounts: Accounts
    lost: list[str] = field(default_factory=list)


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    made = []
    for _ in range(2):
        lost: list[str] = []
        store = RedisStore(connect(redis_server.url, 2.0), MemoryStore(time.time), clock=time.time,
                           monotonic=time.monotonic, prefix="t:", timeout_s=2.0, recover_s=2.0,
                           on_lost=lost.append)  # fmt: skip
        assert await store.check(2.0) is None  # start-up: what Redis holds is learnt
        made.append(Replica(store, Accounts(store, PRICES, time.time), lost))
    yield made[0], made[1]
    for r in made:
        await r.store.close()


async def checked(r: Replica) -> None:
    task = r.store._kept_check
    if task is not None:
        await task


async def test_a_redis_restarted_empty_is_said_counted_and_given_back_the_spend(
    replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, b = replicas
    key = KeySpec("alice", budget=Budget(100.0, "day"))
    got = await a.accounts.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    await a.accounts.settle(got, {"prompt": 12, "completion": 7})
    assert (await b.accounts.state_of(key))["budget"]["spent_usd"] == 19  # b has read it too
    await asyncio.sleep(0.1)
    assert not a.lost and not b.lost  # reconnections to the same Redis say nothing

    redis_server.stop()
    redis_server.start()  # empty: no append-only file, no snapshot
    # Each replica's next operation meets its dead pooled connection and, before it is sent
    # again on a new one, asks whether Redis still holds what it did.
    assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 19  # the floor, not $0 again
    assert a.lost == ["redis"]
    assert (await b.accounts.state_of(key))["budget"]["spent_usd"] == 19
    assert b.lost == ["redis"]  # a's new marker, not b's: told from a Redis that kept it
    got = await b.accounts.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    await b.accounts.settle(got, {"prompt": 12, "completion": 7})
    assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 38
    assert a.lost == b.lost == ["redis"]  # once each
    lines = [r for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == "state_store_lost"]
    assert len(lines) == 2 and all(r.levelno == logging.ERROR for r in lines)
    assert {r.msg["budgets_restored"] for r in lines} == {1}
    assert "alice" not in str([r.msg for r in lines])  # no key's name in the line


async def test_a_flapping_connection_to_the_same_redis_is_not_taken_for_a_lost_one(
    replicas: tuple[Replica, Replica],
) -> None:
    a, _ = replicas
    for _ in range(3):
        await a.store._drop_idle_connections()
        a.store._start_kept_check()
        await checked(a)
    assert not a.lost


async def test_requests_in_flight_at_the_restart_do_not_lower_the_spend_given_back(
    replicas: tuple[Replica, Replica], redis_server: RedisServer
) -> None:
    """Operations that read the empty Redis before the check (with a dozen at once, most runs)
    wrote its $0 over the replica's copy, which the check then gave back: $0 (review)."""
    a, _ = replicas
    key = KeySpec("alice", budget=Budget(100.0, "day"))
    got = await a.accounts.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    await a.accounts.settle(got, {"prompt": 12, "completion": 7})
    await asyncio.gather(*(a.store.budget_add(f"warm{i}", 1, 0, 10) for i in range(20)))  # pooled connections
    redis_server.stop()
    redis_server.start()

    async def one(i: int) -> object:
        await asyncio.sleep(i * 0.0005)
        return await (a.store.budget_add(f"y{i}", 1, 0, 10) if i % 2 else a.accounts.state_of(key))

    await asyncio.gather(*(one(i) for i in range(20)), return_exceptions=True)
    await checked(a)
    assert a.lost == ["redis"]
    assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 19


async def test_a_write_back_that_failed_is_tried_again_at_the_next_check(
    replicas: tuple[Replica, Replica], redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new marker was taken for known before the spend was written back: a write-back that
    failed (a Redis still loading) was never tried again, and Redis kept $0 (review)."""
    a, _ = replicas
    key = KeySpec("alice", budget=Budget(100.0, "day"))
    got = await a.accounts.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    await a.accounts.settle(got, {"prompt": 12, "completion": 7})
    redis_server.stop()
    redis_server.start()
    pipelined = redis_store.run_pipelined
    failing = True

    async def once_failing(*args: Any) -> Any:
        if failing:
            raise ConnectionError("still loading")
        return await pipelined(*args)

    monkeypatch.setattr(redis_store, "run_pipelined", once_failing)
    await a.store._drop_idle_connections()
    a.store._start_kept_check()
    await checked(a)
    failing = False
    a.store._start_kept_check()
    await checked(a)
    assert a.lost == ["redis"]  # said once
    assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 19


class Looks:
    """A replica's sleep, in which the watch of ``{prefix}kept`` waits until the test lets its
    period pass (``look``); every other wait is real."""

    def __init__(self) -> None:
        self.asked: list[float] = []
        self._due: asyncio.Future[None] | None = None
        self._asleep = asyncio.Event()

    async def sleep(self, s: float) -> None:
        if s != redis_store.KEPT_EVERY_S:
            await asyncio.sleep(s)
            return
        self.asked.append(s)
        self._due = asyncio.get_running_loop().create_future()
        self._asleep.set()
        await self._due

    async def look(self) -> None:
        """The period passes: the watch looks, and has gone back to sleep when this returns."""
        async with asyncio.timeout(5):  # no watch: a failure, not a hang
            await self._asleep.wait()
            self._asleep.clear()
            assert self._due is not None
            self._due.set_result(None)
            await self._asleep.wait()


async def test_a_redis_flushed_while_every_connection_stays_up_is_found_at_the_next_look(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A FLUSHALL (an eviction, a DEL of the gateway's keys) breaks no connection: the marker was
    read at start-up, reconnections and returns only, and spend counted from $0 again with no log
    line, metric or alert (audit: 144 % of a budget spent)."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    made = []
    for _ in range(2):
        looks, lost = Looks(), []
        store = RedisStore(connect(redis_server.url, 2.0), MemoryStore(time.time), clock=time.time,
                           monotonic=time.monotonic, prefix="t:", timeout_s=2.0, recover_s=2.0,
                           on_lost=lost.append, sleep=looks.sleep)  # fmt: skip
        assert await store.check(2.0) is None
        made.append((Replica(store, Accounts(store, PRICES, time.time), lost), looks))
    (a, a_looks), (b, b_looks) = made
    try:
        key = KeySpec("alice", budget=Budget(100.0, "day"))
        got = await a.accounts.admit(key, "m", 20, 10)
        assert isinstance(got, Reservation)
        await a.accounts.settle(got, {"prompt": 12, "completion": 7})
        assert (await b.accounts.state_of(key))["budget"]["spent_usd"] == 19
        await a_looks.look()
        assert not a.lost  # a look at a Redis that kept it says nothing

        redis_server.flush()
        assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 0  # nothing broke: not found
        assert not a.lost
        await a_looks.look()
        assert a.lost == ["redis"]
        assert (await a.accounts.state_of(key))["budget"]["spent_usd"] == 19  # the floor, at once
        await b_looks.look()
        assert b.lost == ["redis"]  # a's new marker, not the one b read
        await a_looks.look()
        await b_looks.look()
        assert a.lost == b.lost == ["redis"]  # once each
        assert a_looks.asked[0] == b_looks.asked[0] == 5.0  # one GET each every 5 s
        lines = [r for r in caplog.records if isinstance(r.msg, dict) and r.msg["event"] == "state_store_lost"]
        assert len(lines) == 2 and all(r.levelno == logging.ERROR for r in lines)
        assert "flushed" in lines[0].msg["problem"]
    finally:
        for r, _ in made:
            await r.store.close()
