"""Traces for the tests: the gateway's real tracer with an in-memory exporter (the SDK's own),
and the span tree written out the way docs/operations/tracing.md shows it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.tracing.otel import OtelTracing

SECRET_KEY = "sk-test-SECRETSECRETSECRET0123456789"
PROMPT = "the password of the vault is hunter2-unique-prompt"


def in_memory(capture_content: bool = False,
              monotonic: Callable[[], float] = time.monotonic) -> tuple[OtelTracing, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelTracing(provider, monotonic, capture_content=capture_content), exporter


@dataclass
class Node:
    """A span as the tests compare it, whichever backend it came from."""

    name: str
    span_id: str
    parent_id: str | None
    trace_id: str
    kind: str
    attributes: dict[str, Any]
    events: list[str]
    start_ns: int = 0
    children: list[Node] = field(default_factory=list)


def from_sdk(spans: Iterable[ReadableSpan]) -> list[Node]:
    out = []
    for s in spans:
        ctx = s.get_span_context()
        assert ctx is not None
        out.append(Node(
            s.name, format(ctx.span_id, "016x"),
            format(s.parent.span_id, "016x") if s.parent is not None else None,
            format(ctx.trace_id, "032x"), s.kind.name, dict(s.attributes or {}),
            [e.name for e in s.events], s.start_time or 0,
        ))  # fmt: skip
    return out


def roots(nodes: list[Node]) -> list[Node]:
    by_id = {n.span_id: n for n in nodes}
    top = []
    for n in sorted(nodes, key=lambda n: n.start_ns):
        parent = by_id.get(n.parent_id) if n.parent_id else None
        (parent.children if parent is not None else top).append(n)
    return top


_SHOWN = ("llm_gateway.attempt.kind", "error.type", "llm_gateway.decision", "llm_gateway.retry.wait_s",
          "llm_gateway.fallback.to", "llm_gateway.compression.outcome", "llm_gateway.continuation.mode")


def render(node: Node, indent: str = "") -> str:
    """``name [kind=..., error.type=...] (events)`` per line, children indented."""
    shown = ", ".join(f"{k.removeprefix('llm_gateway.')}={node.attributes[k]}" for k in _SHOWN
                      if k in node.attributes)
    events = f" ({', '.join(e.removeprefix('llm_gateway.') for e in node.events)})" if node.events else ""
    lines = [f"{indent}{node.name}{f' [{shown}]' if shown else ''}{events}"]
    for child in node.children:
        lines.append(render(child, indent + "  "))
    return "\n".join(lines)


def attempts(server: Node) -> list[Mapping[str, Any]]:
    return [c.attributes for c in server.children]


def secrets_in(nodes: Iterable[Node], *needles: str) -> list[str]:
    """Every attribute or event that contains one of ``needles``."""
    found = []
    for n in nodes:
        for k, v in n.attributes.items():
            if any(x in str(v) for x in needles):
                found.append(f"{n.name}: {k}")
    return found
