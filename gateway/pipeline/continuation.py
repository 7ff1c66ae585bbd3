"""Continuing a stream that broke after the client saw part of the answer.

Called by the relay at most once per stream, for a text answer (no tool call started),
when an upstream of the request's chain declares how it continues (``continuation:``).
The request goes to that upstream again with the shown text as the start of the answer;
its stream is spliced into the client's (same ids, no repeated or lost text at the seam),
within the request's one deadline and the shared retry budget. Any refusal (a 400 from an
upstream that rejects prefill, an error, no budget left) ends the stream exactly as it
would have ended without continuation: with the original failure, classified.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.apis.base import Dialect, Ending, Splice, StreamReader
from gateway.pipeline.attempt import Call
from gateway.pipeline.chain import send_one
from gateway.pipeline.outcome import Failure, RequestState, Success
from gateway.policy.retry import RetryPlan
from gateway.services import Services, UpstreamRuntime

log = logging.getLogger("gateway.decisions")

Resume = Callable[[StreamReader, Ending], Awaitable[tuple[Success, Splice] | None]]


def continuable(chain: list[UpstreamRuntime]) -> bool:
    return any(up.cfg.continuation != "none" for up in chain)


def resumer(
    svc: Services, state: RequestState, plan: RetryPlan, chain: list[UpstreamRuntime],
    call_for: Callable[[UpstreamRuntime], Call | Failure], payload: dict[str, Any],
) -> Resume | None:  # fmt: skip
    if not continuable(chain):
        return None

    async def resume(reader: StreamReader, end: Ending) -> tuple[Success, Splice] | None:
        # The upstream that was streaming first, if it can continue; else the chain's next.
        targets = sorted((up for up in chain if up.cfg.continuation != "none"),
                         key=lambda up: up.cfg.name != state.upstream)  # fmt: skip
        counter = svc.telemetry.continuations
        partial = reader.partial()
        streamed = call_for(next(up for up in chain if up.cfg.name == state.upstream))
        if isinstance(streamed, Failure):
            return None
        wire = streamed.dialect
        found = _first_able(targets, call_for, payload, partial, wire) if partial is not None else None
        if found is None or plan.remaining_s() <= 0 or not svc.budget.try_acquire_retry():
            counter.labels(found[0].cfg.name if found else targets[0].cfg.name, "not_continuable").inc()
            return None
        up, call, body = found
        assert partial is not None
        log.debug({"request_id": state.request_id, "event": "continue", "upstream": up.cfg.name,
                   "after": end.code, "shown_bytes": len(partial.encode())})  # fmt: skip
        outcome = await send_one(svc, state, plan, call, json.dumps(body).encode())
        if not isinstance(outcome, Success) or outcome.reader is None:
            counter.labels(up.cfg.name, "failed").inc()
            return None
        counter.labels(up.cfg.name, "continued").inc()
        # The stream goes on: it is no longer cut short, unless the continuation breaks too.
        state.continued_after, state.ended_by = state.ended_by or end.code, None
        return outcome, call.dialect.splicer(reader, partial, up.cfg.continuation)

    return resume


def _first_able(
    targets: list[UpstreamRuntime], call_for: Callable[[UpstreamRuntime], Call | Failure],
    payload: dict[str, Any], partial: str, wire: Dialect,
) -> tuple[UpstreamRuntime, Call, dict[str, Any]] | None:  # fmt: skip
    """The first target whose declared mode this wire API can use (``prefix`` is a chat
    form, ``continue_final_message`` has no Messages form, …), with its request."""
    for up in targets:
        call = call_for(up)
        if isinstance(call, Failure) or call.dialect is not wire:
            continue  # a continuation is spliced into the stream in the API it was read in
        asked = call.wire_payload if call.wire_payload is not None else payload
        body = call.dialect.continuation(asked, partial, up.cfg.continuation)
        if body is not None:
            return up, call, body
    return None
