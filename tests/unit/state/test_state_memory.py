"""The memory store: every record expires, budgets slide, probes are claimed once."""

from gateway.policy.breaker import CLOSED, CircuitRecord
from gateway.state.memory import SWEEP_EVERY, MemoryStore


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_circuit_records_count_models_open_clear_and_expire() -> None:
    clock = Clock()
    s = MemoryStore(clock)
    assert await s.circuit_get(["u", "u/m"]) == [CLOSED, CLOSED]
    await s.circuit_fail([("u", "a"), ("u/a", "")], ttl_s=60)
    recs = await s.circuit_fail([("u", "b"), ("u/b", "")], ttl_s=60)
    assert recs == [CircuitRecord(2, 0.0, frozenset({"a", "b"})), CircuitRecord(1)]
    await s.circuit_open("u", clock.t + 30, ttl_s=60)
    assert (await s.circuit_get(["u"]))[0].open_until == clock.t + 30
    await s.circuit_clear(["u"])
    assert await s.circuit_get(["u", "u/a"]) == [CLOSED, CircuitRecord(1)]
    clock.t += 60
    assert await s.circuit_get(["u/a"]) == [CLOSED]


async def test_probe_is_claimed_once_until_released_or_expired() -> None:
    clock = Clock()
    s = MemoryStore(clock)
    assert await s.probe_claim("k", 5)
    assert not await s.probe_claim("k", 5)
    await s.probe_release("k")
    assert await s.probe_claim("k", 5)
    clock.t += 5
    assert await s.probe_claim("k", 5)  # a prober that died does not wedge the circuit


async def test_budget_counts_slide_over_whole_seconds() -> None:
    clock = Clock()
    s = MemoryStore(clock)
    assert await s.budget_add("g", 10, 1, window_s=10) == (10, 1)
    clock.t += 5
    assert await s.budget_add("g", 5, 0, window_s=10) == (15, 1)
    clock.t += 5  # the first second has left the window
    assert await s.budget_add("g", 0, 0, window_s=10) == (5, 0)
    assert await s.budget_add("other", 0, 0, window_s=10) == (0, 0)


async def test_reset_lives_until_it_passes() -> None:
    clock = Clock()
    s = MemoryStore(clock)
    await s.reset_set("u/m", int((clock.t + 3) * 1000))
    await s.reset_set("past", int((clock.t - 1) * 1000))
    assert await s.reset_get("u/m") == int((clock.t + 3) * 1000)
    assert await s.reset_get("past") is None
    clock.t += 3
    assert await s.reset_get("u/m") is None


async def test_expired_entries_are_swept_without_reads() -> None:
    clock = Clock()
    s = MemoryStore(clock)
    for i in range(SWEEP_EVERY - 1):
        await s.circuit_fail([(f"k{i}", "")], ttl_s=1)
    clock.t += 2
    await s.circuit_fail([("last", "")], ttl_s=1)
    assert len(s._circuits) == 1


async def test_expired_answers_do_not_stay_in_memory_once_others_come() -> None:
    """Answers are remembered for their window (a minute or so); past it, the next answers
    written push the dead ones out, where before only the count and byte bounds (64 MiB) did."""
    now = [1000.0]
    store = MemoryStore(lambda: now[0])
    for i in range(50):
        await store.answer_put(f"old{i}", b"x" * 1000, 30)
    now[0] += 60  # every one of them expired
    for i in range(10):
        await store.answer_put(f"new{i}", b"y" * 1000, 30)
    assert len(store.answers) == 10
    assert await store.answer_take("new3") is not None and await store.answer_take("old3") is None


async def test_the_ledger_counts_on_from_what_the_shared_store_last_said() -> None:
    """A replica's memory mirrors the shared store's counts (RedisStore), and holds a key to
    them while that store does not answer: never from zero (audit of Redis)."""
    from gateway.state.ledger_ops import LedgerAdmit

    clock = Clock()
    s = MemoryStore(clock)
    minute, now_ms = int(clock.t // 60), round(clock.t * 1000)

    def admit(slot: str, rpm: int | None = None, parallel: int | None = None) -> LedgerAdmit:
        return LedgerAdmit(key="k", minute=minute, requests_per_minute=rpm, tokens_per_minute=None, tokens=10,
                           parallel=parallel, slot=slot, now_ms=now_ms, slot_ttl_ms=60_000,
                           budgets=(("key:k:d", 1.0),), reserve_usd=0.1, budget_ttl_s=3600)  # fmt: skip

    s.ledger_mirror("k", minute, 9, 90, [("key:k:d", 0.5, 0.3)], 3600, slot=("redis-1", now_ms + 60_000))
    assert await s.ledger_read("k", minute, now_ms, ["key:k:d"]) == (9, 90, 1, [(0.5, 0.3)])
    assert await s.ledger_admit(admit("a", rpm=10)) == ("ok", 0.0)  # the one left of ten
    assert await s.ledger_admit(admit("b", rpm=10)) == ("rpm", 0.0)
    assert await s.ledger_admit(admit("c", parallel=2)) == ("parallel", 0.0)  # redis-1 and a in flight
    s.ledger_mirror("k", minute, 10, 100, [("key:k:d", 1.2, 0.0)], 3600)
    assert (await s.ledger_admit(admit("d")))[0] == "budget0"  # spent past its $1
    clock.t += 61  # redis-1's settle never came: its slot goes when the next one is mirrored
    s.ledger_mirror("k", minute + 1, 0, 0, [], 3600, slot=("redis-2", round(clock.t * 1000) + 60_000))
    assert set(s._slots["k"]) == {"redis-2"}


async def test_a_stored_objects_deployment_is_kept_its_ttl_and_the_least_recently_used_go_first() -> None:
    """Written once per stored Responses answer: bounded by count, not only by its 30 days."""
    clock = Clock()
    s = MemoryStore(clock, max_stored=3)
    for i in range(3):
        await s.stored_put(f"st:{i}", f"dep-{i}", ttl_s=60)
    assert await s.stored_get("st:0") == "dep-0"  # used: kept over st:1
    await s.stored_put("st:3", "dep-3", ttl_s=60)
    assert [await s.stored_get(f"st:{i}") for i in range(4)] == ["dep-0", None, "dep-2", "dep-3"]
    clock.t += 60
    assert await s.stored_get("st:3") is None and len(s._stored) < 3


async def test_a_stored_objects_deployment_is_bounded_at_its_default() -> None:
    from gateway.state.memory import MAX_STORED

    clock = Clock()
    s = MemoryStore(clock)
    for i in range(MAX_STORED + 10):
        await s.stored_put(f"st:{i}", "dep", ttl_s=3600)
    assert len(s._stored) == MAX_STORED and await s.stored_get("st:0") is None
