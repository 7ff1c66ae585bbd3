"""One timer for a whole upstream exchange, shared by the senders."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure

T = TypeVar("T")


class Deadline:
    """One timer for a whole upstream exchange, in place of an ``asyncio.timeout`` scope
    per await (each of those schedules and cancels its own timer).

    ``arm(s)`` sets the deadline ``s`` from now. The timer is only rescheduled when the new
    deadline is earlier than the one pending; a later one is picked up lazily when the
    pending timer fires and finds it has not expired yet. So re-arming per chunk costs
    a clock read, and waits that never suspend cost nothing. When it expires while armed
    it cancels the task, and :meth:`expired` turns that cancellation into a timeout,
    exactly as ``asyncio.timeout`` does (a cancellation from elsewhere stays one).
    """

    __slots__ = ("_at", "_cancelling", "_fired", "_handle", "_loop", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # The sender passes its loop: asyncio.get_running_loop() costs a getpid(2) in 3.11.
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None
        self._fired = False
        self._cancelling = 0

    def arm(self, seconds: float) -> None:
        at = self._loop.time() + seconds
        self._at = at
        self._task = task = asyncio.current_task(self._loop)
        self._cancelling = task.cancelling() if task is not None else 0
        handle = self._handle
        if handle is None or handle.when() > at:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(at, self._check)

    def disarm(self) -> None:
        self._at = None  # the pending timer, if any, finds nothing to do

    def _check(self) -> None:
        self._handle = None
        at = self._at
        if at is None or self._task is None:
            return
        if self._loop.time() >= at:
            self._at = None
            self._fired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(at, self._check)

    def expired(self) -> bool:
        """Called on CancelledError: was it ours? Then the task is uncancelled."""
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._at = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

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
