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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gateway.config import UpstreamConfig
from gateway.policy.breaker import circuit_key
from gateway.routing.headroom import Headroom, headroom_of
from gateway.routing.pools import Deployment, SitOut
from gateway.state.store import StateStore

K = TypeVar("K")
V = TypeVar("V")
_WHY = tuple(SitOut)
_CACHE_MAX = 4096  # model names come from clients: bounded like every per-model cache
_HEADROOM_TTL_S = 120.0  # an observation is refreshed by every answer; a stale one fades
_LATENCY_ALPHA = 0.3  # weight of the newest time-to-first-token sample


@dataclass(slots=True)
class _Local:
    """This process's own counts for one deployment and model, not yet in the store."""

    requests: int = 0  # sent since the headroom record last changed
    tokens: int = 0
    seen_at: float = -1.0  # the headroom record's observation time these counts follow
    pending_requests: int = 0  # usage not yet added to the store's minute record
    pending_tokens: int = 0


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

    # -- this process -------------------------------------------------------------------------

    def hold(self, deployment: str) -> None:
        self.in_flight[deployment] = self.in_flight.get(deployment, 0) + 1

    def release(self, deployment: str) -> None:
        self.in_flight[deployment] = max(0, self.in_flight.get(deployment, 0) - 1)

    def timed(self, deployment: str, seconds: float) -> None:
        old = self.latency_s.get(deployment)
        self.latency_s[deployment] = seconds if old is None else old + _LATENCY_ALPHA * (seconds - old)

    # -- what every answer tells ---------------------------------------------------------------

    def sent(self, up: UpstreamConfig, model: str | None, tokens: int) -> None:
        """One request went to ``up``: counted against its headroom and its configured limits."""
        local = self._local_of(_key("h", up.name, model))
        local.requests += 1
        local.tokens += tokens
        if up.limits is not None:
            local.pending_requests += 1
            local.pending_tokens += tokens

    def observe(self, up: UpstreamConfig, model: str | None, headers: Mapping[str, str]) -> Headroom | None:
        """The rate-limit headers of one answer of ``up``, if it carries any."""
        room = headroom_of(headers, self.wall())
        if room is None:
            return None
        key = _key("h", up.name, model)
        fields = {"at": self.wall() * 1000}
        for name, value in (("rr", room.requests_remaining), ("rl", room.requests_limit),
                            ("rt", room.requests_reset_at_ms), ("tr", room.tokens_remaining),
                            ("tl", room.tokens_limit), ("tt", room.tokens_reset_at_ms)):  # fmt: skip
            if value is not None:
                fields[name] = float(value)
        self._records[key] = fields
        local = self._local_of(key)
        local.requests = local.tokens = 0
        local.seen_at = fields["at"]
        _bounded(self._writes)[key] = (fields, _HEADROOM_TTL_S)
        return room

    async def sit_out(self, deployment: str, model: str | None, until_ms: int, why: SitOut) -> None:
        """Written at once: the other replicas must stop sending there (the failure path)."""
        key = _key("o", deployment, model)
        fields = {"u": float(until_ms), "w": float(_WHY.index(why))}
        _bounded(self._records)[key] = fields
        ttl_s = max(1.0, until_ms / 1000 - self.wall() + 1.0)
        await self.store.records_sync((), [(key, fields, ttl_s)])

    # -- picking ------------------------------------------------------------------------------

    def fresh(self, pool: str, model: str | None) -> bool:
        at = self._read_at.get((pool, model))
        return at is not None and self.monotonic() - at < self.cache_s

    async def refresh(self, pool: str, members: tuple[UpstreamConfig, ...], model: str | None) -> None:
        """One round trip: what this process saw goes out, what every replica saw comes in."""
        minute = self._minute()
        reads = [k for up in members for k in _keys(up, model, minute)]
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
        got = await self.store.records_sync(reads, writes, adds)
        records = _bounded(self._records)
        for key, rec in zip(reads, got, strict=True):
            records[key] = rec
        _bounded(self._read_at)[(pool, model)] = self.monotonic()

    def view(self, index: int, up: UpstreamConfig, model: str | None, now_ms: float) -> Deployment:
        """``up`` as of now, from the records last read plus this process's counts since."""
        out_until, why = 0, None
        for key in (_key("o", up.name, None), _key("o", up.name, model)):
            rec = self._records.get(key)
            if rec and rec.get("u", 0) > max(now_ms, out_until):
                out_until, why = int(rec["u"]), _WHY[int(rec.get("w", 0)) % len(_WHY)]
        requests_left = tokens_left = None
        hkey = _key("h", up.name, model)
        local = self._local.get(hkey) or _Local()
        room = self._records.get(hkey)
        if room:
            if local.seen_at != room.get("at", -1.0):  # another replica's newer observation
                local.requests = local.tokens = 0
                local.seen_at = room.get("at", -1.0)
            for left_key, limit_key, reset_key, used in (("rr", "rl", "rt", local.requests),
                                                          ("tr", "tl", "tt", local.tokens)):  # fmt: skip
                if left_key not in room or room.get(reset_key, math.inf) <= now_ms:
                    continue  # not said, or reset since: assume full
                left = room[left_key] - used
                limit = room.get(limit_key)
                share = max(0.0, left / limit) if limit else (1.0 if left > 0 else 0.0)
                if left_key == "rr":
                    requests_left = share
                else:
                    tokens_left = share
                reset = room.get(reset_key)
                if left <= 0 and reset is not None and reset > max(now_ms, out_until):
                    out_until, why = int(reset), SitOut.HEADROOM
        elif up.limits is not None:
            minute = self._minute()
            usage = self._records.get(_key("n", up.name, model) + f"#{minute}") or {}
            n = usage.get("n", 0.0) + local.pending_requests
            k = usage.get("k", 0.0) + local.pending_tokens
            ends = (minute + 1) * 60_000
            limits: tuple[tuple[int | None, float, bool], ...] = (
                (up.limits.requests_per_minute, n, True), (up.limits.tokens_per_minute, k, False))
            for cap, spent, is_requests in limits:
                if cap is None:
                    continue
                share = max(0.0, 1.0 - spent / cap)
                if is_requests:
                    requests_left = share
                else:
                    tokens_left = share
                if spent >= cap and ends > max(now_ms, out_until):
                    out_until, why = ends, SitOut.HEADROOM
        return Deployment(
            index=index, name=up.name, weight=up.weight, in_flight=self.in_flight.get(up.name, 0),
            latency_s=self.latency_s.get(up.name), requests_left=requests_left, tokens_left=tokens_left,
            out_until_ms=out_until, out_why=why,
        )  # fmt: skip

    def _minute(self) -> int:
        return int(self.wall() // 60)

    def _local_of(self, key: str) -> _Local:
        local = self._local.get(key)
        if local is None:
            local = _bounded(self._local)[key] = _Local()
        return local



def _bounded(d: dict[K, V]) -> dict[K, V]:
    if len(d) >= _CACHE_MAX:
        d.clear()
    return d


def _key(kind: str, deployment: str, model: str | None) -> str:
    return f"{kind}:{circuit_key(deployment, model)}"


def _keys(up: UpstreamConfig, model: str | None, minute: int) -> list[str]:
    keys = [_key("o", up.name, None), _key("o", up.name, model), _key("h", up.name, model)]
    if up.limits is not None:
        keys.append(_key("n", up.name, model) + f"#{minute}")
    return keys
