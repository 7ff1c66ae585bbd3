"""Budget periods: a day, a week (from Monday) or a month, in UTC. Pure: instants in, out.

A period is named by its start (``2026-11-28``, ``2026-W48``, ``2026-11``): spend is kept per
period name, so a new period starts from zero with no reset job, on every replica at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

Period = Literal["day", "week", "month"]


def bounds(period: Period, now_s: float) -> tuple[str, float]:
    """The name of the period ``now_s`` falls in and the epoch second it ends at."""
    now = datetime.fromtimestamp(now_s, UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day.strftime("%Y-%m-%d"), (day + timedelta(days=1)).timestamp()
    if period == "week":
        start = day - timedelta(days=day.weekday())
        year, week, _ = start.isocalendar()
        return f"{year}-W{week:02d}", (start + timedelta(days=7)).timestamp()
    start = day.replace(day=1)
    if start.month == 12:
        end = start.replace(year=start.year + 1, month=1)
    else:
        end = start.replace(month=start.month + 1)
    return start.strftime("%Y-%m"), end.timestamp()


def iso(epoch_s: float) -> str:
    """An instant as people read it in a message: ``2026-11-29T00:00:00Z``."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
