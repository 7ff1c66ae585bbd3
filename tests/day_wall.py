"""A running wall clock kept clear of a UTC midnight, for tests that read a budget period more
than once: a daily, weekly or monthly period ends at a UTC midnight, so a test that admits at
23:59:59.9 and checks at 00:00:00.1 sees the spend reset between its two reads (a test of
what is spent, not of the reset, failing for the time of day it ran)."""

from __future__ import annotations

import time
from collections.abc import Callable

DAY_S = 86_400


def clear_of_midnight(margin_s: float = 120.0) -> Callable[[], float]:
    """``time.time`` itself, unless fewer than ``margin_s`` are left of the UTC day: then the
    same clock moved on to just after the next midnight. Forward, never back: a time Redis
    takes as absolute must not be in its past."""
    now = time.time()
    next_midnight = (now // DAY_S + 1) * DAY_S
    if next_midnight - now > margin_s:
        return time.time
    offset = next_midnight + 1 - now
    return lambda: time.time() + offset
