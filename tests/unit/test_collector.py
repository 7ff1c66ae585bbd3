"""The collector's gen-0 threshold follows the requests in flight (gateway/collector.py)."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass

import pytest

from gateway.collector import CEILING, FLOOR, PER_IN_FLIGHT, follow_in_flight, gen0_threshold


@dataclass
class Life:
    in_flight: int = 0


@pytest.mark.parametrize(
    ("in_flight", "threshold"),
    [(0, FLOOR), (1, FLOOR), (FLOOR // PER_IN_FLIGHT, FLOOR), (200, 200 * PER_IN_FLIGHT), (10**9, CEILING)],
)
def test_the_threshold_is_the_floor_until_the_requests_in_flight_call_for_more(
    in_flight: int, threshold: int
) -> None:
    assert gen0_threshold(in_flight) == threshold


async def test_the_threshold_follows_each_sample_and_is_set_only_when_it_changes() -> None:
    life, applied = Life(), []
    samples = iter([0, 150, 150, 400, 3])

    async def sleep(_: float) -> None:
        try:
            life.in_flight = next(samples)
        except StopIteration:
            raise asyncio.CancelledError from None

    with pytest.raises(asyncio.CancelledError):
        await follow_in_flight(life, set_gen0=applied.append, sleep=sleep)
    assert applied == [150 * PER_IN_FLIGHT, 400 * PER_IN_FLIGHT, FLOOR]


async def test_the_real_collector_gets_the_threshold_and_keeps_its_older_generations() -> None:
    before = gc.get_threshold()
    life = Life(in_flight=300)
    calls = 0

    async def sleep(_: float) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:
            raise asyncio.CancelledError

    try:
        with pytest.raises(asyncio.CancelledError):
            await follow_in_flight(life, sleep=sleep)
        assert gc.get_threshold() == (300 * PER_IN_FLIGHT, *before[1:])
    finally:
        gc.set_threshold(*before)
