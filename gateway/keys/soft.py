"""Soft budgets (``budget.soft_usd``): a warning, never a refusal, once a budget's spend this
period reaches it.

Spend grows at settles, which are written to the state store in batches off the requests' path;
the watch reads the budgets a written batch touched (one read for them all, on a task of its own,
so that no settle waits for it) and, for each found at or past its soft limit, claims the
crossing in the store under the budget's period key: the first replica to claim it reports it,
once per period whichever replica's settle crossed it. A budget known crossed is not read
again this period. While the store does not answer nothing is read: the next settle looks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.keys.registry import KeySpec
from gateway.state.store import StateStore

if TYPE_CHECKING:
    from gateway.keys.ledger import BudgetNow

_CLAIM_KEEP_S = 86_400.0  # a claim outlives its period by this much: a late settle finds it
_SEEN_MAX = 4096  # budgets known crossed, one per budget and period: past periods go


@dataclass(frozen=True, slots=True)
class SoftCrossing:
    """A budget found at or past its soft limit, first in its period: what the log line says
    (names and dollars, never a key)."""

    kind: str  # key | team
    name: str  # the key's or the team's
    key: str  # the key whose settle found it (for a team's: one of its keys)
    team: str | None
    period: str  # day | week | month
    period_name: str  # its start, as the ledger names it (2026-11-28)
    spent_usd: float
    soft_usd: float
    usd: float
    resets_at: float  # epoch seconds


def crossed(spent: float, soft_usd: float | None) -> bool:
    return soft_usd is not None and spent >= soft_usd


@dataclass
class SoftWatch:
    store: StateStore
    wall: Callable[[], float]
    on_crossed: Callable[[SoftCrossing], None] | None = None
    # store key -> the key whose settle touched it and the budget as admitted: written, to be read
    _due: dict[str, tuple[KeySpec, BudgetNow]] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)  # crossed this period (reported here or elsewhere)
    task: asyncio.Task[None] | None = None

    def note(self, key: KeySpec, budgets: Iterable[BudgetNow]) -> None:
        """Budgets a settle just written touched: read them soon."""
        for b in budgets:
            if b.budget.soft_usd is not None and _mark(b) not in self._seen:
                self._due[b.bkey] = (key, b)
        if self._due and (self.task is None or self.task.done()):
            self.task = asyncio.get_running_loop().create_task(self._look())

    async def _look(self) -> None:
        while self._due:
            due, self._due = self._due, {}
            now = self.wall()
            first = next(iter(due.values()))[0].name
            got = await self.store.ledger_read_shared(first, int(now // 60), round(now * 1000), list(due))
            if got is None:
                return  # the store does not answer: the next settle looks again
            *_, spend = got
            for (bkey, (key, b)), (spent, _) in zip(due.items(), spend, strict=True):
                mark = _mark(b)
                if not crossed(spent, b.budget.soft_usd) or mark in self._seen:
                    continue
                if len(self._seen) >= _SEEN_MAX:
                    self._seen.clear()
                self._seen.add(mark)
                won = await self.store.probe_claim(f"soft:{mark}", max(1.0, b.end - now) + _CLAIM_KEEP_S)
                if not getattr(self.store, "healthy", True):
                    # Answered from this replica's memory, not the one claim of every replica
                    # (another would log it again once the store answers): looked at again by
                    # the next settle.
                    self._seen.discard(mark)
                elif won:
                    self._report(key, bkey, b, spent)

    def _report(self, key: KeySpec, bkey: str, b: BudgetNow, spent: float) -> None:
        if self.on_crossed is None:
            return
        team = bkey.startswith("team:")
        self.on_crossed(SoftCrossing(
            kind="team" if team else "key", name=(key.team or "") if team else key.name, key=key.name,
            team=key.team, period=b.budget.period, period_name=bkey.rsplit(":", 1)[1],
            spent_usd=round(spent, 6), soft_usd=b.budget.soft_usd or 0.0, usd=b.budget.usd, resets_at=b.end,
        ))  # fmt: skip


def _mark(b: BudgetNow) -> str:
    """A crossing's claim: the budget's period and its soft limit, so that a reload that moves
    ``soft_usd`` is warned of at the new one (review: raised from $30 to $1,000, the $1,000 was
    crossed in silence, the $30's claim standing for the period)."""
    return f"{b.bkey}@{b.budget.soft_usd:g}"
