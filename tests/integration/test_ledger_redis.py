"""The keys' ledger (gateway/keys/ledger.py) on a real redis-server, two stores playing two
replicas: limits and budgets hold across them, reservations included (issue #35)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gateway.keys.ledger import Accounts, LimitHit, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore, connect
from tests.day_wall import clear_of_midnight
from tests.integration.conftest import same_minute
from tests.integration.test_state_redis import (
    RECOVER_S,
    REDIS,
    RedisServer,
    Replica,
    patient_replicas,
    redis_server,
)

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["patient_replicas", "redis_server"]  # fixtures

# $1 per token in and out: a 20-token prompt with 10 out reserves $30; the fake answer costs $19.
PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})
USAGE = {"prompt": 12, "completion": 7}


def accounts(r: Replica) -> Accounts:
    return Accounts(r.store, PRICES, time.time)


async def test_a_budget_holds_across_replicas_with_every_reservation_seen(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    a, b = (accounts(r) for r in patient_replicas)
    key = KeySpec("alice", budget=Budget(100.0, "day"))
    got = await asyncio.gather(*(acc.admit(key, "m", 20, 10) for acc in (a, b) for _ in range(25)))
    admitted = [g for g in got if isinstance(g, Reservation)]
    # Admitted while spent + reserved < $100: 0, 30, 60, 90 -> four, whichever replica asked.
    assert len(admitted) == 4
    # Refused while the reservations hold the budget (not yet spent): to be tried again shortly.
    assert all(isinstance(g, LimitHit) and g.kind == "budget_held" for g in got if not isinstance(g, Reservation))
    for r in admitted:
        await a.settle(r, USAGE)
    state = await b.state_of(key)
    assert state["budget"]["spent_usd"] == 4 * 19 and state["budget"]["reserved_usd"] == 0
    assert not any(r.fallbacks for r in patient_replicas)  # all of it in Redis, none local


async def test_requests_per_minute_and_parallel_slots_are_shared(patient_replicas: tuple[Replica, Replica]) -> None:
    a, b = (accounts(r) for r in patient_replicas)
    key = KeySpec("ci", requests_per_minute=3, parallel=2)
    await same_minute()
    first = await a.admit(key, "m", 10, 10)
    second = await b.admit(key, "m", 10, 10)
    assert isinstance(first, Reservation) and isinstance(second, Reservation)
    third = await a.admit(key, "m", 10, 10)
    assert isinstance(third, LimitHit) and third.kind == "parallel"  # two in flight, on two replicas
    await b.settle(first, USAGE)  # a slot comes back, wherever it was taken
    fourth = await b.admit(key, "m", 10, 10)
    assert isinstance(fourth, Reservation)
    fifth = await a.admit(key, "m", 10, 10)
    assert isinstance(fifth, LimitHit) and fifth.kind in ("rpm", "parallel")
    state = await a.state_of(key)
    assert state["this_minute"]["requests"] == 3 and state["in_flight"] == 2


async def test_a_refused_request_leaves_no_trace(patient_replicas: tuple[Replica, Replica]) -> None:
    a, _ = (accounts(r) for r in patient_replicas)
    key = KeySpec("bob", requests_per_minute=1, budget=Budget(1000.0, "month"))
    await same_minute()
    assert isinstance(await a.admit(key, "m", 10, 10), Reservation)
    assert isinstance(await a.admit(key, "m", 10, 10), LimitHit)
    state = await a.state_of(key)
    assert state["this_minute"]["requests"] == 1 and state["budget"]["reserved_usd"] == 20


async def _eventually_settled(acc: Accounts, replica: Replica, key: KeySpec) -> dict[str, Any]:
    """The key's state in Redis once the store has sent again what Redis did not take (after
    its recovery wait). Read only then, and only from Redis: a read answered from this
    replica's memory while the store's resender got through meanwhile was taken for Redis's
    ('spent 0 == 19', 1 run in 10 under simulated loop stalls)."""
    store = replica.store
    for _ in range(100):
        await acc.flush(final=True)
        if store.unsettled == 0 and store.healthy:
            fell_back = len(replica.fallbacks)
            state = await acc.state_of(key)
            if len(replica.fallbacks) == fell_back:
                return state
        await asyncio.sleep(0.05)
    raise AssertionError(f"never settled in Redis: unsettled {store.unsettled}, healthy {store.healthy}")


async def test_a_settle_redis_did_not_take_in_time_is_sent_again_never_applied_twice(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """A Redis too slow for one settle (the helper found 50 ms was enough under load) left the
    reservation held in Redis until the period's end, the key refused as if spent: it is now
    kept and sent again, and a settle whose answer was lost is applied once."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("carol", parallel=1, budget=Budget(100.0, "day"))
    got = await a.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    with a_replica.bounded():
        redis_server.freeze()
        try:
            await a.settle(got, USAGE)  # not answered within the bound: kept, not settled in memory
        finally:
            redis_server.thaw()  # the frozen server now runs what it was sent: the settle did land
    assert a_replica.store.unsettled == 1
    state = await _eventually_settled(a, a_replica, key)
    assert state["budget"]["spent_usd"] == 19 and state["budget"]["reserved_usd"] == 0
    assert state["in_flight"] == 0  # the parallel slot is back
    seen = await b.state_of(key)  # every replica sees it: it is in Redis, not in a's memory
    assert seen["budget"]["spent_usd"] == 19 and seen["in_flight"] == 0


async def test_a_settle_out_to_redis_counts_as_unsettled_until_redis_has_answered(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """``unsettled`` left out the settles the resender had out: at 0, a caller read the key's
    state in Redis before the resend ran there (a slot seen held, 21 runs in 30 of a tight loop
    under simulated loop stalls)."""
    a_replica, _ = patient_replicas
    a = accounts(a_replica)
    key = KeySpec("ivan", parallel=1, budget=Budget(100.0, "day"))
    got = await a.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    redis_server.freeze()
    try:
        with a_replica.bounded():
            await a.settle(got, USAGE)  # not answered within the bound: kept
        assert a_replica.store.unsettled == 1
        await asyncio.sleep(RECOVER_S + 0.2)  # the resender sends it again: out, Redis still paused
        assert a_replica.store.unsettled == 1
    finally:
        redis_server.thaw()
    for _ in range(100):
        if a_replica.store.unsettled == 0:
            break
        await asyncio.sleep(0.05)
    state = await a.state_of(key)  # at 0, Redis has run it
    assert state["in_flight"] == 0 and state["budget"]["spent_usd"] == 19 and state["budget"]["reserved_usd"] == 0


async def test_an_admit_redis_ran_after_it_was_given_up_on_is_undone(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("dave", parallel=1, budget=Budget(100.0, "day"))
    with a_replica.bounded():
        redis_server.freeze()
        try:
            got = await a.admit(key, "m", 20, 10)  # given up on: admitted in this replica's memory
        finally:
            redis_server.thaw()  # ... and Redis runs it all the same
    assert isinstance(got, Reservation)
    await a.settle(got, USAGE)  # where it was admitted: memory
    await _eventually_settled(a, a_replica, key)
    seen = await b.state_of(key)
    # What the late admit took in Redis is given back: no slot or reservation left held there.
    assert seen["in_flight"] == 0 and seen["budget"]["reserved_usd"] == 0
    assert isinstance(await b.admit(key, "m", 20, 10), Reservation)  # parallel 1: the slot is free


async def test_an_admit_whose_client_left_meanwhile_is_given_back(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """The server cancels a request's handler when its client leaves; one cancelled while its
    admit was on its way to Redis left the slot held for an hour and the reservation for the
    period (30 early disconnects locked a parallel: 5 key out, measured)."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("erin", parallel=2, budget=Budget(100.0, "day"))
    # The admits still out (each runs on, shielded, after its request is cancelled): the state
    # is read once all have been answered. Polled for "none in flight" alone, a read that Redis
    # ran before the thawed admits passed, and the next admit found their slots taken (1 run
    # in 10 under simulated loop stalls).
    out = 0
    ledger_admit = a_replica.store.ledger_admit

    async def counted(admit: Any) -> Any:
        nonlocal out
        out += 1
        try:
            return await ledger_admit(admit)
        finally:
            out -= 1

    a_replica.store.ledger_admit = counted  # type: ignore[method-assign]
    redis_server.freeze()  # the admits reach Redis, which answers them only once thawed
    try:
        for _ in range(5):
            waiting = asyncio.ensure_future(a.admit(key, "m", 20, 10))
            await asyncio.sleep(0.05)  # on its way: the admit script is sent
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
    finally:
        redis_server.thaw()  # ... and runs them
    for _ in range(250):
        if out == 0:
            break
        await asyncio.sleep(0.02)
    assert out == 0
    await asyncio.sleep(0)  # each answered admit's callback: what it took, to be given back
    if a.flusher is not None:
        await a.flusher
    await a.flush(final=True)
    state = await b.state_of(key)
    assert state["in_flight"] == 0 and state["budget"]["reserved_usd"] == 0, state
    assert isinstance(await b.admit(key, "m", 20, 10), Reservation)  # the slots are free


async def test_the_same_in_memory() -> None:
    from gateway.state.memory import MemoryStore

    acc = Accounts(MemoryStore(time.time), PRICES, time.time)
    key = KeySpec("frank", parallel=1, budget=Budget(100.0, "day"))
    waiting = asyncio.ensure_future(acc.admit(key, "m", 20, 10))
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    await asyncio.sleep(0.01)
    await acc.flush()
    state = await acc.state_of(key)
    assert state["in_flight"] == 0 and state["budget"]["reserved_usd"] == 0


async def test_a_slot_whose_replica_died_gives_its_reservation_back_when_it_expires(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """A replica killed mid-request never settles: its slot expired after SLOT_TTL_MS but its
    reserve stayed held on the budget for the rest of the period (a small daily budget locked
    for the day). The slot's reserve now goes back with it, at the key's next admit."""
    from gateway.state.ledger_ops import LedgerAdmit

    dead, alive = patient_replicas
    # The slots' clock is the replicas' now_ms, given here: a sleep past a 50 ms TTL also let a
    # loaded machine's pause expire the dead slot before the second admit (1 run in 15).
    t0 = time.time()

    def admit(slot: str, ttl_ms: int, at_s: float = 0.0) -> LedgerAdmit:
        now = t0 + at_s
        return LedgerAdmit(key="gina", minute=int(t0 // 60), requests_per_minute=None, tokens_per_minute=None,
                           tokens=10, parallel=None, slot=slot, now_ms=round(now * 1000), slot_ttl_ms=ttl_ms,
                           budgets=(("key:gina:d", 10.0),), reserve_usd=10.0, budget_ttl_s=3600)  # fmt: skip

    assert (await dead.store.ledger_admit(admit("dead-1", 50)))[0] == "ok"  # then the replica dies
    assert (await alive.store.ledger_admit(admit("alive-1", 60_000)))[0].startswith("budget")  # $10 held of $10
    later = 0.1  # the dead replica's slot has expired
    assert (await alive.store.ledger_admit(admit("alive-2", 60_000, later)))[0] == "ok"  # its $10 came back
    *_, spend = await alive.store.ledger_read("gina", int(t0 // 60), round((t0 + later) * 1000),
                                              ["key:gina:d"])  # fmt: skip
    assert spend == [(0.0, 10.0)]  # only the live request's reserve


async def test_a_dead_replicas_reservation_on_a_team_budget_comes_back_to_the_teams_other_keys(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """The expired slot's reserve went back only at the next admit of the key that made it: a
    key never used again after its replica died held its team's budget for the rest of the
    period. Each budget now gives back its own expired reservations, whichever key admits."""
    from gateway.state.ledger_ops import LedgerAdmit, LedgerSettle

    dead, alive = patient_replicas
    t0 = time.time()  # the slots' clock, given (see the test above)

    def admit(key: str, slot: str, ttl_ms: int, at_s: float = 0.0) -> LedgerAdmit:
        now = t0 + at_s
        return LedgerAdmit(key=key, minute=int(t0 // 60), requests_per_minute=None, tokens_per_minute=None,
                           tokens=10, parallel=None, slot=slot, now_ms=round(now * 1000), slot_ttl_ms=ttl_ms,
                           budgets=((f"key:{key}:d", 100.0), ("team:web:m", 10.0)), reserve_usd=10.0,
                           budget_ttl_s=3600)  # fmt: skip

    assert (await dead.store.ledger_admit(admit("gina", "dead-1", 50)))[0] == "ok"  # then the replica dies
    assert (await alive.store.ledger_admit(admit("hugo", "alive-1", 60_000)))[0] == "budget1"  # the team's $10 held
    later = 0.1  # the dead replica's slot has expired; gina never comes back
    assert (await alive.store.ledger_admit(admit("hugo", "alive-2", 60_000, later)))[0] == "ok"
    now = t0 + later
    *_, spend = await alive.store.ledger_read("gina", int(now // 60), round(now * 1000), ["key:gina:d", "team:web:m"])
    assert spend == [(0.0, 10.0), (0.0, 10.0)]  # gina's own budget: given back at her next admit
    await alive.store.ledger_settle_many([LedgerSettle(key="hugo", minute=int(now // 60), token_delta=0,
                                                       slot="alive-2", budgets=("key:hugo:d", "team:web:m"),
                                                       reserve_usd=10.0, cost_usd=4.0, budget_ttl_s=3600)])  # fmt: skip
    *_, spend = await alive.store.ledger_read("hugo", int(now // 60), round(now * 1000), ["key:hugo:d", "team:web:m"])
    assert spend == [(4.0, 0.0), (4.0, 0.0)]
    assert (await alive.store.ledger_admit(admit("gina", "alive-3", 60_000, later)))[0] == "ok"
    *_, spend = await alive.store.ledger_read("gina", int(now // 60), round(now * 1000), ["key:gina:d", "team:web:m"])
    assert spend == [(0.0, 10.0), (4.0, 10.0)]  # the dead slot given back once, not twice


async def test_what_redis_did_not_take_is_sent_when_it_answers_again_without_another_request(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """An admit given up on during a pause and settled before Redis answered again was undone
    only with this replica's next settle of a limited key: until then (an hour at most) every
    replica saw the key's one parallel slot taken and refused it. It is sent again on its own."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("erin", parallel=1, budget=Budget(100.0, "day"))
    with a_replica.bounded():
        redis_server.freeze()
        try:
            got = await a.admit(key, "m", 20, 10)  # given up on: admitted in this replica's memory
            assert isinstance(got, Reservation)
            await a.settle(got, USAGE)  # in memory; Redis still paused
        finally:
            redis_server.thaw()  # the paused admit runs now
    # Kept for Redis: the undo of the admit it ran, and the $19 the request cost in memory.
    assert a_replica.store.unsettled == 2
    for _ in range(60):  # nothing else is asked of replica a
        await asyncio.sleep(0.05)
        if a_replica.store.unsettled == 0:
            break
    seen = await b.state_of(key)
    assert a_replica.store.unsettled == 0 and seen["in_flight"] == 0 and seen["budget"]["reserved_usd"] == 0
    assert seen["budget"]["spent_usd"] == 19
    assert isinstance(await b.admit(key, "m", 20, 10), Reservation)


async def test_closed_refuses_an_admit_counted_in_memory_while_redis_answers_others(
    redis_server: RedisServer,
) -> None:
    """An admit that times out while Redis answers other operations is counted in this
    replica's memory, the store staying up (a saturated loop, not a Redis outage): with
    ``when_store_down: closed`` that request is refused all the same, never admitted on one
    replica's count."""
    deadline_s = 0.5  # long enough for Redis's own answers on a loaded machine
    fallbacks: list[tuple[str, str]] = []
    store = RedisStore(
        connect(redis_server.url, deadline_s), MemoryStore(time.time), clock=time.time,
        monotonic=time.monotonic, prefix="t:", timeout_s=deadline_s,
        on_fallback=lambda b, op: fallbacks.append((b, op)),
    )  # fmt: skip
    acc = Accounts(store, PRICES, time.time, closed_when_store_down=True)
    key = KeySpec("erin", budget=Budget(100.0, "day"))
    try:
        assert isinstance(await acc.admit(key, "m", 20, 10), Reservation)  # connected, scripts loaded
        answer_in_time = store._admits
        got = await _admitted_while_its_answer_waits(store, acc, key)
        assert isinstance(got, LimitHit) and got.kind == "store_down"
        assert store.healthy  # one operation's wait, not an outage
        assert fallbacks == [("redis", "ledger_admit")]
        store._admits = answer_in_time  # type: ignore[method-assign]
        assert isinstance(await acc.admit(key, "m", 20, 10), Reservation)  # the next one counts in Redis
    finally:
        await store.close()


async def test_budget_readings_show_every_replicas_spend_once_per_budget(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """What the budget gauges read at a scrape: a key's own budget and its team's, each once
    however many of its keys share it, with spend and reservations made on either replica."""
    a, b = (accounts(r) for r in patient_replicas)
    team = Budget(1000.0, "month")
    alice = KeySpec("alice", team="web", budget=Budget(100.0, "day"), team_budget=team)
    bob = KeySpec("bob", team="web", team_budget=team)
    spent = await a.admit(alice, "m", 20, 10)
    held = await b.admit(bob, "m", 20, 10)
    assert isinstance(spent, Reservation) and isinstance(held, Reservation)
    await a.settle(spent, USAGE)  # $19 spent by alice (and so by web); bob's $30 still held
    readings = {(kind, name): rest for kind, name, *rest in await b.budget_readings([alice, bob])}
    assert set(readings) == {("key", "alice"), ("team", "web")}
    period, usd, spent_usd, reserved_usd, _ = readings[("key", "alice")]
    assert (period, usd, spent_usd, reserved_usd) == ("day", 100.0, 19.0, 0.0)
    period, usd, spent_usd, reserved_usd, _ = readings[("team", "web")]
    assert (period, usd, spent_usd, reserved_usd) == ("month", 1000.0, 19.0, 30.0)


async def test_a_minute_held_by_another_replicas_request_in_flight_is_told_apart_from_one_used(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """The window keeps the tokens requests in flight hold beside those counted: a refusal made
    while another replica's request holds the minute asks again in 2 s, not at the minute's end."""
    a, b = (accounts(r) for r in patient_replicas)
    key = KeySpec("tina", tokens_per_minute=100)
    await same_minute()
    first = await a.admit(key, "m", 20, 40)
    assert isinstance(first, Reservation)
    held = await b.admit(key, "m", 20, 40)
    assert isinstance(held, LimitHit) and held.kind == "tpm_held" and held.retry_after_s == 2.0
    assert "used 0 of its 100 tokens of this minute, and requests in flight hold 60 of them" in held.message
    await a.settle(first, {"prompt": 30, "completion": 10})
    second = await b.admit(key, "m", 20, 40)
    assert isinstance(second, Reservation)  # 40 used and 60 asked: room once the first ended
    await b.settle(second, {"prompt": 30, "completion": 10})
    used = await a.admit(key, "m", 20, 40)  # 80 used: only the next minute has room
    assert isinstance(used, LimitHit) and used.kind == "tpm" and "used 80 of its 100 tokens" in used.message
# -- while Redis does not answer: memory counts on from what Redis last said (audit of Redis) --


async def test_a_spent_budget_stays_refused_on_every_replica_while_redis_is_down(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """Memory started from zero: a key spent to $0.304 of $0.30 (every replica answering 402)
    got 32 answers and $0.61 more from two replicas once Redis was killed."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("olga", budget=Budget(30.0, "day"))
    for _ in range(2):  # $19 each: $38 of $30
        got = await a.admit(key, "m", 20, 10)
        assert isinstance(got, Reservation)
        await a.settle(got, USAGE)
    refused = await b.admit(key, "m", 20, 10)  # b has admitted nothing of this key: Redis says spent
    assert isinstance(refused, LimitHit) and refused.kind == "budget"
    redis_server.stop()
    with a_replica.bounded(), b_replica.bounded():
        for acc, replica in ((a, a_replica), (b, b_replica), (a, a_replica), (b, b_replica)):
            got = await acc.admit(key, "m", 20, 10)
            assert isinstance(got, LimitHit) and got.kind == "budget", got
            assert "spent $38.00 of its $30.00" in got.message
            assert not replica.store.healthy


async def test_a_minute_s_requests_go_on_from_what_each_replica_last_saw_while_redis_is_down(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """From zero, a key at its 10 requests of the minute got 20 more from two replicas in that
    minute. Each replica now may admit what was left when it last heard from Redis: b saw the
    minute full, a saw one left."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("pia", requests_per_minute=3, parallel=3)
    await same_minute()
    held = [await a.admit(key, "m", 10, 10), await a.admit(key, "m", 10, 10), await b.admit(key, "m", 10, 10)]
    assert all(isinstance(r, Reservation) for r in held)
    redis_server.stop()
    with a_replica.bounded(), b_replica.bounded():
        over = await b.admit(key, "m", 10, 10)
        assert isinstance(over, LimitHit) and over.kind == "rpm"
        last = await a.admit(key, "m", 10, 10)  # the one a saw left
        assert isinstance(last, Reservation)
        over = await a.admit(key, "m", 10, 10)
        # Three in flight (a's two made in Redis and the one in memory): parallel or rpm, not an answer.
        assert isinstance(over, LimitHit) and over.kind in ("rpm", "parallel")
        for r in (*held[:2], last):
            await a.settle(r, USAGE)  # type: ignore[arg-type]
        over = await a.admit(key, "m", 10, 10)
        assert isinstance(over, LimitHit) and over.kind == "rpm"


async def test_what_an_outage_spent_is_added_to_redis_once_when_it_answers_again(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """What a replica admitted and settled in its own memory was never added to Redis: spent_usd
    and the budget gauges under-reported by the outage's spend for the rest of the period."""
    a_replica, b_replica = patient_replicas
    a, b = accounts(a_replica), accounts(b_replica)
    key = KeySpec("quinn", budget=Budget(1000.0, "day"))
    got = await a.admit(key, "m", 20, 10)
    assert isinstance(got, Reservation)
    await a.settle(got, USAGE)
    with a_replica.bounded():
        redis_server.freeze()  # kept: a restarted test Redis would start empty
        try:
            for _ in range(2):
                got = await a.admit(key, "m", 20, 10)  # in memory: Redis taken for down
                assert isinstance(got, Reservation) and a_replica.store.admitted_here(got.slot)
                await a.settle(got, USAGE)
            assert not a_replica.store.healthy and a_replica.store.unsettled >= 1
        finally:
            redis_server.thaw()
    state = await _eventually_settled(a, a_replica, key)  # nothing asked of a: its resender sends it
    assert state["budget"]["spent_usd"] == 3 * 19
    await asyncio.sleep(3 * RECOVER_S)
    await a.flush(final=True)
    seen = await b.state_of(key)
    assert seen["budget"]["spent_usd"] == 3 * 19 and seen["budget"]["reserved_usd"] == 0  # once


async def test_an_outage_s_spend_whose_answer_was_lost_is_added_once(
    redis_server: RedisServer,
) -> None:
    """The batch of an outage's spend is sent again until Redis answers it; one that Redis ran
    but whose answer was lost (Redis paused as it was sent) is not added again."""
    deadline_s = 0.5
    wall = clear_of_midnight()  # one budget day from the first admit to the last read
    fallbacks: list[tuple[str, str]] = []
    store = RedisStore(
        connect(redis_server.url, deadline_s), MemoryStore(wall), clock=wall,
        monotonic=time.monotonic, prefix="t:", timeout_s=deadline_s, recover_s=RECOVER_S,
        on_fallback=lambda b, op: fallbacks.append((b, op)),
    )  # fmt: skip
    acc = Accounts(store, PRICES, wall)
    key = KeySpec("rosa", budget=Budget(1000.0, "day"))
    try:
        assert isinstance(await acc.admit(key, "m", 20, 10), Reservation)  # connected, scripts loaded
        answer_in_time = store._admits
        got = await _admitted_while_its_answer_waits(store, acc, key)
        assert isinstance(got, Reservation) and store.admitted_here(got.slot)  # counted in memory
        store._admits = answer_in_time  # type: ignore[method-assign]
        redis_server.freeze()
        try:
            await acc.settle(got, USAGE)  # its $19, owed to Redis: sent, not answered in time
            assert store.unsettled >= 1
        finally:
            redis_server.thaw()  # ... and Redis runs it now
        for _ in range(100):
            await acc.flush(final=True)  # sent again until answered
            if store.unsettled == 0 and store.healthy:
                break
            await asyncio.sleep(0.05)
        assert store.unsettled == 0
        *_, spend = await store.ledger_read("rosa", int(wall() // 60), round(wall() * 1000),
                                            acc._budgets(key, wall())[0][:1])  # fmt: skip
        # The first admit's $30 still held (never settled); the late one's $19 spent, once.
        assert spend == [(19.0, 30.0)]
    finally:
        await store.close()


async def _admitted_while_its_answer_waits(store: Any, acc: Any, key: Any) -> Any:
    """An admission whose answer from Redis is never read (as on a loop too busy to read it),
    while Redis answers another operation meanwhile: what the admission then gives."""
    answer_in_time = store._admits
    never = asyncio.Event()

    async def read_late(keys: Any, args: Any) -> Any:
        await never.wait()
        return await answer_in_time(keys, args)

    store._admits = read_late
    late = asyncio.create_task(acc.admit(key, "m", 20, 10))
    await asyncio.sleep(0)
    await store.budget_add("global", 1, 0, 10)
    return await late
