"""The memory of head cuts (policy/head_cuts.py): how long a cut holds, what doubles it, what
clears it. The clock is a list the tests move."""

from __future__ import annotations

import pytest

from gateway.policy.head_cuts import HOLD_S, MAX_HOLD_S, HeadCuts

KEY = "hung|gemini-2.5-flash"


def _cuts() -> tuple[HeadCuts, list[float]]:
    clock = [1000.0]
    return HeadCuts(lambda: clock[0]), clock


def test_nothing_remembered_holds_nothing() -> None:
    cuts, _ = _cuts()
    assert not cuts
    assert cuts.holds(KEY) is None
    assert cuts.answered(KEY, 1.0) is False


def test_a_cut_holds_its_upstream_and_model_for_a_minute() -> None:
    cuts, clock = _cuts()
    assert cuts.cut(KEY, 28.5) == HOLD_S == 60.0
    assert cuts
    assert cuts.holds(KEY) == pytest.approx(60.0)
    assert cuts.holds("hung|gemini-2.5-flash-lite") is None  # per model: the routing call's is its own
    assert cuts.holds("backup|gemini-2.5-flash") is None
    clock[0] += 59.0
    assert cuts.holds(KEY) == pytest.approx(1.0)
    clock[0] += 1.0
    assert cuts.holds(KEY) is None  # the next short-budget request tries it again


def test_a_cut_again_after_the_hold_doubles_it_up_to_ten_minutes() -> None:
    cuts, clock = _cuts()
    holds = []
    for _ in range(6):
        holds.append(cuts.cut(KEY, 28.5))
        clock[0] += holds[-1] + 28.5  # the hold passes, then the next try is cut at its share
    assert holds == [60.0, 120.0, 240.0, 480.0, MAX_HOLD_S, MAX_HOLD_S]


def test_a_cut_long_after_the_last_hold_starts_over() -> None:
    cuts, clock = _cuts()
    cuts.cut(KEY, 28.5)
    clock[0] += HOLD_S + MAX_HOLD_S + 1
    assert cuts.cut(KEY, 28.5) == HOLD_S


def test_the_memory_empties_once_a_hold_can_neither_hold_nor_double() -> None:
    """While anything is remembered every attempt is timed (pipeline/attempt.py): an expired
    hold kept that up forever (#38)."""
    cuts, clock = _cuts()
    cuts.cut(KEY, 28.5)
    cuts.cut("other|gemini-2.5-pro", 28.5)
    clock[0] += HOLD_S + MAX_HOLD_S  # the last instant a cut again would double the hold
    assert cuts.holds(KEY) is None and cuts
    clock[0] += 1.0
    assert cuts.answered("backup|gemini-2.5-flash", 1.0) is False  # any call sweeps
    assert not cuts


def test_a_cut_of_a_request_sent_before_the_hold_began_does_not_double_it() -> None:
    cuts, clock = _cuts()
    cuts.cut(KEY, 28.5)
    clock[0] += 2.0  # a second request, sent at the same time, is cut a moment later
    assert cuts.cut(KEY, 28.5) == HOLD_S


def test_an_answer_begun_within_the_cuts_share_clears_it() -> None:
    cuts, _ = _cuts()
    cuts.cut(KEY, 28.5)
    assert cuts.answered(KEY, 3.0) is True
    assert not cuts and cuts.holds(KEY) is None
    assert cuts.cut(KEY, 28.5) == HOLD_S  # cleared: a later cut starts over, not doubled


def test_a_slow_models_answer_to_a_patient_client_leaves_it() -> None:
    """A model whose first token takes 35 s answers a client that waits 300 s: a short-budget
    request would still be cut at 28.5 s, so it still goes to the fallback."""
    cuts, _ = _cuts()
    cuts.cut(KEY, 28.5)
    assert cuts.answered(KEY, 35.0) is False
    assert cuts.holds(KEY) is not None


def test_the_memory_is_bounded_the_least_recently_cut_going_first() -> None:
    clock = [0.0]
    cuts = HeadCuts(lambda: clock[0], max_entries=3)
    for model in "abcd":
        cuts.cut(f"hung|{model}", 28.5)
    assert cuts.holds("hung|a") is None
    assert all(cuts.holds(f"hung|{m}") is not None for m in "bcd")
