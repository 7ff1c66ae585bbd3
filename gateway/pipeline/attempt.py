"""One upstream attempt: send, read as much as deciding needs, classify.

An attempt ends as a ``Success`` the client may be shown, or a ``Failure`` that the
retry loop may try again. For a stream, success means the first *visible* event
arrived: a stream that breaks or errors before that is a failure like any other,
so the client never sees a half-started turn.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.apis import OPENAI_CHAT
from gateway.apis.base import Dialect, EventKind, ForeignError, StreamReader
from gateway.errors import Classification, ErrorType, TransportError
from gateway.pipeline.outcome import (
    Failure,
    Outcome,
    RequestState,
    Success,
    gateway_failure,
    transport_failure,
)
from gateway.policy.classify import classify
from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.retry import EMPTY_STREAM, RetryPlan
from gateway.policy.retry_after import reset_at_ms
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.routing import response_headers
from gateway.services import Services, UpstreamRuntime
from gateway.sse import EventSplitter, error_status
from gateway.translate import Translation
from gateway.upstream import UpstreamFailure, UpstreamRequest, UpstreamResponse

ERROR_BODY_LIMIT = 4 * 1024 * 1024
SUCCESS_BODY_LIMIT = 256 * 1024 * 1024


class ReadMode(enum.Enum):
    BUFFER = "buffer"  # read the whole success body (chat completions without streaming)
    STREAM = "stream"  # an SSE stream is expected: peek to the first visible event
    RAW = "raw"  # relay the success body untouched as it arrives (other /v1 paths)


_STATUS_FOR_TYPE = {
    ErrorType.RATE_LIMIT: 429,
    ErrorType.BUDGET: 402,
    ErrorType.CONTEXT_OVERFLOW: 400,
    ErrorType.AUTH: 401,
    ErrorType.PROVIDER_UNAVAILABLE: 503,
    ErrorType.UNKNOWN: 502,
}


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


@dataclass(slots=True)  # not frozen: see Inbound; copies are made with dataclasses.replace
class Call:
    """Where and how one client request goes upstream; the body may change (compression)."""

    up: UpstreamRuntime
    method: str
    url: str
    headers: Mapping[str, str]
    mode: ReadMode
    dialect: Dialect = OPENAI_CHAT
    strip_usage: bool = False  # the reader drops the usage chunk the gateway asked for
    track: bool = False  # collect the stream's text, so that a break can be continued
    # Set when the upstream speaks another API than the client: answers are translated back,
    # and its errors rendered in the client's API. ``dialect`` is then the upstream's.
    translation: Translation | None = None
    body: bytes = b""  # the request as first sent to this upstream
    wire_payload: dict[str, Any] | None = None  # a translated request, as sent


async def attempt(svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes) -> Outcome:
    state.attempts += 1
    request = UpstreamRequest(
        call.method, call.url, call.headers, body,
        first_byte_timeout_s=max(0.001, min(svc.cfg.timeouts.first_byte_s, plan.remaining_s())),
    )  # fmt: skip
    outcome = await _exchange(svc, state, request, call)
    if call.translation is not None and isinstance(outcome, Failure) and outcome.own is None:
        outcome.foreign = _foreign(call, outcome, len(body))
    label = outcome.classification.type.value if isinstance(outcome, Failure) else "success"
    svc.telemetry.upstream_attempts.inc((call.up.cfg.name, label))
    return outcome


def circuit_open(svc: Services, up: UpstreamRuntime, wait: float) -> Failure:
    return gateway_failure(
        503,
        _unavailable(svc, retry_after_s=wait, code="circuit_open"),
        f"upstream '{up.cfg.name}' is failing; its circuit is open",
        "circuit_open",
        final=True,
    )


async def _exchange(svc: Services, state: RequestState, request: UpstreamRequest, call: Call) -> Outcome:
    mode = call.mode
    sent = svc.monotonic()
    try:
        resp = await svc.sender(request)
    except UpstreamFailure as f:
        return _transport(svc, f.kind)
    state.upstream_head_s = svc.monotonic() - sent
    try:
        if resp.status >= 400:
            return _upstream_error(svc, resp.status, resp.headers, await resp.read(ERROR_BODY_LIMIT))
        headers = response_headers(resp.headers)
        ctype = resp.headers.get("Content-Type", "")
        if mode is ReadMode.STREAM and ctype.startswith("text/event-stream"):
            reader = call.dialect.reader(call.strip_usage)
            if call.track:
                reader.track()
            peeked = await _peek_stream(svc, resp, headers, reader)
            if call.translation is not None and isinstance(peeked, Success):
                peeked.translator = call.translation.stream()
            return peeked
        if mode is ReadMode.RAW:
            return Success(resp.status, headers, response=resp, chunks=resp.iter_chunks())
        body = await resp.read(SUCCESS_BODY_LIMIT)
        if call.translation is not None and (translated := call.translation.answer(body)) is not None:
            body, doc = translated
            return Success(resp.status, headers, body=body, usage=state.dialect.body_usage(doc))
        return Success(resp.status, headers, body=body)
    except UpstreamFailure as f:
        resp.close()
        return _transport(svc, f.kind)
    except BaseException:
        resp.close()  # the client left, or we are shutting down: do not leak the connection
        raise


async def _peek_stream(
    svc: Services, resp: UpstreamResponse, headers: list[tuple[str, str]], reader: StreamReader
) -> Outcome:
    splitter = EventSplitter()
    held: list[bytes] = []
    chunks = resp.iter_chunks()
    received = False
    try:
        async for chunk in chunks:
            received = received or bool(chunk)
            for i, raw in enumerate(events := splitter.feed(chunk)):
                kind = reader.kind(raw, committed=False)
                if kind is EventKind.ERROR:
                    resp.close()
                    assert reader.error is not None
                    return _stream_error(svc, reader.error)
                if kind is EventKind.SKIP:
                    continue
                held.append(raw)
                if kind is not EventKind.CONTENTLESS:
                    # The rest of this chunk is relayed as it is; the relay keeps iterating `chunks`.
                    rest = b"".join(events[i + 1 :]) + splitter.pending
                    return Success(
                        200, headers, response=resp, chunks=chunks, held=held, pending=rest, sse=True,
                        reader=reader, complete=kind is EventKind.FINAL,
                    )  # fmt: skip
    except UpstreamFailure as f:
        if received or f.kind is TransportError.IDLE_TIMEOUT:
            raise  # a stall is not an answer
        # A stream head and then a cut, not one byte: counted as an empty stream below.
    if not received:
        # Not one byte: some servers answer a request they reject (an overflow) this way.
        c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, provider_code=EMPTY_STREAM)
        return gateway_failure(502, c, "the upstream answered with an empty stream", EMPTY_STREAM)
    # Clean end before anything visible: the turn produced nothing, so it is worth a retry.
    return _transport(svc, TransportError.STREAM_BROKEN)


def _stream_error(svc: Services, payload: dict[str, Any]) -> Failure:
    # No byte has reached the client, so the error can still be an ordinary error response.
    status = error_status(payload)
    body = json.dumps(payload).encode()
    c = classify(status or 500, {}, body, now_s=svc.wall())
    return Failure(c, status or _STATUS_FOR_TYPE[c.type], [("Content-Type", "application/json")], body)


def _upstream_error(svc: Services, status: int, headers: Mapping[str, str], body: bytes) -> Failure:
    c = classify(status, _lower(headers), body, now_s=svc.wall())
    # Every SDK retries a 429; a budget error answered as 402 is not retried by anyone.
    answer = 402 if c.type is ErrorType.BUDGET else status
    return Failure(c, answer, response_headers(headers), body, upstream_status=status)


def _transport(svc: Services, kind: TransportError) -> Failure:
    c = classify(None, {}, b"", now_s=svc.wall(), transport_error=kind)
    return transport_failure(kind, c)


def _unavailable(svc: Services, retry_after_s: float, code: str) -> Classification:
    return Classification(
        ErrorType.PROVIDER_UNAVAILABLE,
        retryable=True,
        retry_after_s=retry_after_s,
        reset_at_ms=reset_at_ms(retry_after_s, svc.wall()),
        provider_code=code,
    )


def _foreign(call: Call, failure: Failure, sent_bytes: int) -> ForeignError:
    """What the client's dialect needs to say an upstream's error in the client's API."""
    c = failure.classification
    limits = parse_overflow(c.message) if c.type is ErrorType.CONTEXT_OVERFLOW else None
    prompt = limits.prompt if limits is not None and limits.prompt else round(sent_bytes / BYTES_PER_TOKEN)
    limit = (limits.limit if limits is not None else None) or call.up.cfg.context_window
    return ForeignError(
        status=failure.status, classification=c, upstream_api=call.dialect.api,
        upstream_status=failure.upstream_status or failure.status, upstream_body=failure.body,
        prompt_tokens=prompt, limit_tokens=limit,
    )  # fmt: skip
