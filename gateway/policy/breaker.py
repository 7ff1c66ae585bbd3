"""Cross-request protection for a struggling provider: a retry budget and a circuit breaker.

Both are small state machines driven by an injected monotonic clock, so tests step
time instead of sleeping.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable

from gateway.config import CircuitBreakerConfig, RetryBudgetConfig


class RetryBudget:
    """Retries may be at most ``percent_can_retry`` % of the requests of the last ``ttl_s``
    seconds, plus a reserve of ``min_retries_per_s * ttl_s`` so that a quiet gateway can
    still retry (the token-bucket retry budget of Finagle, Envoy's retry_budget in spirit).
    """

    def __init__(self, cfg: RetryBudgetConfig, now: Callable[[], float]) -> None:
        self._ttl = cfg.ttl_s
        self._ratio = cfg.percent_can_retry / 100.0
        self._reserve = cfg.min_retries_per_s * cfg.ttl_s
        self._now = now
        self._requests: deque[float] = deque()
        self._retries: deque[float] = deque()

    def _expire(self, t: float) -> None:
        horizon = t - self._ttl
        for q in (self._requests, self._retries):
            while q and q[0] <= horizon:
                q.popleft()

    def record_request(self) -> None:
        t = self._now()
        self._expire(t)
        self._requests.append(t)

    def try_acquire_retry(self) -> bool:
        t = self._now()
        self._expire(t)
        if len(self._retries) + 1 > self._reserve + self._ratio * len(self._requests):
            return False
        self._retries.append(t)
        return True


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Opens after ``failure_threshold`` consecutive provider_unavailable results; while open,
    requests fail fast for ``open_s``; then exactly one probe is let through, and its result
    closes the circuit or opens it again.
    """

    def __init__(
        self,
        cfg: CircuitBreakerConfig,
        now: Callable[[], float],
        on_change: Callable[[CircuitState], None] = lambda _: None,
    ) -> None:
        self._cfg = cfg
        self._now = now
        self._on_change = on_change
        self.state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False

    def retry_in_s(self) -> float:
        """Seconds until a request may be tried again (0 when it may go now)."""
        if self.state is CircuitState.CLOSED:
            return 0.0
        left = self._opened_at + self._cfg.open_s - self._now()
        if left > 0:
            return left
        return 0.0 if not self._probe_in_flight else 1.0

    def allow(self) -> bool:
        """Call before every upstream attempt; False means fail fast without calling."""
        if self.state is CircuitState.CLOSED:
            return True
        if self.state is CircuitState.OPEN and self._now() - self._opened_at >= self._cfg.open_s:
            self._set(CircuitState.HALF_OPEN)
        if self.state is CircuitState.HALF_OPEN and not self._probe_in_flight:
            self._probe_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        """Any answer that shows the provider is up (including 4xx) counts as success."""
        self._failures = 0
        self._probe_in_flight = False
        if self.state is not CircuitState.CLOSED:
            self._set(CircuitState.CLOSED)

    def record_failure(self) -> None:
        self._probe_in_flight = False
        self._failures += 1
        if self.state is CircuitState.HALF_OPEN or (
            self.state is CircuitState.CLOSED and self._failures >= self._cfg.failure_threshold
        ):
            self._opened_at = self._now()
            self._set(CircuitState.OPEN)

    def record_abandoned(self) -> None:
        """An attempt ended without an answer (the client left): free the probe slot."""
        self._probe_in_flight = False

    def _set(self, state: CircuitState) -> None:
        self.state = state
        self._on_change(state)
