"""Busy polling: after activity, the event loop keeps polling for a short window instead of
sleeping (``server.busy_poll_us``; off by default).

Why: at low concurrency most of a request's added latency on a virtual machine is the core
waking up. Between a request's arrival, its upstream's answer and the client's next request the
loop sleeps in ``epoll_wait``; the vCPU halts, and the next event pays the wake-up and runs on
cold caches. On the 2-core VM of ``bench/RESULTS.md`` a loop that kept polling answered wrk
``-c1`` in a quarter less time. Linux does the same below a guest (the ``haltpoll`` cpuidle
governor polls up to 200 µs by default before halting) where the host allows it; this does it
in the process, where it is not. The price is CPU: the window's polling counts as the
process's own time (and against a container's CPU quota), which is why it is off unless asked.

How: a ``touch`` marks activity (the pipeline calls it when a request starts, when its
upstream call is sent and answered, and when it ends). While less than the window has passed since
the last touch, one callback keeps re-scheduling itself with ``call_soon``, and a loop with a
ready callback polls with a zero timeout instead of sleeping. The window adapts like
haltpoll's: a gap between touches that the window missed but the maximum would have caught
doubles it (from 50 µs); a gap longer than the maximum halves it, down to nothing, so traffic
whose events are milliseconds apart (an LLM's stream) soon stops paying for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# The first window once gaps show polling would pay (haltpoll's guest_halt_poll_grow_start).
START_S = 50e-6


class PollWindow:
    """How long to keep polling after activity: pure policy, fed the gaps polling missed."""

    __slots__ = ("max_s", "start_s", "window_s")

    def __init__(self, max_s: float, start_s: float = START_S) -> None:
        self.max_s = max_s
        self.start_s = min(start_s, max_s)
        self.window_s = 0.0

    def missed(self, gap_s: float) -> None:
        """An event came ``gap_s`` after the last one, when polling had already stopped."""
        if gap_s <= self.max_s:
            self.window_s = min(self.max_s, max(self.start_s, self.window_s * 2))
        else:
            half = self.window_s / 2
            self.window_s = half if half >= self.start_s else 0.0


class BusyPoll:
    """Keeps ``loop`` polling for ``window.window_s`` after each :meth:`touch`."""

    __slots__ = ("_clock", "_last", "_loop", "_polling", "_window", "spins")

    def __init__(self, max_s: float, clock: Callable[[], float] = time.perf_counter) -> None:
        self._window = PollWindow(max_s)
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last = float("-inf")
        self._polling = False
        self.spins = 0  # callbacks run while polling: what the window cost, for tests and bench

    @property
    def window_s(self) -> float:
        return self._window.window_s

    def touch(self) -> None:
        """Activity now (inside the running loop)."""
        now = self._clock()
        if not self._polling:
            self._window.missed(now - self._last)
            if self._window.window_s > 0.0:
                self._polling = True
                loop = self._loop
                if loop is None:
                    loop = self._loop = asyncio.get_running_loop()
                loop.call_soon(self._poll)
        self._last = now

    def _poll(self) -> None:
        self.spins += 1
        if self._clock() - self._last < self._window.window_s:
            self._loop.call_soon(self._poll)  # type: ignore[union-attr]  # set before the first call
        else:
            self._polling = False


class NoBusyPoll:
    """``server.busy_poll_us: 0``: the loop sleeps whenever it has nothing to do."""

    __slots__ = ()
    window_s = 0.0
    spins = 0

    def touch(self) -> None:
        return None


NO_BUSY_POLL = NoBusyPoll()


def busy_poll(max_us: int) -> BusyPoll | NoBusyPoll:
    """``server.busy_poll_us``'s polling, on the real clock (it times the loop itself)."""
    return BusyPoll(max_us / 1e6) if max_us > 0 else NO_BUSY_POLL
