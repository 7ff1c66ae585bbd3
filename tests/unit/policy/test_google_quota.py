"""Google's QuotaFailure read for what it says: per day (back at Google's midnight, not after
the RetryInfo beside it) or per minute, and of one model or of the key. Bodies from
tests/corpus/google.json and wild.json."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from gateway.errors import ErrorType
from gateway.policy.classify import classify
from gateway.policy.google_quota import next_day_s
from gateway.routing.pools import SitOut, sit_out
from tests.corpus_cases import IN_SAMPLE, NOW, body_bytes, classify_case

CASES = {c["name"]: c for c in IN_SAMPLE}
PER_DAY = "gemini-per-day-quota-is-budget"


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.mark.parametrize(
    ("now", "midnight"),
    [
        # "Requests per day (RPD) quotas reset at midnight Pacific time"
        # (https://ai.google.dev/gemini-api/docs/rate-limits): PST is UTC-8, PDT UTC-7.
        ("2026-11-18T11:06:40+00:00", "2026-11-19T08:00:00+00:00"),  # NOW: 03:06:40 PST
        ("2026-07-01T06:59:59+00:00", "2026-07-01T07:00:00+00:00"),  # a second before midnight PDT
        ("2026-07-01T07:00:00+00:00", "2026-07-02T07:00:00+00:00"),  # at midnight: the next one
        ("2026-11-01T07:30:00+00:00", "2026-11-02T08:00:00+00:00"),  # DST ends that day: 25 h long
        ("2026-03-08T08:30:00+00:00", "2026-03-09T07:00:00+00:00"),  # DST begins that day: 23 h long
    ],
)
def test_googles_day_ends_at_midnight_pacific_time(now: str, midnight: str) -> None:
    assert next_day_s(_epoch(now)) == _epoch(midnight)


@pytest.mark.parametrize("name", [PER_DAY, "gemini-wrapped-429-free-tier-per-day-is-budget",
                                  "gemini-minute-and-day-violations-is-budget", "gemini-paid-tier-per-day-is-budget"])  # fmt: skip
def test_a_spent_per_day_quota_is_back_at_googles_midnight_not_after_its_retry_info(name: str) -> None:
    c = classify_case(CASES[name])
    assert c.type is ErrorType.BUDGET
    midnight = _epoch("2026-11-19T08:00:00+00:00")  # NOW is 03:06:40 PST
    assert c.reset_at_ms == round(midnight * 1000)
    assert c.retry_after_s == midnight - NOW


def test_a_pool_sits_a_key_out_of_its_days_quota_until_googles_midnight() -> None:
    """The audit: three keys out of their day sat out RetryInfo's 36 s, called again in bursts
    at 36, 72, 108 s; the 402 said "back in 36 s"."""
    c = classify_case(CASES[PER_DAY])
    now_ms = round(NOW * 1000)
    until, why = sit_out(c, now_ms, rate_limit_s=5, budget_s=300, auth_s=3600, own_key=True) or (0, None)
    assert why is SitOut.BUDGET and until == round(_epoch("2026-11-19T08:00:00+00:00") * 1000)


def test_a_per_minute_quota_keeps_its_retry_info() -> None:
    c = classify_case(CASES["gemini-per-minute-quota-is-rate-limit"])
    assert c.type is ErrorType.RATE_LIMIT and c.retry_after_s == 26.0


@pytest.mark.parametrize(
    "name", [PER_DAY, "gemini-per-minute-quota-is-rate-limit", "gemini-minute-and-day-violations-is-budget",
             "gemini-paid-tier-per-day-is-budget"],  # the last names no model dimension: its quotaId says PerModel
)  # fmt: skip
def test_a_quota_counted_per_model_is_that_models_not_the_keys(name: str) -> None:
    """A key out of flash-lite's free tier still serves gemini-2.5-flash (audit: taken off every
    model, it lost the Gemini CLI conversations kept on it)."""
    assert classify_case(CASES[name]).one_model is True


def _quota_error(violations: list[dict[str, Any]]) -> bytes:
    # The per-day corpus body (tests/corpus/google.json) with its violations replaced.
    doc = dict(CASES[PER_DAY]["body"])
    error = dict(doc["error"])
    error["details"] = [{**error["details"][0], "violations": violations}, error["details"][1]]
    return body_bytes({"error": error})


def test_a_quota_of_the_whole_project_is_the_keys() -> None:
    """A violation counted per project with no model (beside one per model) takes the key from
    every model."""
    per_project = {"quotaMetric": "generativelanguage.googleapis.com/generate_requests_per_project_per_day",
                   "quotaId": "GenerateRequestsPerDayPerProject"}  # fmt: skip
    per_model = CASES[PER_DAY]["body"]["error"]["details"][0]["violations"][0]
    c = classify(429, {}, _quota_error([per_model, per_project]), now_s=NOW)
    assert c.type is ErrorType.BUDGET and c.one_model is False
    assert classify(429, {}, _quota_error([per_model]), now_s=NOW).one_model is True
