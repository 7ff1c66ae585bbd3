"""Google RESOURCE_EXHAUSTED: what its QuotaFailure quota ids say about the quota that refused.

Gemini says "You exceeded your current quota ... billing details" for a per-minute limit and a
per-day one alike, so only the violations tell them apart. They say three things:

* **per day or per minute**: a per-day quota (or a quota of 0: the plan cannot use the model
  at all) is a budget, a per-minute one a rate limit;
* **when a per-day quota comes back**: at Google's midnight. "Requests per day (RPD) quotas
  reset at midnight Pacific time." (https://ai.google.dev/gemini-api/docs/rate-limits). The
  RetryInfo that rides along (5-36 s in the corpus) is no such reset: a pool that believed it
  called each spent key again every half minute, all day (audit: 12 calls in 110 s for three
  keys). A per-day token quota is counted over the same day;
* **whose quota it is**: ids such as ``GenerateRequestsPerDayPerProjectPerModel-FreeTier``
  (and ``quotaDimensions.model``) count one model. A key out of flash-lite's small free-tier
  quota still serves gemini-2.5-flash; taken off every model, it lost the conversations Gemini
  CLI keeps on it (its auto mode sends a flash-lite call before each prompt).

Pure: no I/O, no clock (``now_s`` is passed in); malformed bodies never raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from gateway.errors import ErrorType
from gateway.policy.error_fields import Fields, dicts

# Where Google's day ends (the page above: "midnight Pacific time"; DST included).
GOOGLE_DAY = ZoneInfo("America/Los_Angeles")


@dataclass(frozen=True, slots=True)
class GoogleQuota:
    kind: ErrorType  # budget (per day, or a quota of 0) or rate limit (per minute)
    evidence: str
    daily: bool  # a per-day quota was spent: back at Google's next midnight
    per_model: bool  # every quota spent counts one model, not the key's every model


def read(f: Fields) -> GoogleQuota | None:
    """The first QuotaFailure of a RESOURCE_EXHAUSTED error; None when there is none."""
    for doc in f.docs:
        if doc.get("status") != "RESOURCE_EXHAUSTED":
            continue
        for d in dicts(doc.get("details")):
            if not str(d.get("@type", "")).endswith("QuotaFailure"):
                continue
            violations = dicts(d.get("violations"))
            per_model = bool(violations) and all(_per_model(v) for v in violations)
            for v in violations:
                ident = f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}".lower()
                if "perday" in ident or "per_day" in ident or "daily" in ident:
                    return GoogleQuota(ErrorType.BUDGET, f"code:QuotaFailure {v.get('quotaId') or 'per day'}",
                                       True, per_model)  # fmt: skip
            for v in violations:
                if str(v.get("quotaValue")) == "0":
                    return GoogleQuota(ErrorType.BUDGET, "code:QuotaFailure quotaValue 0", False, per_model)
            return GoogleQuota(ErrorType.RATE_LIMIT, "code:QuotaFailure per minute", False, per_model)
    return None


def _per_model(v: dict[str, object]) -> bool:
    dims = v.get("quotaDimensions")
    if isinstance(dims, dict) and dims.get("model"):
        return True
    return "permodel" in str(v.get("quotaId", "")).lower()


def next_day_s(now_s: float) -> float:
    """The epoch seconds of the next midnight in Google's time zone after ``now_s``."""
    local = datetime.fromtimestamp(now_s, GOOGLE_DAY)
    # The calendar's next day, then its midnight in the zone: a day of 23 or 25 hours (a DST
    # change) ends where the zone says, not 24 hours on.
    midnight = datetime.combine(local.date() + timedelta(days=1), time(0), tzinfo=GOOGLE_DAY)
    return midnight.timestamp()
