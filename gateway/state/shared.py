"""The circuit breaker and the retry budget over a :class:`StateStore`, so replicas agree.

The pure circuit decisions are in :mod:`gateway.policy.breaker`; this module moves records
between them and the store.

Per request, the pipeline calls::

    adm = await circuit.admit(model)          # before the first attempt of a request
    if adm.gate is Gate.REFUSE: fail fast, retry-after = adm.retry_in_s
    ... send with retries ...
    await circuit.record(adm, model, failed=<final outcome is provider_unavailable>)
    # or, when the client left before an answer:  await circuit.abandon(adm)

    budget.record_request()                   # once per routed request (sync, no I/O)
    budget.try_acquire_retry()                # before each retry (sync, no I/O)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.config import CircuitBreakerConfig, RetryBudgetConfig
from gateway.policy.breaker import (
    CLOSED,
    Admission,
    CircuitRecord,
    CircuitState,
    Gate,
    admit,
    circuit_key,
    should_open,
)
from gateway.state.store import StateStore

_ALLOW = Admission(Gate.ALLOW)
_KEY_CACHE_MAX = 1024


class SharedCircuit:
    """One upstream's circuits: per (upstream, model) and upstream-wide (see breaker.py).

    A healthy request costs no store round trip: records are read at most every ``cache_s``
    per key (and re-read at once after this replica changed them). A failure costs two writes,
    a success one write only when there was a failure streak to clear. While a circuit is
    half-open exactly one request across all replicas is let through (a claim with a TTL of
    ``probe_ttl_s``, so a replica that dies mid-probe does not wedge the circuit).

    ``on_change(model, state)`` reports the transitions this replica makes; ``model`` is None
    for the upstream-wide circuit.
    """

    def __init__(
        self,
        store: StateStore,
        upstream: str,
        cfg: CircuitBreakerConfig,
        clock: Callable[[], float],
        *,
        distinct_models: int = 2,
        probe_ttl_s: float = 60.0,
        cache_s: float = 0.2,
        on_change: Callable[[str | None, CircuitState], None] = lambda _m, _s: None,
    ) -> None:
        self._store = store
        self._upstream = upstream
        self._cfg = cfg
        self._clock = clock
        self._distinct = distinct_models
        self._probe_ttl_s = probe_ttl_s
        self._cache_s = cache_s
        self._on_change = on_change
        self._cache: dict[str, tuple[float, CircuitRecord]] = {}
        self._key_cache: dict[str | None, list[str]] = {}
        # A failure streak lives a few open periods, then is forgotten rather than left stale.
        self._ttl_s = max(60.0, 4 * cfg.open_s)

    async def _records(self, keys: list[str]) -> list[CircuitRecord]:
        now = self._clock()
        fresh = [self._cache.get(k) for k in keys]
        if all(f is not None and now - f[0] < self._cache_s for f in fresh):
            return [f[1] for f in fresh if f is not None]
        recs = await self._store.circuit_get(keys)
        for k, r in zip(keys, recs, strict=True):
            self._cache[k] = (now, r)
        return recs

    def _keys(self, model: str | None) -> list[str]:
        keys = self._key_cache.get(model)
        if keys is None:
            up = circuit_key(self._upstream)
            keys = [up] if model is None else [up, circuit_key(self._upstream, model)]
            if len(self._key_cache) < _KEY_CACHE_MAX:  # model names come from clients
                self._key_cache[model] = keys
        return keys

    def admit_now(self, model: str | None) -> Admission | None:
        """``admit`` without a store round trip or an await, when this replica's cached
        records decide it: both fresh and closed, as for nearly every request. None: the
        caller awaits ``admit``."""
        keys = self._keys(model)
        now = self._clock()
        for k in keys:
            found = self._cache.get(k)
            if found is None or now - found[0] >= self._cache_s or found[1].open_until > 0:
                return None
        return _ALLOW

    def settled(self, adm: Admission, model: str | None, *, failed: bool) -> bool:
        """Whether ``record`` would do nothing (a success with no failure streak to clear):
        then the caller need not await it."""
        if adm.gate is Gate.REFUSE:
            return True
        if adm.gate is Gate.PROBE or failed:
            return False
        return not any(c is not None and c[1].failures for c in map(self._cache.get, self._keys(model)))

    async def admit(self, model: str | None) -> Admission:
        keys = self._keys(model)
        recs = await self._records(keys)
        adm = admit(keys[0], recs[0], keys[1] if model is not None else None,
                    recs[1] if model is not None else CLOSED, self._clock())
        if adm.gate is Gate.PROBE:
            assert adm.key is not None
            if not await self._store.probe_claim(adm.key, self._probe_ttl_s):
                return Admission(Gate.REFUSE, adm.key, 1.0)  # someone else's probe is in flight
            self._on_change(self._model_of(adm.key, model), CircuitState.HALF_OPEN)
        return adm

    async def record(self, adm: Admission, model: str | None, *, failed: bool) -> None:
        """The request's final outcome: ``failed`` when it was provider_unavailable; any answer
        from the provider (a 4xx too) shows it is up."""
        if adm.gate is Gate.REFUSE:
            return
        keys = self._keys(model)
        now = self._clock()
        if adm.gate is Gate.PROBE:
            assert adm.key is not None
            who = self._model_of(adm.key, model)
            if failed:
                await self._store.circuit_open(adm.key, now + self._cfg.open_s, self._ttl_s)
                self._on_change(who, CircuitState.OPEN)
            else:
                await self._store.circuit_clear(keys)
                self._on_change(who, CircuitState.CLOSED)
            await self._store.probe_release(adm.key)
        elif failed:
            items = [(keys[0], model or "-")] + ([(keys[1], "")] if model is not None else [])
            recs = await self._store.circuit_fail(items, self._ttl_s)
            for (key, _), rec in zip(items, recs, strict=True):
                wide = key == keys[0]
                # A request without a model (e.g. /v1/models) says something about the provider
                # itself, so it needs no spread across models to open the upstream circuit.
                spread = self._distinct if wide and model is not None else None
                if should_open(rec, self._cfg.failure_threshold, spread):
                    await self._store.circuit_open(key, now + self._cfg.open_s, self._ttl_s)
                    self._on_change(None if wide else model, CircuitState.OPEN)
        elif any(c is not None and c[1].failures for c in map(self._cache.get, keys)):
            await self._store.circuit_clear(keys)
        else:
            return  # nothing to clear: a healthy request writes nothing
        for k in keys:
            self._cache.pop(k, None)

    async def is_open(self, model: str | None) -> bool:
        """Whether a request for ``model`` would be refused now (no probe is claimed)."""
        recs = await self._records(self._keys(model))
        now = self._clock()
        return any(r.open_until > now for r in recs)

    async def abandon(self, adm: Admission) -> None:
        """The client left before an answer: free the probe slot, record nothing."""
        if adm.gate is Gate.PROBE and adm.key is not None:
            await self._store.probe_release(adm.key)

    def _model_of(self, key: str, model: str | None) -> str | None:
        return None if key == circuit_key(self._upstream) else model


class SharedBudget:
    """Retries may be at most ``percent_can_retry`` % of the requests of the last ``ttl_s``
    seconds, plus a reserve of ``min_retries_per_s * ttl_s`` so that a quiet gateway can still
    retry (Finagle's retry budget; Envoy's retry_budget in spirit), counted across replicas.

    Both calls stay synchronous and never touch the store: requests and retries are counted
    locally and pushed, together with a pull of the shared totals, in one store operation at
    most every ``flush_s`` (in the background while traffic flows). A decision therefore sees
    the other replicas' counts up to ``flush_s`` late, which is what a budget over a
    ``ttl_s`` window can afford; totals older than the window are ignored.
    """

    def __init__(
        self,
        store: StateStore,
        cfg: RetryBudgetConfig,
        monotonic: Callable[[], float],
        *,
        key: str = "global",
        flush_s: float = 0.25,
    ) -> None:
        self._store = store
        self._cfg = cfg
        self._ratio = cfg.percent_can_retry / 100.0
        self._reserve = cfg.min_retries_per_s * cfg.ttl_s
        self._monotonic = monotonic
        self._key = key
        self._flush_s = flush_s
        self._pending = [0, 0]  # requests, retries not yet pushed
        self._shared = (0, 0)
        self._shared_at = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None

    def record_request(self) -> None:
        self._pending[0] += 1
        self._schedule()

    def try_acquire_retry(self) -> bool:
        requests, retries = self._view()
        if retries + 1 > self._reserve + self._ratio * requests:
            return False
        self._pending[1] += 1
        self._schedule()
        return True

    def _view(self) -> tuple[int, int]:
        fresh = self._monotonic() - self._shared_at < self._cfg.ttl_s
        req, ret = self._shared if fresh else (0, 0)
        return req + self._pending[0], ret + self._pending[1]

    async def flush(self) -> None:
        """Push local counts and pull the shared totals (one store operation)."""
        requests, retries = self._pending
        self._pending = [0, 0]
        try:
            self._shared = await self._store.budget_add(self._key, requests, retries, self._cfg.ttl_s)
        except BaseException:
            self._pending[0] += requests
            self._pending[1] += retries
            raise
        self._shared_at = self._monotonic()

    def _schedule(self) -> None:
        if self._timer is not None or (self._task is not None and not self._task.done()):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test): flush() is called explicitly
        self._timer = loop.call_later(self._flush_s, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        self._task = asyncio.get_running_loop().create_task(self.flush())
        # Counts that arrived while this flush was out go with the next one, not the next request.
        self._task.add_done_callback(lambda _t: self._schedule() if any(self._pending) else None)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
