import pytest

from gateway.policy.retry_after import go_duration_s, reset_at_ms, server_wait_s

NOW = 1_795_000_000.0  # Wed, 18 Nov 2026 ... UTC


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("6m0s", 360.0), ("1s", 1.0), ("20ms", 0.02), ("1h2m3.5s", 3723.5), ("1.5s", 1.5), ("250us", 0.00025),
     ("7", 7.0), ("", None), ("soon", None), ("5x", None), ("1s garbage", None)],
)
def test_go_durations(text: str, seconds: float | None) -> None:
    got = go_duration_s(text)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


@pytest.mark.parametrize(
    ("headers", "body", "wait"),
    [
        ({"retry-after": "7"}, None, 7.0),
        ({"retry-after": "1.5"}, None, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, None, 0.25),
        ({"retry-after-ms": "junk", "retry-after": "9"}, None, 9.0),
        ({"retry-after": "Wed, 18 Nov 2026 11:07:00 GMT"}, None, 20.0),
        ({"retry-after": "Tue, 17 Nov 2026 00:00:00 GMT"}, None, 0.0),  # in the past: retry now
        ({"retry-after": "-5"}, None, None),
        ({"retry-after": "tomorrow-ish"}, None, None),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-reset-tokens": "6m0s"}, None, 360.0),
        ({"x-ratelimit-reset-requests": "1s", "x-ratelimit-remaining-requests": "0",
          "x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "500"}, None, 1.0),
        ({"anthropic-ratelimit-tokens-reset": "2026-11-18T11:07:10Z"}, None, 30.0),
        ({"anthropic-ratelimit-requests-reset": "2026-11-18T11:06:45Z", "anthropic-ratelimit-requests-remaining": "0",
          "anthropic-ratelimit-tokens-reset": "2026-11-18T11:07:40Z"}, None, 5.0),
        ({}, {"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}]}}, 37.0),
        ({}, [{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}], 1.5),
        ({}, {"error": "Model x is currently loading", "estimated_time": 20.0}, 20.0),
        ({}, {"error": {"details": "nope"}}, None),
        ({}, None, None),
        ({"retry-after": "99999999"}, None, None),
    ],
)
def test_server_wait(headers: dict[str, str], body: object, wait: float | None) -> None:
    got = server_wait_s(headers, body, NOW)
    assert got == pytest.approx(wait) if wait is not None else got is None


def test_rate_limit_resets_are_ignored_when_asked() -> None:
    headers = {"x-ratelimit-reset-tokens": "6m0s", "x-ratelimit-remaining-tokens": "0"}
    assert server_wait_s(headers, None, NOW, rate_limit_resets=False) is None


def test_reset_at_is_epoch_ms() -> None:
    assert reset_at_ms(1.5, NOW) == 1_795_000_001_500
