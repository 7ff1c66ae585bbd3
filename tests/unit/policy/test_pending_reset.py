"""A rate limit's pending reset: what a request that ended on it notes, and when a different
request's 429 on the same target is final (gateway/policy/pending_reset.py)."""

import pytest

from gateway.errors import Classification, ErrorType
from gateway.policy.pending_reset import final_wait_s, pending_s, reset_of, target

NOW = 1_795_000_000.0  # seconds
NOW_MS = round(NOW * 1000)


def limited(retry_after_s: float | None = None, reset_at_ms: int | None = None) -> Classification:
    return Classification.of(ErrorType.RATE_LIMIT, retry_after_s=retry_after_s, reset_at_ms=reset_at_ms)


@pytest.mark.parametrize(
    ("c", "noted"),
    [
        (limited(5.0, NOW_MS + 5000), NOW_MS + 5000),  # the classifier's reset wins
        (limited(5.0), NOW_MS + 5000),  # else the stated wait, from now
        (limited(reset_at_ms=NOW_MS + 700), NOW_MS + 700),
        (limited(), None),  # no stated wait: our own backoff holds no one else
        (Classification.of(ErrorType.PROVIDER_UNAVAILABLE, retry_after_s=5.0), None),  # the outage note's
        (Classification.of(ErrorType.BUDGET, retry_after_s=60.0), None),
    ],
)
def test_what_a_request_that_ended_on_a_429_notes(c: Classification, noted: int | None) -> None:
    assert reset_of(c, NOW) == noted


@pytest.mark.parametrize(
    ("noted", "left"),
    [(None, None), (NOW_MS - 1, None), (NOW_MS, None), (NOW_MS + 2500, 2.5)],
)
def test_pending(noted: int | None, left: float | None) -> None:
    assert pending_s(noted, NOW) == (pytest.approx(left) if left is not None else None)


@pytest.mark.parametrize(
    ("c", "noted", "wait"),
    [
        # Gemini CLI's answer model after its routing call ended on the shared model's 429:
        # the provider's own wait for this request.
        (limited(5.0), NOW_MS + 4000, 5.0),
        (limited(), NOW_MS + 4000, 4.0),  # none stated: the pending reset's
        (limited(5.0), None, None),  # nothing pending: retried by the class's rule
        (limited(5.0), NOW_MS - 10, None),  # the reset came
        (Classification.of(ErrorType.PROVIDER_UNAVAILABLE), NOW_MS + 4000, None),  # not a rate limit
    ],
)
def test_a_different_requests_first_429_is_final_while_a_reset_is_pending(
    c: Classification, noted: int | None, wait: float | None
) -> None:
    assert final_wait_s(c, noted, NOW) == (pytest.approx(wait) if wait is not None else None)


def test_targets_are_the_upstreams_model_and_a_forwarded_credential_never_in_clear() -> None:
    assert target("up", "auto-r429") == target("up", "auto-r429")
    assert target("up", "auto-r429") != target("up", "other") != target("other-up", "auto-r429")
    mine, theirs = target("up", "m", "Bearer sk-mine"), target("up", "m", "Bearer sk-theirs")
    assert mine != theirs and "sk-mine" not in mine
    assert len(target("up", "x" * 5000)) < 120  # model names come from clients: bounded
