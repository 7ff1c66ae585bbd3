"""attempt.settle_circuit: the circuit verdict a streamed answer owes is given when its body
ends, by how it ended (tests/integration/test_circuit.py runs it through the relay)."""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.config import CircuitBreakerConfig
from gateway.errors import Classification, ErrorType, TransportError
from gateway.pipeline.attempt import settle_circuit
from gateway.pipeline.outcome import RequestState
from gateway.policy.breaker import Gate
from gateway.state import MemoryStore, SharedCircuit

CFG = CircuitBreakerConfig(failure_threshold=2, open_s=30, probe_interval_s=5)
CUT = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, provider_code=TransportError.STREAM_BROKEN.value)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


class Counted(MemoryStore):
    """A memory store that counts the operations asked of it (a Redis round trip each)."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock)
        self.ops: list[str] = []

    def __getattribute__(self, name: str) -> Any:
        found = super().__getattribute__(name)
        if name.startswith(("circuit_", "probe_")):
            super().__getattribute__("ops").append(name)
        return found


def setup() -> tuple[Clock, Counted, SharedCircuit, SharedCircuit]:
    clock = Clock()
    store = Counted(clock)
    a, b = (SharedCircuit(store, "up", CFG, clock, cache_s=0, rand=lambda: 0.0) for _ in range(2))
    return clock, store, a, b


async def streamed(circuit: SharedCircuit, broke: Classification | None = None, *, answered: bool = True) -> Gate:
    """A request whose answer's head came (send_one left its verdict owed), then its body ended."""
    adm = await circuit.admit("m")
    if adm.gate is not Gate.REFUSE:
        state = RequestState("r", 0.0)
        state.circuit_due = (circuit, adm, "m")
        settle_circuit(state, broke, answered=answered)
        assert state.circuit_due is None  # once
        await circuit.settled_all()  # written in the background
    return adm.gate


async def test_streams_broken_by_the_upstream_open_the_circuit() -> None:
    _, _, a, b = setup()
    await streamed(a, CUT)
    await streamed(b, CUT)
    assert (await a.admit("m")).gate is Gate.REFUSE


async def test_a_client_that_left_neither_counts_nor_clears_the_streak() -> None:
    _, _, a, _ = setup()
    await streamed(a, CUT)
    await streamed(a, answered=False)
    await streamed(a, CUT)
    assert (await a.admit("m")).gate is Gate.REFUSE


async def test_a_whole_stream_or_any_other_ending_the_upstream_gave_clears_the_streak() -> None:
    _, _, a, _ = setup()
    for ending in (None, Classification.of(ErrorType.RATE_LIMIT)):  # a 429 event: the provider is up
        await streamed(a, CUT)
        await streamed(a, ending)
        await streamed(a, CUT)
        assert (await a.admit("m")).gate is Gate.ALLOW
        await streamed(a)  # the next round starts without a streak


async def test_a_probe_is_decided_by_its_body_and_a_client_that_left_gives_its_claim_back() -> None:
    clock, _, a, b = setup()
    await streamed(a, CUT)
    await streamed(a, CUT)
    clock.t += 5
    probe = await a.admit("m")
    assert probe.gate is Gate.PROBE
    state = RequestState("r", 0.0)
    state.circuit_due = (a, probe, "m")  # its head came: nothing is decided yet
    assert (await b.admit("m")).gate is Gate.REFUSE
    settle_circuit(state, CUT)  # its stream broke: open again, for twice as long
    await a.settled_all()
    adm = await b.admit("m")
    assert adm.gate is Gate.REFUSE and adm.retry_in_s == 10
    clock.t += 10
    assert await streamed(a, answered=False) is Gate.PROBE  # its client left: the claim is back
    assert await streamed(b) is Gate.PROBE  # so the next request probes, and its whole stream closes
    assert (await a.admit("m")).gate is Gate.ALLOW


async def test_a_healthy_stream_asks_the_store_nothing_when_it_ends() -> None:
    _, store, a, _ = setup()
    await streamed(a)  # nothing to clear
    adm = await a.admit("m")
    state = RequestState("r", 0.0)
    state.circuit_due = (a, adm, "m")
    store.ops.clear()
    settle_circuit(state)
    await a.settled_all()
    assert store.ops == []


async def test_a_verdict_is_written_in_the_background_and_nothing_waits_for_it() -> None:
    """An SDK closes its connection once it has read a stream's end, which cancels the handler:
    a verdict awaited there was lost while Redis answered late (or the request was logged as
    left, 499). It is written in the background; the handler's end waits for nothing."""
    clock, store, a, b = setup()
    for _ in range(2):
        await streamed(a, CUT)
    clock.t += 31  # open_s over: the next request is the half-open probe
    adm = await a.admit("m")
    assert adm.gate is Gate.PROBE
    release = asyncio.Event()
    real = store.circuit_clear

    async def slow_clear(keys: Any) -> None:
        await release.wait()  # Redis answering late
        await real(keys)

    store.circuit_clear = slow_clear  # type: ignore[method-assign]
    state = RequestState("r", 0.0)
    state.circuit_due = (a, adm, "m")
    settle_circuit(state)  # returns at once: nothing to await, nothing to cancel
    assert (await b.admit("m")).gate is Gate.REFUSE  # not yet in the store: the probe's claim holds
    release.set()
    await a.settled_all()
    assert (await b.admit("m")).gate is Gate.ALLOW  # the probe's success reached the store
