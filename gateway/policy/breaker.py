"""Cross-request protection for a struggling provider: a retry budget and a circuit breaker.

Both are small state machines driven by an injected monotonic clock, so tests step
time instead of sleeping.
"""

from __future__ import annotations

import enum
import hashlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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


# --- Keyed circuits, shared across replicas -------------------------------------------------
#
# A model-specific outage (one model's deployment is down) must not refuse the provider's other
# models, yet a provider-wide outage must still open fast. So there are two circuits per request:
#
#   (upstream, model)   opens after failure_threshold consecutive failures of that model
#   (upstream, *)       opens after failure_threshold consecutive failures of the upstream that
#                       span at least `distinct_models` different models
#
# Any answer that shows the provider is up resets both streaks. Records hold wall-clock epoch
# seconds because replicas share them and share no monotonic clock.

MAX_TRACKED_MODELS = 16  # the upstream-wide record only needs to know "at least N distinct"


@dataclass(frozen=True, slots=True)
class CircuitRecord:
    failures: int = 0  # consecutive provider failures
    open_until: float = 0.0  # epoch seconds; 0 = closed; in the past = half-open (one probe)
    models: frozenset[str] = frozenset()  # distinct models among the failures (upstream-wide)


CLOSED = CircuitRecord()


def circuit_key(upstream: str, model: str | None = None) -> str:
    """The store key of a circuit. ``model=None`` is the upstream-wide circuit."""
    if model is None:
        return upstream  # upstream names never hold "/", so no model key can collide with it
    # Model names come from clients: bound the key (it lands in a store) without losing identity.
    return f"{upstream}/{model if len(model) <= 64 else model[:48] + '#' + _short_hash(model)}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Gate(enum.StrEnum):
    ALLOW = "allow"  # closed: send
    PROBE = "probe"  # half-open: send only if this request wins the probe claim for `key`
    REFUSE = "refuse"  # open: fail fast for `retry_in_s`


@dataclass(frozen=True, slots=True)
class Admission:
    gate: Gate
    key: str | None = None  # the circuit this decision is about (the probe's key for PROBE)
    retry_in_s: float = 0.0


def admit(upstream_key: str, upstream: CircuitRecord, model_key: str | None,
          model: CircuitRecord, now: float) -> Admission:
    """Decide one request from both circuits. The upstream-wide one speaks first: while it is
    open no model may be tried, and its probe is the only request that goes."""
    for key, rec in ((upstream_key, upstream), (model_key, model)):
        if key is None or rec.open_until <= 0:
            continue
        if rec.open_until > now:
            return Admission(Gate.REFUSE, key, rec.open_until - now)
        return Admission(Gate.PROBE, key)
    return Admission(Gate.ALLOW)


def should_open(rec: CircuitRecord, threshold: int, distinct_models: int | None = None) -> bool:
    """After a failure was counted into ``rec``: does its circuit open now? ``distinct_models``
    is given for the upstream-wide circuit only."""
    if rec.open_until > 0 or rec.failures < threshold:
        return False
    return distinct_models is None or len(rec.models) >= distinct_models
