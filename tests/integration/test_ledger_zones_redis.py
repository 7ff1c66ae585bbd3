"""A budget in a time zone (``budget.timezone``) on a real redis-server, two stores playing two
replicas: both name the period from the instant alone, so what one spends the other refuses on,
until the zone's own midnight, through a 25-hour day (Los Angeles, 1 November 2026)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.keys.ledger import Accounts, LimitHit, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from tests.integration.test_state_redis import REDIS, Replica, patient_replicas, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["patient_replicas", "redis_server"]  # fixtures

PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})  # $1 a token in and out


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


class Wall:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_two_replicas_agree_on_a_zoned_day_through_its_25_hours(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    wall = Wall(at("2026-11-01T07:30:00"))  # 00:30 PDT, Sunday 1 November: the day clocks fall back
    a, b = (Accounts(r.store, PRICES, wall) for r in patient_replicas)
    key = KeySpec("alice", budget=Budget(30.0, "day", "America/Los_Angeles"))
    r = await a.admit(key, "m", 10, 10)
    assert isinstance(r, Reservation) and r.budgets == ("key:alice@America/Los_Angeles:2026-11-01",)
    await a.settle(r, {"prompt": 10, "completion": 20})
    assert [k.decode() for k in await patient_replicas[0].store._r.keys("t:*alice@America/Los_Angeles:2026-11-01*")]
    # 24 hours on it is 2 November in UTC, and still 1 November there: the other replica refuses.
    wall.now = at("2026-11-02T07:30:00")
    state = await b.state_of(key)
    assert state["budget"]["spent_usd"] == 30.0 and state["budget"]["resets_at"] == "2026-11-02T08:00:00Z"
    refused = await b.admit(key, "m", 10, 10)
    assert isinstance(refused, LimitHit) and refused.kind == "budget"
    assert refused.message.endswith("resets 2026-11-02T08:00:00Z")
    # At its midnight, 25 hours after the day began, a new day on both.
    wall.now = at("2026-11-02T08:00:00")
    fresh = await b.admit(key, "m", 10, 10)
    assert isinstance(fresh, Reservation) and fresh.budgets == ("key:alice@America/Los_Angeles:2026-11-02",)
    await b.settle(fresh, {"prompt": 1, "completion": 1})
    assert (await a.state_of(key))["budget"] == {
        "usd": 30.0, "period": "day", "timezone": "America/Los_Angeles", "spent_usd": 2.0, "reserved_usd": 0.0,
        "left_usd": 28.0, "resets_at": "2026-11-03T08:00:00Z"}
    assert not any(r.fallbacks for r in patient_replicas)
