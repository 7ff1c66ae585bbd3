"""server.busy_poll_us: the polling window's rule (haltpoll's, in the process) and the loop
kept polling for that window after activity, then left to sleep."""

from __future__ import annotations

import asyncio

import pytest

from gateway.busy_poll import NO_BUSY_POLL, START_S, BusyPoll, PollWindow, busy_poll

US = 1e-6


@pytest.mark.parametrize(
    ("gaps_us", "windows_us"),
    [
        # Gaps the maximum would have caught grow the window: from the start, doubling, capped.
        ([100, 100, 100, 100, 100], [50, 100, 200, 300, 300]),
        # A gap longer than the maximum halves it; below the start it closes.
        ([100, 100, 100, 1_000, 1_000, 1_000], [50, 100, 200, 100, 50, 0]),
        # Traffic whose events are far apart never opens it.
        ([5_000, 20_000, 1_000_000], [0, 0, 0]),
        # The maximum itself is still worth polling for.
        ([300], [50]),
        ([301], [0]),
    ],
)
def test_the_window_follows_the_gaps_it_missed(gaps_us: list[int], windows_us: list[int]) -> None:
    window = PollWindow(300 * US)
    seen = []
    for gap in gaps_us:
        window.missed(gap * US)
        seen.append(round(window.window_s / US))
    assert seen == windows_us


def test_a_maximum_below_the_start_is_the_only_window() -> None:
    window = PollWindow(20 * US)
    window.missed(10 * US)
    assert window.window_s == pytest.approx(20 * US)
    assert START_S > 20 * US


def test_zero_is_off_and_costs_a_no_op() -> None:
    off = busy_poll(0)
    assert off is NO_BUSY_POLL
    off.touch()  # no running loop needed: nothing is scheduled
    assert off.window_s == 0.0 and off.spins == 0
    assert isinstance(busy_poll(300), BusyPoll)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _turns(n: int) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_loop_polls_until_the_window_after_the_last_touch_has_passed() -> None:
    clock = Clock()
    poll = BusyPoll(300 * US, clock)
    poll.touch()  # the first activity: no gap to learn from yet
    await _turns(3)
    assert poll.spins == 0
    clock.now += 100 * US
    poll.touch()  # 100 µs after the last: the window opens at 50 µs and polling starts
    assert poll.window_s == pytest.approx(50 * US)
    await _turns(5)
    assert poll.spins >= 4  # one callback each turn of the loop, while inside the window
    clock.now += 49 * US
    await _turns(3)
    busy = poll.spins
    assert busy >= 6  # still inside: still polling
    clock.now += 2 * US  # 51 µs after the last touch: the window has passed
    await _turns(5)
    assert poll.spins == busy + 1  # the callback saw it and did not schedule itself again
    clock.now += 10 * US
    poll.touch()  # a touch while not polling, 61 µs after the last one: a gap the window missed
    assert poll.window_s == pytest.approx(100 * US)
    await _turns(3)
    assert poll.spins > busy + 1


async def test_touches_while_polling_keep_one_callback_going() -> None:
    clock = Clock()
    poll = BusyPoll(300 * US, clock)
    poll.touch()
    clock.now += 100 * US
    poll.touch()
    for _ in range(20):
        poll.touch()  # activity inside the window: no second callback, no change of window
        await asyncio.sleep(0)
    assert poll.window_s == pytest.approx(50 * US)
    assert 19 <= poll.spins <= 21
    clock.now += 1.0
    await _turns(3)
    done = poll.spins
    await _turns(10)
    assert poll.spins == done  # a loop with nothing to do sleeps again


async def test_a_real_clock_stops_polling_by_itself() -> None:
    poll = busy_poll(200)
    poll.touch()
    poll.touch()  # two touches microseconds apart: the window opens
    assert poll.window_s > 0
    await asyncio.sleep(0.01)  # the loop sleeps through a timer: polling has stopped by then
    spun = poll.spins
    assert spun > 0
    await asyncio.sleep(0.01)
    assert poll.spins == spun
