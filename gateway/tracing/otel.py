"""The SDK-backed tracer: spans built from what the pipeline already records in RequestState.

Spans are handed to a ``BatchSpanProcessor``: ending one appends it to a bounded queue, and
the SDK's own thread exports batches over OTLP/HTTP. So a slow or dead collector costs a
request nothing, and when the queue is full new spans are dropped, never buffered without
bound. Span timestamps of events (first byte, first visible token) are placed on the span's
wall-clock start by the pipeline's monotonic clock, so fake clocks in tests stay coherent.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.config import TracingConfig
from gateway.errors import ErrorType
from gateway.pipeline.outcome import Failure
from gateway.tracing import Attrs, Tracing
from gateway.tracing.attrs import (
    P,
    compression_attrs,
    input_content,
    operation_name,
    output_content,
    provider_name,
    response_attrs,
    stream_identity,
    tool_output_attrs,
    usage_attrs,
)

if TYPE_CHECKING:
    from gateway.errors import Classification
    from gateway.pipeline.attempt import Call
    from gateway.pipeline.outcome import Outcome, RequestState
    from gateway.policy.retry import StopReason

_W3C = TraceContextTextMapPropagator()
CLOSE_S = 2.0
_CONTEXT_HEADERS = frozenset({"traceparent", "tracestate"})
_API_PATHS = frozenset({"/v1/chat/completions", "/v1/messages", "/v1/responses"})
_GEMINI_METHODS = (":generateContent", ":streamGenerateContent")
# An upstream URL's path ends so when the call generates (base_url + the API's path after /v1).
_GENERATING = tuple(p.removeprefix("/v1") for p in sorted(_API_PATHS))
_NAMED_PATHS = _API_PATHS | {"/v1/models", "/v1/messages/count_tokens", "/api/hello", "/"}


def otlp_provider(cfg: TracingConfig, env: Mapping[str, str]) -> TracerProvider:
    """A provider exporting over OTLP/HTTP; what config leaves unset the SDK reads from the
    OTEL_* variables (endpoint, headers, timeout, sampler, batch sizes, resource)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    name = cfg.service_name or env.get("OTEL_SERVICE_NAME") or "llm-gateway"
    resource = Resource.create({SERVICE_NAME: name, "service.version": __version__})
    sampler = ParentBased(TraceIdRatioBased(cfg.sample_ratio)) if cfg.sample_ratio is not None else None
    # No atexit flush of its own: close() flushes within a bound, a dead collector would hold
    # the exiting process for the exporter's full timeout.
    provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
    endpoint = traces_url(cfg.endpoint) if cfg.endpoint else None
    timeout = cfg.export_timeout_s
    exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)
    # The SDK refuses a batch larger than the queue (OTEL_BSP_MAX_QUEUE_SIZE=100 alone would
    # stop the gateway from starting): the batch is capped at the queue instead.
    queue = cfg.max_queue_size or _int(env.get("OTEL_BSP_MAX_QUEUE_SIZE"), 2048)
    batch = min(queue, _int(env.get("OTEL_BSP_MAX_EXPORT_BATCH_SIZE"), 512))
    provider.add_span_processor(BatchSpanProcessor(
        exporter, max_queue_size=queue, max_export_batch_size=batch,
        export_timeout_millis=timeout * 1000 if timeout is not None else None,
    ))  # fmt: skip
    return provider


def _int(text: str | None, default: int) -> int:
    try:
        value = int(text) if text else default
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass(slots=True)
class _Attempt:
    span: Span
    t0_ns: int  # wall-clock start, the base of event timestamps
    m0: float  # the pipeline's monotonic clock at the start
    call: object  # the Call it sends: which span an outcome belongs to
    ended_ns: int | None = None  # when its exchange ended; None while a body is still read
    answered: bool = False  # a success: the request's usage is this attempt's
    has_outcome: bool = False  # attempt_ended has been called for it
    failed: bool = False  # a failure, or a stream that broke after it started
    decided: bool = False  # its llm_gateway.decision is written (else "stop" when it ends)


@dataclass(slots=True)
class _Trace:
    span: Span
    token: object  # the attached context, detached at the end
    t0_ns: int
    m0: float
    parent: otel_context.Context
    attempt: _Attempt | None = None  # the last attempt started, or the last to learn its outcome
    # Attempts still waiting for their outcome while another started (GET /v1/models asks every
    # upstream at once); None on the common path, one attempt at a time.
    aside: list[_Attempt] | None = None
    kind: str = "first"  # what the next attempt is
    overflow: str | None = None  # what detected the last context overflow (its evidence)
    pending: dict[str, Any] = field(default_factory=dict)  # attributes for the next attempt


def traces_url(endpoint: str) -> str:
    """OTLP/HTTP's traces path on the collector's base URL, as the spec's
    OTEL_EXPORTER_OTLP_ENDPOINT is read: onto its path, before any query (a collector that
    takes `?token=...`), not after it."""
    parts = urlsplit(endpoint)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/v1/traces"))


def _at(t0_ns: int, m0: float, mono: float) -> int:
    return t0_ns + max(0, int((mono - m0) * 1e9))


class OtelTracing(Tracing):
    enabled = True

    def __init__(
        self, provider: TracerProvider, monotonic: Callable[[], float], *, capture_content: bool = False
    ) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("llm-gateway", __version__)
        self.capture = capture_content
        self._mono = monotonic
        self._static: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._known: tuple[str, ...] = ()

    def know_secrets(self, keys: tuple[str, ...]) -> None:
        self._known = keys

    # The request

    def begin(self, headers: Mapping[str, str], state: RequestState) -> None:
        parent = _W3C.extract(headers)
        # Span names stay few: a route, never a client's arbitrary path.
        path = state.path
        if path not in _NAMED_PATHS:
            path = "/v1/*" if path.startswith("/v1/") else "/*"
        t0 = time.time_ns()
        span = self.tracer.start_span(
            f"{state.method} {path}", context=parent, kind=SpanKind.SERVER, start_time=t0,
            attributes={"http.request.method": state.method, "url.path": state.path,
                        f"{P}request_id": state.request_id},
        )  # fmt: skip
        if state.user_agent:
            span.set_attribute("user_agent.original", state.user_agent)
        ctx = trace.set_span_in_context(span, parent)
        # Attached for the request's task, so that its log lines name the span (logs.py).
        token = otel_context.attach(ctx)
        state.trace = _Trace(span, token, t0, state.started, ctx)

    def end(self, state: RequestState, status: int) -> None:
        rt: _Trace | None = state.trace
        if rt is None:
            return
        a = rt.attempt
        if a is not None:
            rt.attempt = None
            self._close_attempt(a, state, final=True)
        if rt.aside:
            for a in rt.aside:
                self._close_attempt(a, state, final=True, answered=False)
            rt.aside = None
        span = rt.span
        with contextlib.suppress(ValueError):  # detached already (a handler's own task)
            otel_context.detach(rt.token)  # type: ignore[arg-type]
        if span.is_recording():
            span.set_attributes(self._request_attrs(rt, state, status))
            if state.first_byte_at is not None:
                at = _at(rt.t0_ns, rt.m0, state.first_byte_at)
                span.add_event(f"{P}first_byte_to_client", timestamp=at)
            c = state.classification
            if c is not None and (status >= 400 or state.stream_error is not None):
                span.set_attribute("error.type", c.type.value)
                if status >= 500 or state.stream_error is not None:
                    span.set_status(Status(StatusCode.ERROR, c.type.value))
        span.end()

    def ids(self, state: RequestState) -> tuple[str, str] | None:
        rt: _Trace | None = state.trace
        if rt is None:
            return None
        ctx = rt.span.get_span_context()
        return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")

    def _request_attrs(self, rt: _Trace, state: RequestState, status: int) -> dict[str, Any]:
        # The SDK validates and the exporter encodes every attribute (most of tracing's cost):
        # counters that are zero and flags that are false are left out.
        a: dict[str, Any] = {"http.response.status_code": status, f"{P}upstream": state.upstream,
                             f"{P}attempts": state.attempts}  # fmt: skip
        if state.retries:
            a[f"{P}retries"] = state.retries
        if state.fallbacks:
            a[f"{P}fallbacks"] = state.fallbacks
        if state.stream:
            a[f"{P}stream"] = True
        if state.path in _API_PATHS or state.path.endswith(_GEMINI_METHODS):
            a["gen_ai.operation.name"] = operation_name(state.dialect.api)
        if state.model is not None:
            a["gen_ai.request.model"] = state.model
        if state.translated is not None:
            a[f"{P}translated"] = state.translated
        if state.from_memory:
            a[f"{P}loop_breaker.recalled"] = state.from_memory
        if state.tool_outputs_capped:
            a[f"{P}tool_outputs.capped"] = state.tool_outputs_capped
        # The per-tool policy's report (projected / excluded / cut per stage), where the
        # pipeline records one (#23): read by name so either side can land first.
        report = getattr(state, "tool_outputs", None)
        if isinstance(report, Mapping):
            a.update(tool_output_attrs(report))
        if state.compression is not None:
            a.update(compression_attrs(state.compression, status, rt.overflow))
        if state.continued_after is not None:
            a[f"{P}continuation.after"] = state.continued_after
        if state.ended_by is not None:
            a[f"{P}ended_by"] = state.ended_by
        if state.retries_settled:
            a[f"{P}retries_settled"] = True
        a.update(usage_attrs(state.usage))
        return a

    # Attempts

    def attempt_started(self, state: RequestState, call: Call, body: bytes) -> Mapping[str, str]:
        rt: _Trace | None = state.trace
        if rt is None:
            return call.headers
        prev = rt.attempt
        if prev is not None:
            if not prev.has_outcome and prev.call is not call:
                # Sent at the same time as this one (not before it): it stays open for its outcome.
                if rt.aside is None:
                    rt.aside = []
                rt.aside.append(prev)
            else:
                self._close_attempt(prev, state, final=False)
        kind, rt.kind = rt.kind, "first"
        pending, rt.pending = rt.pending, {}
        model = _sent_model(call, state.model)
        where = self._where(call)
        op = where["gen_ai.operation.name"]
        attrs = {**where, f"{P}attempt.kind": kind, f"{P}attempt.number": state.attempts, **pending}
        if model:
            attrs["gen_ai.request.model"] = model
        if call.translation is not None:
            attrs[f"{P}translated"] = f"{state.dialect.api}->{call.dialect.api}"
        if kind == "compress_retry" and state.compression is not None:
            attrs.update(compression_attrs(state.compression, None, rt.overflow))
        t0 = time.time_ns()
        span = self.tracer.start_span(
            f"{op} {model}" if model else op, context=rt.parent, kind=SpanKind.CLIENT,
            start_time=t0, attributes=attrs,
        )  # fmt: skip
        if self.capture and span.is_recording():
            span.set_attributes(input_content(body, call.dialect.api, self._known))
        rt.attempt = _Attempt(span, t0, self._mono(), call)
        headers = {k: v for k, v in call.headers.items() if k.lower() not in _CONTEXT_HEADERS}
        _W3C.inject(headers, context=trace.set_span_in_context(span))
        return headers

    def attempt_ended(self, state: RequestState, call: Call, outcome: Outcome) -> None:
        rt: _Trace | None = state.trace
        if rt is None:
            return
        a = rt.attempt
        if a is None or a.call is not call:
            a = self._aside(rt, state, call)
            if a is None:
                return
        a.has_outcome = True
        now_m = self._mono()
        span = a.span
        if not span.is_recording():
            a.ended_ns = _at(a.t0_ns, a.m0, now_m)
            return
        head = call.head_s
        if head is not None:  # this attempt saw a response head
            span.add_event(f"{P}first_byte", timestamp=_at(a.t0_ns, a.m0, a.m0 + head))
        if isinstance(outcome, Failure):
            a.failed = True
            c = outcome.classification
            if c.type is ErrorType.CONTEXT_OVERFLOW:
                assert rt is not None
                rt.overflow = c.evidence or c.provider_code or "classified"
            span.set_attributes(_failure_attrs(c, outcome))
            span.set_status(Status(StatusCode.ERROR, c.type.value))
            a.ended_ns = _at(a.t0_ns, a.m0, now_m)
            return
        span.set_attribute("http.response.status_code", outcome.status)
        a.answered = True
        if outcome.sse:
            span.add_event(f"{P}first_visible_token", timestamp=_at(a.t0_ns, a.m0, now_m))
            span.set_attributes(stream_identity(outcome.held))
        elif outcome.chunks is None:
            span.set_attributes(response_attrs(outcome.body))
            if self.capture:
                # A translated answer is read already in the client's API (one the translation
                # could not read is still the upstream's).
                api = state.dialect.api if call.translation is not None else call.dialect.api
                content = output_content(outcome.body, api, self._known)
                if not content and api != call.dialect.api:
                    content = output_content(outcome.body, call.dialect.api, self._known)
                span.set_attributes(content)
            a.ended_ns = _at(a.t0_ns, a.m0, now_m)

    def leg_ended(self, state: RequestState, c: Classification | None, ended_by: str | None,
                  relayed: bool = True) -> None:  # fmt: skip
        rt: _Trace | None = state.trace
        a = rt.attempt if rt is not None else None
        if a is None:
            return
        a.ended_ns = _at(a.t0_ns, a.m0, self._mono())
        a.answered = a.answered and relayed  # a replay set aside: the request's usage is not its
        a.failed = a.failed or c is not None
        span = a.span
        if not span.is_recording():
            return
        if ended_by is not None:
            span.set_attribute(f"{P}ended_by", ended_by)
        if c is not None:
            span.set_attributes(_error_attrs(c))
            span.set_status(Status(StatusCode.ERROR, c.type.value))

    def _aside(self, rt: _Trace, state: RequestState, call: Call) -> _Attempt | None:
        """The attempt of ``call`` among those made at the same time, made the last attempt (what
        the decisions after its outcome are about); the one that was is set aside, or ended when
        its outcome came already."""
        aside = rt.aside
        found = next((a for a in aside if a.call is call), None) if aside else None
        if found is None:
            return None
        assert aside is not None
        aside.remove(found)
        prev = rt.attempt
        if prev is not None:
            if prev.has_outcome and prev.ended_ns is not None:
                self._close_attempt(prev, state, final=False)
            else:
                aside.append(prev)
        rt.attempt = found
        return found

    def _close_attempt(self, a: _Attempt, state: RequestState, *, final: bool, answered: bool = True) -> None:
        """Ends ``a``'s span: ``final`` when the request ended; ``answered``: the request's
        usage may be this attempt's (not one of several made at once)."""
        if a.span.is_recording():
            if a.failed and not a.decided:
                a.span.set_attribute(f"{P}decision", "stop")  # nothing followed its failure
            # The answer's usage is counted as the relay writes it: for an unstreamed answer,
            # after the end time its span already has.
            if final and answered and (a.answered or a.ended_ns is None):
                a.span.set_attributes(usage_attrs(state.usage))
            # A body still being read when the request ended (a relayed stream) or when the next
            # attempt started (a stream broken mid-answer, now continued).
            if a.ended_ns is None and (state.ended_by is not None or not final):
                a.span.set_attribute(f"{P}ended_by", state.ended_by or state.continued_after or "broken")
        a.span.end(end_time=a.ended_ns)

    def _where(self, call: Call) -> dict[str, Any]:
        """What an attempt's span says about its upstream: the same for every call of one
        upstream to one URL. The name is part of the key: a pool's deployments are often keys
        of one provider, at one base URL."""
        key = (call.up.cfg.name, call.url, call.dialect.api, call.method)
        found = self._static.get(key)
        if found is None:
            url = urlsplit(call.url)
            # By the path the call goes to, not its dialect: a pass-through call (an embedding)
            # carries the chat dialect, a Gemini countTokens call the Gemini one.
            if call.method != "POST":
                op = call.method.lower()
            elif url.path.endswith(_GEMINI_METHODS):
                op = operation_name("gemini")
            elif url.path.endswith(_GENERATING):
                op = operation_name(call.dialect.api)
            else:
                op = "post"
            found = {
                "gen_ai.operation.name": op,
                "gen_ai.provider.name": provider_name(url.hostname or "", call.dialect.api),
                "server.address": url.hostname or "",
                "server.port": url.port or (443 if url.scheme == "https" else 80),
                f"{P}upstream": call.up.cfg.name,
                f"{P}upstream_api": call.dialect.api,
            }
            if len(self._static) < 1024:  # passthrough paths come from clients
                self._static[key] = found
        return found

    # Decisions

    def next_attempt(self, state: RequestState, kind: str | None, attrs: Attrs | None = None) -> None:
        rt: _Trace | None = state.trace
        if rt is not None:
            if kind is not None:
                rt.kind = kind
                a = rt.attempt
                if a is not None and a.failed and not a.decided:
                    # What the next attempt is says what followed this one's failure.
                    a.decided = True
                    a.span.set_attribute(f"{P}decision", _FOLLOWS.get(kind, "retry"))
            if attrs:
                rt.pending.update(attrs)

    def _decide(self, state: RequestState, attrs: Attrs) -> None:
        rt: _Trace | None = state.trace
        if rt is not None and rt.attempt is not None:
            rt.attempt.decided = True
            rt.attempt.span.set_attributes(attrs)

    def retrying(self, state: RequestState, c: Classification, wait_s: float) -> None:
        source = "retry_after" if c.retry_after_s is not None else "backoff"
        self._decide(state, {f"{P}decision": "retry", f"{P}retry.wait_s": round(wait_s, 3),
                             f"{P}retry.wait_source": source})  # fmt: skip
        self.next_attempt(state, "retry")

    def settled(self, state: RequestState, stopped: StopReason | None) -> None:
        # Retrying here is over, but the request may go on (a fixed request sent again, a
        # sibling, a fallback): the decision is written by what follows, else "stop" at the end.
        rt: _Trace | None = state.trace
        if stopped is not None and rt is not None and rt.attempt is not None:
            rt.attempt.span.set_attribute(f"{P}stop_reason", stopped.value)

    def moving_on(self, state: RequestState, to: str) -> None:
        self._decide(state, {f"{P}decision": "fallback", f"{P}fallback.to": to})
        self.next_attempt(state, "fallback")

    def event(self, state: RequestState, name: str, attrs: Attrs) -> None:
        rt: _Trace | None = state.trace
        if rt is not None:
            rt.span.add_event(f"{P}{name}", attributes=dict(attrs))

    def annotate(self, state: RequestState, attrs: Attrs) -> None:
        rt: _Trace | None = state.trace
        if rt is not None:
            rt.span.set_attributes(attrs)

    async def close(self) -> None:
        # The exporter's last flush runs in a daemon thread, waited for at most CLOSE_S: a
        # dead collector cannot hold up the exit (what is left is dropped with the process).
        done = threading.Event()

        def shutdown() -> None:
            try:
                self.provider.shutdown()
            finally:
                done.set()

        threading.Thread(target=shutdown, name="otel-shutdown", daemon=True).start()
        await asyncio.get_running_loop().run_in_executor(None, done.wait, CLOSE_S)


# llm_gateway.decision of a failed attempt by the kind of the attempt after it; any other kind
# (retry, probe, compress_retry, output_retry, param_retry, reasoning_retry) is a retry.
_FOLLOWS = {"fallback": "fallback", "sibling": "sibling", "continuation": "continuation"}


def _sent_model(call: Call, asked: str | None) -> str | None:
    return call.wire_model if call.wire_model is not None else asked


def _failure_attrs(c: Classification, f: Failure) -> dict[str, Any]:
    a = _error_attrs(c)
    status = f.upstream_status if f.upstream_status is not None else (f.status if f.own is None else None)
    if status is not None:
        a["http.response.status_code"] = status
    return a


def _error_attrs(c: Classification) -> dict[str, Any]:
    a: dict[str, Any] = {
        "error.type": c.type.value,
        f"{P}error.class": c.type.value,
        f"{P}error.retryable": c.retryable,
    }
    if c.provider_code:
        a[f"{P}error.code"] = c.provider_code[:64]
    if c.evidence:
        a[f"{P}error.evidence"] = c.evidence[:120]  # codes and numbers, never a prompt
    if c.retry_after_s is not None:
        a[f"{P}error.retry_after_s"] = c.retry_after_s
    return a
