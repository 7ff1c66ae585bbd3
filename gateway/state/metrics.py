"""The metrics of shared state, registered on the app's explicit registry.

Kept beside the state package (not in telemetry.py) so that the contract table there stays
the SPEC's; the pipeline passes :meth:`StateMetrics.fallback` as the store's ``on_fallback``
and :meth:`StateMetrics.loop_event` as the loop breaker's ``on_event``.

    llm_gateway_state_fallbacks_total{backend, op}     operations served from local memory
                                                       because the shared store did not answer
    llm_gateway_state_operation_duration_seconds{backend}
                                                       how long each operation that asked the
                                                       shared store waited for it (answered or
                                                       given up on)
    llm_gateway_state_store_lost_total{backend}        times this process found the shared store
                                                       without what it held
    llm_gateway_loop_breaker_events_total{event, error_type}
                                                       event: remembered, answered (a repeat
                                                       answered from memory), skipped (too big)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.errors import ErrorType

OPS = (
    "circuit_get", "circuit_fail", "circuit_open", "circuit_clear", "probe_claim", "probe_release",
    "budget_add", "reset_set", "reset_get", "answer_put", "answer_take", "answer_drop",
)  # fmt: skip
LOOP_EVENTS = ("remembered", "answered", "probed", "skipped")


class StateMetrics:
    def __init__(self, registry: CollectorRegistry, backend: str) -> None:
        self.fallbacks = Counter(
            "llm_gateway_state_fallbacks",
            "Shared-state operations served from local memory because the store (Redis) did not answer "
            "in time, by backend and operation.",
            ["backend", "op"], registry=registry,
        )  # fmt: skip
        # Redis on a LAN answers in well under a millisecond; state.timeout_ms (50 ms by default)
        # is where a wait turns suspect.
        self.waits = Histogram(
            "llm_gateway_state_operation_duration_seconds",
            "Seconds each shared-state operation waited for the store (Redis), answered or given up on "
            "(then served from local memory), by backend; operations served from memory while the store "
            "is taken for down or slow wait for nothing and are not counted here.",
            ["backend"], registry=registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )  # fmt: skip
        # A Redis restarted empty (no append-only file), or flushed: RedisStore._check_kept.
        self.lost = Counter(
            "llm_gateway_state_store_lost",
            "Times this process found the shared store (Redis) without what it held (restarted without "
            "its append-only file, flushed, or its keys evicted): keys' budgets then count on from what "
            "each replica knew, written back as a floor; anything above 0 wants alerting on.",
            ["backend"], registry=registry,
        )  # fmt: skip
        self.lost.labels(backend)
        self.loop_breaker = Counter(
            "llm_gateway_loop_breaker_events",
            "Loop breaker events, by error type: remembered (a failed answer), answered (a repeat answered "
            "from memory), probed (a repeat sent upstream as a probe), skipped (too big to remember).",
            ["event", "error_type"], registry=registry,
        )  # fmt: skip
        # Series exist from the start, so an alert on a rate sees zeros rather than nothing (and
        # on the memory backend, which never falls back, the alert's metric is there all the same).
        for op in OPS:
            self.fallbacks.labels(backend, op)
        for event in LOOP_EVENTS:
            for t in ErrorType:
                self.loop_breaker.labels(event, t.value)

    def fallback(self, backend: str, op: str) -> None:
        self.fallbacks.labels(backend, op).inc()

    def waited(self, backend: str, seconds: float) -> None:
        self.waits.labels(backend).observe(seconds)

    def store_lost(self, backend: str) -> None:
        self.lost.labels(backend).inc()

    def loop_event(self, event: str, error_type: ErrorType) -> None:
        self.loop_breaker.labels(event, error_type.value).inc()
