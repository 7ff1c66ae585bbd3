"""When to try again and how long to wait: the only module that imports tenacity.

Per error class (SPEC "Default retry rules"):

* ``rate_limit`` and ``provider_unavailable`` are retried, each up to its own
  ``max_retries``; every other class is answered at once.
* The wait before retry *n* (1-based) is the server's requested wait when it gave one
  (``retry-after-ms``, ``retry-after``, rate-limit reset headers, Gemini ``RetryInfo``)
  and it is at most ``max_retry_after_s``. Otherwise it is "equal jitter" backoff::

      cap  = min(max_delay_s, base_delay_s * 2 ** (n - 1))
      wait = cap / 2 + random() * cap / 2

  which spreads a burst of clients out but never retries instantly.
* A server wait longer than ``max_retry_after_s`` is not held: the error goes back to
  the client at once, stamped with the wait, so the agent can schedule itself.
* No wait may carry the request past its deadline, and every retry must be granted by
  the cross-request retry budget.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tenacity import AsyncRetrying, RetryCallState
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from gateway.config import RetryClassConfig, RetryConfig
from gateway.errors import Classification, ErrorType

# The provider code of a stream that ended cleanly without a single event.
EMPTY_STREAM = "empty_stream"

# The least time to the client's head deadline worth starting an attempt in. A shorter try
# is a call made to be cut: a model that thinks before its first token (Gemini 2.5 Pro, the
# CLI's default) is rarely that quick, and an upstream that is merely slow is then called
# again and again for nothing (halved shares through a pool made five calls, 28.5 s down to
# 1.8 s, to a model that answered in 35 s; review). Half of what is left falling below it,
# the attempt takes all of it: no later one could use the rest.
HEAD_FLOOR_S = 10.0


class StopReason(enum.StrEnum):
    NOT_RETRYABLE = "not_retryable"
    EXHAUSTED = "exhausted"  # this class's max_retries used up
    WAIT_TOO_LONG = "wait_too_long"  # server asked for more than max_retry_after_s
    DEADLINE = "deadline"
    BUDGET = "budget"  # the cross-request retry budget (or an open circuit) said no
    MOVING_ON = "moving_on"  # this upstream had its share of retries; a fallback is next
    PROBE = "probe"  # a repeat of a turn the gateway gave up on is one attempt (loop breaker)
    CIRCUIT_PROBE = "circuit_probe"  # a half-open circuit's probe is one attempt
    # Another request ended on this target's rate limit, whose reset is still to come: one
    # attempt (policy/pending_reset.py).
    PENDING_RESET = "pending_reset"


def backoff_s(cls_cfg: RetryClassConfig, retry_number: int, rand: float) -> float:
    cap: float = min(cls_cfg.max_delay_s, cls_cfg.base_delay_s * 2.0 ** (retry_number - 1))
    return cap / 2 + rand * cap / 2


@dataclass(init=False)
class RetryPlan:
    """The retry decisions for one request. Pure: clock, randomness and budget are passed in.

    One is made per request: its ``__init__`` sets what is given and the one mutable field,
    and every other field reads its class-level default until the plan writes it (the
    generated one stored all fourteen; issue #38)."""

    cfg: RetryConfig
    now: Callable[[], float]  # monotonic seconds
    rand: Callable[[], float]
    may_retry: Callable[[], bool]  # asks the shared retry budget / circuit for one retry
    deadline_s: float | None = None  # this request's own deadline, when below cfg.deadline_s
    # Whether the upstream being tried may be retried again after this failure; None: no
    # limit but the class's. Set while a fallback is left to try (see pipeline/chain.py).
    hop_cap: Callable[[Classification], bool] | None = None
    # Whether the upstream being retried is still in force after a retry's wait (a pool's
    # deployment a reload took out is not called again); None: always.
    in_force: Callable[[], bool] | None = None
    started_at: float = 0.0
    last_code: str | None = None  # the provider code of the previous failure
    # The request is bigger than the upstream's context window: an empty stream is then its
    # answer (servers that fail a stream after its head send nothing), not worth a retry.
    empty_is_final: bool = False
    probing: bool = False  # the pipeline is asking again without streaming after an empty stream
    # A repeat of a turn the gateway already gave up on (the loop breaker's probe): one
    # attempt per upstream, the gateway's retries were spent on the turn's first request.
    probe: bool = False
    # The attempt is a half-open circuit's probe: one attempt, whatever follows it (a fallback
    # then takes the request, or the client is answered); not a hop cap, which says "moving on".
    circuit_probe: bool = False
    # The retries made so far at which this upstream's are used up, below the class's count:
    # one retry for a model that may only have hiccupped while another's outage is noted
    # (pipeline/send.py). None: the class's count.
    retries_until: int | None = None
    # Monotonic time by which the client stops waiting for the response head (Gemini CLI's
    # 60 s, policy/clients.client_head_s); None: not before the deadline, or the head was sent.
    head_by: float | None = None
    # No later hop can follow the upstream being tried: it may take all the time the client
    # waits for the head, not half. So it is for a request sent to one upstream anyway (a
    # relayed path, countTokens) and for a pool's deployments (siblings serve the same model,
    # as slow on each); pipeline/chain.py and pipeline/pool.py clear it while a fallback is left.
    last_hop: bool = True
    # A pool deployment with a sibling still untried (pipeline/pool.py): its circuit's probe
    # has half the client's head time, like a hop before a fallback, so that a hung key probed
    # at each request still leaves its sibling time to answer (review).
    siblings_left: bool = False
    # An answer is already in hand should this attempt fail (pipeline/chain.py: a pool's own
    # 429 while a hop held for a head cut is asked after all): even the last hop has only its
    # share of the client's head time, as a hop before a fallback.
    answer_in_hand: bool = False
    # The latest attempt timed out at its share of the client's head time, sooner than the
    # upstream's own timeouts would have cut it: no evidence against the upstream (its
    # circuit, the outage note and the loop breaker leave it out; pipeline/send.py).
    head_cut: bool = False
    cut_at_s: float = 0.0  # the share that attempt had (policy/head_cuts.py keeps it)
    head_stop: bool = False  # a retry was not made because the client would have given up first
    retries: dict[ErrorType, int] = field(default_factory=dict)
    stopped: StopReason | None = None

    def __init__(
        self, cfg: RetryConfig, now: Callable[[], float], rand: Callable[[], float],
        may_retry: Callable[[], bool], deadline_s: float | None = None,
    ) -> None:  # fmt: skip
        self.cfg, self.now, self.rand, self.may_retry, self.deadline_s = cfg, now, rand, may_retry, deadline_s
        self.retries = {}
        self.started_at = now()

    @property
    def deadline_at(self) -> float:
        limit = self.cfg.deadline_s if self.deadline_s is None else min(self.deadline_s, self.cfg.deadline_s)
        return self.started_at + limit

    def remaining_s(self) -> float:
        return max(0.0, self.deadline_at - self.now())

    def head_share_s(self) -> float | None:
        """The longest one attempt may wait for its answer to begin when the client's wait for
        the head is bounded: half of what is left of it while a fallback may follow, so that
        it still answers before the client gives up (a hung upstream that took it all would
        leave the gateway's fallback to a client already gone); on the last upstream all of it,
        so a slow model is not cut sooner than the client would cut it, and all of it too when
        half would be below ``HEAD_FLOOR_S``. None: no bound."""
        if self.head_by is None:
            return None
        left = max(0.0, self.head_by - self.now())
        return left if self.nothing_follows() or left / 2 < HEAD_FLOOR_S else left / 2

    def nothing_follows(self) -> bool:
        """Whether no other upstream could answer should this attempt be cut at the client's
        head time: the last hop, no answer in hand, not a probe beside an untried sibling."""
        return self.last_hop and not self.answer_in_hand and not (self.circuit_probe and self.siblings_left)

    def head_before_words(self) -> float | None:
        """When a stream whose upstream has begun it (its head came, its first words not yet)
        gets its head sent to the client, so that a client that waits for the head no longer
        than ``head_by`` keeps waiting for the words, as it would on its provider: a model
        thinking or reading a long prompt before its first token (Gemini CLI waits 60 s for a
        head, 300 s between body reads). Only when nothing follows: while a fallback may,
        the attempt is cut at its share, so the fallback can still answer. None: not sent
        before the first visible event."""
        return self.head_by if self.head_by is not None and self.nothing_follows() else None

    def head_room(self, wait_s: float = 0.0) -> bool:
        """Whether an attempt starting ``wait_s`` from now would have at least ``HEAD_FLOOR_S``
        before the client stops waiting for the head (always, when it does not bound it)."""
        return self.head_by is None or self.head_by - (self.now() + wait_s) >= HEAD_FLOOR_S

    def client_bound(self) -> bool:
        """Whether the request ended for the client's head time rather than for what the
        upstream did: its latest attempt cut at its share, or a retry not made because the
        client would have given up first, while a fallback was left. Either says nothing of the
        upstream's health; on the last upstream, which had all the client's time, the failure
        it ended on is its own."""
        last = self.last_hop and not self.answer_in_hand
        return self.head_cut or (self.head_stop and self.stopped is StopReason.DEADLINE and not last)

    def _class_cfg(self, t: ErrorType) -> RetryClassConfig | None:
        if t is ErrorType.RATE_LIMIT:
            return self.cfg.rate_limit
        if t is ErrorType.PROVIDER_UNAVAILABLE:
            return self.cfg.provider_unavailable
        return None

    def next_wait(self, c: Classification) -> float | None:
        """The wait before retrying after ``c``, or None to stop (``stopped`` says why)."""
        cls_cfg = self._class_cfg(c.type)
        if cls_cfg is None:
            return self._stop(StopReason.NOT_RETRYABLE)
        if self.probe:
            return self._stop(StopReason.PROBE)
        if self.circuit_probe:
            return self._stop(StopReason.CIRCUIT_PROBE)
        done = self.retries.get(c.type, 0)
        repeated_empty = self.answered_with_nothing(c) and (
            self.empty_is_final or self.last_code == EMPTY_STREAM
        )
        self.last_code = c.provider_code
        capped = self.retries_until is not None and self.total_retries >= self.retries_until
        if done >= cls_cfg.max_retries or repeated_empty or capped:
            # An empty stream twice in a row is the server's answer to this request, not bad
            # luck: more of the same will not help (the pipeline probes without streaming).
            return self._stop(StopReason.EXHAUSTED)
        if self.hop_cap is not None and not self.hop_cap(c):
            return self._stop(StopReason.MOVING_ON)
        if c.retry_after_s is not None:
            if c.retry_after_s > self.cfg.max_retry_after_s:
                return self._stop(StopReason.WAIT_TOO_LONG)
            wait = c.retry_after_s
        else:
            wait = backoff_s(cls_cfg, done + 1, self.rand())
        # A retry that could not even start before the deadline is pointless.
        if self.now() + wait >= self.deadline_at:
            return self._stop(StopReason.DEADLINE)
        if not self.head_room(wait):
            self.head_stop = True  # too little would be left before the client gives up
            return self._stop(StopReason.DEADLINE)
        if not self.may_retry():
            return self._stop(StopReason.BUDGET)
        self.retries[c.type] = done + 1
        self.stopped = None
        return wait

    def answered_with_nothing(self, c: Classification) -> bool:
        """An empty stream; for a request bigger than the window also a cut before the head
        (llama-cpp-python's server closes the connection that way when a stream fails)."""
        return c.provider_code == EMPTY_STREAM or (self.empty_is_final and c.provider_code == "reset")

    def unexplained(self, c: Classification) -> bool:
        """Whether a failure says nothing yet about the provider: an answer of nothing (above),
        or, while probing, a cut before the head (llama-cpp-python drops the pooled connection
        after such a stream, so the probe's first try finds it closed). What they were is known
        once the probe is answered: an overflow, usually, not an outage."""
        return self.answered_with_nothing(c) or (self.probing and c.provider_code == "reset")

    def _stop(self, reason: StopReason) -> float | None:
        self.stopped = reason
        return None

    @property
    def total_retries(self) -> int:
        return sum(self.retries.values())


T = TypeVar("T")


class _RetryIfPlanSays(retry_base, Generic[T]):
    def __init__(self, plan: RetryPlan, failure_of: Callable[[T], Classification | None]) -> None:
        self._plan = plan
        self._failure_of = failure_of
        self.next_wait: float | None = None

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        assert outcome is not None
        failure = self._failure_of(outcome.result())  # attempts return failures, never raise them
        if failure is None:
            return False
        self.next_wait = self._plan.next_wait(failure)
        return self.next_wait is not None


class _WaitFromDecision(wait_base):
    def __init__(self, decision: _RetryIfPlanSays[object]) -> None:
        self._decision = decision

    def __call__(self, retry_state: RetryCallState) -> float:
        return self._decision.next_wait or 0.0


class _NeverStop(stop_base):
    # Stopping is the plan's job (per-class counts, deadline, budget), decided in `retry`.
    def __call__(self, retry_state: RetryCallState) -> bool:
        return False


async def run_with_retries(
    attempt: Callable[[], Awaitable[T]],
    plan: RetryPlan,
    failure_of: Callable[[T], Classification | None],
    sleep: Callable[[float], Awaitable[None]],
    before_retry: Callable[[T, float], None] | None = None,
) -> T:
    """Call ``attempt`` until it succeeds or ``plan`` says stop; return the last result.

    The first attempt runs outside tenacity: most requests succeed at once, and building
    the retry machinery for them would cost more than the proxying itself.
    """
    return await retry_after(await attempt(), attempt, plan, failure_of, sleep, before_retry)


async def retry_after(
    first: T,
    attempt: Callable[[], Awaitable[T]],
    plan: RetryPlan,
    failure_of: Callable[[T], Classification | None],
    sleep: Callable[[float], Awaitable[None]],
    before_retry: Callable[[T, float], None] | None = None,
) -> T:
    """:func:`run_with_retries` once the first attempt gave ``first``: a caller whose first
    attempt succeeded need not build ``attempt`` and ``before_retry`` at all."""
    failure = failure_of(first)
    if failure is None:
        return first
    wait = plan.next_wait(failure)
    if wait is None:
        return first
    if before_retry is not None:
        before_retry(first, wait)
    await sleep(wait)
    decision: _RetryIfPlanSays[T] = _RetryIfPlanSays(plan, failure_of)

    def _before_sleep(state: RetryCallState) -> None:
        if before_retry is not None and state.outcome is not None:
            before_retry(state.outcome.result(), decision.next_wait or 0.0)

    retrying = AsyncRetrying(
        retry=decision,
        wait=_WaitFromDecision(decision),  # type: ignore[arg-type]
        stop=_NeverStop(),
        sleep=sleep,
        before_sleep=_before_sleep,
        reraise=True,
    )
    return await retrying(attempt)
