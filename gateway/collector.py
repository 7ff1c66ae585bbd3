"""The cyclic garbage collector's pace in a serving process.

Requests free their objects by reference counting; the collector is there for cycles, and
the plain paths make none (``gc.callbacks`` under load: the collections found nothing but a
few objects of closed connections). What it costs is walking the young objects it finds
alive: those of the open connections and of the requests in flight. Its gen-0 collection
runs whenever allocations outnumber deallocations by the threshold, which bursts of arriving
requests do however much is in flight. With Python's default (700) that was ~12 µs per
request at 32 connections; the fixed 10,000 that replaced it is dear at 1,024: one process
under wrk ``-c1024`` against the 20 ms mock ran 63 gen-0 and 5 gen-1 collections in 4 s,
383 ms of the 4 s, each walking ~80,000 live objects (issue #38).

So the threshold follows the requests in flight, sampled: the collector then runs about as
often per request at any concurrency, and the cyclic garbage it lets build up between two
runs stays in proportion to what the requests in flight hold anyway. Idle and lightly
loaded it stays at the floor, so a process that does make cycles (an error path, a library)
collects them as often as before.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from typing import Protocol

FLOOR = 10_000  # at 32 connections: a handful of collections per 40k requests, ~1 µs each
PER_IN_FLIGHT = 500  # per request in flight; wrk -c1024: CPU -5.5 % against a fixed 10,000 (100: -2.4 %)
CEILING = 1_000_000
EVERY_S = 0.5


class InFlight(Protocol):
    in_flight: int


def gen0_threshold(in_flight: int) -> int:
    return min(CEILING, max(FLOOR, PER_IN_FLIGHT * in_flight))


def settle_after_start() -> None:
    """Once listening: everything made at start-up (config, modules, metrics, aiohttp's
    tables) lives as long as the process, so it is frozen out of the collector's reach and
    full collections stop re-walking it; then the floor."""
    gc.collect()
    gc.freeze()
    _set_gen0(FLOOR)


async def follow_in_flight(
    life: InFlight,
    *,
    every_s: float = EVERY_S,
    set_gen0: Callable[[int], None] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Runs until cancelled: every ``every_s``, the gen-0 threshold for the requests in
    flight then. A sample, not a hook on every request: the pipeline's hot path stays as it
    is, and a concurrency that lasts less than a sample's interval costs little either way."""
    apply = set_gen0 or _set_gen0
    current = FLOOR
    while True:
        await sleep(every_s)
        wanted = gen0_threshold(life.in_flight)
        if wanted != current:
            apply(wanted)
            current = wanted


def _set_gen0(threshold: int) -> None:
    gc.set_threshold(threshold, *gc.get_threshold()[1:])
