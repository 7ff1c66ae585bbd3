"""``GET /v1/gateway/key`` while the shared store does not answer (a real redis-server, frozen
with SIGSTOP): the key's spend is not read from this replica's memory, which holds none of
the other replicas' counts nor what any replica counted before the outage. A spent budget read
$0 spent and its whole amount left while every request of that key was refused 503
``accounting_unavailable`` (measured). It answers the last reading Redis gave, marked with its
age, or no figures at all, with a ``state_unavailable`` note saying what requests get meanwhile.
Prices are made up ($1 a prompt token, $2 a completion token): one request costs $26."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.conftest import Gateway, MakeGateway
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

ALICE = {"Authorization": "Bearer gk-alice"}
BOB = {"Authorization": "Bearer gk-bob"}


def config(redis: RedisServer, when_down: str) -> str:
    return ("prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
            "keys:\n"
            "  - {name: alice, key: gk-alice, team: web, budget: {usd: 40, period: day}}\n"
            "  - {name: bob, key: gk-bob, team: web, requests_per_minute: 100}\n"
            "  - {name: dave, key: gk-dave, requests_per_minute: 100}\n"
            "teams: [{name: web, budget: {usd: 1000, period: day}}]\n"
            f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 200, recover_s: 0.3}}\n"
            f"accounting: {{when_store_down: {when_down}}}\n")  # fmt: skip


async def key_state(gw: Gateway, headers: dict[str, str]) -> dict[str, Any]:
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=headers) as r:
        assert r.status == 200
        return dict(await r.json())


async def spent(gw: Gateway) -> dict[str, Any]:
    """alice's state once her two requests are settled: $52 spent of $40."""
    state: dict[str, Any] = {}

    async def read() -> None:
        nonlocal state
        state = await key_state(gw, ALICE)

    for _ in range(200):
        await read()
        if state["budget"]["spent_usd"] == 52.0 and state["in_flight"] == 0:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"never settled: {state}")


@pytest.mark.parametrize("when_down", ["closed", "open"])
async def test_while_the_store_is_down_the_key_reads_its_last_reading_marked_never_memorys(
    make_gateway: MakeGateway, redis_server: RedisServer, when_down: str,
) -> None:
    gw = await make_gateway(config(redis_server, when_down))
    assert [(await gw.chat(headers=ALICE))[0] for _ in range(3)] == [200, 200, 402]
    live = await spent(gw)
    assert live["budget"]["left_usd"] == 0.0 and "state_unavailable" not in live
    redis_server.freeze()
    try:
        # Refused as spent either way: the replica counts on from the $52 Redis last said (from
        # zero, under `open` it served and counted again as if nothing were spent).
        status, _, body = await gw.chat(headers=ALICE)
        assert status == 402 and b"budget_exhausted" in body, body
        # A request those counts would admit: not sent on counts unchecked under `closed`.
        status, _, body = await gw.chat(headers=BOB)
        if when_down == "closed":
            assert status == 503 and b"accounting_unavailable" in body
        else:
            assert status == 200
        # Nor a token count (review: it was checked against this replica's memory and sent).
        sent = len(gw.fake.requests)
        async with gw.session.post(gw.base + "/v1/messages/count_tokens", headers={**BOB, "anthropic-version": "2023-06-01"},
                                   json={"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]}) as r:
            counted = (r.status, await r.read())
        if when_down == "closed":
            assert counted[0] == 529 and b"state store is down" in counted[1], counted  # Anthropic's overloaded
            # A key with a minute's limit alone too, as its other requests are (review).
            async with gw.session.post(gw.base + "/v1/messages/count_tokens",
                                       headers={"Authorization": "Bearer gk-dave", "anthropic-version": "2023-06-01"},
                                       json={"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]}) as r:
                assert r.status == 529, await r.read()
            assert len(gw.fake.requests) == sent
        else:
            assert counted[0] != 503, counted
        state = await key_state(gw, ALICE)
        note = state["state_unavailable"]
        requests = ("refused (503 accounting_unavailable)" if when_down == "closed"
                    else "served, counted in this replica's memory only")  # fmt: skip
        assert note["requests"].startswith(requests), note
        assert "state store does not answer" in note["message"]
        budget = state["budget"]
        # The last reading, as of when it was made: never $0 spent and the whole budget left.
        assert (budget["spent_usd"], budget["left_usd"], budget["usd"]) == (52.0, 0.0, 40.0)
        assert budget["as_of"] == live["as_of"] and budget["age_s"] >= 0
        assert state["in_flight"] is None  # every replica's requests in flight: not known now
        # A key never read before the outage has no figures, not this replica's own.
        bob = await key_state(gw, BOB)
        assert bob["state_unavailable"]["requests"].startswith(requests)
        assert bob["this_minute"] is None and bob["in_flight"] is None
        team = bob["team_budget"]
        assert (team["usd"], team["period"]) == (1000.0, "day") and "resets_at" in team
        # The team's budget was read with alice's: that reading, marked, with what bob's request
        # cost meanwhile in this replica's memory under `open` ($26, once settled).
        for _ in range(100):
            team = (await key_state(gw, BOB))["team_budget"]
            if team["spent_usd"] == (52.0 if when_down == "closed" else 78.0):
                break
            await asyncio.sleep(0.02)
        assert (team["spent_usd"], team["as_of"]) == (52.0 if when_down == "closed" else 78.0, live["as_of"])
    finally:
        redis_server.thaw()

    async def back() -> dict[str, Any]:
        for _ in range(200):
            state = await key_state(gw, ALICE)
            if "state_unavailable" not in state:
                return state
            await asyncio.sleep(0.05)
        raise AssertionError("the store never came back")

    state = await back()
    assert state["budget"]["spent_usd"] == 52.0 and state["budget"]["left_usd"] == 0.0


async def test_while_the_store_is_down_the_key_reads_what_this_replica_spent_since_its_last_reading(
    make_gateway: MakeGateway, redis_server: RedisServer
) -> None:
    """Under ``open`` a replica serves and settles in its memory while Redis does not answer, and
    refuses by what it spent there: a key read "spent $0.54, left $0.46" from the same replica
    that refused it for "spent $1.08 of its $1.00" (audit). What it spent since the reading, owed
    to Redis, is added to the reading's spend."""
    gw = await make_gateway(config(redis_server, "open"))
    assert (await gw.chat(headers=BOB))[0] == 200

    async def team_spent(want: float) -> dict[str, Any]:
        for _ in range(200):
            state = await key_state(gw, BOB)
            if state["team_budget"]["spent_usd"] == want and state["team_budget"]["reserved_usd"] == 0:
                return state
            await asyncio.sleep(0.02)
        raise AssertionError(f"never read {want}: {state}")

    live = await team_spent(26.0)
    redis_server.freeze()
    try:
        assert (await gw.chat(headers=BOB))[0] == 200  # admitted and settled in this replica's memory
        down = await team_spent(52.0)
        team = down["team_budget"]
        assert "state_unavailable" in down and team["as_of"] == live["as_of"]
        assert team["left_usd"] == 1000.0 - 52.0
    finally:
        redis_server.thaw()


async def test_while_the_store_is_down_a_budget_never_read_here_reads_what_its_admits_count_on(
    make_gateway: MakeGateway, redis_server: RedisServer
) -> None:
    """A replica refuses and serves by the counts Redis gave its admits, but the key's view read
    only what key views and scrapes had read: spent, left and as_of null while the same replica
    enforced the budget (audit). It reads the admits' counts, with their time."""
    gw = await make_gateway(config(redis_server, "open"))
    assert (await gw.chat(headers=ALICE))[0] == 200  # $26 of $40, never read by a view or a scrape
    # Its settle is in Redis and in this replica's memory once written.
    for _ in range(200):
        live = await key_state(gw, BOB)  # bob's view reads only bob's minute and the team's budget
        if live["team_budget"]["spent_usd"] == 26.0 and live["team_budget"]["reserved_usd"] == 0:
            break
        await asyncio.sleep(0.02)
    redis_server.freeze()
    try:
        assert (await gw.chat(headers=ALICE))[0] == 200  # admitted on $26 spent: $52 once settled
        for _ in range(100):
            state = await key_state(gw, ALICE)
            if state["budget"]["spent_usd"] == 52.0:
                break
            await asyncio.sleep(0.02)
        budget = state["budget"]
        assert "state_unavailable" in state
        assert (budget["spent_usd"], budget["reserved_usd"], budget["left_usd"]) == (52.0, 0.0, 0.0), budget
        assert budget["as_of"] <= live["as_of"] and budget["age_s"] >= 0  # when its admit was counted
        status, _, body = await gw.chat(headers=ALICE)  # as the view says: nothing left
        assert status == 402 and b"budget_exhausted" in body, body
    finally:
        redis_server.thaw()
