"""The state store seam: what replicas share, behind one async interface.

Two implementations: :class:`~gateway.state.memory.MemoryStore` (this process; the default,
and every replica's fallback) and :class:`~gateway.state.redis_store.RedisStore` (shared).
Everything stored has a time to live, so a replica that dies mid-write leaves nothing that
outlives its purpose. Times are wall-clock epoch seconds (replicas share no monotonic clock).

    circuits   key -> CircuitRecord        consecutive failures, open-until, failed probes, models
    probes     key@period -> claimed       the single half-open probe of one open period
    budget     key -> (requests, retries)  counters over a sliding window of whole seconds
    resets     key -> reset-at epoch ms    a rate limit's reset, per upstream / model
    answers    fingerprint -> bytes        the loop breaker's remembered answers, with repeats
    records    key -> {field: number}      a pool deployment's sit-outs, headroom and usage; its
                                           configured limits' count, taken atomically
    homes      key -> deployment           a pool conversation's home (prompt-cache affinity),
                                           claimed once, kept while it is used
    stored     key -> deployment           which pool deployment's key holds an object the
                                           provider stores (a Responses answer, a conversation)
    ledger     key -> counts and dollars   a gateway key's requests and tokens this minute, its
                                           requests in flight, its and its team's spend per period
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from gateway.policy.breaker import CircuitRecord
from gateway.state.ledger_ops import LedgerAdmit, LedgerKeep, LedgerSettle, LedgerState


@dataclass(frozen=True, slots=True)
class StoreCheck:
    """What start-up found wrong with the shared store. ``error``: the error's type, never its
    text (a URL in it may carry a password). ``problem``: in words, when waiting will not heal it
    (a wrong password, database or scheme; a full or read-only Redis), else None: an outage.
    ``answered``: Redis answered a PING, and refused a write."""

    error: str
    problem: str | None = None
    answered: bool = False


class StateStore(Protocol):
    backend: str  # "memory" or "redis": a metric label

    @property
    def healthy(self) -> bool:
        """Whether the shared store answers now: while it does not, operations are served from
        this replica's memory, which knows nothing of what other replicas wrote (memory:
        always)."""
        ...

    @property
    def epoch(self) -> int:
        """Moves on whenever what this replica wrote to the shared store may not be there: an
        operation served from memory, the store taken off or back, the store found to have lost
        what it held. What was counted in the store at one epoch is known to be there still
        while the epoch stays the same (a usage below a pool call's estimate lowers the count
        only then). Memory: always 0."""
        ...

    async def circuit_get(self, keys: Sequence[str]) -> list[CircuitRecord]:
        """The records of ``keys`` (CLOSED for an absent one), in one round trip."""
        ...

    async def circuit_fail(self, items: Sequence[tuple[str, str]], ttl_s: float) -> list[CircuitRecord]:
        """Count one failure into each ``(key, model)`` and return the records after it."""
        ...

    async def circuit_open(self, key: str, until: float, ttl_s: float, probes: int = 0) -> None:
        """Open until ``until``; ``probes``: the failed probes in a row so far (the schedule)."""
        ...

    async def circuit_clear(self, keys: Sequence[str]) -> None:
        """Close: forget failures and open-until (a success, or a probe that succeeded)."""
        ...

    async def probe_claim(self, key: str, ttl_s: float) -> bool:
        """True for exactly one caller until released or ``ttl_s`` passes (a crashed prober)."""
        ...

    async def probe_release(self, key: str) -> None: ...

    async def budget_add(self, key: str, requests: int, retries: int, window_s: float) -> tuple[int, int]:
        """Add to the current second's counters; return (requests, retries) over the window."""
        ...

    async def budget_reserve(
        self, key: str, requests: int, retries: int, window_s: float, reserve: float, ratio: float
    ) -> tuple[bool, int, int]:
        """``budget_add``, then atomically count one more retry if the window's retries stay
        within ``reserve + ratio * requests``: (whether it was counted, requests, retries)."""
        ...

    async def reset_set(self, key: str, reset_at_ms: int) -> None:
        """Remember a rate limit's reset time until it passes."""
        ...

    async def reset_get(self, key: str) -> int | None: ...

    async def records_sync(
        self,
        reads: Sequence[str],
        writes: Sequence[tuple[str, Mapping[str, float], float]] = (),
        adds: Sequence[tuple[str, Mapping[str, int], float]] = (),
        circuits: Sequence[str] = (),
        homes: Sequence[tuple[str, str, float]] = (),
    ) -> tuple[list[dict[str, float]], list[CircuitRecord], list[str | None]]:
        """In one round trip: merge each write's fields into its record (with its TTL in
        seconds), add each ``adds`` increment into its record's counters (atomically, with its
        TTL), keep each of ``homes`` (key, deployment, TTL: its TTL extended, set to that
        deployment only if it is gone), then read ``reads`` (an empty dict for an absent
        record) and the ``circuits`` (as ``circuit_get``: a pool's deployments' circuits come
        with its records); and the home each of ``homes`` has in the store then (None: not
        known, the store did not answer)."""
        ...

    async def home_claim(self, key: str, proposed: str, members: Sequence[str],
                         ttl_s: float) -> tuple[str, bool, str | None]:
        """Atomically: the home stored under ``key`` when it is one of ``members`` (its TTL
        extended), else ``proposed`` stored as the home for ``ttl_s``; then (the home, whether
        it was stored now, the one it replaced: a home that is no longer a member, else None)."""
        ...

    async def home_move(self, key: str, frm: str, to: str, members: Sequence[str],
                        ttl_s: float) -> tuple[str, bool]:  # fmt: skip
        """Atomically: ``to`` stored as the home under ``key`` for ``ttl_s`` unless another home
        than ``frm`` is stored there that is one of ``members`` (another replica's, set since:
        kept, its TTL extended); then the home stored, and whether this call stored it."""
        ...

    async def stored_put(self, key: str, deployment: str, ttl_s: float) -> None:
        """Remember for ``ttl_s`` that ``deployment`` made the stored object ``key``."""
        ...

    async def stored_get(self, key: str) -> str | None:
        """The deployment that made the stored object ``key``, None when not known."""
        ...

    async def records_take(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None,
                           tokens: int, ttl_s: float) -> tuple[bool, int, int, int]:
        """Atomically: count one request and ``tokens`` into the record's ``n`` and ``k`` unless
        that would pass a limit (``k`` past ``tokens_per_minute`` only once something was
        counted: a request larger than the whole limit still gets a window of its own), and the
        tokens into its ``e`` too (the estimates of calls in flight, which ``records_sync``'s
        adds take off as they are answered); then (whether it was counted, ``n``, ``k``, ``e``)."""
        ...

    async def records_least(self, key: str, tokens: float, until_ms: float,
                            now_ms: float) -> tuple[float, float]:  # fmt: skip
        """Atomically: the record's ``k`` becomes ``tokens`` unless it holds a smaller one still
        in force (its ``u`` after ``now_ms``), and its ``u`` the later of its own and
        ``until_ms``, kept until then; answers the ``k`` and ``u`` kept. Read here and written
        back, two replicas' refusals at the same moment kept the later write's size, the larger
        one as often as not."""
        ...

    async def ledger_admit(self, a: LedgerAdmit) -> tuple[str, float]:
        """Atomically: refuse when a limit would be passed (``"rpm"``, ``"tpm"`` with the minute's
        tokens held by requests in flight, ``"parallel"``, ``"budget<i>"`` with the spend of
        ``a.budgets[i]``), else count the request (its tokens held until settled), take its
        slot and reserve ``a.reserve_usd`` against every budget: ``("ok", 0.0)``."""
        ...

    async def ledger_settle_many(self, settles: Sequence[LedgerSettle]) -> None:
        """For each: give the slot back and turn the reservation into what was spent (one
        round trip for all)."""
        ...

    async def ledger_keep(self, keeps: Sequence[LedgerKeep]) -> None:
        """For each request still running (not settled): its slot, and its reservation on each
        budget, held until ``until_ms``, brought back if they were freed as a dead replica's."""
        ...

    async def ledger_read(self, key: str, minute: int, now_ms: int, budgets: Sequence[str]) -> LedgerState:
        """(requests, tokens) of ``minute``, requests in flight, (spent, reserved) per budget."""
        ...

    async def ledger_read_shared(self, key: str, minute: int, now_ms: int,
                                 budgets: Sequence[str]) -> LedgerState | None:  # fmt: skip
        """``ledger_read`` as every replica counts it, or None while the shared store does not
        answer: never this replica's memory, which holds none of the other replicas' counts nor
        any from before the outage (a spent budget read as unspent). Memory: ``ledger_read``."""
        ...

    def ledger_owed(self, budgets: Sequence[str]) -> list[float]:
        """What this replica spent of each budget that the shared store has yet to add (what it
        admitted and settled in its memory while the store did not answer); 0 for memory."""
        ...

    def ledger_mirrored(self, budgets: Sequence[str]) -> list[tuple[float, float, float] | None]:
        """Each budget as this replica counts it while the shared store does not answer: (spent,
        reserved, when the store last gave them, epoch s), its own spend since included; None
        where the store gave none (memory: always None, it is every count)."""
        ...

    async def answer_put(self, fingerprint: str, blob: bytes, ttl_s: float) -> None: ...

    async def answer_take(self, fingerprint: str) -> tuple[bytes, int] | None:
        """The remembered blob and how many times it has now been taken (1 the first time)."""
        ...

    async def answer_drop(self, fingerprint: str) -> None: ...

    def holds_answers(self) -> bool:
        """False only when certain that no answer is stored (no I/O: a shared store says True)."""
        ...

    async def check(self, timeout_s: float) -> StoreCheck | None:
        """Whether the store answers now (start-up): None if it did, and takes writes."""
        ...

    async def close(self) -> None: ...
