"""The outermost stage: request id, in-flight gauge, timing, metrics and one JSON log line.

It also turns anything unexpected into a 500 in the OpenAI error shape, so no
traceback or internal detail ever reaches a client.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import traceback
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.apis import DIALECT_FOR_API, api_of_path, dialect_for_errors
from gateway.apis.base import Dialect
from gateway.errors import Classification, ErrorType
from gateway.live import LIVE
from gateway.logs import ACCESS
from gateway.pipeline import accounting
from gateway.pipeline.attempt import leg_over, settle_circuit
from gateway.pipeline.models import gemini_caller
from gateway.pipeline.outcome import STATE, AtOnce, RequestState
from gateway.pipeline.relay import CLIENT_GONE, SHUTDOWN, relay, shutdown_failure
from gateway.pipeline.stamp import stamp
from gateway.services import SERVICES, Services
from gateway.telemetry import SHUTDOWN as SHUTDOWN_ERROR
from gateway.telemetry import error_label, status_label

log = logging.getLogger("gateway.access")

PATH_MAX = 128
MODEL_MAX = 128
USER_AGENT_MAX = 160
# Anything in a User-Agent that looks like a token (long, unbroken, key-like) is masked: a
# misconfigured client could put its key there, and the log line never carries one. A long
# run that is a product token (`ai-sdk/provider-utils/4.0.65`, `runtime/node.js/v20.20.2`,
# `opencode/0.0.0-dev-202511250012`) is what ordinary clients send and stays readable.
_TOKENISH = re.compile(
    r"[A-Za-z0-9_\-.+/=:]{24,}|(?i:bearer|basic)\s*\S*|(?<![A-Za-z0-9])(?i:sk-|key-|api[_-]?key)\S*"
)
# name[/name...]/version: short lowercase-or-dashed names, a dotted version, then at most a few
# short pre-release parts (a key has no dots every few characters; a timestamp is all digits),
# and a model's name after it, as Gemini CLI adds ("GeminiCLI/0.61.0/gemini-2.5-flash").
_PRODUCT = re.compile(
    r"(?:[A-Za-z][A-Za-z0-9_.-]{0,31}/){1,3}v?\d{1,6}(?:\.\d{1,6}){1,3}(?:[-+.](?:[A-Za-z0-9]{1,12}|\d{1,14})){0,3}"
    r"(?:/[a-z][a-z0-9]{0,15}(?:[-.][a-z0-9]{1,15}){0,6})?"  # short parts: no key reads as a model
)
_USER_AGENTS: dict[str, str] = {}  # clients send few distinct ones: each is cleaned once

# A client's id is echoed in headers and logs, so only a safe, bounded shape is accepted.
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_id_of(request: web.Request) -> str:
    given = request.headers.get("x-request-id")
    if given and _SAFE_ID.match(given):
        return given
    # 128 random bits as 32 hex digits. An id is no secret, so the process's seeded generator
    # (reseeded in a forked child) serves: os.urandom is a getrandom(2) call per request, one
    # of ~6 syscalls on the plain path, and syscalls are dear in the VMs and sandboxes gateways run in.
    # The same 32 digits as f"{n:032x}", a third cheaper than the format spec's parse.
    return random.getrandbits(128).to_bytes(16).hex()


def observed(handler: Handler, at_once: AtOnce | None = None) -> Handler:
    """``handler`` wrapped in the outermost stage. Wrapping each route's handler, rather
    than installing a middleware, spares aiohttp's middleware chain (two more coroutines
    and a partial per request): every request reaches some route, the last catches all. Health,
    readiness and metrics are not API traffic: their routes are ``unobserved``.

    ``at_once``: how an answer is sent where the request is no HTTP exchange of its own (a turn
    of the Responses API's WebSocket mode, gateway/pipeline/websocket.py); observe hands a
    buffered answer there, never preparing one on the request, whose connection is no longer
    HTTP. Given with the route, not read off each request: aiohttp's ``request.get`` of a key
    not there raises and catches a KeyError through two Python frames (issue #38)."""

    async def observe(request: web.Request) -> web.StreamResponse:
        # Read once: the request runs to its end on this config, whatever a reload swaps in.
        svc = request[SERVICES] = request.app[LIVE].services
        svc.busy_poll.touch()
        life = svc.life
        state = RequestState(request_id=request_id_of(request), started=svc.monotonic())
        state.method, state.path = request.method, request.path[:PATH_MAX]
        state.user_agent = user_agent_of(request.headers.get("User-Agent"))
        request[STATE] = state
        state.over_websocket = at_once is not None
        svc.tracing.begin(request.headers, state)
        life.in_flight += 1  # the in-flight gauge reads it at scrape time
        life.arrived = state.started
        task = asyncio.current_task()
        assert task is not None
        life.handling.add(task)  # what Lifecycle.cut ends when drain_s runs out
        svc.serving += 1
        status = 500
        response: web.StreamResponse | None = None
        try:
            try:
                if life.shutting_down:  # came after drain_s ran out: the listener is closing
                    state.dialect = _dialect_of_path(request)
                    raise asyncio.CancelledError
                response = await handler(request)
            except asyncio.CancelledError:
                if not life.shutting_down or state.first_byte_at is not None:
                    raise
                # drain_s ran out before this request's answer began: it is told so, in its
                # API's envelope, rather than left to the closing of its connection.
                task.uncancel()
                response = await relay(request, svc, state, shutdown_failure(svc, state))
            # 499 (nginx's convention) only for a client that left before any head reached it;
            # one that left mid-stream got its head's status, and ended_by says it left.
            gone_early = state.ended_by == CLIENT_GONE and state.head_status is None
            status = 499 if gone_early else response.status
            if not response.prepared:
                # Send a buffered reply before accounting for it: the log line and metrics then
                # stay off the client's critical path, and the duration includes the write.
                stamp(state, response, svc.monotonic(), close=life.draining and at_once is None)
                try:
                    if at_once is not None:
                        await at_once(request, response)
                    else:
                        await response.prepare(request)
                        await response.write_eof()
                except ConnectionError:
                    status = 499  # the client left just before its answer; nothing to send it
            return response
        except web.HTTPException as e:
            status = e.status
            stamp(state, e, None, close=life.draining)  # aiohttp sends it, after the accounting below
            raise
        except asyncio.CancelledError:
            if life.shutting_down and response is not None:
                # drain_s ran out while the answer was being written (a large body to a slow
                # reader): the client has a truncated answer, and the log says why.
                state.ended_by, status = SHUTDOWN, response.status
            elif state.head_status is not None:
                # The client left mid-stream (aiohttp cancels the handler, usually before a
                # write fails): it got this head, and the answer ended because it left.
                status = state.head_status
                if state.ended_by is None and not state.stream_complete:
                    state.ended_by = CLIENT_GONE
            else:
                status = 499  # the client left before any answer: nginx's convention, not a 5xx
            raise
        except Exception as e:
            # The type and place only: an exception's text can quote the request (a prompt).
            where = traceback.extract_tb(e.__traceback__)[-1]
            log.error({
                "request_id": state.request_id, "event": "unhandled_error",
                "exception": type(e).__name__, "at": f"{where.filename}:{where.lineno}",
            })  # fmt: skip
            state.classification = c = Classification.of(ErrorType.UNKNOWN)
            if state.first_byte_at is not None and request.transport is not None and at_once is None:
                # A streamed answer had begun: a 500 written after it reads as garbage in the
                # stream, or as nothing while the client waits for the stream's end (it hung
                # until its own timeout). Cut instead: the client sees a broken answer at once.
                state.ended_by = "internal_error"
                request.transport.close()
            body = state.dialect.error_body(
                500, "internal gateway error", "internal_error", c, state.request_id
            )
            response = web.Response(status=500, body=body, content_type="application/json")
            stamp(state, response, None, close=life.draining)  # aiohttp sends it, after the accounting below
            return response
        finally:
            life.in_flight -= 1
            life.handling.discard(task)
            svc.serving -= 1
            if state.pool_sent is not None and svc.pool_state is not None:
                # Its answer stated no usage (or the client left first): its estimate stays
                # counted, no longer as in flight (a request waiting for room looks again).
                sent, state.pool_sent = state.pool_sent, None
                svc.pool_state.landed(sent.up, sent.model, sent.mark)
            if state.holding is not None and svc.pool_state is not None:
                svc.pool_state.release(state.holding)
            if state.key is not None:
                accounting.settle(svc, state)
            svc.tracing.end(state, status)
            _account(svc, state, status)
            if svc.serving == 0 and svc.retired is not None:
                svc.retired()  # the last request of a replaced config
            if life.in_flight == 0:
                for wake in life.idle:
                    wake()
            svc.busy_poll.touch()  # the answer is out: the client's next request may come soon
            if state.circuit_due is not None:  # an answer never relayed (the client left before it began)
                settle_circuit(state, answered=False)

    return observe


def unobserved(handler: Handler) -> Handler:
    """``handler`` for health, readiness and metrics: not API traffic, so no log line per probe
    or scrape and no request metrics, but the two headers the contract puts on every response,
    for a client or load balancer that correlates by id. No upstream is asked: attempts 0."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = await handler(request)
        response.headers["x-request-id"] = request_id_of(request)
        response.headers["x-llm-attempts"] = "0"
        return response

    return answer


def _dialect_of_path(request: web.Request) -> Dialect:
    """The API whose envelope an error takes when no handler has said (its path's, else
    what the headers tell)."""
    api = api_of_path(request.path)
    if api is not None:
        return DIALECT_FOR_API[api]
    return dialect_for_errors(request.path, "anthropic-version" in request.headers, gemini_caller(request))


def user_agent_of(given: str | None) -> str | None:
    """The client's User-Agent for the log: bounded, printable, token-like parts masked."""
    if not given:
        return None
    clean = _USER_AGENTS.get(given)
    if clean is None:
        clean = _TOKENISH.sub(_mask, given[: USER_AGENT_MAX * 2])[:USER_AGENT_MAX]
        clean = "".join(ch if ch.isprintable() else "?" for ch in clean)
        if len(_USER_AGENTS) < 1024:
            _USER_AGENTS[given] = clean
    return clean


def model_asked(model: str | None) -> str:
    """The model as the client named it, for the log: bounded and printable, as it is client
    input. Not the metric label, which turns into ``other`` past the first names seen: a line
    per request costs no series, and an operator looking for one request needs its name."""
    if not model:
        return "none"
    if len(model) <= MODEL_MAX and model.isprintable():
        return model  # the usual name: no copy
    return "".join(ch if ch.isprintable() else "?" for ch in model[:MODEL_MAX])


def _count_empty(svc: Services, state: RequestState) -> None:
    """Empty-stream attempts and their retries, under what the probe found they were (an
    overflow, say), else provider_unavailable as classified: so an overflow probed against
    llama-cpp-python does not feed the provider's attempt and retry-ratio figures."""
    t, label = svc.telemetry, state.empty_was.value
    for upstream in state.empty_attempts:
        t.upstream_attempts.inc((upstream, label))
    for upstream in state.empty_retries:
        t.retries.labels(upstream, label).inc()


def _mask(m: re.Match[str]) -> str:
    found = m.group()
    # A product token reads as one, unless a key hides in it (`tool/1.0-sk-...`).
    if _PRODUCT.fullmatch(found) and not re.search(r"(?i)(?<![A-Za-z0-9])(sk|key)-", found):
        return found
    return "[redacted]"


def _account(svc: Services, state: RequestState, status: int) -> None:
    t = svc.telemetry
    now = svc.monotonic()
    model = t.model_label(state.model)
    c = state.classification
    error_type = c.type if c is not None and (status >= 400 or state.stream_error) else None
    # A request the gateway ended itself when drain_s ran out is a rollout, not a provider outage
    # (the client is still told provider_unavailable, retryable: another replica will serve it).
    error = SHUTDOWN_ERROR if state.ended_by == SHUTDOWN else error_label(error_type)
    series = (state.upstream, model)
    t.requests.inc((*series, status_label(status), error))
    if state.reading_from is not None:  # an answer never relayed (the client left before it began)
        leg_over(svc, state)
    if state.empty_attempts or state.empty_retries:
        _count_empty(svc, state)
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
        "model": model_asked(state.model),
        "status": status,
        "error_type": error,
        "attempts": state.attempts,
        "retries": state.retries,
        "compressed": state.compressed,
        "stream": state.stream,
        # Milliseconds to two decimals without round(x, 2), which rounds through a decimal
        # string (CPython's dtoa) at twice the cost; the two can differ by 0.01 ms near a half.
        "duration_ms": round(duration * 100_000) / 100,
        "ttfb_ms": round(ttfb * 100_000) / 100 if ttfb is not None else None,
        "user_agent": state.user_agent,
    }
    if state.over_websocket:
        record["transport"] = "websocket"  # a response.create of the Responses API's WebSocket mode
    if c is not None and c.provider_code:
        record["provider_code"] = c.provider_code[:64]
    if error_type is not None and c is not None and c.evidence:
        record["evidence"] = c.evidence[:120]  # what decided the class: codes and numbers, never a prompt
    if state.compression is not None:
        record["compression"] = state.compression
    if state.tool_outputs is not None:
        record["tool_outputs"] = state.tool_outputs
    if state.params_dropped:
        # Field names, and an adapted setting's values as asked and as sent (``top_k=64->40``,
        # ``reasoning_effort=low->medium``): an effort on OpenAI's scale or a number, never client text.
        record["params_dropped"] = state.params_dropped
    if state.reasoning_dropped is not None:
        record["reasoning_dropped"] = state.reasoning_dropped  # what kind, never content
    if state.output_capped is not None:
        record["output_capped"] = state.output_capped  # numbers and a source, never content
    if state.ended_by is not None:
        record["ended_by"] = state.ended_by  # a response cut short after it started
    if state.after_end is not None:
        record["after_end"] = state.after_end  # the upstream broke once its answer was complete
    if state.continued_after is not None:
        record["continued_after"] = state.continued_after
    if state.fallbacks:
        record["fallbacks"] = state.fallbacks
    if state.key is not None:
        record["key"] = state.key.name
        if state.key.team:
            record["team"] = state.key.team
        if state.cost_usd is not None:
            record["cost_usd"] = round(state.cost_usd, 6)
            if not state.priced:
                record["priced"] = False  # no price for the model: the cost is unknown, not zero
        if state.reservation is not None:
            # The period a budget is charged: its admission's, where ``ts`` is the end's (a
            # request across midnight counts toward the day that ended; audit).
            for field_name, period in state.reservation.charged_periods().items():
                record[f"{field_name}_period"] = period
        if state.cost_legs is not None:  # models and counts, never content
            record["legs"] = [{**part, "model": model_asked(str(part["model"] or ""))}
                              for part in state.cost_legs]  # fmt: skip
    if state.session is not None:
        record["session"] = state.session
    if state.pool is not None:
        record["pool"], record["picked"] = state.pool, state.picked  # the deployment is "upstream"
    if state.translated is not None:
        record["translated"] = state.translated  # "messages->chat": client API -> upstream API
    if state.from_memory:
        record["from_memory"] = state.from_memory
    if state.usage:
        record["usage"] = state.usage
    ids = svc.tracing.ids(state)
    if ids is not None:
        record["trace_id"], record["span_id"] = ids
    ACCESS.emit(record)
