"""Deadlines for upstream exchanges: one per exchange, and one loop timer for all of a loop's."""

from __future__ import annotations

import asyncio
import math
import weakref
from collections.abc import Awaitable
from typing import TypeVar

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure

T = TypeVar("T")


class SharedTimer:
    """One loop timer, set for the earliest armed deadline of its loop.

    A loop timer per exchange cost 4–5 µs a request in place on uvloop (a libuv timer made,
    started, stopped and closed each time: issue #38). Exchanges mostly share a timeout, so a
    new deadline is later than one already pending and needs no timer of its own: it joins
    the armed set. When the timer fires it expires what is due and sets itself for the
    earliest of the rest; deadlines closed or disarmed meanwhile leave the set then, or at
    their ``close``. So a timer is made only when a deadline earlier than every pending one
    is armed, and once per firing.
    """

    __slots__ = ("_armed", "_handle", "_loop", "_when")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._armed: set[Deadline] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf

    def track(self, deadline: Deadline, at: float) -> None:
        self._armed.add(deadline)
        if at < self._when:
            if self._handle is not None:
                self._handle.cancel()
            self._when = at
            self._handle = self._loop.call_at(at, self._fire)

    def forget(self, deadline: Deadline) -> None:
        self._armed.discard(deadline)

    @property
    def pending_at(self) -> float | None:
        """When the loop timer fires next (None: none set)."""
        return None if self._handle is None else self._when

    def _fire(self) -> None:
        self._handle, self._when = None, math.inf
        now = self._loop.time()
        earliest = math.inf
        for deadline in list(self._armed):
            at = deadline._at
            if at is None:
                self._armed.discard(deadline)  # disarmed since: nothing to watch
            elif at <= now:
                self._armed.discard(deadline)
                deadline._expire()
            elif at < earliest:
                earliest = at
        if earliest < math.inf:
            self._when = earliest
            self._handle = self._loop.call_at(earliest, self._fire)


_TIMERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedTimer] = weakref.WeakKeyDictionary()


def shared_timer(loop: asyncio.AbstractEventLoop) -> SharedTimer:
    """The loop's one timer for deadlines (made on first use, gone with the loop)."""
    timer = _TIMERS.get(loop)
    if timer is None:
        timer = _TIMERS[loop] = SharedTimer(loop)
    return timer


class Deadline:
    """A deadline for a whole upstream exchange, in place of an ``asyncio.timeout`` scope
    per await (each of those schedules and cancels its own timer).

    ``arm(s)`` sets the deadline ``s`` from now; the loop's :class:`SharedTimer` watches it,
    so arming costs a clock read and a set insertion unless it is the earliest deadline
    pending. Re-arming per chunk is as cheap, and waits that never suspend cost nothing. When
    it expires while armed it cancels the task, and :meth:`expired` turns that cancellation
    into a timeout, exactly as ``asyncio.timeout`` does (a cancellation from elsewhere stays
    one).
    """

    __slots__ = ("_at", "_cancelling", "_fired", "_loop", "_task", "_timer")

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, timer: SharedTimer | None = None
    ) -> None:
        # The sender passes its loop and timer: asyncio.get_running_loop() costs a getpid(2)
        # in 3.11, the timer's lookup a weak mapping's.
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._timer = timer if timer is not None else shared_timer(self._loop)
        self._task: asyncio.Task[object] | None = None
        self._at: float | None = None
        self._fired = False
        self._cancelling = 0

    def arm(self, seconds: float) -> None:
        at = self._loop.time() + seconds
        self._at = at
        self._task = task = asyncio.current_task(self._loop)
        self._cancelling = task.cancelling() if task is not None else 0
        self._timer.track(self, at)

    def disarm(self) -> None:
        self._at = None  # the timer drops it when it next fires

    def _expire(self) -> None:
        self._at = None
        if self._task is not None:
            self._fired = True
            self._task.cancel()

    def expired(self) -> bool:
        """Called on CancelledError: was it ours? Then the task is uncancelled."""
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._at = None
        self._timer.forget(self)

    async def within(self, seconds: float, waiting: Awaitable[T], kind: TransportError, detail: str) -> T:
        """``waiting``, given ``seconds`` from now; past them an UpstreamFailure of ``kind``."""
        self.arm(seconds)
        try:
            return await waiting
        except asyncio.CancelledError:
            if self.expired():
                raise UpstreamFailure(kind, detail) from None
            raise
        finally:
            self.disarm()
