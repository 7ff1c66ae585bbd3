"""A request that runs longer than a slot's TTL (an hour: a stream that keeps sending, a slow
local model, a 128K-token answer) on both stores, memory and a real redis-server, the wall
clock a number moved by hand. Its settle charges what it cost, once, however long it ran (on
Redis such a settle was dropped: its slot had expired and a later admit had removed it, and
the settle stopped there, so a $1/day key's $0.051 request was never charged), and while it
runs its slot is kept alive: it still counts toward ``parallel``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from gateway.keys.ledger import KEEP_EVERY_S, SLOT_TTL_MS, Accounts, LimitHit, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state.ledger_ops import LedgerKeep, LedgerSettle
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore
from gateway.state.store import StateStore
from tests.integration.test_state_redis import PATIENT_S, REDIS, RedisServer, _replica
from tests.procs import free_port

# $1 per million tokens in and out: 1,000 in and 50,000 out cost $0.051.
PRICES = PriceTable.of({"m*": Price(1.0, 1.0)})
HOUR_AND_A_SECOND = SLOT_TTL_MS / 1000 + 1


class Wall:
    """Starts now, unless fewer than four hours are left of the UTC day: then just after the
    next midnight, so that the hours these tests move on stay in one budget day (run after
    21:00 UTC, the day's spend reset under the test: CI at stop 64). Forward, never back: a
    time Redis takes as absolute must not be in its past."""

    def __init__(self) -> None:
        now = time.time()
        next_midnight = (now // 86_400 + 1) * 86_400
        self.t = now if next_midnight - now > 4 * 3600 else next_midnight + 60

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "redis"])
async def store_and_wall(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                         ) -> AsyncIterator[tuple[StateStore, Wall]]:  # fmt: skip
    wall = Wall()
    if request.param == "memory":
        yield MemoryStore(wall), wall
        return
    if REDIS is None:
        pytest.skip("needs redis-server (scripts/test-deps.sh)")
    server = RedisServer(free_port(), tmp_path_factory.mktemp("redis"))
    server.start()
    replica = _replica(server.url, PATIENT_S, clock=wall)
    try:
        yield replica.store, wall
    finally:
        await replica.store.close()
        server.stop()


def _spend(state: dict[str, object]) -> tuple[float, float]:
    budget = state["budget"]
    assert isinstance(budget, dict)
    return budget["spent_usd"], budget["reserved_usd"]


async def test_a_request_settled_after_its_slot_expired_is_charged_once(
    store_and_wall: tuple[StateStore, Wall],
) -> None:
    """The audit's case: A admitted, an hour and a second later B admitted (which removes
    A's expired slot), then both settled: $0.053 spent, nothing left reserved."""
    store, wall = store_and_wall
    acc = Accounts(store, PRICES, wall)
    key = KeySpec("longrun", budget=Budget(1.0, "day"))
    a = await acc.admit(key, "m1", 10, 100_000)
    assert isinstance(a, Reservation)
    wall.t += HOUR_AND_A_SECOND  # A still streaming; this process never got to keep its slot alive
    b = await acc.admit(key, "m1", 10, 1000)
    assert isinstance(b, Reservation)
    await acc.settle(a, {"prompt": 1000, "completion": 50_000})
    await acc.settle(b, {"prompt": 1000, "completion": 1000})
    spent, reserved = _spend(await acc.state_of(key))
    assert spent == pytest.approx(0.053) and reserved == 0
    # A settle sent again (its answer lost) changes nothing.
    again = LedgerSettle(key=key.name, minute=a.minute, token_delta=0, slot=a.slot, budgets=a.budgets,
                         reserve_usd=a.reserve_usd, cost_usd=0.051, budget_ttl_s=3600)  # fmt: skip
    if isinstance(store, RedisStore):
        await store.ledger_settle_many([again])
        assert _spend(await acc.state_of(key)) == (spent, 0)


# Redis only: memory forgets a minute two minutes after it ends, so there is nothing to put right.
@pytest.mark.parametrize("store_and_wall", ["redis"], indirect=True)
async def test_a_long_requests_minute_tokens_are_settled_too(store_and_wall: tuple[StateStore, Wall]) -> None:
    """The settle of an expired slot also puts its minute's tokens right: what it used in place
    of what admission counted (there, the prompt and all the output asked for)."""
    store, wall = store_and_wall
    acc = Accounts(store, PRICES, wall)
    key = KeySpec("longtpm", tokens_per_minute=1_000_000)
    a = await acc.admit(key, "m1", 10, 100_000)
    assert isinstance(a, Reservation)
    wall.t += HOUR_AND_A_SECOND  # (Redis keeps A's minute two minutes of its own time)
    assert isinstance(await acc.admit(key, "m1", 10, 10), Reservation)
    await acc.settle(a, {"prompt": 1000, "completion": 50_000})
    requests, tokens, *_ = await store.ledger_read(key.name, a.minute, round(wall.t * 1000), [])
    assert (requests, tokens) == (1, 51_000)


async def test_a_running_requests_slot_is_kept_alive(store_and_wall: tuple[StateStore, Wall]) -> None:
    """Kept alive every KEEP_EVERY_S while it runs, a request still counts toward ``parallel``
    (and holds its reservation) past the slot's TTL; settled, its slot comes back."""
    store, wall = store_and_wall
    acc = Accounts(store, PRICES, wall)
    key = KeySpec("kept", parallel=1, budget=Budget(1.0, "day"))
    a = await acc.admit(key, "m1", 10, 100_000)
    assert isinstance(a, Reservation)
    for _ in range(round(3 * SLOT_TTL_MS / 1000 / KEEP_EVERY_S)):  # three hours of it
        await acc.keep_alive()
        wall.t += KEEP_EVERY_S
    refused = await acc.admit(key, "m1", 10, 1000)
    assert isinstance(refused, LimitHit) and refused.kind == "parallel"
    state = await acc.state_of(key)
    assert state["in_flight"] == 1 and _spend(state) == (0, pytest.approx(0.10001))
    await acc.settle(a, {"prompt": 1000, "completion": 50_000})
    assert isinstance(await acc.admit(key, "m1", 10, 1000), Reservation)
    assert _spend(await acc.state_of(key)) == (pytest.approx(0.051), pytest.approx(0.00101))


async def test_a_slot_freed_as_a_dead_replicas_is_taken_back_by_its_keep(
    store_and_wall: tuple[StateStore, Wall],
) -> None:
    """This process stalled past the slot's TTL (or its store was away): a later admit freed
    the slot and gave its reservation back, as a dead replica's. The next keep holds both again,
    and the settle gives them back once; a keep that comes after the settle brings back nothing."""
    store, wall = store_and_wall
    acc = Accounts(store, PRICES, wall)
    key = KeySpec("stalled", parallel=2, budget=Budget(1.0, "day"))
    a = await acc.admit(key, "m1", 10, 100_000)
    assert isinstance(a, Reservation)
    wall.t += HOUR_AND_A_SECOND
    b = await acc.admit(key, "m1", 10, 1000)
    assert isinstance(b, Reservation)
    await acc.keep_alive()
    state = await acc.state_of(key)
    assert state["in_flight"] == 2 and _spend(state) == (0, pytest.approx(0.10001 + 0.00101))
    await acc.settle(a, {"prompt": 1000, "completion": 50_000})
    if isinstance(store, RedisStore):
        # A keep sent before the settle may run after it there (two connections); in memory
        # each runs when called, and Accounts keeps only what it has not settled.
        keep = LedgerKeep(key=key.name, minute=a.minute, slot=a.slot, budgets=a.budgets, reserve_usd=a.reserve_usd,
                          until_ms=round(wall.t * 1000) + SLOT_TTL_MS, slot_ttl_ms=SLOT_TTL_MS)  # fmt: skip
        await store.ledger_keep([keep])
    await acc.settle(b, {"prompt": 1000, "completion": 1000})
    state = await acc.state_of(key)
    assert state["in_flight"] == 0 and _spend(state) == (pytest.approx(0.053), 0)


async def test_the_keeper_runs_while_a_request_is_in_flight(store_and_wall: tuple[StateStore, Wall]) -> None:
    """Started by an admit, on the sleep it was given; it ends once nothing is in flight."""
    store, wall = store_and_wall
    slept: list[float] = []
    settled, two_hours = asyncio.Event(), asyncio.Event()

    async def sleep(s: float) -> None:
        slept.append(s)
        if len(slept) > 8:  # two hours of it: then until the test has settled the request
            two_hours.set()
            await settled.wait()
        else:
            wall.t += s
            await asyncio.sleep(0)

    acc = Accounts(store, PRICES, wall, sleep=sleep)
    key = KeySpec("keeper", parallel=1)
    a = await acc.admit(key, "m1", 10, 100)
    assert isinstance(a, Reservation) and acc.keeper is not None
    async with asyncio.timeout(10):
        await two_hours.wait()
    refused = await acc.admit(key, "m1", 10, 100)
    assert isinstance(refused, LimitHit) and refused.kind == "parallel"
    await acc.settle(a, {"prompt": 10, "completion": 10})
    settled.set()
    await acc.keeper
    assert slept == [KEEP_EVERY_S] * 9
