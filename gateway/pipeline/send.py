"""Sending one request to one upstream: the first attempt, then the retries its class allows.

One request has one deadline, one set of per-class retry counts and one claim on the
cross-request retry budget (pipeline/chain.py walks the route within them). Of the requests
of one model that meet an outage together, one retries while the others follow its verdict;
for ``open_s`` after one gave up, a failed first attempt of that model is final, and of another
model gets one retry (the loop breaker's outage note). A failure that will move the request
elsewhere gets at most ``retries_cap`` retries here, and none when the upstream was silent. A
rate limit is noted at its stated reset by the request that ended on it, and while that reset
is pending a different request's 429 there is final (policy/pending_reset.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from gateway.errors import Classification, ErrorType, TransportError
from gateway.pipeline.attempt import Call, attempt, circuit_open
from gateway.pipeline.outcome import Failure, Outcome, RequestState, Success, failure_of
from gateway.policy import pending_reset
from gateway.policy.breaker import Admission, Gate, circuit_key
from gateway.policy.clients import client_deadline_s, client_head_s
from gateway.policy.retry import RetryPlan, StopReason, retry_after
from gateway.routing import CREDENTIAL_HEADERS
from gateway.services import Services, UpstreamRuntime

log = logging.getLogger("gateway.decisions")

# Read on every request as module names: on Python 3.11 (the shipped image's) reading a member
# off the enum class costs ~900 instructions more (callgrind; issue #38).
_ALLOW, _REFUSE, _PROBE = Gate.ALLOW, Gate.REFUSE, Gate.PROBE

# The gateway settled retrying for these (it retried, or declined to protect the provider
# or hand a long wait back): the client's SDK must not retry on top.
# A failed circuit probe is settled too: the circuit opens again, and an SDK's retry of it
# would only be refused by the open circuit (or answered from the loop breaker's memory).
# So is a 429 made final by a reset another request ended on: its retries were that request's.
SETTLED = frozenset({StopReason.EXHAUSTED, StopReason.BUDGET, StopReason.DEADLINE, StopReason.WAIT_TOO_LONG,
                     StopReason.PROBE, StopReason.CIRCUIT_PROBE, StopReason.PENDING_RESET})  # fmt: skip

# Failures that cost a whole timeout each: not retried on the same upstream while a fallback is left.
SILENT = frozenset({
    TransportError.CONNECT_TIMEOUT.value, TransportError.FIRST_BYTE_TIMEOUT.value,
    TransportError.FIRST_TOKEN_TIMEOUT.value,
})  # fmt: skip


@dataclass
class Sent:
    outcome: Outcome
    call: Call | None  # the upstream that gave the outcome (a rescue goes back to it); None: none was asked


def new_plan(svc: Services, deadline_s: float | None) -> RetryPlan:
    return RetryPlan(
        svc.cfg.retry, now=svc.monotonic, rand=svc.rand,
        may_retry=svc.budget.hold_retry, deadline_s=deadline_s,  # confirmed in _retry
    )  # fmt: skip


def plan_for(svc: Services, state: RequestState, headers: Mapping[str, str]) -> RetryPlan:
    """A client's request's plan: its deadline within the client's announced timeout, and its
    head due before the client stops waiting for one (policy/clients.py), from its arrival."""
    plan = new_plan(svc, client_deadline_s(headers))
    head_s = client_head_s(headers)
    if head_s is not None:
        plan.head_by = state.started + head_s
    return plan


def fails_over(svc: Services, failure: Failure, up: UpstreamRuntime, nxt: UpstreamRuntime) -> bool:
    return fails_over_class(svc, failure.classification, up, nxt)


def fails_over_class(svc: Services, c: Classification, up: UpstreamRuntime, nxt: UpstreamRuntime) -> bool:
    t = c.type
    if t is ErrorType.CONTEXT_OVERFLOW and c.per_minute:
        # Over the upstream's own tokens per minute, not a context window: the next upstream's
        # limit is its own, so it moves as a rate limit does (read as ``budget`` before, an
        # Azure primary fell back by ``when``; read as a window overflow, never).
        return "rate_limit" in svc.cfg.fallback.when or svc.cfg.fallback.context_overflow
    if t is ErrorType.CONTEXT_OVERFLOW:
        bigger = (nxt.cfg.context_window or 0) > (up.cfg.context_window or 0)
        return svc.cfg.fallback.context_overflow and bigger
    return t.value in svc.cfg.fallback.when


@dataclass(frozen=True, slots=True)
class Onward:
    """A later hop of the route is left: the retries one upstream gets before the request
    moves on (``fallback.retries_per_upstream``), and which failures move it."""

    cap: int
    moves: Callable[[Classification], bool]


# A sibling's call as the pool makes it for the client's request -> the rescue as that sibling
# sends it (the same change made to its body).
Remade = Callable[[Call], "Call | Failure"]
# Sends a rescue of a pool deployment's refusal (the call, its body, ``Remade``) there, and on to
# the pool's siblings where that deployment refuses it as it would move a request on
# (``pool.resend_in_pool``); the answer, and its call in the list the sender was made with.
InPool = Callable[[Call, bytes, Remade], Awaitable[Outcome]]


async def resend(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes, onward: Onward | None,
    in_pool: InPool | None = None, remade: Remade | None = None,
) -> Outcome:  # fmt: skip
    """``send_one`` for a request sent again fixed (a rescue), under the route's ``onward``; of a
    pool deployment (``in_pool``), moved to a sibling as a request would be (``remade``)."""
    if in_pool is not None and remade is not None:
        return await in_pool(call, body, remade)
    if onward is None:
        return await send_one(svc, state, plan, call, body)
    return await send_one(svc, state, plan, call, body, retries_cap=onward.cap, moves_on=onward.moves)


async def send_one(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes,
    *, retries_cap: int | None = None, moves_on: Callable[[Classification], bool] | None = None,
    after: Failure | None = None, ends: bool = True,
) -> Outcome:  # fmt: skip
    """Send to one upstream with retries. Its circuit counts whole requests, not attempts:
    one request's own retries are the retry policy's business, and a permanent 503 must
    cost exactly 1 + max_retries attempts. A half-open circuit's probe is one attempt. An
    answer whose body is still to be read (a stream) is counted when that body ends.
    ``moves_on``: whether a failure will take the request elsewhere (a sibling deployment or
    a fallback); such failures get at most ``retries_cap`` retries here first. ``after``: this
    request's first attempt here, which failed and moved on before its retries (a pool back
    from siblings that could not serve): the retries it was owed, and no first attempt again;
    its circuit counted the request then. ``ends``: False where a failure here does not end the
    request's attempts on the upstream's rate limit (a pool moves it to a sibling, or waits for
    its earliest reset, and notes the reset itself once it gives up: ``note_reset``)."""
    up = call.up
    state.upstream = up.name
    state.sent_model = call.wire_model or state.model
    if svc.param_fixes.learned:  # what this model refused before is left out before it is sent
        body = param_fixed(svc, state, call, body)
    adm = up.circuit.admit_now(state.model) or await up.circuit.admit(state.model)
    if after is not None and adm.gate is not _ALLOW:
        # Its circuit opened since: a probe is a first attempt of its own, not this one's retry.
        await up.circuit.abandon(adm)
        return after
    if adm.gate is _REFUSE:
        state.retries_settled = True
        svc.tracing.event(state, "circuit_refused", {"upstream": up.cfg.name, "retry_in_s": adm.retry_in_s})
        return circuit_open(svc, up, adm.retry_in_s)
    plan.circuit_probe = adm.gate is _PROBE
    if plan.circuit_probe:
        svc.tracing.next_attempt(state, None, {"llm_gateway.circuit": "half_open_probe"})
    try:
        outcome = after if after is not None else await attempt(svc, state, plan, call, body)
        if failure_of(outcome) is not None:
            outcome = await _retry_or_follow(
                svc, state, plan, call, body, adm, outcome, retries_cap, moves_on)
            svc.tracing.settled(state, plan.stopped)
            if ends:
                await note_reset(svc, state, call, outcome)
    except BaseException:
        await up.circuit.abandon(adm)
        raise
    state.retries_settled = plan.stopped in SETTLED
    if isinstance(outcome, Success) and outcome.chunks is not None:
        # Its body is still to come: the circuit hears how it ends (attempt.settle_circuit).
        state.circuit_due = (up.circuit, adm, state.model)
        return outcome
    # An empty stream is how some servers fail a request they reject: not the provider's fault.
    failed = (isinstance(outcome, Failure) and outcome.classification.type is ErrorType.PROVIDER_UNAVAILABLE
              and not plan.answered_with_nothing(outcome.classification))  # fmt: skip
    if failed and plan.head_cut:
        # Cut at its share of the client's head time, sooner than first_byte_s would have: the
        # gateway's doing, as when a client leaves. Counted, CLI requests cut a healthy model
        # that answers in 35 s and opened its circuit for every client (review).
        await up.circuit.abandon(adm)
        remember_cut(svc, state, up, plan.cut_at_s)
        return outcome
    if failed and after is not None:
        return outcome  # one request, one failure: counted with its first attempt
    # Any answer, even a 4xx, shows the provider is up.
    if not up.circuit.settled(adm, state.model, failed=failed):
        await up.circuit.record(adm, state.model, failed=failed)
    return outcome


def remember_cut(svc: Services, state: RequestState, up: UpstreamRuntime, share_s: float) -> None:
    """A head cut is remembered for the requests whose own head time is as short, not counted
    by the circuit every client shares (policy/head_cuts.py)."""
    hold_s = svc.head_cuts.cut(circuit_key(up.cfg.name, state.model), share_s)
    svc.telemetry.head_cuts.labels(up.cfg.name).inc()
    log.info({"request_id": state.request_id, "event": "head_cut_remembered", "upstream": up.cfg.name,
              "model": state.model, "share_s": round(share_s, 3), "hold_s": hold_s})  # fmt: skip


def cuts_apply(svc: Services, plan: RetryPlan) -> bool:
    """Whether this request may go past an upstream (a plain hop or a pool deployment) cut
    lately for a request like it: something is remembered, its own head time is short
    (Gemini CLI's), and a provider's outage moves a request on (policy/head_cuts.py)."""
    return bool(svc.head_cuts) and plan.head_by is not None \
        and ErrorType.PROVIDER_UNAVAILABLE.value in svc.cfg.fallback.when  # fmt: skip


def skipped_cut(svc: Services, state: RequestState, upstream: str, left_s: float) -> None:
    """A request sent past ``upstream`` for a remembered head cut (to a sibling or a later hop)."""
    svc.telemetry.head_cut_skips.labels(upstream).inc()
    log.info({"request_id": state.request_id, "event": "head_cut_skipped", "upstream": upstream,
              "model": state.model, "hold_left_s": round(left_s, 3)})  # fmt: skip


_SPENT = frozenset({StopReason.EXHAUSTED, StopReason.DEADLINE, StopReason.BUDGET})
_OUTAGE = "outage:"  # store key prefix: a request on this upstream spent its retries in vain


async def _retry_or_follow(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes, adm: Admission,
    first: Outcome, retries_cap: int | None, moves_on: Callable[[Classification], bool] | None,
) -> Outcome:  # fmt: skip
    """Retries an outage once between the requests that meet it. An agent's turn is often
    several requests (opencode sends a title and the answer together; a tool round, the next
    turn), and often of two models (Gemini CLI's routing call to a flash-lite model, then the
    answer's model): each spending a full round on an outage multiplies the calls. So for
    ``open_s`` after a request gave up on this upstream, a failed first attempt of that model
    is final, and one of any other model gets one retry, not a round (failures that span
    models are the upstream's, as its upstream-wide circuit reads them; a model that only
    hiccupped meanwhile is answered by its retry, and one that fails it is in the outage too);
    and of requests of a model that fail together, one retries while the others wait for its
    verdict: given up, they give up too (after their one attempt); through, they retry now."""
    c = failure_of(first)
    up = call.up
    if c is not None and c.type is ErrorType.RATE_LIMIT and not (plan.probe or adm.gate is Gate.PROBE):
        final = await _reset_pending(svc, state, plan, call, first, c)
        if final is not None:
            return final
    # An answer of nothing says nothing about the provider yet (the empty-stream probe will
    # tell what it was: usually an overflow), so it neither notes an outage nor follows one.
    if c is None or c.type is not ErrorType.PROVIDER_UNAVAILABLE or plan.unexplained(c):
        return await _retry(svc, state, plan, call, body, first, retries_cap, moves_on)
    if plan.probe or adm.gate is Gate.PROBE:  # one attempt, failed: the outage goes on
        if not plan.head_cut:  # a cut at the client's share is no evidence of one
            await note_outage(svc, up, state.model)
        return await _retry(svc, state, plan, call, body, first, retries_cap, moves_on)
    key = circuit_key(up.cfg.name, state.model)
    # Read only on this failure path: a healthy request never pays the store round trip.
    noted = await svc.store.reset_get(_OUTAGE + up.cfg.name)
    now_ms = svc.wall() * 1000
    if noted is not None and noted > now_ms:
        own = await svc.store.reset_get(_OUTAGE + key)
        log.debug({"request_id": state.request_id, "event": "outage_noted", "upstream": up.cfg.name,
                   "model_failing": own is not None and own > now_ms})  # fmt: skip
        if own is not None and own > now_ms:
            if not plan.head_cut:
                await note_outage(svc, up, state.model)  # this model keeps failing too
            plan.stopped = StopReason.PROBE
            return first
        # Only another model is known to fail here: one retry, not a round (the whole upstream
        # may be down), and the outage is not extended by a failure that may be a hiccup. Failing
        # again, the model is in the outage too: noted (its next first failure is final) and,
        # given up on, remembered. A whole upstream down costs each other model two calls.
        plan.retries_until = plan.total_retries + 1
        try:
            return await _lead_or_follow(svc, state, plan, call, body, first, retries_cap, moves_on)
        finally:
            plan.retries_until = None
    return await _lead_or_follow(svc, state, plan, call, body, first, retries_cap, moves_on)


async def _lead_or_follow(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes,
    first: Outcome, retries_cap: int | None, moves_on: Callable[[Classification], bool] | None,
) -> Outcome:  # fmt: skip
    """Of the requests of one model failing together, one retries (and notes the outage when
    it gives up); the others wait for its verdict."""
    up = call.up
    key = circuit_key(up.cfg.name, state.model)
    leader = up.retrying.get(key)
    if leader is None:
        verdict: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        up.retrying[key] = verdict
        try:
            outcome = await _retry(svc, state, plan, call, body, first, retries_cap, moves_on)
        except BaseException:
            del up.retrying[key]
            verdict.set_result(False)  # cancelled: the others retry themselves
            raise
        failed = failure_of(outcome)
        gave_up = failed is not None and failed.type is ErrorType.PROVIDER_UNAVAILABLE
        try:
            # Not when the client's head time ended it: one attempt cut at its share, or a
            # retry not made for lack of time, says nothing of an outage.
            if gave_up and plan.stopped in _SPENT and not plan.client_bound():
                await note_outage(svc, up, state.model)  # the model's own, and the upstream's
        finally:
            del up.retrying[key]
            verdict.set_result(gave_up)
        return outcome
    try:
        gave_up = await asyncio.wait_for(asyncio.shield(leader), plan.remaining_s())
    except TimeoutError:
        gave_up = True
    if not gave_up:
        return await _retry(svc, state, plan, call, body, first, retries_cap, moves_on)
    log.debug({"request_id": state.request_id, "event": "followed", "upstream": up.cfg.name})
    plan.stopped = StopReason.PROBE
    return first


# Where a client's own credential goes when the upstream forwards it (no ``api_key``), in one order.
_CREDENTIALS = tuple(sorted(CREDENTIAL_HEADERS))


def _target(state: RequestState, call: Call) -> str:
    """The store key of the rate limit ``call`` meets (policy/pending_reset.py): the operator's
    key is the upstream's; a forwarded one is the client's, whose limit is its own. A request
    relayed as it is (counting tokens) is under its own scope: Anthropic limits token counting
    apart from message creation (routing/pools.relayed_scope)."""
    model = state.pool_scope if state.pool_scope is not None else call.wire_model or state.model
    if call.up.cfg.api_key is not None:
        return pending_reset.target(call.up.cfg.name, model)
    lowered = {k.lower(): v for k, v in call.headers.items()}
    return pending_reset.target(call.up.cfg.name, model, "\n".join(lowered.get(h, "") for h in _CREDENTIALS))


async def _reset_pending(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, first: Outcome, c: Classification
) -> Outcome | None:
    """``first``, made final, when another request ended on this target's rate limit and its
    reset is still to come; None: retried by the class's rule. Read only on a 429."""
    now = svc.wall()
    noted = await svc.store.reset_get(_target(state, call))
    wait_s = pending_reset.final_wait_s(c, noted, now)
    if wait_s is None or noted is None or not isinstance(first, Failure):
        return None
    log.debug({"request_id": state.request_id, "event": "reset_pending", "upstream": call.up.cfg.name,
               "wait_s": round(wait_s, 3)})  # fmt: skip
    plan.stopped = StopReason.PENDING_RESET
    if c.retry_after_s is not None:
        return first  # the provider's own word on this request's wait
    stamped = dataclasses.replace(c, retry_after_s=wait_s, reset_at_ms=noted)
    foreign = first.foreign
    if foreign is not None:  # rendered in the client's API from this (Google's RetryInfo)
        foreign = dataclasses.replace(foreign, classification=stamped)
    return dataclasses.replace(first, classification=stamped, foreign=foreign)


async def note_reset(svc: Services, state: RequestState, call: Call, outcome: Outcome) -> None:
    """A request ended its attempts on a target with the provider's 429: its reset is pending
    for every other request sent there (``_reset_pending``), on every replica. The newest 429
    is the provider's latest word, so it replaces an earlier note."""
    if not isinstance(outcome, Failure) or outcome.own is not None:
        return
    now = svc.wall()
    reset_ms = pending_reset.reset_of(outcome.classification, now)
    if reset_ms is not None and reset_ms > now * 1000:
        await svc.store.reset_set(_target(state, call), reset_ms)


async def note_outage(svc: Services, up: UpstreamRuntime, model: str | None) -> None:
    """Notes an outage of the upstream, and of ``model`` on it, for the circuit's ``open_s``,
    or extends it on fresh evidence that a client's turn is still failing on it: a failed
    probe, a first attempt of a model already failing made final by the note, a repeat
    answered from memory (forward.py). Gemini CLI's stock turn spends about 70 s retrying its
    routing call before it asks the answer's model, longer than the circuit's 30 s; while it
    keeps failing, the note lasts. A note refuses nothing: a first attempt still goes, and only
    its failure is final."""
    until_ms = round((svc.wall() + svc.cfg.circuit_breaker.open_s) * 1000)
    await svc.store.reset_set(_OUTAGE + up.cfg.name, until_ms)
    await svc.store.reset_set(_OUTAGE + circuit_key(up.cfg.name, model), until_ms)


async def _retry(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes,
    first: Outcome, retries_cap: int | None, moves_on: Callable[[Classification], bool] | None,
) -> Outcome:  # fmt: skip
    """The retries after a failed first attempt (most requests never get here)."""
    up = call.up
    here = 0
    last: list[Failure] = []

    def before_retry(outcome: Outcome, wait_s: float) -> None:
        assert isinstance(outcome, Failure)
        last[:] = [outcome]

    async def wait_then_confirm(wait_s: float) -> None:
        nonlocal here
        if not await waited_and_confirmed(svc, wait_s):
            raise _Refused
        if plan.in_force is not None and not plan.in_force():
            raise _Gone
        outcome = last[0]
        here += 1
        state.retries += 1
        c = outcome.classification
        if plan.unexplained(c):
            state.empty_retries.append(up.cfg.name)  # counted once known what it was (observe)
        else:
            svc.telemetry.retries.labels(up.cfg.name, c.type.value).inc()
        svc.tracing.retrying(state, c, wait_s)
        log.debug({"request_id": state.request_id, "event": "retry", "upstream": up.cfg.name,
                   "status": outcome.status, "error_type": c.type.value, "code": c.provider_code,
                   "evidence": c.evidence, "wait_s": round(wait_s, 3)})  # fmt: skip

    async def one() -> Outcome:
        return await attempt(svc, state, plan, call, body)

    def may_continue(c: Classification) -> bool:
        if moves_on is None or retries_cap is None or not moves_on(c):
            return True  # only failures that will move on are cut short
        return c.provider_code not in SILENT and here < retries_cap

    plan.hop_cap = may_continue
    try:
        return await retry_after(first, one, plan, failure_of, wait_then_confirm, before_retry)
    except _Refused:
        plan.stopped = StopReason.BUDGET  # as if the budget had said no before the wait
        return last[0]
    except _Gone:
        plan.stopped = StopReason.MOVING_ON  # what is left of the pool in force may serve it
        return last[0]
    finally:
        plan.hop_cap = None


Sleep = Callable[[float], Awaitable[object]]


async def waited_and_confirmed(svc: Services, wait_s: float, sleep: Sleep | None = None) -> bool:
    """Sleeps out the wait of a retry the shared budget held (``sleep``: one a pool's reload may
    end early), then asks it to confirm: across replicas it is confirmed after the wait, when the
    others' counts of the burst have arrived. A wait cut short (cancelled) gives the held retry back."""
    try:
        await (svc.sleep if sleep is None else sleep)(wait_s)
    except BaseException:
        svc.budget.release_retry()
        raise
    return await svc.budget.confirm_retry()


class _Refused(Exception):
    """The shared retry budget did not confirm a held retry."""


class _Gone(Exception):
    """A reload took the upstream being retried out of its pool during the retry's wait."""


def param_fixed(svc: Services, state: RequestState, call: Call, body: bytes) -> bytes:
    """``body`` without the parameters the upstream's model refused before (param_fix.py)."""
    body, done = svc.param_fixes.applied(call.up.cfg.name, call.wire_model or state.model, body)
    if done:
        fixed = state.params_fixed or []
        state.params_fixed = fixed + [label for label, _ in done if label not in fixed]
        noted = state.params_dropped or []
        state.params_dropped = noted + [shown for _, shown in done if shown not in noted]
    return body
