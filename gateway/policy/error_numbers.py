"""What the numbers in an error body say: request size against a limit, and how far the reset is.

Two questions decide many 429s that wording cannot:

* **Requested vs limit.** "Limit 6000, Requested 12328" on a tokens-per-minute window: this
  one request is bigger than the whole window, so no wait ever lets it through; a shorter
  request is the remedy (``context_overflow``). "Limit 30000, Used 28039, Requested 3906": the
  request fits once the window moves (``rate_limit``).
* **The reset horizon.** A limit that resets in seconds or minutes is a rate limit; one that
  resets hours or days away (a 5-hour plan window, a daily free allocation, a monthly
  spending cap) is, for the client waiting on it, a ``budget``. The wait the server *states*
  (``resets_in_seconds``, "try again in 9m38s", "retry after 86400 seconds") outranks the
  window its wording *names* ("per day", "5-hour usage limit"), because a sliding daily
  window that says "try again in 8.6s" frees up in 8.6 s.

Pure: the current time is passed in (for ``resets_at`` epochs); garbage is ignored.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from gateway.policy.retry_after import go_duration_s

BUDGET_HORIZON_S = 3600.0  # a limit that resets an hour or more away is a budget, not a rate limit
_MAX_S = 400 * 24 * 3600.0  # a year and a bit: anything further is a parsing accident

_N = r"~?([\d,]+)"
# "Limit 7000, Used 0, Requested ~12903" (Groq, OpenAI), "Limit 6000, Requested 12328" (Groq 413)
_LIMIT_REQUESTED = re.compile(rf"\bLimit:?\s*{_N}(?:,\s*Used:?\s*{_N})?,\s*Requested:?\s*{_N}", re.IGNORECASE)
# xAI: "Tokens per Minute (actual/limit): 65605/16000"
_ACTUAL_LIMIT = re.compile(r"\(actual/limit\):\s*([\d,]+)\s*/\s*([\d,]+)", re.IGNORECASE)
_PER_MINUTE = re.compile(r"per[ _-]?min(?:ute)?\b|\bTPM\b|\bRPM\b|per[ _-]?second", re.IGNORECASE)

# A wait stated in words. Go-style durations ("9m38.016s", "494ms") or a number and a unit.
_STATED_WAIT = re.compile(
    r"(?:try again|retry|resets?|available again|wait)\s+(?:in|after)\s+(?:about\s+)?"
    r"(\d+(?:\.\d+)?(?:h|ms|m|s)(?:[\d.]+(?:ms|m|s))*|\d+(?:\.\d+)?)\s*"
    r"(days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)?\b",
    re.IGNORECASE,
)
# "Please wait 85841 seconds before retrying." (GitHub Models, Azure AI inference): no "in" or
# "after", so the unit must be spelled out or a stray number would read as a wait.
_WAIT_FOR = re.compile(
    r"\bwait\s+(?:for\s+)?(\d+(?:\.\d+)?)\s*(days?|hours?|hrs?|minutes?|mins?|seconds?|secs?)\b",
    re.IGNORECASE,
)
_UNIT_S = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}
# A window the wording names: a reset that far away, unless a wait is stated. "N calls / month"
# and "/ minute" are Cohere's trial keys (docs.cohere.com/v1/reference/errors, 429): the same
# "upgrade to a Production key" is offered with both, so only the window tells them apart.
_WINDOWS: tuple[tuple[re.Pattern[str], float, str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), s, name)
    for p, s, name in (
        (r"\bper[ _-]?month\b|\bmonthly\b|\bper[ _-]?week\b|\bweekly\b|\bcalls / month\b"
         r"|每月|每周", 7 * 86400.0, "week or month"),
        (r"\bper[ _-]?day\b|\bdaily\b|\bper[ _-]?24 ?h|\bday limit\b|每日|每天|当日", 86400.0, "day"),
        (r"\b(\d+)[ -]?h(?:ours?)?\b(?! ago)|(\d+) ?小时|\bhourly\b|\bper[ _-]?hour\b"
         r"|\bsession usage limit\b", 3600.0, "hours"),
        (r"\bper[ _-]?min(?:ute)?\b|\bTPM\b|\bRPM\b|\bper[ _-]?second\b|\bconcurrency\b|\bcalls / minute\b",
         60.0, "minute"),
    )
)
# A window given in seconds: GitHub Models' "Rate limit of 8 per 86400s exceeded for
# UserByModelByDay", "15 per 60s ... UserByModelByMinute".
_SECONDS_WINDOW = re.compile(r"\bper (\d+) ?s(?:ec(?:ond)?s?)?\b", re.IGNORECASE)
_ZERO_LIMIT = re.compile(r"\blimit: 0\b|\(0/0 used\)")  # Google, MiniMax: the plan has no quota at all


@dataclass(frozen=True, slots=True)
class Sizes:
    requested: int
    limit: int
    used: int | None
    per_minute: bool  # the limit is a per-minute (or per-second) throughput window


@dataclass(frozen=True, slots=True)
class Horizon:
    seconds: float
    source: str  # evidence: where the horizon was read


def sizes(text: str) -> Sizes | None:
    """The request size and the limit it was measured against, when the body gives both."""
    m = _LIMIT_REQUESTED.search(text)
    if m:
        limit, used, requested = _int(m.group(1)), _int(m.group(2)), _int(m.group(3))
        window_text = text[max(0, m.start() - 200) : m.start()]
        if limit is not None and requested is not None:
            return Sizes(requested, limit, used, bool(_PER_MINUTE.search(window_text)))
    m = _ACTUAL_LIMIT.search(text)
    if m:
        actual, limit = _int(m.group(1)), _int(m.group(2))
        window_text = text[max(0, m.start() - 200) : m.start()]
        if actual is not None and limit is not None:
            return Sizes(actual, limit, None, bool(_PER_MINUTE.search(window_text)))
    return None


def stated_wait_s(text: str, docs: tuple[dict[str, Any], ...], now_s: float) -> Horizon | None:
    """The wait the body itself states: a field (``resets_in_seconds``, ``resets_at``) or words."""
    for doc in docs:
        seconds = _number(doc.get("resets_in_seconds"))
        if seconds is not None:
            return Horizon(seconds, f"body resets_in_seconds={seconds:g}")
        at = _number(doc.get("resets_at"))
        if at is not None and at > now_s:
            return Horizon(at - now_s, f"body resets_at={at:g}")
    for pattern in (_STATED_WAIT, _WAIT_FOR):
        for m in pattern.finditer(text):
            wait = _wait_of(m.group(1), m.group(2))
            if wait is not None:
                return Horizon(wait, f"body '{m.group(0).strip()}'")
    return None


def named_window_s(text: str) -> Horizon | None:
    """The window the wording names, the longest first: a plan's month outlasts its minute."""
    named = _named_window(text)
    m = _SECONDS_WINDOW.search(text)
    span = _sane(float(m.group(1))) if m else None
    if m and span and (named is None or span > named.seconds):
        return Horizon(span, f"window {m.group(1)}s")
    return named


def _named_window(text: str) -> Horizon | None:
    for pattern, seconds, name in _WINDOWS:
        m = pattern.search(text)
        if m:
            hours = next((g for g in m.groups() if g), None) if m.groups() else None
            span = seconds * int(hours) if hours and name == "hours" else seconds
            if span > 0:
                return Horizon(span, f"window {name}")
    return None


def zero_limit(text: str) -> bool:
    return _ZERO_LIMIT.search(text) is not None


def _wait_of(amount: str, unit: str | None) -> float | None:
    if unit:
        try:
            value = float(amount)
        except ValueError:
            return None
        return _sane(value * _UNIT_S[unit[0].lower()])
    return _sane(go_duration_s(amount))


def _sane(value: float | None) -> float | None:
    if value is None or math.isnan(value) or value < 0 or value > _MAX_S:
        return None
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _sane(float(value)) if value < _MAX_S else float(value)  # resets_at is an epoch
    return None


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return None
