"""What ``GET /v1/gateway/key`` answers (``Accounts.state_of``) while the shared store does not
answer: the store's last reading, marked with when it was made, or nothing; never this
replica's memory's count. A store that can be switched off plays Redis; the wall clock is a
number the test moves."""

from __future__ import annotations

from typing import Any

from gateway.keys.ledger import Accounts, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state.ledger_ops import LedgerState
from gateway.state.memory import MemoryStore

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 86_400 + 3_600  # 01:00 UTC, a day's period well under way
PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})  # $1 a token in and out
ALICE = KeySpec("alice", team="web", budget=Budget(40.0, "day"), team_budget=Budget(1000.0, "day"))
BOB = KeySpec("bob", team="web", team_budget=Budget(1000.0, "day"))


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Switchable(MemoryStore):
    """Shared while ``up``; down, it reads nothing shared (its memory is one replica's)."""

    backend = "redis"

    def __init__(self, wall: Wall) -> None:
        super().__init__(wall)
        self.up = True

    async def ledger_read_shared(self, *a: Any) -> LedgerState | None:
        return await super().ledger_read_shared(*a) if self.up else None


async def spend(accounts: Accounts, key: KeySpec, times: int) -> None:
    for _ in range(times):
        got = await accounts.admit(key, "m", 20, 10)
        assert isinstance(got, Reservation)
        await accounts.settle(got, {"prompt": 12, "completion": 7})  # $19
    await accounts.flush(final=True)


async def test_the_last_reading_is_shown_with_its_age_and_the_requests_fate() -> None:
    wall = Wall()
    store = Switchable(wall)
    accounts = Accounts(store, PRICES, wall, closed_when_store_down=True)
    await spend(accounts, ALICE, 2)
    live = await accounts.state_of(ALICE)
    assert live["as_of"] == "2027-01-15T01:00:00Z" and live["budget"]["spent_usd"] == 38.0
    store.up = False
    wall.now += 12.5
    down = await accounts.state_of(ALICE)
    assert down["as_of"] is None
    assert down["state_unavailable"]["requests"].startswith("refused (503 accounting_unavailable)")
    assert down["budget"] == {**live["budget"], "as_of": live["as_of"], "age_s": 12.5}
    assert down["team_budget"]["spent_usd"] == 38.0 and down["team_budget"]["age_s"] == 12.5
    assert down["this_minute"] == {**live["this_minute"], "as_of": live["as_of"], "age_s": 12.5}
    assert down["in_flight"] is None
    # Its minute over, the minute's counts say nothing of this one: none shown.
    wall.now += 60
    assert (await accounts.state_of(ALICE))["this_minute"] is None
    # The day over, the last reading was another period's: no figures, only the budget's terms.
    wall.now += 86_400
    budget = (await accounts.state_of(ALICE))["budget"]
    assert budget["usd"] == 40.0 and budget["spent_usd"] is budget["left_usd"] is budget["as_of"] is None


async def test_open_says_requests_are_counted_apart_and_a_key_never_read_shows_no_figures() -> None:
    wall = Wall()
    store = Switchable(wall)
    accounts = Accounts(store, PRICES, wall)
    await spend(accounts, BOB, 1)
    readings = await accounts.budget_readings([BOB])  # a /metrics scrape reads the team's
    assert readings is not None and [r[:6] for r in readings] == [("team", "web", "day", 1000.0, 19.0, 0.0)]
    store.up = False
    await spend(accounts, ALICE, 1)  # served meanwhile, in this replica's memory
    assert await accounts.budget_readings([ALICE, BOB]) is None  # the gauges keep theirs
    down = await accounts.state_of(ALICE)
    assert down["state_unavailable"]["requests"].startswith("served, counted in this replica's memory only")
    assert down["budget"]["spent_usd"] is None  # never read: not the memory's $19
    assert down["team_budget"]["spent_usd"] == 19.0  # the scrape's reading, marked
    assert down["team_budget"]["as_of"] == "2027-01-15T01:00:00Z"
    store.up = True
    assert "state_unavailable" not in await accounts.state_of(ALICE)
