"""Budget periods in a time zone (``budget.timezone``): a period is its calendar days from local
midnight to local midnight, named by its start as that zone's calendar reads it, whatever the
days' lengths; its end is answered in UTC. Dates of the 2026 daylight-saving changes are
tzdata's (United States: second Sunday of March, first of November; European Union: last
Sunday of March and of October; Cuba: clocks go from 00:00 to 01:00)."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from gateway.config import ConfigError, parse_config
from gateway.keys.ledger import Accounts, LimitHit, Reservation
from gateway.keys.periods import bounds, iso
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state.memory import MemoryStore

H = 3600.0


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def start_of(period: str, now: float, tz: str) -> float:
    """The instant the period holding ``now`` began: the end of the one before it."""
    name, end = bounds(period, now, tz)  # type: ignore[arg-type]
    lo, hi = now - 32 * 24 * H, now
    while hi - lo > 0.5:  # the last instant whose period is another one
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if bounds(period, mid, tz)[0] != name else (lo, mid)  # type: ignore[arg-type]
    return bounds(period, lo, tz)[1]  # type: ignore[arg-type]


@pytest.mark.parametrize(("tz", "now", "name", "start", "hours"), [
    ("UTC", "2026-11-28T23:00:00", "2026-11-28", "2026-11-28T00:00:00Z", 24),
    ("America/Los_Angeles", "2026-11-29T03:00:00", "2026-11-28", "2026-11-28T08:00:00Z", 24),  # Saturday evening there
    ("America/Los_Angeles", "2026-03-08T12:00:00", "2026-03-08", "2026-03-08T08:00:00Z", 23),  # spring forward
    ("America/Los_Angeles", "2026-11-01T12:00:00", "2026-11-01", "2026-11-01T07:00:00Z", 25),  # fall back
    ("America/Los_Angeles", "2026-03-08T07:59:59", "2026-03-07", "2026-03-07T08:00:00Z", 24),  # a second before
    ("Europe/Berlin", "2026-03-29T12:00:00", "2026-03-29", "2026-03-28T23:00:00Z", 23),
    ("Europe/Berlin", "2026-10-25T12:00:00", "2026-10-25", "2026-10-24T22:00:00Z", 25),
    ("America/Havana", "2026-03-08T12:00:00", "2026-03-08", "2026-03-08T05:00:00Z", 23),  # no midnight that day
    ("Asia/Kolkata", "2026-11-28T20:00:00", "2026-11-29", "2026-11-28T18:30:00Z", 24),  # a half-hour offset
])  # fmt: skip
def test_a_day_runs_from_local_midnight_to_local_midnight(tz: str, now: str, name: str, start: str,
                                                           hours: int) -> None:  # fmt: skip
    got, end = bounds("day", at(now), tz)
    assert got == name
    assert iso(start_of("day", at(now), tz)) == start
    assert end - start_of("day", at(now), tz) == hours * H


def test_weeks_and_months_holding_a_dst_change_are_an_hour_short_or_long() -> None:
    la = "America/Los_Angeles"
    name, end = bounds("week", at("2026-03-10T12:00:00"), la)  # Monday 9 March to Monday 16 March
    assert (name, iso(end)) == ("2026-W11", "2026-03-16T07:00:00Z")
    name, end = bounds("week", at("2026-03-04T12:00:00"), la)  # holds Sunday 8 March
    assert (name, iso(end)) == ("2026-W10", "2026-03-09T07:00:00Z")
    assert end - start_of("week", at("2026-03-04T12:00:00"), la) == 7 * 24 * H - H
    name, end = bounds("month", at("2026-11-15T12:00:00"), la)
    assert (name, iso(end)) == ("2026-11", "2026-12-01T08:00:00Z")
    assert end - start_of("month", at("2026-11-15T12:00:00"), la) == 30 * 24 * H + H
    # A month's name is its start's in the zone: 1 December 05:00 UTC is still November there.
    assert bounds("month", at("2026-12-01T05:00:00"), la)[0] == "2026-11"
    assert bounds("month", at("2026-12-31T23:00:00"), la) == ("2026-12", at("2027-01-01T08:00:00"))


@pytest.mark.parametrize("tz", ["UTC", "America/Los_Angeles", "Europe/Berlin", "America/Havana",
                                "America/Santiago", "Australia/Lord_Howe", "Pacific/Chatham"])  # fmt: skip
@pytest.mark.parametrize("period", ["day", "week", "month"])
def test_periods_tile_time_with_neither_gap_nor_overlap(tz: str, period: str) -> None:
    """Every replica names the instant's period alike from the instant alone: each period ends
    where the next one begins, through a year of DST changes (Lord Howe's are half an hour)."""
    rng = random.Random(7)
    for now in sorted(at("2026-01-01T00:00:00") + rng.random() * 366 * 24 * H for _ in range(300)):
        name, end = bounds(period, now, tz)  # type: ignore[arg-type]
        assert end > now
        assert bounds(period, end - 0.001, tz)[0] == name  # type: ignore[arg-type]
        after, later = bounds(period, end, tz)  # type: ignore[arg-type]
        assert after != name and later > end


def test_utc_is_as_before() -> None:
    now = at("2026-11-28T12:34:56")
    assert bounds("day", now) == ("2026-11-28", at("2026-11-29T00:00:00"))
    assert bounds("week", now) == ("2026-W48", at("2026-11-30T00:00:00"))
    assert bounds("month", now) == ("2026-11", at("2026-12-01T00:00:00"))


UP = "upstreams: [{name: local, base_url: 'http://127.0.0.1:8000/v1'}]\n"


@pytest.mark.parametrize("given", ["America/LosAngeles", "PST", "-08:00", "'../../etc/passwd'", "' UTC'", "''",
                                   "localtime", "posixrules", "Factory", "right/America/Los_Angeles",
                                   "posix/Europe/Berlin", "Etc/GMT+8", "Etc/GMT-14"])
def test_a_time_zone_that_is_no_iana_name_is_refused_at_load(given: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(UP + f"keys: [{{name: a, key: gk-a, budget: {{usd: 5, timezone: {given}}}}}]\n", env={})
    assert "keys.0.budget.timezone" in str(e.value) or "keys[0].budget.timezone" in str(e.value)
    assert "is not an IANA time zone name: give one such as America/Los_Angeles" in str(e.value)


def test_a_budget_is_in_utc_unless_it_names_a_zone() -> None:
    cfg = parse_config(UP + "keys: [{name: a, key: gk-a, budget: {usd: 5}}]\n"
                       "teams: [{name: t, budget: {usd: 9, period: day, timezone: Europe/Berlin}}]\n", env={})
    assert cfg.keys[0].budget is not None and cfg.keys[0].budget.timezone == "UTC"
    assert cfg.teams[0].budget is not None and cfg.teams[0].budget.timezone == "Europe/Berlin"


async def test_the_ledger_counts_a_zoned_budget_under_its_local_day_and_answers_its_end_in_utc() -> None:
    now = at("2026-11-29T03:00:00")  # Saturday 28 November, 19:00 in Los Angeles
    store = MemoryStore(lambda: now)
    accounts = Accounts(store, PriceTable.of({"m": Price(1_000_000, 1_000_000)}), lambda: now)
    key = KeySpec("alice", budget=Budget(30.0, "day", "America/Los_Angeles"))
    r = await accounts.admit(key, "m", 10, 10)
    assert isinstance(r, Reservation) and r.budgets == ("key:alice@America/Los_Angeles:2026-11-28",)
    await accounts.settle(r, {"prompt": 10, "completion": 20})
    state = await accounts.state_of(key)
    assert state["budget"] == {"usd": 30.0, "period": "day", "timezone": "America/Los_Angeles", "spent_usd": 30.0,
                               "reserved_usd": 0.0, "left_usd": 0.0, "resets_at": "2026-11-29T08:00:00Z"}
    refused = await accounts.admit(key, "m", 10, 10)
    assert isinstance(refused, LimitHit) and refused.kind == "budget" and refused.reset_at_s == at("2026-11-29T08:00:00")
    assert refused.message == "key 'alice' spent $30.00 of its $30.00 daily budget; resets 2026-11-29T08:00:00Z"
    readings = await accounts.budget_readings([key])  # what /metrics shows: the same period, the same end
    assert readings == [("key", "alice", "day", 30.0, 30.0, 0.0, at("2026-11-29T08:00:00"))]


async def test_a_zone_changed_mid_period_never_reads_another_zones_period_as_its_own() -> None:
    """Kept under the period's name alone, a UTC day spent on 29 November was read, after a
    reload moved the budget to Los Angeles at 03:00Z on the 30th, as Los Angeles's own 29
    November: spent, refused until 08:00Z (review). Each zone's periods are kept apart."""
    now = at("2026-11-29T12:00:00")
    store = MemoryStore(lambda: now)
    accounts = Accounts(store, PriceTable.of({"m": Price(1_000_000, 1_000_000)}), lambda: now)
    utc = KeySpec("alice", budget=Budget(50.0, "day"))
    r = await accounts.admit(utc, "m", 1, 1)
    assert isinstance(r, Reservation) and r.budgets == ("key:alice:2026-11-29",)  # UTC's as before
    await accounts.settle(r, {"prompt": 50, "completion": 0})
    now = at("2026-11-30T03:00:00")
    la = KeySpec("alice", budget=Budget(50.0, "day", "America/Los_Angeles"))
    r = await accounts.admit(la, "m", 1, 1)
    assert isinstance(r, Reservation), r
    assert (await accounts.state_of(la))["budget"]["spent_usd"] == 0.0


@pytest.mark.parametrize(("given", "meant"), [("EST", "America/New_York"), ("MST", "America/Denver")])
def test_a_us_abbreviation_that_tzdata_keeps_as_a_fixed_offset_is_refused_at_load(given: str, meant: str) -> None:
    # "EST" is a zone to tzdata, UTC-5 all year: a team in New York that wrote it had its summer
    # days begin at 01:00 there, as a fixed "-05:00" would (refused above), while "PST" is refused.
    with pytest.raises(ConfigError) as e:
        parse_config(UP + f"keys: [{{name: a, key: gk-a, budget: {{usd: 5, timezone: {given}}}}}]\n", env={})
    assert "keys.0.budget.timezone" in str(e.value) or "keys[0].budget.timezone" in str(e.value)
    assert f"'{given}' is a fixed offset" in str(e.value) and meant in str(e.value)


@pytest.mark.parametrize("given", ["EST5EDT", "HST", "America/Phoenix"])
def test_a_zone_whose_rules_are_its_places_own_is_taken(given: str) -> None:
    cfg = parse_config(UP + f"keys: [{{name: a, key: gk-a, budget: {{usd: 5, timezone: {given}}}}}]\n", env={})
    assert cfg.keys[0].budget is not None and cfg.keys[0].budget.timezone == given
