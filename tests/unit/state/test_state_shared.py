"""The shared circuit and budget over one store, as two replicas would use them."""

import pytest

from gateway.config import CircuitBreakerConfig, RetryBudgetConfig
from gateway.policy.breaker import CircuitState, Gate
from gateway.state import MemoryStore, SharedBudget, SharedCircuit, shared

CFG = CircuitBreakerConfig(failure_threshold=3, open_s=30, probe_interval_s=5)


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def replicas(n: int = 2, **kw: object) -> tuple[Clock, list[SharedCircuit], list[tuple[str | None, CircuitState]]]:
    clock = Clock()
    store = MemoryStore(clock)
    changes: list[tuple[str | None, CircuitState]] = []
    kw.setdefault("rand", lambda: 0.0)  # no jitter: periods are exact
    made = [SharedCircuit(store, "up", CFG, clock, cache_s=0, on_change=lambda m, s: changes.append((m, s)), **kw)  # type: ignore[arg-type]
            for _ in range(n)]
    return clock, made, changes


async def fail(c: SharedCircuit, model: str | None) -> Gate:
    adm = await c.admit(model)
    if adm.gate is not Gate.REFUSE:
        await c.record(adm, model, failed=True)
    return adm.gate


async def succeed(c: SharedCircuit, model: str | None) -> Gate:
    adm = await c.admit(model)
    if adm.gate is not Gate.REFUSE:
        await c.record(adm, model, failed=False)
    return adm.gate


async def test_a_model_outage_stays_with_the_model() -> None:
    _, (a, b), changes = replicas()
    for r in (a, b, a):  # the streak is counted across replicas
        await fail(r, "broken")
    assert (await b.admit("broken")).gate is Gate.REFUSE
    assert (await b.admit("fine")).gate is Gate.ALLOW
    assert changes == [("broken", CircuitState.OPEN)]


async def test_a_provider_outage_opens_the_upstream_after_threshold_failures_across_models() -> None:
    _, (a, b), changes = replicas()
    await fail(a, "m1")
    await fail(b, "m2")
    await fail(a, "m3")  # three failures, three models: no model alone reached its threshold
    for model in ("m1", "m4", None):
        adm = await b.admit(model)
        assert adm.gate is Gate.REFUSE and adm.retry_in_s == 5  # the first period is the probe interval
    assert changes == [(None, CircuitState.OPEN)]


async def test_any_success_breaks_the_streak() -> None:
    _, (a, b), _ = replicas()
    await fail(a, "m1")
    await fail(a, "m2")
    await succeed(b, "m3")  # the provider answered: it is up
    await fail(a, "m1")
    await fail(a, "m2")
    assert (await a.admit("m4")).gate is Gate.ALLOW


async def test_a_single_probe_across_replicas_decides() -> None:
    clock, (a, b), changes = replicas()
    for _ in range(3):
        await fail(a, "m")
    clock.t += 5
    probe = await a.admit("m")
    assert probe.gate is Gate.PROBE
    other = await b.admit("m")
    assert other.gate is Gate.REFUSE and other.retry_in_s == 1.0  # the probe is in flight
    await a.record(probe, "m", failed=True)  # no fallback: the next period is twice as long
    assert (await b.admit("m")).retry_in_s == 10
    clock.t += 10
    probe = await b.admit("m")
    assert probe.gate is Gate.PROBE
    await b.record(probe, "m", failed=False)
    assert (await a.admit("m")).gate is Gate.ALLOW
    assert changes == [("m", CircuitState.OPEN), ("m", CircuitState.HALF_OPEN), ("m", CircuitState.OPEN),
                       ("m", CircuitState.HALF_OPEN), ("m", CircuitState.CLOSED)]


async def test_without_a_fallback_failed_probes_lengthen_the_period_up_to_open_s() -> None:
    clock, (a,), _ = replicas(1)
    for _ in range(3):
        await fail(a, "m")
    periods = []
    for _ in range(5):
        periods.append((await a.admit("m")).retry_in_s)
        clock.t += periods[-1]
        assert await fail(a, "m") is Gate.PROBE
    assert periods == [5, 10, 20, 30, 30]


async def test_with_a_fallback_failed_probes_keep_the_short_period() -> None:
    clock, (a, b), _ = replicas(has_fallback=True)
    for _ in range(3):
        await fail(a, "m")
    periods = []
    for r in (a, b, a, b, a, b):  # the schedule is shared: whichever replica probes
        periods.append((await r.admit("m")).retry_in_s)
        clock.t += periods[-1]
        assert await fail(r, "m") is Gate.PROBE
    assert periods == [5] * 6


async def test_a_replica_with_a_stale_record_cannot_probe_the_period_again() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    a = SharedCircuit(store, "up", CFG, clock, cache_s=0, rand=lambda: 0.0, has_fallback=True)
    b = SharedCircuit(store, "up", CFG, clock, cache_s=1.0, rand=lambda: 0.0, has_fallback=True)
    for _ in range(3):
        await fail(a, "m")
    clock.t += 5
    probe = await a.admit("m")
    assert probe.gate is Gate.PROBE
    assert (await b.admit("m")).gate is Gate.REFUSE  # b now caches the half-open record
    await a.record(probe, "m", failed=True)
    clock.t += 0.1
    # b still sees the period that just ended, but its one probe has been spent.
    assert (await b.admit("m")).gate is Gate.REFUSE
    clock.t += 5
    assert (await b.admit("m")).gate is Gate.PROBE  # the next period has a probe of its own


async def test_an_abandoned_probe_frees_the_slot() -> None:
    clock, (a, b), _ = replicas()
    for _ in range(3):
        await fail(a, None)
    clock.t += 30
    probe = await a.admit(None)
    await a.abandon(probe)
    assert (await b.admit(None)).gate is Gate.PROBE


async def test_a_healthy_request_reads_through_a_short_cache_and_writes_nothing() -> None:
    clock = Clock()

    class Counting(MemoryStore):
        calls = 0

        async def circuit_get(self, keys):  # type: ignore[no-untyped-def]
            Counting.calls += 1
            return await super().circuit_get(keys)

        async def circuit_clear(self, keys):  # type: ignore[no-untyped-def]
            raise AssertionError("nothing to clear")

    c = SharedCircuit(Counting(clock), "up", CFG, clock, cache_s=0.2)
    for _ in range(5):
        await succeed(c, "m")
    assert Counting.calls == 1
    clock.t += 0.25
    await succeed(c, "m")
    assert Counting.calls == 2


async def test_shared_budget_is_a_share_of_everyones_requests() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    cfg = RetryBudgetConfig(ttl_s=10, min_retries_per_s=0, percent_can_retry=20)
    a, b = SharedBudget(store, cfg, clock), SharedBudget(store, cfg, clock)
    for _ in range(50):
        a.record_request()
    await a.flush()
    await b.flush()  # b saw no requests itself, but learns a's
    granted_b = sum(b.try_acquire_retry() for _ in range(20))
    assert granted_b == 10
    await b.flush()
    await a.flush()
    assert not a.try_acquire_retry()  # b's retries spent the shared budget
    clock.t += 11  # a's view is older than the window: only its own (none) count
    assert not a.try_acquire_retry()


async def test_shared_budget_flushes_in_the_background() -> None:
    import asyncio

    clock = Clock()
    store = MemoryStore(clock)
    cfg = RetryBudgetConfig(ttl_s=10, min_retries_per_s=0, percent_can_retry=50)
    a = SharedBudget(store, cfg, clock, flush_s=0.01)
    for _ in range(4):
        a.record_request()
    await asyncio.sleep(0.05)
    assert await store.budget_add("global", 0, 0, 10) == (4, 0)
    await a.close()


async def test_counts_made_while_a_flush_is_out_go_with_the_next_flush() -> None:
    import asyncio

    clock = Clock()
    gate = asyncio.Event()

    class Slow(MemoryStore):
        async def budget_add(self, key, requests, retries, window_s):  # type: ignore[no-untyped-def]
            await gate.wait()
            return await super().budget_add(key, requests, retries, window_s)

    store = Slow(clock)
    a = SharedBudget(store, RetryBudgetConfig(), clock, flush_s=0.01)
    a.record_request()
    await asyncio.sleep(0.03)  # the first flush is out, waiting on the store
    a.record_request()
    gate.set()
    await asyncio.sleep(0.05)
    assert await MemoryStore.budget_add(store, "global", 0, 0, 10) == (2, 0)
    await a.close()


async def test_a_closed_budget_sends_nothing_more_even_with_counts_made_during_its_last_flush() -> None:
    """close() waited for the flush that was out, but that flush's end scheduled the next one
    for the counts made meanwhile: a flush then ran after close (the gateway closes the store
    next), or was left pending when the loop closed ("Task was destroyed but it is pending")."""
    import asyncio

    clock = Clock()
    gate, out = asyncio.Event(), asyncio.Event()
    calls: list[tuple[int, int]] = []

    class Slow(MemoryStore):
        async def budget_add(self, key, requests, retries, window_s):  # type: ignore[no-untyped-def]
            calls.append((requests, retries))
            out.set()
            await gate.wait()
            return await super().budget_add(key, requests, retries, window_s)

    a = SharedBudget(Slow(clock), RetryBudgetConfig(), clock, flush_s=0.01)
    a.record_request()
    await out.wait()  # the background flush is out, waiting on the store
    a.record_request()  # made while it is out: would go with the next flush
    closing = asyncio.create_task(a.close())
    await asyncio.sleep(0)
    gate.set()
    await closing
    await asyncio.sleep(0.05)  # five flush periods
    assert calls == [(1, 0)]


def test_shared_budget_without_a_loop_still_decides_locally() -> None:
    clock = Clock()
    b = SharedBudget(MemoryStore(clock), RetryBudgetConfig(ttl_s=10, min_retries_per_s=0.1, percent_can_retry=0), clock)
    b.record_request()
    assert b.try_acquire_retry()  # the reserve: 0.1/s over 10 s is one retry
    assert not b.try_acquire_retry()


@pytest.mark.parametrize("distinct", [1, 2])
async def test_distinct_models_to_open_the_upstream_is_tunable(distinct: int) -> None:
    _, (a,), _ = replicas(1, distinct_models=distinct)
    for _ in range(3):
        await fail(a, "only")
    other = await a.admit("other")
    assert other.gate is (Gate.REFUSE if distinct == 1 else Gate.ALLOW)


async def test_while_a_probe_is_out_other_requests_ask_the_store_once_a_second() -> None:
    clock = Clock()

    class Counting(MemoryStore):
        claims = 0

        async def probe_claim(self, key, ttl_s):  # type: ignore[no-untyped-def]
            Counting.claims += 1
            return await super().probe_claim(key, ttl_s)

    store = Counting(clock)
    a = SharedCircuit(store, "up", CFG, clock, cache_s=0, rand=lambda: 0.0, has_fallback=True)
    b = SharedCircuit(store, "up", CFG, clock, cache_s=0, rand=lambda: 0.0, has_fallback=True)
    for _ in range(3):
        await fail(a, "m")
    clock.t += 5
    probe = await a.admit("m")  # a silent upstream: this probe stays out
    assert probe.gate is Gate.PROBE and Counting.claims == 1
    for _ in range(50):  # 50 requests in half a second on b: one claim attempt
        assert (await b.admit("m")).gate is Gate.REFUSE
        clock.t += 0.01
    assert Counting.claims == 2
    clock.t += 0.6
    assert (await b.admit("m")).gate is Gate.REFUSE and Counting.claims == 3
    await a.abandon(probe)
    clock.t += 1.0
    assert (await b.admit("m")).gate is Gate.PROBE  # an abandoned probe's period is probed after all


async def test_in_one_process_a_held_retry_is_counted_at_once_and_needs_no_confirmation() -> None:
    clock = Clock()

    class NoReserve(MemoryStore):
        async def budget_reserve(self, *a, **kw):  # type: ignore[no-untyped-def]
            raise AssertionError("the memory store's view is exact: no store operation per retry")

    budget = SharedBudget(NoReserve(clock), RetryBudgetConfig(ttl_s=10, min_retries_per_s=0.2,
                                                              percent_can_retry=0), clock)  # fmt: skip
    assert budget.hold_retry() and await budget.confirm_retry()
    assert budget.hold_retry() and not budget.hold_retry()  # a reserve of 2 retries


async def test_the_record_cache_stays_bounded_however_many_models_clients_name() -> None:
    # Model names come from clients: one record per name, never freed, grew the process by
    # ~180 bytes a name (40,000 random names: +7 MB).
    clock = Clock()
    c = SharedCircuit(MemoryStore(clock), "up", CFG, clock, cache_s=0.2)
    for i in range(3 * shared.CACHE_MAX):
        await c.admit(f"random-{i}")
        clock.t += 0.001
    assert len(c._cache) <= shared.CACHE_MAX


async def test_a_failure_streak_outlives_a_flood_of_other_models_and_is_cleared_by_a_success() -> None:
    clock = Clock()
    store = MemoryStore(clock)
    c = SharedCircuit(store, "up", CFG, clock, cache_s=0.2)
    await fail(c, "hot")
    adm = await c.admit("hot")  # a request for it begins: its record shows the streak
    for i in range(3 * shared.CACHE_MAX):  # meanwhile, other clients name other models
        await c.admit(f"random-{i}")
        clock.t += 0.001
    await c.record(adm, "hot", failed=False)  # it succeeds: the streak must be cleared
    assert [r.failures for r in await store.circuit_get(c.keys("hot"))] == [0, 0]
