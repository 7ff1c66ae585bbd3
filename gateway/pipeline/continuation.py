"""Continuing a stream that broke after the client saw part of the answer.

Called by the relay at most once per stream, for a text answer (no tool call started),
when an upstream of the request's chain declares how it continues (``continuation:``).
Either the request goes to that upstream again with the shown text as the start of the
answer (prefill and its kin), or, with ``replay``, it goes again unchanged and its answer is
held back until it has reproduced exactly the shown text (``apis/replay.py``). Either way
the new stream is spliced into the client's (same ids, no repeated or lost text at the
seam), within the request's one deadline and the shared retry budget. Any refusal (a 400
from an upstream that rejects prefill, an error, a replay that diverges, no budget left)
ends the stream exactly as it would have ended without continuation: with the original
failure, classified.

Which upstream is asked: one that continues from the shown text before one that replays (it
costs only the rest of the answer and cannot diverge); then the one that was streaming
before the rest of the chain, except after a stall or a malformed event, when any other
upstream comes first (the one that just went silent or wrote garbage is the likeliest to do it
again; after a cut it is fine).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from gateway.apis import output_budget
from gateway.apis.base import Dialect, Ending, EventKind, Splice, StreamReader
from gateway.apis.common import MALFORMED_EVENT
from gateway.apis.replay import Trim, is_replay
from gateway.errors import Classification, TransportError
from gateway.pipeline.attempt import Call, leg_over, settle_circuit, too_large_event
from gateway.pipeline.outcome import Failure, RequestState, Success
from gateway.pipeline.pool import continuing, taken
from gateway.pipeline.send import send_one
from gateway.policy.classify import classify, classify_stream_event
from gateway.policy.retry import RetryPlan
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.services import Route, Services, UpstreamRuntime
from gateway.sse import EventTooLarge, upstream_splitter
from gateway.upstream import UpstreamFailure

log = logging.getLogger("gateway.decisions")

Resume = Callable[[StreamReader, Ending], Awaitable[tuple[Success, Splice] | None]]


def continuable(chain: Sequence[UpstreamRuntime]) -> bool:
    return any(up.cfg.continuation != "none" for up in chain)


# How a stream ended when the upstream that streamed it is the last to ask to continue it.
_UNTRUSTED_AFTER = frozenset({TransportError.IDLE_TIMEOUT.value, MALFORMED_EVENT})


def preference(up: UpstreamRuntime, streaming: str, untrusted: bool) -> tuple[bool, bool, bool]:
    """Sort key of the upstreams that may continue (stable: chain order breaks ties)."""
    same = up.cfg.name == streaming
    return untrusted and same, is_replay(up.cfg.continuation), not same


def resumer(
    svc: Services, state: RequestState, plan: RetryPlan, route: Route,
    call_for: Callable[[UpstreamRuntime], Call | Failure], payload: Callable[[], dict[str, Any]],
    conversation: str | None = None,
) -> Resume | None:  # fmt: skip
    """``payload``: the request as prepared in the client's API (read when a continuation is
    built: the document is not held while the stream runs). ``conversation``: the request's,
    whose home and rendezvous order rank a pool's deployments."""
    chain = route.upstreams
    if not continuable(chain):
        return None

    async def resume(reader: StreamReader, end: Ending) -> tuple[Success, Splice] | None:
        untrusted = end.code in _UNTRUSTED_AFTER
        streaming = state.upstream
        # A pool's deployments as they may serve now (pool.continuing), not as configured.
        able = await continuing(svc, state, route, conversation)
        targets = sorted((up for up in able if up.cfg.continuation != "none"),
                         key=lambda up: preference(up, streaming, untrusted))  # fmt: skip
        counter = svc.telemetry.continuations
        partial = reader.partial()
        streamed = call_for(next(up for up in chain if up.cfg.name == state.upstream))
        if isinstance(streamed, Failure):
            return None
        wire = streamed.dialect
        found = _first_able(targets, call_for, payload, partial, wire) if partial is not None else None
        sent = json.dumps(found[2]).encode() if found is not None else b""
        while found is not None and not await taken(svc, state, found[1], len(sent)):
            targets.remove(found[0])  # its configured limits are used up: it sits out now
            assert partial is not None
            found = _first_able(targets, call_for, payload, partial, wire)
            sent = json.dumps(found[2]).encode() if found is not None else b""
        if found is None or plan.remaining_s() <= 0 or not svc.budget.try_acquire_retry():
            named = found[0].cfg.name if found else targets[0].cfg.name if targets else streaming
            counter.labels(named, "not_continuable").inc()
            _traced(svc, state, named, "not_continuable")
            return None
        up, call, _ = found
        assert partial is not None
        mode = up.cfg.continuation
        log.debug({"request_id": state.request_id, "event": "continue", "upstream": up.cfg.name, "mode": mode,
                   "after": end.code, "shown_bytes": len(partial.encode())})  # fmt: skip
        svc.tracing.next_attempt(state, "continuation", {"llm_gateway.continuation.mode": mode})
        outcome = await send_one(svc, state, plan, call, sent)
        if not isinstance(outcome, Success) or outcome.reader is None:
            counter.labels(up.cfg.name, "failed").inc()
            _traced(svc, state, up.cfg.name, "failed")
            return None
        if is_replay(mode):
            reproduced, why, c, ended_by = await _reproduced(svc, plan, outcome, call.dialect.replay(partial))
            if reproduced is None:
                # What happened to this leg itself: its own failure, or set aside (it diverged).
                leg_over(svc, state, c, ended_by, relayed=False)
                # The request's deadline ran out on it: no verdict on the upstream either way.
                settle_circuit(state, c, answered=ended_by != "deadline")
                counter.labels(up.cfg.name, why).inc()
                _traced(svc, state, up.cfg.name, why)
                log.debug({"request_id": state.request_id, "event": "replay_" + why, "upstream": up.cfg.name})
                return None
            outcome = reproduced
        counter.labels(up.cfg.name, "continued").inc()
        _traced(svc, state, up.cfg.name, "continued")
        # The stream goes on: it is no longer cut short, unless the continuation breaks too.
        state.continued_after, state.ended_by = state.ended_by or end.code, None
        return outcome, call.dialect.splicer(reader, partial, mode)

    return resume


def _first_able(
    targets: list[UpstreamRuntime], call_for: Callable[[UpstreamRuntime], Call | Failure],
    payload: Callable[[], dict[str, Any]], partial: str, wire: Dialect,
) -> tuple[UpstreamRuntime, Call, dict[str, Any]] | None:  # fmt: skip
    """The first target whose declared mode this wire API and request can use (``prefix``
    is a chat form, ``continue_final_message`` has no Messages form, ``replay`` wants a
    deterministic request, …), with its request."""
    for up in targets:
        call = call_for(up)
        if isinstance(call, Failure) or call.dialect is not wire:
            continue  # a continuation is spliced into the stream in the API it was read in
        sent = call.wire_payload()
        asked = sent if sent is not None else payload()
        body = call.dialect.continuation(asked, partial, up.cfg.continuation)
        if body is not None:
            return up, call, left_to_write(call.dialect, body, partial, up.cfg.continuation)
    return None


def left_to_write(wire: Dialect, body: dict[str, Any], partial: str, mode: str) -> dict[str, Any]:
    """A continuation's request asking for what is left of the answer's output budget: the
    budget it names (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) less the
    tokens shown, at 3.5 bytes each as the splice adds them to the client's usage. Sent the whole
    budget again, a continued answer could run to nearly twice the limit the client set, and
    past what its key reserved (audit: ``max_tokens: 3000`` sent again after 571 tokens shown).
    At least one token: a budget the estimate says is spent is ended by the provider's own
    ``length`` finish, not by the original failure. A replay writes the whole answer again: it
    is sent the request as it was. A request naming no budget gets the provider's default
    again, as it did."""
    asked = output_budget.ceiling(body)
    if asked is None or is_replay(mode):
        return body
    shown = round(len(partial.encode()) / BYTES_PER_TOKEN)
    return wire.lower_output(body, max(1, asked - shown)) or body


async def _reproduced(
    svc: Services, plan: RetryPlan, leg: Success, trim: Trim
) -> tuple[Success | None, str, Classification | None, str | None]:
    """Reads a replay until it has reproduced the shown text; nothing of it reaches the
    client before. Returns the stream from there on (the events read so far held, for the
    relay to splice), or None and why not: ``diverged`` (it wrote something else first, or
    ended short) or ``failed`` (an error, a break, the deadline). Then also how the leg itself
    ended: its error event or break as classified (None: no failure of the upstream's), and
    what ended it (``diverged``, ``deadline``: the request's, a transport error's kind)."""
    assert leg.reader is not None and leg.response is not None and leg.chunks is not None
    reader, held, complete = leg.reader, list(leg.held), leg.complete
    for raw in held:  # already read (and classified) while the attempt peeked
        trim(raw)
    splitter = leg.splitter or upstream_splitter()  # the peek's, holding its chunk's incomplete event
    broke: Classification | None = None
    ended_by: str | None = None

    def look(events: Sequence[bytes]) -> tuple[Success | None, str] | None:
        nonlocal complete, broke
        for i, raw in enumerate(events):
            kind = reader.kind(raw, committed=True)
            if kind is EventKind.ERROR:
                assert reader.error is not None
                broke = classify_stream_event(reader.error, now_s=svc.wall())
                return None, "failed"
            if kind is EventKind.SKIP:
                continue
            complete = complete or kind is EventKind.FINAL
            held.append(raw)
            trim(raw)
            if trim.match.diverged:
                return None, "diverged"
            if trim.match.matched:
                splitter.check()  # as the relay's next feed would, before the splice is committed
                more = dataclasses.replace(leg, held=held, rest=events[i + 1 :], splitter=splitter,
                                           complete=complete)  # fmt: skip
                return more, "continued"
        return None

    if trim.match.matched:
        return leg, "continued", None, None
    decided = (None, "diverged") if trim.match.diverged else look(leg.rest)
    try:
        async with asyncio.timeout(max(0.001, plan.remaining_s())):
            if decided is None:
                async for chunk in leg.chunks:
                    decided = look(splitter.feed(chunk))
                    if decided is not None:
                        break  # the chunks after it are the relay's
    except UpstreamFailure as f:
        decided, ended_by = (None, "failed"), f.kind.value
        broke = classify(None, {}, b"", now_s=svc.wall(), transport_error=f.kind)
    except TimeoutError:
        decided, ended_by = (None, "failed"), "deadline"  # the request's, no failure of the upstream's
    except EventTooLarge:
        decided, ended_by = (None, "failed"), "event_too_large"
        broke = too_large_event().classification
    if decided is None:
        decided = None, "diverged"  # the replay ended short of what the client has
    if decided[0] is None:
        leg.response.close()
        if decided[1] == "diverged":
            ended_by = "diverged"
    return decided[0], decided[1], broke, ended_by


def _traced(svc: Services, state: RequestState, upstream: str, outcome: str) -> None:
    attrs = {"llm_gateway.continuation.upstream": upstream, "llm_gateway.continuation.outcome": outcome}
    svc.tracing.annotate(state, attrs)
