"""The request pipeline, readable in one sitting.

    admit      read the body (bounded), reject bad input with a clear 4xx
    route      the first upstream whose model globs match
    send       attempt → classify → wait or stop            (policy/retry.py decides)
    rescue     on context_overflow: compress once, send once (policy/compress.py decides)
    relay      buffered error, buffered body, raw passthrough or SSE stream

``observe`` (outside) times and logs it; ``stamp`` (on prepare) adds the header contract.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.auth import WWW_AUTHENTICATE
from gateway.dialects import dialect_for_errors
from gateway.dialects.base import Dialect, Inbound, Rejection
from gateway.errors import Classification, ErrorType
from gateway.pipeline.admit import model_of, parse_json_object, read_body
from gateway.pipeline.attempt import Call, ReadMode, attempt, circuit_open
from gateway.pipeline.outcome import (
    STATE,
    Failure,
    Outcome,
    RequestState,
    bad_request,
    failure_of,
    gateway_failure,
)
from gateway.pipeline.relay import relay
from gateway.policy.breaker import CircuitState
from gateway.policy.clients import compacts_itself
from gateway.policy.retry import RetryPlan, StopReason, run_with_retries
from gateway.routing import UnsafePath, pick_upstream, request_headers, upstream_url
from gateway.services import SERVICES, Services, UpstreamRuntime

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def full_pipeline(dialect: Dialect) -> Handler:
    """The handler of a dialect's own endpoint: every guarantee applies."""

    async def handle(request: web.Request) -> web.StreamResponse:
        svc, state = request.app[SERVICES], request[STATE]
        state.dialect = dialect
        refused = _authenticate(svc, request)
        if refused is not None:
            return await relay(request, svc, state, refused)
        inbound = await _admit(request, svc, dialect)
        if isinstance(inbound, Failure):
            return await relay(request, svc, state, inbound)
        state.model, state.stream = inbound.model, inbound.stream
        up = _route(svc, state, inbound.model)
        if isinstance(up, Failure):
            return await relay(request, svc, state, up)

        payload, strip_usage = dialect.prepare(inbound, up.cfg.stream_usage)
        call = Call(
            up, "POST",
            upstream_url(up.cfg.base_url, dialect.path, request.query_string),
            request_headers(request.headers.items(), up.cfg, state.request_id),
            ReadMode.STREAM if inbound.stream else ReadMode.BUFFER,
            dialect, strip_usage,
        )  # fmt: skip
        plan = _plan(svc, up)

        outcome = await _send(svc, state, plan, call, _encode(payload, inbound))
        if _overflowed(outcome) and svc.cfg.compression.enabled:
            assert isinstance(outcome, Failure)
            if _client_compacts(svc, request):
                state.compression = {"outcome": "passed_to_client", "reason": "the client compacts itself"}
                svc.telemetry.compressions.labels(up.cfg.name, "passed_to_client").inc()
            else:
                outcome = await _rescue(svc, state, plan, call, payload, outcome)
        return await relay(request, svc, state, outcome)

    return handle


def _authenticate(svc: Services, request: web.Request) -> Failure | None:
    """Only holders of a gateway key may spend the operator's provider keys."""
    result = svc.auth.check(request.headers)
    if result.ok:
        return None
    svc.telemetry.client_auth_refusals.labels(result.outcome).inc()
    code = "missing_client_key" if result.outcome == "missing" else "invalid_client_key"
    failure = gateway_failure(401, Classification.of(ErrorType.AUTH), result.message, code, final=True)
    failure.headers.append(("WWW-Authenticate", WWW_AUTHENTICATE))
    return failure


async def _admit(request: web.Request, svc: Services, dialect: Dialect) -> Inbound | Failure:
    body = await read_body(request, svc.cfg.server.max_body_bytes, svc.cfg.timeouts.idle_s)
    if isinstance(body, Failure):
        return body
    doc = parse_json_object(body)
    if isinstance(doc, Failure):
        return doc
    inbound = dialect.admit(body, doc)
    return bad_request(inbound.message, inbound.code) if isinstance(inbound, Rejection) else inbound


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other ``/v1/...`` path: routed, retried and stamped, never compressed."""
    svc, state = request.app[SERVICES], request[STATE]
    state.dialect = dialect_for_errors(request.path, "anthropic-version" in request.headers)
    refused = _authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    try:
        url_for = upstream_url("", request.raw_path.split("?", 1)[0], request.query_string)
    except UnsafePath as e:
        return await relay(request, svc, state, bad_request(str(e), "invalid_path"))
    body = await read_body(request, svc.cfg.server.max_body_bytes, svc.cfg.timeouts.idle_s)
    if isinstance(body, Failure):
        return await relay(request, svc, state, body)
    state.model = model_of(body, request.headers.get("Content-Type", ""))
    up = _route(svc, state, state.model)
    if isinstance(up, Failure):
        return await relay(request, svc, state, up)
    headers = request_headers(request.headers.items(), up.cfg, state.request_id)
    call = Call(up, request.method, up.cfg.base_url + url_for, headers, ReadMode.RAW)
    outcome = await _send(svc, state, _plan(svc, up), call, body)
    return await relay(request, svc, state, outcome)


async def hello(request: web.Request) -> web.StreamResponse:
    """Claude Code's start-up probe (``HEAD /api/hello``): answered here, never forwarded."""
    return web.Response(status=200)


async def not_found(request: web.Request) -> web.StreamResponse:
    svc, state = request.app[SERVICES], request[STATE]
    state.dialect = dialect_for_errors(request.path, "anthropic-version" in request.headers)
    failure = bad_request(
        "no such endpoint; the gateway serves /v1/... and /healthz, /readyz, /metrics",
        "not_found",
        status=404,
    )
    return await relay(request, svc, state, failure)


def _route(svc: Services, state: RequestState, model: str | None) -> UpstreamRuntime | Failure:
    cfg = pick_upstream(svc.cfg.upstreams, model)
    if cfg is None:
        return bad_request(
            "no upstream is configured for this model", "model_not_found", status=404
        )
    state.upstream = cfg.name
    svc.budget.record_request()
    return svc.upstreams[cfg.name]


def _client_compacts(svc: Services, request: web.Request) -> bool:
    mode = svc.cfg.compression.self_compacting_clients
    return mode == "pass_through" and compacts_itself(request.headers)


def _plan(svc: Services, up: UpstreamRuntime) -> RetryPlan:
    def may_retry() -> bool:
        # An open circuit means the next attempt would be refused anyway: stop with the
        # real upstream error instead of waiting for a refusal.
        return up.breaker.state is not CircuitState.OPEN and svc.budget.try_acquire_retry()

    return RetryPlan(svc.cfg.retry, now=svc.monotonic, rand=svc.rand, may_retry=may_retry)


async def _send(svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes) -> Outcome:
    """Send with retries. The circuit breaker counts whole requests, not attempts: one
    request's own retries are the retry policy's business, and a permanent 503 must cost
    exactly 1 + max_retries attempts."""
    up = call.up
    breaker = up.breaker
    if not breaker.allow():
        state.retries_settled = True
        return circuit_open(svc, up)

    def before_retry(outcome: Outcome, wait_s: float) -> None:
        assert isinstance(outcome, Failure)
        state.retries += 1
        svc.telemetry.retries.labels(up.cfg.name, outcome.classification.type.value).inc()

    async def one() -> Outcome:
        return await attempt(svc, state, plan, call, body)

    try:
        outcome = await run_with_retries(one, plan, failure_of, svc.sleep, before_retry)
    except BaseException:
        breaker.record_abandoned()
        raise
    state.retries_settled = plan.stopped in _SETTLED
    if isinstance(outcome, Failure) and outcome.classification.type is ErrorType.PROVIDER_UNAVAILABLE:
        breaker.record_failure()
    else:
        breaker.record_success()  # any answer, even a 4xx, shows the provider is up
    return outcome


_SETTLED = frozenset({StopReason.EXHAUSTED, StopReason.BUDGET, StopReason.DEADLINE})


def _overflowed(outcome: Outcome) -> bool:
    return (
        isinstance(outcome, Failure)
        and outcome.classification.type is ErrorType.CONTEXT_OVERFLOW
    )


async def _rescue(
    svc: Services,
    state: RequestState,
    plan: RetryPlan,
    call: Call,
    payload: dict[str, Any],
    overflow: Failure,
) -> Outcome:
    """Exactly one compress-and-retry; a second overflow goes back to the client."""
    up = call.up
    counter = svc.telemetry.compressions
    result = call.dialect.compress(
        payload, error_message=overflow.classification.message, context_window=up.cfg.context_window
    )
    state.compression = {"outcome": result.outcome, **result.report}
    if result.payload is None:
        counter.labels(up.cfg.name, "not_applicable").inc()
        return overflow
    state.compressed = True
    body = json.dumps(result.payload, ensure_ascii=False).encode()
    outcome = await _send(svc, state, plan, call, body)
    label = "still_overflow" if _overflowed(outcome) else "applied"
    state.compression["outcome"] = label
    counter.labels(up.cfg.name, label).inc()
    return outcome


def _encode(payload: dict[str, Any], inbound: Inbound) -> bytes:
    # Unchanged requests go upstream byte for byte.
    return inbound.body if payload is inbound.payload else json.dumps(payload).encode()
