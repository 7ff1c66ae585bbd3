"""How late this process's event loop runs what is due: a timer that re-arms itself, and the
most it ran late. A wait on Redis that a busy loop makes long (its answer read late) is the
process's own; one that a loop on time still sees is Redis's (``RedisStore._timed_ping``)."""

from __future__ import annotations

import asyncio


class LoopLag:
    """Started on creation; ``stop()`` when done."""

    def __init__(self, every_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._every_s = every_s
        self._max_s = 0.0
        self._arm()

    def _arm(self) -> None:
        self._due = self._loop.time() + self._every_s
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        self._max_s = max(self._max_s, self._loop.time() - self._due)
        self._arm()

    @property
    def max_s(self) -> float:
        """The most a tick ran late so far, the one due now included: a coroutine resumed in the
        same loop turn as a long stall ends runs before the timers that came due meanwhile, and
        would otherwise take the stall for the time it waited on something else."""
        return max(self._max_s, self._loop.time() - self._due)

    def stop(self) -> None:
        self._handle.cancel()
