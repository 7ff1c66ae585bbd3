"""An upstream listed after one whose ``models`` cover all of its own is never routed to:
The Translation page's example once did this, so the example is routed here as printed, and
start-up names any such upstream."""

import re
from pathlib import Path

import pytest

from gateway.app import create_app
from gateway.config import config_warnings, parse_config
from gateway.live import LIVE

TRANSLATION = Path(__file__).resolve().parents[2] / "docs" / "translation" / "index.md"


def _translation_example() -> str:
    (block,) = re.findall(r"```yaml[^\n]*\n(.*?)```", TRANSLATION.read_text(), re.S)
    return str(block)


@pytest.mark.parametrize(("model", "upstream"), [("claude-sonnet-4-5", "anthropic"), ("qwen3-coder", "local"),
                                                 ("claude-haiku-4-5", "anthropic")])  # fmt: skip
def test_the_translation_example_routes_each_model_to_its_upstream(model: str, upstream: str) -> None:
    cfg = parse_config(_translation_example(), env={"ANTHROPIC_API_KEY": "sk-ant"})
    app = create_app(cfg, sender=object())  # type: ignore[arg-type]  # routing sends nothing
    route = app[LIVE].services.chain_for(model)
    assert route is not None and route.upstreams[0].cfg.name == upstream
    assert config_warnings(cfg) == []


def _ups(*entries: str, pools: str = "") -> str:
    text = "upstreams:\n" + "".join(f"  - {{{e}}}\n" for e in entries)
    return text + (f"pools:\n{pools}" if pools else "")


def _shadowing(text: str) -> list[str]:
    return [w for w in config_warnings(parse_config(text, env={})) if " is never chosen for any model" in w]


def test_an_upstream_behind_a_catch_all_is_never_chosen() -> None:
    (warning,) = _shadowing(_ups("name: local, base_url: 'http://l/v1'",
                                 "name: anthropic, base_url: 'http://a/v1', models: ['claude-*']"))  # fmt: skip
    assert warning.startswith("upstreams[1] (anthropic) is never chosen for any model, nor anyone's fallback: ")
    assert "upstreams[0] (local)" in warning and "list it first or narrow their models" in warning
    assert "\n" not in warning


def test_one_reached_as_a_fallback_is_said_to_be_only_that() -> None:
    (warning,) = _shadowing(_ups("name: local, base_url: 'http://l/v1', fallbacks: [spare]",
                                 "name: spare, base_url: 'http://s/v1', models: ['gpt-*', 'o3*']"))  # fmt: skip
    assert warning.startswith("upstreams[1] (spare) is never chosen for any model; reached only as a fallback")


def test_patterns_covered_one_by_one_by_several_earlier_upstreams() -> None:
    (warning,) = _shadowing(_ups("name: a, base_url: 'http://a/v1', models: ['claude-*']",
                                 "name: b, base_url: 'http://b/v1', models: ['gpt-*']",
                                 "name: c, base_url: 'http://c/v1', models: ['claude-sonnet-*', 'gpt-4o']"))  # fmt: skip
    assert warning.startswith("upstreams[2] (c) is never chosen for any model, nor anyone's fallback")
    assert "upstreams[0] (a), upstreams[1] (b)" in warning


@pytest.mark.parametrize("later", [
    "models: ['claude-*', 'llama*']",    # one pattern of its own is still reached
    "models: ['*']",                     # '?' covers one-letter names only, not everything
])  # fmt: skip
def test_no_warning_while_some_model_still_reaches_it(later: str) -> None:
    text = _ups("name: a, base_url: 'http://a/v1', models: ['claude-*', '?']",
                f"name: b, base_url: 'http://b/v1', {later}")  # fmt: skip
    assert _shadowing(text) == []


def test_pool_deployments_are_not_routed_directly_so_never_shadowed() -> None:
    text = _ups("name: any, base_url: 'http://x/v1'", "name: k1, base_url: 'http://k/v1'",
                "name: k2, base_url: 'http://k/v1'",
                pools="  - {name: p, models: ['claude-*'], deployments: [k1, k2]}\n")  # fmt: skip
    assert _shadowing(text) == []


def test_a_pool_covering_an_upstream_shadows_it_too() -> None:
    # Pools are tried before any upstream; the first upstream outside them still serves
    # requests without a model, so only a later one is never chosen.
    text = _ups("name: first, base_url: 'http://f/v1', models: ['claude-*']",
                "name: second, base_url: 'http://s/v1', models: ['claude-opus-*']",
                "name: k1, base_url: 'http://k/v1'",
                pools="  - {name: p, models: ['claude-opus-*', 'x'], deployments: [k1]}\n")  # fmt: skip
    (warning,) = _shadowing(text)
    assert warning.startswith("upstreams[1] (second) is never chosen for any model, nor anyone's fallback")
    assert "pools[0] (p)" in warning
