"""OpenTelemetry traces of the pipeline: one server span per request, one client span per
upstream attempt (docs/operations/tracing.md has the tree and the attribute table).

The pipeline calls a few methods of :class:`Tracing` at fixed points. With tracing off (the
default) ``Services.tracing`` is a plain :class:`Tracing`, whose methods do nothing, so the
request path pays one method call per hook and imports nothing of the SDK. ``build`` returns
the SDK-backed one (``otel.OtelTracing``) when config or the OTEL_* variables switch it on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from gateway.config import TracingConfig

if TYPE_CHECKING:
    from gateway.errors import Classification
    from gateway.pipeline.attempt import Call
    from gateway.pipeline.outcome import Outcome, RequestState
    from gateway.policy.retry import StopReason

Attrs = Mapping[str, Any]


class Tracing:
    """Tracing switched off: every hook is a no-op. ``OtelTracing`` overrides them all."""

    enabled = False

    def begin(self, headers: Mapping[str, str], state: RequestState) -> None:
        """The request arrived (``observe``): its server span starts, child of a client's
        ``traceparent`` when one came."""

    def end(self, state: RequestState, status: int) -> None:
        """The request is answered: any open attempt span and the server span end."""

    def ids(self, state: RequestState) -> tuple[str, str] | None:
        """(trace_id, span_id) of the request's server span, for its log line."""
        return None

    def attempt_started(self, state: RequestState, call: Call, body: bytes) -> Mapping[str, str]:
        """An attempt is about to be sent: its client span starts. Returns the headers to send
        (the call's own, with this span's ``traceparent`` when tracing is on)."""
        return call.headers

    def attempt_ended(self, state: RequestState, call: Call, outcome: Outcome) -> None:
        """The attempt has its outcome (for a stream: its first visible event, or its failure)."""

    def leg_ended(self, state: RequestState, c: Classification | None, ended_by: str | None,
                  relayed: bool = True) -> None:  # fmt: skip
        """The body of the last attempt, a success so far, ended early: ``c`` its failure as
        classified (a stream broken mid-answer; None: not the upstream's failure, a replay set
        aside), ``ended_by`` what ended it; ``relayed``: the client was shown it."""

    def next_attempt(self, state: RequestState, kind: str | None, attrs: Attrs | None = None) -> None:
        """The next attempt is a ``kind`` (probe, compress_retry, continuation, ...; None: as
        it was), with ``attrs`` on its span."""

    def retrying(self, state: RequestState, c: Classification, wait_s: float) -> None:
        """The last attempt failed with ``c`` and is retried after ``wait_s``."""

    def settled(self, state: RequestState, stopped: StopReason | None) -> None:
        """Retrying on this upstream is over; ``stopped`` says why, when it failed."""

    def moving_on(self, state: RequestState, to: str) -> None:
        """The last attempt's failure moves the request to the fallback ``to``."""

    def event(self, state: RequestState, name: str, attrs: Attrs) -> None:
        """A decision that made no attempt (an upstream steered past, a circuit refusing)."""

    def annotate(self, state: RequestState, attrs: Attrs) -> None:
        """Attributes on the request's server span."""

    def know_secrets(self, keys: tuple[str, ...]) -> None:
        """The gateway's own keys (upstreams' ``api_key``s, client keys), masked wherever
        captured content quotes them, whatever their shape; set again at each config load."""

    async def close(self) -> None:
        """Export what is queued, within a bound, and stop."""


NO_TRACING = Tracing()

_TRUE = {"1", "true", "yes", "on"}


def wanted(cfg: TracingConfig, env: Mapping[str, str]) -> bool:
    """On by config, else by the standard variables: an OTLP endpoint set means "send there".
    OTEL_SDK_DISABLED=true switches every OTel SDK off, this one included."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    if cfg.enabled is not None:
        return cfg.enabled
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return bool(env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))


def summary(cfg: TracingConfig, env: Mapping[str, str]) -> dict[str, object] | str:
    """What the started line says of tracing: "off", or where spans go and which share of
    requests is sampled, resolved the way the SDK resolves them (config, then OTEL_*, then the
    SDK's defaults). The endpoint is shown without credentials or query: a collector URL may
    carry a token (OTEL_EXPORTER_OTLP_HEADERS, which usually does, is never shown)."""
    if not wanted(cfg, env):
        return "off"
    base = cfg.endpoint or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if cfg.endpoint or not env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        # A base URL: the traces path is appended (the OTLP/HTTP exporter's default base else).
        endpoint = _without_credentials(base or "http://localhost:4318").rstrip("/") + "/v1/traces"
    else:
        endpoint = _without_credentials(env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"])  # used as it is
    return {"endpoint": endpoint, "sample_ratio": _sample_ratio(cfg, env)}


def _sample_ratio(cfg: TracingConfig, env: Mapping[str, str]) -> float | str:
    """The share of new traces sampled (a child follows its parent's decision either way)."""
    if cfg.sample_ratio is not None:
        return cfg.sample_ratio
    sampler = env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    if sampler.endswith("always_on"):
        return 1.0
    if sampler.endswith("always_off"):
        return 0.0
    if sampler.endswith("traceidratio"):
        try:
            ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG") or 1.0)
        except ValueError:
            return 1.0  # the SDK's fallback for an unreadable argument
        return ratio if 0.0 <= ratio <= 1.0 else 1.0
    return sampler  # a sampler the SDK finds by name (an entry point): named, not guessed


def _without_credentials(url: str) -> str:
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(not a URL)"
    host = f"[{host}]" if ":" in host else host
    return urlunsplit((parts.scheme, host + port, parts.path, "", ""))


def build_tracing(
    cfg: TracingConfig, monotonic: Callable[[], float], env: Mapping[str, str] | None = None
) -> Tracing:
    """``monotonic`` is the pipeline's clock: event times are placed by it."""
    env = os.environ if env is None else env
    if not wanted(cfg, env):
        return NO_TRACING
    from gateway.tracing.otel import OtelTracing, otlp_provider  # the SDK only when on

    return OtelTracing(otlp_provider(cfg, env), monotonic, capture_content=cfg.capture_content)
