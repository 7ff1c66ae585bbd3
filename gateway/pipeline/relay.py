"""Writes an outcome to the client: a buffered error or body, a raw passthrough, or an
SSE stream relayed event by event.

Once a stream is committed nothing is retried; a failure then ends it with exactly one
classified error event in the dialect's own grammar (and never its completion marker), so
no client mistakes it for a finished turn.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gateway.dialects.base import Ending, EventKind, StreamReader
from gateway.errors import TransportError
from gateway.jsonpeek import top_level_member
from gateway.pipeline.outcome import Failure, Outcome, RequestState, Success
from gateway.policy.classify import classify
from gateway.services import Services
from gateway.sse import EventSplitter, error_status
from gateway.upstream import UpstreamFailure


async def relay(
    request: web.Request, svc: Services, state: RequestState, outcome: Outcome
) -> web.StreamResponse:
    if isinstance(outcome, Failure):
        state.classification = outcome.classification
        if outcome.own is not None:
            status = state.dialect.error_status(outcome.status, outcome.own.code)
            body = state.dialect.error_body(
                status, outcome.own.message, outcome.own.code, outcome.classification, state.request_id
            )
            return web.Response(status=status, body=body, headers=outcome.headers)
        return web.Response(status=outcome.status, body=outcome.body, headers=outcome.headers)
    if outcome.chunks is None:
        _count_usage_in_body(state, outcome.body)
        return web.Response(status=outcome.status, body=outcome.body, headers=outcome.headers)
    if outcome.sse:
        return await _relay_sse(request, svc, state, outcome)
    return await _relay_raw(request, outcome)


def _count_usage_in_body(state: RequestState, body: bytes) -> None:
    if b'"usage"' not in body:
        return
    doc = top_level_member(body, "usage")  # the usage object alone, not the whole body
    if doc is None:
        try:
            doc = json.loads(body)
        except ValueError:
            return
    if isinstance(doc, dict):
        state.usage.update(state.dialect.body_usage(doc))


async def _relay_raw(request: web.Request, outcome: Success) -> web.StreamResponse:
    assert outcome.chunks is not None and outcome.response is not None
    resp = web.StreamResponse(status=outcome.status, headers=outcome.headers)
    try:
        await resp.prepare(request)
        async for chunk in outcome.chunks:
            await resp.write(chunk)
    except UpstreamFailure:
        # Bytes already left; the only honest signal left is an unterminated body.
        if request.transport is not None:
            request.transport.close()
        return resp
    finally:
        outcome.response.close()
    await resp.write_eof()
    return resp


async def _relay_sse(
    request: web.Request, svc: Services, state: RequestState, outcome: Success
) -> web.StreamResponse:
    assert outcome.chunks is not None and outcome.response is not None and outcome.reader is not None
    reader = outcome.reader
    resp = web.StreamResponse(status=outcome.status, headers=outcome.headers)
    splitter = EventSplitter()
    # The held events end with the first visible one, which may already be the last.
    finished = reader.kind(outcome.held[-1], committed=True) is EventKind.FINAL if outcome.held else False
    try:
        await resp.prepare(request)
        out, end, fin = _filter(reader, splitter.feed(outcome.pending), svc.wall())
        finished = finished or fin
        await resp.write(b"".join(outcome.held) + out)
        if end is not None:
            return await _end_with_error(resp, state, reader, end)
        async for chunk in outcome.chunks:
            events = splitter.feed(chunk)
            if not events:
                continue
            out, end, fin = _filter(reader, events, svc.wall())
            if out:
                finished = finished or fin
                await resp.write(out)
            if end is not None:
                return await _end_with_error(resp, state, reader, end)
    except UpstreamFailure as f:
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=f.kind)
        return await _end_with_error(resp, state, reader, Ending(c, _TRANSPORT_TEXT[f.kind], f.kind.value))
    finally:
        outcome.response.close()
        state.usage.update(reader.usage)
    if splitter.pending.strip():
        await resp.write(splitter.pending)
        finished = finished or reader.kind(splitter.pending, committed=True) is EventKind.FINAL
    if not finished:
        # The upstream closed cleanly without the dialect's end marker: the turn is cut short.
        broken = TransportError.STREAM_BROKEN
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=broken)
        return await _end_with_error(resp, state, reader, Ending(c, _TRANSPORT_TEXT[broken], broken.value))
    await resp.write_eof()
    return resp


_TRANSPORT_TEXT = {
    TransportError.IDLE_TIMEOUT: "the upstream stream stalled (no data within timeouts.idle_s)",
    TransportError.STREAM_BROKEN: "the upstream stream ended before the response was complete",
    TransportError.RESET: "the upstream connection was reset mid-stream",
    TransportError.CONNECT: "the upstream connection was lost",
    TransportError.FIRST_BYTE_TIMEOUT: "the upstream did not respond in time",
}


def _filter(reader: StreamReader, events: list[bytes], now_s: float) -> tuple[bytes, Ending | None, bool]:
    """The bytes to forward, the reason to end the stream if an error event came, and
    whether the dialect's end marker passed."""
    kept: list[bytes] = []
    finished = False
    for raw in events:
        kind = reader.kind(raw, committed=True)
        if kind is EventKind.ERROR:
            assert reader.error is not None
            return b"".join(kept), _ending_from_event(reader.error, now_s), finished
        if kind is EventKind.SKIP:
            continue
        finished = finished or kind is EventKind.FINAL
        kept.append(raw)
    return b"".join(kept), None, finished


def _ending_from_event(payload: dict[str, Any], now_s: float) -> Ending:
    body = json.dumps(payload).encode()
    c = classify(error_status(payload) or 500, {}, body, now_s=now_s)
    err = payload.get("error")
    message, code = "the upstream reported an error mid-stream", None
    if isinstance(err, dict):
        if isinstance(err.get("message"), str):
            message = err["message"]
        raw_code = err.get("code") or err.get("type")
        code = str(raw_code) if raw_code is not None else None
    return Ending(c, message, code)


async def _end_with_error(
    resp: web.StreamResponse, state: RequestState, reader: StreamReader, end: Ending
) -> web.StreamResponse:
    state.stream_error = end.classification.type
    state.classification = end.classification
    try:
        await resp.write(reader.broken(end, state.request_id, state.model))
        await resp.write_eof()
    except ConnectionError:
        pass  # the client is gone as well; nothing left to tell
    return resp
