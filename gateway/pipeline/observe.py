"""The outermost stage: request id, in-flight gauge, timing, metrics and one JSON log line.

It also turns anything unexpected into a 500 in the OpenAI error shape, so no
traceback or internal detail ever reaches a client.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import traceback
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.errors import Classification, ErrorType
from gateway.logs import ACCESS
from gateway.pipeline.outcome import STATE, RequestState
from gateway.pipeline.relay import CLIENT_GONE
from gateway.pipeline.stamp import stamp
from gateway.services import SERVICES, Services
from gateway.telemetry import error_label, status_label

log = logging.getLogger("gateway.access")

PATH_MAX = 128
USER_AGENT_MAX = 100
# Anything in a User-Agent that looks like a token (long, unbroken, key-like) is masked: a
# misconfigured client could put its key there, and the log line never carries one.
_TOKENISH = re.compile(r"[A-Za-z0-9_\-.+/=:]{24,}|(?i:bearer|basic)\s*\S*|(?i:sk-|key-|api[_-]?key)\S*")
_USER_AGENTS: dict[str, str] = {}  # clients send few distinct ones: each is cleaned once

# A client's id is echoed in headers and logs, so only a safe, bounded shape is accepted.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")

_OPS_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_id_of(request: web.Request) -> str:
    given = request.headers.get("x-request-id")
    if given and _SAFE_ID.match(given):
        return given
    # 128 random bits as 32 hex digits, like uuid4().hex at a quarter of its cost.
    return os.urandom(16).hex()


def observed(handler: Handler) -> Handler:
    """``handler`` wrapped in the outermost stage. Wrapping each route's handler, rather
    than installing a middleware, spares aiohttp's middleware chain (two more coroutines
    and a partial per request): every request reaches some route, the last catches all."""

    async def observe(request: web.Request) -> web.StreamResponse:
        svc = request.app[SERVICES]
        if request.path in _OPS_PATHS:
            return await handler(request)  # health, readiness and metrics are not API traffic
        state = RequestState(request_id=request_id_of(request), started=svc.monotonic())
        state.method, state.path = request.method, request.path[:PATH_MAX]
        state.user_agent = user_agent_of(request.headers.get("User-Agent"))
        request[STATE] = state
        svc.in_flight += 1  # the in-flight gauge reads it at scrape time
        status = 500
        try:
            response = await handler(request)
            status = 499 if state.ended_by == CLIENT_GONE else response.status
            if not response.prepared:
                # Send a buffered reply before accounting for it: the log line and metrics then
                # stay off the client's critical path, and the duration includes the write.
                stamp(state, response, svc.monotonic())
                try:
                    await response.prepare(request)
                    await response.write_eof()
                except ConnectionError:
                    status = 499  # the client left just before its answer; nothing to send it
            return response
        except web.HTTPException as e:
            status = e.status
            stamp(state, e, None)  # aiohttp sends it, after the accounting below
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away; nginx's convention, kept out of the 5xx ratio
            raise
        except Exception as e:
            # The type and place only: an exception's text can quote the request (a prompt).
            where = traceback.extract_tb(e.__traceback__)[-1]
            log.error({
                "request_id": state.request_id, "event": "unhandled_error",
                "exception": type(e).__name__, "at": f"{where.filename}:{where.lineno}",
            })  # fmt: skip
            state.classification = c = Classification.of(ErrorType.UNKNOWN)
            body = state.dialect.error_body(
                500, "internal gateway error", "internal_error", c, state.request_id
            )
            response = web.Response(status=500, body=body, content_type="application/json")
            stamp(state, response, None)  # aiohttp sends it, after the accounting below
            return response
        finally:
            svc.in_flight -= 1
            _account(svc, state, status)
            if svc.in_flight == 0:
                for wake in svc.idle:
                    wake()

    return observe


def user_agent_of(given: str | None) -> str | None:
    """The client's User-Agent for the log: bounded, printable, token-like parts masked."""
    if not given:
        return None
    clean = _USER_AGENTS.get(given)
    if clean is None:
        clean = _TOKENISH.sub("[redacted]", given[: USER_AGENT_MAX * 2])[:USER_AGENT_MAX]
        clean = "".join(ch if ch.isprintable() else "?" for ch in clean)
        if len(_USER_AGENTS) < 1024:
            _USER_AGENTS[given] = clean
    return clean


def _account(svc: Services, state: RequestState, status: int) -> None:
    t = svc.telemetry
    now = svc.monotonic()
    model = t.model_label(state.model)
    c = state.classification
    error_type = c.type if c is not None and (status >= 400 or state.stream_error) else None
    series = (state.upstream, model)
    t.requests.inc((*series, status_label(status), error_label(error_type)))
    duration = now - state.started
    t.request_duration.observe(series, duration)
    ttfb = (state.first_byte_at - state.started) if state.first_byte_at is not None else None
    if ttfb is not None:
        t.time_to_first_byte.observe(series, ttfb)
    if state.upstream_head_s is not None and status < 400:
        t.upstream_first_byte.observe(series, state.upstream_head_s)
    for kind, n in state.usage.items():
        t.tokens.inc((*series, kind), n)
    record: dict[str, object] = {
        "event": "request",
        "request_id": state.request_id,
        "method": state.method,
        "path": state.path,
        "upstream": state.upstream,
        "model": model,
        "status": status,
        "error_type": error_label(error_type),
        "attempts": state.attempts,
        "retries": state.retries,
        "compressed": state.compressed,
        "stream": state.stream,
        "duration_ms": round(duration * 1000, 2),
        "ttfb_ms": round(ttfb * 1000, 2) if ttfb is not None else None,
        "user_agent": state.user_agent,
    }
    if c is not None and c.provider_code:
        record["provider_code"] = c.provider_code[:64]
    if state.compression is not None:
        record["compression"] = state.compression
    if state.tool_outputs is not None:
        record["tool_outputs"] = state.tool_outputs
    if state.ended_by is not None:
        record["ended_by"] = state.ended_by  # a response cut short after it started
    if state.continued_after is not None:
        record["continued_after"] = state.continued_after
    if state.fallbacks:
        record["fallbacks"] = state.fallbacks
    if state.translated is not None:
        record["translated"] = state.translated  # "messages->chat": client API -> upstream API
    if state.from_memory:
        record["from_memory"] = state.from_memory
    if state.usage:
        record["usage"] = state.usage
    ACCESS.emit(record)
