from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9000/v1'}]"


def test_one_upstream_is_a_complete_config() -> None:
    cfg = parse_config(MINIMAL, env={})
    assert cfg.server.port == 8080
    assert cfg.server.max_body_bytes == 33554432
    assert cfg.retry.rate_limit.max_retries == 3
    assert cfg.retry.provider_unavailable.max_retries == 5
    assert cfg.retry.max_retry_after_s == 30
    assert cfg.retry.deadline_s == 600
    assert (cfg.retry.budget.ttl_s, cfg.retry.budget.min_retries_per_s, cfg.retry.budget.percent_can_retry) == (10, 10, 20)
    assert (cfg.circuit_breaker.failure_threshold, cfg.circuit_breaker.open_s) == (5, 30)
    assert (cfg.timeouts.connect_s, cfg.timeouts.first_byte_s, cfg.timeouts.idle_s) == (10, 300, 120)
    assert cfg.compression.enabled is True
    assert cfg.upstreams[0].models == ("*",)
    assert cfg.upstreams[0].api_key is None


def test_config_is_frozen() -> None:
    cfg = parse_config(MINIMAL, env={})
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type is an implementation detail
        cfg.server.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("server: {port: eighty}\n" + MINIMAL, "server.port: Input should be a valid integer"),
        ("server: {prot: 80}\n" + MINIMAL, "server.prot: unknown key"),
        ("servr: {}\n" + MINIMAL, "servr: unknown key"),
        ("server: {port: 80}", "upstreams: is required"),
        ("upstreams: []", "upstreams: must have at least 1 item"),
        ("upstreams: [{name: a, base_url: 'ftp://x'}]", "upstreams[0].base_url: must be an absolute http"),
        ("upstreams: [{name: a}]", "upstreams[0].base_url: is required"),
        (MINIMAL + "\nretry: {rate_limit: {max_retries: -1, base_delay_s: 1, max_delay_s: 2}}",
         "retry.rate_limit.max_retries: Input should be greater than or equal to 0"),
        ("upstreams: [{name: a, base_url: 'http://x/v1'}, {name: a, base_url: 'http://y/v1'}]",
         "upstreams: upstream names must be unique, repeated: a"),
        ("upstreams: [\n  {name: a", "invalid YAML at line"),
        ("- 1\n- 2", "the top level must be a mapping"),
        ("compression: {enabled: maybe}\n" + MINIMAL, "compression.enabled: Input should be a valid boolean"),
    ],
)
def test_bad_config_names_the_field(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


def test_env_expansion_with_defaults() -> None:
    text = (
        "server: {port: '${PORT:-9999}'}\n"
        "upstreams: [{name: a, base_url: '${BASE}', api_key: '${KEY:-}'}]"
    )
    cfg = parse_config(text, env={"BASE": "http://h:1/v1"})
    assert cfg.server.port == 9999
    assert cfg.upstreams[0].base_url == "http://h:1/v1"
    assert cfg.upstreams[0].api_key is None
    cfg = parse_config(text, env={"BASE": "http://h:1/v1/", "KEY": "sk-x#y:z", "PORT": "1"})
    assert cfg.upstreams[0].api_key == "sk-x#y:z"  # expansion after parsing keeps YAML intact
    assert cfg.upstreams[0].base_url == "http://h:1/v1"


def test_unset_variable_without_default_is_an_error() -> None:
    with pytest.raises(ConfigError, match="environment variable NOPE is not set"):
        parse_config("upstreams: [{name: a, base_url: '${NOPE}'}]", env={})


def test_api_key_is_not_in_repr() -> None:
    cfg = parse_config("upstreams: [{name: a, base_url: 'http://x/v1', api_key: sk-secret}]", env={})
    assert "sk-secret" not in repr(cfg)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


@pytest.mark.parametrize("path", sorted((ROOT / "config").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_validates(path: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-test"}
    assert isinstance(load_config(path, env=env), GatewayConfig)
