"""The shared store: Redis, bounded in time, with this process's memory as the fallback.

An operation Redis has not answered within ``timeout_s`` (``state.timeout_ms``) turns suspect:
a PING on a connection of its own, timed against this process's event-loop lag, tells a Redis
that is slow or gone from a loop too busy to read answers on time. Redis late too: the replica
leaves it at once, every waiting operation and every later one served from the local
:class:`MemoryStore` without waiting (so a slow Redis costs an operation about twice
``timeout_s``, once, not its whole delay on every request), until a watch in the background,
PINGing every ``recover_s``, finds it answering within ``timeout_s`` again, steadily (several
PINGs in a row; a replica that flaps stays off longer each time). The loop late
instead: the operation waits on for Redis's answer, up to ``recover_s``. An error (a refused
connection) leaves Redis at once. Leaving and coming back are logged once each way; every
locally served operation is counted through ``on_fallback(backend, op)``, and every wait on
Redis through ``on_wait(backend, seconds)``.

Writes go to local memory as well as to Redis, so a replica that loses Redis still knows what
it saw itself (its own failures, requests and remembered answers) instead of starting blank.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.policy.breaker import CLOSED, MAX_TRACKED_MODELS, CircuitRecord
from gateway.state import redis_scripts as lua
from gateway.state.ledger_ops import LedgerAdmit, LedgerKeep, LedgerSettle, LedgerState
from gateway.state.loop_lag import LoopLag
from gateway.state.memory import MemoryStore
from gateway.state.redis_problems import PLAIN_BEHIND_TLS, lasting, refusing_writes
from gateway.state.store import StoreCheck
from gateway.state.turn_batch import TurnBatch, run_pipelined

T = TypeVar("T")
log = logging.getLogger("gateway.state")

_SCRIPTS = lua.ALL  # loaded at start-up (check)
_FAILURES = (RedisError, OSError, TimeoutError)
_Call = tuple[list[str], list[str | int]]  # one script call: its keys, its arguments
_TIMEOUTS = (RedisTimeoutError, TimeoutError)
# Errors of a Redis that answers but takes no writes: one operation served from memory each,
# never the replica taken off Redis (its PING answers, and it came back at once, flapping).
_WRITES_REFUSED = (OutOfMemoryError, ReadOnlyError)
# Operations that write nothing: their success says nothing of whether Redis takes writes again.
_READS = frozenset({"circuit_get", "reset_get", "ledger_read", "stored_get"})
# Settles kept for a Redis that does not answer: a long outage at high traffic would otherwise
# grow them without bound (each is ~300 bytes); past it, the oldest wait for their slots' TTL.
MAX_UNSETTLED = 100_000
# How long Redis remembers that a batch of an outage's spend was added (a resend within it is
# a no-op). Batches are resent every recover_s until one is answered: a day is ample.
OWED_MARKER_S = 86_400
# A budget read (not admitted) is mirrored for this long: its key names its period, so a stale
# one is never read for the next period.
_READ_MIRROR_S = 40 * 86_400.0
# Rejoining Redis takes this many on-time PINGs in a row: behind 35-75 ms of delay with
# timeout_ms 50, one on-time PING brought a replica back and its next operation took it off,
# every 1-3 s (10 state_store_slow and 9 state_store_back in 20 s, review).
_BACK_PINGS = 3
# Taken off again within _STEADY_S of a return (a flap), a replica stays off twice as long as
# the last time (recover_s x 2, 4, ...), at most _HOLD_MAX_S (or recover_s, if longer).
_STEADY_S = 60.0
_HOLD_MAX_S = 30.0
# Stored objects' deployments Redis did not take (taken for down, in a flap's hold, a write that
# failed), kept to be written when it answers again: the last this many (~150 bytes each), the
# oldest past it known to this replica alone. Written at most this many to a round trip.
MAX_STORED_OWED = 10_000
_STORED_BATCH = 1_000
# How long a counting call's own marker lives (``_op_marker``): the call is sent again, its
# answer lost with its connection, within the operation's wait (``_slow_s``), and Redis runs
# both within that; the marker outlives it by far, ~100 bytes each.
_OP_MARKER_MIN_S = 30.0
# Budgets' spend written back to a Redis that lost it, this many to a script call.
_FLOOR_BATCH = 500
# How often a replica reads ``{prefix}kept`` while Redis answers (one GET, off the request path):
# a FLUSHALL, an eviction or a DEL of the gateway's keys breaks no connection, and was found
# never (audit: 144 % of a budget spent, no log line, metric or alert).
KEPT_EVERY_S = 5.0


def connect(url: str, timeout_s: float, max_connections: int = 100) -> Redis:
    """A client without silent retries: ``RedisStore``'s own deadlines bound every call, and
    ``timeout_s`` (the longest an operation waits, ``RedisStore._slow_s``) is the sockets'.

    ``RedisStore`` holds its operations to ``max_connections`` at once, each waiting its turn
    within its deadline; the pool has room for as many again, for batches still reading an
    answer their callers gave up on (each for at most ``timeout_s``: the socket's timeout).
    redis-py's pool refuses an operation past its bound at once ("Too many connections", 100
    by default): every burst past 100 concurrent requests took the replica off Redis (seven
    times in one 3,000-request run at 500 concurrent), its keys' limits and budgets counted in
    its own memory meanwhile. redis-py's blocking pool would wait as well, at ~7 µs more per
    operation than a semaphore; this costs ~2."""
    return Redis.from_url(
        url,
        max_connections=2 * max_connections,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )


def _ms(seconds: float) -> int:
    return max(1, math.ceil(seconds * 1000))


def _record(raw: dict[bytes, bytes]) -> CircuitRecord:
    if not raw:
        return CLOSED
    models = [k[2:].decode() for k in raw if k.startswith(b"m:")][:MAX_TRACKED_MODELS]
    return CircuitRecord(
        failures=int(raw.get(b"f", 0)),
        open_until=float(raw.get(b"u", 0)),
        probes=int(raw.get(b"p", 0)),
        models=frozenset(models),
    )


async def _value(v: T) -> T:
    return v


class RedisStore:
    backend = "redis"

    def __init__(
        self,
        client: Redis,
        local: MemoryStore,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        prefix: str = "llm-gateway:",
        timeout_s: float = 0.05,
        recover_s: float = 1.0,
        answers_cache_s: float = 0.2,
        on_fallback: Callable[[str, str], None] = lambda _b, _op: None,
        max_connections: int = 100,
        probe_client: Redis | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        on_wait: Callable[[str, float], None] = lambda _b, _s: None,
        on_lost: Callable[[str], None] = lambda _b: None,
        kept_every_s: float = KEPT_EVERY_S,
    ) -> None:
        self._r = client
        # Operations at once, each on its own pooled connection. One past it waits here,
        # within its deadline.
        self._slots = asyncio.Semaphore(max_connections)
        # The probe's own connection, whose socket waits as long as the probe does (``client``'s
        # gives up at the operations' deadline, as a saturated process misses it).
        self._probe_r = probe_client if probe_client is not None else client
        self.local = local
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self._p = prefix
        self._timeout_s = timeout_s
        self._recover_s = recover_s
        self._slow_s = max(timeout_s, recover_s)  # an operation's longest wait while Redis is not down
        self._waiting: set[asyncio.Timeout] = set()
        self._slow_logged_at, self._slow_since_log = -math.inf, 0
        self._on_fallback = on_fallback
        self._on_wait = on_wait  # (backend, seconds) of every operation that asked Redis
        self._down_since: float | None = None  # taken off Redis (down, or slow) since (monotonic)
        self._back_at = -math.inf  # when the replica last rejoined Redis (monotonic)
        self._epoch = 0  # ``epoch``
        self._flaps = 0  # times taken off in a row, each within _STEADY_S of rejoining
        self._hold_s = 0.0  # this time off lasts at least this long (a flap's backoff)
        self._off_said = False  # whether this time off Redis was logged yet
        self._writes_refused_since: float | None = None  # a full or read-only Redis (monotonic)
        self._answered_at = -math.inf  # when Redis last answered an operation (monotonic)
        self._next_check = -math.inf  # no probe before then, while Redis answers others
        self._probe: asyncio.Task[None] | None = None
        self._budget = client.register_script(lua.BUDGET)
        self._take = client.register_script(lua.TAKE)
        self._put = client.register_script(lua.PUT)
        self._ledger_admit = client.register_script(lua.LEDGER_ADMIT)
        self._ledger_settle = client.register_script(lua.LEDGER_SETTLE)
        self._ledger_keep = client.register_script(lua.LEDGER_KEEP)
        self._ledger_owed = client.register_script(lua.LEDGER_OWED)
        self._ledger_floor = client.register_script(lua.LEDGER_FLOOR)
        self._circuit_fail = client.register_script(lua.CIRCUIT_FAIL)
        self._admits = TurnBatch(client, self._ledger_admit)
        self._takes = TurnBatch(client, client.register_script(lua.RECORDS_TAKE))
        self._home_claims = TurnBatch(client, client.register_script(lua.HOME_CLAIM))
        self._home_move = client.register_script(lua.HOME_MOVE)
        self._records_least = client.register_script(lua.RECORDS_LEAST)
        # Reservations are settled where they were made (_ledger_keys' comment says why).
        self._local_slots: set[str] = set()
        self._unsettled: list[tuple[list[str], list[str | int]]] = []
        self._settling = 0  # settles out to Redis now, not yet answered
        # What this replica spent in its own memory (budget key -> [dollars, ttl_s]), not yet
        # in a batch; and the batches (id, budget key -> [dollars, ttl_s]) until Redis takes them.
        self._owed: dict[str, list[float]] = {}
        self._owed_out: list[tuple[str, dict[str, list[float]]]] = []
        self._batch_ids = itertools.count()
        self._instance = os.urandom(6).hex()
        self._op_ids = itertools.count()
        self._op_marker_ms = _ms(max(_OP_MARKER_MIN_S, 4 * self._slow_s))
        self._resender: asyncio.Task[None] | None = None
        self._answers = prefix + "a:"
        self._any_answer = prefix + "a-any"  # exists while any replica remembers an answer
        # Until when (monotonic) this replica may take it that no replica remembers an answer:
        # learnt from a lookup, believed for ``answers_cache_s`` (as circuits are cached).
        self._answers_cache_s = answers_cache_s
        self._none_remembered_until = -math.inf
        # Stored objects' deployments to write to Redis (key -> deployment, expiry by clock s).
        self._stored_owed: dict[str, tuple[str, float]] = {}
        self._stored_dropped = 0  # past MAX_STORED_OWED since the last write-back
        self._stored_writer: asyncio.Task[None] | None = None
        # What Redis held under ``{prefix}kept`` when this replica last read it: a Redis that
        # comes back without it (or with another replica's new one) lost what it held.
        self._kept_key = prefix + "kept"
        self._kept: bytes | None = None
        self._lost_said: bytes | None = None  # the marker of the loss last said
        self._kept_check: asyncio.Task[None] | None = None
        self._on_lost = on_lost
        self._kept_every_s = kept_every_s
        self._kept_watch: asyncio.Task[None] | None = None

    @property
    def healthy(self) -> bool:
        return self._down_since is None

    @property
    def epoch(self) -> int:
        return self._epoch

    async def _guard(self, op: str, remote: Callable[[], Awaitable[T]],
                     local: Callable[[], Awaitable[T]]) -> T:
        if self._down_since is not None:
            self._maybe_probe()
            self._on_fallback(self.backend, op)
            return await local()
        started = self._monotonic()
        try:
            # ``timeout_ms`` is when a wait becomes suspect: a probe then asks Redis how long it
            # takes to answer (``_suspect``). Too long, with this process's loop on time, and
            # every waiting operation goes to memory at once; else the wait is this process's
            # own and the operation waits on, up to ``_slow_s``. Served from memory at the first
            # timeout, a saturated replica (its loop reading answers late, which is most of a
            # 50 ms wait at 600 concurrent requests) counted budgets apart from Redis while Redis
            # answered every call: a $0.01 budget shared by two replicas served 3x its worth.
            async with asyncio.timeout(self._slow_s) as deadline:
                if self._kept_check is not None and not self._kept_check.done():
                    await asyncio.shield(self._kept_check)  # (its answer first: ``_check_kept``)
                suspicion = asyncio.get_running_loop().call_later(self._timeout_s, self._suspect, op, started)
                self._waiting.add(deadline)
                try:
                    async with self._slots:
                        try:
                            result = await remote()
                        except (RedisConnectionError, ConnectionError):
                            # Most often a pooled connection to a Redis that has since restarted:
                            # the server is fine, the socket is not, and every idle one is as
                            # old. Drop those and try once more on a fresh connection, within the
                            # same bound. The command may have run all the same (a connection
                            # lost after it was written, before its answer came): every
                            # ``remote`` is safe to run twice, each counting call carrying a
                            # marker of its own that the second run finds (``_op_marker``).
                            # Counted again, an admit refused itself (its own slot in flight)
                            # and held its reservation on every replica until the day ended.
                            await self._drop_idle_connections()
                            await self._kept_checked()
                            result = await remote()
                finally:
                    suspicion.cancel()
                    self._waiting.discard(deadline)
        except _FAILURES as e:
            self._epoch += 1  # served from memory: what it wrote is not in Redis
            self._on_fallback(self.backend, op)
            waited = self._monotonic() - started
            self._on_wait(self.backend, waited)
            if isinstance(e, _WRITES_REFUSED):
                self._writes_refused(op, e)
            elif not isinstance(e, _TIMEOUTS):
                self._went_down(op, type(e).__name__, waited, lasting(e, self._db))
            elif self._down_since is None and self._probe is None:  # (a probe under way will say)
                self._too_slow(op, waited)
            return await local()
        self._on_wait(self.backend, self._monotonic() - started)
        # Taken off meanwhile (another operation's wait), the replica stays off: an answer that
        # was on its way is no sign of a steady Redis, the watch's PINGs are (``_watch``).
        self._answered_at = self._monotonic()
        if self._writes_refused_since is not None and op not in _READS:
            log.info({"event": "state_store_writable", "backend": self.backend, "op": op,
                      "refused_s": round(self._monotonic() - self._writes_refused_since, 1)})  # fmt: skip
            self._writes_refused_since = None
        return result

    def _writes_refused(self, op: str, error: RedisError) -> None:
        """Redis answers but takes no writes (maxmemory under noeviction, a read-only replica):
        each write is served from memory, Redis stays in use for the rest, and it is said once
        until a write is taken again. Taken off Redis instead, the replica came back at the
        probe's PING and left again at the next write, every second or so."""
        if self._writes_refused_since is None:
            self._writes_refused_since = self._monotonic()
            log.warning({"event": "state_store_full", "backend": self.backend, "op": op,
                         "error": type(error).__name__, "problem": refusing_writes(error)})  # fmt: skip

    def _suspect(self, op: str, started: float) -> None:
        """``timeout_ms`` passed on an operation: a probe (``_watch``) asks Redis, on its own
        connection, how long it takes to answer. At once when Redis answered nothing since the
        operation began (it may be gone); else at most once per ``recover_s`` (it may be slow,
        or this process's loop late: only the probe tells). Probing only when nothing else was
        answered, a Redis slow for every operation was never found slow under concurrent
        traffic: each request waited its answers out (1.6-1.8 s behind a 0.8 s delay)."""
        if self._probe is not None or self._down_since is not None:
            return
        now = self._monotonic()
        if self._answered_at <= started or now >= self._next_check:
            self._start_probe((op, now - started))

    def _too_slow(self, op: str, waited_s: float) -> None:
        """An operation waited ``_slow_s`` with Redis not taken off (its probe found it on time:
        the wait was this process's own): served from memory, said (at most once per
        ``recover_s``, with how many since), never silently."""
        self._slow_since_log += 1
        now = self._monotonic()
        if now - self._slow_logged_at >= self._recover_s:
            log.warning({"event": "state_store_slow", "backend": self.backend, "cause": "this_process",
                         "op": op, "waited_ms": round(waited_s * 1000, 1),
                         "operations": self._slow_since_log})  # fmt: skip
            self._slow_logged_at, self._slow_since_log = now, 0

    def _came_back(self) -> None:
        self._answered_at = self._monotonic()
        if self._down_since is not None:
            log.info({"event": "state_store_back", "backend": self.backend,
                      "down_s": round(self._answered_at - self._down_since, 1)})
            self._down_since = None
            self._epoch += 1  # what was counted while off is in this replica's memory alone
            self._off_said = False
            self._back_at = self._answered_at
            self._start_stored_writer()
            self._start_kept_check()

    def _maybe_probe(self) -> None:
        """While Redis is taken off, no request waits on it: the watch (``_watch``) asks in the
        background whether it answers in time again. Started when Redis is taken off; started
        again here only should it have ended without bringing the replica back."""
        if self._probe is None:
            self._start_probe(None)

    def _start_probe(self, suspect: tuple[str, float] | None) -> None:
        self._probe = asyncio.get_running_loop().create_task(self._watch(suspect))

    async def _watch(self, suspect: tuple[str, float] | None) -> None:
        """A PING at once, then one every ``recover_s`` while Redis is taken off, until
        ``_BACK_PINGS`` in a row are answered within ``timeout_ms`` (each with ``recover_s`` to
        answer at all, on the probe's own connection), and this time off has lasted its hold
        (``_take_off``): PINGed again after it. ``suspect``: the operation (name, wait so far)
        whose wait asked for the first PING, which takes Redis off if that PING is late, and
        says why.

        A loop, not one PING per request: the probe was started only by an operation arriving,
        and a failed one did not schedule the next, so a replica with no traffic (or only the
        retry budget's background sync, which met the outage) never noticed Redis was back; its
        first request long after still met "down" (503 ``accounting_unavailable`` under
        ``closed``, its spend counted apart under ``open``), and ``state_store_back`` said
        ``down_s`` 16.5 for a 6 s outage."""
        try:
            verdict, took_s, lag_s = await self._timed_ping(self._take_off if suspect is not None else None)
            if suspect is not None and verdict != "ok":
                op, waited_s = suspect
                self._take_off()
                if verdict == "down":
                    self._say_off("state_store_down", op, "TimeoutError", waited_s + took_s)
                else:
                    self._say_off("state_store_slow", op, "", waited_s, answered_s=took_s, lag_s=lag_s)
            on_time = 1 if verdict == "ok" else 0
            while self._down_since is not None:
                if on_time >= _BACK_PINGS:
                    wait_s = self._down_since + self._hold_s - self._monotonic()
                    if wait_s <= 0:
                        break
                    on_time = 0  # steady now, but the hold is not over: PINGed again after it
                else:
                    wait_s = self._recover_s if on_time == 0 else 0.0
                if wait_s > 0:
                    await self._sleep(wait_s)
                verdict, took_s, lag_s = await self._timed_ping()
                on_time = on_time + 1 if verdict == "ok" else 0
        finally:
            self._probe = None
        if verdict == "ok":
            self._next_check = self._monotonic() + self._recover_s
            self._came_back()

    async def _timed_ping(self, on_late: Callable[[], object] | None = None) -> tuple[str, float, float]:
        """A PING on the probe's connection: ``"ok"`` answered within ``timeout_ms``, ``"slow"``
        answered later, ``"down"`` not answered within ``recover_s`` (or refused); with the time
        it took and how late this process's loop ran meanwhile. The loop's lateness is not
        Redis's: the PING is late only past ``timeout_ms`` plus twice that (an answer is read a
        loop turn or two after it comes). ``on_late`` is called the moment it is late, before
        its answer, which is still waited for (to tell slow from down)."""
        loop = asyncio.get_running_loop()
        lag = LoopLag(self._timeout_s / 4)
        started = loop.time()
        ping = asyncio.ensure_future(self._ping())
        late = False
        try:
            while not ping.done() and not late:
                left = started + self._timeout_s + 2 * lag.max_s - loop.time()
                if left <= 0:
                    late = True
                    if on_late is not None:
                        on_late()
                else:
                    await asyncio.wait({ping}, timeout=left)
            answered = await ping
        finally:
            lag.stop()
            ping.cancel()  # (a no-op once it is done; else this task was cancelled)
        took_s = loop.time() - started
        if not answered:
            return "down", took_s, lag.max_s
        if late or took_s > self._timeout_s + 2 * lag.max_s:
            return "slow", took_s, lag.max_s
        return "ok", took_s, lag.max_s

    async def _ping(self) -> bool:
        try:
            async with asyncio.timeout(max(self._timeout_s, self._recover_s)):
                try:
                    await self._probe_r.ping()
                except (RedisConnectionError, ConnectionError):
                    await self._probe_r.connection_pool.disconnect()  # a restarted Redis
                    await self._probe_r.ping()
        except _FAILURES:
            return False
        return True

    def _start_kept_check(self) -> None:
        """Whether the Redis answering again is the one left (``_check_kept``): asked once a
        connection failed (a restart, most often) before the operation is sent again, at
        every return, and when the watch finds the marker changed (``_watch_kept``). Operations
        wait for its answer: one that read a lost Redis's $0 first wrote it over this replica's
        copy of the spend, the copy written back."""
        if self._kept_check is None or self._kept_check.done():
            self._kept_check = asyncio.get_running_loop().create_task(self._check_kept())

    async def _kept_checked(self) -> None:
        self._start_kept_check()
        assert self._kept_check is not None
        await asyncio.shield(self._kept_check)

    async def _check_kept(self) -> None:
        """A Redis restarted empty (no append-only file, or a failover to a replica that had
        not copied it) answers as one that holds everything: every replica then
        counted every key's spend from $0, silently (a $1 key that had spent $0.874 spent
        $1.007 more). Each replica keeps what ``{prefix}kept`` held; a Redis without it, or with
        another one (a replica found it gone first and wrote its own), lost its data: said as an
        error and counted (``on_lost``), and the budgets' spend this replica knows is written
        back as a floor (``LEDGER_FLOOR``: each replica's, the largest kept). What it cannot
        bring back: other keys' spend, the reservations in flight (their settles find no
        marker and charge nothing), the minute's counts, circuits and pool records. No TTL on
        the key: under ``volatile-ttl`` eviction (``deploy/``) only keys with one are evicted,
        and an expired one would be taken for a lost Redis."""
        try:
            async with asyncio.timeout(self._slow_s):
                await self._restore_if_lost()
        except _FAILURES:
            return  # asked again at the next reconnection, return or look (``_watch_kept``)

    async def _restore_if_lost(self) -> None:
        kept = await self._read_kept()
        before = self._kept
        if before is None or kept == before:
            self._kept = kept
            return
        known = self.local.ledger_spent()
        # Less what this replica owes Redis (spent in its memory, in a batch yet to be added).
        owed = self.ledger_owed([b for b, _, _ in known])
        spent = [(b, usd - o, left) for (b, usd, left), o in zip(known, owed, strict=True) if usd - o > 0]
        self._epoch += 1  # nothing counted in Redis before is there any more
        if self._lost_said != kept:  # once for each loss, however many tries its write-back takes
            self._lost_said = kept
            log.error({"event": "state_store_lost", "backend": self.backend, "budgets_restored": len(spent),
                       "problem": "Redis no longer holds what it held (restarted without an append-only "
                                  "file, flushed, or the gateway's keys evicted or deleted): keys' spend "
                                  "counts from what this replica knew"})  # fmt: skip
            self._on_lost(self.backend)
        calls: list[_Call] = []
        for i in range(0, len(spent), _FLOOR_BATCH):
            chunk = spent[i : i + _FLOOR_BATCH]
            args: list[str | int] = []
            for _, usd, left in chunk:
                args += [repr(usd), max(1, math.ceil(left))]
            calls.append(([f"{self._p}l:b:{b}" for b, _, _ in chunk], args))
        # Not through _guard: operations wait for this, and would for a slot it waited on.
        if calls:
            for result in await run_pipelined(self._r, self._ledger_floor, calls):
                if isinstance(result, Exception):
                    raise result
        # Only now: a write-back that failed (a Redis still loading, slow) is tried again at the
        # next check, which would otherwise find the new marker known and Redis's $0 standing.
        self._kept = kept

    def _start_kept_watch(self) -> None:
        if self._kept_watch is None:
            self._kept_watch = asyncio.get_running_loop().create_task(self._watch_kept())

    async def _watch_kept(self) -> None:
        """Every ``kept_every_s`` while Redis answers, whether it still holds ``{prefix}kept``
        as this replica read it: a GET, which no operation waits for. Gone or another (a Redis
        flushed, its keys evicted or deleted, with every connection up), the check that a
        reconnection makes (``_check_kept``) runs, and operations wait for its write-back as
        they do then. Taken off Redis, the replica checks at its return instead."""
        while True:
            await self._sleep(self._kept_every_s)
            if self._down_since is not None or (self._kept_check is not None and not self._kept_check.done()):
                continue
            if self._kept is not None:
                try:
                    async with asyncio.timeout(self._slow_s):
                        held = await self._r.get(self._kept_key)
                except _FAILURES:
                    continue  # an operation finds a Redis that does not answer; this says nothing
                if held == self._kept:
                    continue
            await self._kept_checked()  # (start-up's read failed: learnt now)

    async def _read_kept(self) -> bytes:
        """What Redis holds under ``{prefix}kept``, written first if it holds none."""
        pipe = self._r.pipeline(transaction=False)
        pipe.set(self._kept_key, os.urandom(8).hex().encode(), nx=True)
        pipe.get(self._kept_key)
        _, kept = await pipe.execute()
        return bytes(kept)

    async def _drop_idle_connections(self) -> None:
        try:
            await self._r.connection_pool.disconnect(inuse_connections=False)
        except _FAILURES:
            pass  # closing a dead socket may complain; it is closed either way

    def _take_off(self) -> None:
        """Redis taken for down or too slow: the operations still waiting go to memory now, and
        later ones are served there without waiting until the watch finds it back."""
        if self._down_since is not None:
            return
        self._epoch += 1
        self._down_since = self._monotonic()
        # Off again soon after a return: the next return waits twice as long as the last.
        flapped = self._down_since - self._back_at < _STEADY_S
        self._flaps = min(self._flaps + 1, 16) if flapped else 0
        longest = max(_HOLD_MAX_S, self._recover_s)
        self._hold_s = min(self._recover_s * 2**self._flaps, longest) if self._flaps else 0.0
        now = asyncio.get_running_loop().time()
        for deadline in list(self._waiting):
            if not deadline.expired():  # (one that just expired is on its way there)
                deadline.reschedule(now)
        self._maybe_probe()  # at once, unless the watch is on: a restarted Redis is back in ms

    def _went_down(self, op: str, error: str, waited_s: float, problem: str | None = None) -> None:
        self._take_off()
        self._say_off("state_store_down", op, error, waited_s, problem=problem)

    def _say_off(self, event: str, op: str, error: str, waited_s: float, *, answered_s: float = 0.0,
                 lag_s: float = 0.0, problem: str | None = None) -> None:  # fmt: skip
        """One line per time off Redis, whichever finds it first: the error's type, never its
        text or the URL (either may carry a password). A configuration that waiting will not
        heal (a wrong password or database) is an error, saying what is wrong."""
        if self._off_said:
            return
        self._off_said = True
        line: dict[str, object] = {"event": event, "backend": self.backend, "op": op}
        if event == "state_store_down":
            line |= {"error": error, "waited_ms": round(waited_s * 1000, 1)}
        else:  # answered, later than timeout_ms with this process's loop on time
            line |= {"cause": "redis", "answered_ms": round(answered_s * 1000, 1),
                     "loop_lag_ms": round(lag_s * 1000, 1), "timeout_ms": round(self._timeout_s * 1000)}
        if self._flaps:  # back soon after a return: held off longer (``_take_off``)
            line |= {"flaps": self._flaps, "held_s": self._hold_s}
        if problem is not None:
            log.error(line | {"problem": problem, "heals": "no: fix state.url (or Redis) and restart",
                              "retry_every_s": self._recover_s})  # fmt: skip
        else:
            log.warning(line | {"retry_every_s": self._recover_s})

    def _op_marker(self, base: str | None = None) -> str:
        """A key naming one counting call, which its script sets as it counts, for as long as
        the call may be sent again (``_guard``): the second run finds it and counts nothing."""
        return f"{base if base is not None else self._p}o:{self._instance}-{next(self._op_ids)}"

    @property
    def _db(self) -> int | None:
        return self._r.connection_pool.connection_kwargs.get("db")

    # -- circuits ------------------------------------------------------------------------------

    async def circuit_get(self, keys: Sequence[str]) -> list[CircuitRecord]:
        async def remote() -> list[CircuitRecord]:
            pipe = self._r.pipeline(transaction=False)
            for k in keys:
                pipe.hgetall(self._p + "c:" + k)
            return [_record(raw) for raw in await pipe.execute()]

        return await self._guard("circuit_get", remote, lambda: self.local.circuit_get(keys))

    async def circuit_fail(self, items: Sequence[tuple[str, str]], ttl_s: float) -> list[CircuitRecord]:
        mine = await self.local.circuit_fail(items, ttl_s)

        keys = [self._op_marker(), *(self._p + "c:" + key for key, _ in items)]
        args: list[str | int] = [self._op_marker_ms, _ms(ttl_s), *(model for _, model in items)]

        async def remote() -> list[CircuitRecord]:
            got: Any = await self._circuit_fail(keys=keys, args=args)
            return [_record(dict(zip(flat[::2], flat[1::2], strict=True))) for flat in got]

        return await self._guard("circuit_fail", remote, lambda: _value(mine))

    async def circuit_open(self, key: str, until: float, ttl_s: float, probes: int = 0) -> None:
        await self.local.circuit_open(key, until, ttl_s, probes)

        async def remote() -> None:
            k = self._p + "c:" + key
            pipe = self._r.pipeline(transaction=True)
            pipe.hset(k, mapping={"u": repr(until), "p": probes})
            pipe.pexpire(k, _ms(ttl_s))
            await pipe.execute()

        await self._guard("circuit_open", remote, lambda: _value(None))

    async def circuit_clear(self, keys: Sequence[str]) -> None:
        await self.local.circuit_clear(keys)

        async def remote() -> None:
            await self._r.delete(*(self._p + "c:" + k for k in keys))

        await self._guard("circuit_clear", remote, lambda: _value(None))

    async def probe_claim(self, key: str, ttl_s: float) -> bool:
        # The claim holds this call's own name, read back in the same round trip: sent again
        # after its answer was lost (``_guard``), a claim that was taken is still this one's, not
        # taken for another replica's (no probe for the claim's TTL, this request refused).
        k, mine = self._p + "p:" + key, self._op_marker("").encode()

        async def remote() -> bool:
            pipe = self._r.pipeline(transaction=False)
            pipe.set(k, mine, nx=True, px=_ms(ttl_s))
            pipe.get(k)
            return bool((await pipe.execute())[1] == mine)

        return await self._guard("probe_claim", remote, lambda: self.local.probe_claim(key, ttl_s))

    async def probe_release(self, key: str) -> None:
        await self.local.probe_release(key)

        async def remote() -> None:
            await self._r.delete(self._p + "p:" + key)

        await self._guard("probe_release", remote, lambda: _value(None))

    # -- retry budget --------------------------------------------------------------------------

    async def budget_add(self, key: str, requests: int, retries: int, window_s: float) -> tuple[int, int]:
        mine = await self.local.budget_add(key, requests, retries, window_s)
        marker = self._op_marker(f"{self._p}b:{{{key}}}:")

        async def remote() -> tuple[int, int]:
            # The hash tag keeps a budget's buckets in one slot, should the Redis be a cluster.
            base = f"{self._p}b:{{{key}}}:"
            args = [max(1, math.ceil(window_s)), self._op_marker_ms, requests, retries]
            got: Any = await self._budget(keys=[base, marker], args=args)
            return int(got[0]), int(got[1])

        return await self._guard("budget_add", remote, lambda: _value(mine))

    async def budget_reserve(
        self, key: str, requests: int, retries: int, window_s: float, reserve: float, ratio: float
    ) -> tuple[bool, int, int]:
        mine = await self.local.budget_reserve(key, requests, retries, window_s, reserve, ratio)
        base = f"{self._p}b:{{{key}}}:"
        marker = self._op_marker(base)

        async def remote() -> tuple[bool, int, int]:
            span = max(1, math.ceil(window_s))
            args: list[int | str] = [span, self._op_marker_ms, requests, retries, repr(reserve), repr(ratio)]
            got: Any = await self._budget(keys=[base, marker], args=args)
            return bool(int(got[2])), int(got[0]), int(got[1])

        return await self._guard("budget_reserve", remote, lambda: _value(mine))

    # -- rate-limit resets ---------------------------------------------------------------------

    async def reset_set(self, key: str, reset_at_ms: int) -> None:
        await self.local.reset_set(key, reset_at_ms)
        if reset_at_ms <= self._clock() * 1000:
            return

        async def remote() -> None:
            await self._r.set(self._p + "r:" + key, str(reset_at_ms).encode(), pxat=reset_at_ms)

        await self._guard("reset_set", remote, lambda: _value(None))

    async def reset_get(self, key: str) -> int | None:
        async def remote() -> int | None:
            raw = await self._r.get(self._p + "r:" + key)
            return int(raw) if raw is not None else None

        return await self._guard("reset_get", remote, lambda: self.local.reset_get(key))

    # -- pool deployments' records ------------------------------------------------------------

    async def records_sync(
        self,
        reads: Sequence[str],
        writes: Sequence[tuple[str, Mapping[str, float], float]] = (),
        adds: Sequence[tuple[str, Mapping[str, int], float]] = (),
        circuits: Sequence[str] = (),
        homes: Sequence[tuple[str, str, float]] = (),
    ) -> tuple[list[dict[str, float]], list[CircuitRecord], list[str | None]]:
        # Mirrored locally, so a replica that loses Redis still knows what it saw itself (but
        # the homes kept: the pool's own table holds those).
        mine = await self.local.records_sync(reads, writes, adds, circuits)
        p = self._p + "d:"
        # The sends' counts, added by a script that runs them once (``_guard`` may send it again).
        # EVAL with its text, not EVALSHA: in a pipeline, a Redis restarted since the scripts were
        # loaded answers NOSCRIPT, and the pipeline does not load it as a lone call does.
        add_keys: list[str] = [self._op_marker(), self._kept_key]
        # With the ``kept`` marker this replica knows: a count is lowered only in that Redis.
        kept = self._kept.decode() if self._kept is not None else ""
        add_args: list[str | int] = [self._op_marker_ms, kept, self._instance]
        for key, counts, ttl_s in adds:
            add_keys.append(p + key)
            add_args += [_ms(ttl_s), len(counts)]
            for name, n in counts.items():
                add_args += [name, n]

        async def remote() -> tuple[list[dict[str, float]], list[CircuitRecord], list[str | None]]:
            pipe = self._r.pipeline(transaction=False)
            for key, home, ttl_s in homes:
                # Kept, never overwritten (another replica may have moved it from a removed
                # deployment); set again only if gone (a restarted Redis), as this replica knows it;
                # and read back: another replica may have set another (moved while Redis had lost
                # this one), which this replica's copy must follow.
                pipe.set(self._p + "home:" + key, home.encode(), nx=True, px=_ms(ttl_s))
                pipe.pexpire(self._p + "home:" + key, _ms(ttl_s))
                pipe.get(self._p + "home:" + key)
            for key, fields, ttl_s in writes:
                pipe.hset(p + key, mapping={k: repr(v) for k, v in fields.items()})
                pipe.pexpire(p + key, _ms(ttl_s))
            if adds:
                pipe.eval(lua.RECORDS_ADD, len(add_keys), *add_keys, *add_args)
            for key in reads:
                pipe.hgetall(p + key)
            for key in circuits:
                pipe.hgetall(self._p + "c:" + key)
            got = await pipe.execute()
            read = got[len(got) - len(reads) - len(circuits) : len(got) - len(circuits)]
            held = [raw.decode() if isinstance(raw, bytes) else None for raw in got[2 : 3 * len(homes) : 3]]
            # Less each replica's own share of a usage count (``k:<instance>``, RECORDS_ADD's
            # cap): Redis's bookkeeping, not a count any reader sums.
            counts = [{k.decode(): float(v) for k, v in raw.items() if not k.startswith(b"k:")}
                      for raw in read]  # fmt: skip
            return counts, [_record(raw) for raw in got[len(got) - len(circuits) :]], held

        if not reads and not writes and not adds and not circuits and not homes:
            return [], [], []
        unknown: list[str | None] = [None] * len(homes)
        alone = (mine[0], mine[1], unknown)
        return await self._guard("records_sync", remote, lambda: _value(alone))

    async def home_claim(self, key: str, proposed: str, members: Sequence[str],
                         ttl_s: float) -> tuple[str, bool, str | None]:
        async def remote() -> tuple[str, bool, str | None]:
            home, new, replaced = await self._home_claims([self._p + "home:" + key],
                                                          [proposed, _ms(ttl_s), *members])  # fmt: skip
            return home.decode(), bool(new), replaced.decode() or None

        async def alone() -> tuple[str, bool, str | None]:
            # Redis down: the replica decides alone, and its pool's table (bounded by
            # affinity.max_entries) keeps what it decided. A copy in the memory store was bounded
            # only by idle_s: 100,000 claims made 100,000 entries (~20 MB), an hour of new
            # conversations at 1,000/s ~720 MB; and it was never read for a home the table knew.
            return proposed, True, None

        # Not mirrored: the pool's own table holds what this replica knows of its conversations.
        return await self._guard("home_claim", remote, alone)

    async def home_move(self, key: str, frm: str, to: str, members: Sequence[str],
                        ttl_s: float) -> tuple[str, bool]:  # fmt: skip
        async def remote() -> tuple[str, bool]:
            home, moved = await self._home_move(keys=[self._p + "home:" + key],
                                                args=[frm, to, _ms(ttl_s), *members])  # fmt: skip
            return (home.decode() if isinstance(home, bytes) else str(home)), bool(moved)

        async def alone() -> tuple[str, bool]:
            return to, True  # as a claim while Redis is down: the pool's table keeps what it decided

        return await self._guard("home_move", remote, alone)

    # -- which deployment holds a stored object ------------------------------------------------

    async def stored_put(self, key: str, deployment: str, ttl_s: float) -> None:
        # Mirrored: this replica's own answers are then found without a round trip (an object's
        # deployment never changes), and while Redis does not answer.
        await self.local.stored_put(key, deployment, ttl_s)

        async def remote() -> None:
            await self._r.set(self._p + key, deployment.encode(), px=_ms(ttl_s))

        async def later() -> None:
            # Else known to this replica alone: a chained turn on another replica or worker
            # went to a random sibling's key and was answered 400 previous_response_not_found,
            # however long after Redis came back (audit of pools across replicas and Redis).
            self._owe_stored(key, deployment, self._clock() + ttl_s)

        await self._guard("stored_put", remote, later)

    def _owe_stored(self, key: str, deployment: str, expires: float) -> None:
        self._stored_owed.pop(key, None)
        self._stored_owed[key] = (deployment, expires)
        if len(self._stored_owed) > MAX_STORED_OWED:
            del self._stored_owed[next(iter(self._stored_owed))]
            self._stored_dropped += 1
        if self._down_since is None:  # failed, not taken off: no rejoin will start the writer
            self._start_stored_writer()

    def _start_stored_writer(self) -> None:
        idle = self._stored_writer is None or self._stored_writer.done()
        if idle and self._stored_owed:
            self._stored_writer = asyncio.get_running_loop().create_task(self._write_stored())

    async def _write_stored(self) -> None:
        """Writes the stored objects' deployments Redis did not take, each with what is left of
        its TTL, until none is left or Redis is taken off again (its rejoin starts this again); a
        batch Redis does not take stays, tried again every ``recover_s`` while Redis is in use.
        An object's deployment never changes, so a write that did run before is written again
        to the same."""
        written = 0
        while self._stored_owed and self._down_since is None:
            now = self._clock()
            batch = list(itertools.islice(self._stored_owed.items(), _STORED_BATCH))
            live = [(k, d, exp) for k, (d, exp) in batch if exp > now]

            async def remote(live: list[tuple[str, str, float]] = live, now: float = now) -> bool:
                pipe = self._r.pipeline(transaction=False)
                for k, d, exp in live:
                    pipe.set(self._p + k, d.encode(), px=_ms(exp - now))
                await pipe.execute()
                return True

            if live and not await self._guard("stored_put", remote, lambda: _value(False)):
                if self._down_since is None:
                    await self._sleep(self._recover_s)
                continue
            for k, entry in batch:  # unless put again meanwhile
                if self._stored_owed.get(k) == entry:
                    del self._stored_owed[k]
            written += len(live)
        if written or self._stored_dropped:
            log.info({"event": "state_store_stored_written", "backend": self.backend, "count": written,
                      "dropped": self._stored_dropped})  # fmt: skip
            self._stored_dropped = 0

    async def stored_get(self, key: str) -> str | None:
        mine = await self.local.stored_get(key)
        if mine is not None:
            return mine

        async def remote() -> str | None:
            raw = await self._r.get(self._p + key)
            return raw.decode() if isinstance(raw, bytes) else raw

        return await self._guard("stored_get", remote, lambda: _value(None))

    async def records_take(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None,
                           tokens: int, ttl_s: float) -> tuple[bool, int, int, int]:
        args: list[str | int] = [requests_per_minute or 0, tokens_per_minute or 0, tokens, _ms(ttl_s),
                                 self._op_marker_ms, self._instance]
        keys = [self._p + "d:" + key, self._op_marker()]

        async def remote() -> tuple[bool, int, int, int]:
            ok, n, k, e = await self._takes(keys, args)
            # Every replica's count, mirrored: a replica that loses Redis counts on from it, not
            # from its own sends alone (which let it spend the whole limit once more).
            await self.local.records_sync((), [(key, {"n": float(n), "k": float(k), "e": float(e)}, ttl_s)])
            return bool(ok), int(n), int(k), int(e)

        async def local() -> tuple[bool, int, int, int]:
            return await self.local.records_take(key, requests_per_minute, tokens_per_minute, tokens, ttl_s)

        return await self._guard("records_take", remote, local)

    async def records_least(self, key: str, tokens: float, until_ms: float,
                            now_ms: float) -> tuple[float, float]:  # fmt: skip
        async def remote() -> tuple[float, float]:
            args: list[str | int] = [repr(float(tokens)), repr(float(until_ms)), repr(float(now_ms))]
            raw = await self._records_least(keys=[self._p + "d:" + key], args=args)
            k, u = float(raw[0]), float(raw[1])
            # Mirrored, as every record read: a replica that loses Redis still knows it.
            await self.local.records_sync((), [(key, {"k": k, "u": u}, max(0.0, u - now_ms) / 1000 + 1.0)])
            return k, u

        async def local() -> tuple[float, float]:
            return await self.local.records_least(key, tokens, until_ms, now_ms)

        return await self._guard("records_least", remote, local)

    # -- gateway keys' ledger -----------------------------------------------------------------

    # A reservation is settled where it was made, however long Redis takes to answer. One made
    # in this process's memory while Redis did not answer is settled there; one made in Redis
    # is settled in Redis: a settle Redis did not take is kept and sent again with the next
    # ones (the script applies a slot's settle once). Settling a Redis reservation in memory
    # instead left it held in Redis until its period ended, the key refused as if spent, while
    # memory subtracted what it never reserved. And an admit Redis did not answer in time may
    # still have run there (a paused server runs what it was sent when it resumes): the
    # request is served from memory, and Redis is sent a settle of nothing for its slot, which
    # frees what the admit took there if it ran, and does nothing if it did not.
    #
    # Memory counts on from Redis. Every answer Redis gives about a key (its admits, its reads)
    # is mirrored in this replica's memory, and every settle is applied there too: while Redis
    # does not answer, a key's limits and budgets go on from the last counts this replica saw,
    # not from zero. (From zero, a key spent to $0.304 of $0.30 got 32 answers and $0.61 more
    # across two replicas in an outage, and a key at its 10 requests a minute 20 more.) What
    # memory then admits and settles is owed to Redis: added to its budgets once it answers.
    def _ledger_keys(self, key: str, minute: int, budgets: Sequence[str]) -> list[str]:
        p = self._p + "l:"
        return [f"{p}w:{key}:{minute}", f"{p}p:{key}", *(f"{p}b:{b}" for b in budgets)]

    def _slot_keys(self, key: str, minute: int, slot: str, budgets: Sequence[str]) -> list[str]:
        """An admit's, settle's or keep's: ``_ledger_keys`` with the slot's marker third."""
        w, p, *bs = self._ledger_keys(key, minute, budgets)
        return [w, p, f"{self._p}l:s:{slot}", *bs]

    async def ledger_admit(self, a: LedgerAdmit) -> tuple[str, float]:
        keys = self._slot_keys(a.key, a.minute, a.slot, [b for b, _ in a.budgets])
        args: list[str | int] = [
            a.requests_per_minute or 0, a.tokens_per_minute or 0, a.tokens, a.parallel or 0, a.slot,
            a.now_ms, a.slot_ttl_ms, repr(a.reserve_usd), max(1, math.ceil(a.budget_ttl_s)),
            *(repr(limit) for _, limit in a.budgets),
        ]  # fmt: skip

        sent = False

        async def remote() -> tuple[str, float]:
            nonlocal sent
            sent = True
            verdict, value, n, k, *spend = await self._admits(keys, args)
            verdict = verdict.decode() if isinstance(verdict, bytes) else str(verdict)
            budgets = self._with_owed([b for b, _ in a.budgets], spend)
            slot = (a.slot, a.now_ms + a.slot_ttl_ms) if verdict == "ok" else None
            self.local.ledger_mirror(a.key, a.minute, int(n), int(k), budgets, a.budget_ttl_s, slot=slot,
                                     at=a.now_ms / 1000)  # fmt: skip
            return verdict, float(value)

        async def local() -> tuple[str, float]:
            if sent:  # it may have run in Redis all the same: undone there if it did
                ttl = max(1, math.ceil(a.budget_ttl_s))
                self._keep_unsettled([(keys, [0, a.slot, repr(a.reserve_usd), repr(0.0), ttl, a.tokens])])
            verdict, spent = await self.local.ledger_admit(a)
            if verdict == "ok":
                self._local_slots.add(a.slot)
            return verdict, spent

        return await self._guard("ledger_admit", remote, local)

    def _with_owed(self, budgets: Sequence[str], spend: Sequence[Any]) -> list[tuple[str, float, float]]:
        """Redis's (spent, reserved) of each budget, flat as its scripts answer them, plus what this
        replica spent apart and Redis has not taken yet."""
        owed = self.ledger_owed(budgets)
        return [(b, float(spend[2 * i] or 0) + owed[i], max(0.0, float(spend[2 * i + 1] or 0)))
                for i, b in enumerate(budgets)]  # fmt: skip

    def ledger_owed(self, budgets: Sequence[str]) -> list[float]:
        owed = [0.0] * len(budgets)
        for batch in (self._owed, *(b for _, b in self._owed_out)):
            for i, bkey in enumerate(budgets):
                if bkey in batch:
                    owed[i] += batch[bkey][0]
        return owed

    def ledger_mirrored(self, budgets: Sequence[str]) -> list[tuple[float, float, float] | None]:
        return self.local.ledger_mirrored(budgets)

    async def ledger_settle_many(self, settles: Sequence[LedgerSettle]) -> None:
        """Also sends again what Redis did not take before: ``settles`` may be empty."""
        mine = {s.slot for s in settles if s.slot in self._local_slots}
        # Every settle in memory too: a reservation made in Redis is in memory's mirror of it.
        await self.local.ledger_settle_many(settles)
        if mine:
            self._local_slots -= mine
            self._owe([s for s in settles if s.slot in mine])
        calls, self._unsettled = self._unsettled, []
        for s in settles:
            if s.slot not in mine:
                ttl = max(1, math.ceil(s.budget_ttl_s))
                args: list[str | int] = [s.token_delta, s.slot, repr(s.reserve_usd), repr(s.cost_usd), ttl,
                                         s.held_tokens]  # fmt: skip
                calls.append((self._slot_keys(s.key, s.minute, s.slot, s.budgets), args))
        if self._owed:  # a batch of its own from now on, with the id every resend of it keeps
            self._owed_out.append((f"{self._instance}-{next(self._batch_ids)}", self._owed))
            self._owed = {}
        batches = list(self._owed_out)
        if not calls and not batches:
            return

        async def remote() -> None:
            if calls:
                for result in await run_pipelined(self._r, self._ledger_settle, calls):
                    if isinstance(result, Exception):
                        raise result
            if batches:
                owed = [self._owed_call(bid, batch) for bid, batch in batches]
                for result in await run_pipelined(self._r, self._ledger_owed, owed):
                    if isinstance(result, Exception):
                        raise result
                sent = {bid for bid, _ in batches}
                self._owed_out = [b for b in self._owed_out if b[0] not in sent]

        async def later() -> None:
            self._keep_unsettled(calls)

        self._settling += len(calls)
        try:
            await self._guard("ledger_settle", remote, later)
        finally:
            self._settling -= len(calls)

    async def ledger_keep(self, keeps: Sequence[LedgerKeep]) -> None:
        """In memory too (its mirror, for an outage); in Redis only for an admit it took and
        has not settled (its marker): a keep of a slot counted in memory changes nothing
        there. Not sent again: the next comes within a quarter of the slot's TTL."""
        await self.local.ledger_keep(keeps)
        calls: list[_Call] = [
            (self._slot_keys(k.key, k.minute, k.slot, k.budgets),
             [k.slot, k.until_ms, repr(k.reserve_usd), k.slot_ttl_ms])
            for k in keeps if k.slot not in self._local_slots
        ]  # fmt: skip
        if not calls:
            return

        async def remote() -> None:
            for result in await run_pipelined(self._r, self._ledger_keep, calls):
                if isinstance(result, Exception):
                    raise result

        await self._guard("ledger_keep", remote, lambda: _value(None))

    def _owe(self, settles: Sequence[LedgerSettle]) -> None:
        """What requests admitted in memory cost, to be added to Redis's budgets when it answers.
        (Their requests and tokens per minute are not: by then their minute has mostly ended.)"""
        for s in settles:
            if s.cost_usd <= 0:
                continue
            for bkey in s.budgets:
                usd, ttl = self._owed.get(bkey, (0.0, 0.0))
                self._owed[bkey] = [usd + s.cost_usd, max(ttl, s.budget_ttl_s)]
        self._start_resender()

    def _owed_call(self, batch_id: str, batch: Mapping[str, list[float]]) -> _Call:
        keys = [f"{self._p}l:o:{batch_id}", *(f"{self._p}l:b:{b}" for b in batch)]
        args: list[str | int] = [OWED_MARKER_S]
        for usd, ttl in batch.values():
            args += [repr(usd), max(1, math.ceil(ttl))]
        return keys, args

    def _keep_unsettled(self, calls: list[tuple[list[str], list[str | int]]]) -> None:
        self._unsettled = calls + self._unsettled
        if len(self._unsettled) > MAX_UNSETTLED:
            dropped = len(self._unsettled) - MAX_UNSETTLED
            del self._unsettled[MAX_UNSETTLED:]
            log.warning({"event": "ledger_settles_dropped", "backend": self.backend, "count": dropped})
        self._start_resender()

    def _start_resender(self) -> None:
        idle = self._resender is None or self._resender.done()
        if idle and (self._unsettled or self._owed or self._owed_out):
            self._resender = asyncio.get_running_loop().create_task(self._resend())

    async def _resend(self) -> None:
        """Sends what Redis did not take again, every ``recover_s`` until it has: waiting for
        the next settle instead left a slot or a reservation held on every replica for as long
        as this one had no limited key's request to settle (an hour at most)."""
        while self._unsettled or self._owed or self._owed_out:
            await self._sleep(self._recover_s)
            await self.ledger_settle_many([])

    def admitted_here(self, slot: str) -> bool:
        """Whether the admission of ``slot`` was counted in this replica's memory (Redis did
        not answer it in time), not in Redis; until it is settled."""
        return slot in self._local_slots

    @property
    def unsettled(self) -> int:
        """Settles and batches of spend Redis has not taken yet: kept to be sent again with the
        next, or out now (a count that left out the ones out told a caller all was settled
        while Redis had yet to run the last of them)."""
        return len(self._unsettled) + self._settling + len(self._owed_out) + (1 if self._owed else 0)

    async def ledger_read(self, key: str, minute: int, now_ms: int, budgets: Sequence[str]) -> LedgerState:
        return await self._guard("ledger_read", lambda: self._ledger_read(key, minute, now_ms, budgets),
                                 lambda: self.local.ledger_read(key, minute, now_ms, budgets))  # fmt: skip

    async def ledger_read_shared(self, key: str, minute: int, now_ms: int,
                                 budgets: Sequence[str]) -> LedgerState | None:  # fmt: skip
        async def remote() -> LedgerState | None:
            return await self._ledger_read(key, minute, now_ms, budgets)

        return await self._guard("ledger_read", remote, lambda: _value(None))

    async def _ledger_read(self, key: str, minute: int, now_ms: int, budgets: Sequence[str]) -> LedgerState:
        keys = self._ledger_keys(key, minute, budgets)
        pipe = self._r.pipeline(transaction=False)
        pipe.hmget(keys[0], "n", "k")
        pipe.zcount(keys[1], now_ms + 1, "+inf")
        for b in keys[2:]:
            pipe.hmget(b, "s", "r")
        got = await pipe.execute()
        n, k = (int(v or 0) for v in got[0])
        spend = [(float(s or 0), max(0.0, float(r or 0))) for s, r in got[2:]]
        # Mirrored as admits are (a scrape reads every budget: the gauges' reading then holds a
        # budget this replica has not admitted on yet, should Redis stop answering).
        self.local.ledger_mirror(key, minute, n, k, self._with_owed(budgets, [v for sr in spend for v in sr]),
                                 _READ_MIRROR_S, at=now_ms / 1000)  # fmt: skip
        return n, k, int(got[1]), spend

    # -- remembered answers --------------------------------------------------------------------

    async def answer_put(self, fingerprint: str, blob: bytes, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        await self.local.answer_put(fingerprint, blob, ttl_s)

        async def remote() -> None:
            await self._put(keys=[self._answers + fingerprint, self._any_answer], args=[blob, _ms(ttl_s)])

        await self._guard("answer_put", remote, lambda: _value(None))

    async def answer_take(self, fingerprint: str) -> tuple[bytes, int] | None:
        keys = [self._answers + fingerprint, self._any_answer, self._op_marker()]

        async def remote() -> tuple[bytes, int] | None:
            got: Any = await self._take(keys=keys, args=[self._op_marker_ms])
            if isinstance(got, int):  # not there; 0: no answer is remembered at all
                none = got == 0
                self._none_remembered_until = self._monotonic() + self._answers_cache_s if none else -math.inf
                return None
            self._none_remembered_until = -math.inf
            return bytes(got[0]), int(got[1])

        return await self._guard("answer_take", remote, lambda: self.local.answer_take(fingerprint))

    async def answer_drop(self, fingerprint: str) -> None:
        await self.local.answer_drop(fingerprint)

        async def remote() -> None:
            await self._r.delete(self._p + "a:" + fingerprint)

        await self._guard("answer_drop", remote, lambda: _value(None))

    def holds_answers(self) -> bool:
        # Other replicas may have remembered one, unless a lookup just showed that none has:
        # then a plain request skips the lookup (one Redis round trip) for answers_cache_s.
        # This replica's own answers are in its local memory too and always looked up.
        return self.local.holds_answers() or self._monotonic() >= self._none_remembered_until

    async def check(self, timeout_s: float) -> StoreCheck | None:
        """A PING and a write (start-up): None when Redis answered both. Changes no state:
        requests still find out for themselves, each within ``timeout_s`` of the store. From
        now on, whatever it finds, ``{prefix}kept`` is watched (``_watch_kept``)."""
        self._start_kept_watch()  # (its first look is kept_every_s from now)
        try:
            async with asyncio.timeout(timeout_s):
                await self._r.ping()
        except _FAILURES as e:
            problem = lasting(e, self._db)
            if problem is None and isinstance(e, (*_TIMEOUTS, RedisConnectionError)):
                problem = await self._plain_behind_tls(timeout_s)
            return StoreCheck(type(e).__name__, problem)
        self._answered_at = self._monotonic()
        if self._probe_r is not self._r:
            # The probe's connection opened now: a first probe that opened it measured its
            # set-up (three round trips, with redis-py's CLIENT SETINFO), not Redis's answer.
            with contextlib.suppress(*_FAILURES):
                async with asyncio.timeout(timeout_s):
                    await self._probe_r.ping()
        try:
            # A PING is answered by a Redis that refuses every write (full, or a read-only
            # replica): "answered" at start-up, then every write failed.
            async with asyncio.timeout(timeout_s):
                await self._r.set(self._p + "started", b"1", px=60_000)
        except _FAILURES as e:
            problem = refusing_writes(e) or lasting(e, self._db)
            if problem is not None:
                return StoreCheck(type(e).__name__, problem, answered=True)
        # Loaded now (Redis keeps them for every client), so that no request's first use of a
        # script spends its deadline on NOSCRIPT and a load: three round trips in 50 ms, which
        # a worker starting on a loaded host missed and left Redis for recover_s.
        try:
            async with asyncio.timeout(timeout_s):
                pipe = self._r.pipeline(transaction=False)
                for script in _SCRIPTS:
                    pipe.script_load(script)
                await pipe.execute()
        except _FAILURES:
            pass  # each request loads what it needs, as it did
        with contextlib.suppress(*_FAILURES):
            async with asyncio.timeout(timeout_s):
                self._kept = await self._read_kept()
        return None

    async def _plain_behind_tls(self, timeout_s: float) -> str | None:
        """With ``rediss://``, whether the server answers a plain PING: a Redis without TLS never
        answers a TLS handshake, and the client timed out as if it were down."""
        pool = self._r.connection_pool
        host, port = pool.connection_kwargs.get("host"), pool.connection_kwargs.get("port")
        if not issubclass(pool.connection_class, SSLConnection) or host is None:
            return None
        try:
            async with asyncio.timeout(timeout_s):
                reader, writer = await asyncio.open_connection(host, port)
                try:
                    writer.write(b"PING\r\n")
                    answer = await reader.read(64)
                finally:
                    writer.close()
                    await writer.wait_closed()
        except (OSError, TimeoutError):
            return None
        if answer[:1] not in (b"+", b"-"):  # PONG, or an error such as NOAUTH: Redis, in plain text
            return None
        return PLAIN_BEHIND_TLS

    async def close(self) -> None:
        if self._resender is not None:
            self._resender.cancel()
        if self._stored_writer is not None:
            self._stored_writer.cancel()
        if self._probe is not None:
            self._probe.cancel()
        if self._kept_check is not None:
            self._kept_check.cancel()
        if self._kept_watch is not None:
            self._kept_watch.cancel()
        await self._r.aclose()
        if self._probe_r is not self._r:
            await self._probe_r.aclose()
