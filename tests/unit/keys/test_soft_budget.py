"""Soft budgets (``budget.soft_usd``): crossing one refuses nothing; the first crossing in a
period is reported once, whichever replica's settle crossed it (two ledgers on one store play two
replicas), and the key view says where the budget stands against it. Prices are $1 a token in and
out, so a request's cost is its token count."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError, parse_config
from gateway.keys.ledger import Accounts, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.keys.soft import SoftCrossing
from gateway.state.memory import MemoryStore

T0 = 1_800_000_000.0 - 1_800_000_000.0 % 86_400 + 3_600  # 01:00 UTC
PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})
ALICE = KeySpec("alice", team="web", budget=Budget(50.0, "day", soft_usd=40.0),
                team_budget=Budget(1000.0, "month", soft_usd=60.0))  # fmt: skip
BOB = KeySpec("bob", team="web", team_budget=Budget(1000.0, "month", soft_usd=60.0))


class Wall:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def ledgers(n: int = 1) -> tuple[Wall, list[SoftCrossing], list[Accounts]]:
    wall, seen = Wall(), []
    store = MemoryStore(wall)
    return wall, seen, [Accounts(store, PRICES, wall, on_soft_limit=seen.append) for _ in range(n)]


async def spend(accounts: Accounts, key: KeySpec, usd: int) -> None:
    r = await accounts.admit(key, "m", 1, 1)
    assert isinstance(r, Reservation)
    await accounts.settle(r, {"prompt": usd, "completion": 0})
    if accounts.soft.task is not None:
        await accounts.soft.task  # the read back of what was written


async def test_crossing_the_soft_limit_is_reported_once_and_refuses_nothing() -> None:
    _, seen, [accounts] = ledgers()
    await spend(accounts, ALICE, 30)
    state = (await accounts.state_of(ALICE))["budget"]
    assert (state["soft_usd"], state["soft_limit_crossed"]) == (40.0, False) and seen == []
    await spend(accounts, ALICE, 15)  # $45: past $40, under $50
    [crossing] = seen
    assert crossing == SoftCrossing(kind="key", name="alice", key="alice", team="web", period="day",
                                    period_name="2027-01-15", spent_usd=45.0, soft_usd=40.0, usd=50.0,
                                    resets_at=T0 - 3_600 + 86_400)  # fmt: skip
    await spend(accounts, ALICE, 2)  # served, and not reported again
    assert len(seen) == 1
    state = (await accounts.state_of(ALICE))["budget"]
    assert (state["spent_usd"], state["soft_limit_crossed"], state["left_usd"]) == (47.0, True, 3.0)


async def test_two_replicas_report_a_crossing_once_and_a_new_period_again() -> None:
    wall, seen, (a, b) = ledgers(2)
    await spend(a, ALICE, 39)
    await spend(b, ALICE, 1)  # $40 reached on the other replica
    await spend(a, ALICE, 1)
    assert [(c.kind, c.name, c.spent_usd) for c in seen] == [("key", "alice", 40.0)]
    wall.now += 86_400  # the next day: the key's budget starts again from $0, the team's month goes on
    await spend(a, ALICE, 41)
    assert sorted((c.kind, c.name, c.period_name) for c in seen[1:]) == [
        ("key", "alice", "2027-01-16"), ("team", "web", "2027-01")]  # the team's $82 of its month too


async def test_a_teams_soft_limit_is_reported_naming_the_key_whose_request_crossed_it() -> None:
    _, seen, (a, b) = ledgers(2)
    await spend(a, ALICE, 30)
    await spend(b, BOB, 35)  # web: $65 of its month, past $60
    [crossing] = seen
    assert (crossing.kind, crossing.name, crossing.key, crossing.period, crossing.period_name) == (
        "team", "web", "bob", "month", "2027-01")
    assert (await a.state_of(ALICE))["team_budget"]["soft_limit_crossed"] is True


async def test_a_reload_that_raises_the_soft_limit_warns_again_at_the_new_one() -> None:
    """The claim stood for the budget's period whatever its limit: raised from $40 to $45 by a
    reload, the $45 was crossed in silence (review)."""
    _, seen, [accounts] = ledgers()
    await spend(accounts, ALICE, 41)
    raised = KeySpec("alice", team="web", budget=Budget(50.0, "day", soft_usd=45.0), team_budget=ALICE.team_budget)
    await spend(accounts, raised, 2)  # $43: under the new limit
    assert [c.soft_usd for c in seen] == [40.0]
    await spend(accounts, raised, 3)  # $46
    assert [c.soft_usd for c in seen] == [40.0, 45.0]


async def test_a_budget_without_a_soft_limit_is_never_read_back() -> None:
    _, seen, [accounts] = ledgers()
    plain = KeySpec("carol", budget=Budget(50.0, "day"))
    await spend(accounts, plain, 49)
    assert accounts.soft.task is None and seen == []
    assert "soft_usd" not in (await accounts.state_of(plain))["budget"]


UP = "upstreams: [{name: local, base_url: 'http://127.0.0.1:8000/v1'}]\n"


@pytest.mark.parametrize("soft", [50, 60])
def test_a_soft_limit_at_or_above_the_budget_is_refused_at_load(soft: int) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(UP + f"keys: [{{name: a, key: gk-a, budget: {{usd: 50, soft_usd: {soft}}}}}]\n", env={})
    assert f"soft_usd ({soft}) must be below usd (50)" in str(e.value) and "keys" in str(e.value)
