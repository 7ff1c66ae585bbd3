"""A soft budget (``budget.soft_usd``) on two replicas sharing a real redis-server: requests past
it are served; its first crossing in the period is one ``budget_soft_limit`` line across both
replicas (names and dollars, never a key), the key view says so, and ``/metrics`` has the soft
limit beside the spend for the alert. Prices are made up ($1 a prompt token, $2 a completion
token): one request of the fake costs $26."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gateway.keys.periods import bounds
from tests.integration.conftest import Gateway, MakeGateway
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

ALICE = {"Authorization": "Bearer gk-alice-secret"}


def config(redis: RedisServer) -> str:
    return ("prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
            "keys:\n"
            "  - {name: alice, key: gk-alice-secret, team: web,\n"
            "     budget: {usd: 100000, soft_usd: 60, period: day, timezone: Europe/Berlin}}\n"
            "teams: [{name: web, budget: {usd: 1000000, period: month}}]\n"
            f"state: {{backend: redis, url: '{redis.url}'}}\n")  # fmt: skip


async def settled(gw: Gateway, spent: float) -> dict[str, Any]:
    for _ in range(200):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
            state = dict(await r.json())
        if state["budget"]["spent_usd"] == spent and state["in_flight"] == 0:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"never settled at {spent}: {state}")


async def test_a_soft_limit_crossed_on_two_replicas_is_one_line_and_refuses_nothing(
    make_gateway: MakeGateway, redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    a = await make_gateway(config(redis_server))
    b = await make_gateway(config(redis_server), fake=a.fake,
                           upstreams=f"  - {{name: primary, base_url: '{a.fake.url}'}}\n")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="gateway.keys"):
        assert (await a.chat(headers=ALICE))[0] == 200
        assert (await b.chat(headers=ALICE))[0] == 200
        state = await settled(a, 52.0)
        assert (state["budget"]["soft_usd"], state["budget"]["soft_limit_crossed"]) == (60.0, False)
        # Past it, from both replicas at once: all served.
        got = await asyncio.gather(*(gw.chat(headers=ALICE) for gw in (a, b, a, b)))
        assert [status for status, *_ in got] == [200] * 4
        state = await settled(b, 156.0)
        assert state["budget"]["soft_limit_crossed"] is True and state["budget"]["timezone"] == "Europe/Berlin"
        for _ in range(100):  # the read back follows the settle
            lines = [r.msg for r in caplog.records
                     if isinstance(r.msg, dict) and r.msg.get("event") == "budget_soft_limit"]  # fmt: skip
            if lines:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # time for a second one, which must not come
    lines = [r for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "budget_soft_limit"]
    [line] = lines
    assert line.levelno == logging.WARNING
    assert {k: v for k, v in line.msg.items() if k not in ("spent_usd", "resets_at")} == {  # type: ignore[union-attr]
        "event": "budget_soft_limit", "kind": "key", "name": "alice", "key": "alice", "team": "web",
        "period": "day", "period_start": bounds("day", line.created, "Europe/Berlin")[0], "soft_usd": 60.0,
        "usd": 100000.0}
    assert 60.0 <= line.msg["spent_usd"] <= 156.0  # type: ignore[index]
    assert line.msg["resets_at"] == state["budget"]["resets_at"]  # type: ignore[index]
    assert "gk-alice-secret" not in caplog.text
    for gw in (a, b):  # what the alert compares, on either replica
        assert (await gw.scraped("llm_gateway_budget_soft_usd")) == {
            (("kind", "key"), ("name", "alice"), ("period", "day")): 60.0}
