"""Cross-request state that replicas share: circuits, retry budgets, rate-limit resets and the
loop breaker's remembered answers. See :mod:`gateway.state.store` for the interface."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config import GatewayConfig
from gateway.state.memory import MemoryStore
from gateway.state.metrics import StateMetrics
from gateway.state.shared import SharedBudget, SharedCircuit
from gateway.state.store import StateStore

__all__ = ["MemoryStore", "SharedBudget", "SharedCircuit", "StateMetrics", "StateStore", "build_store"]


def build_store(
    cfg: GatewayConfig,
    *,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
    on_fallback: Callable[[str, str], None] = lambda _b, _op: None,
    on_wait: Callable[[str, float], None] = lambda _b, _s: None,
    on_lost: Callable[[str], None] = lambda _b: None,
) -> StateStore:
    """The store ``cfg.state`` asks for. Creating it does no I/O (Redis connects on first use),
    so it may be built in ``create_app``; ``await store.close()`` on shutdown."""
    local = MemoryStore(
        clock,
        max_answers=cfg.loop_breaker.max_entries,
        max_answer_bytes=cfg.loop_breaker.max_total_bytes,
    )
    if cfg.state.backend == "memory":
        return local
    from gateway.state.redis_store import RedisStore, connect  # only deployments with redis pay it

    assert cfg.state.url is not None  # the config validator guarantees it
    timeout_s = cfg.state.timeout_ms / 1000
    return RedisStore(
        # The sockets wait as long as an operation may (see RedisStore._guard), the probe's too:
        # recover_s, which a busy loop's late reading of an answer may take.
        connect(cfg.state.url, max(timeout_s, cfg.state.recover_s), cfg.state.max_connections),
        local,
        clock=clock,
        monotonic=monotonic,
        prefix=cfg.state.key_prefix,
        timeout_s=timeout_s,
        recover_s=cfg.state.recover_s,
        answers_cache_s=cfg.state.cache_ms / 1000,
        on_fallback=on_fallback,
        on_wait=on_wait,
        on_lost=on_lost,
        max_connections=cfg.state.max_connections,
        probe_client=connect(cfg.state.url, max(timeout_s, cfg.state.recover_s), max_connections=1),
    )
