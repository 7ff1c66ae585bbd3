from gateway.config import CircuitBreakerConfig, RetryBudgetConfig
from gateway.policy.breaker import CircuitBreaker, CircuitState, RetryBudget


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_circuit_opens_after_consecutive_failures_then_one_probe_decides() -> None:
    clock = Clock()
    changes: list[CircuitState] = []
    b = CircuitBreaker(CircuitBreakerConfig(failure_threshold=3, open_s=30), clock, changes.append)
    for _ in range(2):
        assert b.allow()
        b.record_failure()
    b.record_success()  # resets the streak
    for _ in range(3):
        assert b.allow()
        b.record_failure()
    assert b.state is CircuitState.OPEN and not b.allow()
    assert b.retry_in_s() == 30
    clock.t = 29.9
    assert not b.allow()
    clock.t = 30
    assert b.allow()  # the probe
    assert not b.allow()  # only one
    b.record_failure()
    assert b.state is CircuitState.OPEN and not b.allow()
    clock.t = 61
    assert b.allow()
    b.record_success()
    assert b.state is CircuitState.CLOSED and b.allow()
    assert changes == [CircuitState.OPEN, CircuitState.HALF_OPEN, CircuitState.OPEN,
                       CircuitState.HALF_OPEN, CircuitState.CLOSED]


def test_abandoned_probe_frees_the_slot() -> None:
    clock = Clock()
    b = CircuitBreaker(CircuitBreakerConfig(failure_threshold=1, open_s=1), clock)
    b.record_failure()
    clock.t = 2
    assert b.allow()
    b.record_abandoned()
    assert b.allow()


def test_retry_budget_is_a_share_of_recent_requests_plus_a_reserve() -> None:
    clock = Clock()
    budget = RetryBudget(RetryBudgetConfig(ttl_s=10, min_retries_per_s=0, percent_can_retry=20), clock)
    for _ in range(60):
        budget.record_request()
    granted = sum(budget.try_acquire_retry() for _ in range(100))
    assert granted == 12
    clock.t = 11  # everything expired
    assert not budget.try_acquire_retry()
    reserve = RetryBudget(RetryBudgetConfig(ttl_s=10, min_retries_per_s=1, percent_can_retry=0), clock)
    assert sum(reserve.try_acquire_retry() for _ in range(50)) == 10
