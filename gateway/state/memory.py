"""The embedded store: one process's memory. The default backend, and the local state every
replica falls back to while Redis does not answer in time."""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from gateway.policy.breaker import CLOSED, MAX_TRACKED_MODELS, CircuitRecord
from gateway.state.ledger_ops import LedgerAdmit, LedgerKeep, LedgerSettle, LedgerState

V = TypeVar("V")

SWEEP_EVERY = 256  # writes between sweeps of expired entries: bounded memory without a timer task
# Stored objects' deployments remembered in one process (~250 bytes each: about 25 MB full);
# the least recently used go first. With Redis this is the replica's own copy, and Redis holds
# them all for their TTL.
MAX_STORED = 100_000


def _unexpired(items: MutableMapping[str, tuple[float, V]], key: str, clock: Callable[[], float]) -> V | None:
    """The value under ``key`` while its deadline is ahead; an expired entry is removed as it is read."""
    found = items.get(key)
    if found is None:
        return None
    if found[0] <= clock():
        del items[key]
        return None
    return found[1]


class _Expiring(Generic[V]):
    """A dict whose entries vanish at their deadline (read-time check plus periodic sweeps)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._items: dict[str, tuple[float, V]] = {}
        self._writes = 0

    def get(self, key: str) -> V | None:
        return _unexpired(self._items, key, self._clock)

    def put(self, key: str, value: V, ttl_s: float) -> None:
        self._writes += 1
        if self._writes % SWEEP_EVERY == 0:
            now = self._clock()
            for k in [k for k, (t, _) in self._items.items() if t <= now]:
                del self._items[k]
        self._items[key] = (self._clock() + ttl_s, value)

    def pop(self, key: str) -> None:
        self._items.pop(key, None)

    def live(self) -> list[tuple[str, V, float]]:
        """Every unexpired entry: its key, its value and the seconds it has left."""
        now = self._clock()
        return [(k, v, t - now) for k, (t, v) in self._items.items() if t > now]

    def __len__(self) -> int:
        return len(self._items)


class _Answers:
    """An LRU bounded by entry count and total bytes, each entry with its own deadline."""

    def __init__(self, clock: Callable[[], float], max_entries: int, max_bytes: int) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: OrderedDict[str, tuple[float, bytes, int]] = OrderedDict()

    def put(self, key: str, blob: bytes, ttl_s: float) -> None:
        self._drop(key)
        if len(blob) > self._max_bytes:
            return
        now = self._clock()
        self._items[key] = (now + ttl_s, blob, 0)
        self._bytes += len(blob)
        while len(self._items) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._items)))
        # The least recently used end holds the oldest answers, mostly expired by now: dropped
        # here, or a quiet spell kept up to max_total_bytes of dead answers in memory for good.
        for old, (until, _, _) in list(itertools.islice(self._items.items(), 8)):
            if until > now:
                break
            self._drop(old)

    def take(self, key: str) -> tuple[bytes, int] | None:
        found = self._items.get(key)
        if found is None:
            return None
        until, blob, taken = found
        if until <= self._clock():
            self._drop(key)
            return None
        self._items[key] = (until, blob, taken + 1)
        self._items.move_to_end(key)
        return blob, taken + 1

    def drop(self, key: str) -> None:
        self._drop(key)

    def _drop(self, key: str) -> None:
        found = self._items.pop(key, None)
        if found is not None:
            self._bytes -= len(found[1])

    def __len__(self) -> int:
        return len(self._items)


class _Recent(Generic[V]):
    """An LRU bounded by entry count, each entry with its own deadline: what a busy gateway
    writes once per request (each stored response's deployment) cannot outgrow ``max_entries``
    before its deadlines pass."""

    def __init__(self, clock: Callable[[], float], max_entries: int) -> None:
        self._clock = clock
        self._max = max_entries
        self._items: OrderedDict[str, tuple[float, V]] = OrderedDict()

    def get(self, key: str) -> V | None:
        value = _unexpired(self._items, key, self._clock)
        if key in self._items:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V, ttl_s: float) -> None:
        self._items[key] = (self._clock() + ttl_s, value)
        self._items.move_to_end(key)
        while len(self._items) > self._max:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


def passes(n: int, k: int, requests_per_minute: int | None, tokens_per_minute: int | None,
           tokens: int) -> bool:
    """Whether one more request of ``tokens`` would pass a window's limits, at ``n`` requests
    and ``k`` tokens counted so far."""
    if requests_per_minute is not None and n + 1 > requests_per_minute:
        return True
    return tokens_per_minute is not None and k > 0 and k + tokens > tokens_per_minute


class MemoryStore:
    backend = "memory"
    healthy = True  # this process's memory always answers
    epoch = 0  # and never loses what was written to it

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        max_answers: int = 10_000,
        max_answer_bytes: int = 64 * 1024 * 1024,
        max_stored: int = MAX_STORED,
    ) -> None:
        self._clock = clock
        self._circuits: _Expiring[CircuitRecord] = _Expiring(clock)
        self._probes: _Expiring[bool] = _Expiring(clock)
        self._resets: _Expiring[int] = _Expiring(clock)
        self._budgets: dict[str, dict[int, list[int]]] = {}
        self._records: _Expiring[dict[str, float]] = _Expiring(clock)
        # key:minute -> [requests, tokens, of those tokens the ones held by requests in flight]
        self._windows: _Expiring[list[int]] = _Expiring(clock)
        self._slots: dict[str, dict[str, int]] = {}  # key -> slot -> expiry (epoch ms)
        self._spend: _Expiring[list[float]] = _Expiring(clock)  # budget key -> [spent, reserved]
        self._mirrored: _Expiring[float] = _Expiring(clock)  # budget key -> when the shared store gave it
        self._homes: _Expiring[str] = _Expiring(clock)  # conversation -> its home deployment
        self._stored: _Recent[str] = _Recent(clock, max_stored)  # stored object -> its deployment
        self.answers = _Answers(clock, max_answers, max_answer_bytes)

    async def circuit_get(self, keys: Sequence[str]) -> list[CircuitRecord]:
        return [self._circuits.get(k) or CLOSED for k in keys]

    async def circuit_fail(self, items: Sequence[tuple[str, str]], ttl_s: float) -> list[CircuitRecord]:
        out = []
        for key, model in items:
            rec = self._circuits.get(key) or CLOSED
            models = rec.models
            if model and len(models) < MAX_TRACKED_MODELS:
                models = models | {model}
            rec = replace(rec, failures=rec.failures + 1, models=models)
            self._circuits.put(key, rec, ttl_s)
            out.append(rec)
        return out

    async def circuit_open(self, key: str, until: float, ttl_s: float, probes: int = 0) -> None:
        rec = self._circuits.get(key) or CLOSED
        self._circuits.put(key, replace(rec, open_until=until, probes=probes), ttl_s)

    async def circuit_clear(self, keys: Sequence[str]) -> None:
        for k in keys:
            self._circuits.pop(k)

    async def probe_claim(self, key: str, ttl_s: float) -> bool:
        if self._probes.get(key):
            return False
        self._probes.put(key, True, ttl_s)
        return True

    async def probe_release(self, key: str) -> None:
        self._probes.pop(key)

    async def budget_add(self, key: str, requests: int, retries: int, window_s: float) -> tuple[int, int]:
        now = int(self._clock())
        span = max(1, math.ceil(window_s))
        buckets = self._budgets.setdefault(key, {})
        for sec in [s for s in buckets if s <= now - span]:
            del buckets[sec]
        if requests or retries:
            cur = buckets.setdefault(now, [0, 0])
            cur[0] += requests
            cur[1] += retries
        return sum(b[0] for b in buckets.values()), sum(b[1] for b in buckets.values())

    async def budget_reserve(
        self, key: str, requests: int, retries: int, window_s: float, reserve: float, ratio: float
    ) -> tuple[bool, int, int]:
        req, ret = await self.budget_add(key, requests, retries, window_s)
        if ret + 1 > reserve + ratio * req:
            return False, req, ret
        req, ret = await self.budget_add(key, 0, 1, window_s)
        return True, req, ret

    async def reset_set(self, key: str, reset_at_ms: int) -> None:
        ttl = reset_at_ms / 1000 - self._clock()
        if ttl > 0:
            self._resets.put(key, reset_at_ms, ttl)

    async def reset_get(self, key: str) -> int | None:
        return self._resets.get(key)

    async def records_sync(
        self,
        reads: Sequence[str],
        writes: Sequence[tuple[str, Mapping[str, float], float]] = (),
        adds: Sequence[tuple[str, Mapping[str, int], float]] = (),
        circuits: Sequence[str] = (),
        homes: Sequence[tuple[str, str, float]] = (),
    ) -> tuple[list[dict[str, float]], list[CircuitRecord], list[str | None]]:
        held: list[str | None] = []
        for key, home, ttl_s in homes:
            self._homes.put(key, kept := self._homes.get(key) or home, ttl_s)
            held.append(kept)
        for key, fields, ttl_s in writes:
            self._records.put(key, {**(self._records.get(key) or {}), **fields}, ttl_s)
        for key, counts, ttl_s in adds:
            rec = dict(self._records.get(key) or {})
            for name, n in counts.items():
                # Never below nothing: a usage's correction lowers a count that held its estimate
                # (RECORDS_ADD's floor, as Redis keeps it). RECORDS_ADD's cap at the replica's own
                # share needs no field here: one process wrote all of it, and loses none of it.
                rec[name] = max(0, rec.get(name, 0) + n)
            self._records.put(key, rec, ttl_s)
        return [dict(self._records.get(k) or {}) for k in reads], await self.circuit_get(circuits), held

    async def home_claim(self, key: str, proposed: str, members: Sequence[str],
                         ttl_s: float) -> tuple[str, bool, str | None]:
        home = self._homes.get(key)
        if home is not None and home in members:
            self._homes.put(key, home, ttl_s)
            return home, False, None
        self._homes.put(key, proposed, ttl_s)
        return proposed, True, home

    async def home_move(self, key: str, frm: str, to: str, members: Sequence[str],
                        ttl_s: float) -> tuple[str, bool]:  # fmt: skip
        home = self._homes.get(key)
        if home is not None and home != frm and home in members:
            self._homes.put(key, home, ttl_s)
            return home, False
        self._homes.put(key, to, ttl_s)
        return to, True

    async def stored_put(self, key: str, deployment: str, ttl_s: float) -> None:
        self._stored.put(key, deployment, ttl_s)

    async def stored_get(self, key: str) -> str | None:
        return self._stored.get(key)

    async def records_take(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None,
                           tokens: int, ttl_s: float) -> tuple[bool, int, int, int]:
        rec = self._records.get(key) or {}
        n, k, e = int(rec.get("n", 0)), int(rec.get("k", 0)), int(rec.get("e", 0))
        if passes(n, k, requests_per_minute, tokens_per_minute, tokens):
            return False, n, k, e
        self._records.put(key, {**rec, "n": n + 1, "k": k + tokens, "e": e + tokens}, ttl_s)
        return True, n + 1, k + tokens, e + tokens

    async def records_least(self, key: str, tokens: float, until_ms: float,
                            now_ms: float) -> tuple[float, float]:  # fmt: skip
        rec = self._records.get(key) or {}
        k, u = float(tokens), float(until_ms)
        if rec.get("u", 0) > now_ms:
            k = rec["k"] if 0 < rec.get("k", 0) < k else k
            u = max(u, rec["u"])
        self._records.put(key, {**rec, "k": k, "u": u}, max(0.0, u - now_ms) / 1000 + 1.0)
        return k, u

    async def ledger_admit(self, a: LedgerAdmit) -> tuple[str, float]:
        wkey = f"{a.key}:{a.minute}"
        n, k, h = self._windows.get(wkey) or [0, 0, 0]
        if a.requests_per_minute is not None and n + 1 > a.requests_per_minute:
            return "rpm", 0.0
        # A request bigger than the whole limit still gets a minute of its own.
        if a.tokens_per_minute is not None and k > 0 and k + a.tokens > a.tokens_per_minute:
            return "tpm", float(h)
        slots = self._slots.setdefault(a.key, {})
        for s in [s for s, until in slots.items() if until <= a.now_ms]:
            del slots[s]
        if a.parallel is not None and len(slots) >= a.parallel:
            return "parallel", 0.0
        for i, (bkey, limit) in enumerate(a.budgets):
            spent, held = self._spend.get(bkey) or [0.0, 0.0]
            if spent + held >= limit:
                return f"budget{i}", spent
        self._windows.put(wkey, [n + 1, k + a.tokens, h + a.tokens], 120.0)
        slots[a.slot] = a.now_ms + a.slot_ttl_ms  # every request in flight, as Redis keeps them
        for bkey, _ in a.budgets:
            spent, held = self._spend.get(bkey) or [0.0, 0.0]
            self._spend.put(bkey, [spent, held + a.reserve_usd], a.budget_ttl_s)
        return "ok", 0.0

    def ledger_mirror(self, key: str, minute: int, requests: int, tokens: int,
                      budgets: Sequence[tuple[str, float, float]], budget_ttl_s: float,
                      slot: tuple[str, int] | None = None, at: float | None = None) -> None:  # fmt: skip
        """What the shared store last answered about ``key``: its minute's counts, each budget's
        (store key, spent, reserved), and ``slot`` (its name, expiry in epoch ms) when it admitted
        one; ``at``: when it was asked (epoch s; this clock's now if not given). This memory counts
        on from them while the shared store does not answer."""
        # Redis does not say how many of the minute's tokens are held in flight: this replica's
        # own count of them is kept (it only words a refusal), never above the minute's tokens.
        wkey = f"{key}:{minute}"
        held_tokens = (self._windows.get(wkey) or [0, 0, 0])[2]
        self._windows.put(wkey, [requests, tokens, min(held_tokens, tokens)], 120.0)
        for bkey, spent, held in budgets:
            # A budget's spend only grows within its period (its key names it): never lowered by
            # an answer, which may come from a Redis restarted empty before this replica has
            # written back what it knew (``RedisStore._check_kept``, which reads it from here;
            # with requests in flight a read of Redis's $0 got there first, and every budget
            # started again from $0: review).
            known = self._spend.get(bkey)
            self._spend.put(bkey, [max(spent, known[0]) if known else spent, held], budget_ttl_s)
            self._mirrored.put(bkey, self._clock() if at is None else at, budget_ttl_s)
        if slot is not None:
            slots = self._slots.setdefault(key, {})
            now_ms = self._clock() * 1000
            for s in [s for s, until in slots.items() if until <= now_ms]:  # a settle never came
                del slots[s]
            slots[slot[0]] = slot[1]

    async def ledger_settle_many(self, settles: Sequence[LedgerSettle]) -> None:
        for s in settles:
            self._settle(s)

    def _settle(self, s: LedgerSettle) -> None:
        wkey = f"{s.key}:{s.minute}"
        window = self._windows.get(wkey)
        if window is not None:
            window[1] = max(0, window[1] + s.token_delta)
            window[2] = max(0, window[2] - s.held_tokens)
        self._slots.get(s.key, {}).pop(s.slot, None)
        for bkey in s.budgets:
            spent, held = self._spend.get(bkey) or [0.0, 0.0]
            self._spend.put(bkey, [spent + s.cost_usd, max(0.0, held - s.reserve_usd)], s.budget_ttl_s)

    async def ledger_keep(self, keeps: Sequence[LedgerKeep]) -> None:
        # Back if a later admit took it for a dead replica's; a budget here holds a reservation
        # until its settle, however long.
        for k in keeps:
            self._slots.setdefault(k.key, {})[k.slot] = k.until_ms

    async def ledger_read(self, key: str, minute: int, now_ms: int, budgets: Sequence[str]) -> LedgerState:
        n, k, _ = self._windows.get(f"{key}:{minute}") or [0, 0, 0]
        in_flight = sum(1 for until in self._slots.get(key, {}).values() if until > now_ms)
        spend = [tuple(self._spend.get(b) or [0.0, 0.0]) for b in budgets]
        return n, k, in_flight, spend  # type: ignore[return-value]

    async def ledger_read_shared(self, key: str, minute: int, now_ms: int,
                                 budgets: Sequence[str]) -> LedgerState | None:  # fmt: skip
        return await self.ledger_read(key, minute, now_ms, budgets)  # one process: this is every count

    def ledger_owed(self, budgets: Sequence[str]) -> list[float]:
        return [0.0] * len(budgets)  # nothing shared to owe

    def ledger_mirrored(self, budgets: Sequence[str]) -> list[tuple[float, float, float] | None]:
        """Each budget as this memory counts it on from the shared store's last answer (spent,
        reserved, when that answer was asked for); None where the store gave none."""
        out: list[tuple[float, float, float] | None] = []
        for bkey in budgets:
            at, spend = self._mirrored.get(bkey), self._spend.get(bkey)
            out.append(None if at is None or spend is None else (spend[0], spend[1], at))
        return out

    def ledger_spent(self) -> list[tuple[str, float, float]]:
        """Every budget this memory knows spent on: its store key, the dollars spent, and the
        seconds its period (and a little more) has left."""
        return [(bkey, spend[0], left) for bkey, spend, left in self._spend.live() if spend[0] > 0]

    async def answer_put(self, fingerprint: str, blob: bytes, ttl_s: float) -> None:
        if ttl_s > 0:
            self.answers.put(fingerprint, blob, ttl_s)

    async def answer_take(self, fingerprint: str) -> tuple[bytes, int] | None:
        return self.answers.take(fingerprint)

    async def answer_drop(self, fingerprint: str) -> None:
        self.answers.drop(fingerprint)

    def holds_answers(self) -> bool:
        return len(self.answers) > 0

    async def check(self, timeout_s: float) -> None:
        return None  # this process's memory always answers

    async def close(self) -> None:
        return None
