"""Sending one request along its route: its pool or upstream, then its fallbacks.

The multiplication rule: one request has one deadline, one set of per-class retry counts
and one claim on the cross-request retry budget, whatever number of upstreams it visits.
A fallback never resets them. Each upstream gets one first attempt; retries come out of
the shared counts, and while another upstream is left to try, one upstream gets at most
``fallback.retries_per_upstream`` of them before the request moves on. So a permanent
outage of every upstream costs at most ``1 + max_retries`` attempts plus one per fallback.
A pool's deployments count as fallbacks of each other (pipeline/pool.py): one first attempt
each, moving on at once.

A *silent* upstream (no connection, no response head, or no visible output within its
timeout) gets no retry while a fallback is left: each of its failures costs a whole timeout,
while a 5xx, 529 or reset is answered fast and is often gone on the next try.

An upstream whose circuit is open, or whose rate limit is known not to reset yet, is
skipped while a later upstream is left (steering); the last one is always tried, so a
request without a usable fallback gets the same answer it would have had without any.
Steering past a hop is a fallback like any other (``x-llm-fallbacks``, the fallbacks
metric), in the class it would have refused with: an open circuit is
``provider_unavailable``, an unreset limit ``rate_limit``; a pool says why none of its
deployments may serve.

A request the upstream refused for what it asked, and that the pipeline then sent again fixed
(a parameter left out, a budget lowered, foreign reasoning left out: ``forward.py``'s fixes),
is still on its route: the resend gets the hop's capped retries (``onward``), and a failure
that moves on takes the rest of the route (``resume_route``).

Nothing here runs after a byte reached the client: a stream that has started is a
``Success``, and only failures move along the chain.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import Classification, ErrorType
from gateway.pipeline.attempt import Call
from gateway.pipeline.outcome import Failure, RequestState
from gateway.pipeline.pool import CutsHeld, answered_fixed, send_pool
from gateway.pipeline.send import (
    Onward,
    Sent,
    cuts_apply,
    fails_over,
    fails_over_class,
    send_one,
    skipped_cut,
)
from gateway.policy.breaker import circuit_key
from gateway.policy.retry import RetryPlan
from gateway.services import Hop, Route, Services, UpstreamRuntime

log = logging.getLogger("gateway.decisions")


async def send_chain(
    svc: Services, state: RequestState, plan: RetryPlan, route: Route,
    call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None = None,
    cuts: bool = True,
) -> Sent:  # fmt: skip
    """``call_for`` says how the request goes to an upstream (its API, its body), or why it
    cannot go there at all (no translation, a request that API cannot carry): such an
    upstream is passed over for the next, and answers only when it is the last. A pool's hop
    picks among its deployments (pipeline/pool.py); ``conversation`` keys its affinity.
    ``cuts``: hops cut lately for a request like this one may be gone past (``_cut_lately``)."""
    retries_cap = svc.limits.retries_per_upstream
    last: Sent | None = None
    refused: Failure | None = None
    hops = route.hops
    # Hops gone past for a head cut (policy/head_cuts.py), told once a later hop can carry the
    # request. None can (a hosted tool only Gemini runs, a Messages fallback): they are asked
    # after all, as they would have been without the memory (a 400 in no time, no upstream
    # asked, where the held upstream answered: review).
    passed: list[_Passed] = []
    ask = call_for
    cutting = cuts and cuts_apply(svc, plan)
    if cutting:

        def carrying(up: UpstreamRuntime) -> Call | Failure:
            call = call_for(up)
            if passed and not isinstance(call, Failure):
                for p in passed:
                    _told(svc, state, p)
                passed.clear()
            return call

        ask = carrying

    for h, hop in enumerate(hops):
        nxt = hops[h + 1].members[0] if h + 1 < len(hops) else None
        plan.last_hop, plan.siblings_left = nxt is None, False  # a pool's hop says its own (pool.py)
        if hop.pool is not None:
            pooled = await send_pool(svc, state, plan, hop.pool, ask, conversation, nxt, cuts=cutting)
            if isinstance(pooled, CutsHeld):
                passed.append(_Passed(h, hop.name, hops[h + 1].name, pooled.skipped))
                continue
            if isinstance(pooled, ErrorType):  # no deployment could take it now, and a later hop is left
                _steered(svc, state, hop.name, hops[h + 1].name, pooled)
                continue
            if isinstance(pooled, Failure):
                refused = refused or pooled
                if nxt is not None:
                    continue
                back = _gone_back(hops, passed)
                if back is not None:
                    return await send_chain(svc, state, plan, back, call_for, conversation, cuts=False)
                return Sent(last.outcome if last is not None else refused, last.call if last else None)
            # The last hop is a pool that answered by itself (every deployment sits out): no
            # later hop carried the request, so the held ones are asked after all, as after a hop
            # that cannot carry it. Its 429 was the answer, no upstream asked, while the held hop
            # had recovered (review). Asked with their share only, and their failure gives way to
            # the pool's answer: given all the client's time, a held hop still hung turned the
            # pool's 429 (with its reset) into a 504 at 57 s (a second review).
            back = _gone_back(hops, passed) if pooled.call is None and nxt is None else None
            if back is not None:
                plan.answer_in_hand = True
                try:
                    held = await send_chain(svc, state, plan, back, call_for, conversation, cuts=False)
                finally:
                    plan.answer_in_hand = False
                return pooled if isinstance(held.outcome, Failure) else held
            sent = pooled
        else:
            up = hop.members[0]
            why = await _steer_past(svc, up, state.model) if nxt is not None else None
            if why is not None:
                _steered(svc, state, hop.name, hops[h + 1].name, why)
                continue
            if nxt is not None and cutting:
                left = _cut_lately(svc, state, up)
                if left is not None:
                    passed.append(_Passed(h, hop.name, hops[h + 1].name, ((up.cfg.name, left),)))
                    continue
            call = ask(up)
            if isinstance(call, Failure):
                log.debug({"request_id": state.request_id, "event": "cannot_carry", "upstream": up.cfg.name})
                svc.tracing.event(state, "cannot_carry", {"upstream": up.cfg.name})
                refused = refused or call
                if nxt is not None:
                    continue
                back = _gone_back(hops, passed)
                if back is not None:
                    return await send_chain(svc, state, plan, back, call_for, conversation, cuts=False)
                return Sent(last.outcome if last is not None else refused, last.call if last else None)
            moves = _to_answer_in_hand if nxt is None and plan.answer_in_hand else \
                None if nxt is None else _mover(svc, up, nxt)
            outcome = await send_one(svc, state, plan, call, call.body,
                                     retries_cap=retries_cap, moves_on=moves)  # fmt: skip
            sent = Sent(outcome, call)
        last = sent
        outcome = sent.outcome
        if nxt is None or not isinstance(outcome, Failure):
            return sent
        here = sent.call.up if sent.call is not None else hop.members[-1]
        if not fails_over(svc, outcome, here, nxt) or not plan.head_room():
            return sent  # (or too little is left before the client gives up for another to answer)
        c = outcome.classification
        state.fallbacks += 1
        svc.tracing.moving_on(state, hops[h + 1].name)
        svc.telemetry.fallbacks.labels(hop.name, hops[h + 1].name, c.type.value).inc()
        log.debug({"request_id": state.request_id, "event": "fallback", "from": hop.name,
                   "to": hops[h + 1].name, "status": outcome.status, "error_type": c.type.value})  # fmt: skip
        if hop.pool is None and c.type is ErrorType.RATE_LIMIT and c.reset_at_ms is not None:
            await svc.store.reset_set(circuit_key(here.cfg.name, state.model), c.reset_at_ms)
    if last is None:  # every hop was passed over: the last one's refusal answers
        back = _gone_back(hops, passed)
        if back is not None:
            return await send_chain(svc, state, plan, back, call_for, conversation, cuts=False)
        assert refused is not None
        return Sent(refused, None)
    return last


@dataclass(frozen=True, slots=True)
class _Passed:
    """A hop gone past for a head cut: its place in the route, the steering it is told as,
    and the upstreams (or the pool's deployments) held, with the seconds left of each hold."""

    hop: int
    frm: str
    to: str
    held: tuple[tuple[str, float], ...]


def _gone_back(hops: tuple[Hop, ...], passed: list[_Passed]) -> Route | None:
    """The hops gone past for a head cut, as the route to ask after all (no later hop could
    carry the request); None when none was."""
    return Route.of([hops[p.hop] for p in passed]) if passed else None


def _told(svc: Services, state: RequestState, p: _Passed) -> None:
    for upstream, left_s in p.held:
        skipped_cut(svc, state, upstream, left_s)
    _steered(svc, state, p.frm, p.to, ErrorType.PROVIDER_UNAVAILABLE)


def _rest(route: Route, up: UpstreamRuntime) -> Route | None:
    """The hops of ``route`` after the one ``up`` belongs to; None when it is the last."""
    for h, hop in enumerate(route.hops):
        if any(m is up for m in hop.members):
            return Route.of(list(route.hops[h + 1 :])) if h + 1 < len(route.hops) else None
    return None


def onward(svc: Services, route: Route, up: UpstreamRuntime) -> Onward | None:
    """How a request sent again to ``up`` is held to the chain's rule while a later hop is left."""
    rest = _rest(route, up)
    if rest is None:
        return None
    return Onward(svc.cfg.fallback.retries_per_upstream, _mover(svc, up, rest.hops[0].members[0]))


async def resume_route(
    svc: Services, state: RequestState, plan: RetryPlan, route: Route,
    call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None, sent: Sent,
) -> Sent:  # fmt: skip
    """The rest of the route after ``sent`` (a fixed request's failure on its upstream), when
    that failure moves on; else ``sent`` as it is. A fixed request answered by a pool deployment
    is that pool's answer (``answered_fixed``: its conversation's home follows)."""
    outcome, call = sent.outcome, sent.call
    if call is None:
        return sent
    if not isinstance(outcome, Failure):
        await answered_fixed(svc, state, call)
        return sent
    rest = _rest(route, call.up)
    if rest is None or not fails_over(svc, outcome, call.up, rest.hops[0].members[0]):
        return sent
    c = outcome.classification
    state.fallbacks += 1
    svc.tracing.moving_on(state, rest.hops[0].name)
    svc.telemetry.fallbacks.labels(call.up.cfg.name, rest.hops[0].name, c.type.value).inc()
    log.debug({"request_id": state.request_id, "event": "fallback", "from": call.up.cfg.name,
               "to": rest.hops[0].name, "status": outcome.status, "error_type": c.type.value})  # fmt: skip
    after = await send_chain(svc, state, plan, rest, call_for, conversation)
    return after if after.call is not None else Sent(after.outcome, call)


def _to_answer_in_hand(_: Classification) -> bool:
    """Every failure gives way to the answer in hand (``RetryPlan.answer_in_hand``), as to a
    fallback: a timeout is not waited out again on the same upstream."""
    return True


def _mover(svc: Services, up: UpstreamRuntime, nxt: UpstreamRuntime) -> Callable[[Classification], bool]:
    return lambda c: fails_over_class(svc, c, up, nxt)


async def _steer_past(svc: Services, up: UpstreamRuntime, model: str | None) -> ErrorType | None:
    """Why to skip an upstream that would refuse: its circuit is open or its rate limit has
    not reset; None: it may be asked."""
    if await up.circuit.is_open(model):
        return ErrorType.PROVIDER_UNAVAILABLE
    reset_at_ms = await svc.store.reset_get(circuit_key(up.cfg.name, model))
    return ErrorType.RATE_LIMIT if reset_at_ms is not None and reset_at_ms > svc.wall() * 1000 else None


def _cut_lately(svc: Services, state: RequestState, up: UpstreamRuntime) -> float | None:
    """The seconds left of the hold on ``up`` when a request like this one (Gemini CLI's, whose
    own head time is short) was cut there at its share lately: it goes to the fallback at once,
    where that one went (policy/head_cuts.py); None: it asks ``up``. Clients that wait longer
    always ask ``up``."""
    return svc.head_cuts.holds(circuit_key(up.cfg.name, state.model))


def _steered(svc: Services, state: RequestState, frm: str, to: str, why: ErrorType) -> None:
    state.fallbacks += 1
    svc.telemetry.fallbacks.labels(frm, to, why.value).inc()
    log.debug({"request_id": state.request_id, "event": "steered", "upstream": frm, "to": to,
               "error_type": why.value})  # fmt: skip
    svc.tracing.event(state, "steered", {"upstream": frm, "error_type": why.value})


