"""A gateway key's limits and budgets, counted in the state store: reserve, then settle.

Before a request is sent, one atomic store operation checks every limit the key has and,
when none would be passed, counts the request in its minute, takes a slot among its requests
in flight and *reserves* the request's worst case (its prompt uncached plus every output
token it may ask for, at the model's price) against the key's budget and its team's. After
the answer, the reservation is *settled* to what the provider's usage says was spent. So
concurrent requests at the edge of a budget see each other's reservations: a budget is
refused once spent plus reserved reaches it, and the most it can be overspent is the last
request admitted below it, never one request per replica or per connection.

With Redis the operations are Lua scripts, shared by every replica; in memory, this process.
When Redis does not answer, the store serves the operation from this process's memory, which
counts on from the last counts Redis gave this replica (the limits then hold per replica, each
up to what it last saw left), and adds what it spent to Redis once it answers;
``accounting.when_store_down: closed`` refuses what those counts would admit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from gateway.keys.periods import bounds, iso
from gateway.keys.prices import DEFAULT_SEARCHES, Cost, Price, PriceTable, cost_of, worst_case
from gateway.keys.references import ReferenceTokens
from gateway.keys.registry import Budget, KeySpec
from gateway.keys.soft import SoftCrossing, SoftWatch, crossed
from gateway.state.ledger_ops import LedgerAdmit, LedgerKeep, LedgerSettle
from gateway.state.store import StateStore

# How long a request refused for its key's parallel limit waits for one of this process's
# requests of that key to end first: one that has written its last bytes ends within a few
# event-loop turns, and the client that read them may already be sending the next.
ENDING_S = 0.05
SLOT_TTL_MS = 3_600_000  # a slot a dead replica held is freed after an hour at most
# A live request's slot is kept alive this often (Accounts.keep_alive): a stream that keeps
# sending runs past any deadline, and a slow local model or a 128K-token answer past an hour.
KEEP_EVERY_S = SLOT_TTL_MS / 4000
HELD_RETRY_S = 2.0  # a budget full of in-flight reservations: when to ask again
# The account a request's further holds (``Accounts.hold_again``) are counted under: its minute
# and slots are its own, apart from the key's, whose limits such a hold must not take. (A key's
# name has no ``#``: config.ClientKeyConfig.)
HOLD_SUFFIX = "#again"
_BUDGET_KEEP_S = 7 * 86_400.0  # a finished period's spend stays readable a week


class BudgetNow(NamedTuple):
    """One budget of a key in the period ``now`` falls in: its store key (which names the period)
    and when the period ends."""

    bkey: str
    budget: Budget
    end: float


@dataclass(frozen=True, slots=True)
class LimitHit:
    """Why a key may not send this request now, in words its holder can act on."""

    kind: str  # rpm | tpm | tpm_held | parallel | budget | team_budget | budget_held | store_down
    message: str
    retry_after_s: float | None  # when trying again makes sense (None: not before a reset)
    reset_at_s: float | None  # epoch seconds


@dataclass(slots=True)
class Reservation:
    """What admitting a request took, to be settled when it is done."""

    key: KeySpec
    minute: int
    slot: str
    tokens: int  # the prompt, as admission estimated it
    reserve_usd: float
    budgets: tuple[str, ...]
    price: Price | None
    settled: bool = False
    minute_tokens: int = 0  # what the minute's token count took: the prompt and the output asked for
    # The most output the request named (max_tokens x answers); None when it named none (the
    # provider's own default then, which may be above default_max_tokens).
    output_asked: int | None = None
    expires_ms: int = 0  # when its slot expires unless kept alive
    periods: tuple[BudgetNow, ...] = ()  # its budgets as admitted (a soft limit's settle is read back)

    def charged_periods(self) -> dict[str, str]:
        """The period of each budget it is charged to, by the field that names it (``budget``,
        ``team_budget``): the one it was admitted in, which its end may be past."""
        return {("team_budget" if b.startswith("team:") else "budget"): b.rpartition(":")[2]
                for b in self.budgets}  # fmt: skip


@dataclass
class Readings:
    """The last counts the shared store answered: per key, its minute's (when, minute, requests,
    tokens); per budget of one period (its store key), (when, spent, reserved). Shown, marked
    with their age, while the store does not answer; kept across reloads."""

    minutes: dict[str, tuple[float, int, int, int]] = field(default_factory=dict)
    budgets: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    def remember(self, key: str, now: float, minute: int, requests: int, tokens: int) -> None:
        self.minutes[key] = (now, minute, requests, tokens)  # one per key of the config

    def remember_budgets(self, now: float, spend: Iterable[tuple[str, tuple[float, float]]]) -> None:
        if len(self.budgets) > _READINGS_MAX:  # one per budget and period: past periods go
            self.budgets.clear()
        for bkey, (spent, held) in spend:
            self.budgets[bkey] = (now, spent, held)


@dataclass
class Accounts:
    store: StateStore
    prices: PriceTable
    wall: Callable[[], float]
    default_max_tokens: int = 4096
    reserved_output_max: int | None = None  # accounting.reserved_output_max
    reserved_searches: int = DEFAULT_SEARCHES  # accounting.reserved_searches
    closed_when_store_down: bool = False
    references: ReferenceTokens = field(default_factory=ReferenceTokens)  # attachments not in the bytes
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    _pending: list[LedgerSettle] = field(default_factory=list)
    flusher: asyncio.Task[None] | None = None  # the task that will write the settles waiting
    # (period, time zone) -> (name, end, when worked out): valid from then until its end.
    _periods: dict[tuple[str, str], tuple[str, float, float]] = field(default_factory=dict)
    _prefix: str = field(default_factory=lambda: os.urandom(4).hex())
    _open: dict[str, int] = field(default_factory=dict)  # key -> its reservations made here, unsettled
    _ended: asyncio.Event | None = None  # set when one is settled
    _written: int = 0  # settles written to the store so far
    readings: Readings = field(default_factory=Readings)  # the store's last answers, for its outages
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # the keeper's, between its rounds
    _live: dict[str, Reservation] = field(default_factory=dict)  # slot -> its reservation, unsettled
    keeper: asyncio.Task[None] | None = None  # keeps _live's slots alive while there are any
    on_soft_limit: Callable[[SoftCrossing], None] | None = None  # a budget's soft_usd first reached
    soft: SoftWatch = field(init=False)
    _soft_pending: list[tuple[KeySpec, tuple[BudgetNow, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.soft = SoftWatch(self.store, self.wall, self.on_soft_limit)

    def cost(self, model: str | None, usage: Mapping[str, int]) -> Cost:
        return cost_of(self.prices.price_for(model), usage)

    async def admit(self, key: KeySpec, model: str | None, prompt_tokens: float, max_tokens: int | None,
                    answers: int = 1, hour_cache: bool = False,
                    searches: int = 0) -> Reservation | LimitHit:  # fmt: skip
        """``answers``: how many the request asks for (chat's ``n``), each up to ``max_tokens``;
        ``hour_cache``: it asks for 1-hour cache writes, which its prompt is reserved at;
        ``searches``: the web searches it may be billed (``prices.declared_searches``).
        The minute's tokens take the output asked for too (as OpenAI counts a request against
        its own tokens-per-minute limit), so concurrent requests cannot pass the limit between
        them; the settle puts the minute's count right."""
        now = self.wall()
        minute = int(now // 60)
        price = self.prices.price_for(model)
        budgets = self._budgets(key, now)
        output = (max_tokens or self.default_max_tokens) * max(1, answers)
        if self.reserved_output_max is not None:
            output = min(output, self.reserved_output_max)
        reserve = worst_case(price, prompt_tokens, output, hour_cache, searches) if budgets else 0.0
        minute_tokens = round(prompt_tokens) + (output if key.tokens_per_minute is not None else 0)
        slot = f"{self._prefix}-{next(self._ids)}"
        admit = LedgerAdmit(
            key=key.name, minute=minute, requests_per_minute=key.requests_per_minute,
            tokens_per_minute=key.tokens_per_minute, tokens=minute_tokens, parallel=key.parallel,
            slot=slot, now_ms=round(now * 1000), slot_ttl_ms=SLOT_TTL_MS,
            budgets=tuple((p.bkey, p.budget.usd) for p in budgets), reserve_usd=reserve,
            budget_ttl_s=_BUDGET_KEEP_S + max((p.end for p in budgets), default=now) - now,
        )  # fmt: skip
        written = self._written
        verdict, spent = await self._admitted(admit)
        if verdict not in ("ok", "rpm"):
            # This process's own requests that just ended may still hold their slot, their
            # worst case and the output they asked for: settled, they may leave room. A client
            # sends its next request as soon as it has read the last answer, which may be
            # before the request that wrote it has finished, or its settle been written.
            if verdict == "parallel" and not self._pending and self._open.get(key.name):
                await self._one_ends(ENDING_S)
            await self.flush()
            if self.flusher is not None and not self.flusher.done():
                await asyncio.shield(self.flusher)  # settles it took to write before these
            if self._written != written:
                verdict, spent = await self._admitted(admit)
        held = tuple(p.bkey for p in budgets)
        asked = max_tokens * max(1, answers) if max_tokens else None
        reservation = Reservation(key, minute, slot, round(prompt_tokens), reserve, held, price,
                                  minute_tokens=minute_tokens, output_asked=asked,
                                  expires_ms=admit.now_ms + SLOT_TTL_MS, periods=tuple(budgets))  # fmt: skip
        if verdict == "ok":
            self._open[key.name] = self._open.get(key.name, 0) + 1
            self._live[slot] = reservation
            if self.keeper is None or self.keeper.done():
                self.keeper = asyncio.get_running_loop().create_task(self._keep())
            if self.closed_when_store_down and self._counted_apart(slot):
                await self.settle(reservation, {})  # undo what this replica's memory counted
                return _store_down(now)
            return reservation
        in_flight = 0.0
        if verdict == "tpm":
            # The store answered what requests in flight hold of the minute; the rest was used.
            # (A window a replica of before this count was kept made may read less held than
            # nothing; one settled since the refusal, more than the minute holds now.)
            _, k, *_ = await self.store.ledger_read(key.name, minute, round(now * 1000), [])
            holding = min(max(0, round(spent)), k)
            return _tpm_refusal(key, now, used=k - holding, held=holding, counts=minute_tokens,
                                output=output)  # fmt: skip
        if verdict.startswith("budget"):
            # What requests in flight hold of it (read again: refusals are rare), so that "spent
            # $0.00 of its $1.00" is not all a person is told while reservations fill it.
            index = min(int(verdict.removeprefix("budget") or 0), len(budgets) - 1)
            *_, spend = await self.store.ledger_read(key.name, minute, round(now * 1000), [budgets[index][0]])
            in_flight = spend[0][1] if spend else 0.0
        return _refusal(key, verdict, spent, now, budgets, in_flight)

    async def hold_again(self, r: Reservation, usd: float) -> Reservation | LimitHit | None:
        """``usd`` more held on the budgets ``r`` was admitted against, checked as an admission
        checks them (refused once spent and held reach a budget), for a request about to cost
        more than its worst case: an attempt the provider took and the gateway left (a
        first-byte or first-token timeout) is charged its prompt besides the answer a retry or
        a fallback brings, and retried at a budget's edge that overspent it by a prompt an
        attempt (eight requests at once on a $3,000 budget: $5,298 spent; review). Not a
        request of the key: its minute, ``parallel`` and requests in flight are untouched (the
        hold is counted under an account of its own, ``HOLD_SUFFIX``). Settled with ``r``, at
        no cost. None: nothing to hold (no budget, or nothing to hold)."""
        if not r.periods or usd <= 0:
            return None
        now = self.wall()
        holder = replace(r.key, name=r.key.name + HOLD_SUFFIX)
        budgets = list(r.periods)
        slot = f"{self._prefix}-{next(self._ids)}"
        admit = LedgerAdmit(
            key=holder.name, minute=r.minute, requests_per_minute=None, tokens_per_minute=None, tokens=0,
            parallel=None, slot=slot, now_ms=round(now * 1000), slot_ttl_ms=SLOT_TTL_MS,
            budgets=tuple((p.bkey, p.budget.usd) for p in budgets), reserve_usd=usd,
            budget_ttl_s=_BUDGET_KEEP_S + max(p.end for p in budgets) - now,
        )  # fmt: skip
        written = self._written
        verdict, spent = await self._admitted(admit)
        if verdict != "ok":
            await self.flush()  # this process's own settles may give room back, as at admission
            if self.flusher is not None and not self.flusher.done():
                await asyncio.shield(self.flusher)
            if self._written != written:
                verdict, spent = await self._admitted(admit)
        if verdict == "ok":
            # No soft limit to read back (``periods`` empty): it costs nothing when settled.
            held = Reservation(holder, r.minute, slot, 0, usd, r.budgets, r.price,
                               expires_ms=admit.now_ms + SLOT_TTL_MS)  # fmt: skip
            self._live[slot] = held
            if self.keeper is None or self.keeper.done():
                self.keeper = asyncio.get_running_loop().create_task(self._keep())
            if self.closed_when_store_down and self._counted_apart(slot):
                await self.settle(held, {})
                return _store_down(now)
            return held
        # Only a budget refuses it (no minute or slot is asked for); what requests in flight hold
        # of that budget is read again, as for an admission's refusal.
        index = min(int(verdict.removeprefix("budget") or 0), len(budgets) - 1)
        *_, spend = await self.store.ledger_read(r.key.name, r.minute, round(now * 1000),
                                                 [budgets[index].bkey])  # fmt: skip
        return _refusal(r.key, verdict, spent, now, budgets, spend[0][1] if spend else 0.0)

    async def admit_count(self, key: KeySpec) -> LimitHit | None:
        """A token count (``/v1/messages/count_tokens``, ``/v1/responses/input_tokens``,
        Gemini's ``countTokens``): refused only while the key's requests in flight fill its
        ``parallel``, or a budget of its is spent; None: sent. Nothing is counted in its minute,
        neither a request nor tokens, and nothing is reserved or taken: a count is billed
        nothing, and Anthropic limits it apart from generation, by requests per minute of its
        own ("token counting and message creation have separate and independent rate limits",
        https://platform.claude.com/docs/en/build-with-claude/token-counting). Held like a
        generation, Claude Code's two counts of a 172 KB file before its turn took 2 x (their
        prompt + 4,096) of a 120,000-token minute, and its turn was refused 429 for 70 s
        (audit). A read, not an admit: a count takes no slot, so it never refuses the
        generation that follows it."""
        budgets = self._budgets(key, self.wall())
        if self.closed_when_store_down and not getattr(self.store, "healthy", True):
            return _store_down(self.wall())  # refused with the key's other requests
        if key.parallel is None and not budgets:
            return None
        hit = await self._count_hit(key, budgets)
        if self.closed_when_store_down and not getattr(self.store, "healthy", True):
            # Read from this replica's memory: what another replica spent or holds is not in it.
            return _store_down(self.wall())
        if hit is not None and hit.kind == "parallel" and (self._pending or self._open.get(key.name)):
            # One of this process's requests that just ended may still hold its slot (as admit
            # waits for them).
            if not self._pending:
                await self._one_ends(ENDING_S)
            await self.flush()
            hit = await self._count_hit(key, budgets)
        return hit

    async def _count_hit(self, key: KeySpec, budgets: list[BudgetNow]) -> LimitHit | None:
        now = self.wall()
        *_, in_flight, spend = await self.store.ledger_read(key.name, int(now // 60), round(now * 1000),
                                                            [b.bkey for b in budgets])  # fmt: skip
        if key.parallel is not None and in_flight >= key.parallel:
            return _refusal(key, "parallel", 0.0, now, budgets)
        for i, (b, (spent, _)) in enumerate(zip(budgets, spend, strict=True)):
            if spent >= b.budget.usd:  # spent, not held: a count holds nothing of it
                return _refusal(key, f"budget{i}", spent, now, budgets)
        return None

    def _counted_apart(self, slot: str) -> bool:
        """Whether this admission was counted in this replica's memory instead of the shared
        store: the store is down, or this one operation timed out on a store that is not."""
        if not getattr(self.store, "healthy", True):
            return True
        admitted_here = getattr(self.store, "admitted_here", None)
        return admitted_here is not None and admitted_here(slot)

    async def _admitted(self, admit: LedgerAdmit) -> tuple[str, float]:
        """The store's verdict. A request cancelled while it waits (its client left: the server
        cancels the handler) would leave what the store admitted held, a slot for an hour and
        the reservation for the period, since nothing would settle it: the admit runs on,
        shielded, and once it answers, what it took is given back."""
        running = asyncio.ensure_future(self.store.ledger_admit(admit))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            running.add_done_callback(lambda done: self._undo(done, admit))
            raise

    def _undo(self, done: asyncio.Future[tuple[str, float]], admit: LedgerAdmit) -> None:
        if done.cancelled() or done.exception() is not None or done.result()[0] != "ok":
            return
        self._pending.append(LedgerSettle(
            key=admit.key, minute=admit.minute, token_delta=-admit.tokens, slot=admit.slot,
            budgets=tuple(b for b, _ in admit.budgets), reserve_usd=admit.reserve_usd, cost_usd=0.0,
            budget_ttl_s=_BUDGET_KEEP_S + 32 * 86_400.0, held_tokens=admit.tokens,
        ))  # fmt: skip
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.get_running_loop().create_task(self.flush())

    async def _one_ends(self, within_s: float) -> None:
        """Until one of this process's requests is settled, for ``within_s`` at most."""
        if self._ended is None:
            self._ended = asyncio.Event()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                await self._ended.wait()

    def has_pending(self) -> bool:
        """Whether settles wait to be written (``flush``)."""
        return bool(self._pending)

    async def settle(self, r: Reservation, usage: Mapping[str, int]) -> Cost:
        """Once per reservation: the slot back, the spend as the usage says, now."""
        cost = self.settle_later(r, usage)
        await self.flush()
        return cost

    def settle_later(self, r: Reservation, usage: Mapping[str, int], cost: Cost | None = None) -> Cost:
        """``settle``, written with the other settles of the next few milliseconds in one round
        trip (a request's answer is out by then: nothing waits for it but ``flush``). ``cost``:
        the usage's at the served models' prices (each leg of a continued answer at its own),
        where the reservation's (the route's dearest) is not it."""
        cost = cost_of(r.price, usage) if cost is None else cost
        if r.settled:
            return cost
        r.settled = True
        self._live.pop(r.slot, None)
        if any(p.budget.soft_usd is not None for p in r.periods):
            self._soft_pending.append((r.key, r.periods))
        left = self._open.get(r.key.name, 0) - 1
        if left > 0:
            self._open[r.key.name] = left
        else:
            self._open.pop(r.key.name, None)
        if self._ended is not None:
            self._ended.set()
            self._ended = None
        used = usage.get("prompt", 0) + usage.get("completion", 0)
        # What the request used (its prompt estimate when nothing says): the minute takes that
        # in place of what admission counted.
        self._pending.append(LedgerSettle(
            key=r.key.name, minute=r.minute, token_delta=(used or r.tokens) - r.minute_tokens, slot=r.slot,
            budgets=r.budgets, reserve_usd=r.reserve_usd, cost_usd=cost.usd,
            budget_ttl_s=_BUDGET_KEEP_S + 32 * 86_400.0, held_tokens=r.minute_tokens,
        ))  # fmt: skip
        return cost

    async def keep_alive(self) -> None:
        """Every request in flight whose slot would expire within half its TTL kept alive for
        another TTL: one that outlived its slot stopped counting toward ``parallel`` on every
        replica, and its reservation was given back as a dead replica's."""
        now_ms = round(self.wall() * 1000)
        for slot in [slot for slot, r in self._live.items() if r.settled]:  # (settled by another's hand)
            del self._live[slot]
        due = [r for r in self._live.values() if r.expires_ms - now_ms <= SLOT_TTL_MS // 2]
        if not due:
            return
        until = now_ms + SLOT_TTL_MS
        for r in due:
            r.expires_ms = until
        await self.store.ledger_keep([
            LedgerKeep(key=r.key.name, minute=r.minute, slot=r.slot, budgets=r.budgets,
                       reserve_usd=r.reserve_usd, until_ms=until, slot_ttl_ms=SLOT_TTL_MS)
            for r in due
        ])  # fmt: skip

    async def _keep(self) -> None:
        """The keeper: started by an admit, it ends after its first round with nothing in flight
        (one task for every request of the process, not one each)."""
        while self._live:
            await self.sleep(KEEP_EVERY_S)
            await self.keep_alive()

    async def flush(self, final: bool = False) -> None:
        """Write every settle waiting (one store round trip); shutdown calls it last, ``final``:
        then also what the store could not write before (a Redis that did not answer)."""
        while self._pending:
            batch, self._pending = self._pending, []
            softs, self._soft_pending = self._soft_pending, []
            await self.store.ledger_settle_many(batch)
            self._written += len(batch)
            for key, periods in softs if not final else ():  # written: what they spent can be read back
                self.soft.note(key, periods)  # (not at shutdown: nothing would wait for the read)
        if final:
            await self.store.ledger_settle_many([])

    async def state_of(self, key: KeySpec) -> dict[str, Any]:
        """What ``GET /v1/gateway/key`` answers: the key's limits and where it stands."""
        head: dict[str, Any] = {
            "name": key.name, "team": key.team, "models": list(key.models),
            "limits": {"requests_per_minute": key.requests_per_minute,
                       "tokens_per_minute": key.tokens_per_minute, "parallel": key.parallel},
            "counted": key.limited,
        }  # fmt: skip
        if key.expires_at is not None:
            head["expires_at"] = iso(key.expires_at)
        if key.disabled is not None:
            head["disabled"] = key.disabled  # "key", "team", "issuer", "team_removed"
        if not key.limited:
            # Nothing to hold it to, so nothing is counted here (its spend is in the metrics
            # and log lines): zeros would read as "unused".
            return head
        now = self.wall()
        minute = int(now // 60)
        budgets = self._budgets(key, now)
        bkeys = [p.bkey for p in budgets]
        got = await self.store.ledger_read_shared(key.name, minute, round(now * 1000), bkeys)
        if got is None:
            return self._unread(head, key, now, minute, budgets)
        n, k, in_flight, spend = got
        self.readings.remember(key.name, now, minute, n, k)
        self.readings.remember_budgets(now, zip(bkeys, spend, strict=True))
        out: dict[str, Any] = {
            **head,
            "as_of": iso(now),
            "this_minute": {"requests": n, "tokens": k, "resets_at": iso((minute + 1) * 60)},
            "in_flight": in_flight,
        }  # fmt: skip
        for p, (spent, held) in zip(budgets, spend, strict=True):
            field_name = "team_budget" if p.bkey.startswith("team:") else "budget"
            out[field_name] = _budget_state(p, spent, held)
        return out

    def _unread(self, head: dict[str, Any], key: KeySpec, now: float, minute: int,
                budgets: list[BudgetNow]) -> dict[str, Any]:  # fmt: skip
        """``state_of`` while the shared store does not answer: what it last answered (this
        minute's counts, this period's spend), each marked with when it was read and how long
        ago; nothing when it answered none; a budget's spend with what this replica spent since
        and owes it, or as its admissions count on from the store's last answer to one, when
        that is newer. Never this replica's memory alone, which counts only what it served
        since: a spent budget read $0 spent and all of it left there."""
        if self.closed_when_store_down:
            requests = ("refused (503 accounting_unavailable) until it answers, or as over a limit or "
                        "budget where the last counts it gave this replica already are: no request of "
                        "this key is sent on counts the gateway cannot check")  # fmt: skip
        else:
            requests = ("served, counted in this replica's memory only until it answers "
                        "(accounting.when_store_down: open), on from the last counts it gave this "
                        "replica: other replicas' spend meanwhile is not counted against it "
                        "here")  # fmt: skip
        out: dict[str, Any] = {
            **head,
            "as_of": None,
            "state_unavailable": {
                "message": "the gateway's state store does not answer, so where this key stands now is "
                           "not known; figures below are its last reading (as_of, age_s): spent_usd at "
                           "least that much, left_usd at most that; null where none was read this minute "
                           "or period",
                "requests": requests,
            },
            "this_minute": None,
            "in_flight": None,  # every replica's requests in flight: a stale count says nothing
        }  # fmt: skip
        seen = self.readings.minutes.get(key.name)
        if seen is not None and seen[1] == minute:
            at, _, n, k = seen
            out["this_minute"] = {"requests": n, "tokens": k, "resets_at": iso((minute + 1) * 60),
                                  **_aged(at, now)}  # fmt: skip
        # What this replica spent since in its memory, as its own refusals count it: a key read
        # "spent $0.54, left $0.46" while its requests were refused for "spent $1.08 of $1.00".
        bkeys = [p.bkey for p in budgets]
        owed, mirrored = self.store.ledger_owed(bkeys), self.store.ledger_mirrored(bkeys)
        for p, mine, mirror in zip(budgets, owed, mirrored, strict=True):
            field_name = "team_budget" if p.bkey.startswith("team:") else "budget"
            read = self.readings.budgets.get(p.bkey)  # of this period: the store key names it
            if mirror is not None and (read is None or mirror[2] > read[0] + 0.001):
                # Newer than any read of it here (an admit of this key or a teammate since):
                # what the admits count on from, its own spend since in it. Read null while
                # this replica refused or served by it (audit).
                spent, held, at = mirror
                out[field_name] = {**_budget_state(p, spent, held), **_aged(at, now)}
            elif read is None:
                out[field_name] = {**_budget_state(p, None, None), "as_of": None, "age_s": None}
            else:
                at, spent, held = read
                out[field_name] = {**_budget_state(p, spent + mine, held), **_aged(at, now)}
        return out

    async def budget_readings(
        self, keys: Iterable[KeySpec]
    ) -> list[tuple[str, str, str, float, float, float, float]] | None:
        """Every budget of ``keys`` and of their teams, each once, as the state store has it:
        (kind, name, period, usd, spent, reserved, period end). One read for them all (the
        ledger read of the first key, which takes any budgets). None: the shared store did not
        answer (this replica's memory holds none of the other replicas' spend)."""
        now = self.wall()
        found: dict[str, tuple[str, str, str, float, float]] = {}  # store key -> kind, name, period, usd, end
        first: str | None = None
        for key in keys:
            for p in self._budgets(key, now):
                if p.bkey not in found:
                    team = p.bkey.startswith("team:")
                    owner = (key.team or "") if team else key.name
                    found[p.bkey] = ("team" if team else "key", owner, p.budget.period, p.budget.usd, p.end)
                    first = first or key.name
        if first is None:
            return []
        got = await self.store.ledger_read_shared(first, int(now // 60), round(now * 1000), list(found))
        if got is None:
            return None
        *_, spend = got
        self.readings.remember_budgets(now, zip(found, spend, strict=True))
        return [(kind, name, period, usd, round(spent, 6), round(held, 6), end)
                for (kind, name, period, usd, end), (spent, held)
                in zip(found.values(), spend, strict=True)]  # fmt: skip

    def _period(self, period: str, tz: str, now: float) -> tuple[str, float]:
        """The current period's name and end in zone ``tz``, worked out again only once it has ended."""
        known = self._periods.get((period, tz))
        if known is None or not known[2] <= now < known[1]:
            name, end = bounds(period, now, tz)  # type: ignore[arg-type]
            known = self._periods[(period, tz)] = (name, end, now)
        return known[0], known[1]

    def _budgets(self, key: KeySpec, now: float) -> list[BudgetNow]:
        """The key's budget, then its team's, in the periods ``now`` falls in."""
        out: list[BudgetNow] = []
        for owner, budget in ((f"key:{key.name}", key.budget), (f"team:{key.team}", key.team_budget)):
            if budget is not None:
                name, end = self._period(budget.period, budget.timezone, now)
                # A zone's periods are counted apart from UTC's (and another zone's): named by
                # their local start, Los Angeles's day read the UTC day that had ended as its
                # own, spent, after a reload moved the zone (review), and Tokyo's the next one,
                # unspent.
                zone = "" if budget.timezone == "UTC" else f"@{budget.timezone}"
                out.append(BudgetNow(f"{owner}{zone}:{name}", budget, end))
        return out


def _budget_state(p: BudgetNow, spent: float | None, held: float | None) -> dict[str, Any]:
    """A budget as the key view shows it; ``spent`` and ``held`` None: not known (shown null)."""
    b = p.budget
    out: dict[str, Any] = {"usd": b.usd, "period": b.period}
    if b.timezone != "UTC":
        out["timezone"] = b.timezone
    if b.soft_usd is not None:
        out["soft_usd"] = b.soft_usd
        out["soft_limit_crossed"] = None if spent is None else crossed(spent, b.soft_usd)
    out.update({
        "spent_usd": round(spent, 6) if spent is not None else None,
        "reserved_usd": round(held, 6) if held is not None else None,
        # What a new request may still take: in-flight requests hold theirs.
        "left_usd": None if spent is None or held is None else round(max(0.0, b.usd - spent - held), 6),
        "resets_at": iso(p.end),
    })  # fmt: skip
    return out


def _aged(at: float, now: float) -> dict[str, Any]:
    return {"as_of": iso(at), "age_s": round(max(0.0, now - at), 1)}


_READINGS_MAX = 4096
_PERIOD_WORD = {"day": "daily", "week": "weekly", "month": "monthly"}


def usd(amount: float) -> str:
    """Dollars as a person reads them: cents, and below a cent the digits that show it (an
    agent's budget of $0.005 read "spent $0.00 of its $0.00"), up to a millionth."""
    if amount == 0 or abs(amount) >= 0.01:
        return f"${amount:,.2f}"
    shown = f"{amount:.6f}".rstrip("0")
    return "$" + (shown if len(shown.split(".")[1]) >= 2 else f"{amount:.2f}")


def _tpm_refusal(key: KeySpec, now: float, used: int, held: int, counts: int, output: int) -> LimitHit:
    """The minute's tokens are counted at admission as each request's prompt and all the
    output it asks for, and settled to what it used when it ends. A minute refused only for
    what requests in flight hold has room again when one ends: "try again" then, in 2 s, as a
    spent budget held by requests in flight is (waiting out the minute cost an agent 31 s per
    refusal). The figures are the real ones, as OpenAI's own message gives them ("Limit 30000,
    Used 29937, Requested 385", https://github.com/BuilderIO/micro-agent/issues/86)."""
    limit = key.tokens_per_minute or 0
    minute_end = (int(now // 60) + 1) * 60
    resets = f"the minute resets at {iso(minute_end)}"
    asks = f"its prompt and the {output} output tokens it asks for"
    if counts > limit:
        # Admitted only as a minute's first (docs/keys.md: a minute is overspent by at most the
        # request that opens it); nothing in flight ending makes room for it.
        return LimitHit("tpm", f"key '{key.name}' may use {limit} tokens a minute and this request alone "
                        f"counts {counts} ({asks}), so it is sent only as a minute's first request; "
                        f"{resets} (a lower max_tokens, or accounting.reserved_output_max on the gateway, "
                        "lets it share a minute)", minute_end - now, minute_end)  # fmt: skip
    if held > 0 and used + counts <= limit:
        return LimitHit("tpm_held", f"key '{key.name}' used {used} of its {limit} tokens of this minute, and "
                        f"requests in flight hold {held} of them until they end (this request counts "
                        f"{counts}: {asks}); try again when one has ended",
                        HELD_RETRY_S, now + HELD_RETRY_S)  # fmt: skip
    also = f", and requests in flight hold {held} more" if held > 0 else ""
    return LimitHit("tpm", f"key '{key.name}' used {used} of its {limit} tokens of this minute{also} (this "
                    f"request counts {counts}: {asks}); {resets}", minute_end - now, minute_end)  # fmt: skip


def _store_down(now: float) -> LimitHit:
    return LimitHit("store_down", "the gateway cannot check this key's limits and budget now "
                    "(its state store is down); try again shortly", 5.0, now + 5)  # fmt: skip


def _refusal(key: KeySpec, verdict: str, spent: float, now: float,
             budgets: list[BudgetNow], in_flight: float = 0.0) -> LimitHit:  # fmt: skip
    minute_end = (int(now // 60) + 1) * 60
    if verdict == "rpm":
        message = (f"key '{key.name}' sent its {key.requests_per_minute} requests of this minute; "
                   f"the minute resets at {iso(minute_end)}")  # fmt: skip
        return LimitHit("rpm", message, minute_end - now, minute_end)
    if verdict == "parallel":
        return LimitHit("parallel", f"key '{key.name}' has its {key.parallel} requests in flight at once; "
                       "try again when one has finished", 1.0, now + 1)  # fmt: skip
    index = int(verdict.removeprefix("budget")) if verdict.startswith("budget") else 0
    bkey, b, end = budgets[min(index, len(budgets) - 1)]
    limit, period = b.usd, b.period
    team = bkey.startswith("team:")
    who = f"team '{key.team}'" if team else f"key '{key.name}'"
    budget = f"its {usd(limit)} {_PERIOD_WORD[period]} budget"
    if spent < limit:
        # Not spent: held by requests in flight at what they may cost at most, settled (and the
        # rest given back) as they end. Worth trying again shortly, not a reason to stop.
        return LimitHit("budget_held", f"{who} spent {usd(spent)} of {budget}, and requests in flight "
                        f"hold {usd(in_flight)} of it until they end; try again when one has ended",
                        HELD_RETRY_S, now + HELD_RETRY_S)  # fmt: skip
    return LimitHit("team_budget" if team else "budget",
                   f"{who} spent {usd(spent)} of {budget}; resets {iso(end)}", None, end)  # fmt: skip

