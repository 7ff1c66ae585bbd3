"""The pure pieces of replay and match: the text comparison and when a replay is worth a call."""

import pytest

from gateway.apis.replay import Match, worth_replaying


@pytest.mark.parametrize(("pieces", "after"), [
    (["Once upon a", " time"], [" time"]),
    (["Once upon a time"], [" time"]),
    (["O", "nce up", "on a t", "ime"], [" t", "ime"]),
    (["Once upon a"], []),
])
def test_only_what_follows_the_shown_text_comes_out(pieces: list[str], after: list[str]) -> None:
    m = Match("Once upon a")
    out = [m.feed(p) for p in pieces]
    assert m.matched and [o for o in out if o] == after


@pytest.mark.parametrize("pieces", [["Once upon the"], ["Once", " upon", " b"], ["Twice"]])
def test_other_text_before_the_seam_diverges_and_nothing_comes_out(pieces: list[str]) -> None:
    m = Match("Once upon a")
    assert [m.feed(p) for p in [*pieces, " time"]] == [""] * (len(pieces) + 1)
    assert m.diverged and not m.matched


def test_an_end_after_the_seam_is_no_divergence() -> None:
    m = Match("ab")
    m.feed("ab")
    m.diverge()
    assert m.matched


@pytest.mark.parametrize(("payload", "mode", "seed", "worth"), [
    ({"temperature": 0}, "replay", False, True),
    ({"temperature": 0.0}, "replay", False, True),
    ({"temperature": 0.2}, "replay", False, False),
    ({}, "replay", False, False),
    ({"seed": 7}, "replay", True, True),
    ({"seed": 7}, "replay", False, False),  # an API without seeds
    ({"temperature": False}, "replay", False, False),
    ({}, "replay_any", False, True),
    ({"temperature": 0}, "prefill", False, False),
])
def test_which_requests_are_replayed(payload: dict, mode: str, seed: bool, worth: bool) -> None:
    assert worth_replaying(payload, mode, seed=seed) is worth
