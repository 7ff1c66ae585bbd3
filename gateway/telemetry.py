"""Every metric the gateway exposes, on an explicit registry (never the global one).

Names, types and labels are the contract in SPEC.md "Metrics". Label values are
bounded: ``model`` is a configured name or one of the first ``MAX_MODELS`` seen,
else ``other``; ``status`` and ``error_type`` come from fixed sets. The names seen are each
process's own: with ``server.workers: N`` the machine exposes up to N x ``MAX_MODELS`` of them
(sharing them would put a round trip between workers on every request with a new name).
"""

from __future__ import annotations

import contextlib
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client import metrics as _prometheus_metrics
from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from gateway.config import UpstreamConfig
from gateway.errors import ErrorType
from gateway.jsonbody import mended
from gateway.routing.headroom import refilled_share

MAX_MODELS = 100
OTHER = "other"
NO_ERROR = "none"
# A response the gateway itself cut when drain_s ran out (requests_total and the log line only).
SHUTDOWN = "gateway_shutdown"
ERROR_TYPES = frozenset({NO_ERROR, SHUTDOWN, *(t.value for t in ErrorType)})

# LLM calls range from tens of milliseconds (cached, tiny) to many minutes (long reasoning).
LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip


class ModelLabels:
    """Maps client-supplied model names onto a bounded label set (per process: per worker)."""

    def __init__(self, configured: Iterable[str], limit: int = MAX_MODELS) -> None:
        # Glob patterns are not names a client sends verbatim; only literal names are pre-admitted.
        self._known = {m for m in configured if not any(c in m for c in "*?[")}
        self._seen: set[str] = set()
        self._limit = limit

    def know(self, configured: Iterable[str]) -> None:
        """Names a reloaded config adds (the ones it drops keep their label: series go on)."""
        self._known.update(m for m in configured if not any(c in m for c in "*?["))

    def __call__(self, model: str | None) -> str:
        if not model:
            return "none"
        if model in self._known or model in self._seen:
            return model
        # A name with a lone surrogate (JSON's "\ud800", a URL's %ED%A0%80) has no UTF-8: as a
        # label it failed every scrape that followed (generate_latest encodes the whole page).
        label: str = mended(model)
        if label in self._seen:
            return label
        if len(self._seen) < self._limit and len(label) <= 128:
            self._seen.add(label)
            return label
        return OTHER


def status_label(status: int) -> str:
    return str(status) if 100 <= status <= 599 else "other"


def error_label(error_type: ErrorType | None) -> str:
    return error_type.value if error_type is not None else NO_ERROR


def _use_created() -> bool:
    # prometheus_client's own switch (PROMETHEUS_DISABLE_CREATED_SERIES, disable_created_metrics()).
    return bool(getattr(_prometheus_metrics, "_use_created", True))


class LoopCounter:
    """A labelled counter for the per-request hot path, exposed exactly as a prometheus_client
    ``Counter`` is (``_total`` and ``_created`` per label set, in creation order).

    prometheus_client takes a lock and makes about seven calls per ``inc``; here one dict
    lookup and an add. The event loop is the only writer, so no lock: a scrape (in a thread,
    app.py) reads a copy of the label sets, each made in one C call under the GIL, and a
    float is never read half-written.
    Label values are passed as one tuple, in ``labelnames`` order.
    """

    __slots__ = ("_doc", "_labelnames", "_name", "_values")
    _type = "counter"  # (the attribute names prometheus_client's metrics use)

    def __init__(self, name: str, doc: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self._name, self._doc, self._labelnames = name, doc, tuple(labelnames)
        self._values: dict[tuple[str, ...], list[float]] = {}  # labels -> [value, created]
        registry.register(self)

    def inc(self, labels: tuple[str, ...], amount: float = 1.0) -> None:
        found = self._values.get(labels)
        if found is None:
            found = self._values[labels] = [0.0, time.time()]
        found[0] += amount

    def describe(self) -> Iterator[Metric]:
        yield Metric(self._name, self._doc, "counter")

    def collect(self) -> Iterator[Metric]:
        family = Metric(self._name, self._doc, "counter")
        created = _use_created()
        for labels, (value, at) in list(self._values.items()):
            named = dict(zip(self._labelnames, labels, strict=True))
            family.add_sample(self._name + "_total", named, value)
            if created:
                family.add_sample(self._name + "_created", named, at)
        yield family


class LoopHistogram:
    """A labelled histogram for the per-request hot path, exposed exactly as a prometheus_client
    ``Histogram`` is (cumulative ``_bucket`` with ``le``, ``_count``, ``_sum``, ``_created``).
    Same reasons and rules as :class:`LoopCounter`."""

    __slots__ = ("_bounds", "_doc", "_labelnames", "_les", "_name", "_values")
    _type = "histogram"

    def __init__(
        self, name: str, doc: str, labelnames: Sequence[str], buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:  # fmt: skip
        self._name, self._doc, self._labelnames = name, doc, tuple(labelnames)
        self._bounds = [float(b) for b in buckets]
        if self._bounds[-1] != float("inf"):
            self._bounds.append(float("inf"))
        self._les = [floatToGoString(b) for b in self._bounds]  # type: ignore[no-untyped-call]
        # labels -> [sum, created, count of bucket 0, 1, ...] (per bucket, not cumulative)
        self._values: dict[tuple[str, ...], list[float]] = {}
        registry.register(self)

    def observe(self, labels: tuple[str, ...], amount: float) -> None:
        found = self._values.get(labels)
        if found is None:
            found = self._values[labels] = [0.0, time.time(), *(0.0 for _ in self._bounds)]
        found[0] += amount
        # The first bucket whose bound is >= amount, as prometheus_client picks it.
        found[2 + bisect_left(self._bounds, amount)] += 1.0

    def describe(self) -> Iterator[Metric]:
        yield Metric(self._name, self._doc, "histogram")

    def collect(self) -> Iterator[Metric]:
        family = Metric(self._name, self._doc, "histogram")
        created = _use_created()
        for labels, found in list(self._values.items()):
            named = dict(zip(self._labelnames, labels, strict=True))
            total = 0.0
            for le, count in zip(self._les, found[2:], strict=True):
                total += count
                family.add_sample(self._name + "_bucket", {**named, "le": le}, total)
            family.add_sample(self._name + "_count", named, total)
            family.add_sample(self._name + "_sum", named, found[0])
            if created:
                family.add_sample(self._name + "_created", named, found[1])
        yield family


WHOLE_UPSTREAM = "*"  # the `model` label of an upstream-wide circuit


class CircuitGauge:
    """``llm_gateway_circuit_open{upstream, model}``: 1 while that circuit refuses requests.

    Circuits are per (upstream, model) plus one upstream-wide (``model="*"``), and they live
    in the state store, shared by replicas: so the values are read from the store when
    ``/metrics`` is scraped (:meth:`replace`), and a replica that refuses from another's
    failures shows it. This replica's own transitions also land at once (:meth:`set`).
    ``model`` is a bounded label; models that share one (``other``) show the highest value.
    """

    __slots__ = ("_doc", "_name", "_values")
    _type = "gauge"
    _labelnames = ("upstream", "model")

    def __init__(self, name: str, doc: str, registry: CollectorRegistry) -> None:
        self._name, self._doc = name, doc
        self._values: dict[str, dict[str, float]] = {}  # upstream -> model label -> 0/1
        registry.register(self)

    def init_upstream(self, upstream: str) -> None:
        self._values.setdefault(upstream, {WHOLE_UPSTREAM: 0.0})

    def set(self, upstream: str, model: str, value: float) -> None:
        self._values.setdefault(upstream, {})[model] = value

    def retain(self, upstreams: Iterable[str]) -> None:
        """Only these upstreams' series: one a reload removed must not stay open forever."""
        keep = set(upstreams)
        for gone in [u for u in self._values if u not in keep]:
            del self._values[gone]

    def replace(self, upstream: str, values: Iterable[tuple[str, float]]) -> None:
        """A fresh read of every circuit of ``upstream`` this replica knows (labels may repeat)."""
        merged: dict[str, float] = {WHOLE_UPSTREAM: 0.0}
        for model, value in values:
            merged[model] = max(value, merged.get(model, 0.0))
        self._values[upstream] = merged

    def describe(self) -> Iterator[Metric]:
        yield Metric(self._name, self._doc, "gauge")

    def collect(self) -> Iterator[Metric]:
        family = Metric(self._name, self._doc, "gauge")
        for upstream, models in list(self._values.items()):
            for model, value in list(models.items()):
                labels = dict(zip(self._labelnames, (upstream, model), strict=True))
                family.add_sample(self._name, labels, value)
        yield family


class HeadroomGauge:
    """``llm_gateway_deployment_headroom_ratio{deployment, kind}``: the share of a deployment's
    rate limit left, from its last answer's rate-limit headers, refilled as the pool's
    strategy refills it (docs/pools.md: full at the reset the headers stated). Set when an
    answer's headers are read (at most every ``OBSERVE_EVERY_S`` per deployment), worked out
    at a scrape: nothing per request. A plain gauge kept the reading itself, and a key that
    answered a 429 with 0 left, then minutes of answers without headers, showed 0 for as long
    after its reset as it served (audit). Only the pool deployments of the config in force
    (``retain``): a removed one's series went on for good."""

    __slots__ = ("_doc", "_live", "_name", "_readings", "_wall")
    _type = "gauge"
    _labelnames = ("deployment", "kind")

    def __init__(self, name: str, doc: str, registry: CollectorRegistry,
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self._name, self._doc, self._wall = name, doc, wall
        # (deployment, kind) -> (remaining, limit, reset epoch ms or None, read at epoch ms)
        self._readings: dict[tuple[str, str], tuple[int, int, int | None, float]] = {}
        self._live: frozenset[str] | None = None  # None until the first config
        registry.register(self)

    def set(self, deployment: str, kind: str, remaining: int, limit: int, reset_at_ms: int | None) -> None:
        if self._live is not None and deployment not in self._live:
            return  # a request of a deployment a reload removed, ending after it
        self._readings[(deployment, kind)] = (remaining, limit, reset_at_ms, self._wall() * 1000)

    def retain(self, deployments: Iterable[str]) -> None:
        keep = self._live = frozenset(deployments)
        for gone in [k for k in self._readings if k[0] not in keep]:
            del self._readings[gone]

    def value(self, deployment: str, kind: str) -> float | None:
        found = self._readings.get((deployment, kind))
        if found is None:
            return None
        remaining, limit, reset_at_ms, at_ms = found
        return refilled_share(remaining, limit, reset_at_ms, at_ms, self._wall() * 1000)

    def describe(self) -> Iterator[Metric]:
        yield Metric(self._name, self._doc, "gauge")

    def collect(self) -> Iterator[Metric]:
        family = Metric(self._name, self._doc, "gauge")
        now_ms = self._wall() * 1000
        for (deployment, kind), (remaining, limit, reset_at_ms, at_ms) in list(self._readings.items()):
            family.add_sample(self._name, {"deployment": deployment, "kind": kind},
                              refilled_share(remaining, limit, reset_at_ms, at_ms, now_ms))  # fmt: skip
        yield family


class BudgetGauges:
    """Where each budget stands, and when each key with ``expires_at`` ends, for alerts ("team
    web has spent 80 % of its month", "ci-bot's key ends within a week"). Spend lives in the
    state store, shared by replicas and settled by whichever served the request, so a scrape
    reads it afresh (:meth:`replace`, as :class:`CircuitGauge` reads circuits); a counter of
    this replica's spend since it started cannot say how much of a period is left. Labels come
    from config only (key and team names), never from requests."""

    _type = "gauge"
    NAMES = ("llm_gateway_budget_usd", "llm_gateway_budget_spent_usd", "llm_gateway_budget_reserved_usd",
             "llm_gateway_budget_resets_at_seconds", "llm_gateway_key_expires_at_seconds",
             "llm_gateway_budget_soft_usd")  # fmt: skip
    _DOCS = (
        "The budget's cap per period, in USD; kind: key or team, name: the key's or the team's.",
        "What the budget's owner spent this period, in USD, as the state store has it (requests still "
        "being settled land within a second).",
        "What requests in flight hold of the budget until they end, in USD.",
        "When the budget's period ends (Unix seconds, UTC).",
        "When the key stops working (keys[].expires_at; Unix seconds).",
        "The budget's soft limit (budget.soft_usd), for budgets that have one: a warning threshold, "
        "never a refusal.",
    )  # fmt: skip

    def __init__(self, registry: CollectorRegistry) -> None:
        # (kind, name, period) -> (usd, spent, reserved, resets_at); key -> expires_at
        self._budgets: dict[tuple[str, str, str], tuple[float, float, float, float]] = {}
        self._expiries: dict[str, float] = {}
        self._softs: dict[tuple[str, str, str], float] = {}
        registry.register(self)

    def replace(self, budgets: Iterable[tuple[str, str, str, float, float, float, float]] | None,
                expiries: Iterable[tuple[str, float]],
                softs: Iterable[tuple[str, str, str, float]] = ()) -> None:  # fmt: skip
        """This scrape's readings: (kind, name, period, usd, spent, reserved, resets_at) per
        budget (None: none could be read, the last ones stay), (key, expires_at) per expiring
        key, (kind, name, period, soft_usd) per budget with a soft limit (the config's). Swapped
        whole: a concurrent collect reads the old set or the new one."""
        if budgets is not None:
            self._budgets = {(k, n, p): (usd, spent, held, end) for k, n, p, usd, spent, held, end in budgets}
        self._expiries = dict(expiries)
        self._softs = {(k, n, p): soft for k, n, p, soft in softs}

    def labels_of(self, family: str) -> tuple[str, ...]:
        return ("key",) if family == self.NAMES[4] else ("kind", "name", "period")  # soft's too

    def describe(self) -> Iterator[Metric]:
        for name, doc in zip(self.NAMES, self._DOCS, strict=True):
            yield Metric(name, doc, "gauge")

    def collect(self) -> Iterator[Metric]:
        budgets, expiries, softs = self._budgets, self._expiries, self._softs
        families = [Metric(name, doc, "gauge") for name, doc in zip(self.NAMES, self._DOCS, strict=True)]
        for (kind, name, period), values in budgets.items():
            labels = {"kind": kind, "name": name, "period": period}
            for family, value in zip(families, values, strict=False):
                family.add_sample(family.name, labels, value)
        for key, at in expiries.items():
            families[4].add_sample(families[4].name, {"key": key}, at)
        for (kind, name, period), soft in softs.items():
            families[5].add_sample(families[5].name, {"kind": kind, "name": name, "period": period}, soft)
        yield from families


class _Uncounted:
    """What ``Telemetry.child`` gives for a key no longer configured: counts nothing."""

    def inc(self, amount: float = 1) -> None:
        return None


_UNCOUNTED = _Uncounted()


class Telemetry:
    def __init__(self, registry: CollectorRegistry, configured_models: Iterable[str],
                 wall: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.registry = registry
        self.model_label = ModelLabels(configured_models)
        p = "llm_gateway_"
        # Every request touches these: they are the lock-free kind (LoopCounter, LoopHistogram).
        self.requests = LoopCounter(
            p + "requests",
            "Requests answered, by the status the client got (499: it left before any answer began) "
            "and error type (none on success).",
            ["upstream", "model", "status", "error_type"], registry,
        )  # fmt: skip
        self.request_duration = LoopHistogram(
            p + "request_duration_seconds", "Time from request to the end of the response.",
            ["upstream", "model"], LATENCY_BUCKETS, registry,
        )  # fmt: skip
        self.time_to_first_byte = LoopHistogram(
            p + "time_to_first_byte_seconds",
            "Time from request to the response head reaching the client, retries and their waits included.",
            ["upstream", "model"], LATENCY_BUCKETS, registry,
        )  # fmt: skip
        self.upstream_first_byte = LoopHistogram(
            p + "upstream_first_byte_seconds",
            "Time from sending the successful attempt upstream to its response head arriving.",
            ["upstream", "model"], LATENCY_BUCKETS, registry,
        )  # fmt: skip
        self.upstream_attempts = LoopCounter(
            p + "upstream_attempts", "Upstream attempts, by outcome (success or the error type).",
            ["upstream", "outcome"], registry,
        )  # fmt: skip
        self.upstream_timeouts = Counter(
            p + "upstream_timeouts",
            "Upstream attempts that timed out before an answer, by kind: connect_timeout, "
            "first_byte_timeout, first_token_timeout.",
            ["upstream", "kind"], registry=registry,
        )  # fmt: skip
        self.retries = Counter(
            p + "retries", "Retries made, by the error type that caused them.",
            ["upstream", "error_type"], registry=registry,
        )  # fmt: skip
        self.compressions = Counter(
            p + "compressions", "Compress-and-retry results by outcome: applied, still_overflow, "
            "not_applicable, passed_to_client (a self-compacting client got the overflow).",
            ["upstream", "outcome"], registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            p + "in_flight_requests", "Requests being handled now.", registry=registry,
        )  # fmt: skip
        self.circuit_open = CircuitGauge(
            p + "circuit_open",
            "1 while the circuit of this model (model=\"*\": of the whole upstream) refuses requests.",
            registry,
        )  # fmt: skip
        self.budgets = BudgetGauges(registry)
        self.tokens = LoopCounter(
            p + "tokens", "Tokens reported by upstream usage, by kind: prompt, completion, and of the prompt "
            "cache_read, cache_write when the provider says, and of cache_write cache_write_1h (Anthropic's "
            "1-hour writes); web_search counts the searches a server-side tool made, not tokens.",
            ["upstream", "model", "kind"], registry,
        )  # fmt: skip
        self.client_auth_refusals = Counter(
            p + "client_auth_refusals",
            "Requests refused for a gateway key, by reason: missing, invalid, expired, disabled.",
            ["reason"], registry=registry,
        )  # fmt: skip
        self.continuations = Counter(
            p + "continuations", "Streams broken mid-answer, by outcome: continued, failed, diverged "
            "(a replay wrote something else), not_continuable.",
            ["upstream", "outcome"], registry=registry,
        )  # fmt: skip
        self.tool_outputs = Counter(
            p + "tool_outputs",
            "Tool outputs changed by the per-tool policy (projected, excluded, cut) or kept raw when "
            "their projection could not apply, by stage (upfront, rescue) and the reason it could not.",
            ["stage", "outcome", "reason"], registry=registry,
        )  # fmt: skip
        self.fallbacks = Counter(
            p + "fallbacks", "Requests handed from one upstream to its fallback, by the reason.",
            ["upstream", "fallback", "error_type"], registry=registry,
        )  # fmt: skip
        self.head_cuts = Counter(
            p + "head_cuts", "Attempts cut at their share of a client's short head time (Gemini CLI's "
            "60 s) before a fallback: no evidence against the upstream, which its circuit does not count, "
            "but remembered for such clients (docs/streaming.md).",
            ["upstream"], registry=registry,
        )  # fmt: skip
        self.head_cut_skips = Counter(
            p + "head_cut_skips", "Requests with a short head time sent straight to the fallback, past an "
            "upstream remembered for a head cut (docs/streaming.md).",
            ["upstream"], registry=registry,
        )  # fmt: skip
        # Pools (docs/pools.md): deployments are upstreams, so the per-upstream series above
        # (requests, attempts, circuits) are per deployment already.
        self.pool_picks = Counter(
            p + "pool_picks", "Deployments picked for a request, by why: affinity (the conversation's "
            "own), the pool's strategy, moved (a sibling failed first), circuit_open (every circuit was), "
            "stored (its key holds the stored response or conversation the request continues), stored_search "
            "(asked because the deployment before answered that it does not hold the stored response a "
            "chained turn continues, and no deployment was known to).",
            ["pool", "deployment", "reason"], registry=registry,
        )  # fmt: skip
        self.pool_moves = Counter(
            p + "pool_moves", "Requests moved from a deployment to a sibling, by the error that moved them.",
            ["pool", "deployment", "error_type"], registry=registry,
        )  # fmt: skip
        self.sit_outs = Counter(
            p + "deployment_sit_outs", "Deployments taken out of their pool for a while (cooldowns), "
            "by why: rate_limit (until its reset), budget (key out of credit), auth (key refused), "
            "model_missing (a 404, or OpenAI's 403 model_not_found, for the model asked).",
            ["pool", "deployment", "reason"], registry=registry,
        )  # fmt: skip
        self.affinity_breaks = Counter(
            p + "affinity_breaks", "Conversations served away from the deployment that holds their "
            "prompt cache (a move once, by the replica or worker whose turn stored it), by why: failed, "
            "rate_limit, headroom, budget, auth, model_missing, circuit_open, "
            "removed (a reload took it out of the pool), head_cut (a Gemini CLI request went past it for a "
            "head cut remembered: docs/streaming.md), tokens_per_minute (it refused a request this large as "
            "over its tokens per minute lately: docs/pools.md).",
            ["pool", "reason"], registry=registry,
        )  # fmt: skip
        # Keys (docs/keys.md): names come from config only.
        self.key_spend = Counter(
            p + "key_spend_usd", "What each gateway key spent, in USD at the price table's prices, by model.",
            ["key", "team", "model"], registry=registry,
        )  # fmt: skip
        self.key_tokens = Counter(
            p + "key_tokens", "Tokens each gateway key used, by model and kind (prompt, completion, and of "
            "the prompt cache_read, cache_write, of which cache_write_1h; web_search: searches, not "
            "tokens); priced=false: the model has no price, spend unknown.",
            ["key", "model", "kind", "priced"], registry=registry,
        )  # fmt: skip
        self.key_refusals = Counter(
            p + "key_refusals", "Requests the gateway answered for a key's own rules, never sent: model (not "
            "allowed), unpriced (a model with no price, for a key with a budget), rpm, tpm, tpm_held and "
            "budget_held (held by requests in flight), parallel, budget, team_budget, store_down, "
            "background (a background response, whose usage the key never sees).",
            ["key", "reason"], registry=registry,
        )  # fmt: skip
        self.headroom = HeadroomGauge(
            p + "deployment_headroom_ratio", "The share of a deployment's rate limit left, as its last "
            "answer's rate-limit headers said, refilled since at the rate that fills it by the reset they "
            "stated (1 once that has passed), by kind (requests, tokens). Headers that state no limit "
            "(Azure's: only what is left) give a share of the deployment's configured `limits`, full a "
            "minute after; without `limits`, no series.",
            registry, wall,
        )  # fmt: skip

        self.config_reloads = Counter(
            p + "config_reloads", "Config reloads (SIGHUP or server.watch_config), by result: applied, "
            "unchanged (the file says what runs already), refused (the running config stays in force). "
            "Each process counts its own: with server.workers: N, one SIGHUP counts N.",
            ["result"], registry=registry,
        )  # fmt: skip
        for result in ("applied", "unchanged", "refused"):
            self.config_reloads.labels(result)
        # Prometheus's own prometheus_config_last_reload_successful, for the same reason: a count of
        # refusals says one happened, not that the file the operator edited is still not in force.
        self.config_last_reload_successful = Gauge(
            p + "config_last_reload_successful", "1 while the config file's content is in force (at "
            "start-up, and after each reload applied or finding it unchanged), 0 from a refused reload "
            "until one succeeds. Each process its own.", registry=registry,
        )  # fmt: skip
        self.config_last_reload_successful.set(1)

        # labels() takes a lock and builds a key on every call; the label sets are bounded,
        # so their children are cached here once.
        self._children: dict[tuple[object, ...], Any] = {}
        # The per-key counters (each labelled by the key first) and the keys the config in
        # force names (None until the first config): ``child`` makes no series for another.
        self._per_key = frozenset(id(m) for m in (self.key_spend, self.key_tokens, self.key_refusals))
        self._live_keys: frozenset[str] | None = None

    def child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        found = self._children.get(key)
        if found is None:
            if self._live_keys is not None and key[0] in self._per_key and labels[0] not in self._live_keys:
                # A request of a key a reload removed, ending after it: its series, dropped
                # then (``retain_keys``), would come back and stay in every scrape for good.
                return _UNCOUNTED
            found = self._children[key] = metric.labels(*labels)
        return found

    def retain_keys(self, names: Iterable[str]) -> None:
        """Drop every series of a gateway key the config in force no longer names (at each
        reload): a key made per CI run or per contractor and removed after would otherwise
        keep its spend, token and refusal series (and their ``_created`` lines) in every scrape
        for as long as the process lives. Every such series is made through :meth:`child`, so
        its cache lists them all."""
        keep = self._live_keys = frozenset(names)
        counters = (self.key_spend, self.key_tokens, self.key_refusals)
        per_key: dict[object, Counter] = {id(m): m for m in counters}
        for cached in [c for c in self._children if c[0] in per_key and c[1] not in keep]:
            metric_id, *labels = cached
            del self._children[cached]
            with contextlib.suppress(KeyError):
                per_key[metric_id].remove(*labels)

    def circuit_label(self, model: str | None) -> str:
        """The ``model`` label of a circuit: ``*`` for the upstream-wide one, never for a model."""
        if model is None:
            return WHOLE_UPSTREAM
        label = self.model_label(model)
        return OTHER if label == WHOLE_UPSTREAM else label

    def configure(self, upstreams: Iterable[UpstreamConfig], deployments: Iterable[str] = ()) -> None:
        """The upstreams and pool ``deployments`` of the config in force (at start-up and at
        each reload)."""
        ups = list(upstreams)
        self.circuit_open.retain(u.name for u in ups)
        self.headroom.retain(deployments)
        for u in ups:
            self.init_upstream(u.name)
        self.model_label.know(m for u in ups for m in u.models)

    def init_upstream(self, name: str) -> None:
        """Pre-create per-upstream series so dashboards and alerts see zeros, not absences."""
        self.circuit_open.init_upstream(name)
        for outcome in ("applied", "still_overflow", "not_applicable", "passed_to_client"):
            self.compressions.labels(name, outcome)
