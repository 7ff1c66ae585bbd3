"""Budgets and key expiries as Prometheus gauges (``GET /metrics``), for an operator's alerts:
each key's and team's budget, what is spent of it this period and held by requests in flight,
when the period ends, and when an expiring key stops working. Read from the state store at the
scrape, so they are what every replica sees. Prices are made up ($1 a prompt token, $2 a
completion token) to keep the arithmetic plain."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from gateway.keys.periods import bounds
from gateway.live import LIVE
from tests.day_wall import clear_of_midnight
from tests.integration.conftest import MakeGateway

PRICES = "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
ENDS = (datetime.now(UTC) + timedelta(days=10)).replace(microsecond=0)
CONFIG = (PRICES + "keys:\n"
          "  - {name: alice, key: gk-alice, team: web, budget: {usd: 100, period: day}}\n"
          f"  - {{name: bob, key: gk-bob, team: web, expires_at: '{ENDS.isoformat()}'}}\n"
          "  - {name: carol, key: gk-carol}\n"
          "teams: [{name: web, budget: {usd: 1000, period: month}}]\n")  # fmt: skip


def budget(kind: str, name: str, period: str) -> tuple[tuple[str, str], ...]:
    return (("kind", kind), ("name", name), ("period", period))


async def test_budgets_and_expiries_are_gauges_an_alert_can_read(make_gateway: MakeGateway) -> None:
    wall = clear_of_midnight()
    gw = await make_gateway(CONFIG, wall=wall)
    assert (await gw.chat(headers={"Authorization": "Bearer gk-alice"}))[0] == 200
    assert (await gw.chat(headers={"Authorization": "Bearer gk-bob"}))[0] == 200
    cost = 26.0  # the fake's usage at these prices, as tests/integration/test_keys.py counts it
    for _ in range(100):  # settling follows the answer
        spent = await gw.scraped("llm_gateway_budget_spent_usd")
        if spent.get(budget("team", "web", "month")) == 2 * cost:
            break
        await asyncio.sleep(0.02)
    assert spent == {budget("key", "alice", "day"): cost, budget("team", "web", "month"): 2 * cost}
    assert await gw.scraped("llm_gateway_budget_usd") == {
        budget("key", "alice", "day"): 100.0, budget("team", "web", "month"): 1000.0}
    assert set((await gw.scraped("llm_gateway_budget_reserved_usd")).values()) == {0.0}
    resets = await gw.scraped("llm_gateway_budget_resets_at_seconds")
    now = wall()
    assert resets[budget("key", "alice", "day")] == bounds("day", now)[1]
    assert resets[budget("team", "web", "month")] == bounds("month", now)[1]
    # carol has no budget and no expiry: no series of hers.
    assert await gw.scraped("llm_gateway_key_expires_at_seconds") == {(("key", "bob"),): ENDS.timestamp()}


async def test_a_store_that_does_not_answer_leaves_the_last_reading(make_gateway: MakeGateway) -> None:
    """While Redis is down a read comes from this replica's memory, which holds no other
    replica's spend: a budget alert must not resolve because the store went away."""
    gw = await make_gateway(CONFIG)
    assert (await gw.chat(headers={"Authorization": "Bearer gk-alice"}))[0] == 200
    for _ in range(100):
        before = await gw.scraped("llm_gateway_budget_spent_usd")
        if before.get(budget("key", "alice", "day")) == 26.0:
            break
        await asyncio.sleep(0.02)
    svc = gw.app[LIVE].services
    read: list[int] = []

    async def from_memory(keys: object) -> list[tuple[str, str, str, float, float, float, float]]:
        read.append(1)
        return [("key", "alice", "day", 100.0, 0.0, 0.0, 0.0)]  # what a fallback would read

    svc.accounts.budget_readings = from_memory  # type: ignore[method-assign,union-attr]
    svc.store.healthy = False  # type: ignore[misc]
    assert await gw.scraped("llm_gateway_budget_spent_usd") == before and read == []
    svc.store.healthy = True  # type: ignore[misc]
    assert (await gw.scraped("llm_gateway_budget_spent_usd"))[budget("key", "alice", "day")] == 0.0
