"""The shared store: Redis, bounded in time, with this process's memory as the fallback.

A request never waits on Redis longer than ``timeout_s`` per operation. On a timeout or an
error the operation is served from the local :class:`MemoryStore` instead, and the store stays
local for ``recover_s`` before one operation tries Redis again; the switch is logged once each
way and every locally served operation is counted through ``on_fallback(backend, op)``.

Writes go to local memory as well as to Redis, so a replica that loses Redis still knows what
it saw itself (its own failures, requests and remembered answers) instead of starting blank.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.policy.breaker import CLOSED, MAX_TRACKED_MODELS, CircuitRecord
from gateway.state.ledger_ops import LedgerAdmit, LedgerSettle, LedgerState
from gateway.state.memory import MemoryStore
from gateway.state.turn_batch import TurnBatch, run_pipelined

T = TypeVar("T")
log = logging.getLogger("gateway.state")

# Sums the window's per-second buckets after adding to the current one, atomically, in one trip.
# The second is Redis's own: a replica's clock read before the trip would let a call that
# Redis runs later name an earlier second than one it already ran, and that call's window
# would miss the newer bucket's retries (two replicas confirmed 19 retries against a bound
# of 10 that way). replicate_commands lets a Redis older than 7 write after TIME; on 7 it is
# a no-op.
_BUDGET = """
redis.replicate_commands()
local base, span = KEYS[1], tonumber(ARGV[1])
local now = tonumber(redis.call('TIME')[1])
local addr, addt = tonumber(ARGV[2]), tonumber(ARGV[3])
local cur = base .. now
if addr > 0 then redis.call('HINCRBY', cur, 'r', addr) end
if addt > 0 then redis.call('HINCRBY', cur, 't', addt) end
if addr > 0 or addt > 0 then redis.call('EXPIRE', cur, span + 1) end
local req, ret = 0, 0
for i = 0, span - 1 do
  local v = redis.call('HMGET', base .. (now - i), 'r', 't')
  req = req + (tonumber(v[1]) or 0)
  ret = ret + (tonumber(v[2]) or 0)
end
if ARGV[4] == nil then return {req, ret} end
-- A reservation: one more retry, only if the window stays within the budget.
if ret + 1 > tonumber(ARGV[4]) + tonumber(ARGV[5]) * req then return {req, ret, 0} end
redis.call('HINCRBY', cur, 't', 1)
redis.call('EXPIRE', cur, span + 1)
return {req, ret + 1, 1}
"""

# Counts a repeat only when the answer is still there (HINCRBY alone would resurrect it).
# Without one, says whether any answer is remembered at all (KEYS[2], the marker below), so
# that a replica can skip the lookups while none is.
_TAKE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return redis.call('EXISTS', KEYS[2]) end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
return {redis.call('HGET', KEYS[1], 'b'), n}
"""

# An answer remembered (KEYS[1]: its hash; ARGV: the body, the TTL in ms), and the marker that
# some answer is (KEYS[2]), which lives as long as the longest-lived one: extended, never
# shortened. One script, not a pipeline holding one: such a pipeline first asks SCRIPT EXISTS
# on a connection it takes before its own cleanup begins, and a timeout there kept that
# connection out of the pool for good (closed by the garbage collector, with a warning).
_PUT = """
local ms = tonumber(ARGV[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'n', 0)
redis.call('PEXPIRE', KEYS[1], ms)
if redis.call('PTTL', KEYS[2]) < ms then redis.call('SET', KEYS[2], '1', 'PX', ms) end
"""

# A gateway key's admission, atomically: every limit checked before anything is counted, so a
# refused request leaves no trace. KEYS: the minute's window, the slots in flight, then one
# hash per budget. ARGV: rpm, tpm, tokens, parallel, slot, now_ms, slot_ttl_ms, reserve,
# budget_ttl_s, then each budget's limit. 0 means "no such limit".
#
# Each budget keeps its own reservations beside it (``<budget>:h``, slot -> expiry, and
# ``<budget>:hr``, slot -> reserve) and gives back the expired ones before it is checked: a
# slot expires only when its replica died mid-request (nothing will settle it), and its
# reserve then comes back at the next admit on that budget by any key (a team's), not only at
# the next admit of the key that made it, which may never come.
_LEDGER_ADMIT = """
local w = KEYS[1]
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(redis.call('HGET', w, 'n') or '0')
local k = tonumber(redis.call('HGET', w, 'k') or '0')
if rpm > 0 and n + 1 > rpm then return {'rpm', '0'} end
if tpm > 0 and k > 0 and k + tokens > tpm then return {'tpm', redis.call('HGET', w, 'h') or '0'} end
local par, slot, now, ttl = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if par > 0 and redis.call('ZCARD', KEYS[2]) >= par then return {'parallel', '0'} end
for i = 3, #KEYS do
  local holds, reserves = KEYS[i] .. ':h', KEYS[i] .. ':hr'
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now)
  if #gone > 0 then
    local back = 0
    for _, s in ipairs(gone) do
      back = back + tonumber(redis.call('HGET', reserves, s) or '0')
      redis.call('HDEL', reserves, s)
    end
    redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
    if back > 0 and redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('HINCRBYFLOAT', KEYS[i], 'r', -back)
    end
  end
  local spent = tonumber(redis.call('HGET', KEYS[i], 's') or '0')
  local held = tonumber(redis.call('HGET', KEYS[i], 'r') or '0')
  if spent + held >= tonumber(ARGV[7 + i]) then return {'budget' .. (i - 3), tostring(spent)} end
end
redis.call('HINCRBY', w, 'n', 1)
redis.call('HINCRBY', w, 'k', tokens)
redis.call('HINCRBY', w, 'h', tokens)
redis.call('EXPIRE', w, 120)
redis.call('ZADD', KEYS[2], now + ttl, slot)
redis.call('PEXPIRE', KEYS[2], ttl)
for i = 3, #KEYS do
  redis.call('HINCRBYFLOAT', KEYS[i], 'r', ARGV[8])
  redis.call('EXPIRE', KEYS[i], ARGV[9])
  redis.call('ZADD', KEYS[i] .. ':h', now + ttl, slot)
  redis.call('HSET', KEYS[i] .. ':hr', slot, ARGV[8])
  redis.call('EXPIRE', KEYS[i] .. ':h', ARGV[9])
  redis.call('EXPIRE', KEYS[i] .. ':hr', ARGV[9])
end
return {'ok', '0'}
"""

# Settling: the slot back, the reservation turned into what was spent, the minute's tokens
# the request held (``h``) given back. ARGV: token_delta, slot, reserve, cost, budget_ttl_s,
# held tokens. Once per slot, and only for a slot this Redis admitted:
# a settle sent again (its answer was lost) or one for an admit that never ran here changes
# nothing. A budget that already gave the reservation back (the slot outlived its expiry)
# takes the cost only.
_LEDGER_SETTLE = """
if redis.call('ZREM', KEYS[2], ARGV[2]) == 0 then return 0 end
if redis.call('EXISTS', KEYS[1]) == 1 then
  if tonumber(ARGV[1]) ~= 0 then redis.call('HINCRBY', KEYS[1], 'k', ARGV[1]) end
  if tonumber(ARGV[6] or '0') ~= 0 then redis.call('HINCRBY', KEYS[1], 'h', -tonumber(ARGV[6])) end
end
for i = 3, #KEYS do
  if redis.call('ZREM', KEYS[i] .. ':h', ARGV[2]) == 1 then
    redis.call('HDEL', KEYS[i] .. ':hr', ARGV[2])
    redis.call('HINCRBYFLOAT', KEYS[i], 'r', -tonumber(ARGV[3]))
  end
  redis.call('HINCRBYFLOAT', KEYS[i], 's', ARGV[4])
  redis.call('EXPIRE', KEYS[i], ARGV[5])
end
return 1
"""

# A pool deployment's configured limits, taken atomically at its pick: the request counts only
# if this window's requests and tokens stay within them (as _LEDGER_ADMIT counts a key's), so
# replicas that pick it at the same moment cannot each spend what the other sees as left.
# KEYS: the window's record. ARGV: rpm, tpm (0: no such limit), tokens, ttl_ms.
_RECORDS_TAKE = """
local rpm, tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local n = tonumber(redis.call('HGET', KEYS[1], 'n') or '0')
local k = tonumber(redis.call('HGET', KEYS[1], 'k') or '0')
if (rpm > 0 and n + 1 > rpm) or (tpm > 0 and k > 0 and k + tokens > tpm) then return {0, n, k} end
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
k = redis.call('HINCRBY', KEYS[1], 'k', tokens)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return {1, n, k}
"""

# A pool conversation's home, claimed: the one stored stays while it is a member of the pool
# (ARGV[3..]: the members as this replica's config has them), so that replicas which first
# meet a conversation after a reload (a weight changed, a deployment added) send it where its
# prompt cache is, not where the new weights would (returned with 0); else the proposed one
# (ARGV[1]) is stored, and returned with 1 and the one it replaced, if any (a removed
# deployment). ARGV[2]: the TTL in ms.
_HOME_CLAIM = """
local cur = redis.call('GET', KEYS[1])
if cur then
  for i = 3, #ARGV do
    if ARGV[i] == cur then
      redis.call('PEXPIRE', KEYS[1], ARGV[2])
      return {cur, 0, ''}
    end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {ARGV[1], 1, cur or ''}
"""

# A home that did not answer its conversation's turn moved to the deployment that did (ARGV[2]),
# unless another home than the one that failed (ARGV[1]) is stored and a member of the pool
# (ARGV[4..]): another replica's turn moved it since, and it stays. ARGV[3]: the TTL in ms.
_HOME_MOVE = """
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  for i = 4, #ARGV do
    if ARGV[i] == cur then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
      return cur
    end
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return ARGV[2]
"""

_SCRIPTS = (_BUDGET, _TAKE, _PUT, _LEDGER_ADMIT, _LEDGER_SETTLE, _RECORDS_TAKE, _HOME_CLAIM, _HOME_MOVE)
_FAILURES = (RedisError, OSError, TimeoutError)
_TIMEOUTS = (RedisTimeoutError, TimeoutError)
# Settles kept for a Redis that does not answer: a long outage at high traffic would otherwise
# grow them without bound (each is ~300 bytes); past it, the oldest wait for their slots' TTL.
MAX_UNSETTLED = 100_000


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
        self._p = prefix
        self._timeout_s = timeout_s
        self._recover_s = recover_s
        self._slow_s = max(timeout_s, recover_s)  # an operation's longest wait while Redis is not down
        self._waiting: set[asyncio.Timeout] = set()
        self._slow_logged_at, self._slow_since_log = -math.inf, 0
        self._on_fallback = on_fallback
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._answered_at = -math.inf  # when Redis last answered an operation (monotonic)
        self._probe: asyncio.Task[None] | None = None
        self._budget = client.register_script(_BUDGET)
        self._take = client.register_script(_TAKE)
        self._put = client.register_script(_PUT)
        self._ledger_admit = client.register_script(_LEDGER_ADMIT)
        self._ledger_settle = client.register_script(_LEDGER_SETTLE)
        self._admits = TurnBatch(client, self._ledger_admit)
        self._takes = TurnBatch(client, client.register_script(_RECORDS_TAKE))
        self._home_claims = TurnBatch(client, client.register_script(_HOME_CLAIM))
        self._home_move = client.register_script(_HOME_MOVE)
        # Reservations are settled where they were made (_ledger_keys' comment says why).
        self._local_slots: set[str] = set()
        self._unsettled: list[tuple[list[str], list[str | int]]] = []
        self._settling = 0  # settles out to Redis now, not yet answered
        self._resender: asyncio.Task[None] | None = None
        self._answers = prefix + "a:"
        self._any_answer = prefix + "a-any"  # exists while any replica remembers an answer
        # Until when (monotonic) this replica may take it that no replica remembers an answer:
        # learnt from a lookup, believed for ``answers_cache_s`` (as circuits are cached).
        self._answers_cache_s = answers_cache_s
        self._none_remembered_until = -math.inf

    @property
    def healthy(self) -> bool:
        return self._down_since is None

    async def _guard(self, op: str, remote: Callable[[], Awaitable[T]],
                     local: Callable[[], Awaitable[T]]) -> T:
        if self._down_since is not None:
            self._maybe_probe()
            self._on_fallback(self.backend, op)
            return await local()
        started = self._monotonic()
        try:
            # ``timeout_ms`` is when a wait becomes suspect, not when it ends: past it, an
            # operation goes on waiting while Redis is not found down (``_suspect``), up to
            # ``_slow_s``. Served from memory at the first timeout, a saturated replica (its loop
            # reading answers late, which is most of a 50 ms wait at 600 concurrent requests)
            # counted budgets apart from Redis while Redis answered every call: a $0.01 budget
            # shared by two replicas served 3x its worth in one burst.
            async with asyncio.timeout(self._slow_s) as deadline:
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
                            # same bound. (The command never reached the new server, so nothing
                            # is counted twice.)
                            await self._drop_idle_connections()
                            result = await remote()
                finally:
                    suspicion.cancel()
                    self._waiting.discard(deadline)
        except _FAILURES as e:
            self._on_fallback(self.backend, op)
            waited = self._monotonic() - started
            if not isinstance(e, _TIMEOUTS):
                self._went_down(op, type(e).__name__, waited)
            elif self._down_since is None and self._probe is None:  # (a probe under way will say)
                self._too_slow(op, waited)
            return await local()
        self._came_back()
        return result

    def _suspect(self, op: str, started: float) -> None:
        """``timeout_ms`` passed on an operation. When Redis answered nothing since it began,
        a probe with more time (``recover_s``, on its own connection) tells a dead Redis from a
        loop too busy to read its answers; found dead, every waiting operation is let go at once
        (``_went_down``). When Redis answered others meanwhile, the wait is this process's own."""
        if self._answered_at <= started and self._probe is None and self._down_since is None:
            self._start_probe((op, "TimeoutError", self._monotonic() - started))

    def _too_slow(self, op: str, waited_s: float) -> None:
        """An operation waited ``_slow_s`` with Redis not found down: served from memory, said
        (at most once per ``recover_s``, with how many since), never silently."""
        self._slow_since_log += 1
        now = self._monotonic()
        if now - self._slow_logged_at >= self._recover_s:
            log.warning({"event": "state_store_slow", "backend": self.backend, "op": op,
                         "waited_ms": round(waited_s * 1000, 1),
                         "operations": self._slow_since_log})  # fmt: skip
            self._slow_logged_at, self._slow_since_log = now, 0

    def _came_back(self) -> None:
        self._answered_at = self._monotonic()
        if self._down_since is not None:
            log.info({"event": "state_store_back", "backend": self.backend,
                      "down_s": round(self._answered_at - self._down_since, 1)})
            self._down_since = None

    def _maybe_probe(self) -> None:
        """While Redis is taken for down, no request waits on it: one probe at a time, in the
        background, asks whether it answers again, at once and then once per ``recover_s``. A
        request's own operation was the probe before, within the request's 50 ms: a replica
        whose loop lagged that much (a saturated process) stayed off a Redis that answered
        every time (4.3 s in one run), and a Redis that did not answer held up one request
        every ``recover_s``."""
        if self._probe is None and self._monotonic() >= self._retry_at:
            self._start_probe(None)

    def _start_probe(self, suspect: tuple[str, str, float] | None) -> None:
        """A PING with ``recover_s`` to answer. ``suspect``: the operation (name, error, wait)
        whose timeout asked for it, which takes Redis for down if the PING goes unanswered."""
        self._retry_at = self._monotonic() + self._recover_s
        self._probe = asyncio.get_running_loop().create_task(self._probe_once(suspect))

    async def _probe_once(self, suspect: tuple[str, str, float] | None) -> None:
        try:
            async with asyncio.timeout(max(self._timeout_s, self._recover_s)):
                try:
                    await self._probe_r.ping()
                except (RedisConnectionError, ConnectionError):
                    await self._probe_r.connection_pool.disconnect()  # a restarted Redis
                    await self._probe_r.ping()
        except _FAILURES:
            self._probe = None
            self._retry_at = self._monotonic() + self._recover_s
            if suspect is not None:
                self._went_down(*suspect)
        else:
            self._probe = None
            self._came_back()

    async def _drop_idle_connections(self) -> None:
        try:
            await self._r.connection_pool.disconnect(inuse_connections=False)
        except _FAILURES:
            pass  # closing a dead socket may complain; it is closed either way

    def _went_down(self, op: str, error: str, waited_s: float) -> None:
        if self._down_since is None:
            self._down_since = self._monotonic()
            now = asyncio.get_running_loop().time()
            for deadline in list(self._waiting):  # the operations still waiting: to memory, now
                if not deadline.expired():  # (one that just expired is on its way there)
                    deadline.reschedule(now)
            # The error's type, never its text or the URL: either may carry a password.
            log.warning({"event": "state_store_down", "backend": self.backend, "op": op,
                         "error": error, "waited_ms": round(waited_s * 1000, 1),
                         "retry_every_s": self._recover_s})  # fmt: skip
            self._maybe_probe()  # at once, unless a probe just failed: a restarted Redis is back in ms

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

        async def remote() -> list[CircuitRecord]:
            pipe = self._r.pipeline(transaction=True)
            for key, model in items:
                k = self._p + "c:" + key
                pipe.hincrby(k, "f", 1)
                if model:
                    pipe.hset(k, "m:" + model, 1)
                pipe.pexpire(k, _ms(ttl_s))
                pipe.hgetall(k)
            return [_record(r) for r in await pipe.execute() if isinstance(r, dict)]

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
        async def remote() -> bool:
            return bool(await self._r.set(self._p + "p:" + key, b"1", nx=True, px=_ms(ttl_s)))

        return await self._guard("probe_claim", remote, lambda: self.local.probe_claim(key, ttl_s))

    async def probe_release(self, key: str) -> None:
        await self.local.probe_release(key)

        async def remote() -> None:
            await self._r.delete(self._p + "p:" + key)

        await self._guard("probe_release", remote, lambda: _value(None))

    # -- retry budget --------------------------------------------------------------------------

    async def budget_add(self, key: str, requests: int, retries: int, window_s: float) -> tuple[int, int]:
        mine = await self.local.budget_add(key, requests, retries, window_s)

        async def remote() -> tuple[int, int]:
            # The hash tag keeps a budget's buckets in one slot, should the Redis be a cluster.
            base = f"{self._p}b:{{{key}}}:"
            args = [max(1, math.ceil(window_s)), requests, retries]
            got: Any = await self._budget(keys=[base], args=args)
            return int(got[0]), int(got[1])

        return await self._guard("budget_add", remote, lambda: _value(mine))

    async def budget_reserve(
        self, key: str, requests: int, retries: int, window_s: float, reserve: float, ratio: float
    ) -> tuple[bool, int, int]:
        mine = await self.local.budget_reserve(key, requests, retries, window_s, reserve, ratio)

        async def remote() -> tuple[bool, int, int]:
            base = f"{self._p}b:{{{key}}}:"
            span = max(1, math.ceil(window_s))
            args: list[int | str] = [span, requests, retries, repr(reserve), repr(ratio)]
            got: Any = await self._budget(keys=[base], args=args)
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
    ) -> tuple[list[dict[str, float]], list[CircuitRecord]]:
        # Mirrored locally, so a replica that loses Redis still knows what it saw itself (but
        # the homes kept: the pool's own table holds those).
        mine = await self.local.records_sync(reads, writes, adds, circuits)
        p = self._p + "d:"

        async def remote() -> tuple[list[dict[str, float]], list[CircuitRecord]]:
            pipe = self._r.pipeline(transaction=False)
            for key, home, ttl_s in homes:
                # Kept, never overwritten (another replica may have moved it from a removed
                # deployment); set again only if gone (a restarted Redis), as this replica knows it.
                pipe.set(self._p + "home:" + key, home.encode(), nx=True, px=_ms(ttl_s))
                pipe.pexpire(self._p + "home:" + key, _ms(ttl_s))
            for key, fields, ttl_s in writes:
                pipe.hset(p + key, mapping={k: repr(v) for k, v in fields.items()})
                pipe.pexpire(p + key, _ms(ttl_s))
            for key, counts, ttl_s in adds:
                for name, n in counts.items():
                    pipe.hincrby(p + key, name, n)
                pipe.pexpire(p + key, _ms(ttl_s))
            for key in reads:
                pipe.hgetall(p + key)
            for key in circuits:
                pipe.hgetall(self._p + "c:" + key)
            got = await pipe.execute()
            read = got[len(got) - len(reads) - len(circuits) : len(got) - len(circuits)]
            return ([{k.decode(): float(v) for k, v in raw.items()} for raw in read],
                    [_record(raw) for raw in got[len(got) - len(circuits) :]])  # fmt: skip

        if not reads and not writes and not adds and not circuits and not homes:
            return [], []
        return await self._guard("records_sync", remote, lambda: _value(mine))

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

    async def home_move(self, key: str, frm: str, to: str, members: Sequence[str], ttl_s: float) -> str:
        async def remote() -> str:
            home = await self._home_move(keys=[self._p + "home:" + key], args=[frm, to, _ms(ttl_s), *members])
            return home.decode() if isinstance(home, bytes) else str(home)

        async def alone() -> str:
            return to  # as a claim while Redis is down: the pool's table keeps what it decided

        return await self._guard("home_move", remote, alone)

    # -- which deployment holds a stored object ------------------------------------------------

    async def stored_put(self, key: str, deployment: str, ttl_s: float) -> None:
        # Mirrored: this replica's own answers are then found without a round trip (an object's
        # deployment never changes), and while Redis does not answer.
        await self.local.stored_put(key, deployment, ttl_s)

        async def remote() -> None:
            await self._r.set(self._p + key, deployment.encode(), px=_ms(ttl_s))

        await self._guard("stored_put", remote, lambda: _value(None))

    async def stored_get(self, key: str) -> str | None:
        mine = await self.local.stored_get(key)
        if mine is not None:
            return mine

        async def remote() -> str | None:
            raw = await self._r.get(self._p + key)
            return raw.decode() if isinstance(raw, bytes) else raw

        return await self._guard("stored_get", remote, lambda: _value(None))

    async def records_take(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None,
                           tokens: int, ttl_s: float) -> tuple[bool, int, int]:
        args = [requests_per_minute or 0, tokens_per_minute or 0, tokens, _ms(ttl_s)]

        async def remote() -> tuple[bool, int, int]:
            ok, n, k = await self._takes([self._p + "d:" + key], args)
            # Every replica's count, mirrored: a replica that loses Redis counts on from it, not
            # from its own sends alone (which let it spend the whole limit once more).
            await self.local.records_sync((), [(key, {"n": float(n), "k": float(k)}, ttl_s)])
            return bool(ok), int(n), int(k)

        async def local() -> tuple[bool, int, int]:
            return await self.local.records_take(key, requests_per_minute, tokens_per_minute, tokens, ttl_s)

        return await self._guard("records_take", remote, local)

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
    def _ledger_keys(self, key: str, minute: int, budgets: Sequence[str]) -> list[str]:
        p = self._p + "l:"
        return [f"{p}w:{key}:{minute}", f"{p}p:{key}", *(f"{p}b:{b}" for b in budgets)]

    async def ledger_admit(self, a: LedgerAdmit) -> tuple[str, float]:
        keys = self._ledger_keys(a.key, a.minute, [b for b, _ in a.budgets])
        args: list[str | int] = [
            a.requests_per_minute or 0, a.tokens_per_minute or 0, a.tokens, a.parallel or 0, a.slot,
            a.now_ms, a.slot_ttl_ms, repr(a.reserve_usd), max(1, math.ceil(a.budget_ttl_s)),
            *(repr(limit) for _, limit in a.budgets),
        ]  # fmt: skip

        sent = False

        async def remote() -> tuple[str, float]:
            nonlocal sent
            sent = True
            verdict, value = await self._admits(keys, args)
            return verdict.decode() if isinstance(verdict, bytes) else str(verdict), float(value)

        async def local() -> tuple[str, float]:
            if sent:  # it may have run in Redis all the same: undone there if it did
                ttl = max(1, math.ceil(a.budget_ttl_s))
                self._keep_unsettled([(keys, [0, a.slot, repr(a.reserve_usd), repr(0.0), ttl, a.tokens])])
            verdict, spent = await self.local.ledger_admit(a)
            if verdict == "ok":
                self._local_slots.add(a.slot)
            return verdict, spent

        return await self._guard("ledger_admit", remote, local)

    async def ledger_settle_many(self, settles: Sequence[LedgerSettle]) -> None:
        """Also sends again what Redis did not take before: ``settles`` may be empty."""
        mine = {s.slot for s in settles if s.slot in self._local_slots}
        if mine:
            self._local_slots -= mine
            await self.local.ledger_settle_many([s for s in settles if s.slot in mine])
        calls, self._unsettled = self._unsettled, []
        for s in settles:
            if s.slot not in mine:
                ttl = max(1, math.ceil(s.budget_ttl_s))
                args: list[str | int] = [s.token_delta, s.slot, repr(s.reserve_usd), repr(s.cost_usd), ttl,
                                         s.held_tokens]  # fmt: skip
                calls.append((self._ledger_keys(s.key, s.minute, s.budgets), args))
        if not calls:
            return

        async def remote() -> None:
            for result in await run_pipelined(self._r, self._ledger_settle, calls):
                if isinstance(result, Exception):
                    raise result

        async def later() -> None:
            self._keep_unsettled(calls)

        self._settling += len(calls)
        try:
            await self._guard("ledger_settle", remote, later)
        finally:
            self._settling -= len(calls)

    def _keep_unsettled(self, calls: list[tuple[list[str], list[str | int]]]) -> None:
        self._unsettled = calls + self._unsettled
        if len(self._unsettled) > MAX_UNSETTLED:
            dropped = len(self._unsettled) - MAX_UNSETTLED
            del self._unsettled[MAX_UNSETTLED:]
            log.warning({"event": "ledger_settles_dropped", "backend": self.backend, "count": dropped})
        if self._resender is None or self._resender.done():
            self._resender = asyncio.get_running_loop().create_task(self._resend())

    async def _resend(self) -> None:
        """Sends what Redis did not take again, every ``recover_s`` until it has: waiting for
        the next settle instead left a slot or a reservation held on every replica for as long
        as this one had no limited key's request to settle (an hour at most)."""
        while self._unsettled:
            await asyncio.sleep(self._recover_s)
            await self.ledger_settle_many([])

    def admitted_here(self, slot: str) -> bool:
        """Whether the admission of ``slot`` was counted in this replica's memory (Redis did
        not answer it in time), not in Redis; until it is settled."""
        return slot in self._local_slots

    @property
    def unsettled(self) -> int:
        """Settles Redis has not taken yet: kept to be sent again with the next, or out now (a
        count that left out the ones out told a caller all was settled while Redis had yet to
        run the last of them)."""
        return len(self._unsettled) + self._settling

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
        async def remote() -> tuple[bytes, int] | None:
            got: Any = await self._take(keys=[self._answers + fingerprint, self._any_answer])
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

    async def check(self, timeout_s: float) -> str | None:
        """PING once (start-up): None when Redis answered, else the error's type. Changes no
        state: requests still find out for themselves, each within ``timeout_s`` of the store."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._r.ping()
        except _FAILURES as e:
            return type(e).__name__
        self._answered_at = self._monotonic()
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
        return None

    async def close(self) -> None:
        if self._resender is not None:
            self._resender.cancel()
        if self._probe is not None:
            self._probe.cancel()
        await self._r.aclose()
        if self._probe_r is not self._r:
            await self._probe_r.aclose()
