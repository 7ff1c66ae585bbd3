"""What the replicas know of each pool deployment, through the state store, and what this
process alone knows (requests in flight, time to first token).

Three records per deployment and model, each under its own TTL:

    o:<deployment>            sits out (every model): an exhausted or refused key
    o:<deployment>/<model>    sits out for this model: a rate limit, until its reset
    h:<deployment>/<model>    headroom from the last answer's rate-limit headers
    n:<deployment>/<model>#m  requests and tokens sent in minute m (deployments with ``limits``)

A pick costs no store round trip: the records of a pool's deployments are read together, in
one round trip, at most once per ``cache_s`` per pool and model, and the headroom and usage
this process saw since are written in the same round trip. A sit-out is written at once (the
failure path), so the other replicas stop sending there within ``cache_s``. Between reads,
this process counts what it sent since the headroom it knows, so a deployment is predicted
empty before its provider has to say so with a 429.

With a shared store, a deployment whose configured ``limits`` decide (its answers carry no
rate-limit headers) is the exception: each pick takes its request from the minute's count in
the store, atomically (``take``, one round trip), so the limits hold across replicas; one
whose count is used up sits out until the minute's end.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.config import UpstreamConfig
from gateway.policy.breaker import circuit_key
from gateway.routing.headroom import Headroom, headroom_of
from gateway.routing.pools import Deployment, SitOut
from gateway.state.shared import SharedCircuit
from gateway.state.store import StateStore

K = TypeVar("K")
V = TypeVar("V")
_WHY = tuple(SitOut)
_CACHE_MAX = 4096  # model names come from clients: bounded like every per-model cache
_HEADROOM_TTL_S = 120.0  # an observation is refreshed by every answer; a stale one fades
_USAGE_TTL_S = 120.0  # a minute's usage, read until the minute after it
_LATENCY_ALPHA = 0.3  # weight of the newest time-to-first-token sample
OBSERVE_EVERY_S = 0.05  # an answer's rate-limit headers are read at most this often per deployment


@dataclass(slots=True)
class _Local:
    """This process's own counts for one deployment and model, not yet in the store."""

    requests: int = 0  # sent since the headroom record last changed
    tokens: int = 0
    seen_at: float = -1.0  # the headroom record's observation time these counts follow
    # Every request and token this process sent there, ever: an answer's headers count what
    # the provider had received up to its request, so what was sent after that one still
    # comes off them (``Mark``).
    total_requests: int = 0
    total_tokens: int = 0
    pending_requests: int = 0  # usage not yet added to the store's minute record
    pending_tokens: int = 0


_NONE_SENT = _Local()  # read-only stand-in for a deployment this process sent nothing to


@dataclass(frozen=True, slots=True)
class Mark:
    """Where one request stands among this process's sends to its deployment."""

    requests: int
    tokens: int


@dataclass
class PoolState:
    store: StateStore
    wall: Callable[[], float]
    monotonic: Callable[[], float]
    cache_s: float = 0.2
    in_flight: dict[str, int] = field(default_factory=dict)  # deployment -> requests held here
    latency_s: dict[str, float] = field(default_factory=dict)  # deployment -> decayed TTFT
    _records: dict[str, dict[str, float]] = field(default_factory=dict)
    _read_at: dict[tuple[str, str | None], float] = field(default_factory=dict)
    _local: dict[str, _Local] = field(default_factory=dict)
    _writes: dict[str, tuple[dict[str, float], float]] = field(default_factory=dict)
    _keys: dict[tuple[str, str | None], tuple[str, str, str, str]] = field(default_factory=dict)
    _observed_at: dict[str, float] = field(default_factory=dict)  # monotonic, per headroom key
    # (deployment, model) -> epoch ms: its shared count was found used up until then (a take).
    _used_up: dict[tuple[str, str | None], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # One process's memory: every send is in it already, and no limit needs taking.
        self._shared = self.store.backend != "memory"

    # -- this process -------------------------------------------------------------------------

    def hold(self, deployment: str) -> None:
        self.in_flight[deployment] = self.in_flight.get(deployment, 0) + 1

    def release(self, deployment: str) -> None:
        self.in_flight[deployment] = max(0, self.in_flight.get(deployment, 0) - 1)

    def timed(self, deployment: str, seconds: float) -> None:
        old = self.latency_s.get(deployment)
        self.latency_s[deployment] = seconds if old is None else old + _LATENCY_ALPHA * (seconds - old)

    # -- configured limits, taken at the pick ---------------------------------------------------

    def takes(self, up: UpstreamConfig, model: str | None) -> bool:
        """Whether a request to ``up`` must first ``take`` its share of the configured limits:
        with a shared store, while no rate-limit headers tell its headroom (they decide then)."""
        if up.limits is None or not self._shared:
            return False
        return not self._records.get(_key("h", up.name, model))

    async def take(self, up: UpstreamConfig, model: str | None, tokens: int) -> bool:
        """One request of ``tokens`` counted against ``up``'s configured limits in the store,
        atomically, or nothing when that would pass them: False, and ``up`` sits out here until
        the minute's end. Counting each replica's sends in the store afterwards let two
        replicas each send the whole limit in the same moment (40 calls for 20, measured)."""
        assert up.limits is not None
        key = f"{_key('n', up.name, model)}#{(minute := self._minute())}"
        limits = up.limits
        ok, n, k = await self.store.records_take(key, limits.requests_per_minute, limits.tokens_per_minute,
                                                 tokens, _USAGE_TTL_S)  # fmt: skip
        _bounded(self._records)[key] = {"n": float(n), "k": float(k)}
        if not ok:
            _bounded(self._used_up)[(up.name, model)] = (minute + 1) * 60_000
        return ok

    # -- what every answer tells ---------------------------------------------------------------

    def sent(self, up: UpstreamConfig, model: str | None, tokens: int, taken: bool = False) -> Mark:
        """One request went to ``up``: counted against its headroom and, unless it was taken
        from them already (``take``), its configured limits. The mark goes with its answer to
        ``observe``."""
        local = self._local_of(_key("h", up.name, model))
        local.requests += 1
        local.tokens += tokens
        local.total_requests += 1
        local.total_tokens += tokens
        if up.limits is not None and not taken:
            local.pending_requests += 1
            local.pending_tokens += tokens
        return Mark(local.total_requests, local.total_tokens)

    def observe(self, up: UpstreamConfig, model: str | None, headers: Mapping[str, str],
                mark: Mark | None = None) -> Headroom | None:  # fmt: skip
        """The rate-limit headers of one answer of ``up``, if it carries any; ``mark``: what
        ``sent`` said of its request. What this process sent after that request is not in the
        headers (the provider counts a request as it receives it): it stays counted off them.
        Counting it as nothing let 40 concurrent requests through on a reading of 9 left
        (12 of them 429s, measured). Read at most once per ``OBSERVE_EVERY_S`` per deployment
        and model: in between, what this process sends is counted off the last reading
        (``sent``), which predicts the same exhaustion at a fraction of the cost of parsing
        every answer (about 10 µs each)."""
        key = _key("h", up.name, model)
        now = self.monotonic()
        if now - self._observed_at.get(key, -math.inf) < OBSERVE_EVERY_S:
            return None
        room = headroom_of(headers, self.wall())
        if room is None:
            return None
        _bounded(self._observed_at)[key] = now
        fields = {"at": self.wall() * 1000}
        for name, value in (("rr", room.requests_remaining), ("rl", room.requests_limit),
                            ("rt", room.requests_reset_at_ms), ("tr", room.tokens_remaining),
                            ("tl", room.tokens_limit), ("tt", room.tokens_reset_at_ms)):  # fmt: skip
            if value is not None:
                fields[name] = float(value)
        self._records[key] = fields
        local = self._local_of(key)
        if mark is None:
            local.requests = local.tokens = 0
        else:
            local.requests = max(0, local.total_requests - mark.requests)
            local.tokens = max(0, local.total_tokens - mark.tokens)
        local.seen_at = fields["at"]
        _bounded(self._writes)[key] = (fields, _HEADROOM_TTL_S)
        return room

    async def sit_out(self, deployment: str, model: str | None, until_ms: int, why: SitOut,
                      key: float | None = None) -> None:  # fmt: skip
        """Written at once: the other replicas must stop sending there (the failure path).
        ``key``: the deployment's credential (``key_id``) when the sit-out is that key's own
        (refused, out of credit), so that a new key in the config ends it."""
        key_name = _key("o", deployment, model)
        fields = {"u": float(until_ms), "w": float(_WHY.index(why))}
        if key is not None and why in _KEYS_OWN:
            fields["k"] = key
        _bounded(self._records)[key_name] = fields
        ttl_s = max(1.0, until_ms / 1000 - self.wall() + 1.0)
        await self.store.records_sync((), [(key_name, fields, ttl_s)])

    # -- picking ------------------------------------------------------------------------------

    def fresh(self, pool: str, model: str | None) -> bool:
        at = self._read_at.get((pool, model))
        return at is not None and self.monotonic() - at < self.cache_s

    async def refresh(self, pool: str, members: tuple[UpstreamConfig, ...], model: str | None,
                      circuits: Sequence[SharedCircuit] = ()) -> None:  # fmt: skip
        """One round trip: what this process saw goes out, what every replica saw comes in, and
        the deployments' ``circuits`` with it (so a pick asks the store nothing more)."""
        minute = self._minute()
        reads = []
        for up in members:
            out_dep, out_model, hkey, nkey = _keys(up.name, model)
            reads += [out_dep, out_model, hkey] + ([f"{nkey}#{minute}"] if up.limits is not None else [])
        writes = [(k, f, ttl) for k, (f, ttl) in self._writes.items()]
        self._writes.clear()
        adds = []
        for up in members:
            if up.limits is None:
                continue
            local = self._local.get(_key("h", up.name, model))
            if local is not None and local.pending_requests:
                adds.append((_key("n", up.name, model) + f"#{minute}",
                             {"n": local.pending_requests, "k": local.pending_tokens}, 120.0))  # fmt: skip
                local.pending_requests = local.pending_tokens = 0
        circuit_keys = [c.keys(model) for c in circuits]
        got, recs = await self.store.records_sync(reads, writes, adds, [k for ks in circuit_keys for k in ks])
        at = 0
        for circuit, ks in zip(circuits, circuit_keys, strict=True):
            circuit.prime(ks, recs[at : at + len(ks)])
            at += len(ks)
        records = _bounded(self._records)
        for key, rec in zip(reads, got, strict=True):
            records[key] = rec
        _bounded(self._read_at)[(pool, model)] = self.monotonic()

    def view(self, index: int, up: UpstreamConfig, model: str | None, now_ms: float) -> Deployment:
        """``up`` as of now, from the records last read plus this process's counts since."""
        keys = self._keys.get((up.name, model))
        if keys is None:
            keys = _bounded(self._keys)[(up.name, model)] = _keys(up.name, model)
        out_dep, out_model, hkey, nkey = keys
        records = self._records
        out_until, why = 0, None
        for key in (out_dep, out_model):
            rec = records.get(key)
            if rec and rec.get("u", 0) > max(now_ms, out_until):
                if "k" in rec and rec["k"] != key_id(up):
                    continue  # the key that was refused has since been replaced in the config
                out_until, why = int(rec["u"]), _WHY[int(rec.get("w", 0)) % len(_WHY)]
        requests_left = tokens_left = None
        local = self._local.get(hkey) or _NONE_SENT
        room = records.get(hkey)
        if room:
            at = room.get("at", -1.0)
            if local.seen_at != at and local is not _NONE_SENT:  # another replica's newer observation
                local.requests = local.tokens = 0
                local.seen_at = at
            if "rr" in room:
                requests_left, out_until, why = _refilled(
                    room["rr"], local.requests, room.get("rl"), room.get("rt"), at, now_ms, out_until, why)
            if "tr" in room:
                tokens_left, out_until, why = _refilled(
                    room["tr"], local.tokens, room.get("tl"), room.get("tt"), at, now_ms, out_until, why)
        elif up.limits is not None:
            minute = self._minute()
            usage = records.get(f"{nkey}#{minute}") or {}
            ends = (minute + 1) * 60_000
            rpm, tpm = up.limits.requests_per_minute, up.limits.tokens_per_minute
            if rpm is not None:
                requests_left, out_until, why = _left(rpm - usage.get("n", 0.0) - local.pending_requests, rpm,
                                                      ends, now_ms, out_until, why)  # fmt: skip
            if tpm is not None:
                tokens_left, out_until, why = _left(tpm - usage.get("k", 0.0) - local.pending_tokens, tpm,
                                                    ends, now_ms, out_until, why)  # fmt: skip
        if self._used_up:
            used_up = self._used_up.get((up.name, model), 0)
            if used_up > max(now_ms, out_until):
                out_until, why = used_up, SitOut.HEADROOM
        name = up.name
        return Deployment(index, name, up.weight, self.in_flight.get(name, 0), self.latency_s.get(name),
                          requests_left, tokens_left, out_until, why)  # fmt: skip

    def _minute(self) -> int:
        return int(self.wall() // 60)

    def _local_of(self, key: str) -> _Local:
        local = self._local.get(key)
        if local is None:
            # Counting from the headroom known now: what is sent from here on comes off it.
            seen = (self._records.get(key) or {}).get("at", -1.0)
            local = _bounded(self._local)[key] = _Local(seen_at=seen)
        return local



def _refilled(remaining: float, sent: int, limit: float | None, reset: float | None, at: float, now_ms: float,
              out_until: int, why: SitOut | None) -> tuple[float | None, int, SitOut | None]:  # fmt: skip
    """A reading's headroom now. Both providers meter with buckets refilled continuously and
    state as the reset when the bucket is full again (OpenAI answers "12ms" with 4,999 of
    5,000 requests left; Anthropic's limits are "continuously replenished"), so the refill
    since the reading comes back at the rate that fills the rest by the reset, and what this
    process sent since comes off. An empty bucket sits out until one more unit has refilled,
    not until the whole reset: and past the reset it is not full again if sends followed the
    reading (a pool released every waiting request at once there, most into 429s, measured)."""
    if not limit or reset is None or reset <= at or remaining >= limit:
        return _left(remaining - sent, limit, reset, now_ms, out_until, why)
    rate = (limit - remaining) / (reset - at)  # units a millisecond
    left = min(limit, remaining + rate * max(0.0, now_ms - at)) - sent
    share = max(0.0, left / limit)
    if left < 1:
        back = int(now_ms + (1 - left) / rate)
        if back > max(now_ms, out_until):
            return share, back, SitOut.HEADROOM
    return share, out_until, why


def _left(left: float, limit: float | None, reset: float | None, now_ms: float, out_until: int,
          why: SitOut | None) -> tuple[float | None, int, SitOut | None]:
    """The share of a limit left, and the sit-out it predicts: nothing left before its reset
    sits the deployment out until then. A reset already past says nothing: assume full."""
    if reset is not None and reset <= now_ms:
        return None, out_until, why
    share = max(0.0, left / limit) if limit else (1.0 if left > 0 else 0.0)
    if left <= 0 and reset is not None and reset > max(now_ms, out_until):
        return share, int(reset), SitOut.HEADROOM
    return share, out_until, why


_KEYS_OWN = (SitOut.AUTH, SitOut.BUDGET)


def key_id(up: UpstreamConfig) -> float | None:
    """The deployment's own credential as a number a record can hold (48 bits of its SHA-256,
    exact in a float), never the key itself; None when it forwards its clients' keys. Worked
    out only while such a sit-out is in force (rare), so not cached."""
    if up.api_key is None:
        return None
    return float(int(hashlib.sha256(up.api_key.encode()).hexdigest()[:12], 16))


def _bounded(d: dict[K, V]) -> dict[K, V]:
    if len(d) >= _CACHE_MAX:
        d.clear()
    return d


def _key(kind: str, deployment: str, model: str | None) -> str:
    return f"{kind}:{circuit_key(deployment, model)}"


def _keys(deployment: str, model: str | None) -> tuple[str, str, str, str]:
    """Its sit-outs (all models, this model), its headroom, its usage (+ ``#minute``)."""
    return (_key("o", deployment, None), _key("o", deployment, model), _key("h", deployment, model),
            _key("n", deployment, model))
