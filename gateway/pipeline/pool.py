"""One hop of a route that is a pool: pick a deployment, move to a sibling when its key cannot
serve, and apply the rate-limit rule only when every sibling is sitting out.

    pick      the conversation's home when it may serve (affinity; a conversation new here
              claims one, the same on every replica, from its second turn: a first turn takes
              the strategy's pick unclaimed, unless under ``weighted`` that is not what a
              second turn elsewhere would propose; a home that failed or sat out a turn of the
              conversation's main model moves to the sibling that answered it), else the next
              of its rendezvous order that may; no conversation: the pool's strategy over those
              that may. May serve:
              not sitting out (a rate limit until its reset, headroom predicted gone, an
              exhausted or refused key), circuit not open. A request with a short head time
              (Gemini CLI's) also goes past one cut lately at its share (policy/head_cuts.py),
              to a sibling, else to the later hop; with neither it asks it
    send      one first attempt; a failure another key would not meet (rate_limit, budget,
              provider_unavailable, auth on the operator's key) sits that deployment out as
              long as it says and moves to the next at once: no backoff, one deadline
    all out   with no later hop, a rate limit waits for the earliest sibling's reset when
              that is within ``max_retry_after_s`` (one retry of the class), else goes back
              with that reset; with a later hop, the request moves on there. None may serve
              for other reasons (keys, open circuits): the class of the soonest back

A request that continues what the provider stored for one deployment's key (a Responses turn
chained by ``previous_response_id``, a ``conversation``, a stored response fetched by id) goes
to that deployment alone (``stored_route``): the pool is that one deployment for it, which it
waits for or is answered with the reset of, as its key sits out (routing/stored.py). One whose
deployment is not known (made before the gateway, or forgotten) is sent to each that may serve in
turn, once, while each answers 400 ``previous_response_not_found``; the one that answers is
remembered.

Request errors never move; an overflow moves only to a sibling with a larger window (with
``fallback.context_overflow``). Siblings count as fallbacks in the multiplication rule: each
costs one first attempt, the class's retries are spent on the last one tried, or, when that one
cannot serve at all (a refused key, no credit), on the last that failed for an outage.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from gateway.apis.responses.wire import ResponsesStreamReader
from gateway.errors import Classification, ErrorType
from gateway.pipeline.attempt import Call
from gateway.pipeline.outcome import Failure, Outcome, RequestState, Success, gateway_failure
from gateway.pipeline.send import (
    SETTLED,
    Remade,
    Sent,
    fails_over,
    fails_over_class,
    note_reset,
    send_one,
    skipped_cut,
    waited_and_confirmed,
)
from gateway.policy.breaker import circuit_key
from gateway.policy.retry import HEAD_FLOOR_S, RetryPlan, StopReason
from gateway.policy.retry_after import reset_at_ms, restamped, restamped_body
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.routing.pools import (
    Deployment,
    SitOut,
    break_reason,
    conversation_order,
    estimates_wait,
    first,
    first_home,
    for_conversation,
    moves_to_sibling,
    order,
    relayed_scope,
    sit_out,
)
from gateway.routing.stored import answer_id, not_found_here
from gateway.services import Hop, PoolRuntime, Route, Services, UpstreamRuntime
from gateway.state.affinity import AffinityTable
from gateway.state.pools import PoolState
from gateway.tracing.attrs import P

log = logging.getLogger("gateway.decisions")
AnOutcome = TypeVar("AnOutcome", bound=Outcome)

_RESETS = (SitOut.RATE_LIMIT, SitOut.HEADROOM)  # sit-outs that end at a rate limit's reset
# Failures of a deployment's key (it sits out), as opposed to the provider's or the request's.
_SAT_OUT = frozenset({ErrorType.RATE_LIMIT, ErrorType.BUDGET, ErrorType.AUTH})


# The most times one request looks again for room the estimates in flight hold (each after the
# next read of the records or an answer here): a bound beside its seconds, should the clock
# and the sleep disagree (a test's recorded sleeps).
_MAX_LOOKS = 2_000


@dataclass(slots=True)
class _Waited:
    """A request's waits for room that the estimates of calls in flight held: bounded together
    by ``retry.max_retry_after_s`` (the longest it waits for any reset), apart from its retries.
    ``idle``: it waited for a rate limit's reset (a retry) and has sent nothing since; what it
    waited on since for resets moved later (``moved_s``) is bounded the same way."""

    spent_s: float = 0.0
    looks: int = 0
    idle: bool = False
    moved_s: float = 0.0
    # The calls made since it last waited for a reset; None: it has not waited for one. The
    # first is the wait's retry; each further one is another retry of the class.
    resumed: int | None = None


def _may_wait_s(svc: Services, plan: RetryPlan, waited: _Waited) -> float:
    """How much longer the request may wait for room the estimates in flight hold: within its
    bound of such waits, its deadline, and what its client leaves it before the head."""
    if waited.looks >= _MAX_LOOKS:
        return 0.0
    left = min(svc.cfg.retry.max_retry_after_s - waited.spent_s, plan.remaining_s())
    if plan.head_by is not None:
        left = min(left, plan.head_by - plan.now() - HEAD_FLOOR_S)
    return max(0.0, left)


async def _wait_for_answers(svc: Services, ps: PoolState, names: Sequence[str], wait_s: float) -> float:
    """Waits ``wait_s`` (the injected sleep), or less: until a call in flight here on one of
    ``names`` is answered (``PoolState.answered``). The seconds it counts as waited: all of
    ``wait_s`` when the sleep ended it, else the clock's."""
    started = svc.monotonic()
    sleeping = asyncio.ensure_future(svc.sleep(wait_s))
    try:
        done, _ = await asyncio.wait({sleeping, *ps.answered(names)}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeping.cancel()
    return wait_s if sleeping in done else min(wait_s, max(0.0, svc.monotonic() - started))


async def _slept_or_added(svc: Services, pool: PoolRuntime, wait_s: float) -> bool:
    """Waits ``wait_s`` (the injected sleep), or less: until a reload puts in force a
    deployment of the pool that ``pool`` (the config the request started on) lacks. True: woken
    so. Slept out whole, requests waiting 25 s for two limited keys were answered by them
    after it, and the key an operator added 2 s in to end the outage got none of them (review)."""
    ps = svc.pool_state
    assert ps is not None
    started = svc.monotonic()
    left_s = wait_s
    while True:
        reload = ps.next_reload()
        sleeping = asyncio.ensure_future(svc.sleep(left_s))
        reloaded = asyncio.ensure_future(reload.wait())
        try:
            await asyncio.wait({sleeping, reloaded}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeping.cancel()
            reloaded.cancel()
        if reload.is_set() and ps.added(pool.cfg.name, pool.member_cfgs):
            return True
        if sleeping.done() and not sleeping.cancelled():
            return False
        left_s = wait_s - (svc.monotonic() - started)  # a reload that added none: the rest of it
        if left_s <= 0:
            return False


def _with_added(pool: PoolRuntime, added: Sequence[UpstreamRuntime]) -> PoolRuntime:
    """``pool`` with the deployments a reload added since the request began (as that config
    sends to them): a request that waited goes on on its own config, and on those too. One
    of the same name (another key now) replaces its old self."""
    names = {up.cfg.name for up in added}
    kept = tuple(m for m in pool.members if m.cfg.name not in names)
    return PoolRuntime(pool.cfg, kept + tuple(added), pool.affinity, pool.renamed)


@dataclass(frozen=True, slots=True)
class CutsHeld:
    """Every deployment of a pool that may serve was cut lately for a request like this one
    (policy/head_cuts.py) and a later hop is left: the request goes there, unless no later hop
    can carry it (pipeline/chain.py then comes back with ``cuts`` off)."""

    skipped: tuple[tuple[str, float], ...]  # (deployment, seconds left of its hold)


async def send_pool(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime,
    call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None,
    nxt: UpstreamRuntime | None, cuts: bool = False, skip: frozenset[str] = frozenset(),
) -> Sent | Failure | ErrorType | CutsHeld:  # fmt: skip
    """The pool's answer; a Failure: no deployment can carry the request (no translation);
    an ErrorType: none may serve now, for that reason, and ``nxt`` (a later hop) is left.
    ``cuts``: the request goes past deployments cut lately for one like it (``send.cuts_apply``)
    to a sibling that may serve, or (``CutsHeld``) to ``nxt``; with neither, it asks them.
    ``skip``: deployments it already failed on (a rescue's), asked again only after a wait."""
    passed: dict[str, float] = {}  # deployments this request went past for a head cut: hold left
    met: list[Sent] = []  # the provider's 429s it moved on from or waited out, not noted yet
    answer = await _sent_pool(svc, state, plan, pool, call_for, conversation, nxt, cuts, passed, met, skip)
    if not (isinstance(answer, Sent) and isinstance(answer.outcome, Success)):
        # Only now has the request ended its attempts on those keys' rate limits. Noted as each
        # was met, a request that moved on (or waited for the pool's earliest reset, and was then
        # served) made a concurrent one's 429 on the same key final: two requests at once on a
        # pool of two keys limited for 5 s, one was served after the wait and the other answered
        # 429 at once, `x-should-retry: false` (review).
        for sent in met:
            if sent.call is not None:
                await note_reset(svc, state, sent.call, sent.outcome)
    # Told once the request is done with the pool: a held deployment asked after all (its sibling
    # failed, ``_moves_on``) was never gone past, and counted at once it was (review). Those a
    # ``CutsHeld`` names are the chain's to tell, once a later hop carries the request (counted
    # twice, here and there: a second review).
    if isinstance(answer, CutsHeld):
        for name, _ in answer.skipped:
            passed.pop(name, None)
    for name, left_s in passed.items():
        skipped_cut(svc, state, name, left_s)
    return answer


async def _sent_pool(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime,
    call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None,
    nxt: UpstreamRuntime | None, cuts: bool, passed: dict[str, float], met: list[Sent],
    skip: frozenset[str] = frozenset(),
) -> Sent | Failure | ErrorType | CutsHeld:  # fmt: skip
    ps = svc.pool_state
    assert ps is not None
    cfg, members, model = pool.cfg, pool.members, state.model
    need = state.pool_need  # the tokens a deployment must have left for it
    tried: set[str] = set(skip)
    last: Sent | None = None
    limited: Sent | None = None  # the last provider 429 of this request: what a client is shown
    # The last deployment whose outage moved the request on before its retries: owed them
    # once every sibling proved unable to serve (``_owed``).
    unspent: Sent | None = None
    back: Sent | None = None  # going back to it now
    refused: Failure | None = None
    # A request that continues what the provider stored for one deployment's key (a chained
    # Responses turn) goes there alone: every other key is answered "not found".
    stored = state.stored_on if state.stored_on in pool.names else None
    # A chained turn whose previous response no deployment is known to hold: each that may
    # serve is asked (once) until one holds it. Sent to one alone, another project's 400 "not
    # found" was final (an agent's turn ended) while a sibling held the response.
    search = state.stored_search if stored is None else None
    not_held: set[str] = set()  # the deployments that answered that they do not hold it
    # A conversation's home (the deployment holding its prompt cache) is decided at its first
    # turn and then held, on every replica (gateway/state/affinity.py): recomputed from the
    # weights instead, a reload that changed one moved live conversations, uncounted.
    table = pool.affinity if conversation and stored is None else None
    home = await table.current(conversation, pool.names) if table is not None and conversation else None
    homed = table is None or home in pool.names  # else claimed once a deployment may serve
    decided = False  # this request held or claimed ``home``: no turn was answered there yet
    opening = True  # the request's first pick: affinity may decide it
    removed: set[str] = set()  # deployments a reload took out while this request waited
    big = need[0] + need[1]  # its size as ``over_window`` remembers one
    over: set[str] = set()  # deployments passed by as too small for it (``too_big``)
    waited = _Waited()  # its waits for room the estimates in flight held (``estimates_wait``)
    while True:
        if not ps.fresh(cfg.name, model):
            await ps.refresh(cfg.name, pool.member_cfgs, model, pool.circuits)
        now_ms = svc.wall() * 1000
        views = [ps.view(i, up.cfg, model, now_ms, need) for i, up in enumerate(members)
                 if (stored is None or up.cfg.name == stored) and up.cfg.name not in removed]  # fmt: skip
        ready = [v for v in views if v.serves_at(now_ms) and v.name not in tried
                 and not await _refusing(members[v.slot], model)]  # fmt: skip
        if table is not None and len(ready) < len(views):
            table.saw_out([v.name for v in views if not v.serves_at(now_ms)])
        if back is not None:
            assert back.call is not None
            ready = [v for v in ready if v.name == back.call.up.cfg.name]
            back = back if ready else None
        if cuts and ready and back is None and stored is None:
            # As a plain hop is gone past for a short-budget client (pipeline/chain.py): a hung
            # deployment, cut at its share before a later hop, cost every Gemini CLI request
            # 28.5 s while its cut was remembered and never read here (review).
            fresh, held = _past_cuts(svc, model, ready)
            if held and fresh:
                passed.update((name, left_s) for name, left_s in held if name not in passed)
                ready = fresh
            elif held and nxt is not None:
                if last is None:
                    return CutsHeld(tuple(held))
                if _moves_on(svc, last, nxt):
                    ready = []  # a sibling failed: the request moves on to the later hop (below)
                # else the held ones are asked: the later hop would not take the sibling's failure
        others = len(ready) > 1  # each that may serve: one passed by below is still a sibling
        if big and others and back is None and stored is None:
            # A request at least as large as one a deployment refused as over its tokens per
            # minute lately goes to the others that may serve, not there first: each large
            # request cost the refused call (an Azure deployment of small TPM weighted first).
            # With none other, it is asked all the same: never refused for the memory alone.
            fit = [v for v in ready if not ps.too_big(members[v.slot].cfg, model, big, now_ms)]
            if fit and len(fit) < len(ready):
                over.update(v.name for v in ready if v not in fit)
                ready = fit
        if ready:
            new = False  # its first turn: the strategy picked its home
            if not homed:
                assert table is not None and conversation is not None
                proposed = _held_or_first(svc, pool, table, conversation, ready)
                if state.opens_conversation and _unclaimed(svc, pool, table, conversation, views, proposed):
                    # No claim: a one-turn request leaves no key in the store.
                    home, new = _hold(table, conversation, proposed)
                else:
                    home, new = await _claim(svc, pool, table, conversation, proposed)
                homed, decided = True, new
            if _retries_spent(plan, waited, last):
                # Every call after a wait for the pool's reset is a retry of the rate limit, its
                # first paid by the wait: each deployment costs one first attempt and the class's
                # retries are spent across them (the multiplication rule). Tried again after every
                # wait, a pool of two keys limited for good cost 8 calls, four on each, where one
                # upstream costs 4 and the rule says 5 (review).
                ready = []
        if ready:
            pick, why = _pick(svc, pool, ready, home, conversation, new)
            if stored is not None:
                why = "stored"
            up = members[pick.slot]
            passed.pop(up.cfg.name, None)  # asked after all: not gone past
            call = call_for(up)
            if isinstance(call, Failure):
                tried.add(up.cfg.name)
                refused = refused or call
                continue
            if ps.takes(up.cfg, model):
                # Its configured limits are taken in the store now, atomically across replicas:
                # used up, it sits out (its view says so from now on) and the pick goes on.
                call.taken = await ps.take(up.cfg, model, round(len(call.body) / BYTES_PER_TOKEN))
                if call.taken is None:
                    continue
            if back is None:  # going back is a retry of that deployment, not a pick
                _picked(svc, state, pool, up, "stored_search" if not_held else why if opening else "moved")
            opening = False
            siblings_left = others  # re-ranked after a failure, without the one that failed
            # Siblings that sit out only until a rate limit's reset: a 429 here is waited out at
            # the pool's earliest reset (``_all_sitting_out``), whichever key that is, not at this
            # key's own (which kept a request on one key while its siblings came back).
            resetting = any(_resets_later(v, now_ms) for v in views if v.slot != pick.slot)
            after = back.outcome if back is not None and isinstance(back.outcome, Failure) else None
            back = None
            if waited.resumed is not None:
                if waited.resumed and _rate_limited_last(last):
                    plan.retries[ErrorType.RATE_LIMIT] = plan.retries.get(ErrorType.RATE_LIMIT, 0) + 1
                    state.retries += 1
                    svc.telemetry.retries.labels(up.cfg.name, ErrorType.RATE_LIMIT.value).inc()
                waited.resumed += 1
            outcome = await _send(svc, state, plan, call, siblings_left, nxt, resetting, after)
            waited.idle = False
            if call.taken is not None:  # taken, never sent (its circuit refused it meanwhile)
                ps.untaken(up.cfg, model, call.taken)
            last = Sent(outcome, call)
            if outcome is state.key_refusal:
                # The client's key cannot hold another attempt: its answer, whatever the pool
                # does. Taken for the deployment's 429, it sat a healthy key out for every
                # client (2 s, four times over) and the request waited 6 s to be told "every
                # deployment of pool 'p' is rate limited" (review).
                return last
            if _moves_within(siblings_left, nxt, resetting) and isinstance(outcome, Failure):
                met.append(last)
            failed = isinstance(outcome, Failure)
            turn = None
            if failed or home is not None or search is not None:
                broke = None
                if home is not None and not decided and not not_held:
                    broke = break_reason(home, views, tried, now_ms, passed, over)
                turn = PoolTurn(pool, up.cfg.name, conversation if home is not None else None, home, broke,
                                bool(not_held), search)  # fmt: skip
            # Should this refusal be the pool's answer, and the pipeline send it again fixed and
            # answered there (``answered_fixed``), that answer is this deployment's all the same.
            state.pool_turn = turn if failed else None
            if not isinstance(outcome, Failure):
                if turn is not None:
                    await _settle(svc, state, turn, call)
                if big and ps.too_big(up.cfg, model, big, now_ms):
                    await ps.fits_window(up.cfg, model)  # asked as the last left, and it took it
                return last
            c = outcome.classification
            if c.type is ErrorType.RATE_LIMIT and outcome.own is None:  # the provider's, not the limits'
                limited = last
            if c.type is ErrorType.PROVIDER_UNAVAILABLE and plan.stopped is StopReason.MOVING_ON:
                unspent = last
            if search is not None and not_found_here(outcome.status, c.provider_code):
                not_held.add(up.cfg.name)  # another key's, not this one's: nothing wrong with this key
            else:
                await _sit_out(svc, state, pool, up, c)
                if c.per_minute and big and up.cfg.api_key is not None:  # as a sit-out: the key's own
                    await ps.over_window(up.cfg, model, big)
                bigger = any((m.cfg.context_window or 0) > (up.cfg.context_window or 0) for m in members)
                if not moves_to_sibling(c, own_key=up.cfg.api_key is not None, bigger_window=bigger,
                                        overflow_moves=svc.cfg.fallback.context_overflow):  # fmt: skip
                    return last
            tried.add(up.cfg.name)
            if c.type is ErrorType.CONTEXT_OVERFLOW and not c.per_minute:  # only a larger window can take it
                window = up.cfg.context_window or 0
                tried.update(m.cfg.name for m in members if (m.cfg.context_window or 0) <= window)
                siblings_left = any(m.cfg.name not in tried for m in members)
            elif not plan.head_room():
                siblings_left = False  # the client will have given up before a sibling could answer
            elif not siblings_left:
                # A sibling whose reset came while this one was tried (milliseconds after the
                # earliest, this one's) serves now: the pool's earliest reset was this one's next
                # (2 s more, measured; one run in five).
                later = svc.wall() * 1000
                siblings_left = any(not v.serves_at(now_ms) and v.name not in tried
                                    and ps.view(v.slot, members[v.slot].cfg, model, later,
                                                need).serves_at(later)
                                    for v in views)  # fmt: skip
            if siblings_left:
                svc.telemetry.child(svc.telemetry.pool_moves, cfg.name, up.cfg.name, c.type.value).inc()
                log.debug({"request_id": state.request_id, "event": "sibling", "pool": cfg.name,
                           "from": up.cfg.name, "status": outcome.status,
                           "error_type": c.type.value})  # fmt: skip
                continue
        # No deployment is left to try.
        if cuts and passed.keys() - tried and last is not None and plan.head_room() \
                and not _moves_on(svc, last, nxt):  # fmt: skip
            # Siblings answered in place of deployments held for a head cut, and failed in a way
            # the route does not move on for (a refused key, with no later hop or one that only
            # takes outages): the held ones are asked before the request gives up. Ended there, a
            # sibling's API_KEY_INVALID was the answer, the held one never asked, where before the
            # memory it answered or its cut moved the request on to the fallback (review).
            cuts = False
            continue
        if unspent is not None and unspent.call is not None and last is not None and _cannot_serve(last):
            # The request ends on a sibling that cannot serve at all (a refused key, no credit, no
            # such model): the deployment that failed for an outage gets its retries, as the
            # last one tried would have had them (one retry of the class per wait, the request's
            # counts and deadline). Ended by that sibling's error, a request that a 503 blip had
            # moved on was answered 502 or 402, not retryable, while the next was served (audit).
            tried.discard(unspent.call.up.cfg.name)
            back, unspent = unspent, None
            continue
        if last is None and refused is not None:
            return refused
        if not views:  # every deployment it may go to was taken out by a reload while it waited
            return Sent(_reloaded_away(state, pool), None)
        if nxt is not None:  # none tried: the route steers past the pool
            if last is not None and _cannot_serve(last) and last.call is not None \
                    and last.call.up.cfg.api_key is not None:  # fmt: skip
                # Every key it tried cannot serve for a while (refused, out of credit, no such
                # model): the pool cannot, and the later hop takes it as it takes the next
                # request, which finds them sitting out. Ended on the last key's failure,
                # whatever fallback.when says of its class, the request that found two keys
                # revoked was answered 502 while the next one went to the fallback (review). A
                # client's own forwarded credential refused is the client's: it stays the answer.
                assert isinstance(last.outcome, Failure)
                return last.outcome.classification.type
            return last if last is not None else _why_none_serves(views, now_ms)
        added = ps.added(cfg.name, pool.member_cfgs) if stored is None else ()
        if added:  # put in by a reload since the request began, before it would wait for a reset
            pool = _with_added(pool, added)
            members = pool.members
            removed -= {up.cfg.name for up in added}
            continue
        now_ms = svc.wall() * 1000
        if last is None and not any(v.out_until_ms > now_ms for v in views):
            # Every circuit is open: the first deployment refuses (or probes) as an upstream does.
            up = members[views[0].slot]
            call = call_for(up)
            if isinstance(call, Failure):
                return call
            _picked(svc, state, pool, up, "circuit_open")
            return Sent(await send_one(svc, state, plan, call, call.body), call)
        if not_held and last is not None and _not_held(last):
            # Every deployment that may serve was asked and none holds it. One that sits out
            # until a rate limit's reset (a 429 of this request's included) may: the rate-limit
            # rule applies to it, as to a pool none of whose deployments may serve; with none
            # such, "not found" is the answer.
            if not any(_resets_later(v, now_ms) and v.name not in not_held for v in views):
                return last
            answered = await _all_sitting_out(svc, state, plan, pool, limited, tried, limited, searching=True,
                                              removed=removed, waited=waited)  # fmt: skip
        else:
            answered = await _all_sitting_out(svc, state, plan, pool, last, tried, limited, stored,
                                              removed=removed, waited=waited)  # fmt: skip
        if answered is not None:
            return answered
        # Waited for a reset. The request finishes on the config it started on (gateway/live.py),
        # but not on a key a reload took out of the pool meanwhile (a leaked or revoked one, as
        # likely as not): one was called right after its reset, 4.5 s after the reload (audit).
        removed |= ps.gone(cfg.name, pool.member_cfgs)
        added = ps.added(cfg.name, pool.member_cfgs) if stored is None else ()
        if added:  # a key put in the pool by a reload (to end an outage, say) may serve it now
            pool = _with_added(pool, added)
            members = pool.members
            removed -= {up.cfg.name for up in added}
        # Of those it may go to: a chained turn's stored deployment alone (that one removed, a
        # sibling would answer "not found"), else every member.
        if all(m.cfg.name in removed for m in members if stored is None or m.cfg.name == stored):
            return Sent(_reloaded_away(state, pool), None)
        tried.update(not_held)  # asked once: a key that came back since holds it no more than before
        opening = False  # waited for the earliest reset: it may serve again


@dataclass(frozen=True)
class PoolTurn:
    """What a pool does with an answer of ``deployment``, decided as it sent the request there:
    the conversation's home (``_answered``; ``conversation`` None: none is kept, or the request
    continues a stored response) and the stored response searched for (``_found_stored``)."""

    pool: PoolRuntime
    deployment: str
    conversation: str | None
    home: str | None
    broke: str | None  # why the home did not answer, as ``_answered`` takes it
    held_elsewhere: bool  # a sibling answered that it does not hold the stored response
    search: str | None


async def rescued_elsewhere(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime, up: UpstreamRuntime,
    failed: Failure, call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None,
) -> Sent | None:  # fmt: skip
    """A rescue (a compressed request) that deployment ``up`` refused for what moves a request
    to a sibling (its key limited, out of credit or refused, an outage): ``up`` sits out as after
    any such failure, and the rescue goes to the pool's others as a request would (``call_for``
    makes each one's rescue). None: it does not move, or no deployment was asked."""
    c = failed.classification
    own_key = up.cfg.api_key is not None
    if failed.own is not None or not moves_to_sibling(c, own_key=own_key, bigger_window=False,
                                                      overflow_moves=False):  # fmt: skip
        return None
    await _sit_out(svc, state, pool, up, c)
    skip = frozenset({up.cfg.name})
    answer = await send_pool(svc, state, plan, pool, call_for, conversation, None, skip=skip)
    return answer if isinstance(answer, Sent) and answer.call is not None else None


async def resend_in_pool(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime, call: Call, body: bytes,
    remade: Remade, call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None,
    moved: list[Call],
) -> Outcome:  # fmt: skip
    """A rescue (a request sent again changed: compressed, without a refused parameter) of a
    deployment of ``pool``: a refusal there that moves a request to a sibling is not retried
    there, and the rescue goes to the siblings (``rescued_elsewhere``), each one's made by
    ``remade`` from its call; ``moved`` gets the call that answered. Kept on its key, a 429 of
    20 s was waited out while a sibling was free, and one of an hour was the client's answer.
    An overflow is the rescue's own answer: a sibling's window is no larger."""
    own_key = call.up.cfg.api_key is not None

    def moves(c: Classification) -> bool:
        return moves_to_sibling(c, own_key=own_key, bigger_window=False, overflow_moves=False)

    outcome = await send_one(svc, state, plan, call, body, retries_cap=0, moves_on=moves)
    if not isinstance(outcome, Failure) or outcome.classification.type is ErrorType.CONTEXT_OVERFLOW:
        return outcome

    def rescue_for(up: UpstreamRuntime) -> Call | Failure:
        base = call_for(up)
        return base if isinstance(base, Failure) else remade(base)

    sent = await rescued_elsewhere(svc, state, plan, pool, call.up, outcome, rescue_for, conversation)
    if sent is None or sent.call is None:
        return outcome
    moved.append(sent.call)
    return sent.outcome


async def _settle(svc: Services, state: RequestState, turn: PoolTurn, call: Call) -> None:
    if turn.search is not None:
        await _found_stored(svc, state, turn.pool, call, turn.search, turn.held_elsewhere)
    table = turn.pool.affinity
    if turn.conversation is not None and turn.home is not None and table is not None:
        await _answered(svc, turn.pool, table, turn.conversation, turn.home, call.up, call, state.model or "",
                        turn.broke, held_elsewhere=turn.held_elsewhere)  # fmt: skip


async def answered_fixed(svc: Services, state: RequestState, call: Call) -> None:
    """A pool deployment's refusal that the pipeline sent again fixed (forward.py's fixes: a
    budget lowered, a parameter or another account's reasoning left out) and that was answered
    there: the pool's answer as though the deployment had answered at once (``send_pool``): the
    conversation's home follows it, a stored response searched for is remembered there. Left to
    the pool's own answers, a turn moved off a home limited for 3 s was refused by the sibling
    for the home's reasoning and answered without it, and the home stayed: the next turn went
    back with the sibling's reasoning, was refused there too, and lost the sibling's cache
    (audit, Codex over keys of different organizations). Not a compress-and-retry's answer: the
    deployment took only the compressed conversation, and the client sends the whole one again."""
    turn, state.pool_turn = state.pool_turn, None
    if turn is not None and turn.deployment == call.up.cfg.name and call.up.pooled:
        await _settle(svc, state, turn, call)


async def _answered(svc: Services, pool: PoolRuntime, table: AffinityTable, conversation: str, home: str,
                    up: UpstreamRuntime, call: Call, model: str, broke: str | None,
                    held_elsewhere: bool = False) -> None:  # fmt: skip
    """A conversation's turn answered by ``up``. ``broke``: why its home did not answer it, None
    when this request chose that home (``decided``: no turn was answered there yet) or the home
    did not hold the response this turn is chained to (``held_elsewhere``: its previous turn,
    and so its cache, are the sibling's, whatever the model)."""
    size = len(call.body)
    if up.cfg.name == home:
        table.answered(conversation, home, model, size)
        return
    moved = True  # a break that moves nothing (a side call) is this request's own
    # The sibling that answered holds the conversation's prefix now, and the home's copy ages
    # out of reach (a 5-minute TTL; a 20-block lookback from the last breakpoint:
    # https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching). Going home after its
    # reset wrote the whole prefix there again: a 20 s limit on the home cost a 20-turn session
    # 45 % more than no limit, staying on the sibling 16 % (measured). However brief the limit,
    # moving costs one write, as going home does: the home follows the cache. A side call of
    # another model (Claude Code's Haiku) writes no cache of the main model's: its break leaves
    # the home (measured: a Haiku 429 on the home moved the Opus session off its cache). Nothing
    # answered here yet: this replica does not know what the home holds, except for a home this
    # request chose, where nothing was cached at all.
    follows = table.follows(conversation, model)
    if held_elsewhere or follows or (follows is None and broke is None):
        _, moved = await table.move(conversation, home, up.cfg.name, pool.names, (model, size))
    # A move another replica or worker made already (its turn met the same sit-out first) is
    # that one's break: counted by each, 3 moves read as 6 breaks (audit).
    if broke is not None and moved:
        svc.telemetry.affinity_breaks.labels(pool.cfg.name, broke).inc()


async def continuing(svc: Services, state: RequestState, route: Route,
                     conversation: str | None) -> list[UpstreamRuntime]:  # fmt: skip
    """The upstreams of ``route`` that may take a broken stream's continuation now, in route
    order: of a pool, the deployments that may serve (none sitting out, no open circuit) in the
    order the request's turn would try them (its conversation's home, then its key's rendezvous
    order; else the strategy's). In config order, unfiltered, a stall's continuation went to a
    key the gateway knew was limited for 2 minutes (a 429, the client's stream ended though a
    third key was free), or revoked (called inside its hour's sit-out)."""
    ps = svc.pool_state
    out: list[UpstreamRuntime] = []
    for hop in route.hops:
        pool = hop.pool
        if pool is None or ps is None:
            out.extend(hop.members)
            continue
        names = {m.cfg.name for m in hop.members}  # a stored response's route: its deployment alone
        if not ps.fresh(pool.cfg.name, state.model):
            await ps.refresh(pool.cfg.name, pool.member_cfgs, state.model, pool.circuits)
        now_ms = svc.wall() * 1000
        ready = [v for i, up in enumerate(pool.members) if up.cfg.name in names
                 and (v := ps.view(i, up.cfg, state.model, now_ms, state.pool_need)).serves_at(now_ms)
                 and not await _refusing(up, state.model)]  # fmt: skip
        table = pool.affinity
        if conversation is not None and table is not None:
            ranked = conversation_order(ready, table.get(conversation, pool.names), conversation)
        else:
            ranked = order(pool.cfg.strategy, ready, svc.rand)
        out.extend(pool.members[v.slot] for v in ranked)
    return out


async def taken(svc: Services, state: RequestState, call: Call, size: int) -> bool:
    """Whether a call of ``size`` bytes may go to its pool deployment under its configured
    ``limits`` (taken in the store now, as every call of a request there is); False: used up,
    it sits out until the minute's end and the call is not made."""
    ps, up = svc.pool_state, call.up
    if ps is None or not up.pooled or not ps.takes(up.cfg, state.model):
        return True
    call.taken = await ps.take(up.cfg, state.model, round(size / BYTES_PER_TOKEN))
    return call.taken is not None


def _why_none_serves(views: list[Deployment], now_ms: float) -> ErrorType:
    """The class a pool none of whose deployments may serve would refuse in: a rate limit
    while one waits for a reset, else its keys' trouble, else (every circuit open) unavailable."""
    out = {v.out_why for v in views if v.out_until_ms > now_ms}
    if out & set(_RESETS):
        return ErrorType.RATE_LIMIT
    if SitOut.BUDGET in out:
        return ErrorType.BUDGET
    return ErrorType.AUTH if SitOut.AUTH in out else ErrorType.PROVIDER_UNAVAILABLE


async def any_deployment(
    svc: Services, pool: PoolRuntime, state: RequestState, tried: frozenset[str] | set[str] = frozenset()
) -> tuple[UpstreamRuntime | None, bool]:
    """The deployment the pool's strategy would pick now among those not ``tried``, for a
    request that is not retried along the pool (its records under ``state.pool_scope``), and
    whether another may serve after it; none may serve: the first for a request's first try
    (its answer is the client's), else None (each that sits out was tried, or is out already)."""
    ps = svc.pool_state
    assert ps is not None
    scope = state.pool_model
    if not ps.fresh(pool.cfg.name, scope):
        await ps.refresh(pool.cfg.name, pool.member_cfgs, state.model, pool.circuits, scope)
    now_ms = svc.wall() * 1000
    views = [ps.view(i, up.cfg, scope, now_ms) for i, up in enumerate(pool.members)]
    ready = [v for v in views if v.serves_at(now_ms) and v.name not in tried]
    if ready:
        return pool.members[first(pool.cfg.strategy, ready, svc.rand).slot], len(ready) > 1
    return (None if tried else pool.members[0]), False


async def send_across(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime,
    call_for: Callable[[UpstreamRuntime], Call | Outcome], stored: UpstreamRuntime | None = None,
    keeps: bool = False,
) -> Outcome:  # fmt: skip
    """A request that is not retried along the pool (counting tokens, an embedding, any path
    relayed as it is): one deployment as the strategy picks it, and on a failure another key
    may not meet (a rate limit, no credit, the operator's key refused, an outage) the next at
    once, that deployment sitting out as it would for the pool's own requests; each is tried
    once, the class's retries spent on the last (waited out on the same key, a count_tokens
    429 kept the request there 3 retries long before it moved, measured). Its records are
    kept apart from its model's generation (``relayed_scope``). ``call_for`` may answer
    instead of sending (a path its API has no translation for). ``stored``: the deployment
    that holds the stored object the request names (a response fetched by id), which alone
    can answer it: sent there only, with the retries one upstream gets. ``keeps``: its answer
    is an object the provider stores (a conversation made), whose deployment is remembered."""
    state.pool_scope = relayed_scope(state.model)
    tried: set[str] = set()
    outcome: Outcome | None = None
    while True:
        if stored is not None:
            up, others = (None if tried else stored), False
        else:
            up, others = await any_deployment(svc, pool, state, tried)
        if up is None:
            break
        call = call_for(up)
        if not isinstance(call, Call):
            return call
        why = "stored" if stored is not None else pool.cfg.strategy if not tried else "moved"
        _picked(svc, state, pool, up, why)
        plan.last_hop, plan.siblings_left = True, others  # siblings serve the same model: see _send
        own_key = up.cfg.api_key is not None

        def moves(c: Classification, own_key: bool = own_key) -> bool:
            return moves_to_sibling(c, own_key=own_key, bigger_window=False, overflow_moves=False)

        sending = send_one(svc, state, plan, call, call.body, retries_cap=0 if others else None,
                           moves_on=moves if others else None)  # fmt: skip
        outcome = await _held(svc, state, up, sending)
        if not isinstance(outcome, Failure):
            if keeps:
                await _remember_stored(svc, pool, up, outcome)
            return outcome
        await _sit_out(svc, state, pool, up, outcome.classification)
        tried.add(up.cfg.name)
        if not moves(outcome.classification) or not plan.head_room():
            return outcome
    assert outcome is not None  # the first deployment is always tried
    return outcome


async def stored_route(svc: Services, state: RequestState, route: Route, object_id: str) -> Route:
    """The route of a request that continues an object the provider stored (a chained Responses
    turn: ``previous_response_id``, ``conversation``): when a pool deployment of ``route`` made
    it, that pool's hop alone, and the request goes to that deployment only
    (``state.stored_on``); else ``route`` as it is (made elsewhere, or forgotten), and the pool
    asks its deployments in turn (``state.stored_search``). Every other key answers 400 "not
    found" (routing/stored.py), a sibling and a fallback alike: a chained turn whose deployment
    is known cannot move, and one whose deployment sits out waits for it or is answered with
    its reset, as a pool of that one deployment would be."""
    ps = svc.pool_state
    if ps is None or not any(hop.pool is not None for hop in route.hops):
        return route
    deployment = await ps.stored_on(object_id)
    for hop in route.hops if deployment is not None else ():
        if hop.pool is not None and deployment in hop.pool.names:
            state.stored_on = deployment
            # The pool still picks (its sit-outs, its wait for a reset); the route's upstreams
            # (its primary, a broken stream's continuation) are that deployment alone.
            return Route.of([Hop(tuple(m for m in hop.pool.members if m.cfg.name == deployment), hop.pool)])
    # Held by no deployment of these pools that the gateway knows of: the pool asks them in turn.
    state.stored_search = object_id
    return route


def stored_deployment(svc: Services, deployment: str | None) -> tuple[PoolRuntime, UpstreamRuntime] | None:
    """The pool and deployment named ``deployment`` (the one that made a stored object), if any."""
    for pool in svc.pools.values() if deployment is not None else ():
        for up in pool.members:
            if up.cfg.name == deployment:
                return pool, up
    return None


async def remember_answer(svc: Services, state: RequestState, call: Call | None, outcome: Outcome) -> None:
    """A Responses answer the provider keeps (``state.keeps_answer``) from a pool deployment
    that speaks Responses itself: which deployment made it is remembered, before the client
    sees its id, so that a turn chained to it goes there (``stored_route``). A translated
    answer's id is the gateway's: its upstream stores nothing."""
    if (call is None or not state.keeps_answer or not call.up.pooled or call.translation is not None
            or call.dialect.api != "responses" or not isinstance(outcome, Success)):  # fmt: skip
        return
    pool = svc.pools.get(state.pool or "")
    if pool is not None:
        await _remember_stored(svc, pool, call.up, outcome)


async def _remember_stored(svc: Services, pool: PoolRuntime, up: UpstreamRuntime, outcome: Success) -> None:
    ps = svc.pool_state
    if ps is None or not 200 <= outcome.status < 300 or pool.cfg.stored_s <= 0:
        return
    reader = outcome.reader
    if isinstance(reader, ResponsesStreamReader):  # its response.created came before the answer's first byte
        made = reader.response.get("id")
        object_id = made if isinstance(made, str) else None
    else:
        object_id = answer_id(outcome.body) if outcome.chunks is None else None
    if object_id is not None:
        await ps.remember_stored(object_id, up.cfg.name, pool.cfg.stored_s)


def _not_held(last: Sent) -> bool:
    """Whether the last answer says that its key holds no stored response of the id the turn
    is chained to."""
    answer = last.outcome
    return isinstance(answer, Failure) and not_found_here(answer.status, answer.classification.provider_code)


async def _found_stored(svc: Services, state: RequestState, pool: PoolRuntime, call: Call, object_id: str,
                        searched: bool) -> None:  # fmt: skip
    """A chained turn that no deployment was known to hold was answered by ``call``'s: its key
    holds the response (another project's is refused), remembered from now on, as though the
    gateway had seen it made. ``searched``: a sibling was asked first."""
    if call.translation is not None or call.dialect.api != "responses":
        return  # a translated turn is refused before any call: this one never continued it
    ps = svc.pool_state
    if ps is not None and pool.cfg.stored_s > 0:
        await ps.remember_stored(object_id, call.up.cfg.name, pool.cfg.stored_s)
    if searched:
        log.info({"request_id": state.request_id, "event": "stored_found", "pool": pool.cfg.name,
                  "deployment": call.up.cfg.name})  # fmt: skip


async def _send(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, siblings_left: bool,
    nxt: UpstreamRuntime | None, resetting: bool = False, after: Failure | None = None,
) -> Failure | Success:  # fmt: skip
    """``after``: this request's earlier failure there, whose retries it goes back for."""
    up = call.up
    moves: Callable[[Classification], bool] | None = None
    cap: int | None = None
    # Only a later hop halves the client's head time, not a sibling: siblings serve the same
    # model, so one slower than half (a thinking model's first token) was cut on each in turn,
    # two calls and a 504 where one call would have answered (review). A hung key among healthy
    # siblings is rarer than a slow model; the CLI's retry of its 504 is picked afresh.
    plan.last_hop, plan.siblings_left = nxt is None, siblings_left
    ends = not _moves_within(siblings_left, nxt, resetting)
    if siblings_left:  # a failure that moves goes to the sibling at once, without a wait
        moves, cap = _always, 0
    elif nxt is not None:
        moves, cap = _mover(svc, up, nxt), svc.cfg.fallback.retries_per_upstream
    elif resetting:
        moves, cap = _rate_limited, 0
    ps, pool = svc.pool_state, state.pool
    if ps is not None and pool is not None:
        # A retry's wait is no reason to call a deployment a reload took out meanwhile (a
        # broken or leaked key, as likely as not): a request whose 503s were retried there
        # called it 5 times more after the reload (measured).
        plan.in_force = lambda: not ps.gone(pool, [up.cfg])
    try:
        sending = send_one(svc, state, plan, call, call.body, retries_cap=cap, moves_on=moves, after=after,
                           ends=ends)
        return await _held(svc, state, up, sending)
    finally:
        plan.in_force = None


def _rate_limited_last(last: Sent | None) -> bool:
    return last is not None and isinstance(last.outcome, Failure) \
        and last.outcome.classification.type is ErrorType.RATE_LIMIT  # fmt: skip


def _retries_spent(plan: RetryPlan, waited: _Waited, last: Sent | None) -> bool:
    """Whether another call now would be a retry of the rate limit the request waited for, with
    none of the class's retries left (``_Waited.resumed``)."""
    return bool(waited.resumed) and _rate_limited_last(last) \
        and plan.retries.get(ErrorType.RATE_LIMIT, 0) >= plan.cfg.rate_limit.max_retries  # fmt: skip


def _moves_within(siblings_left: bool, nxt: UpstreamRuntime | None, resetting: bool) -> bool:
    """Whether a failure of this deployment leaves the request in the pool (a sibling takes it,
    or it waits for the pool's earliest reset), rather than ending its attempts there."""
    return siblings_left or (nxt is None and resetting)


async def _held(
    svc: Services, state: RequestState, up: UpstreamRuntime, sending: Awaitable[AnOutcome]
) -> AnOutcome:
    """``sending``, counted among the deployment's requests in flight (least_busy ranks by it)
    until its answer is done: a success stays held until observe has relayed it."""
    ps = svc.pool_state
    assert ps is not None
    ps.hold(up.cfg.name)
    released = True
    try:
        outcome = await sending
        if isinstance(outcome, Success):
            state.holding, released = up.cfg.name, False  # released when the answer is done (observe)
        return outcome
    finally:
        if released:
            ps.release(up.cfg.name)


def _past_cuts(svc: Services, model: str | None,
               ready: list[Deployment]) -> tuple[list[Deployment], list[tuple[str, float]]]:  # fmt: skip
    """``ready`` without the deployments whose head cut holds (policy/head_cuts.py), and those,
    with the seconds left of each hold."""
    fresh: list[Deployment] = []
    held: list[tuple[str, float]] = []
    for v in ready:
        left_s = svc.head_cuts.holds(circuit_key(v.name, model))
        if left_s is None:
            fresh.append(v)
        else:
            held.append((v.name, left_s))
    return fresh, held


def _moves_on(svc: Services, last: Sent, nxt: UpstreamRuntime | None) -> bool:
    """Whether the route's later hop ``nxt`` takes the request after ``last``, a deployment's
    failure (as pipeline/chain.py moves it on)."""
    out = last.outcome
    return nxt is not None and isinstance(out, Failure) and last.call is not None \
        and fails_over(svc, out, last.call.up, nxt)  # fmt: skip


def _cannot_serve(sent: Sent) -> bool:
    """Whether a failure says its deployment cannot serve this request for a while, whatever
    it is sent: its key refused or out of credit, the model not there."""
    answer = sent.outcome
    if not isinstance(answer, Failure):
        return False
    c = answer.classification
    return c.type in (ErrorType.AUTH, ErrorType.BUDGET) or c.model_missing


def _resets_later(v: Deployment, now_ms: float) -> bool:
    return v.out_why in _RESETS and v.out_until_ms > now_ms


def _rate_limited(c: Classification) -> bool:
    return c.type is ErrorType.RATE_LIMIT


def _always(c: Classification) -> bool:
    return True


def _mover(svc: Services, up: UpstreamRuntime, nxt: UpstreamRuntime) -> Callable[[Classification], bool]:
    return lambda c: fails_over_class(svc, c, up, nxt)


async def _refusing(up: UpstreamRuntime, model: str | None) -> bool:
    # Decided from this replica's fresh cache when it can (nearly always: closed), without a
    # store round trip; else as the circuit decides.
    return up.circuit.admit_now(model) is None and await up.circuit.is_open(model)


def _pick(svc: Services, pool: PoolRuntime, ready: list[Deployment], home: str | None,
          conversation: str | None, new: bool) -> tuple[Deployment, str]:  # fmt: skip
    """The deployment to try first, and why (a log field and a metric label). Only the first:
    after a failure the rest are ranked again, as they are then. ``new``: ``home`` is the
    strategy's pick of this very request."""
    strategy = pool.cfg.strategy
    if home is None or conversation is None:  # affinity is off
        return first(strategy, ready, svc.rand, None), strategy
    pick, at_home = for_conversation(ready, home, conversation)
    return pick, "affinity" if at_home and not new else strategy


async def _claim(svc: Services, pool: PoolRuntime, table: AffinityTable, conversation: str,
                 proposed: str) -> tuple[str, bool]:  # fmt: skip
    """The home of a conversation this process does not know (or knew on a deployment since
    removed): the one any replica claimed first, else ``proposed`` (the strategy's pick now). A
    home replaced because its deployment was removed is a break, counted once (by the replica
    that moved it)."""
    home, new, replaced = await table.claim(conversation, proposed, pool.names)
    if replaced is not None and pool.renamed.get(replaced) != home:  # a rename keeps the key: no break
        svc.telemetry.affinity_breaks.labels(pool.cfg.name, "removed").inc()
    return home, new


def _hold(table: AffinityTable, conversation: str, proposed: str) -> tuple[str, bool]:
    """A conversation's first turn: ``proposed`` (the home its first turn took here, another
    request that opens it alike: an evaluation run again; else the strategy's pick), held here
    unclaimed; the next turn claims it (``_claim``)."""
    held = table.held(conversation)
    table.hold(conversation, proposed)
    return proposed, proposed != held


def _unclaimed(svc: Services, pool: PoolRuntime, table: AffinityTable, conversation: str,
               views: list[Deployment], proposed: str) -> bool:  # fmt: skip
    """Whether a conversation's first turn may hold its home ``proposed`` here unclaimed: its
    second turn on another replica, finding nothing claimed, proposes the same. Under
    ``weighted`` that is the first of its key's rendezvous order over every deployment (each
    may serve by then): a first turn that took another (the first sat out, or its circuit was
    open) claims it at once, one round trip; held, its second turn elsewhere was homed on the
    first, away from its cache (6 conversations of 30, one key limited for 3 s, measured).
    Under ``least_busy``, ``latency`` and ``headroom`` the pick depends on each replica's own
    view too (``good_now``), and claimed at every first turn a one-turn request would cost a
    round trip and a key in the store again: held, such a conversation may move once. Without
    a shared store the table is the only copy: nothing to claim."""
    if pool.cfg.strategy != "weighted" or not table.shared:
        return True
    return first_home(pool.cfg.strategy, views, svc.rand, conversation, _apart(svc, table)).name == proposed


def _held_or_first(svc: Services, pool: PoolRuntime, table: AffinityTable, conversation: str,
                   ready: list[Deployment]) -> str:  # fmt: skip
    held = table.held(conversation)
    if held is not None and any(d.name == held for d in ready):
        return held
    return first_home(pool.cfg.strategy, ready, svc.rand, conversation, _apart(svc, table)).name


def _apart(svc: Services, table: AffinityTable) -> bool:
    """Whether other processes, each with its own view, may meet this table's conversations
    (``good_now``): workers of ``server.workers`` or replicas sharing the homes."""
    return table.shared or svc.cfg.server.worker_count > 1


def _picked(svc: Services, state: RequestState, pool: PoolRuntime, up: UpstreamRuntime, why: str) -> None:
    state.pool, state.picked = pool.cfg.name, why
    svc.telemetry.child(svc.telemetry.pool_picks, pool.cfg.name, up.cfg.name, why).inc()
    # On the attempt span this pick makes (the span names the deployment as its upstream).
    svc.tracing.next_attempt(state, "sibling" if why in ("moved", "stored_search") else None,
                             {f"{P}pool": pool.cfg.name, f"{P}pool.pick": why})  # fmt: skip


async def _sit_out(svc: Services, state: RequestState, pool: PoolRuntime, up: UpstreamRuntime,
                   c: Classification) -> None:  # fmt: skip
    cd = pool.cfg.cooldowns
    now_ms = round(svc.wall() * 1000)
    out = sit_out(c, now_ms, rate_limit_s=cd.rate_limit_s, budget_s=cd.budget_s, auth_s=cd.auth_s,
                  own_key=up.cfg.api_key is not None, model_missing_s=cd.model_missing_s)  # fmt: skip
    if out is None:
        return
    until_ms, why = out
    # A rate limit is the model's (the one the key is sent, after its model_map: sit_out keeps
    # it so); credit and credentials are the whole key's, unless the failure is the one model's
    # (classify's one_model: a refusal naming it, a quota counted per model).
    model = state.pool_model if why in (SitOut.RATE_LIMIT, SitOut.MODEL_MISSING) or c.one_model else None
    assert svc.pool_state is not None
    await svc.pool_state.sit_out(up.cfg, model, until_ms, why)
    svc.telemetry.sit_outs.labels(pool.cfg.name, up.cfg.name, why.value).inc()
    record = {"request_id": state.request_id, "event": "deployment_sits_out", "pool": pool.cfg.name,
              "deployment": up.cfg.name, "reason": why.value, "until_ms": until_ms}  # fmt: skip
    if why is SitOut.AUTH and model is not None:
        log.warning({**record, "model": model[:128], "message": f"the provider refused deployment "
                     f"'{up.cfg.name}''s key this model; it serves no requests for it for {cd.auth_s:g} s "
                     "(pools[].cooldowns.auth_s)"})  # fmt: skip
    elif why is SitOut.AUTH:
        # An operator must replace the key: said once per sit-out, at warning level.
        log.warning({**record, "message": f"the provider refused deployment '{up.cfg.name}''s key; it "
                     f"serves no requests for {cd.auth_s:g} s (pools[].cooldowns.auth_s)"})  # fmt: skip
    else:
        log.info({**record, "model": model[:128]} if model is not None else record)


async def _all_sitting_out(
    svc: Services, state: RequestState, plan: RetryPlan, pool: PoolRuntime, last: Sent | None,
    tried: set[str], limited: Sent | None = None, stored: str | None = None, searching: bool = False,
    removed: set[str] | frozenset[str] = frozenset(), waited: _Waited | None = None,
) -> Sent | None:  # fmt: skip
    """No sibling is left to try, nor a later hop. When some sibling waits for a rate limit's
    reset, the pool serves again at the earliest one, whatever the others sit out for (an
    exhausted key, a refused one): the rate-limit rule applies to it, waited for when within
    ``max_retry_after_s`` (one retry of the class; None: try again now), else the answer goes
    back stamped with it. A request that met an outage (or a request error) keeps its answer.
    ``stored``: the one deployment the request may go to (it holds what the request continues):
    the pool is that deployment alone. ``searching``: every deployment asked answered that it does
    not hold the response the request is chained to; those that sit out may. ``removed``: taken
    out of the pool by a reload since the request began (it waits for none of them). A pool whose
    room only the estimates of calls in flight hold (``estimates_wait``) is waited for until the
    next read of its records or an answer of theirs here (None: look again), within ``waited``'s
    bound, not counted as a retry; a request that cannot wait is told that short wait."""
    assert svc.pool_state is not None
    now_ms = svc.wall() * 1000
    views = [svc.pool_state.view(i, up.cfg, state.model, now_ms, state.pool_need)
             for i, up in enumerate(pool.members)
             if (stored is None or up.cfg.name == stored) and up.cfg.name not in removed]  # fmt: skip
    waiting = [v for v in views if v.out_why in _RESETS and v.out_until_ms > now_ms]
    answer = last.outcome if last is not None else None
    failed = answer.classification if isinstance(answer, Failure) else None
    if not waiting or (failed is not None and failed.type not in _SAT_OUT):
        # A deployment whose circuit is open is out too, and may be back before any key is.
        broken = last is None or _cannot_serve(last)
        down = await _down(pool, state.model, views, now_ms) if broken and stored is None else {}
        if last is not None and not _circuit_first(down, views, now_ms):
            return last
        return Sent(_every_key_out(svc, state, pool, views, now_ms, stored, down), None)
    earliest = min(waiting, key=lambda v: v.out_until_ms)
    wait_s = (earliest.out_until_ms - now_ms) / 1000
    room = None
    if waited is not None:
        may_wait_s = _may_wait_s(svc, plan, waited)
        room = estimates_wait([v for v in views if v.name not in tried], now_ms,
                              svc.pool_state.read_in_s(pool.cfg.name, state.model), may_wait_s)  # fmt: skip
    if room is not None:
        if room.wait_s is not None and waited is not None:
            waited.spent_s += await _wait_for_answers(svc, svc.pool_state, room.names, room.wait_s)
            waited.looks += 1
            return None
        # It cannot wait longer: the room is the estimates', back within moments, not at the
        # minute's end, which a client told so waited out (``retry-after: 60``, review).
        earliest = next((v for v in waiting if v.name in room.names), earliest)
        wait_s = room.retry_after_s
    c = Classification(ErrorType.RATE_LIMIT, True, wait_s, reset_at_ms(wait_s, svc.wall()),
                       failed.provider_code if failed is not None else "pool_rate_limited",
                       failed.message if failed is not None else None,
                       f"earliest reset in pool '{pool.cfg.name}': {earliest.name}")  # fmt: skip
    if waited is not None and waited.idle and room is None:
        # Woken at the reset it waited for, it found that key (or the next) out until a little
        # later: a 429 answered since, to another request sent at the same moment, moved the
        # reset. That is the same wait going on, not another retry: counted as one, 4 requests at
        # once on two keys limited for 5 s spent all 3 retries in milliseconds of such waits,
        # and one was answered 429 after 5 s, no call made after its wait (review).
        left = min(svc.cfg.retry.max_retry_after_s - waited.moved_s, plan.remaining_s())
        if wait_s <= left and plan.head_room(wait_s):
            await (svc.sleep(wait_s) if stored is not None else _slept_or_added(svc, pool, wait_s))
            waited.moved_s += wait_s
            tried.difference_update(v.name for v in waiting)
            return None
    # One whose room the estimates in flight hold waited as long as it may already. A 429 made
    # final by a reset another request noted (send.py) still waits for the pool's: a request
    # a moment later skips every key and waits, and one whose call was out when the note came
    # was answered 429 with `x-should-retry: false` instead (3 of 4 sent at once, measured).
    wait = None if room is not None else plan.next_wait(c)
    if wait is not None:
        # Woken by a reload that added a deployment (``_slept_or_added``), the wait's retry
        # goes there; a chained turn goes to its stored deployment alone, which no reload adds.
        sleep = None if stored is not None else lambda s: _slept_or_added(svc, pool, s)
        if await waited_and_confirmed(svc, wait, sleep):
            state.retries += 1
            if waited is not None:
                waited.idle, waited.resumed = True, 0
            svc.telemetry.retries.labels(earliest.name, c.type.value).inc()
            svc.tracing.retrying(state, c, wait)
            # Every key that waited for a reset may serve again once it has come: each is picked
            # as its own comes (one may come a few milliseconds after the earliest).
            tried.difference_update(v.name for v in waiting)
            return None
    state.retries_settled = plan.stopped in SETTLED
    if limited is not None and isinstance(limited.outcome, Failure):
        # The provider's own 429 (the last one of this request, whatever failed after it: a
        # refused or exhausted sibling), with the pool's earliest reset in every header that
        # states a wait (its own reset headers say that one key's).
        theirs = replace(c, provider_code=limited.outcome.classification.provider_code,
                         message=limited.outcome.classification.message)  # fmt: skip
        if limited.call is not None:
            state.upstream = limited.call.up.cfg.name  # whose 429 it is
        # and in its body where a client reads the wait there (Google's RetryInfo), whether the
        # body is relayed as the key wrote it or rendered in the client's API from ``foreign``.
        headers = restamped(limited.outcome.headers, wait_s)
        body = restamped_body(limited.outcome.body, wait_s)
        foreign = limited.outcome.foreign
        if foreign is not None:
            foreign = replace(foreign, classification=replace(foreign.classification, retry_after_s=wait_s,
                                                              reset_at_ms=c.reset_at_ms))  # fmt: skip
        relayed = replace(limited.outcome, classification=theirs, headers=headers, body=body, foreign=foreign)
        return Sent(relayed, limited.call)
    state.upstream = pool.cfg.name  # no deployment was asked: the pool answered
    if stored is not None:
        failure = gateway_failure(
            429, c, f"deployment '{stored}' of pool '{pool.cfg.name}' holds the stored response this request "
            f"continues, and it is rate limited; it resets in {max(1, round(wait_s))} s", "pool_rate_limited",
            final=True,
        )  # fmt: skip
    elif searching:
        failure = gateway_failure(
            429, c, f"no deployment of pool '{pool.cfg.name}' that was asked holds the stored response this "
            "request continues, and the others are rate limited; the earliest resets in "
            f"{max(1, round(wait_s))} s", "pool_rate_limited", final=True,
        )  # fmt: skip
    elif room is not None:
        failure = gateway_failure(
            429, c, f"every deployment of pool '{pool.cfg.name}' is at its configured limits with requests "
            f"in flight, whose answers give room back; try again in {max(1, round(wait_s))} s",
            "pool_rate_limited", final=True,
        )  # fmt: skip
    else:
        failure = gateway_failure(
            429, c, f"every deployment of pool '{pool.cfg.name}' is rate limited; the earliest resets in "
            f"{max(1, round(wait_s))} s", "pool_rate_limited", final=True,
        )  # fmt: skip
    # A wait for room the estimates in flight hold is the client's to make (its SDK retries
    # after the short wait it is told); any other, the gateway made as it could.
    state.retries_settled = room is None
    return Sent(failure, None)


def _reloaded_away(state: RequestState, pool: PoolRuntime) -> Failure:
    """Every deployment this request could go to was taken out of its pool by a reload while
    it waited for a reset: the client's retry meets the config in force."""
    state.upstream = pool.cfg.name  # no deployment was asked: the pool answered
    c = Classification(ErrorType.PROVIDER_UNAVAILABLE, True, None, None, "pool_reloaded", None,
                       f"pool '{pool.cfg.name}' reloaded")  # fmt: skip
    return gateway_failure(503, c, f"the deployments of pool '{pool.cfg.name}' this request waited for were "
                           "taken out of it by a config reload; a retry goes to those in force",
                           "pool_reloaded", final=True)  # fmt: skip


async def _down(pool: PoolRuntime, model: str | None, views: list[Deployment],
                now_ms: float) -> dict[str, float]:  # fmt: skip
    """The deployments that sit out for nothing but whose circuit refuses a request now, and
    the seconds until it lets one through (a probe)."""
    down: dict[str, float] = {}
    for v in views:
        if v.out_until_ms <= now_ms:
            wait_s = await pool.members[v.slot].circuit.refused_for_s(model)
            if wait_s is not None:
                down[v.name] = wait_s
    return down


def _circuit_first(down: dict[str, float], views: list[Deployment], now_ms: float) -> bool:
    """Whether an open circuit lets a request through before any sit-out ends."""
    if not down:
        return False
    outs = [v.out_until_ms for v in views if v.out_until_ms > now_ms]
    return not outs or now_ms + min(down.values()) * 1000 < min(outs)


# How a deployment that sits out is counted in a pool's answer: one, then several.
_OUT_WORDS = {
    SitOut.BUDGET: ("out of credit", "out of credit"),
    SitOut.AUTH: ("refused its key", "refused their keys"),
    SitOut.MODEL_MISSING: ("without the model", "without the model"),
}


def _every_key_out(svc: Services, state: RequestState, pool: PoolRuntime, views: list[Deployment],
                   now_ms: float, stored: str | None = None,
                   down: dict[str, float] | None = None) -> Failure:  # fmt: skip
    """No deployment may serve and none waits for a rate-limit reset: their keys are out of
    credit or refused, the model is not there, or (``down``: the seconds until each lets a
    request through) their circuits are open. Answered by the gateway, in the class of the
    soonest to return (a model missing decides only when it is missing everywhere: a 404
    would tell the client that the model does not exist), with the reset of that one."""
    down = down or {}
    out = [v for v in views if v.out_until_ms > now_ms]
    model = str(state.model)[:128]
    returns = [v for v in out if v.out_why is not SitOut.MODEL_MISSING] or out
    soonest = min(returns, key=lambda v: v.out_until_ms) if returns else None
    circuit_s = min(down.values()) if down else None
    if circuit_s is not None and (soonest is None or now_ms + circuit_s * 1000 < soonest.out_until_ms):
        state.upstream = pool.cfg.name  # no deployment was asked: the pool answered
        state.retries_settled = True  # an SDK's retry now would be refused alike: retry-after says when
        c = Classification(ErrorType.PROVIDER_UNAVAILABLE, True, circuit_s,
                           reset_at_ms(circuit_s, svc.wall()), "circuit_open", None,
                           f"no deployment of pool '{pool.cfg.name}' may serve")  # fmt: skip
        return gateway_failure(503, c, f"no deployment of pool '{pool.cfg.name}' can serve now: "
                               f"{_counted(out, down, model)}", "circuit_open", final=True)  # fmt: skip
    assert soonest is not None
    wait_s = (soonest.out_until_ms - now_ms) / 1000
    # The codes are written out whole: docs/reference/errors.md is generated from the literals.
    if soonest.out_why is SitOut.BUDGET:
        kind, status, what, code = ErrorType.BUDGET, 402, "out of credit", "pool_budget"
    elif soonest.out_why is SitOut.MODEL_MISSING:
        kind, status, code = ErrorType.UNKNOWN, 404, "pool_model_not_found"
        what = f"without the model '{model}' (each answered 404 for it)"
    else:
        # Not a 401: the keys refused are the gateway's, and a 401 tells the client's agent that
        # its own is (the same answer as one upstream's refused key, attempt.operator_key_refused).
        kind, status, what, code = (ErrorType.AUTH, 502, "refused by the provider (revoked keys? the "
                                    "gateway's, not yours: its operator must replace them)", "pool_auth")
    state.upstream = pool.cfg.name  # no deployment was asked: the pool answered
    c = Classification(kind, False, None, reset_at_ms(wait_s, svc.wall()), code, None,
                       f"every deployment of pool '{pool.cfg.name}' sits out")  # fmt: skip
    if stored is not None:
        return gateway_failure(status, c, f"deployment '{stored}' of pool '{pool.cfg.name}', which holds the "
                               f"stored response this request continues, is {what}", code,
                               final=True)  # fmt: skip
    if down or any(v.out_why is not soonest.out_why for v in out):  # a mix: each counted
        return gateway_failure(status, c, f"no deployment of pool '{pool.cfg.name}' can serve now: "
                               f"{_counted(out, down, model)}", code, final=True)  # fmt: skip
    return gateway_failure(status, c, f"every deployment of pool '{pool.cfg.name}' is {what}", code,
                           final=True)  # fmt: skip


def _counted(out: list[Deployment], down: dict[str, float], model: str) -> str:
    """Why each deployment of a pool that cannot serve is out, counted by reason, the soonest
    back first within each: "1 out of credit, 1 refused its key, 1 down (circuit open, back in 25 s)"."""
    parts = []
    for why, (one, several) in _OUT_WORDS.items():
        n = sum(v.out_why is why for v in out)
        if n:
            words = one if n == 1 else several
            if why is SitOut.MODEL_MISSING:
                words += f" '{model}'"
            elif why is SitOut.AUTH:  # not the client's key: its agent must not ask for another
                words += " (the gateway's, not yours)"
            parts.append(f"{n} {words}")
    if down:
        back = max(1, math.ceil(min(down.values())))  # as its retry-after says it
        circuits = "circuit open, back" if len(down) == 1 else "circuits open, the first back"
        parts.append(f"{len(down)} down ({circuits} in {back} s)")
    return ", ".join(parts)
