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
    budget.hold_retry()                       # deciding a retry (sync, no I/O)
    await budget.confirm_retry()              # after its wait, before sending it (shared stores)
    budget.try_acquire_retry()                # a retry counted at once (a continuation)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any

from gateway.config import CircuitBreakerConfig, RetryBudgetConfig
from gateway.policy.breaker import (
    CLOSED,
    Admission,
    CircuitRecord,
    CircuitState,
    Gate,
    admit,
    circuit_key,
    open_period_s,
    should_open,
)
from gateway.state.store import StateStore

log = logging.getLogger("gateway.state")
_ALLOW = Admission(Gate.ALLOW)
# Read on every request as module names: on Python 3.11 (the shipped image's) reading a member
# off the enum class costs ~900 instructions more (callgrind; issue #38).
_REFUSE, _PROBE = Gate.REFUSE, Gate.PROBE
_KEY_CACHE_MAX = 1024
# Records read from the store: the upstream's own and one per model, and model names come from
# clients (each new one cost ~180 bytes, never freed). Past this many, room is made (``_evict``).
CACHE_MAX = 2 * _KEY_CACHE_MAX
_TAKEN_S = 1.0  # how long a replica believes a probe claim is held before asking the store again


class SharedCircuit:
    """One upstream's circuits: per (upstream, model) and upstream-wide (see breaker.py).

    A healthy request costs no store round trip: records are read at most every ``cache_s``
    per key (and re-read at once after this replica changed them). A failure costs two writes,
    a success one write only when there was a failure streak to clear. While a circuit is
    half-open exactly one request across all replicas is let through: each open period has one
    probe claim (keyed by the period's end, with a TTL of ``probe_ttl_s`` so that a replica
    that dies mid-probe does not wedge the circuit). A probe keeps its claim when it is done,
    so a replica whose cached record still shows the period that just ended cannot probe it
    again; the next period (``open_period_s``) has a claim of its own.

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
        has_fallback: bool = False,
        rand: Callable[[], float] = random.random,
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
        self._has_fallback = has_fallback
        self._rand = rand
        self._cache: dict[str, tuple[float, CircuitRecord]] = {}
        self._writing: set[asyncio.Task[None]] = set()  # verdicts written in the background
        self._key_cache: dict[str | None, list[str]] = {}
        self._taken: dict[str, float] = {}  # probe claims held elsewhere -> when to ask again
        # A failure streak lives a few open periods, then is forgotten rather than left stale.
        self._ttl_s = max(60.0, 4 * cfg.open_s)

    async def _records(self, keys: list[str]) -> list[CircuitRecord]:
        now = self._clock()
        fresh = [self._cache.get(k) for k in keys]
        if all(f is not None and now - f[0] < self._cache_s for f in fresh):
            return [f[1] for f in fresh if f is not None]
        recs = await self._store.circuit_get(keys)
        for k, r in zip(keys, recs, strict=True):
            self._remember(k, now, r)
        return recs

    def _remember(self, key: str, now: float, rec: CircuitRecord) -> None:
        cache = self._cache
        if len(cache) >= CACHE_MAX and key not in cache:
            self._evict(now)
        cache[key] = (now, rec)

    def _evict(self, now: float) -> None:
        """Room for new records. First those that decide nothing: stale (the next request for
        their model reads the store again anyway) and clean (no streak for a success to clear,
        no open period). Only if every record is fresh or failing, the oldest half."""
        cache, cache_s = self._cache, self._cache_s
        idle = [k for k, (at, r) in cache.items() if now - at >= cache_s and r.failures == r.open_until == 0]
        for k in idle:
            del cache[k]
        if len(cache) >= CACHE_MAX:
            for k in list(itertools.islice(cache, len(cache) // 2)):
                del cache[k]

    def _keys(self, model: str | None) -> list[str]:
        keys = self._key_cache.get(model)
        if keys is None:
            up = circuit_key(self._upstream)
            keys = [up] if model is None else [up, circuit_key(self._upstream, model)]
            if len(self._key_cache) < _KEY_CACHE_MAX:  # model names come from clients
                self._key_cache[model] = keys
        return keys

    def keys(self, model: str | None) -> list[str]:
        """The store keys of the circuits a request for ``model`` passes (upstream-wide first)."""
        return self._keys(model)

    def prime(self, keys: list[str], records: list[CircuitRecord]) -> None:
        """Records read by someone else's round trip (a pool reads its deployments' circuits
        with its own records), cached as if read here."""
        now = self._clock()
        for k, r in zip(keys, records, strict=True):
            self._remember(k, now, r)

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
        if adm.gate is _REFUSE:
            return True
        if adm.gate is _PROBE or failed:
            return False
        cache = self._cache
        for k in self._keys(model):  # a loop, not any() over a generator: ~2,000 instructions less a request
            c = cache.get(k)
            if c is not None and c[1].failures:
                return False
        return True

    async def admit(self, model: str | None) -> Admission:
        keys = self._keys(model)
        recs = await self._records(keys)
        adm = admit(keys[0], recs[0], keys[1] if model is not None else None,
                    recs[1] if model is not None else CLOSED, self._clock())
        if adm.gate is Gate.PROBE:
            assert adm.key is not None
            claim, now = _claim_key(adm), self._clock()
            # While a probe is out (a silent upstream's for a whole timeout), the other requests
            # learn that from this replica's memory, asking the store again once a second.
            known = self._taken.get(claim, 0.0) > now
            if known or not await self._store.probe_claim(claim, self._probe_ttl_s):
                if not known:
                    if len(self._taken) >= _KEY_CACHE_MAX:
                        self._taken.clear()
                    self._taken[claim] = now + _TAKEN_S
                return Admission(Gate.REFUSE, adm.key, _TAKEN_S)  # someone else's probe is in flight
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
            # The claim is kept either way (it dies with its TTL): the period it names has
            # ended, and a replica that read that period before this write must not probe it.
            if failed:
                probes = adm.probes + 1
                await self._store.circuit_open(adm.key, now + self._period_s(probes), self._ttl_s, probes)
                self._on_change(who, CircuitState.OPEN)
            else:
                await self._store.circuit_clear(keys)
                self._on_change(who, CircuitState.CLOSED)
        elif failed:
            items = [(keys[0], model or "-")] + ([(keys[1], "")] if model is not None else [])
            recs = await self._store.circuit_fail(items, self._ttl_s)
            for (key, _), rec in zip(items, recs, strict=True):
                wide = key == keys[0]
                # A request without a model (e.g. /v1/models) says something about the provider
                # itself, so it needs no spread across models to open the upstream circuit.
                spread = self._distinct if wide and model is not None else None
                if should_open(rec, self._cfg.failure_threshold, spread):
                    await self._store.circuit_open(key, now + self._period_s(0), self._ttl_s)
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

    async def refused_for_s(self, model: str | None) -> float | None:
        """How long a request for ``model`` is refused from now, as ``admit`` decides it (the
        open period left); None: one may go now (closed, or half-open: a probe may go)."""
        keys = self._keys(model)
        recs = await self._records(keys)
        adm = admit(keys[0], recs[0], keys[1] if model is not None else None,
                    recs[1] if model is not None else CLOSED, self._clock())  # fmt: skip
        return adm.retry_in_s if adm.gate is Gate.REFUSE else None

    async def refusing(self) -> list[tuple[str | None, bool]]:
        """Whether each circuit this replica knows of refuses requests now, read from the store
        (the state that decides, other replicas' failures included) in one round trip: the
        upstream-wide circuit (None), then every model this replica has routed here. Half-open
        is not refusing: a probe may go. Decided by the breaker's own ``admit``, so its rules
        (and any schedule it gains) are what the answer follows."""
        models = [m for m in self._key_cache if m is not None]
        up = circuit_key(self._upstream)
        keys = [up, *(circuit_key(self._upstream, m) for m in models)]
        recs = await self._store.circuit_get(keys)
        now = self._clock()
        return [(model, admit(key, rec, None, CLOSED, now).gate is Gate.REFUSE)
                for model, key, rec in zip([None, *models], keys, recs, strict=True)]  # fmt: skip

    def settle_soon(self, adm: Admission, model: str | None, *, failed: bool) -> None:
        """``record``, written in the background. For a verdict given where the request must
        not wait or be cancelled, at a streamed answer's end: an SDK closes its connection
        once it has read the end, which cancels the handler, and a write awaited there was
        lost (a probe's success or a streak's end left other replicas half-open until the
        claim's expiry), or the request was logged as left (499) though its answer was whole.
        Nothing is started for a healthy request (``settled``)."""
        if not self.settled(adm, model, failed=failed):
            self._in_background(self.record(adm, model, failed=failed))

    def abandon_soon(self, adm: Admission) -> None:
        """``abandon``, written in the background (see ``settle_soon``)."""
        if adm.gate is Gate.PROBE and adm.key is not None:
            self._in_background(self.abandon(adm))

    def _in_background(self, write: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(write)
        self._writing.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning({"event": "circuit_settle_failed", "upstream": self._upstream,
                         "exception": type(task.exception()).__name__})  # fmt: skip

    async def settled_all(self) -> None:
        """Until every verdict written in the background is in the store (tests, shutdown)."""
        while self._writing:
            await asyncio.gather(*self._writing, return_exceptions=True)

    async def abandon(self, adm: Admission) -> None:
        """The client left before an answer: free the probe slot, record nothing."""
        if adm.gate is Gate.PROBE and adm.key is not None:
            await self._store.probe_release(_claim_key(adm))

    def _period_s(self, failed_probes: int) -> float:
        cfg = self._cfg
        return open_period_s(failed_probes, cfg.probe_interval_s, cfg.open_s,
                             has_fallback=self._has_fallback, rand=self._rand())  # fmt: skip

    def _model_of(self, key: str, model: str | None) -> str | None:
        return None if key == circuit_key(self._upstream) else model


def _claim_key(adm: Admission) -> str:
    """One probe per open period: the period's end names its claim (exact, as stored)."""
    assert adm.key is not None
    return f"{adm.key}@{adm.until!r}"


class SharedBudget:
    """Retries may be at most ``percent_can_retry`` % of the requests of the last ``ttl_s``
    seconds, plus a reserve of ``min_retries_per_s * ttl_s`` so that a quiet gateway can still
    retry (Finagle's retry budget; Envoy's retry_budget in spirit), counted across replicas.

    Deciding stays synchronous and never touches the store: requests and retries are counted
    locally and pushed, together with a pull of the shared totals, in one store operation at
    most every ``flush_s`` (in the background while traffic flows). A decision therefore sees
    the other replicas' counts up to ``flush_s`` late; totals older than the window are ignored.

    On a shared store that lag would let every replica spend the headroom it last saw (R
    replicas: up to R times the bound). So a retry of the retry loop is *held*
    (``hold_retry``, synchronous, from this replica's view) and then *confirmed*
    (``confirm_retry``) in one atomic store operation after its backoff wait, just before it
    is sent: the store counts it only if the window's retries stay within the bound, so the
    bound holds across replicas. A confirmation that finds Redis down is decided locally.
    ``try_acquire_retry`` (a continuation's one retry) counts at once, with the lag.
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
        self._held = 0  # retries held, not yet confirmed (shared stores only)
        self._shared_store = store.backend != "memory"
        self._shared = (0, 0)
        self._shared_at = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

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

    def hold_retry(self) -> bool:
        """``try_acquire_retry`` for a retry that ``confirm_retry`` confirms before it is sent
        (or ``release_retry`` gives up). In one process the decision is already exact."""
        if not self._shared_store:
            return self.try_acquire_retry()
        requests, retries = self._view()
        if retries + 1 > self._reserve + self._ratio * requests:
            return False
        self._held += 1
        return True

    async def confirm_retry(self) -> bool:
        """Count a held retry in the store, atomically, if the bound allows it there: pushes
        this replica's counts and pulls everyone's in the same operation."""
        if not self._shared_store:
            return True
        self._held = max(0, self._held - 1)
        requests, retries = self._pending
        self._pending = [0, 0]
        try:
            ok, req, ret = await self._store.budget_reserve(
                self._key, requests, retries, self._cfg.ttl_s, self._reserve, self._ratio)  # fmt: skip
        except BaseException:
            self._pending[0] += requests
            self._pending[1] += retries
            raise
        self._shared, self._shared_at = (req, ret), self._monotonic()
        return ok

    def release_retry(self) -> None:
        """A held retry that will not be sent (the client left during its wait)."""
        if self._shared_store:
            self._held = max(0, self._held - 1)

    def _view(self) -> tuple[int, int]:
        fresh = self._monotonic() - self._shared_at < self._cfg.ttl_s
        req, ret = self._shared if fresh else (0, 0)
        return req + self._pending[0], ret + self._pending[1] + self._held

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
        if self._closed or self._timer is not None or (self._task is not None and not self._task.done()):
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
        # Nothing is scheduled after this, not even by the end of the flush that is out (it
        # would schedule the counts made meanwhile): the store is closed next.
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
