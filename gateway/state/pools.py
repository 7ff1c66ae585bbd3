"""What the replicas know of each pool deployment, through the state store, and what this
process alone knows (requests in flight, time to first token).

Five records per deployment and model, each under its own TTL. The model is the one the
deployment is sent (after its ``model_map``), not the name the client asked for: its key's
limits and rate limits are the provider's for that model, so two names mapped to one model
share its count (kept by the client's name, a key with ``requests_per_minute: 10`` and
``gpt-*`` mapped to one model took 10 calls per name, 20 in a minute, measured):

    o:<deployment>            sits out (every model): an exhausted or refused key
    o:<deployment>/<model>    sits out for this model: a rate limit, until its reset
    h:<deployment>/<model>    headroom from the last answer's rate-limit headers, and when that
                              answer's request was sent (``t0``)
    s:<deployment>/<model>#m  requests and tokens every replica sent there in minute m, by the
                              tenth of a second they were sent in (shared stores only)
    n:<deployment>/<model>#m  requests and tokens sent in minute m (deployments with ``limits``)
    f:<deployment>/<model>    the smallest request it refused as larger than its tokens per
                              minute, and until when that is remembered (``over_window``)

A sit-out is written under the deployment's key as well (``o:~<digest>``, ``record_id``: a
digest of its credential, base URL and configured headers, keyed by ``loop_breaker.secret``
when set) and read under both: a new key of the same account shares the name's rate limit,
and a rename that keeps the key keeps the key's.

A pick costs no store round trip: the records of a pool's deployments are read together, in
one round trip, at most once per ``cache_s`` per pool and model, and the headroom and sends
this process saw since are written in the same round trip (or by a flush once no read has
come for ``FLUSH_S``). A sit-out is written at once (the failure path), so the other replicas
stop sending there within ``cache_s``; one the store does not hold when read (written while it
was taken for down, lost with a restarted Redis) is written back, until its end. A headroom
reading is counted down by every send made after its request: this process's own at once,
exactly, the other replicas' as they report them, by when they were sent (so none is counted
twice: one a reading already holds is not taken off it again). A deployment is so predicted
empty before its provider says so with a 429.

With a shared store, a deployment whose configured ``limits`` decide (its answers carry no
rate-limit headers) is the exception: each pick takes its request from the minute's count in
the store, atomically (``take``, one round trip), so the limits hold across replicas; one
whose count is used up sits out until the minute's end.

Each pool conversation's home (prompt-cache affinity, gateway/state/affinity.py) is kept in
the store too, under ``home:<pool>:<conversation>``: claimed in one round trip the first time
this process meets the conversation (``claim_home``), its TTL extended with the next read of
the records (``keep_home``), which reads it back: one another replica moved is followed here
from then on (``moved_home``).
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from gateway.config import DeploymentLimits, UpstreamConfig
from gateway.policy.breaker import CircuitRecord, circuit_key
from gateway.routing.headroom import TOKENS_ALL, TOKENS_SETTLED, UNSTATED_WINDOW_MS, Headroom, headroom_of
from gateway.routing.pools import Deployment, SitOut, relayed_scope, unscoped
from gateway.routing.stored import STORED_TTL_S
from gateway.routing.stored import key as stored_key
from gateway.state.memory import passes
from gateway.state.shared import SharedCircuit
from gateway.state.store import StateStore

if TYPE_CHECKING:
    from gateway.services import UpstreamRuntime

K = TypeVar("K")
V = TypeVar("V")
_WHY = tuple(SitOut)
_CACHE_MAX = 4096  # model names come from clients: bounded like every per-model cache
_HEADROOM_TTL_S = 120.0  # an observation is refreshed by every answer; a stale one fades
_USAGE_TTL_S = 120.0  # a minute's usage, read until the minute after it
_SENDS_TTL_S = 180.0  # a minute's sends, read until the minute after it
_SLOT_MS = 100  # sends are reported by the tenth of a second they were sent in
_LOG_MS = 120_000.0  # this process's own sends are kept this long (a reading's lifetime)
_LATENCY_ALPHA = 0.3  # weight of the newest time-to-first-token sample
# How long a request refused as larger than a deployment's whole tokens per minute marks that
# size as too big for it. The refusal is about the window, not what was left of it (Azure's
# "retry after 86400 seconds", OpenAI's "Request too large ... Limit 30000, Requested 30601":
# CHANGELOG, "Azure"), so no refill within the minute changes it; only the operator's raising
# the quota does. Five minutes: a steady run of large requests pays one refused call each five
# minutes rather than one each, and a quota raised is used within five minutes (meanwhile
# those requests are served by siblings, never refused for it).
OVER_WINDOW_MS = 300_000
# The records this process writes back when the store read lacks them (``_sync``): sit-outs and
# sizes refused as over a window, both written at once and both lost with a restarted Redis.
_WRITTEN_BACK = ("o:", "f:")
OBSERVE_EVERY_S = 0.05  # an answer's rate-limit headers are read at most this often per deployment
# Sends not yet reported go out with the next read of the pool's records, or once no read has
# come for this long (a replica that falls quiet after a burst): longer than the read
# interval, so that steady traffic never pays a round trip of its own for them.
FLUSH_S = 1.0

Slot = tuple[int, int]  # (minute, tenth of a second in it)
ModelMap = tuple[tuple[str, str], ...]  # an upstream's model_map
_KeyOuts = tuple[UpstreamConfig, bytes | None, tuple[str, ...]]


@dataclass(slots=True)
class _Sends:
    """What this process sent to one deployment and model."""

    times: list[float] = field(default_factory=list)  # wall ms of each send, oldest first
    tokens: list[int] = field(default_factory=list)  # tokens of every send up to each, inclusive
    first: int = 0  # the number of sends before ``times[0]`` (those are forgotten)
    tokens_before: int = 0  # their tokens
    refused: list[tuple[int, int]] = field(default_factory=list)  # (send, tokens) answered 429
    # By when they were sent: not yet added to the store's sends (s:), and added already.
    unreported: dict[Slot, list[int]] = field(default_factory=dict)
    reported: dict[Slot, list[int]] = field(default_factory=dict)
    # Minute -> [requests, tokens] not yet in that minute's usage (n:…#m), for configured
    # limits: by the minute they were sent in, which the read that takes them may not be in.
    pending: dict[int, list[int]] = field(default_factory=dict)
    flushes: int = 0  # times ``pending`` went out: a send's estimate is in it until the next
    # Minute -> [store epoch, tokens]: usages below estimates that left this process, to take
    # off that minute's count while the store holds them still (the same epoch).
    credit: dict[int, list[int]] = field(default_factory=dict)
    # Calls counted against configured limits whose answers have not come: ticket -> (minute,
    # estimate, the store epoch a take counted it in the store's ``e`` at; None: not there).
    flight: dict[int, tuple[int, int, int | None]] = field(default_factory=dict)
    # Minute -> [store epoch, tokens]: estimates of taken calls since answered (or given up),
    # to take off that minute's ``e`` (the estimates in flight) while the store holds them.
    landed: dict[int, list[int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.first + len(self.times)

    def since(self, base: int) -> tuple[int, int]:
        """The requests and tokens of the sends from the ``base``-th on, less those refused."""
        base = max(base, self.first)
        total = self.total
        if base >= total:
            return 0, 0
        before = self.tokens_before if base == self.first else self.tokens[base - self.first - 1]
        n, k = total - base, self.tokens[-1] - before
        for send, tokens in self.refused:
            if send >= base:
                n -= 1
                k -= tokens
        return n, k

    def forget(self, now_ms: float, minute: int) -> None:
        cut = bisect.bisect_left(self.times, now_ms - _LOG_MS)
        if cut:
            self.tokens_before = self.tokens[cut - 1]
            del self.times[:cut], self.tokens[:cut]
            self.first += cut
            self.refused = [r for r in self.refused if r[0] >= self.first]
        for slot in [s for s in self.reported if s[0] < minute - 1]:
            del self.reported[slot]


@dataclass(frozen=True, slots=True)
class Mark:
    """One request among this process's sends to its deployment: the ``index``-th, sent at
    ``t0`` (wall ms). Its answer's headers count every send up to it."""

    index: int
    t0: float
    # The store's epoch its estimate was counted in (``StateStore.epoch``): at the send, or at
    # the start of its ``take``; None when a take's was not known to be the store's.
    epoch: int | None = None
    flushes: int = -1  # its sends' ``flushes`` at the send (-1: taken, never pending here)
    ticket: int = 0  # its estimate among the calls in flight (``_Sends.flight``); 0: none


@dataclass(frozen=True, slots=True)
class Taken:
    """A ``take`` that passed: the store epoch it was counted in, or None when the store may
    have served it from this process's memory alone (an epoch moved on during the take); and
    its estimate's ticket among the calls in flight (``_Sends.flight``)."""

    epoch: int | None
    ticket: int = 0


class PoolSent(NamedTuple):
    """A request's last call to a pool deployment, as its answer's usage corrects it (``used``)."""

    up: UpstreamConfig
    model: str | None  # as ``sent`` was given it
    mark: Mark
    estimate: int  # the tokens it was counted as
    api: str  # the API it was sent in (``policy/window_count``)
    body: bytes  # as sent: its output budget is read from it for an Azure deployment only


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
    _sends: dict[tuple[str, str | None], _Sends] = field(default_factory=dict)
    _writes: dict[str, tuple[dict[str, float], float]] = field(default_factory=dict)
    _keys: dict[tuple[str, str | None], tuple[str, str, str, str, str]] = field(default_factory=dict)
    _over_keys: dict[tuple[str, str | None], str] = field(default_factory=dict)  # ``_over_key``
    # (deployment, model asked) -> (its model_map, the model it is sent): ``served``
    _served: dict[tuple[str, str], tuple[ModelMap, str | None]] = field(default_factory=dict)
    # (deployment, model) -> (its config, ``record_key``, its key's sit-out records): ``_key_outs``
    _outs: dict[tuple[str, str | None], _KeyOuts] = field(default_factory=dict)
    _observed_at: dict[str, float] = field(default_factory=dict)  # monotonic, per headroom key
    # Headroom key -> (its reading's ``at``, the first of this process's sends after it) for
    # the readings this process made: its own sends are counted off them exactly.
    _own_readings: dict[str, tuple[float, int]] = field(default_factory=dict)
    # Headroom key -> ((read generation, reading's t0), the other replicas' sends after it).
    _others: dict[str, tuple[tuple[int, float], tuple[float, float]]] = field(default_factory=dict)
    _generation: int = 0  # counts the store reads: the other replicas' sends change only then
    # (deployment, model) -> (epoch ms, the limits it was taken against, the read generation and
    # store epoch it holds for): its shared count was found used up until then (a take). Only
    # while the deployment's limits are still those: a reload that changed them (raised in the
    # same minute) applies at once. A count of requests only grows in its minute: held to the
    # minute's end (None). One of tokens comes down as the answers in flight put their usages in
    # place of their estimates: held until the next read of the records, which decides then,
    # unless the store lost what it held or served from memory since (``StateStore.epoch``): a
    # count read from a Redis restarted empty is not the minute's, and the minute's end holds.
    _used_up: dict[tuple[str, str | None], tuple[int, DeploymentLimits, tuple[int, int] | None]] = \
        field(default_factory=dict)  # fmt: skip
    _synced_at: float = -math.inf  # monotonic: the last round trip that took this process's sends
    _tickets: int = 0  # the last ticket given to a call in flight (``_Sends.flight``)
    # Deployment -> its (deployment, model) whose ``_Sends.flight`` holds calls: all answered
    # once none is in flight here (``release``).
    _flying: dict[str, set[tuple[str, str | None]]] = field(default_factory=dict)
    # Deployment -> a future done at the next answer of a call of it in flight here
    # (``answered``): a request waiting for room that those estimates hold (pipeline/pool.py).
    _answers: dict[str, asyncio.Future[None]] = field(default_factory=dict)
    _homes: dict[str, tuple[str, float]] = field(default_factory=dict)  # conversations' homes to keep
    # Conversations whose home a keep found another in the store than this process's copy (another
    # replica moved it): store key -> that home, taken by the pool's table at the next turn.
    _moved: dict[str, str] = field(default_factory=dict)
    # The key of conversations' names in the store (from ``loop_breaker.secret``); None: plain.
    home_key: bytes | None = None
    # The key of deployments' names in the store (``record_id``), of the config in force.
    record_key: bytes | None = None
    # Pool -> its deployments in the config in force (``in_force``, ``gone``).
    _in_force: dict[str, frozenset[str]] = field(default_factory=dict)
    # Pool -> the deployments of the config in force, as requests send to them (``added``).
    _members: dict[str, tuple[UpstreamRuntime, ...]] = field(default_factory=dict)
    # Set by the next reload (``next_reload``): made only once a request waits for a reset.
    _reload: asyncio.Event | None = None
    _timer: asyncio.TimerHandle | None = None
    _flushing: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        # One process's memory: no other replica sends, and no limit needs taking.
        self._shared = self.store.backend != "memory"

    @property
    def shared(self) -> bool:
        """Whether other replicas read what this one writes (a shared store)."""
        return self._shared

    # -- conversations' homes (affinity) --------------------------------------------------------

    def _home(self, pool: str, conversation: str) -> str:
        """The conversation's name in the store: its key (a digest of what the client sent: the
        opening's is of the system prompt and first user message) MACed with ``home_key``, so
        that a reader of the store cannot confirm a guessed prompt by hashing it (the loop
        breaker's fingerprints are keyed for the same reason, by the same secret, which replicas
        sharing a store share). Without a secret the names stay plain digests."""
        key = self.home_key
        if key is None:
            return f"{pool}:{conversation}"
        kind, _, _ = conversation.partition(":")
        return f"{pool}:{kind}:{hmac.new(key, conversation.encode(), hashlib.sha256).hexdigest()[:24]}"

    async def claim_home(self, pool: str, conversation: str, proposed: str, members: Sequence[str],
                         ttl_s: float) -> tuple[str, bool, str | None]:  # fmt: skip
        """The home the store holds for ``conversation`` while it is one of ``members``, else
        ``proposed``, claimed for every replica; whether it was claimed now; and the home it
        replaced (a removed one)."""
        return await self.store.home_claim(self._home(pool, conversation), proposed, members, ttl_s)

    async def move_home(self, pool: str, conversation: str, frm: str, to: str, members: Sequence[str],
                        ttl_s: float) -> tuple[str, bool]:  # fmt: skip
        """``to`` as the conversation's home for every replica, in place of ``frm`` (which did not
        answer its turn), unless another replica set another member since; the home now, and
        whether this call moved it (else another replica's move had, to it or elsewhere)."""
        return await self.store.home_move(self._home(pool, conversation), frm, to, members, ttl_s)

    def keep_home(self, pool: str, conversation: str, home: str, ttl_s: float) -> None:
        """The conversation is still in use here: its home is kept ``ttl_s`` more in the store,
        with the next round trip (no round trip of its own while the pool serves), and read back
        (``moved_home``)."""
        _bounded(self._homes)[self._home(pool, conversation)] = (home, ttl_s)
        if self._timer is None:
            self._flush_later()

    def moved_home(self, pool: str, conversation: str) -> str | None:
        """The conversation's home in the store when the last keep found it another than the one
        kept (another replica moved it), once; else None. No I/O."""
        if not self._moved:  # nearly always: no digest to compute
            return None
        return self._moved.pop(self._home(pool, conversation), None)

    # -- stored objects: which deployment's key holds each --------------------------------------

    async def remember_stored(self, object_id: str, deployment: str, ttl_s: float = STORED_TTL_S) -> None:
        """``deployment`` made ``object_id`` (a Responses answer, a conversation), which only
        its key can read: kept ``ttl_s``, by default as long as the provider keeps it
        (routing/stored.py)."""
        if ttl_s > 0:
            await self.store.stored_put(stored_key(object_id), deployment, ttl_s)

    async def stored_on(self, object_id: str) -> str | None:
        """The deployment that made ``object_id``; None when none of the pools' did (or it is
        forgotten)."""
        return await self.store.stored_get(stored_key(object_id))

    # -- this process -------------------------------------------------------------------------

    def hold(self, deployment: str) -> None:
        self.in_flight[deployment] = self.in_flight.get(deployment, 0) + 1

    def release(self, deployment: str) -> None:
        left = self.in_flight[deployment] = max(0, self.in_flight.get(deployment, 0) - 1)
        if not left and deployment in self._flying:
            # None in flight here: every call of it counted as in flight is over, whether its
            # answer told a usage or not (a failure, a stream cut, an answer without usage).
            for key in self._flying.pop(deployment):
                sends = self._sends.get(key)
                if sends is not None:
                    for ticket in list(sends.flight):
                        self._land(key, sends, ticket)

    def timed(self, deployment: str, seconds: float) -> None:
        old = self.latency_s.get(deployment)
        self.latency_s[deployment] = seconds if old is None else old + _LATENCY_ALPHA * (seconds - old)

    # -- configured limits, taken at the pick ---------------------------------------------------

    def takes(self, up: UpstreamConfig, model: str | None) -> bool:
        """Whether a request to ``up`` must first ``take`` its share of the configured limits:
        with a shared store, while no rate-limit headers state its limit (they decide then;
        Azure's state only what is left, which leaves the configured limits to decide)."""
        if up.limits is None or not self._shared:
            return False
        return not _states_limit(self._records.get(self._keys_of(up.name, self.served(up, model))[2]))

    async def take(self, up: UpstreamConfig, model: str | None, tokens: int) -> Taken | None:
        """One request of ``tokens`` counted against ``up``'s configured limits in the store,
        atomically, or nothing when that would pass them: None, and ``up`` sits out here until
        the minute's end. Counting each replica's sends in the store afterwards let two
        replicas each send the whole limit in the same moment (40 calls for 20, measured).
        What passed goes to ``sent``: where it was counted decides whether a usage below it
        may lower the store's count (``used``)."""
        assert up.limits is not None
        model = self.served(up, model)
        key = f"{self._keys_of(up.name, model)[4]}#{(minute := self._minute())}"
        limits = up.limits
        for again in (True, False):
            epoch = self.store.epoch
            rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
            ok, n, k, e = await self.store.records_take(key, rpm, tpm, tokens, _USAGE_TTL_S)
            _bounded(self._records)[key] = {"n": float(n), "k": float(k), "e": float(e)}
            if ok:
                at = epoch if self.store.epoch == epoch else None
                return Taken(at, self._fly((up.name, model), minute, tokens, at))
            sends = self._sends.get((up.name, model))
            credit = sends.credit.get(minute) if sends is not None else None
            if not again or credit is None or credit[0] != epoch \
                    or not taken_with(n, k, credit[1], limits, tokens):  # fmt: skip
                break
            # Refused only for what this process's answers gave back and has not sent yet (up to
            # FLUSH_S): sent now, and asked once more. Else the deployment sat out the rest of
            # the minute with room left (162 refusals at 8,800 of 10,000 tokens, review).
            await self._sync([], minute)
        # Refused for its tokens alone, the count may be full of estimates still in flight (here
        # or on other replicas), which their answers bring down to their usages within seconds:
        # the deployment sits out until the next read of the records, not the minute, or until
        # an answer of its calls here (``_land``). Held to the minute's end, a burst of 60
        # requests estimated at 200 tokens over three deployments of 2,000 a minute, answered at
        # 19 each, left the pool answering 429 without a call for the rest of the minute at 10 %
        # of its tokens used (review). Whether the request waits for them is its view's
        # ``settling`` (the count's ``e``, written above).
        by_requests = rpm is not None and n + 1 > rpm
        held = None if by_requests else (self._generation, self.store.epoch)
        _bounded(self._used_up)[(up.name, unscoped(model))] = ((minute + 1) * 60_000, limits, held)
        return None

    # -- calls in flight against configured limits ----------------------------------------------

    def landed(self, up: UpstreamConfig, model: str | None, mark: Mark) -> None:
        """The call ``mark`` stands for is over without a usage to put in place of its estimate
        (a failure, an answer that states none): its estimate stays counted (the cautious side),
        no longer as in flight. Once per call (``used`` and ``refused`` land it too)."""
        self._land_ticket(up, model, mark.ticket)

    def untaken(self, up: UpstreamConfig, model: str | None, taken: Taken) -> None:
        """A ``take`` whose call was never made (its circuit opened meanwhile): not in flight."""
        self._land_ticket(up, model, taken.ticket)

    def _land_ticket(self, up: UpstreamConfig, model: str | None, ticket: int) -> None:
        if ticket:
            key = (up.name, self.served(up, model))
            sends = self._sends.get(key)
            if sends is not None:
                self._land(key, sends, ticket)

    def settling(self, up: UpstreamConfig, model: str | None, tokens: int) -> bool:
        """Whether ``up``'s configured limits, as the last take found them (a refusal: no I/O),
        refuse ``tokens`` for the estimates of calls in flight alone: its requests not used up,
        and the request would fit were those answered at nothing (``Deployment.settling``)."""
        limits = up.limits
        if limits is None or limits.tokens_per_minute is None:
            return False
        model = self.served(up, model)
        minute = self._minute()
        rec = self._records.get(f"{self._keys_of(up.name, model)[4]}#{minute}") or {}
        rpm, n = limits.requests_per_minute, rec.get("n", 0.0)
        if rpm is not None and n + 1 > rpm:
            return False
        k = rec.get("k", 0.0) - self._in_flight(self._sends.get((up.name, model)), rec, minute)
        return not passes(0, round(max(0.0, k)), None, limits.tokens_per_minute, tokens)

    def answered(self, names: Sequence[str]) -> list[asyncio.Future[None]]:
        """A future for each of ``names``, done at the next answer of a call of it in flight
        here (``_land``): what a request waiting for room its estimates hold waits for, beside
        the next read of the records (pipeline/pool.py). Shared: never cancel them."""
        loop = asyncio.get_running_loop()
        out = []
        for name in names:
            fut = self._answers.get(name)
            if fut is None or fut.done():
                fut = self._answers[name] = loop.create_future()
            out.append(fut)
        return out

    def read_in_s(self, pool: str, model: str | None) -> float:
        """Seconds until the records of ``pool`` and ``model`` are read again (``fresh``)."""
        at = self._read_at.get((pool, model))
        return 0.0 if at is None else max(0.0, self.cache_s - (self.monotonic() - at))

    def _fly(self, key: tuple[str, str | None], minute: int, tokens: int, epoch: int | None) -> int:
        """A call of ``tokens`` estimated, counted in ``minute``'s limits, in flight from now: its
        ticket. ``epoch``: the store's, where a take counted it in the store's ``e``."""
        sends = self._sends.get(key)
        if sends is None:
            sends = _bounded(self._sends)[key] = _Sends()
        if len(sends.flight) >= _CACHE_MAX:  # answers never told (a bug): the oldest go
            for ticket in list(sends.flight)[: _CACHE_MAX // 2]:
                self._land(key, sends, ticket)
        self._tickets += 1
        sends.flight[self._tickets] = (minute, tokens, epoch)
        self._flying.setdefault(key[0], set()).add(key)
        return self._tickets

    def _land(self, key: tuple[str, str | None], sends: _Sends, ticket: int) -> None:
        """The call ``ticket`` stands for is in flight no more: its estimate comes off the store's
        ``e`` with the next round trip (where the store holds it: the epoch it was taken in), a
        request that waits for room there looks again, and a take's refusal here holds the
        deployment out no longer (its room may be back: a usage below the estimate)."""
        entry = sends.flight.pop(ticket, None)
        if entry is None:
            return
        minute, tokens, epoch = entry
        if epoch is not None and epoch == self.store.epoch and minute >= self._minute() - 1:
            cell = sends.landed.get(minute)
            if cell is None or cell[0] != epoch:
                sends.landed[minute] = [epoch, tokens]
            else:
                cell[1] += tokens
            if self._timer is None:
                self._flush_later()
        name = key[0]
        held = self._used_up.get((name, unscoped(key[1])))
        if held is not None and held[2] is not None and held[2][1] == self.store.epoch:
            del self._used_up[(name, unscoped(key[1]))]
        fut = self._answers.pop(name, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def _in_flight(self, sends: _Sends | None, usage: Mapping[str, float], minute: int) -> float:
        """Of ``minute``'s count of tokens (``usage``: the store's record), how many are the
        estimates of calls still in flight: with a shared store, its ``e`` (every replica's
        takes) less what this process saw answered since, not yet sent; on one process's
        memory, its own calls in flight."""
        if self._shared:
            e = usage.get("e", 0.0)
            landed = sends.landed.get(minute) if sends is not None else None
            if landed is not None and landed[0] == self.store.epoch:
                e -= landed[1]
            return max(0.0, e)
        return float(sum(t for m, t, _ in sends.flight.values() if m == minute)) if sends is not None else 0.0

    # -- what every answer tells ---------------------------------------------------------------

    def sent(self, up: UpstreamConfig, model: str | None, tokens: int, taken: Taken | bool = False) -> Mark:
        """One request went to ``up``: counted against its headroom and, unless it was taken
        from them already (``take``'s answer; True: taken where it is not known), its
        configured limits. The mark goes with its answer to ``observe``."""
        model = self.served(up, model)
        sends = self._sends.get((up.name, model))
        if sends is None:
            sends = _bounded(self._sends)[(up.name, model)] = _Sends()
        now_ms = self.wall() * 1000
        if sends.times and sends.times[0] < now_ms - _LOG_MS:
            sends.forget(now_ms, int(now_ms // 60_000))
        if isinstance(taken, Taken):
            mark = Mark(sends.total, now_ms, taken.epoch, ticket=taken.ticket)
        elif taken or up.limits is None:
            mark = Mark(sends.total, now_ms)
        else:  # counted here (``pending``), in flight until answered: this process's own ``e``
            ticket = self._fly((up.name, model), int(now_ms // 60_000), tokens, None)
            mark = Mark(sends.total, now_ms, self.store.epoch, sends.flushes, ticket)
        sends.times.append(now_ms)
        sends.tokens.append((sends.tokens[-1] if sends.tokens else sends.tokens_before) + tokens)
        if up.limits is not None and not taken:
            # Counted in the minute it is sent in: added to whichever minute the next read came
            # in, two sends at 00:24 kept the pool refusing every request at 01:02 (measured).
            cell = sends.pending.get(minute := int(now_ms // 60_000))
            if cell is None:
                sends.pending[minute] = [1, tokens]
            else:
                cell[0] += 1
                cell[1] += tokens
        if self._shared:
            cell = sends.unreported.get(slot := _slot(now_ms))
            if cell is None:
                sends.unreported[slot] = [1, tokens]
            else:
                cell[0] += 1
                cell[1] += tokens
            if self._timer is None:
                self._flush_later()
        return mark

    def refused(self, up: UpstreamConfig, model: str | None, mark: Mark, tokens: int) -> None:
        """The request ``mark`` stands for was answered 429: the provider did not count it, so
        neither does its headroom (the configured limits count every call). Counted, the 429s
        of a burst kept a pool predicted empty after its buckets had refilled."""
        key = (up.name, self.served(up, model))
        sends = self._sends.get(key)
        if sends is not None and mark.ticket:
            self._land(key, sends, mark.ticket)
        if sends is None or mark.index < sends.first:
            return
        sends.refused.append((mark.index, tokens))
        if self._shared:
            cell = sends.unreported.setdefault(_slot(mark.t0), [0, 0])
            cell[0] -= 1
            cell[1] -= tokens

    def used(self, up: UpstreamConfig, model: str | None, mark: Mark, estimate: int, tokens: int) -> None:
        """The request ``mark`` stands for, counted as ``estimate`` tokens when sent (its bytes /
        3.5: the prompt alone), was answered, and its provider's window counted ``tokens`` of it
        (``policy/window_count``: mostly its prompt and output, as its usage says):
        its send counts that from now on, against the readings taken before it and the
        configured ``limits``' minute, and the difference goes to the other replicas' count.
        Counted at the estimate alone, a deployment's windows missed every answer's output.
        Once per answer (the caller's ``pool_sent`` is taken as it is read). A usage below the
        estimate lowers the minute's count by the difference only where the estimate is known
        to be counted: still pending here, or in the store at the epoch it went there in (a read
        or a flush took it, or ``take`` counted it there, and the store has served nothing from
        memory, lost nothing, since: ``StateStore.epoch``; and there by no more than this
        replica's own counts it still holds, RECORDS_ADD). Lowered where it never was (a
        Redis restarted empty while the answer came, or taken for down at the take), the count
        went below what the other replicas had taken: 15,000 tokens admitted in a minute of
        10,000 (review). Elsewhere the difference is lost, the count held high to the minute's
        end (the cautious side)."""
        key = (up.name, self.served(up, model))
        sends = self._sends.get(key)
        if sends is not None and mark.ticket:
            self._land(key, sends, mark.ticket)  # answered: its estimate is in flight no more
        delta = tokens - estimate
        if not delta or tokens < 0:
            return
        if sends is None or mark.index < sends.first:
            return  # forgotten already: older than any reading it could correct
        cumulative = sends.tokens
        # The sends after it in this process's log, while it was answered (a handful): each
        # running total from its own on moves by the difference.
        for i in range(mark.index - sends.first, len(cumulative)):
            cumulative[i] += delta
        minute = int(mark.t0 // 60_000)
        if up.limits is not None and minute >= self._minute() - 1:  # (else read by no one any more)
            here = sends.pending.get(minute) if mark.flushes == sends.flushes else None
            if here is not None:  # its estimate is in it
                here[1] += delta
            elif delta > 0:
                cell = sends.pending.get(minute)
                if cell is None:
                    sends.pending[minute] = [0, delta]
                else:
                    cell[1] += delta
            elif mark.epoch is not None and mark.epoch == self.store.epoch:
                credit = sends.credit.get(minute)
                if credit is None or credit[0] != mark.epoch:
                    sends.credit[minute] = [mark.epoch, delta]
                else:
                    credit[1] += delta
        if self._shared:
            cell = sends.unreported.setdefault(_slot(mark.t0), [0, 0])
            cell[1] += delta
            if self._timer is None:
                self._flush_later()

    def observe(self, up: UpstreamConfig, model: str | None, headers: Mapping[str, str],
                mark: Mark | None = None, refused: bool = False) -> Headroom | None:  # fmt: skip
        """The rate-limit headers of one answer of ``up``, if it carries any; ``mark``: what
        ``sent`` said of its request. What was sent after that request is not in the headers
        (the provider counts a request as it receives it): it stays counted off them, this
        process's sends and the other replicas' as they report them. Counting it as nothing
        let 40 concurrent requests through on a reading of 9 left (12 of them 429s, measured).
        Read at most once per ``OBSERVE_EVERY_S`` per deployment and model: in between, what is
        sent is counted off the last reading (``sent``), which predicts the same exhaustion at
        a fraction of the cost of parsing every answer (about 10 µs each). A rate limit's
        answer (``refused``) is always read: a reading older than it, counted down only by the
        sends known here, let every request that waited out the 429 go at once (10 calls,
        9 of them 429s again, measured with two replicas)."""
        model = self.served(up, model)
        key = _key("h", up.name, model)
        now = self.monotonic()
        if not refused and now - self._observed_at.get(key, -math.inf) < OBSERVE_EVERY_S:
            return None
        room = headroom_of(headers, self.wall())
        if room is None:
            return None
        _bounded(self._observed_at)[key] = now
        at = self.wall() * 1000
        if mark is None:  # counted from now on
            sends = self._sends.get((up.name, model))
            mark = Mark((sends.total if sends is not None else 0) - 1, at)
        fields = {"at": at, "t0": mark.t0}
        for name, value in (("rr", room.requests_remaining), ("rl", room.requests_limit),
                            ("rt", room.requests_reset_at_ms), ("tr", room.tokens_remaining),
                            ("tl", room.tokens_limit), ("tt", room.tokens_reset_at_ms)):  # fmt: skip
            if value is not None:
                fields[name] = float(value)
        if room.tokens_meter:
            fields["tm"] = float(room.tokens_meter)
        if refused:
            fields["z"] = 1.0  # a 429's: where it states no limit, its wait says all (``_kind``)
        self._records[key] = fields
        _bounded(self._own_readings)[key] = (at, mark.index + 1)
        _bounded(self._writes)[key] = (fields, _HEADROOM_TTL_S)
        return room

    async def sit_out(self, up: UpstreamConfig, model: str | None, until_ms: int, why: SitOut) -> None:
        """Written at once: the other replicas must stop sending there (the failure path).
        ``model``: None for every model. A sit-out that is the key's own (refused, out of
        credit) names the key (``key_id``), so that a new key in the config ends it."""
        model = self.served(up, model)
        key_name = _key("o", up.name, model)
        fields = {"u": float(until_ms), "w": float(_WHY.index(why))}
        if why in _KEYS_OWN and (key := key_id(up, self.record_key)) is not None:
            fields["k"] = key
        ttl_s = max(1.0, until_ms / 1000 - self.wall() + 1.0)
        # Under its key's name too (``_key_outs``: its second is this model's), in the same round trip.
        names = (key_name, *self._key_outs(up, model)[1:])
        records = _bounded(self._records)
        for name in names:
            records[name] = fields
        await self.store.records_sync((), [(name, fields, ttl_s) for name in names])

    # -- requests larger than a deployment's tokens per minute ----------------------------------

    async def over_window(self, up: UpstreamConfig, model: str | None, tokens: int) -> None:
        """``up`` refused a request of ``tokens`` (the pool's estimate: what a later request is
        compared by) as larger than its whole tokens-per-minute window: requests at least that
        large pass it by for ``OVER_WINDOW_MS`` while a sibling may take them (``too_big``). The
        smallest such size is kept. Written at once, as a sit-out: the other replicas stop
        paying the refused call too. The provider's own count ("Requested 30601") is not in the
        estimate's units, so it is not what a later request's estimate is compared with."""
        key = self._over_key(up.name, self.served(up, model))
        now_ms = self.wall() * 1000
        # The least in the store, in one step: taken from this process's last read and written
        # over, another replica's smaller size written meanwhile was replaced by a larger one.
        k, u = await self.store.records_least(key, max(1, tokens), now_ms + OVER_WINDOW_MS, now_ms)
        _bounded(self._records)[key] = {"k": k, "u": u}

    def too_big(self, up: UpstreamConfig, model: str | None, tokens: int, now_ms: float) -> bool:
        """Whether ``up`` refused a request no larger than ``tokens`` as over its tokens per
        minute lately (``over_window``). No I/O: the records last read."""
        rec = self._records.get(self._over_key(up.name, self.served(up, model)))
        return rec is not None and rec.get("u", 0) > now_ms and 0 < rec.get("k", 0) <= tokens

    async def fits_window(self, up: UpstreamConfig, model: str | None) -> None:
        """``up`` answered a request ``too_big`` said it would refuse: its quota was raised, and
        the memory goes, here and in the store."""
        key = self._over_key(up.name, self.served(up, model))
        # No size, but an end as a refusal's: a replica that read it over holds the refusal
        # to the same end at most, so it takes this for newer and writes nothing back (``_sync``).
        fields = {"k": 0.0, "u": self.wall() * 1000 + OVER_WINDOW_MS}
        _bounded(self._records)[key] = fields
        await self.store.records_sync((), [(key, fields, OVER_WINDOW_MS / 1000 + 1.0)])

    # -- picking ------------------------------------------------------------------------------

    def fresh(self, pool: str, model: str | None) -> bool:
        at = self._read_at.get((pool, model))
        return at is not None and self.monotonic() - at < self.cache_s

    async def refresh(self, pool: str, members: tuple[UpstreamConfig, ...], model: str | None,
                      circuits: Sequence[SharedCircuit] = (), scope: str | None = None) -> None:  # fmt: skip
        """One round trip: what this process saw goes out, what every replica saw comes in, and
        the deployments' ``circuits`` for ``model`` with it (so a pick asks the store nothing
        more). ``scope``: the records are kept under it, not under ``model`` (``fresh``,
        ``view`` and the rest are then asked with it)."""
        minute = self._minute()
        reads = []
        records_of = model if scope is None else scope
        for up in members:
            served = self.served(up, records_of)
            out_dep, out_model, hkey, skey, nkey = self._keys_of(up.name, served)
            reads += [out_dep, out_model, hkey, self._over_key(up.name, served), *self._key_outs(up, served)]
            if self._shared:
                reads += [f"{skey}#{minute - 1}", f"{skey}#{minute}"]
            if up.limits is not None:
                reads.append(f"{nkey}#{minute}")
        circuit_keys = [c.keys(model) for c in circuits]
        recs = await self._sync(reads, minute, [k for ks in circuit_keys for k in ks])
        at = 0
        for circuit, ks in zip(circuits, circuit_keys, strict=True):
            circuit.prime(ks, recs[at : at + len(ks)])
            at += len(ks)
        _bounded(self._read_at)[(pool, records_of)] = self.monotonic()

    def view(self, index: int, up: UpstreamConfig, model: str | None, now_ms: float,
             need: tuple[int, int] = (0, 0)) -> Deployment:  # fmt: skip
        """``up`` as of now, from the records last read plus this process's counts since, for a
        request that needs ``need`` tokens (input, output: its estimate and the max_tokens it
        asks): a deployment predicted to have fewer left sits out until they have refilled.
        Held to one token, a 1.5-7k-token prompt went to a key predicted to have a few hundred
        left: 11-15 token 429s a minute under overload, and at a reset 9 waiting requests of two
        replicas went to one key at once, 4 of them 429s (audit)."""
        model = self.served(up, model)
        out_dep, out_model, hkey, skey, nkey = self._keys_of(up.name, model)
        records = self._records
        out_until, why = 0, None
        for key in (out_dep, out_model, *self._key_outs(up, model)):
            rec = records.get(key)
            if rec and rec.get("u", 0) > max(now_ms, out_until):
                if "k" in rec and rec["k"] != key_id(up, self.record_key):
                    continue  # the key that was refused has since been replaced in the config
                out_until, why = int(rec["u"]), _WHY[int(rec.get("w", 0)) % len(_WHY)]
        requests_left = tokens_left = None
        sends = self._sends.get((up.name, model))
        room = records.get(hkey)
        limits = up.limits
        rpm = tpm = None
        if limits is not None:
            rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
        if room:
            at = room.get("at", -1.0)
            sent_n, sent_k = self._since(hkey, skey, room, sends)
            refused = "z" in room
            if "rr" in room:
                requests_left, out_until, why = _kind(room["rr"], sent_n, room.get("rl"), room.get("rt"), rpm,
                                                      refused, at, now_ms, out_until, why)  # fmt: skip
            if "tr" in room:
                tokens_left, out_until, why = _kind(room["tr"], sent_k, room.get("tl"), room.get("tt"), tpm,
                                                    refused, at, now_ms, out_until, why,
                                                    _metered(need, room.get("tm", TOKENS_ALL)))  # fmt: skip
        settling = short = False
        if limits is not None and not _states_limit(room):
            # Counted until a reading states a limit: one that says only what is left (Azure's)
            # took their place, and two deployments of 5 a minute were sent 20 calls of a burst
            # of 20 (audit).
            minute = self._minute()
            usage = records.get(f"{nkey}#{minute}") or {}
            ends = (minute + 1) * 60_000
            pending_n, pending_k = sends.pending.get(minute, (0, 0)) if sends else (0, 0)
            if sends and (credit := sends.credit.get(minute)) and credit[0] == self.store.epoch:
                pending_k += credit[1]
            held_else = out_until > now_ms  # out for something else (a sit-out, a reading)
            if rpm is not None:
                counted, out_until, why = _left(rpm - usage.get("n", 0.0) - pending_n, rpm,
                                                ends, now_ms, out_until, why)  # fmt: skip
                requests_left = _scarcer(requests_left, counted)
            if tpm is not None:
                before, counted_k = out_until, usage.get("k", 0.0) + pending_k
                counted, out_until, why = _left(tpm - counted_k, tpm, ends, now_ms, out_until, why,
                                                need[0])  # fmt: skip
                tokens_left = _scarcer(tokens_left, counted)
                # Out for its tokens alone (its requests, its other records leave it serving):
                # ``settling`` when it would fit were the estimates of the calls in flight
                # answered at nothing. Their answers put their usages in place (mostly less:
                # the estimate is the prompt's bytes / 3.5): a request that waits for them is
                # served within milliseconds; one that waited for the minute's end was served
                # 20 s late, or answered 429 with a retry-after of 60 (review). Else its count
                # is used up, which only the minute's end gives back.
                short = out_until > max(now_ms, before) and not held_else
                used = round(max(0.0, counted_k - self._in_flight(sends, usage, minute)))
                settling = short and not passes(0, used, None, tpm, need[0])
        if self._used_up:
            used_up, found_against, held = self._used_up.get((up.name, unscoped(model)), (0, None, None))
            if used_up > max(now_ms, out_until) and found_against == up.limits and (
                    held is None or held[0] == self._generation or held[1] != self.store.epoch):
                out_until, why = used_up, SitOut.HEADROOM
                # A take refused for its tokens holds until the next read, which decides; one
                # refused for its requests, or in a store that lost its counts since, the minute.
                settling = held is not None and held[1] == self.store.epoch and (settling or not short)
        name = up.name
        return Deployment(index, name, up.weight, self.in_flight.get(name, 0), self.latency_s.get(name),
                          requests_left, tokens_left, out_until, why, settling,
                          not room and sends is None)  # fmt: skip

    async def close(self) -> None:
        """At shutdown: what this process sent goes to the other replicas now, not never."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        if self._shared and self._unsent():
            await self._flush()

    # -- sends since a reading ------------------------------------------------------------------

    def _since(self, hkey: str, skey: str, room: dict[str, float],
               sends: _Sends | None) -> tuple[float, float]:  # fmt: skip
        """The requests and tokens sent after the request whose answer ``room`` was read from:
        this process's exactly, the other replicas' as reported (by when they were sent)."""
        t0 = room.get("t0", room.get("at", math.inf))
        n = k = 0.0
        if sends is not None:
            own = self._own_readings.get(hkey)
            if own is not None and own[0] == room.get("at"):
                base = own[1]  # its own reading: the sends after its request, whenever sent
            else:  # another replica's: the sends made since its request was (at the same
                # instant too: the cautious side)
                base = sends.first + bisect.bisect_left(sends.times, t0)
            n, k = sends.since(base)
        if self._shared:
            cached = self._others.get(hkey)
            if cached is None or cached[0] != (self._generation, t0):
                others = self._others_since(skey, t0, sends)
                _bounded(self._others)[hkey] = ((self._generation, t0), others)
            else:
                others = cached[1]
            n, k = n + others[0], k + others[1]
        return n, k

    def _others_since(self, skey: str, t0: float, sends: _Sends | None) -> tuple[float, float]:
        """The other replicas' sends after ``t0``: what the store holds of every replica's, less
        this process's own share of it. Those of the tenth of a second ``t0`` fell in count in
        proportion to the part of it after ``t0``."""
        n = k = 0.0
        since = int(t0 // 60_000)
        mine = sends.reported if sends is not None else {}
        minute = self._minute()
        for m in (minute - 1, minute):
            rec = self._records.get(f"{skey}#{m}")
            if not rec or m < since:
                continue
            for name, count in rec.items():
                if name[-1] == "k":
                    continue
                start = m * 60_000 + int(name) * _SLOT_MS
                if start + _SLOT_MS <= t0:
                    continue
                share = 1.0 if start >= t0 else (start + _SLOT_MS - t0) / _SLOT_MS
                own = mine.get((m, int(name)))
                n += max(0.0, count - (own[0] if own else 0)) * share
                k += max(0.0, rec.get(name + "k", 0.0) - (own[1] if own else 0)) * share
        return n, k

    # -- the store ----------------------------------------------------------------------------

    async def _sync(self, reads: list[str], minute: int, circuits: Sequence[str] = ()) -> list[CircuitRecord]:
        """One round trip: the readings and sends not yet written go out, ``reads`` come in, with
        the records of the sends written (what is known here of the other replicas' sends is
        the store's count less this process's share: both must move together)."""
        writes = [(k, f, ttl) for k, (f, ttl) in self._writes.items()]
        self._writes.clear()
        adds: list[tuple[str, dict[str, int], float]] = []
        credits: list[tuple[str, dict[str, int], float]] = []
        back = set(reads)
        for (name, model), sends in self._sends.items():
            _, _, _, skey, nkey = self._keys_of(name, model)
            if sends.unreported:
                by_minute: dict[int, dict[str, int]] = {}
                for (m, slot), (n, k) in sends.unreported.items():
                    by_minute.setdefault(m, {}).update({str(slot): n, f"{slot}k": k})
                    cell = sends.reported.setdefault((m, slot), [0, 0])
                    cell[0] += n
                    cell[1] += k
                sends.unreported.clear()
                for m, counts in by_minute.items():
                    adds.append((f"{skey}#{m}", counts, _SENDS_TTL_S))
                    if m >= minute - 1 and f"{skey}#{m}" not in back:
                        reads.append(f"{skey}#{m}")
                        back.add(f"{skey}#{m}")
                sends.forget(self.wall() * 1000, minute)
            if sends.pending:
                for m, (n, k) in sends.pending.items():
                    if m < minute - 1:  # read by no one any more (a replica's clock a little
                        continue  # behind may still be in the last minute: it gets them)
                    usage = f"{nkey}#{m}"
                    adds.append((usage, {"n": n, "k": k}, _USAGE_TTL_S))
                    if m == minute and usage not in back:
                        reads.append(usage)
                        back.add(usage)
                sends.pending.clear()
                sends.flushes += 1
            if sends.credit or sends.landed:
                epoch = self.store.epoch
                lower: dict[int, dict[str, int]] = {}
                for m, (at, k) in sends.credit.items():
                    # At the epoch its estimate was counted in, or not at all (``used``); after
                    # the pending counts (``adds`` in order), which the floor at 0 must not cut.
                    if at == epoch and m >= minute - 1:
                        lower[m] = {"k": k}
                for m, (at, e) in sends.landed.items():
                    # The estimates answered since come off the count's ``e`` with the usages
                    # that took their place in its ``k``: a reader sees both or neither.
                    if at == epoch and m >= minute - 1:
                        lower.setdefault(m, {})["e"] = -e
                credits += [(f"{nkey}#{m}", counts, _USAGE_TTL_S) for m, counts in lower.items()]
                sends.credit.clear()
                sends.landed.clear()
        adds += credits
        homes = [(k, home, ttl) for k, (home, ttl) in self._homes.items()]
        self._homes.clear()
        self._synced_at = self.monotonic()
        got, recs, held = await self.store.records_sync(reads, writes, adds, circuits, homes)
        for (key, home, _), there in zip(homes, held, strict=True):
            if there is not None and there != home:
                _bounded(self._moved)[key] = there
        records = _bounded(self._records)
        now_ms = self.wall() * 1000
        least: list[tuple[str, dict[str, float]]] = []
        for key, rec in zip(reads, got, strict=True):
            if key[:2] in _WRITTEN_BACK and (mine := records.get(key)) is not None \
                    and mine.get("u", 0) > max(now_ms, rec.get("u", 0)):  # fmt: skip
                # A sit-out (or a size refused as over the window) this process knows and the
                # store does not: written while the store was taken for down (served from this
                # process's memory), or lost with a restarted Redis. Read over, it was forgotten
                # at the rejoin and the key called again inside its reset (2 calls, measured); it
                # goes back to the store instead.
                if key[0] == "f":
                    least.append((key, mine))
                else:
                    self._rewrite(key, mine)
                continue
            records[key] = rec
        for key, mine in least:
            # As a refusal's own (``over_window``): a smaller size another replica wrote is kept.
            size, until = await self.store.records_least(key, mine["k"], mine["u"], now_ms)
            records[key] = {"k": size, "u": until}
        self._generation += 1
        return recs

    def _rewrite(self, key: str, fields: dict[str, float]) -> None:
        _bounded(self._writes)[key] = (fields, max(1.0, fields["u"] / 1000 - self.wall() + 1.0))
        if self._timer is None:
            self._flush_later()

    def _flush_later(self, after_s: float | None = None) -> None:
        if self._flushing is not None and not self._flushing.done():
            return  # it reschedules itself for what came meanwhile
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous test): sends go with the next read
        self._timer = loop.call_later(FLUSH_S if after_s is None else after_s, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        if not self._unsent() and not self._writes:
            return  # a read took them meanwhile
        quiet_s = self.monotonic() - self._synced_at
        if quiet_s < FLUSH_S:  # still reading: the next read takes them, at no cost of its own
            self._flush_later(FLUSH_S - quiet_s)
            return
        self._flushing = asyncio.get_running_loop().create_task(self._flush())
        self._flushing.add_done_callback(lambda _t: self._flush_later() if self._unsent() else None)

    async def _flush(self) -> None:
        await self._sync([], self._minute())

    def _unsent(self) -> bool:
        return bool(self._homes) or any(sends.unreported or sends.pending or sends.credit or sends.landed
                                        for sends in self._sends.values())  # fmt: skip

    def _minute(self) -> int:
        return int(self.wall() // 60)

    def in_force(self, pools: Mapping[str, Sequence[UpstreamConfig]], key: bytes | None = None,
                 members: Mapping[str, Sequence[UpstreamRuntime]] | None = None) -> None:  # fmt: skip
        """The deployments of each pool of the config that serves new requests (at start-up and
        once a reload is in force), and that config's ``record_key``: a request of an older config
        that waited for a reset asks ``gone`` and ``added`` before it picks again. Set together, so
        that both sides of ``gone`` are worked out with one key. ``members``: those deployments as
        that config sends to them. Wakes the requests waiting for a reset (``next_reload``)."""
        self.record_key = key
        self._in_force = {name: frozenset(_identity(up, key) for up in ups) for name, ups in pools.items()}
        self._members = {name: tuple(ups) for name, ups in (members or {}).items()}
        if self._reload is not None:
            self._reload.set()
            self._reload = None

    def next_reload(self) -> asyncio.Event:
        """Set once the next config is in force: a request waiting for a pool's reset wakes to
        a key that config added (``added``), not at the reset of those it started with."""
        if self._reload is None:
            self._reload = asyncio.Event()
        return self._reload

    def added(self, pool: str, members: Sequence[UpstreamConfig]) -> tuple[UpstreamRuntime, ...]:
        """The deployments the config in force has in ``pool`` that ``members`` (a pool of the
        config a request started on) lacks, or has with another key, base URL or headers."""
        key = self.record_key
        had = {_identity(up, key) for up in members}
        return tuple(up for up in self._members.get(pool, ()) if _identity(up.cfg, key) not in had)

    def gone(self, pool: str, members: Sequence[UpstreamConfig]) -> set[str]:
        """The names of ``members`` (a pool of the config a request started on) that the config
        in force no longer has in ``pool``, or has with another key, base URL or headers: a key
        removed may be a leaked or revoked one."""
        kept = self._in_force.get(pool, frozenset())
        return {up.name for up in members if _identity(up, self.record_key) not in kept}

    def served(self, up: UpstreamConfig, model: str | None) -> str | None:
        """What ``up``'s records of a request for ``model`` are kept under: the model it is sent
        (its ``model_map``'s; a relayed request's scope stays a relayed scope). Worked out once
        per deployment and name, again after a reload that gave it another map."""
        if not up.model_map or model is None:
            return model
        known = self._served.get((up.name, model))
        if known is not None and known[0] is up.model_map:
            return known[1]
        plain = unscoped(model)
        sent = up.upstream_model(plain) if plain is not None else None
        if sent is None or sent == plain:
            served: str | None = model
        else:
            served = sent if plain == model else relayed_scope(sent)
        _bounded(self._served)[(up.name, model)] = (up.model_map, served)
        return served

    def _key_outs(self, up: UpstreamConfig, model: str | None) -> tuple[str, ...]:
        """The sit-out records of ``up``'s key (all models, this model), read beside its name's:
        the provider limits a key, and a rename that tidies a config keeps it. Kept by the name
        alone, a renamed deployment forgot its 429's reset and was called inside it (audit).
        The name's stay (a new key of the same account shares its rate limit). None for a
        deployment that forwards its clients' keys."""
        known = self._outs.get((up.name, model))
        if known is not None and known[0] is up and known[1] == self.record_key:
            return known[2]
        rid = record_id(up, self.record_key)
        outs = self._keys_of(rid, model)[:2] if rid is not None else ()
        _bounded(self._outs)[(up.name, model)] = (up, self.record_key, outs)
        return outs

    def _over_key(self, deployment: str, model: str | None) -> str:
        key = self._over_keys.get((deployment, model))
        if key is None:
            key = _bounded(self._over_keys)[(deployment, model)] = _key("f", deployment, model)
        return key

    def _keys_of(self, deployment: str, model: str | None) -> tuple[str, str, str, str, str]:
        keys = self._keys.get((deployment, model))
        if keys is None:
            keys = _bounded(self._keys)[(deployment, model)] = _keys(deployment, model)
        return keys


def _slot(wall_ms: float) -> Slot:
    return int(wall_ms // 60_000), int(wall_ms % 60_000 // _SLOT_MS)


def _metered(need: tuple[int, int], meter: float) -> int:
    """What a request of ``need`` (input, output tokens) takes of a window metering ``meter``."""
    return 1 if meter == TOKENS_SETTLED else need[0] + need[1]


def _states_limit(room: dict[str, float] | None) -> bool:
    """Whether a reading states a limit: then it, not the configured ``limits``, decides."""
    return room is not None and bool(room.get("rl") or room.get("tl"))


def taken_with(n: int, k: int, credit: int, limits: DeploymentLimits, tokens: int) -> bool:
    """Whether a take of ``tokens`` refused at ``n`` requests and ``k`` tokens counted would be
    taken once ``credit`` (a usage below its estimate, negative) were off the count."""
    return credit < 0 and not passes(n, max(0, k + credit), limits.requests_per_minute,
                                     limits.tokens_per_minute, tokens)  # fmt: skip


def _scarcer(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _kind(remaining: float, sent: float, limit: float | None, reset: float | None, configured: int | None,
          refused: bool, at: float, now_ms: float, out_until: int, why: SitOut | None,
          want: float = 1) -> tuple[float | None, int, SitOut | None]:  # fmt: skip
    """One kind (requests, tokens) of a reading now. With its limit stated, ``_refilled``. Without
    (Azure's answers state only what is left) it speaks until its reset, else for a minute
    (``UNSTATED_WINDOW_MS``), and not at all when a 429 carried it: that answer's wait is all it
    says, and read as 0 left until it faded, a 429 that asked for 7 s kept its deployment
    shunned 120 s (audit). Meanwhile it is taken against the configured limit (``configured``),
    refilled by the minute's end, else it tells only whether nothing is left: its share is
    unknown (None), not full: a deployment with 10 times another's tokens, 0.998 of them left,
    got 1 request of 120 beside an Azure one that said 1.0 (audit)."""
    if limit:
        return _refilled(remaining, sent, limit, reset, at, now_ms, out_until, why, want)
    ends = reset if reset is not None else at + UNSTATED_WINDOW_MS
    if refused or ends <= now_ms:
        return None, out_until, why
    if configured:
        return _refilled(min(remaining, configured), sent, configured, ends, at, now_ms, out_until, why, want)
    return (0.0 if remaining - sent <= 0 else None), out_until, why


def _refilled(remaining: float, sent: float, limit: float | None, reset: float | None, at: float,
              now_ms: float, out_until: int, why: SitOut | None,
              want: float = 1) -> tuple[float | None, int, SitOut | None]:  # fmt: skip
    """A reading's headroom now. Both providers meter with buckets refilled continuously and
    state as the reset when the bucket is full again (OpenAI answers "12ms" with 4,999 of
    5,000 requests left; Anthropic's limits are "continuously replenished"), so the refill
    since the reading comes back at the rate that fills the rest by the reset, and what this
    process sent since comes off. A bucket with less than ``want`` (one request, a request's
    tokens) sits out until that much has refilled, not until the whole reset: and past the reset
    it is not full again if sends followed the reading (a pool released every waiting request at
    once there, most into 429s, measured). A request bigger than the whole bucket waits for no
    refill (none makes it fit): it is held to one unit, as before."""
    if limit and want > limit:
        want = 1
    want = max(1.0, want)
    if not limit or reset is None or reset <= at or remaining >= limit:
        return _left(remaining - sent, limit, reset, now_ms, out_until, why, want)
    rate = (limit - remaining) / (reset - at)  # units a millisecond
    left = min(limit, remaining + rate * max(0.0, now_ms - at)) - sent
    share = max(0.0, left / limit)
    if left < want:
        back = int(now_ms + (want - left) / rate)
        if back > max(now_ms, out_until):
            return share, back, SitOut.HEADROOM
    return share, out_until, why


def _left(left: float, limit: float | None, reset: float | None, now_ms: float, out_until: int,
          why: SitOut | None, want: float = 0) -> tuple[float | None, int, SitOut | None]:
    """The share of a limit left, and the sit-out it predicts: nothing left (less than ``want``
    of a limit that holds it) before its reset sits the deployment out until then. A reset
    already past says the limit is full again (an unknown one: nothing)."""
    if reset is not None and reset <= now_ms:
        return (1.0 if limit else None), out_until, why
    share = max(0.0, left / limit) if limit else (1.0 if left > 0 else 0.0)
    short = left <= 0 or (limit is not None and left < want <= limit)
    if short and reset is not None and reset > max(now_ms, out_until):
        return share, int(reset), SitOut.HEADROOM
    return share, out_until, why


_KEYS_OWN = (SitOut.AUTH, SitOut.BUDGET)


def key_id(up: UpstreamConfig, key: bytes | None = None) -> float | None:
    """The deployment's own credentials as a number a record can hold (48 bits of ``_digest``,
    exact in a float: a header credential rotated is a new key too), never the key itself;
    None when it forwards its clients' keys. Worked out only while such a sit-out is in force
    (rare), so not cached."""
    if up.api_key is None:
        return None
    return float(int(_digest(up, key)[:12], 16))


def record_id(up: UpstreamConfig, key: bytes | None = None) -> str | None:
    """The name a deployment's key goes by in the store (``~`` is in no deployment's name): 64
    bits of a digest of what it sends (``_digest``), never the key itself; None when it
    forwards its clients' keys."""
    if up.api_key is None:
        return None
    return "~" + _digest(up, key)


def _identity(up: UpstreamConfig, key: bytes | None = None) -> str:
    """A deployment as a reload may keep it: its key as it is sent (a rename keeps it), else
    (it forwards its clients' keys) its name, as it is sent."""
    return record_id(up, key) or f"{up.name}@{_digest(up, key)}"


def record_key(secret: str | None) -> bytes | None:
    """The key of ``record_id``'s digest, from ``loop_breaker.secret`` (the operator's, which
    every replica given the file shares): a reader of the store cannot confirm a guessed
    provider key by hashing it. Its own derivation, as the conversations' is: no digest is
    computable from another's. None: plain digests."""
    return hashlib.sha256(b"deployment\0" + secret.encode()).digest() if secret else None


def _digest(up: UpstreamConfig, key: bytes | None) -> str:
    """What the provider tells one deployment's calls from another's by: where they are sent,
    the key, and the headers configured (names lower-cased and sorted: neither their case nor
    their order means anything to the provider). A key shared by two projects is
    two rate limits (OpenAI keeps them per project, ``OpenAI-Project``: GET
    /v1/organization/projects/{project_id}/rate_limits, its admin API), and a gateway in front
    of the provider takes its own credential in a header (Cloudflare's ``cf-aig-authorization``,
    Portkey's ``x-portkey-api-key``): by key and base URL alone, two projects shared sit-outs and
    a header-only change was taken for a rename (review)."""
    headers = sorted((name.lower(), value) for name, value in up.headers.items())
    sent = json.dumps([up.base_url, up.api_key, headers]).encode()
    if key is None:
        return hashlib.sha256(sent).hexdigest()[:16]
    return hmac.new(key, sent, hashlib.sha256).hexdigest()[:16]


def _bounded(d: dict[K, V]) -> dict[K, V]:
    if len(d) >= _CACHE_MAX:
        d.clear()
    return d


def _key(kind: str, deployment: str, model: str | None) -> str:
    return f"{kind}:{circuit_key(deployment, model)}"


def _keys(deployment: str, model: str | None) -> tuple[str, str, str, str, str]:
    """Its sit-outs (all models, this model), its headroom, its sends, its usage (+ ``#minute``):
    a relayed request's usage is its model's, the configured limits being the deployment's."""
    return (_key("o", deployment, None), _key("o", deployment, model), _key("h", deployment, model),
            _key("s", deployment, model), _key("n", deployment, unscoped(model)))

