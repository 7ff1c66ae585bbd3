"""The pure pool decisions: strategies over snapshots, sit-outs and moves from classifications."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from gateway.errors import Classification, ErrorType
from gateway.routing.pools import (
    ESTIMATES_LOOK_S,
    ESTIMATES_RETRY_AFTER_S,
    Deployment,
    RoomWait,
    SitOut,
    break_reason,
    estimates_wait,
    first,
    first_home,
    for_conversation,
    moves_to_sibling,
    order,
    sit_out,
)

NOW_MS = 1_800_000_000_000


def dep(slot: int, **kw: object) -> Deployment:
    return Deployment(slot, "abcdef"[slot], **kw)  # type: ignore[arg-type]


def test_weighted_first_picks_follow_the_weights() -> None:
    rand = random.Random(1).random
    pool = [dep(0, weight=1.0), dep(1, weight=3.0), dep(2, weight=6.0)]
    firsts = Counter(order("weighted", pool, rand)[0].name for _ in range(20_000))
    assert firsts["a"] / 20_000 == pytest.approx(0.1, abs=0.015)
    assert firsts["b"] / 20_000 == pytest.approx(0.3, abs=0.015)
    assert firsts["c"] / 20_000 == pytest.approx(0.6, abs=0.015)


def test_every_order_holds_each_ready_deployment_once() -> None:
    pool = [dep(i, in_flight=i, latency_s=0.1 * i, requests_left=0.5) for i in range(4)]
    for strategy in ("weighted", "least_busy", "latency", "headroom"):
        ranked = order(strategy, pool, random.Random(2).random, "id:conv")
        assert sorted(d.name for d in ranked) == ["a", "b", "c", "d"], strategy


def test_a_conversation_gets_the_same_first_pick_everywhere_spread_by_weight() -> None:
    pool = [dep(0, weight=1.0), dep(1, weight=1.0), dep(2, weight=2.0)]
    first = {f"id:{i}": order("weighted", pool, random.random, f"id:{i}")[0].name for i in range(4000)}
    # Replicas draw other random numbers: the pick of a conversation does not depend on them.
    assert all(order("weighted", pool, random.Random(9).random, k)[0].name == v for k, v in first.items())
    share = Counter(first.values())
    assert share["c"] / 4000 == pytest.approx(0.5, abs=0.04)
    # A deployment gone moves only its own conversations (rendezvous hashing).
    without_b = {k: order("weighted", [pool[0], pool[2]], random.random, k)[0].name for k in first}
    assert all(without_b[k] == v for k, v in first.items() if v != "b")


def test_a_home_holds_across_a_weight_change_and_an_added_deployment_which_take_new_conversations() -> None:
    """The rendezvous order decides a conversation's first home only: recomputed from the new
    weights at every turn, a reload raising one weight to 3 moved 7 of 30 live conversations,
    and a deployment added moved more, none counted (measured on two replicas)."""
    before = [dep(0), dep(1), dep(2)]
    homes = {f"id:{i}": first_home("weighted", before, random.random, f"id:{i}").name for i in range(300)}
    after = [dep(0), dep(1, weight=3.0), dep(2), dep(3)]  # b's weight raised, d added
    recomputed = {k: first_home("weighted", after, random.random, k).name for k in homes}
    assert sum(recomputed[k] != v for k, v in homes.items()) > 100  # what the old pick did
    for k, home in homes.items():
        assert for_conversation(after, home, k) == (after["abc".index(home)], True)
    # The weights decide among new conversations only, the added deployment included.
    new = Counter(first_home("weighted", after, random.random, f"id:new-{i}").name for i in range(3000))
    assert new["b"] / 3000 == pytest.approx(0.5, abs=0.04) and new["d"] / 3000 == pytest.approx(1 / 6, abs=0.03)


def test_away_from_home_a_conversation_goes_to_the_next_of_its_own_rendezvous_order_whatever_the_strategy() -> None:
    pool = [dep(0, in_flight=9), dep(1, in_flight=0), dep(2, in_flight=5), dep(3, in_flight=1)]
    for i in range(200):
        k = f"id:{i}"
        ranked = order("weighted", pool, random.random, k)
        home, rest = ranked[0].name, [d for d in pool if d is not ranked[0]]
        assert for_conversation(pool, home, k) == (ranked[0], True)
        # Its home cannot serve: the same sibling on every replica, not least_busy's (b).
        assert for_conversation(rest, home, k) == (ranked[1], False)
        assert for_conversation([ranked[2]], home, k) == (ranked[2], False)


def test_a_new_conversations_home_is_the_strategys_pick() -> None:
    pool = [dep(0, in_flight=3), dep(1, in_flight=0), dep(2, in_flight=5)]
    assert first_home("least_busy", pool, random.random, "id:x").name == "b"
    assert first_home("weighted", pool, random.random, "id:x") == order("weighted", pool, random.random, "id:x")[0]


def test_workers_that_each_see_about_the_same_state_give_a_new_conversation_the_same_home() -> None:
    """Each worker of ``server.workers`` (memory backend) keeps its own table and its own view;
    SO_REUSEPORT hands a conversation's turns to any of them. With the strategy's own pick, 23
    of 60 turns of 6 conversations over 4 workers changed keys under ``headroom`` (22
    ``least_busy``, 24 ``latency``), each a cache write (audit). Views a request or a few
    percent apart pick the same home now: the strategy says which are good, the conversation's
    rendezvous order which of those."""
    seen = {
        "headroom": ([dep(0, tokens_left=0.97), dep(1, tokens_left=0.95), dep(2, tokens_left=0.96)],
                     [dep(0, tokens_left=0.95), dep(1, tokens_left=0.97), dep(2)]),
        "least_busy": ([dep(0, in_flight=1), dep(1), dep(2)], [dep(0), dep(1, in_flight=1), dep(2, in_flight=1)]),
        "latency": ([dep(0, latency_s=0.21), dep(1, latency_s=0.19), dep(2)],
                    [dep(0), dep(1, latency_s=0.2), dep(2, latency_s=0.22)]),
    }  # fmt: skip
    for strategy, (one, other) in seen.items():
        homes = [first_home(strategy, one, random.Random(1).random, f"id:{i}") for i in range(300)]
        assert [first_home(strategy, other, random.Random(2).random, f"id:{i}").name for i in range(300)] \
            == [h.name for h in homes], strategy  # fmt: skip
        # Spread over all three, by the conversation's key.
        assert len({h.name for h in homes}) == 3, strategy


def test_a_deployment_the_strategy_finds_worse_takes_no_new_conversation() -> None:
    """One process keeps its strategy's spreading: a deployment two requests busier than the
    least busy, a third slower than the fastest, or with a fifth less room than the most gets
    no new conversation, and the good ones share them by weight."""
    worse = {
        "least_busy": [dep(0, in_flight=2), dep(1), dep(2, weight=3.0)],
        "latency": [dep(0, latency_s=0.4), dep(1, latency_s=0.3), dep(2, latency_s=0.3, weight=3.0)],
        "headroom": [dep(0, tokens_left=0.7), dep(1, tokens_left=0.9), dep(2, tokens_left=0.88, weight=3.0)],
    }
    for strategy, pool in worse.items():
        homes = Counter(first_home(strategy, pool, random.random, f"id:{i}").name for i in range(4000))
        assert homes["a"] == 0, strategy
        assert homes["c"] / 4000 == pytest.approx(0.75, abs=0.04), strategy


def test_why_a_conversation_was_served_away_from_its_home() -> None:
    views = [dep(0, out_until_ms=NOW_MS + 60_000, out_why=SitOut.RATE_LIMIT), dep(1), dep(2)]
    assert break_reason("a", views, set(), NOW_MS) == "rate_limit"
    assert break_reason("b", views, {"b"}, NOW_MS) == "failed"  # tried in this request
    assert break_reason("b", views, set(), NOW_MS) == "circuit_open"  # serves, but its circuit refused
    assert break_reason("z", views, set(), NOW_MS) == "removed"  # no longer in the pool


def test_least_busy_picks_the_fewest_in_flight() -> None:
    pool = [dep(0, in_flight=5), dep(1, in_flight=1), dep(2, in_flight=3)]
    assert [d.name for d in order("least_busy", pool, random.random)] == ["b", "c", "a"]


def test_latency_tries_an_unmeasured_deployment_first_then_the_fastest() -> None:
    pool = [dep(0, latency_s=0.8), dep(1, latency_s=0.2), dep(2)]
    assert [d.name for d in order("latency", pool, random.random)] == ["c", "b", "a"]


def test_headroom_ranks_by_the_scarcer_share_and_unknown_as_the_median_of_the_known() -> None:
    """Counted as full, a deployment that states no limit (Azure's answers say only what is
    left) left 1 request of 120 to a key with 0.998 of 10 times its tokens left (audit)."""
    pool = [dep(0, requests_left=0.9, tokens_left=0.05), dep(1, requests_left=0.4, tokens_left=0.5), dep(2)]
    assert [d.name for d in order("headroom", pool, random.random)] == ["b", "c", "a"]  # c: 0.225
    assert first("headroom", [*pool, dep(3, tokens_left=0.3)], random.random).name == "b"  # d: 0.3
    # One known: the unknown ties with it, and the weights share the picks.
    pair = [dep(0, tokens_left=0.998), dep(1)]
    draws = random.Random(7)
    picks = Counter(first("headroom", pair, draws.random).name for _ in range(400))
    assert 150 < picks["a"] < 250 and picks["a"] + picks["b"] == 400
    assert {d.name for d in order("headroom", [dep(0), dep(1)], random.random)} == {"a", "b"}  # none known


def test_headroom_ranks_an_unknown_share_above_every_known_one_with_nothing_left() -> None:
    """The median counted shares of 0: an Azure deployment answering
    ``x-ratelimit-remaining-tokens: 0`` beside a sibling that sends no rate-limit headers ranked
    the sibling at 0 too, and 40 requests went 20/20 (review)."""
    draws = random.Random(3)
    spent_and_unknown = [dep(0, requests_left=0.5, tokens_left=0.0), dep(1)]
    assert Counter(first("headroom", spent_and_unknown, draws.random).name for _ in range(200)) == {"b": 200}
    # Two spent, one never read (an OpenAI pool's new key): the unknown first.
    pool = [dep(0, tokens_left=0.0), dep(1, requests_left=0.0), dep(2)]
    assert order("headroom", pool, random.random)[0].name == "c"
    # Its rank among the ones with some left is still their median (0.4 here): below 0.6, above 0.2.
    pool = [dep(0, tokens_left=0.0), dep(1, tokens_left=0.2), dep(2, tokens_left=0.6), dep(3)]
    assert [d.name for d in order("headroom", pool, random.random)] == ["c", "d", "b", "a"]
    # The audit's case stands: a key with 0.998 left beside an unknown Azure deployment shares by weight.
    pair = [dep(0, tokens_left=0.998), dep(1), dep(2, tokens_left=0.0)]
    picks = Counter(first("headroom", pair, draws.random).name for _ in range(400))
    assert 150 < picks["a"] < 250 and picks["a"] + picks["b"] == 400


def test_a_per_minute_overflow_moves_to_any_sibling_and_a_window_overflow_only_to_a_bigger_one() -> None:
    """A tokens-per-minute limit is the deployment's own (Azure sets one per deployment): another
    may take the request whatever its context window; a context window's overflow needs a bigger
    window and ``fallback.context_overflow`` (review)."""
    tpm = Classification.of(ErrorType.CONTEXT_OVERFLOW, per_minute=True)
    window = Classification.of(ErrorType.CONTEXT_OVERFLOW)
    assert moves_to_sibling(tpm, own_key=True, bigger_window=False, overflow_moves=False)
    assert not moves_to_sibling(window, own_key=True, bigger_window=False, overflow_moves=True)
    assert moves_to_sibling(window, own_key=True, bigger_window=True, overflow_moves=True)
    assert sit_out(tpm, NOW_MS, **CD, own_key=True) is None  # nothing waits it out: no sit-out


def test_a_deployment_sitting_out_does_not_serve_until_its_end() -> None:
    d = dep(0, out_until_ms=NOW_MS + 1000, out_why=SitOut.RATE_LIMIT)
    assert not d.serves_at(NOW_MS) and d.serves_at(NOW_MS + 1000)


def _c(t: ErrorType, retry_after_s: float | None = None, reset_at_ms: int | None = None) -> Classification:
    return Classification(t, t.retryable, retry_after_s, reset_at_ms)


CD = {"rate_limit_s": 5.0, "budget_s": 300.0, "auth_s": 3600.0}


@pytest.mark.parametrize(("c", "own_key", "expected"), [
    (_c(ErrorType.RATE_LIMIT, reset_at_ms=NOW_MS + 42_000), True, (NOW_MS + 42_000, SitOut.RATE_LIMIT)),
    (_c(ErrorType.RATE_LIMIT, retry_after_s=7), True, (NOW_MS + 7000, SitOut.RATE_LIMIT)),
    (_c(ErrorType.RATE_LIMIT), True, (NOW_MS + 5000, SitOut.RATE_LIMIT)),  # no reset named: the default
    (_c(ErrorType.RATE_LIMIT, reset_at_ms=NOW_MS - 1), True, (NOW_MS + 5000, SitOut.RATE_LIMIT)),  # stale
    (_c(ErrorType.BUDGET), True, (NOW_MS + 300_000, SitOut.BUDGET)),
    (_c(ErrorType.BUDGET, reset_at_ms=NOW_MS + 86_400_000), True, (NOW_MS + 86_400_000, SitOut.BUDGET)),
    (_c(ErrorType.AUTH), True, (NOW_MS + 3_600_000, SitOut.AUTH)),
    (_c(ErrorType.AUTH), False, None),  # the client's own credential was refused: not the key's fault
    (_c(ErrorType.PROVIDER_UNAVAILABLE), True, None),  # the circuit's business
    (_c(ErrorType.UNKNOWN), True, None),
    (_c(ErrorType.CONTEXT_OVERFLOW), True, None),
])  # fmt: skip
def test_what_sits_a_deployment_out_and_for_how_long(
    c: Classification, own_key: bool, expected: tuple[int, SitOut] | None
) -> None:
    assert sit_out(c, NOW_MS, own_key=own_key, **CD) == expected


@pytest.mark.parametrize(("t", "own_key", "bigger", "overflow_moves", "moves"), [
    (ErrorType.RATE_LIMIT, True, False, False, True),
    (ErrorType.BUDGET, True, False, False, True),
    (ErrorType.PROVIDER_UNAVAILABLE, False, False, False, True),
    (ErrorType.AUTH, True, False, False, True),
    (ErrorType.AUTH, False, False, False, False),  # every sibling would refuse the client's credential too
    (ErrorType.UNKNOWN, True, True, True, False),  # a request error meets every sibling alike
    (ErrorType.CONTEXT_OVERFLOW, True, True, True, True),
    (ErrorType.CONTEXT_OVERFLOW, True, False, True, False),
    (ErrorType.CONTEXT_OVERFLOW, True, True, False, False),
])  # fmt: skip
def test_which_failures_move_to_a_sibling(t: ErrorType, own_key: bool, bigger: bool, overflow_moves: bool,
                                          moves: bool) -> None:  # fmt: skip
    assert moves_to_sibling(_c(t), own_key=own_key, bigger_window=bigger, overflow_moves=overflow_moves) is moves


def test_the_first_pick_alone_is_what_a_full_order_would_put_first() -> None:
    pools = [
        [dep(0, weight=1.0), dep(1, weight=3.0), dep(2, weight=6.0)],
        [dep(0, in_flight=2), dep(1, in_flight=0, weight=2), dep(2, in_flight=0)],
        [dep(0, latency_s=0.3), dep(1, latency_s=0.1), dep(2, latency_s=0.2)],
        [dep(0, requests_left=0.2), dep(1, tokens_left=0.9, requests_left=0.95), dep(2, requests_left=0.9)],
    ]
    for strategy, pool in zip(("weighted", "least_busy", "latency", "headroom"), pools, strict=True):
        for conversation in (None, "id:abc"):
            firsts = Counter(first(strategy, pool, random.Random(i).random, conversation).name for i in range(3000))
            ordered = Counter(order(strategy, pool, random.Random(i).random, conversation)[0].name
                              for i in range(3000))  # fmt: skip
            for name in "abc":
                assert firsts[name] / 3000 == pytest.approx(ordered[name] / 3000, abs=0.04), (strategy, name)


def test_a_lone_process_gives_a_new_conversation_only_the_best() -> None:
    """One worker with its homes in memory is the only one to see its conversations: the
    tolerance workers need to agree gave least_busy's next conversation the key a request was
    still out on, for half the conversations; alone, every one goes to the idle key."""
    busy = [dep(0, in_flight=1), dep(1)]
    assert {first_home("least_busy", busy, random.random, f"id:{i}", apart=False).name for i in range(50)} == {"b"}
    assert {first_home("least_busy", busy, random.random, f"id:{i}").name for i in range(50)} == {"a", "b"}
    slow = [dep(0, latency_s=1.1), dep(1, latency_s=1.0)]
    assert {first_home("latency", slow, random.random, f"id:{i}", apart=False).name for i in range(50)} == {"b"}
    full = [dep(0, tokens_left=0.95), dep(1, tokens_left=1.0)]
    assert {first_home("headroom", full, random.random, f"id:{i}", apart=False).name for i in range(50)} == {"b"}


MINUTE_END = NOW_MS + 20_000  # 0:40: the minute ends in 20 s


def _held(slot: int, settling: bool, until: int = MINUTE_END, why: SitOut = SitOut.HEADROOM) -> Deployment:
    return dep(slot, out_until_ms=until, out_why=why, settling=settling)


@pytest.mark.parametrize(("views", "read_in_s", "may_wait_s", "wait"), [
    # The burst: every count full of the estimates of calls in flight. It waits for the next
    # read (an answer here ends the wait sooner), not the minute's end, 20 s away.
    ([_held(0, True), _held(1, True), _held(2, True)], 0.15, 30.0, RoomWait(0.15, 1.0, ("a", "b", "c"))),
    # A read just made: it looks again after ESTIMATES_LOOK_S at least (never a busy loop).
    ([_held(0, True)], 0.0, 30.0, RoomWait(ESTIMATES_LOOK_S, 1.0, ("a",))),
    # One count used up by usages, one held by estimates: it waits for the one that will have room.
    ([_held(0, False), _held(1, True)], 0.2, 30.0, RoomWait(0.2, 1.0, ("b",))),
    # Within the time left to it only; with none left, answered with the short wait.
    ([_held(0, True)], 0.2, 0.1, RoomWait(0.1, 1.0, ("a",))),
    ([_held(0, True)], 0.2, 0.0, RoomWait(None, ESTIMATES_RETRY_AFTER_S, ("a",))),
    # A count used up by usages, or by requests, everywhere: the minute's end, as any reset.
    ([_held(0, False), _held(1, False)], 0.2, 30.0, None),
    # A sibling's own reset (a 429's) comes before the next look: waited for as before.
    ([_held(0, True), _held(1, False, NOW_MS + 100, SitOut.RATE_LIMIT)], 0.2, 30.0, None),
    # ... but one that comes later is not what the request waits for first.
    ([_held(0, True), _held(1, False, NOW_MS + 5_000, SitOut.RATE_LIMIT)], 0.2, 30.0, RoomWait(0.2, 1.0, ("a",))),
    # Out for other reasons (a refused key) or no longer out: nothing to wait for here.
    ([_held(0, False, NOW_MS + 3_600_000, SitOut.AUTH)], 0.2, 30.0, None),
    ([_held(0, True, NOW_MS - 1)], 0.2, 30.0, None),
])  # fmt: skip
def test_a_pool_held_by_estimates_in_flight_waits_for_their_answers_not_the_minutes_end(
        views: list[Deployment], read_in_s: float, may_wait_s: float, wait: RoomWait | None) -> None:  # fmt: skip
    """docs/pools.md: a request refused only for the estimates of calls in flight waited for the
    minute's end (a burst of 60 at 0:40: 27 answered at once, 27 after 20 s, 6 answered 429 with
    ``retry-after: 60``), though their answers gave the room back within milliseconds."""
    assert estimates_wait(views, NOW_MS, read_in_s, may_wait_s) == wait
