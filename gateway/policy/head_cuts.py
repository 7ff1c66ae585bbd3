"""A short memory of head cuts: an upstream that sent no head within the share of a client's
head time the gateway gave it, before a fallback (``RetryPlan.head_share_s``).

Gemini CLI waits 60 s for a response head, so its request gives an upstream with a fallback
after it half of what is left of 57 s. Such a cut is no evidence against the upstream (a
healthy model that takes 35 s to its first token is cut too, and counted it opened its
circuit for every client: pipeline/send.py), so the circuit never heard of a hung primary
and each CLI request paid 28.5 s for it, forever (audit: 9 in a row, 28.50-28.55 s each).

This memory is read only by requests whose own head time is that short: while it holds for
(upstream, model), they go to the fallback at once; the circuit and every client that waits
longer are left as they were, so a slow model still answers those.

Rules:

* A cut holds for ``HOLD_S`` (60 s, Gemini CLI's own head timeout: about one prompt's routing
  call, answer and first tool turns). A cut again by the first request sent after the hold
  (nothing in between answered in time) doubles the hold, up to ``MAX_HOLD_S``: a hung
  upstream then costs one such request 28.5 s per 10 minutes, not one a minute.
* An answer from the upstream begun within the share the cut had (any client's) clears it:
  the upstream answers in time again. A slower answer (a patient client's, from a model slower
  than the share) does not: a short-budget request would be cut all the same.
* An entry is forgotten once its hold has ended and the time in which a cut again would double
  it (another ``MAX_HOLD_S``) is over too: it can neither hold nor double any more, and while
  anything is remembered every attempt on every upstream is timed (pipeline/attempt.py).
* Per replica, in memory: the state store's shared notes keep an instant and cannot be
  cleared early, and each replica learns on its own first cut (one cut each per hold).

Pure: the clock is passed in; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

HOLD_S = 60.0
MAX_HOLD_S = 600.0
# Client-named models make the keys: the memory is bounded, the stalest entries go first.
MAX_ENTRIES = 1024


@dataclass(slots=True)
class _Cut:
    until: float  # monotonic: short-budget requests skip the upstream until then
    hold_s: float  # the hold last set, doubled by a cut again after it
    share_s: float  # the share the cut had: an answer begun within it clears the memory


class HeadCuts:
    """Head cuts per key (``circuit_key(upstream, model)``)."""

    def __init__(self, now: Callable[[], float], hold_s: float = HOLD_S, max_hold_s: float = MAX_HOLD_S,
                 max_entries: int = MAX_ENTRIES) -> None:  # fmt: skip
        self._now, self._hold_s, self._max_hold_s, self._max = now, hold_s, max_hold_s, max_entries
        self._cuts: dict[str, _Cut] = {}

    def __bool__(self) -> bool:
        """Whether any hold is live or can still double: the hot path reads only this."""
        return bool(self._cuts)

    def _spent(self, cut: _Cut, now: float) -> bool:
        # Past the window in which a cut again doubles the hold: the entry is no memory at all.
        return now - cut.until > self._max_hold_s

    def _forget_spent(self, now: float) -> None:
        """Entries spent, from the least recently cut: entries are kept in the order of their
        last cut, so the first one not spent ends the sweep (one lookup, mostly); one spent
        behind it goes on a later call, and an idle memory empties on the first call after
        its last entry is spent."""
        while self._cuts:
            key = next(iter(self._cuts))
            if not self._spent(self._cuts[key], now):
                return
            del self._cuts[key]

    def cut(self, key: str, share_s: float) -> float:
        """Notes a cut at ``share_s``; the hold it starts, in seconds."""
        now = self._now()
        self._forget_spent(now)
        was = self._cuts.pop(key, None)
        # A cut again once the last hold ended (within another max hold of its end: nothing
        # answered in time meanwhile, or it would have been cleared) is the same silence.
        again = was is not None and now - was.until <= self._max_hold_s
        hold = min(self._max_hold_s, was.hold_s * 2) if again and was is not None else self._hold_s
        if was is not None and now < was.until:
            hold = was.hold_s  # a request already under way when the hold began: no doubling
        self._cuts[key] = _Cut(now + hold, hold, share_s)
        if len(self._cuts) > self._max:
            del self._cuts[next(iter(self._cuts))]  # the least recently cut
        return hold

    def holds(self, key: str) -> float | None:
        """Seconds left of the hold on ``key``; None: a short-budget request may try it."""
        now = self._now()
        self._forget_spent(now)
        cut = self._cuts.get(key)
        if cut is None:
            return None
        if self._spent(cut, now):
            del self._cuts[key]
            return None
        left = cut.until - now
        return left if left > 0 else None

    def answered(self, key: str, took_s: float) -> bool:
        """An answer from ``key`` begun ``took_s`` after it was asked: whether it cleared a cut
        (it came within the cut's share)."""
        self._forget_spent(self._now())
        cut = self._cuts.get(key)
        if cut is None or took_s > cut.share_s:
            return False
        del self._cuts[key]
        return True
