"""How long a server asked us to wait, from every header and body dialect; garbage never raises."""

import pytest

from gateway.policy.retry_after import (
    go_duration_s,
    http_retry_after_s,
    reset_at_ms,
    restamped,
    restamped_body,
    rfc3339_wait_s,
    server_wait_s,
)

NOW = 1_795_000_000.0  # 2026-11-18T11:06:40Z

RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("1.5s", 1.5), ("250us", 0.00025),
     ("3.89s", 3.89), ("7m12s", 432.0), ("1m26.4s", 86.4), ("0s", 0.0), ("7", 7.0),
     ("", None), ("soon", None), ("5x", None), ("1s garbage", None), ("-5s", None), ("1d", None), ("s", None)],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    got = go_duration_s(text)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("7", 7.0), ("1.5", 1.5), ("Wed, 18 Nov 2026 11:07:00 GMT", 20.0),
     ("Wed, 18 Nov 2026 11:07:00 -0000", 20.0),  # parses naive; still UTC, not local time
     ("Wed, 18 Nov 2026 12:07:00 +0100", 20.0), ("Tue, 17 Nov 2026 00:00:00 GMT", 0.0),
     ("Wed, 31 Feb 2026 11:07:00 GMT", None), ("Wed, 18 Nov 99999 11:07:00 GMT", None), ("tomorrow-ish", None)],
)
def test_http_retry_after(value: str, seconds: float | None) -> None:
    got = http_retry_after_s(value, NOW)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2026-11-18T11:07:10Z", 30.0), ("2026-11-18T11:06:45.500000000Z", 5.5), ("2026-11-18T12:07:10+01:00", 30.0),
     ("2026-11-18T11:00:00Z", 0.0), ("2026-11-18T11:07:10", None), ("next tuesday", None), ("", None)],
)
def test_rfc3339(value: str, seconds: float | None) -> None:
    got = rfc3339_wait_s(value, NOW)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


@pytest.mark.parametrize(
    ("headers", "body", "wait"),
    [
        ({"retry-after": "7"}, None, 7.0),
        ({"retry-after-ms": "250", "retry-after": "9"}, None, 0.25),  # ms is the more precise of the two
        ({"retry-after-ms": "junk", "retry-after": "9"}, None, 9.0),
        ({"retry-after-ms": "-100", "retry-after": "9"}, None, 9.0),
        ({"retry-after": "Wed, 18 Nov 2026 11:07:00 GMT"}, None, 20.0),
        ({"retry-after": "-5"}, None, None),
        ({"retry-after": "nan"}, None, None),
        ({"retry-after": "inf"}, None, None),
        ({"retry-after-ms": "1e400"}, None, None),
        ({"retry-after": "99999999"}, None, None),  # over a week: a parsing accident, not a wait
        # A retry-after outranks the rate-limit reset headers beside it.
        ({"retry-after": "2", "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0"}, None, 2.0),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, None, 360.0),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "0",
          "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "500"}, None, 1.0),
        ({"x-ratelimit-reset-requests": "garbage", "x-ratelimit-reset-tokens": "20ms"}, None, 0.02),
        ({"anthropic-ratelimit-tokens-reset": "2026-11-18T11:07:10Z"}, None, 30.0),
        ({"anthropic-ratelimit-requests-reset": "2026-11-18T11:06:45Z", "anthropic-ratelimit-requests-remaining": "0",
          "anthropic-ratelimit-tokens-reset": "2026-11-18T11:07:40Z"}, None, 5.0),
        ({"anthropic-ratelimit-output-tokens-reset": "2026-11-18T11:06:50Z",
          "anthropic-ratelimit-output-tokens-remaining": "0"}, None, 10.0),
        ({"anthropic-ratelimit-input-tokens-reset": "not a date"}, None, None),
        ({}, {"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "37s"}]}}, 37.0),
        ({}, [{"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "1.5s"}]}}], 1.5),
        ({}, {"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "-3s"}]}}, None),
        ({}, {"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "37"}]}}, None),
        ({}, {"error": {"details": [{"@type": RETRY_INFO, "retryDelay": 37}]}}, None),
        ({}, {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.Help", "retryDelay": "9s"}]}}, None),
        ({"retry-after": "soon"}, {"error": {"details": [{"@type": RETRY_INFO, "retryDelay": "4s"}]}}, 4.0),
        ({}, {"error": "Model x is currently loading", "estimated_time": 20.0}, 20.0),
        ({}, {"error": "Model x is currently loading", "estimated_time": True}, None),
        ({}, {"error": {"details": "nope"}}, None),
        ({}, "a string body", None),
        ({}, None, None),
    ],
)
def test_server_wait(headers: dict[str, str], body: object, wait: float | None) -> None:
    got = server_wait_s(headers, body, NOW)
    assert got == pytest.approx(wait) if wait is not None else got is None


def test_rate_limit_resets_are_ignored_when_asked_but_retry_after_is_not() -> None:
    headers = {"x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0",
               "anthropic-ratelimit-tokens-reset": "2026-11-18T11:07:10Z"}
    assert server_wait_s(headers, None, NOW, rate_limit_resets=False) is None
    assert server_wait_s({**headers, "retry-after": "3"}, None, NOW, rate_limit_resets=False) == 3.0


def test_reset_at_is_epoch_ms() -> None:
    assert reset_at_ms(1.5, NOW) == 1_795_000_001_500
    assert reset_at_ms(0.0004, NOW) == 1_795_000_000_000


def test_a_wait_restamped_on_a_relayed_answer_is_the_only_wait_it_states() -> None:
    """A pool relays one key's 429 with the pool's earliest reset: every header that states a
    wait says that one, and the key's own resets are left out (its limits and what is left stay)."""
    openai_429 = [("Content-Type", "application/json"), ("Retry-After", "50"), ("retry-after-ms", "50000"),
                  ("x-ratelimit-limit-requests", "3"), ("x-ratelimit-remaining-requests", "0"),
                  ("x-ratelimit-reset-requests", "50s"), ("x-ratelimit-reset-tokens", "6m0s")]  # fmt: skip
    out = restamped(openai_429, 39.2)
    assert out == [("Content-Type", "application/json"), ("Retry-After", "40"), ("retry-after-ms", "39200"),
                   ("x-ratelimit-limit-requests", "3"), ("x-ratelimit-remaining-requests", "0")]  # fmt: skip
    assert server_wait_s(dict((k.lower(), v) for k, v in out), None, NOW) == 39.2
    anthropic_429 = [("retry-after", "50"), ("anthropic-ratelimit-requests-remaining", "0"),
                     ("anthropic-ratelimit-requests-reset", "2026-11-30T00:00:50Z"),
                     ("anthropic-ratelimit-unified-reset", "1795000000"), ("request-id", "req_1")]  # fmt: skip
    assert restamped(anthropic_429, 40) == [("retry-after", "40"), ("anthropic-ratelimit-requests-remaining", "0"),
                                            ("request-id", "req_1")]  # fmt: skip
    assert restamped([("ratelimitbysize-reset", "50")], 40) == []  # Mistral's


def test_a_wait_restamped_on_a_relayed_google_body_is_the_one_its_retry_info_states() -> None:
    """Gemini CLI waits what the body's RetryInfo says, not retry-after: a pool's relayed 429
    must not state the key's own wait there (retry-after 40 beside retryDelay "50s", measured)."""
    import json

    doc = {"error": {"code": 429, "message": "Resource exhausted.", "status": "RESOURCE_EXHAUSTED", "details": [
        {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []},
        {"@type": RETRY_INFO, "retryDelay": "50s"}]}}  # fmt: skip
    out = json.loads(restamped_body(json.dumps(doc).encode(), 39.2))
    assert out["error"]["details"][1] == {"@type": RETRY_INFO, "retryDelay": "40s"}  # as retry-after: 40
    assert out["error"]["details"][0] == doc["error"]["details"][0] and out["error"]["message"] == "Resource exhausted."
    assert server_wait_s({}, out, NOW) == 40
    listed = json.loads(restamped_body(json.dumps([doc]).encode(), 39.2))  # the OpenAI-compatible endpoint's
    assert listed[0]["error"]["details"][1]["retryDelay"] == "40s"
    # Nothing to restamp, or not JSON: the very bytes.
    for body in (b'{"error": {"message": "Please try again in 50s."}}', b"not json", b""):
        assert restamped_body(body, 40) is body
