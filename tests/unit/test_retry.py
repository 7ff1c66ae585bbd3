import asyncio

import pytest

from gateway.config import RetryConfig
from gateway.errors import Classification, ErrorType
from gateway.policy.retry import RetryPlan, StopReason, backoff_s, run_with_retries


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def plan(clock: Clock, cfg: RetryConfig | None = None, allow: bool = True) -> RetryPlan:
    return RetryPlan(cfg or RetryConfig(), now=clock, rand=lambda: 0.5, may_retry=lambda: allow)


RL = Classification.of(ErrorType.RATE_LIMIT)
PU = Classification.of(ErrorType.PROVIDER_UNAVAILABLE)


@pytest.mark.parametrize("t", [ErrorType.UNKNOWN, ErrorType.AUTH, ErrorType.BUDGET, ErrorType.CONTEXT_OVERFLOW])
def test_non_retryable_classes_stop_at_once(t: ErrorType) -> None:
    p = plan(Clock())
    assert p.next_wait(Classification.of(t)) is None
    assert p.stopped is StopReason.NOT_RETRYABLE


def test_each_class_has_its_own_retry_count() -> None:
    p = plan(Clock())
    assert [p.next_wait(RL) is not None for _ in range(4)] == [True, True, True, False]
    assert p.stopped is StopReason.EXHAUSTED
    assert [p.next_wait(PU) is not None for _ in range(6)] == [True] * 5 + [False]
    assert p.total_retries == 8


def test_backoff_is_exponential_with_equal_jitter_and_capped() -> None:
    cfg = RetryConfig().provider_unavailable  # base 0.5, cap 10
    assert [backoff_s(cfg, n, 0.0) for n in (1, 2, 3, 4, 5, 6)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0]
    assert [backoff_s(cfg, n, 1.0) for n in (1, 2, 6)] == [0.5, 1.0, 10.0]


def test_server_wait_is_honoured_up_to_the_limit() -> None:
    p = plan(Clock())
    assert p.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=7.0)) == 7.0
    assert p.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=40.0)) is None
    assert p.stopped is StopReason.WAIT_TOO_LONG


def test_no_wait_crosses_the_deadline() -> None:
    clock = Clock()
    p = plan(clock, RetryConfig(deadline_s=10))
    clock.t += 8
    assert p.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=3.0)) is None
    assert p.stopped is StopReason.DEADLINE
    assert p.remaining_s() == pytest.approx(2.0)



def test_a_client_waiting_less_for_the_head_gets_half_of_whats_left_per_attempt() -> None:
    """Gemini CLI gives up without a head after 60 s (57 s with the margin): each attempt may
    take half of what is left while a fallback may follow, so that it still answers in time,
    and all of it on the last upstream; a retry whose wait would end past it is not made, and
    no bound is set for other clients."""
    clock = Clock()
    p = plan(clock)
    assert p.head_share_s() is None
    p.head_by = clock.t + 57
    p.last_hop = False
    assert p.head_share_s() == pytest.approx(28.5)
    clock.t += 28.5  # the first attempt took its share
    assert p.head_share_s() == pytest.approx(14.25)
    assert p.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=3.0)) == 3.0
    clock.t += 27
    assert p.next_wait(Classification.of(ErrorType.RATE_LIMIT, retry_after_s=3.0)) is None
    assert p.stopped is StopReason.DEADLINE and p.client_bound()
    assert p.remaining_s() > 500  # the request's own deadline is untouched
    p.last_hop = True
    assert p.head_share_s() == pytest.approx(1.5)


def test_a_plan_is_the_last_upstreams_until_the_route_says_another_may_follow() -> None:
    """A request sent to one upstream outside the chain (a relayed path, countTokens) gets the
    whole of the client's head time; halved, it was retried at 28.5, 14.25, 7.1, 3.6 s (review)."""
    clock = Clock()
    p = plan(clock)
    p.head_by = clock.t + 57
    assert p.head_share_s() == pytest.approx(57.0)


def test_no_attempt_starts_with_less_than_the_floor_of_the_clients_head_time() -> None:
    """Halving stops at HEAD_FLOOR_S: an attempt whose half would be shorter takes all that is
    left, and no retry starts with less than the floor left (a slow model was called at 28.5,
    14.25, 7.1, 3.6 and 1.8 s through a pool; review)."""
    clock = Clock()
    p = plan(clock)
    p.head_by, p.last_hop = clock.t + 57, False
    clock.t += 57 - 19
    assert p.head_share_s() == pytest.approx(19.0)  # half would be 9.5: below the floor
    assert p.next_wait(PU) is not None  # started within ~0.4 s, it has over 18 s
    clock.t += 8.5
    assert p.head_room()  # 10.5 s left
    assert p.next_wait(PU) is None and p.stopped is StopReason.DEADLINE  # 9.75 s would be left
    assert p.client_bound()
def test_budget_refusal_stops() -> None:
    p = plan(Clock(), allow=False)
    assert p.next_wait(PU) is None and p.stopped is StopReason.BUDGET


def test_run_with_retries_sleeps_the_planned_waits_and_returns_the_last_result() -> None:
    slept: list[float] = []
    results = iter([PU, PU, "ok"])
    calls = 0

    async def attempt() -> object:
        nonlocal calls
        calls += 1
        return next(results)

    async def sleep(s: float) -> None:
        slept.append(s)

    def failure_of(r: object) -> Classification | None:
        return r if isinstance(r, Classification) else None

    p = plan(Clock())
    assert asyncio.run(run_with_retries(attempt, p, failure_of, sleep)) == "ok"
    assert calls == 3 and slept == [0.375, 0.75]

    always = Classification.of(ErrorType.UNKNOWN)

    async def bad() -> object:
        return always

    assert asyncio.run(run_with_retries(bad, plan(Clock()), failure_of, sleep)) is always


def test_a_circuit_probe_stops_as_a_probe_not_as_moving_on() -> None:
    from gateway.config import RetryConfig
    from gateway.errors import Classification, ErrorType
    from gateway.policy.retry import RetryPlan, StopReason

    plan = RetryPlan(RetryConfig(), now=lambda: 0.0, rand=lambda: 0.5, may_retry=lambda: True)
    plan.circuit_probe = True
    plan.hop_cap = lambda c: False  # no fallback would say "moving on" either
    assert plan.next_wait(Classification.of(ErrorType.PROVIDER_UNAVAILABLE)) is None
    assert plan.stopped is StopReason.CIRCUIT_PROBE
