"""Which deployment of a pool serves a request: pure pickers over a snapshot, no I/O.

A pool's deployments are each seen as a :class:`Deployment` as of one instant: its weight,
what this process has in flight there, its recent time to first token, its headroom (from
the rate-limit headers its answers carry, else from its configured limits) and whether it
sits out (a cooldown after a rate limit, an exhausted or refused key, or a prediction that
its headroom is gone until a reset). :func:`order` ranks the ones that may serve, best
first; the pipeline walks that order, moving to the next on a failure that another key
would not meet.

    weighted    a random pick in proportion to the weights; a conversation's home (its first
                pick) is a weighted rendezvous hash of its key, so replicas meeting it at once
                agree; after that its home is held (gateway/state/affinity.py), whatever the
                weights become
    least_busy  fewest requests in flight here (ties: weighted)
    latency     lowest decayed time to first token; a deployment not measured yet first
    headroom    the largest share of requests and tokens left (the scarcer of the two);
                one never asked yet ranks as full; one whose answers leave its share
                unknown ranks as the median of the known ones with some left, above any
                with none (``_rooms``; ties: weighted)

A new conversation's home, whatever the strategy, is the first of its key's rendezvous order
among the deployments the strategy finds good now (``first_home``), so that workers and
replicas that each see about the same state agree on it without asking one another.
"""

from __future__ import annotations

import enum
import hashlib
import math
from collections.abc import Callable, Collection, Sequence
from typing import NamedTuple

from gateway.errors import Classification, ErrorType


class SitOut(enum.StrEnum):
    """Why a deployment does not take new requests for now (a metric label)."""

    RATE_LIMIT = "rate_limit"  # answered 429: until the reset it named
    HEADROOM = "headroom"  # its headers said nothing is left until a reset
    BUDGET = "budget"  # its key is out of credit
    AUTH = "auth"  # its key was refused
    MODEL_MISSING = "model_missing"  # it answered 404: no such model there (for this model only)


class Deployment(NamedTuple):
    """One deployment of a pool as of one pick. ``slot`` is its place in the pool's config.
    (A named tuple: built for every deployment of every pick, and a frozen dataclass takes
    three times as long to make.)"""

    slot: int
    name: str
    weight: float = 1.0
    in_flight: int = 0
    latency_s: float | None = None  # decayed time to first token; None: not measured yet
    requests_left: float | None = None  # share of its request limit left, 0..1; None: unknown
    tokens_left: float | None = None
    out_until_ms: int = 0  # epoch ms; sits out while in the future
    out_why: SitOut | None = None
    # Out only because its configured limits' tokens are full of the estimates of calls still
    # in flight: it has room once they are answered (at less), not only at the minute's end.
    settling: bool = False
    # Never sent a request by this process, and no reading of it in the state: its share is
    # unknown for want of asking, not because its answers state none (``_rooms``).
    unheard: bool = False

    def serves_at(self, now_ms: float) -> bool:
        return self.out_until_ms <= now_ms

    @property
    def room(self) -> float | None:
        """The scarcer of its request and token shares left; None: neither is known."""
        shares = [s for s in (self.requests_left, self.tokens_left) if s is not None]
        return min(shares) if shares else None


def order(strategy: str, ready: Sequence[Deployment], rand: Callable[[], float],
          conversation: str | None = None) -> list[Deployment]:  # fmt: skip
    """``ready`` (deployments that may serve now) best first, by ``strategy``. ``conversation``:
    the request's conversation key when it has none bound yet (affinity's first pick)."""
    if len(ready) < 2:
        return list(ready)
    if strategy == "least_busy":
        ranked = _weighted(ready, rand)
        return sorted(ranked, key=lambda d: d.in_flight)  # stable: weighted order breaks ties
    if strategy == "latency":
        ranked = _weighted(ready, rand)
        return sorted(ranked, key=lambda d: -1.0 if d.latency_s is None else d.latency_s)
    if strategy == "headroom":
        rooms = {id(d): r for d, r in zip(ready, _rooms(ready), strict=True)}
        ranked = _weighted(ready, rand)
        return sorted(ranked, key=lambda d: -rooms[id(d)])
    if conversation is not None:
        return _rendezvous(ready, conversation)
    return _weighted(ready, rand)


def first(strategy: str, ready: Sequence[Deployment], rand: Callable[[], float],
          conversation: str | None = None) -> Deployment:
    """``order(...)[0]`` without ranking the rest: a request needs only its first pick (after a
    failure the others are ranked again, as they are then)."""
    if len(ready) == 1:
        return ready[0]
    if strategy == "least_busy":
        least = min(d.in_flight for d in ready)
        return _draw([d for d in ready if d.in_flight == least], rand)
    if strategy == "latency":
        unmeasured = [d for d in ready if d.latency_s is None]
        if unmeasured:
            return _draw(unmeasured, rand)
        return min(ready, key=lambda d: d.latency_s or 0.0)
    if strategy == "headroom":
        rooms = _rooms(ready)
        most = max(rooms)
        return _draw([d for d, r in zip(ready, rooms, strict=True) if r == most], rand)
    if conversation is not None:
        return _rendezvous(ready, conversation)[0]
    return _draw(ready, rand)


def _rooms(ready: Sequence[Deployment]) -> list[float]:
    """Each deployment's room, an unknown one's the median of the known ones that have some left:
    it is taken for as loaded as the pool's middle, neither preferred to a sibling known to have
    more left nor shunned below one known to have less (counted as full, an Azure deployment,
    whose answers state no limit, left 1 request of 120 to a key with 10 times its tokens and
    0.998 of them left: audit). Those with nothing left are not its peers: a share of 0 is known
    to serve nothing, an unknown may, so it ranks above every one of them (1.0 when none has
    any left). Counted in, one Azure deployment answering ``x-ratelimit-remaining-tokens: 0``
    pulled its headerless sibling down to 0 with it, and the two split 40 requests 20/20
    (review); a never-read key of an OpenAI pool ranked level with a spent one. One never asked
    (``unheard``) ranks as full: unknown only for want of asking, it is asked once and then
    ranks by its own answer, where at the median it ranked below the better of two keys heard
    from, and a third key of one limit was never called (30 requests: 15, 15 and 0, measured).
    None known: all alike (the weighted draw decides)."""
    rooms = [1.0 if d.unheard and d.room is None else d.room for d in ready]
    if None not in rooms:
        return rooms  # type: ignore[return-value]  # every one known
    some = sorted(r for r in rooms if r is not None and r > 0)
    half = len(some) // 2
    neutral = 1.0 if not some else some[half] if len(some) % 2 else (some[half - 1] + some[half]) / 2
    return [neutral if r is None else r for r in rooms]


# How far from the strategy's best a deployment may be and still take a new conversation
# (``good_now``): each worker of ``server.workers`` (and each replica) counts its own requests
# in flight and times its own answers, so two of them seldom see the very same best. One more
# request in flight, a time to first token a quarter longer, or 90 % of the largest share left
# are told apart from the best by no worker; a deployment further off is. A lone process (one
# worker, homes in its memory) is the only one to see its conversations: it takes the best
# itself, ties to the rendezvous order, or least_busy gave the next conversation the key a
# request was still out on half the time (tests/integration/test_pools.py).
_BUSIER_BY = 1
_SLOWER_BY = 1.25
_ROOM_OF_BEST = 0.9


def good_now(strategy: str, ready: Sequence[Deployment], apart: bool = True) -> list[Deployment]:
    """The deployments of ``ready`` that the strategy would give a new conversation now: under
    ``weighted`` every one; under ``least_busy`` those within ``_BUSIER_BY`` requests of the
    fewest in flight; under ``latency`` those not measured yet and those within ``_SLOWER_BY``
    of the fastest measured; under ``headroom`` those with at least ``_ROOM_OF_BEST`` of the largest share
    left (an unknown share as ``_rooms`` ranks it). ``apart``: other workers or replicas, each
    with its own view, may meet the conversation; without them only the best are good."""
    if len(ready) < 2:
        return list(ready)
    if strategy == "least_busy":
        fewest = min(d.in_flight for d in ready)
        return [d for d in ready if d.in_flight <= fewest + (_BUSIER_BY if apart else 0)]
    if strategy == "latency":
        # One not measured yet is good too: which are measured is each worker's own (those its
        # few requests went to), and "unmeasured first" had every worker pick apart (23 key
        # changes in 60 turns over 4 workers, measured).
        measured = [d.latency_s for d in ready if d.latency_s is not None]
        fastest = min(measured, default=0.0) * (_SLOWER_BY if apart else 1.0)
        return [d for d in ready if d.latency_s is None or d.latency_s <= fastest]
    if strategy == "headroom":
        rooms = _rooms(ready)
        least = max(rooms) * (_ROOM_OF_BEST if apart else 1.0)
        return [d for d, r in zip(ready, rooms, strict=True) if r >= least]
    return list(ready)


def first_home(strategy: str, ready: Sequence[Deployment], rand: Callable[[], float],
               conversation: str, apart: bool = True) -> Deployment:
    """A conversation's home when it has none: the first of its key's rendezvous order among
    those the strategy finds good now (``good_now``). Every worker and replica computes the
    same order, so those that see about the same state pick the same home, whichever meets the
    conversation first or meets it again without knowing it (a worker of ``server.workers``
    with the memory backend keeps its own table: with the strategy's own pick there, each
    worker's view and random draw, 23 of 60 turns of 6 conversations over 4 workers changed
    keys, each a cache write, measured). The strategy still spreads load: a deployment outside
    ``good_now`` takes no new conversation, and among those inside the hash spreads them by
    weight. ``rand`` is unused: the pick is the conversation's, not a draw."""
    del rand
    return _rendezvous(good_now(strategy, ready, apart), conversation)[0]


def for_conversation(ready: Sequence[Deployment], home: str, conversation: str) -> tuple[Deployment, bool]:
    """A conversation's deployment among ``ready``: its home when that may serve (True), else
    the first of its key's rendezvous order that may (False): the same sibling on every replica,
    whatever the strategy (per-replica picks had two replicas alternate one conversation
    between two siblings, a cache miss each turn), until its home serves again."""
    for d in ready:
        if d.name == home:
            return d, True
    return (ready[0] if len(ready) == 1 else _rendezvous(ready, conversation)[0]), False


def conversation_order(ready: Sequence[Deployment], home: str | None, conversation: str) -> list[Deployment]:
    """``ready`` in the order a conversation's turn tries them: its home, then the rest in its
    key's rendezvous order (``for_conversation``, one by one)."""
    ranked = _rendezvous(ready, conversation)
    return sorted(ranked, key=lambda d: d.name != home)  # stable: the rendezvous order after the home


def break_reason(home: str, views: Sequence[Deployment], tried: Collection[str], now_ms: float,
                 passed: Collection[str] = (), over: Collection[str] = ()) -> str:  # fmt: skip
    """Why a conversation was served away from ``home`` (a metric label): it failed in this
    request, it is no longer a deployment of the pool, it sits out (why), its circuit is open,
    (``passed``) a short-budget request went past it for a head cut (policy/head_cuts.py), or
    (``over``) it refused a request this large as over its tokens per minute lately."""
    if home in tried:
        return "failed"
    if home in passed:
        return "head_cut"
    if home in over:
        return "tokens_per_minute"
    view = next((v for v in views if v.name == home), None)
    if view is None:
        return "removed"
    if view.out_why is not None and not view.serves_at(now_ms):
        return view.out_why.value
    return "circuit_open"


def _draw(ready: Sequence[Deployment], rand: Callable[[], float]) -> Deployment:
    """One deployment at random in proportion to the weights."""
    if len(ready) == 1:
        return ready[0]
    x = rand() * sum(d.weight for d in ready)
    for d in ready:
        x -= d.weight
        if x < 0:
            return d
    return ready[-1]


def _weighted(ready: Sequence[Deployment], rand: Callable[[], float]) -> list[Deployment]:
    """A weighted random order without replacement (pools are small: a few deployments)."""
    left = list(ready)
    out = []
    while len(left) > 1:
        total = sum(d.weight for d in left)
        x = rand() * total
        for i, d in enumerate(left):
            x -= d.weight
            if x < 0 or i == len(left) - 1:
                out.append(left.pop(i))
                break
    out.extend(left)
    return out


def _rendezvous(ready: Sequence[Deployment], conversation: str) -> list[Deployment]:
    """Weighted rendezvous hashing: each deployment scores ``-weight / ln(u)`` for a uniform
    ``u`` drawn from (conversation, deployment). The highest wins, each in proportion to its
    weight over many conversations, and every replica computes the same order."""

    def score(d: Deployment) -> float:
        digest = hashlib.blake2b(f"{conversation}\0{d.name}".encode(), digest_size=8).digest()
        u = (int.from_bytes(digest, "big") + 1) / (2**64 + 2)  # strictly inside (0, 1)
        return -d.weight / math.log(u)

    return sorted(ready, key=score, reverse=True)


RELAYED = "relayed:"


def relayed_scope(model: str | None) -> str:
    """What a request not retried along the pool (counting tokens, an embedding, any path
    relayed as it is) keeps its deployments' records under in place of its model: their
    sit-outs, headroom and the sends that count it down, apart from the model's generation
    (the configured ``limits`` are the deployment's, one count for every path: ``unscoped``).
    Anthropic: "Token counting and message creation have separate and independent rate
    limits. Usage of one does not count against the limits of the other."
    (https://docs.anthropic.com/en/docs/build-with-claude/token-counting). Under its model, a
    count_tokens 429 sat the key out of Messages (measured), and the sit-out after a 429 of a
    request naming no model (a listing) was recorded for every model. No other provider's
    page says whether such paths share the generation's limits: kept apart, a shared limit
    costs one more 429 (which moves on at once); kept together, a separate one took the key
    from generation."""
    return RELAYED + (model or "")


def unscoped(model: str | None) -> str | None:
    """The model a ``relayed_scope`` stands for (any other name stands for itself)."""
    if model is not None and model.startswith(RELAYED):
        return model[len(RELAYED) :] or None
    return model


def sit_out(c: Classification, now_ms: int, *, rate_limit_s: float, budget_s: float, auth_s: float,
            own_key: bool, model_missing_s: float = 300.0) -> tuple[int, SitOut] | None:  # fmt: skip
    """How long a deployment sits out after the failure ``c``, and why; None: it does not
    (the failure says nothing about its key). Only a failure of the operator's own key counts:
    a client's forwarded credential that is rate limited, out of credit or refused is that
    client's, and sitting the deployment out for it took the pool from every other client."""
    if not own_key:
        return None
    t = c.type
    if t is ErrorType.RATE_LIMIT:
        return _until(c, now_ms, rate_limit_s), SitOut.RATE_LIMIT
    if t is ErrorType.BUDGET:
        return _until(c, now_ms, budget_s), SitOut.BUDGET
    if t is ErrorType.AUTH:
        return now_ms + round(auth_s * 1000), SitOut.AUTH
    if c.model_missing:
        return now_ms + round(model_missing_s * 1000), SitOut.MODEL_MISSING
    return None


def _until(c: Classification, now_ms: int, default_s: float) -> int:
    if c.reset_at_ms is not None and c.reset_at_ms > now_ms:
        return c.reset_at_ms
    if c.retry_after_s is not None and c.retry_after_s > 0:
        return now_ms + round(c.retry_after_s * 1000)
    return now_ms + round(default_s * 1000)


# A request none of whose deployments may serve, one of them out only for the estimates of its
# calls in flight (``Deployment.settling``), looks again after this long at least (the next read
# of the records decides, every ``state.cache_ms``; an answer of one of those calls here ends the
# wait sooner), and a client it cannot keep waiting is told to come back after this long.
ESTIMATES_LOOK_S = 0.05
ESTIMATES_RETRY_AFTER_S = 1.0
_RESETS = (SitOut.RATE_LIMIT, SitOut.HEADROOM)


class RoomWait(NamedTuple):
    """What a request does about deployments whose room the estimates in flight hold."""

    wait_s: float | None  # look again after this long (or at an answer of ``names`` here); None: cannot
    retry_after_s: float  # the wait a client is told when it cannot: the short one, not the minute's end
    names: tuple[str, ...]  # the deployments whose answers may give room back


def estimates_wait(views: Sequence[Deployment], now_ms: float, read_in_s: float,
                   may_wait_s: float) -> RoomWait | None:  # fmt: skip
    """No deployment of ``views`` (those a request may still go to) may serve now. When some are
    out only for the estimates of calls in flight (``settling``), their answers give room back
    within milliseconds (their usages mostly far below estimates of the prompt's bytes / 3.5):
    the request waits for them, until the next read of the records (``read_in_s`` from now, at
    least ``ESTIMATES_LOOK_S``) or an answer there, and looks again; ``may_wait_s``: how much longer
    it may (its bound of such waits, its deadline, its client's head time); past it, it is
    answered with that short wait. Taken for the minute's end, such a count kept a burst 20 s,
    and answered 429 with ``retry-after: 60`` (review). None: none is (a count used up by usages,
    or by requests, waits for the minute's end as any rate limit's reset), or a deployment's own
    reset comes before the next look (waited for as ever)."""
    names = tuple(v.name for v in views if v.settling and v.out_until_ms > now_ms)
    if not names:
        return None
    wait_s = max(ESTIMATES_LOOK_S, read_in_s)
    back = [v.out_until_ms for v in views
            if not v.settling and v.out_why in _RESETS and v.out_until_ms > now_ms]  # fmt: skip
    if back and min(back) <= now_ms + wait_s * 1000:
        return None
    if may_wait_s < ESTIMATES_LOOK_S:
        return RoomWait(None, max(ESTIMATES_RETRY_AFTER_S, wait_s), names)
    return RoomWait(min(wait_s, may_wait_s), max(ESTIMATES_RETRY_AFTER_S, wait_s), names)


# A failure moves the request to a sibling deployment when another key or deployment may not
# meet it: its key's limits and credit are its own, and so is its server's health, and whether
# it has the model at all (a 404 that says so). Other request errors (400, 404, 422) would meet
# every sibling the same way.
_MOVES = frozenset({ErrorType.RATE_LIMIT, ErrorType.BUDGET, ErrorType.PROVIDER_UNAVAILABLE})


def moves_to_sibling(c: Classification, *, own_key: bool, bigger_window: bool, overflow_moves: bool) -> bool:
    t = c.type
    if t in _MOVES or c.model_missing:  # another deployment may have the model (an Azure one, a pulled one)
        return True
    if t is ErrorType.AUTH:
        return own_key
    if t is ErrorType.CONTEXT_OVERFLOW:
        # Over a tokens-per-minute window, the deployment's own: a sibling's may take it, as a
        # rate limit moves (Azure gives each deployment its own TPM, learn.microsoft.com/en-us/
        # azure/ai-services/openai/how-to/quota). Over a context window, only a larger one may.
        return c.per_minute or (overflow_moves and bigger_window)
    return False
