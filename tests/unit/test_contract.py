"""The public contract is listed in the docs (README and docs/) and pinned here: headers, metric names,
config keys."""

import re
from pathlib import Path

import yaml

from gateway.config import GatewayConfig, PriceConfig, UpstreamConfig
from gateway.errors import ErrorType
from tests.unit.test_telemetry import CONTRACT

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# What a reader can find: README plus every page of the documentation site.
README = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))])

HEADERS = ["x-llm-error-type", "x-llm-error-retryable", "x-llm-error-reset-at", "retry-after",
           "x-should-retry", "x-request-id", "x-llm-attempts", "x-llm-compressed", "x-llm-upstream",
           "x-llm-fallbacks", "x-llm-from-memory", "x-llm-tool-outputs-capped", "x-llm-output-capped",
           "x-llm-params-dropped"]


def test_error_types_are_the_header_values() -> None:
    assert {t.value for t in ErrorType} == {"budget", "rate_limit", "provider_unavailable",
                                            "context_overflow", "auth", "unknown"}
    assert {t for t in ErrorType if t.retryable} == {ErrorType.RATE_LIMIT, ErrorType.PROVIDER_UNAVAILABLE}


def test_readme_lists_every_header_error_type_and_metric() -> None:
    for h in HEADERS:
        assert f"`{h}`" in README, h
    for t in ErrorType:
        assert f"`{t.value}`" in README, t
    for name in CONTRACT:
        assert f"`{name}`" in README, name


def _keys(node: object, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            out.add(prefix + k)
            out |= _keys(v, prefix + k + ".")
    elif isinstance(node, list):
        for item in node:
            out |= _keys(item, prefix)
    return out


def _model_keys(model: type, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        out.add(prefix + name)
        ann = field.annotation
        inner = getattr(ann, "__args__", (ann,))
        for t in inner:
            if isinstance(t, type) and hasattr(t, "model_fields"):
                out |= _model_keys(t, prefix + name + ".")
    return out


def test_readme_config_reference_matches_the_models() -> None:
    block = re.search(r"# Configuration.*?```yaml\n(.*?)```", (DOCS / "configuration.md").read_text(), re.S)
    assert block is not None
    documented = _keys(yaml.safe_load(block.group(1)))
    # `prices` maps a model glob to a price: its example glob stands for any, its fields are the price's.
    example = {k for k in documented if k.startswith("prices.")}
    assert {k.split(".", 2)[2] for k in example if k.count(".") == 2} == set(PriceConfig.model_fields)
    documented -= example
    assert documented == (_model_keys(GatewayConfig) - {f"prices.{f}" for f in PriceConfig.model_fields}) | {f"upstreams.{k}" for k in UpstreamConfig.model_fields} - {"upstreams"} | {"upstreams"}


def test_the_readme_metrics_table_lists_every_metric_the_app_exposes_with_its_labels() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.app import create_app
    from gateway.config import parse_config

    registry = CollectorRegistry()
    create_app(parse_config("upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]", env={}), registry=registry)
    section = (DOCS / "reference" / "metrics.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `(llm_gateway_[a-z_]+)` \|.*$", section, re.M)}
    for family in registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in rows, name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        for label in labels:
            assert f"`{label}`" in rows[name], (name, label)
    compressions = {s.labels["outcome"] for f in registry.collect() if f.name == "llm_gateway_compressions"
                    for s in f.samples}
    for outcome in compressions:
        assert outcome in rows["llm_gateway_compressions_total"], outcome


def test_the_agent_snippets_say_what_a_new_user_trips_over() -> None:
    agents = "\n".join(p.read_text() for p in sorted((DOCS / "agents").glob("*.md")))
    # A credential is needed even when the gateway checks none (measured: Claude Code says
    # "Not logged in", Codex "Missing environment variable", the AI SDK AI_LoadAPIKeyError).
    assert "ANTHROPIC_AUTH_TOKEN=<gateway key, or dummy>" in agents and "GW_KEY=dummy" in agents
    assert "AI_LoadAPIKeyError" in agents
    opencode = re.search(r"```json\n(.*?)```", (DOCS / "agents" / "opencode.md").read_text(), re.S)
    assert opencode is not None
    cfg = yaml.safe_load(opencode.group(1))  # JSON is YAML
    (provider,) = cfg["provider"].values()
    assert provider["npm"] == "@ai-sdk/openai-compatible" and provider["options"]["baseURL"].endswith("/v1")
    assert cfg["model"].split("/", 1)[1] in provider["models"]
    ai_sdk = (DOCS / "agents" / "vercel-ai-sdk.md").read_text()
    assert 'openai.chat("' in ai_sdk and "@ai-sdk/anthropic" in ai_sdk
    assert re.search(r'createAnthropic\(\{ baseURL: "http://127\.0\.0\.1:8080/v1"', ai_sdk)


def test_readme_commands_run_one_way() -> None:
    # Said once (activate .venv or prefix .venv/bin/), then every command is written bare: a
    # reader who activated the venv can paste any of them, and none looks different from the rest.
    assert "`. .venv/bin/activate`" in README
    blocks = re.findall(r"```(?:sh|bash)[^\n]*\n(.*?)```", README, re.S)
    commands = [line.strip() for block in blocks for line in block.splitlines()]
    commands += re.findall(r"`((?:\.venv/bin/)?(?:python|llm-gateway) [^`]*)`", README)
    assert commands and not [c for c in commands if c.startswith(".venv/bin/")]


def test_the_license_is_an_spdx_expression_setuptools_reads() -> None:
    # A {text = ...} table is deprecated (setuptools' notice sets 2027-02-18); a string is an SPDX
    # expression from setuptools 77 on, which the build must then require.
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in meta["build-system"]["requires"]
