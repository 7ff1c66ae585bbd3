"""``docs/reference/metrics.md``: every metric ``/metrics`` exposes, from the registry the app builds.

The app is built as the server builds it (:func:`gateway.app.create_app`), on a registry of its
own, and every collector registered on it is listed with its name as exposed, type, labels and
help. The one metric added only when several workers' numbers are merged
(:func:`gateway.workers.metrics.merge`) is read from a merge's own output.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import parse_config
from gateway.docs_gen.markdown import cell, generated_header
from gateway.telemetry import MAX_MODELS, OTHER
from gateway.workers.metrics import merge

# The smallest config that builds the app; metrics do not depend on what it says.
_CONFIG = "upstreams: [{name: docs, base_url: 'http://127.0.0.1:9/v1'}]"
# Counters are exposed with this suffix (prometheus_client's, and LoopCounter's the same).
_SUFFIX = {"counter": "_total"}


@dataclass(frozen=True)
class MetricDoc:
    name: str  # as exposed (a counter with _total)
    type: str
    labels: tuple[str, ...]
    help: str
    note: str = ""


def registry_of_app() -> CollectorRegistry:
    """A registry holding every metric the app registers."""
    registry = CollectorRegistry()
    create_app(parse_config(_CONFIG, env={}), registry=registry)
    return registry


def registered(registry: CollectorRegistry) -> list[MetricDoc]:
    """Every metric of ``registry``, in the order the app registers them."""
    out = []
    # prometheus_client keeps its collectors here; the families they describe carry no label
    # names (only samples do), so the names are the collectors' own, as each one declares them.
    for collector in list(registry._collector_to_names):
        for family in collector.describe() if hasattr(collector, "describe") else collector.collect():
            # A collector of several families (BudgetGauges) names each one's labels.
            labels = (tuple(collector.labels_of(family.name)) if hasattr(collector, "labels_of")
                      else tuple(getattr(collector, "_labelnames", ())))  # fmt: skip
            out.append(MetricDoc(family.name + _SUFFIX.get(family.type, ""), family.type, labels,
                                 family.documentation))  # fmt: skip
    return out


def merged_only() -> list[MetricDoc]:
    """The metrics a merge of several workers' expositions adds to theirs."""
    note = "Only with `server.workers` above 1: added when a scrape merges the workers' numbers."
    families = text_string_to_metric_families(merge([], reporting=1).decode())
    return [MetricDoc(f.name, f.type, tuple(s for s in f.samples[0].labels), f.documentation, note)
            for f in families]  # fmt: skip


def all_metrics() -> list[MetricDoc]:
    return registered(registry_of_app()) + merged_only()


def render() -> str:
    out = [
        generated_header(),
        "# Metrics reference",
        "",
        "Every metric the gateway exposes on `GET /metrics` (Prometheus text format), with its type, "
        "its labels and its help text as `/metrics` states it. Label values are bounded: `model` is a "
        f"configured name or one of the first {MAX_MODELS} others seen by each worker, then `{OTHER}` "
        f"(with `server.workers: N`, up to N x {MAX_MODELS} such names in all).",
        "",
        "| metric | type | labels | help |",
        "| --- | --- | --- | --- |",
    ]
    for m in all_metrics():
        labels = ", ".join(f"`{label}`" for label in m.labels)
        text = f"{m.help} {m.note}".strip()
        out.append(f"| `{m.name}` | {m.type} | {labels} | {cell(text)} |")
    return "\n".join(out) + "\n"
