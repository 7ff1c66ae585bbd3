import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gateway.telemetry import MAX_MODELS, ModelLabels, Telemetry, status_label

# SPEC "Metrics": the names, types and labels dashboards and alerts rely on.
CONTRACT = {
    "llm_gateway_requests_total": ("counter", {"upstream", "model", "status", "error_type"}),
    "llm_gateway_request_duration_seconds": ("histogram", {"upstream", "model"}),
    "llm_gateway_time_to_first_byte_seconds": ("histogram", {"upstream", "model"}),
    "llm_gateway_upstream_attempts_total": ("counter", {"upstream", "outcome"}),
    "llm_gateway_retries_total": ("counter", {"upstream", "error_type"}),
    "llm_gateway_compressions_total": ("counter", {"upstream", "outcome"}),
    "llm_gateway_in_flight_requests": ("gauge", set()),
    "llm_gateway_circuit_open": ("gauge", {"upstream", "model"}),
    "llm_gateway_tokens_total": ("counter", {"upstream", "model", "kind"}),
    # Beyond SPEC's table, added by the issues that needed them (listed in docs/reference/metrics.md).
    "llm_gateway_client_auth_refusals_total": ("counter", {"reason"}),
    "llm_gateway_fallbacks_total": ("counter", {"upstream", "fallback", "error_type"}),
    "llm_gateway_continuations_total": ("counter", {"upstream", "outcome"}),
    "llm_gateway_tool_outputs_total": ("counter", {"stage", "outcome", "reason"}),
    "llm_gateway_upstream_timeouts_total": ("counter", {"upstream", "kind"}),
    "llm_gateway_head_cuts_total": ("counter", {"upstream"}),
    "llm_gateway_head_cut_skips_total": ("counter", {"upstream"}),
    "llm_gateway_pool_picks_total": ("counter", {"pool", "deployment", "reason"}),
    "llm_gateway_pool_moves_total": ("counter", {"pool", "deployment", "error_type"}),
    "llm_gateway_deployment_sit_outs_total": ("counter", {"pool", "deployment", "reason"}),
    "llm_gateway_deployment_headroom_ratio": ("gauge", {"deployment", "kind"}),
    "llm_gateway_affinity_breaks_total": ("counter", {"pool", "reason"}),
    "llm_gateway_key_spend_usd_total": ("counter", {"key", "team", "model"}),
    "llm_gateway_key_tokens_total": ("counter", {"key", "model", "kind", "priced"}),
    "llm_gateway_key_refusals_total": ("counter", {"key", "reason"}),
    "llm_gateway_config_reloads_total": ("counter", {"result"}),
    "llm_gateway_config_last_reload_successful": ("gauge", set()),
}
# Beyond the contract: the successful attempt's own time to first byte (no retry waits).
EXTRA = {"llm_gateway_upstream_first_byte_seconds": ("histogram", {"upstream", "model"})}


def test_every_contract_metric_exists_with_its_type_and_labels() -> None:
    t = Telemetry(CollectorRegistry(), ["gpt-4o"])
    found = {}
    for attr in vars(t).values():
        if hasattr(attr, "_labelnames"):
            base = attr._name
            kind = attr._type
            full = base + "_total" if kind == "counter" else base
            found[full] = (kind, set(attr._labelnames))
    assert found == CONTRACT | EXTRA


def test_model_labels_are_bounded() -> None:
    labels = ModelLabels(["gpt-4o", "claude-*"])
    assert labels("gpt-4o") == "gpt-4o"
    assert labels(None) == "none"
    seen = [labels(f"m{i}") for i in range(MAX_MODELS + 50)]
    assert seen[:MAX_MODELS] == [f"m{i}" for i in range(MAX_MODELS)]
    assert set(seen[MAX_MODELS:]) == {"other"}
    assert labels("gpt-4o") == "gpt-4o"  # configured names always keep their label
    assert labels("claude-*") == "other"  # a glob is not a name
    assert labels("x" * 500) == "other"


def test_a_model_label_is_always_utf8_and_a_scrape_succeeds() -> None:
    # A lone surrogate reaches a label from any path that reads a model unmended; the label made
    # generate_latest raise UnicodeEncodeError on every scrape after it.
    registry = CollectorRegistry()
    t = Telemetry(registry, [])
    label = t.model_label("emb\ud800")
    assert label == "emb\ufffd" and t.model_label("emb\udfff") == label  # one label, not two
    t.requests.inc(("up", label, "200", "none"))
    assert 'model="emb\ufffd"' in generate_latest(registry).decode()


def test_status_label_is_a_fixed_set() -> None:
    assert status_label(200) == "200" and status_label(999) == "other"


def test_a_removed_keys_series_are_dropped_and_a_kept_keys_stay() -> None:
    """15 keys added and removed by reload left 90 lines in /metrics for ever (audit): spend and
    tokens per key and model, with their ``_created`` lines, and refusals. Each series of a key
    the config no longer names goes; a kept key's, totals and all, stays."""
    registry = CollectorRegistry()
    t = Telemetry(registry, ["gpt-4o"])
    for key in ("run-1", "alice"):
        t.child(t.key_spend, key, "web", "gpt-4o").inc(0.5)
        t.child(t.key_tokens, key, "gpt-4o", "prompt", "true").inc(10)
        t.child(t.key_refusals, key, "tpm").inc()
    t.retain_keys(["alice", "bob"])
    text = generate_latest(registry).decode()
    assert 'key="run-1"' not in text
    assert text.count('key="alice"') == 6  # three series, each with its _created line
    assert registry.get_sample_value("llm_gateway_key_spend_usd_total",
                                     {"key": "alice", "team": "web", "model": "gpt-4o"}) == 0.5  # fmt: skip
    # A request of the removed key in flight at the reload ends after it (audit of keys and
    # spend: two streams on a removed key brought its spend and token series back for good).
    t.child(t.key_spend, "run-1", "web", "gpt-4o").inc(0.5)
    t.child(t.key_tokens, "run-1", "gpt-4o", "prompt", "true").inc(10)
    t.child(t.key_refusals, "run-1", "tpm").inc()
    assert 'key="run-1"' not in generate_latest(registry).decode()
    t.retain_keys(["alice", "run-1"])  # made again: counted again, from zero
    t.child(t.key_refusals, "run-1", "tpm").inc()
    assert registry.get_sample_value("llm_gateway_key_refusals_total", {"key": "run-1", "reason": "tpm"}) == 1


def test_a_deployments_headroom_refills_to_its_stated_reset_and_goes_with_the_deployment() -> None:
    """docs/pools.md: the strategy takes a limit as full at the reset its headers stated. The
    gauge kept the reading itself: a key that answered a 429 with 0 left, then served 200s
    without rate-limit headers, showed 0 for minutes after its reset (audit), and a deployment
    a reload removed kept its series for good."""
    now = [1_800_000_000.0]
    registry = CollectorRegistry()
    t = Telemetry(registry, [], wall=lambda: now[0])
    t.configure([], ["key-a", "key-b"])

    def ratio(deployment: str, kind: str = "requests") -> float | None:
        return registry.get_sample_value("llm_gateway_deployment_headroom_ratio",
                                         {"deployment": deployment, "kind": kind})  # fmt: skip

    reset_ms = int(now[0] * 1000) + 20_000
    t.headroom.set("key-a", "requests", 0, 60, reset_ms)  # a 429's headers: 0 of 60 left for 20 s
    t.headroom.set("key-a", "tokens", 1200, 150_000, None)  # no reset stated: as read
    t.headroom.set("key-b", "requests", 45, 60, reset_ms)
    assert ratio("key-a") == 0.0
    now[0] += 10  # half way to the reset: half of what was missing is back
    assert ratio("key-a") == pytest.approx(0.5)
    assert ratio("key-b") == pytest.approx(0.875)
    now[0] += 10.001
    assert ratio("key-a") == 1.0 and ratio("key-b") == 1.0
    assert ratio("key-a", "tokens") == 0.008
    t.configure([], ["key-b"])  # a reload removed key-a
    assert ratio("key-a") is None and ratio("key-a", "tokens") is None and ratio("key-b") == 1.0
    # A request of key-a still in flight at the reload ends after it: nothing comes back.
    t.headroom.set("key-a", "requests", 3, 60, None)
    assert 'deployment="key-a"' not in generate_latest(registry).decode()
