"""The fake upstream's per-key limits (gateway/fake/limits.py) and how they are written
(gateway/fake/keyed.py): pure, on a clock the test moves."""

from __future__ import annotations

import pytest

from gateway.fake.gate import answer_tokens
from gateway.fake.keyed import credential_of, go_duration, rate_headers, rfc3339
from gateway.fake.limits import Bucket, KeyLimits
from gateway.fake.messages import anthropic_stream
from gateway.fake.responses import responses_stream
from gateway.policy.retry_after import go_duration_s, rfc3339_wait_s

T0 = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.mark.parametrize(("seconds", "text"), [
    (0, "0s"), (0.012, "12ms"), (0.0004, "1ms"), (1, "1s"), (3.89, "3.89s"), (59.5, "59.5s"),
    (60, "1m0s"), (360, "6m0s"), (90.25, "1m30.25s"), (3600, "1h0m0s"), (3723.5, "1h2m3.5s"),
])  # fmt: skip
def test_go_durations_read_as_go_prints_them_and_parse_back(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text
    parsed = go_duration_s(text)
    assert parsed is not None and seconds <= parsed < seconds + 0.001


def test_rfc3339_resets_are_whole_seconds_never_early() -> None:
    assert rfc3339(T0) == "2027-01-15T08:00:00Z"
    assert rfc3339(T0 + 0.2) == "2027-01-15T08:00:01Z"
    wait = rfc3339_wait_s(rfc3339(T0 + 17.3), T0)
    assert wait is not None and 17.3 <= wait < 18.3


@pytest.mark.parametrize(("headers", "key"), [
    ({"Authorization": "Bearer sk-a"}, "sk-a"), ({"authorization": "bearer sk-a "}, "sk-a"),
    ({"x-api-key": "ant-b"}, "ant-b"), ({"api-key": "az-c"}, "az-c"),
    ({"x-api-key": "ant-b", "Authorization": "Bearer sk-a"}, "ant-b"),
    ({}, None), ({"Authorization": "Basic abc"}, None), ({"Authorization": "Bearer "}, None),
])  # fmt: skip
def test_the_credential_is_read_from_each_apis_header(headers: dict[str, str], key: str | None) -> None:
    from multidict import CIMultiDict

    assert credential_of(CIMultiDict(headers)) == key


def test_a_bucket_refills_continuously_and_resets_when_full(clock: Clock) -> None:
    b = Bucket(60, at=clock.now)
    b.take(3)
    assert b.remaining() == 57 and b.full_in() == pytest.approx(3.0)
    clock.now += 1.5
    b.refill(clock.now)
    assert b.remaining() == 58 and b.full_in() == pytest.approx(1.5)
    clock.now += 100
    b.refill(clock.now)
    assert b.remaining() == 60 and b.full_in() == 0


def test_requests_are_counted_per_key_independently(clock: Clock) -> None:
    keys = KeyLimits(clock)
    keys.limit("a", rpm=3)
    keys.limit("b", rpm=5)
    for _ in range(2):
        assert keys.admit("a", 10) is None
    assert keys.admit("b", 10) is None
    a, b = keys.snapshot("a"), keys.snapshot("b")
    assert a is not None and a.requests is not None and a.requests.remaining() == 1
    assert b is not None and b.requests is not None and b.requests.remaining() == 4
    assert keys.admit("unconfigured", 10) is None and keys.snapshot("unconfigured") is None


def test_past_the_rpm_a_request_is_refused_with_the_wait_for_one_request(clock: Clock) -> None:
    keys = KeyLimits(clock)
    keys.limit("a", rpm=3)
    for _ in range(3):
        assert keys.admit("a", 1) is None
    v = keys.admit("a", 1)
    assert v is not None and v.reason == "requests" and v.wait_s == pytest.approx(20.0)
    clock.now += 20
    assert keys.admit("a", 1) is None


def test_tokens_are_charged_from_usage_and_refused_past_the_tpm(clock: Clock) -> None:
    keys = KeyLimits(clock)
    keys.limit("a", tpm=100)
    assert keys.admit("a", 30) is None
    keys.charge("a", 90)
    v = keys.admit("a", 30)
    assert v is not None and v.reason == "tokens" and (v.used, v.requested) == (90, 30)
    assert v.wait_s == pytest.approx(12.0)  # 20 tokens short, 100 a minute
    too_large = keys.admit("a", 101)
    assert too_large is not None and too_large.reason == "too_large"


def test_states_come_before_limits_and_limited_ends_on_time(clock: Clock) -> None:
    keys = KeyLimits(clock)
    keys.limited_until("a", T0 + 30)
    v = keys.check("a")
    assert v is not None and v.reason == "limited" and v.wait_s == 30
    clock.now += 30
    assert keys.check("a") is None
    keys.revoke("b")
    keys.exhaust("c")
    assert [keys.check(k).reason for k in "bc"] == ["revoked", "exhausted"]  # type: ignore[union-attr]
    keys.restore("b")
    assert keys.check("b") is None and keys.check(None) is None


def test_headers_parse_back_to_the_waits_they_state(clock: Clock) -> None:
    keys = KeyLimits(clock)
    keys.limit("a", rpm=10, tpm=1000)
    keys.admit("a", 0)
    keys.charge("a", 250)
    oa = rate_headers("openai", keys.snapshot("a"), clock.now)
    assert (oa["x-ratelimit-limit-requests"], oa["x-ratelimit-remaining-requests"]) == ("10", "9")
    assert (oa["x-ratelimit-limit-tokens"], oa["x-ratelimit-remaining-tokens"]) == ("1000", "750")
    assert go_duration_s(oa["x-ratelimit-reset-requests"]) == pytest.approx(6.0)
    assert go_duration_s(oa["x-ratelimit-reset-tokens"]) == pytest.approx(15.0)
    an = rate_headers("anthropic", keys.snapshot("a"), clock.now)
    assert an["anthropic-ratelimit-requests-remaining"] == "9" and an["anthropic-ratelimit-tokens-limit"] == "1000"
    assert rfc3339_wait_s(an["anthropic-ratelimit-requests-reset"], clock.now) == pytest.approx(6.0, abs=1)
    assert rfc3339_wait_s(an["anthropic-ratelimit-tokens-reset"], clock.now) == pytest.approx(15.0, abs=1)
    limited = rate_headers("openai", None, clock.now, limited_s=90, rpm=60)
    assert limited == {"x-ratelimit-limit-requests": "60", "x-ratelimit-remaining-requests": "0",
                       "x-ratelimit-reset-requests": "1m30s"}  # fmt: skip


def test_answer_tokens_read_each_apis_usage() -> None:
    assert answer_tokens([{"usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}}]) == 19
    assert answer_tokens(anthropic_stream()) == 25 + 15  # message_start's input, message_delta's output
    assert answer_tokens(responses_stream()) == 30 + 9
    assert answer_tokens([{"choices": []}, b"data: [DONE]\n\n"]) is None
