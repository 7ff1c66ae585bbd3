"""Writes an outcome to the client: a buffered error or body, a raw passthrough, or an
SSE stream relayed event by event.

Once a stream is committed nothing is retried; a failure then ends it with exactly one
classified error event and no ``[DONE]``, so no client mistakes it for a finished turn.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from gateway.errors import Classification, ErrorType, TransportError
from gateway.pipeline.outcome import Failure, Outcome, RequestState, Success
from gateway.policy.classify import classify
from gateway.services import Services
from gateway.sse import (
    EventSplitter,
    encode_data,
    error_payload,
    error_status,
    parse_event,
    usage_of,
)
from gateway.upstream import UpstreamFailure

_FINISHED = (b'"finish_reason":"', b'"finish_reason": "')


async def relay(
    request: web.Request, svc: Services, state: RequestState, outcome: Outcome, *, strip_usage: bool = False
) -> web.StreamResponse:
    if isinstance(outcome, Failure):
        state.classification = outcome.classification
        return web.Response(status=outcome.status, body=outcome.body, headers=outcome.headers)
    if outcome.chunks is None:
        _count_usage_in_body(state, outcome.body)
        return web.Response(status=outcome.status, body=outcome.body, headers=outcome.headers)
    if outcome.sse:
        return await _relay_sse(request, svc, state, outcome, strip_usage)
    return await _relay_raw(request, outcome)


def _count_usage_in_body(state: RequestState, body: bytes) -> None:
    if b'"usage"' not in body:
        return
    try:
        doc = json.loads(body)
    except ValueError:
        return
    if isinstance(doc, dict):
        _take_usage(state, doc.get("usage"))


def _take_usage(state: RequestState, usage: Any) -> None:
    if not isinstance(usage, dict):
        return
    for kind, key in (("prompt", "prompt_tokens"), ("completion", "completion_tokens")):
        value = usage.get(key)
        if isinstance(value, int) and value >= 0:
            state.usage[kind] = value


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
    request: web.Request, svc: Services, state: RequestState, outcome: Success, strip_usage: bool
) -> web.StreamResponse:
    assert outcome.chunks is not None and outcome.response is not None
    resp = web.StreamResponse(status=outcome.status, headers=outcome.headers)
    stream_id, model = outcome.stream_id, outcome.stream_model
    splitter = EventSplitter()
    finished = False
    try:
        await resp.prepare(request)
        out, end = _filter(state, splitter.feed(outcome.pending), strip_usage, svc.wall())
        first = b"".join(outcome.held) + out
        finished = _finishes(first)
        await resp.write(first)
        if end is not None:
            return await _end_with_error(resp, state, end, stream_id, model)
        async for chunk in outcome.chunks:
            events = splitter.feed(chunk)
            if not events:
                continue
            out, end = _filter(state, events, strip_usage, svc.wall())
            if out:
                finished = finished or _finishes(out)
                await resp.write(out)
            if end is not None:
                return await _end_with_error(resp, state, end, stream_id, model)
    except UpstreamFailure as f:
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=f.kind)
        ending = _Ending(c, _TRANSPORT_TEXT[f.kind], f.kind.value)
        return await _end_with_error(resp, state, ending, stream_id, model)
    finally:
        outcome.response.close()
    if splitter.pending.strip():
        await resp.write(splitter.pending)
    if not finished:
        # The upstream closed cleanly without a finish_reason or [DONE]: the turn is cut short.
        broken = TransportError.STREAM_BROKEN
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=broken)
        ending = _Ending(c, _TRANSPORT_TEXT[broken], broken.value)
        return await _end_with_error(resp, state, ending, stream_id, model)
    await resp.write_eof()
    return resp


def _finishes(data: bytes) -> bool:
    return b"[DONE]" in data or any(f in data for f in _FINISHED)


_TRANSPORT_TEXT = {
    TransportError.IDLE_TIMEOUT: "the upstream stream stalled (no data within timeouts.idle_s)",
    TransportError.STREAM_BROKEN: "the upstream stream ended before the response was complete",
    TransportError.RESET: "the upstream connection was reset mid-stream",
    TransportError.CONNECT: "the upstream connection was lost",
    TransportError.FIRST_BYTE_TIMEOUT: "the upstream did not respond in time",
}


class _Ending:
    __slots__ = ("classification", "code", "message")

    def __init__(self, c: Classification, message: str, code: str | None = None) -> None:
        self.classification = c
        self.message = message
        self.code = code


def _filter(
    state: RequestState, events: list[bytes], strip_usage: bool, now_s: float
) -> tuple[bytes, _Ending | None]:
    """The bytes to forward, and the reason to end the stream if an error event came."""
    kept: list[bytes] = []
    for raw in events:
        if b"error" in raw:
            event = parse_event(raw)
            err = error_payload(event)
            if err is not None:
                return b"".join(kept), _ending_from_event(err, now_s)
        if b'"usage"' in raw:
            doc = usage_of(parse_event(raw))
            if doc is not None:
                _take_usage(state, doc["usage"])
                if strip_usage and not doc.get("choices"):
                    continue  # the usage-only chunk we asked for on the client's behalf
        kept.append(raw)
    return b"".join(kept), None


def _ending_from_event(payload: dict[str, Any], now_s: float) -> _Ending:
    body = json.dumps(payload).encode()
    c = classify(error_status(payload) or 500, {}, body, now_s=now_s)
    err = payload.get("error")
    message, code = "the upstream reported an error mid-stream", None
    if isinstance(err, dict):
        if isinstance(err.get("message"), str):
            message = err["message"]
        raw_code = err.get("code") or err.get("type")
        code = str(raw_code) if raw_code is not None else None
    return _Ending(c, message, code)


async def _end_with_error(
    resp: web.StreamResponse, state: RequestState, end: _Ending, stream_id: str | None, model: str | None
) -> web.StreamResponse:
    c = end.classification
    state.stream_error = c.type
    state.classification = c
    event: dict[str, Any] = {
        "id": stream_id or f"chatcmpl-{state.request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model or state.model or "",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
        "error": {
            "message": end.message,
            "type": "upstream_error" if c.type is not ErrorType.UNKNOWN else "gateway_error",
            "code": end.code or c.provider_code or c.type.value,
            "x_llm_error_type": c.type.value,
            "retryable": c.retryable,
        },
    }
    try:
        await resp.write(encode_data(event))
        await resp.write_eof()
    except ConnectionError:
        pass  # the client is gone as well; nothing left to tell
    return resp
