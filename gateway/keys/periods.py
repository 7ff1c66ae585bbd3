"""Budget periods: a day, a week (from Monday) or a month, in a time zone (UTC unless the budget
names one). Pure: instants in, out.

A period is named by its start, as a calendar in its zone reads it (``2026-11-28``, ``2026-W48``,
``2026-11``): spend is kept per period name, so a new period starts from zero with no reset job,
on every replica at once. In a zone with daylight saving a day is 23 or 25 hours twice a year,
and the weeks and months holding those days an hour shorter or longer: a period is its calendar
days, from local midnight to local midnight, whatever their length.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta, tzinfo
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo

Period = Literal["day", "week", "month"]


@lru_cache(maxsize=64)
def zone(name: str) -> tzinfo:
    """The IANA zone ``name`` (config validates it at load); ``UTC`` is UTC itself."""
    return UTC if name == "UTC" else ZoneInfo(name)


def bounds(period: Period, now_s: float, tz: str = "UTC") -> tuple[str, float]:
    """The name of the period ``now_s`` falls in, in zone ``tz``, and the epoch second it ends at."""
    where = zone(tz)
    today = datetime.fromtimestamp(now_s, where).date()
    if period == "day":
        return today.isoformat(), _midnight(today + timedelta(days=1), where)
    if period == "week":
        start = today - timedelta(days=today.weekday())
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}", _midnight(start + timedelta(days=7), where)
    start = today.replace(day=1)
    end = date(start.year + start.month // 12, start.month % 12 + 1, 1)
    return start.strftime("%Y-%m"), _midnight(end, where)


def _midnight(day: date, where: tzinfo) -> float:
    """The instant ``day`` begins in ``where``. Where clocks skip midnight (Havana, Santiago:
    00:00 -> 01:00), zoneinfo reads the missing 00:00 at the offset before the jump, which is
    the instant of the jump: the day's first moment. Where midnight comes twice, the first."""
    return datetime.combine(day, time(0), tzinfo=where).timestamp()


def iso(epoch_s: float) -> str:
    """An instant as people read it in a message: ``2026-11-29T00:00:00Z``."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
