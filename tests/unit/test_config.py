import hashlib
from pathlib import Path

import pytest

from gateway.config import ConfigError, GatewayConfig, config_warnings, load_config, parse_config

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
        # Read as 1 it listened on port 1.
        ("server: {port: true}\n" + MINIMAL, "server.port: an integer is wanted, not true"),
        ("server: {workers: true}\n" + MINIMAL, "server.workers: an integer is wanted, not true"),
        ("timeouts: {idle_s: false}\n" + MINIMAL, "timeouts.idle_s: a number is wanted, not false"),
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
        # PyYAML reads these as dates and raised a bare ValueError: a traceback at start-up.
        (MINIMAL + "\nrouting: {model_map: {a: 2026-13-01}}", "invalid YAML at line 2, column 26: 2026-13-01 is not a date"),
        ("x: 2026-02-30\n" + MINIMAL, "invalid YAML at line 1, column 4: 2026-02-30 is not a date"),
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


def test_a_required_variable_refuses_unset_and_empty_alike() -> None:
    text = "upstreams: [{name: a, base_url: 'http://x/v1', api_key: '${KEY:?set it to your key}'}]"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == ("upstreams[0].api_key: environment variable KEY is not set: set it to your key",)
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={"KEY": ""})
    assert e.value.problems == ("upstreams[0].api_key: environment variable KEY is empty: set it to your key",)
    assert parse_config(text, env={"KEY": "sk-1"}).upstreams[0].api_key == "sk-1"
    with pytest.raises(ConfigError, match=r"environment variable KEY is empty \(it must not be empty\)"):
        parse_config(text.replace(":?set it to your key", ":?"), env={"KEY": ""})


@pytest.mark.parametrize("ref", ["${KEY-sk-default}", "${KEY", "${ KEY }", "${KEY:=x}", "${}"])
def test_a_mistyped_variable_reference_is_refused_not_taken_literally(ref: str) -> None:
    # Taken as it is, it went upstream as the key: "Authorization: Bearer ${KEY-sk-default}".
    text = f"upstreams: [{{name: a, base_url: 'http://x/v1', api_key: '{ref}'}}]"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={"KEY": "sk-1"})
    assert e.value.problems == (
        f"upstreams[0].api_key: `{ref}` is not a variable reference: write ${{VAR}} or ${{VAR:-default}}",
    )


def test_a_dollar_that_starts_no_reference_is_kept() -> None:
    text = "upstreams: [{name: a, base_url: 'http://x/v1', api_key: 'sk-$1', models: ['^gpt-4o$']}]"
    cfg = parse_config(text, env={})
    assert cfg.upstreams[0].api_key == "sk-$1" and tuple(cfg.upstreams[0].models) == ("^gpt-4o$",)


@pytest.mark.parametrize(("value", "problem"), [
    ("sk-1\n", "ends with a line break (a Kubernetes Secret made with --from-file?); remove it"),
    ("sk-1\r\n", "ends with a line break (a Kubernetes Secret made with --from-file?); remove it"),
    ("sk-1\nsk-2", "has a line break or NUL in it"),
    ("sk\x001", "has a line break or NUL in it"),
])
def test_an_api_key_that_cannot_be_a_header_value_is_refused_at_load(value: str, problem: str) -> None:
    # Accepted, every request then failed 400 invalid_header, blamed on the client.
    text = "upstreams: [{name: a, base_url: 'http://x/v1', api_key: '${KEY}'}]"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={"KEY": value})
    assert e.value.problems[0] == f"upstreams[0].api_key: KEY=<hidden>: {problem}"
    assert "sk-1" not in str(e.value)


def test_a_gateway_key_with_a_trailing_newline_says_so() -> None:
    text = "upstreams: [{name: a, base_url: 'http://x/v1'}]\nkeys: [{name: alice, key: '${KEY}'}]"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={"KEY": "gk-1\n"})
    assert "ends with a line break (a Kubernetes Secret made with --from-file?)" in e.value.problems[0]
    assert e.value.problems[0].startswith("keys[0].key:")


def test_the_openai_example_takes_the_port_and_refuses_an_empty_key() -> None:
    path = ROOT / "config/examples/openai.yaml"
    cfg = load_config(path, env={"OPENAI_API_KEY": "sk-1", "GATEWAY_PORT": "9099"})
    assert cfg.server.port == 9099 and cfg.upstreams[0].api_key == "sk-1"
    for env in ({}, {"OPENAI_API_KEY": ""}):
        with pytest.raises(ConfigError, match="environment variable OPENAI_API_KEY is"):
            load_config(path, env=env)


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


def test_every_problem_is_shown_one_per_line_with_its_field() -> None:
    text = (
        "server: {port: eighty, prot: 80}\n"
        "upstreams: [{name: a, base_ulr: 'http://x/v1'}]\n"
        "retyr: {}\n"
    )
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "server.port: Input should be a valid integer, unable to parse string as an integer",
        "server.prot: unknown key (did you mean 'port'?)",
        # The typo first: it is why base_url is missing.
        "upstreams[0].base_ulr: unknown key (did you mean 'base_url'?)",
        "upstreams[0].base_url: is required",
        "retyr: unknown key (did you mean 'retry'?)",
    )
    assert str(e.value) == "\n".join(e.value.problems)
    assert "more problem" not in str(e.value)


def test_unknown_key_without_a_near_match_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config("compression: {zzz: 1}\n" + MINIMAL, env={})
    assert e.value.problems == ("compression.zzz: unknown key (known keys: enabled, max_tool_output_share, max_tool_output_tokens, self_compacting_clients)",)


def test_every_unset_variable_is_reported() -> None:
    text = "upstreams: [{name: a, base_url: 'http://x/v1', api_key: '${K1}', models: ['${K2}']}]"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert [p for p in e.value.problems if "environment variable" in p] == [
        "upstreams[0].api_key: environment variable K1 is not set (it holds a secret, which has no default: set it in the gateway's environment)",  # a credential: no default
        "upstreams[0].models[0]: environment variable K2 is not set (use ${K2:-default})",
    ]


def test_an_unset_variable_names_every_field_it_is_used_in() -> None:
    # Every other config problem names its field; so does a variable the environment lacks,
    # or the operator greps the file for it. Used twice, it is reported where each use is.
    text = ("upstreams: [{name: a, base_url: 'http://x/v1', api_key: '${OPENAI_API_KEY_NOPE}'},\n"
            "            {name: b, base_url: 'http://${HOST}/v1', api_key: '${OPENAI_API_KEY_NOPE}'}]\n")
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems[:3] == (
        "upstreams[0].api_key: environment variable OPENAI_API_KEY_NOPE is not set (it holds a secret, which has no default: set it in the gateway's environment)",
        "upstreams[1].base_url: environment variable HOST is not set (use ${HOST:-default})",
        "upstreams[1].api_key: environment variable OPENAI_API_KEY_NOPE is not set (it holds a secret, which has no default: set it in the gateway's environment)",
    )



def test_an_unset_variable_in_the_only_upstream_is_the_one_problem() -> None:
    """Its upstream fails, and pydantic then finds the list empty: that is no second problem
    (an operations audit: "upstreams: must have at least 1 item(s)" followed the real one)."""
    with pytest.raises(ConfigError) as e:
        parse_config("upstreams: [{name: a, base_url: 'http://${NOPE_HOST}:9/v1'}]", env={})
    assert e.value.problems == ("upstreams[0].base_url: environment variable NOPE_HOST is not set "
                                "(use ${NOPE_HOST:-default})",)  # fmt: skip

@pytest.mark.parametrize(
    "url", ["https://user:s3cr3t-pw@api.example.com/v1", "https://s3cr3t-pw@api.example.com/v1",
            "http://:s3cr3t-pw@127.0.0.1:9000/v1"],
)
def test_credentials_in_base_url_are_refused_without_echoing_them(url: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(f"upstreams: [{{name: a, base_url: '{url}'}}]", env={})
    assert e.value.problems == (
        "upstreams[0].base_url: must not contain credentials (user:password@); put the key in api_key",
    )
    assert "s3cr3t" not in str(e.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000", "http://127.0.0.1:9000/", "https://h"])
def test_base_url_without_a_path_is_a_warning_not_an_error(url: str) -> None:
    cfg = parse_config(f"upstreams: [{{name: a, base_url: '{url}'}}]", env={})
    (warning,) = config_warnings(cfg)
    assert warning.startswith("upstreams[0].base_url has no path")
    assert f"did you mean {url.rstrip('/')}/v1?" in warning
    assert "\n" not in warning


def test_base_url_with_a_path_has_no_warning() -> None:
    assert config_warnings(parse_config(MINIMAL, env={})) == []


def test_client_keys_default_to_none_and_authentication_is_explicit() -> None:
    cfg = parse_config(MINIMAL, env={})
    assert cfg.server.client_keys == ()
    assert cfg.server.allow_unauthenticated is False


@pytest.mark.parametrize(
    ("value", "env", "expected"),
    [
        ("'${GATEWAY_CLIENT_KEYS:-}'", {}, ()),
        ("'${GATEWAY_CLIENT_KEYS:-}'", {"GATEWAY_CLIENT_KEYS": "k-one"}, ("k-one",)),
        ("'${GATEWAY_CLIENT_KEYS:-}'", {"GATEWAY_CLIENT_KEYS": " k-one, k-two ,,k-one"}, ("k-one", "k-two")),
        ("['${A}', '${B:-}', k-three]", {"A": "k-one,k-two"}, ("k-one", "k-two", "k-three")),
        ("[]", {}, ()),
        ("null", {}, ()),
    ],
)
def test_client_keys_from_one_variable_or_a_list(value: str, env: dict[str, str],
                                                  expected: tuple[str, ...]) -> None:
    cfg = parse_config(f"server: {{client_keys: {value}}}\n" + MINIMAL, env=env)
    assert cfg.server.client_keys == expected


def test_client_keys_are_never_shown() -> None:
    cfg = parse_config("server: {client_keys: 'gk-secret-1,gk-secret-2'}\n" + MINIMAL, env={})
    assert "gk-secret" not in repr(cfg)
    with pytest.raises(ConfigError) as e:
        parse_config("server: {client_keys: ['gk-ok', 'gk secret']}\n" + MINIMAL, env={})
    assert e.value.problems == ("server.client_keys: key #2 must be printable ASCII without spaces",)
    assert "secret" not in str(e.value)
    with pytest.raises(ConfigError) as e:
        parse_config("server: {client_keys: [{a: 1}]}\n" + MINIMAL, env={})
    assert e.value.problems == ("server.client_keys[0]: Input should be a valid string",)


def test_key_header_defaults_to_authorization_and_is_checked() -> None:
    assert parse_config(MINIMAL, env={}).upstreams[0].key_header == "authorization"
    text = "upstreams: [{name: a, base_url: 'http://x/v1', key_header: x-api-key}]"
    assert parse_config(text, env={}).upstreams[0].key_header == "x-api-key"
    with pytest.raises(ConfigError, match=r"upstreams\[0\].key_header: Input should be 'authorization'"):
        parse_config(text.replace("x-api-key", "bearer"), env={})


def test_client_keys_stop_client_credentials_going_upstream() -> None:
    keyless = parse_config(MINIMAL, env={})
    assert keyless.upstreams[0].forwards_client_credentials
    guarded = parse_config("server: {client_keys: gk-1}\n" + MINIMAL, env={})
    assert not guarded.upstreams[0].forwards_client_credentials
    (warning,) = config_warnings(guarded)
    assert "has no api_key while server.client_keys is set" in warning


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.5", False), ("gateway.internal", False)],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    cfg = parse_config(f"server: {{host: '{host}'}}\n" + MINIMAL, env={})
    assert cfg.server.is_loopback is loopback


def test_a_partial_retry_class_takes_the_rest_from_its_own_defaults() -> None:
    cfg = parse_config(MINIMAL + "\nretry: {rate_limit: {max_retries: 1}, provider_unavailable: {max_delay_s: 3}}",
                       env={})
    assert (cfg.retry.rate_limit.max_retries, cfg.retry.rate_limit.base_delay_s,
            cfg.retry.rate_limit.max_delay_s) == (1, 1.0, 20.0)
    assert (cfg.retry.provider_unavailable.max_retries, cfg.retry.provider_unavailable.base_delay_s,
            cfg.retry.provider_unavailable.max_delay_s) == (5, 0.5, 3.0)
    # A bad value is still reported by its field.
    with pytest.raises(ConfigError) as e:
        parse_config(MINIMAL + "\nretry: {rate_limit: {base_delay_s: 0}}", env={})
    assert e.value.problems == ("retry.rate_limit.base_delay_s: Input should be greater than 0",)


def test_models_and_fallbacks_may_be_one_string() -> None:
    cfg = parse_config("upstreams: [{name: a, base_url: 'http://x/v1', models: 'gpt-*', fallbacks: b},"
                       " {name: b, base_url: 'http://y/v1', models: '*'}]", env={})
    assert cfg.upstreams[0].models == ("gpt-*",) and cfg.upstreams[0].fallbacks == ("b",)
    assert cfg.upstreams[1].models == ("*",)


def test_an_unknown_fallback_is_reported_beside_a_duplicate_name() -> None:
    text = ("upstreams: [{name: a, base_url: 'http://x/v1', fallbacks: [backup]},"
            " {name: a, base_url: 'http://y/v1'}]")
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "upstreams: upstream 'a' names unknown fallbacks: backup (upstream names: a)",
        "upstreams: upstream names must be unique, repeated: a",
    )


POOL_UPSTREAMS = ("upstreams: [{name: a, base_url: 'http://x/v1', api_key: ka},"
                  " {name: b, base_url: 'http://y/v1', api_key: kb}]\n")


def test_a_pool_takes_deployments_with_weights_and_limits() -> None:
    cfg = parse_config(
        "upstreams: [{name: a, base_url: 'http://x/v1', weight: 3, limits: {requests_per_minute: 50}},"
        " {name: b, base_url: 'http://y/v1'}]\n"
        "pools: [{name: p, models: 'gpt-*', deployments: [a, b], strategy: least_busy}]\n", env={})
    (pool,) = cfg.pools
    assert pool.models == ("gpt-*",) and pool.strategy == "least_busy" and pool.affinity.enabled
    assert cfg.upstreams[0].weight == 3 and cfg.upstreams[0].limits is not None
    assert cfg.upstreams[0].limits.requests_per_minute == 50 and cfg.upstreams[1].weight == 1
    assert cfg.pool_of("b") is pool and cfg.pool_of("c") is None


def test_pool_problems_are_reported_together_each_naming_its_section() -> None:
    text = POOL_UPSTREAMS + (
        "pools:\n"
        "  - {name: p, models: ['claude-*'], deployments: [a, ghost], fallbacks: [nowhere]}\n"
        "  - {name: q, models: ['claude-sonnet-*'], deployments: [b]}\n"
        "  - {name: a, models: ['gpt-*'], deployments: [b]}\n")
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "pools: pool 'p' names deployments that are no upstream: ghost (upstream names: a, b)",
        "pools: pool 'a' has an upstream's name; a pool needs its own",
        "pools: pool 'p' names unknown fallbacks: nowhere (upstream and pool names: a, b, p, q)",
        "pools: pools 'p' and 'q' both claim models matching claude-* / claude-sonnet-*; a model has one pool",
    )


def test_a_pool_deployment_keeps_no_fallbacks_of_its_own_and_a_pool_lists_a_deployment_once() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config("upstreams: [{name: a, base_url: 'http://x/v1', fallbacks: [b]}, {name: b, base_url: 'http://y/v1'}]\n"
                     "pools: [{name: p, deployments: [a, a]}]\n", env={})
    assert e.value.problems == (  # both, in one pass
        "pools[0].deployments: lists a deployment twice: a",
        "upstreams: upstream 'a' is a deployment of pool 'p', where its fallbacks go (pools[].fallbacks)",
    )
    with pytest.raises(ConfigError) as e:
        parse_config("upstreams: [{name: a, base_url: 'http://x/v1', fallbacks: [b]}, {name: b, base_url: 'http://y/v1'}]\n"
                     "pools: [{name: p, models: 'gpt-*', deployments: [a]}]\n", env={})
    assert e.value.problems == (
        "upstreams: upstream 'a' is a deployment of pool 'p', where its fallbacks go (pools[].fallbacks)",)


def test_an_upstream_may_fall_back_to_a_pool_and_a_pool_to_itself_not() -> None:
    cfg = parse_config(POOL_UPSTREAMS.replace("api_key: ka}", "api_key: ka, models: ['x'], fallbacks: [p]}")
                       .replace("{name: b,", "{name: c, base_url: 'http://z/v1'}, {name: b,")
                       + "pools: [{name: p, models: 'gpt-*', deployments: [b, c]}]\n", env={})
    assert cfg.upstreams[0].fallbacks == ("p",)
    with pytest.raises(ConfigError) as e:
        parse_config(POOL_UPSTREAMS + "pools: [{name: p, deployments: [a, b], fallbacks: [p]}]\n", env={})
    assert e.value.problems == ("pools: pool 'p' lists itself as a fallback",)


def test_a_bad_value_from_a_variable_names_the_variable_and_its_value() -> None:
    text = ("server: {port: '${GATEWAY_PORT:-8080}'}\n"
            "upstreams: [{name: a, base_url: '${UPSTREAM_BASE_URL}'}, {name: b, base_url: '${UPSTREAM_TOKEN}'},"
            " {name: c, base_url: 'http://x/v1', context_window: '${CTX}'}]\n"
            "state: {backend: redis, url: '${REDIS_URL}'}")
    env = {"GATEWAY_PORT": "abc", "UPSTREAM_BASE_URL": "ftp://h/v1", "UPSTREAM_TOKEN": "tok-5ecret",
           "CTX": "lots", "REDIS_URL": "http://:pa55@r:6379"}
    with pytest.raises(ConfigError) as e:
        parse_config(text, env=env)
    assert e.value.problems == (
        "server.port: GATEWAY_PORT=abc: Input should be a valid integer, unable to parse string as an integer",
        "upstreams[0].base_url: UPSTREAM_BASE_URL=ftp://h/v1: must be an absolute http:// or https:// URL",
        # A variable named like a credential is never printed, nor a URL's password.
        "upstreams[1].base_url: UPSTREAM_TOKEN=<hidden>: must be an absolute http:// or https:// URL",
        "upstreams[2].context_window: CTX=lots: Input should be a valid integer, unable to parse string as an integer",
        "state.url: REDIS_URL=http://***@r:6379: must be a redis://, rediss:// or unix:// URL",
    )
    # A default that is wrong is in the file for all to see: no variable to name.
    with pytest.raises(ConfigError) as e:
        parse_config("server: {port: '${GATEWAY_PORT:-abc}'}\n" + MINIMAL, env={})
    assert e.value.problems[0].startswith("server.port: Input should be a valid integer")


@pytest.mark.parametrize("value", ["abc", "0", "257", "-1", "[1]"])
def test_workers_out_of_range_or_not_a_number_is_one_line(value: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(f"server: {{workers: {value}}}\n" + MINIMAL, env={})
    assert e.value.problems == ("server.workers: must be an integer between 1 and 256, or auto",)
    with pytest.raises(ConfigError) as e:
        parse_config("server: {workers: '${GATEWAY_WORKERS}'}\n" + MINIMAL, env={"GATEWAY_WORKERS": "many"})
    assert e.value.problems == ("server.workers: GATEWAY_WORKERS=many: must be an integer between 1 and 256, or auto",)
    assert parse_config("server: {workers: '${GATEWAY_WORKERS}'}\n" + MINIMAL, env={"GATEWAY_WORKERS": "4"}
                        ).server.workers == 4


def test_cross_section_problems_are_reported_with_field_errors() -> None:
    text = ("server: {port: x}\n"
            "upstreams: [{name: a, base_url: 'http://x/v1', fallbacks: backup}, {name: a, base_url: 'http://y/v1'},"
            " {name: c, base_url: 'http://z/v1', fallbacks: [c], max_connections: 0}]\n"
            "pools: [{name: p, deployments: [a, ghost]}, {name: q, deployments: [c], models: [bad]}]")
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "server.port: Input should be a valid integer, unable to parse string as an integer",
        "upstreams[2].max_connections: Input should be greater than 0",
        "pools: pool 'p' names deployments that are no upstream: ghost (upstream names: a, a, c)",
        "upstreams: upstream 'a' names unknown fallbacks: backup (upstream and pool names: a, c, p, q)",
        "upstreams: upstream 'c' lists itself as a fallback",
        "upstreams: upstream 'a' is a deployment of pool 'p', where its fallbacks go (pools[].fallbacks)",
        "upstreams: upstream 'c' is a deployment of pool 'q', where its fallbacks go (pools[].fallbacks)",
        "upstreams: upstream names must be unique, repeated: a",
        "pools: pools 'p' and 'q' both claim models matching * / bad; a model has one pool",
    )


def test_redis_without_a_loop_breaker_secret_is_a_warning() -> None:
    redis = MINIMAL + "\nstate: {backend: redis, url: 'redis://127.0.0.1:6379/0'}"
    warnings = config_warnings(parse_config(redis, env={}))
    assert [w for w in warnings if "loop_breaker.secret" in w] == [
        "state.backend is redis but loop_breaker.secret is not set: each replica draws its own "
        "(the workers of one replica share their supervisor's), so separate replicas never share "
        "remembered answers, and pools' conversations are named in Redis by a plain digest of their opening "
        "(one who reads Redis can confirm a guessed prompt); "
        "give every replica the same secret (loop_breaker: {secret: ${LOOP_BREAKER_SECRET}})"
    ]
    assert not config_warnings(parse_config(redis + "\nloop_breaker: {secret: shared}", env={}))
    assert not config_warnings(parse_config(redis + "\nloop_breaker: {enabled: false}", env={}))
    assert not config_warnings(parse_config(MINIMAL, env={}))


def test_the_local_server_example_reads_the_variable_quick_start_teaches() -> None:
    cfg = load_config(ROOT / "config/examples/local-vllm.yaml", env={"UPSTREAM_BASE_URL": "http://10.0.0.5:8000/v1"})
    assert cfg.upstreams[0].base_url == "http://10.0.0.5:8000/v1"


def test_every_variable_a_shipped_config_reads_is_named_in_the_configuration_page() -> None:
    import re

    section = (ROOT / "docs" / "configuration.md").read_text()
    for path in sorted((ROOT / "config").rglob("*.yaml")):
        for var in re.findall(r"\$\{([A-Z_]+)", path.read_text()):
            assert f"`{var}`" in section, (path.name, var)
        assert f"`config/{path.relative_to(ROOT / 'config')}`" in section, path.name


def test_every_shipped_config_listens_on_gateway_port() -> None:
    """The quick start moves a gateway off 8080 with GATEWAY_PORT for any CONFIG=; a file that
    ignored it (two-upstreams.yaml did) silently took 8080 and clashed with the page's other one."""
    import re

    for path in sorted((ROOT / "config").rglob("*.yaml")):
        env = {var: "x" for var in re.findall(r"\$\{([A-Z_]+)(?:\}|:\?)", path.read_text())}  # no default
        cfg = load_config(path, env={**env, "GATEWAY_PORT": "31899"})
        assert cfg.server.port == 31899, path.name


def test_the_mixed_example_routes_each_agent_to_an_upstream_of_its_api() -> None:
    from gateway.routing import pick_upstream

    cfg = load_config(ROOT / "config/examples/mixed.yaml", env={})
    routed = {m: getattr(pick_upstream(cfg.upstreams, m), "name", None)
              for m in ("claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5-codex", "o4-mini", "qwen3-coder")}
    assert routed == {"claude-sonnet-4-5": "anthropic", "claude-haiku-4-5": "anthropic", "gpt-5-codex": "openai",
                      "o4-mini": "openai", "qwen3-coder": "local"}
    anthropic = cfg.upstreams[0]
    assert anthropic.key_header == "x-api-key" and anthropic.base_url.endswith("/v1")


def test_the_claude_code_example_sends_anthropic_its_key_its_way() -> None:
    cfg = load_config(ROOT / "config/examples/claude-code.yaml", env={"ANTHROPIC_API_KEY": "sk-ant-x"})
    (up,) = cfg.upstreams
    assert (up.base_url, up.key_header, up.api_key, up.models) == (
        "https://api.anthropic.com/v1", "x-api-key", "sk-ant-x", ("claude-*",))


@pytest.mark.parametrize(("base_url", "apis", "said"), [
    ("https://api.openai.com/v1", ("chat", "responses"), "host api.openai.com"),  # no /v1/messages there
    ("https://API.Anthropic.com/v1", ("messages",), "host api.anthropic.com"),
    ("https://generativelanguage.googleapis.com/v1beta", ("gemini",), "host generativelanguage.googleapis.com"),
    ("http://127.0.0.1:8000/v1", ("chat", "messages", "responses"), "default"),  # never gemini unless said
    # Azure OpenAI: no Messages, so a Messages client is translated, not sent /messages (audit)
    ("https://my-res.openai.azure.com/openai/v1", ("chat", "responses"), "host my-res.openai.azure.com"),
    ("https://my-res.openai.azure.com/openai/deployments/gpt4o-east", ("chat",), "host my-res.openai.azure.com"),
    ("https://openai.azure.com.example/v1", ("chat", "messages", "responses"), "default"),  # not Azure's
])  # fmt: skip
def test_apis_left_out_are_what_a_well_known_host_serves(base_url: str, apis: tuple[str, ...], said: str) -> None:
    for given in ("", ", apis: ''", ", apis: '${UPSTREAM_APIS:-}'"):  # an unset variable says nothing either
        (up,) = parse_config(f"upstreams: [{{name: a, base_url: '{base_url}'{given}}}]", env={}).upstreams
        assert (up.apis, up.apis_from) == (apis, said)
    (up,) = parse_config(f"upstreams: [{{name: a, base_url: '{base_url}', apis: [chat]}}]", env={}).upstreams
    assert (up.apis, up.apis_from) == (("chat",), "config")


def test_a_configured_query_goes_with_every_request_and_a_base_url_with_one_says_where_it_belongs() -> None:
    # YAML reads an unquoted api-version as a date: sent as it was written.
    text = ("upstreams: [{name: az, base_url: 'https://r.openai.azure.com/openai/deployments/d', "
            "query: {api-version: 2024-10-21, unset: ''}}]")  # fmt: skip
    assert parse_config(text, env={}).upstreams[0].query == {"api-version": "2024-10-21"}
    with pytest.raises(ConfigError, match="go in `query`"):
        parse_config("upstreams: [{name: az, base_url: 'https://r.openai.azure.com/openai/deployments/d"
                     "?api-version=2024-10-21'}]", env={})  # fmt: skip


@pytest.mark.parametrize("name", ["api-key", "key", "access_token", "Authorization", "client_secret"])
def test_a_credential_is_refused_in_a_configured_query(name: str) -> None:
    text = f"upstreams: [{{name: az, base_url: 'https://r.openai.azure.com/openai/v1', query: {{{name}: s3cr3t}}}}]"
    with pytest.raises(ConfigError, match="reads as a credential: set api_key") as e:
        parse_config(text, env={})
    assert "s3cr3t" not in str(e.value)


@pytest.mark.parametrize(("extra", "header"), [
    ("", "x-goog-api-key"),  # Google's endpoint: apis from the host, the key the way Google takes it
    (", apis: [gemini]", "x-goog-api-key"),
    (", apis: gemini", "x-goog-api-key"),
    (", apis: [gemini], key_header: authorization", "authorization"),  # said: kept
    (", apis: [gemini, chat]", "authorization"),  # not Gemini alone: the usual default
])  # fmt: skip
def test_a_gemini_only_upstream_takes_its_key_in_x_goog_api_key(extra: str, header: str) -> None:
    text = f"upstreams: [{{name: g, base_url: 'https://generativelanguage.googleapis.com/v1beta'{extra}}}]"
    (up,) = parse_config(text, env={}).upstreams
    assert up.key_header == header


@pytest.mark.parametrize(("extra", "header"), [
    (", api_key: sk-ant-api03-k", "x-api-key"),  # Anthropic's API: a key goes in x-api-key, never as Bearer
    ("", "x-api-key"),  # no key: where a client's moves when its request is translated
    (", apis: [messages], api_key: sk-ant-api03-k", "x-api-key"),
    (", apis: [chat, messages], api_key: k", "x-api-key"),  # every request to the API: its docs
    (", api_key: sk-ant-oat01-t", "authorization"),  # an OAuth token (Claude Code's login) is a bearer token
    (", api_key: sk-ant-api03-k, key_header: authorization", "authorization"),  # said: kept
    (", api_key: sk-ant-oat01-t, key_header: x-api-key", "x-api-key"),
])  # fmt: skip
def test_anthropics_api_takes_a_key_in_x_api_key_and_an_oauth_token_as_bearer(extra: str, header: str) -> None:
    for base_url in ("https://api.anthropic.com/v1", "https://API.Anthropic.com/v1"):
        (up,) = parse_config(f"upstreams: [{{name: a, base_url: '{base_url}'{extra}}}]", env={}).upstreams
        assert up.key_header == header


@pytest.mark.parametrize(("base_url", "extra", "header"), [
    # Azure OpenAI takes a key in api-key, the v1 path and the classic one alike (config.py)
    ("https://my-res.openai.azure.com/openai/v1", ", api_key: k", "api-key"),
    ("https://My-Res.OpenAI.Azure.com/openai/deployments/gpt4o", ", api_key: k", "api-key"),
    ("https://my-res.openai.azure.com/openai/v1", "", "api-key"),  # where a client's moves, translated
    ("https://my-res.openai.azure.com/openai/v1", ", apis: [chat], api_key: k", "api-key"),
    ("https://my-res.openai.azure.com/openai/v1", ", api_key: t, key_header: authorization", "authorization"),
    ("https://openai.azure.com.example/v1", ", api_key: k", "authorization"),  # not Azure's
])  # fmt: skip
def test_an_azure_openai_host_takes_its_key_in_api_key(base_url: str, extra: str, header: str) -> None:
    (up,) = parse_config(f"upstreams: [{{name: az, base_url: '{base_url}'{extra}}}]", env={}).upstreams
    assert up.key_header == header


def test_an_anthropic_compatible_server_keeps_the_usual_default() -> None:
    # vLLM's Messages endpoint reads Authorization only (vllm-project/vllm#51572): the host, not
    # the API, says where a key goes.
    for base_url in ("http://127.0.0.1:8000/v1", "https://anthropic.example/v1"):
        text = f"upstreams: [{{name: a, base_url: '{base_url}', apis: [messages], api_key: sk-ant-api03-k}}]"
        assert parse_config(text, env={}).upstreams[0].key_header == "authorization"


def test_the_key_of_an_anthropic_upstream_comes_from_the_environment_before_its_header_is_chosen() -> None:
    text = "upstreams: [{name: a, base_url: 'https://api.anthropic.com/v1', api_key: '${ANTHROPIC_API_KEY:-}'}]"
    assert parse_config(text, env={"ANTHROPIC_API_KEY": "sk-ant-oat01-t"}).upstreams[0].key_header == "authorization"
    assert parse_config(text, env={"ANTHROPIC_API_KEY": "sk-ant-api03-k"}).upstreams[0].key_header == "x-api-key"


def test_a_bare_gemini_host_is_told_about_v1beta() -> None:
    cfg = parse_config("upstreams: [{name: g, base_url: 'https://generativelanguage.googleapis.com'}]", env={})
    assert any("did you mean https://generativelanguage.googleapis.com/v1beta?" in w for w in config_warnings(cfg))


def test_key_limits_on_workers_without_shared_state_are_refused() -> None:
    """Each worker is a process with its own memory: a $1 budget on 2 workers let a key spend
    $2.20 (measured). Such a config is refused, saying why and what to do."""
    keys = ("\nkeys:\n  - {name: alice, key: gk-alice, budget: {usd: 1, period: day}}\n"
            "  - {name: bob, key: gk-bob}\n")  # fmt: skip
    with pytest.raises(ConfigError, match=r"key 'alice' has limits or budgets, and server.workers is 2 with "
                                          r"state.backend memory: each worker would count its own"):  # fmt: skip
        parse_config((MINIMAL + "\nserver: {workers: 2}") + keys, env={})
    parse_config(MINIMAL + keys, env={})  # one worker: counted once
    unlimited = "\nkeys:\n  - {name: bob, key: gk-bob}\n"
    parse_config((MINIMAL + "\nserver: {workers: 2}") + unlimited, env={})  # nothing counted
    redis = "\nstate: {backend: redis, url: 'redis://127.0.0.1:6379/0'}"
    parse_config((MINIMAL + "\nserver: {workers: 2}") + keys + redis, env={})  # shared


def test_pools_whose_globs_share_a_name_are_refused_though_neither_matches_the_other() -> None:
    text = POOL_UPSTREAMS + ("pools:\n  - {name: p, models: ['*-mini'], deployments: [a]}\n"
                             "  - {name: q, models: ['gpt-*'], deployments: [b]}\n")  # fmt: skip
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "pools: pools 'p' and 'q' both claim models matching *-mini / gpt-*; a model has one pool",)
    parse_config(text.replace("'*-mini'", "'claude-*'"), env={})


def test_a_key_given_twice_is_refused_with_both_lines_not_the_last_one_kept() -> None:
    # YAML keeps the last of two equal keys: `server: {port: 1}` then `server: {port: 2}` served
    # on port 2 while the file showed port 1 first, as silently as a typo would.
    text = (
        "server: {port: 8081}\n"
        "upstreams:\n"
        "  - {name: a, base_url: 'http://x/v1', models: ['a'], models: ['b']}\n"
        "server:\n"
        "  port: 8082\n"
        "  drain_s: 1\n"
        "  drain_s: 2\n"
        "retyr: {}\n"
    )
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={}, source="gateway.yaml")
    assert e.value.problems == (
        "server: given twice (lines 1 and 4); YAML keeps only the last, so remove or merge one",
        "upstreams[0].models: given twice (line 3); YAML keeps only the last, so remove or merge one",
        "server.drain_s: given twice (lines 6 and 7); YAML keeps only the last, so remove or merge one",
        "retyr: unknown key (did you mean 'retry'?)",  # every problem in one round, as always
    )


def test_merge_keys_and_anchors_are_no_repeats() -> None:
    # `<<: *base` then a key of its own overrides the merged one: YAML's meaning, not a repeat.
    text = (
        "upstreams:\n"
        "  - &base {name: a, base_url: 'http://x/v1', context_window: 1000}\n"
        "  - {<<: *base, name: b}\n"
    )
    cfg = parse_config(text, env={})
    assert [(u.name, u.context_window) for u in cfg.upstreams] == [("a", 1000), ("b", 1000)]


UP = "upstreams:\n  - {name: oa, base_url: 'http://127.0.0.1:9000/v1', api_key: k, models: ['gpt-*', 'o1-mini']}\n" \
     "  - {name: gm, base_url: 'http://127.0.0.1:9001/v1beta', api_key: k, apis: [gemini], models: ['gemini-9*']}\n"  # fmt: skip
REDIS = "state: {backend: redis, url: 'redis://127.0.0.1:6379/0'}\nloop_breaker: {enabled: false}\n"


@pytest.mark.parametrize(("keys", "unpriced"), [
    # A budgeted key reaching every route: gemini-9* matches no price at all, o1-mini is named and
    # has none, gpt-* is partly priced (gpt-4-turbo has none).
    ("keys: [{name: k, key: gk-k, budget: {usd: 5}}]", ["'gpt-*' (partly)", "'o1-mini'", "'gemini-9*' (none)"]),
    # Its own models narrow what it reaches; its team's budget counts as a budget.
    ("keys: [{name: k, key: gk-k, team: t, models: ['gemini-9-pro', 'gpt-4o*']}]\n"
     "teams: [{name: t, budget: {usd: 5}}]", ["'gemini-9-pro'"]),
    # A partly priced glob counts now: most such routes are an agent's (review).
    ("keys: [{name: k, key: gk-k, models: ['gpt-*']}, {name: j, key: gk-j, budget: {usd: 5}, models: ['gpt-*']}]",
     ["'gpt-*' (partly)"]),
    ("keys: [{name: k, key: gk-k, tokens_per_minute: 1000}]", []),
    # Prices for them clear it, a "*" catch-all as well.
    ("keys: [{name: k, key: gk-k, budget: {usd: 5}}]\n"
     "prices: {'gemini-9*': {input: 1, output: 2}, 'o1-mini': {input: 1, output: 2}, 'gpt-*': {input: 1, output: 2}}",
     []),
    ("keys: [{name: k, key: gk-k, budget: {usd: 5}}]\nprices: {'*': {input: 1, output: 2}}", []),
])  # fmt: skip
def test_a_budgeted_key_reaching_a_model_without_a_price_is_a_warning(keys: str, unpriced: list[str]) -> None:
    warnings = [w for w in config_warnings(parse_config(UP + REDIS + keys, env={})) if "no price" in w]
    assert len(warnings) == (1 if unpriced else 0), warnings
    for warning in warnings:  # one line naming every route, the key, and what to add
        assert all(route in warning for route in unpriced), warning
        assert ("key 'j'" if "gk-j" in keys else "key 'k'") in warning, warning
        assert "model_not_priced" in warning and "prices:" in warning and '"*"' in warning


def test_a_route_mapped_to_a_priced_model_is_covered_and_star_is_warned() -> None:
    budget = REDIS + "keys: [{name: k, key: gk-k, budget: {usd: 5}}]\n"
    mapped = "upstreams:\n  - {name: a, base_url: 'http://127.0.0.1:9000/v1', api_key: k, models: [fast], " \
             "model_map: {fast: claude-haiku-4-5}}\n"  # fmt: skip
    assert not [w for w in config_warnings(parse_config(mapped + budget, env={})) if "no price" in w]
    star = "upstreams:\n  - {name: a, base_url: 'http://127.0.0.1:9000/v1', api_key: k}\n"
    warnings = [w for w in config_warnings(parse_config(star + budget, env={})) if "no price" in w]
    assert len(warnings) == 1 and "'*' (partly)" in warnings[0], warnings



def test_a_glob_route_whose_model_map_sends_part_of_it_to_priced_models_is_partly_priced() -> None:
    """`xl-*` whose model_map sends xl-sonnet to claude-sonnet-4-5 and xl-4o to gpt-4o was named
    "(none)" (audit), though those two are priced as the models they are sent as; the rest of
    the glob goes as asked, unpriced: still warned, as part priced."""
    up = ("upstreams:\n  - {name: c, base_url: 'http://127.0.0.1:9000/v1', api_key: k, apis: [chat], "
          "models: ['xl-*'], model_map: {xl-sonnet: claude-sonnet-4-5, xl-4o: gpt-4o}}\n")  # fmt: skip
    budget = REDIS + "keys: [{name: k, key: gk-k, budget: {usd: 5}}]\n"
    warnings = [w for w in config_warnings(parse_config(up + budget, env={})) if "no price" in w]
    assert len(warnings) == 1 and "'xl-*' (partly)" in warnings[0], warnings
    unmapped = up.replace("model_map: {xl-sonnet: claude-sonnet-4-5, xl-4o: gpt-4o}", "model_map: {xl-a: xl-b}")
    warnings = [w for w in config_warnings(parse_config(unmapped + budget, env={})) if "no price" in w]
    assert len(warnings) == 1 and "'xl-*' (none)" in warnings[0], warnings


# A pool of keys maps a whole glob to one priced name (audit with the agents on pools and budgeted
# keys): covered, as a literal route was. An entry that takes only part of the glob leaves the rest
# sent as asked, unpriced: still warned.
@pytest.mark.parametrize(("model_map", "warned"), [
    ("{'claude-*': acme-claude}", False),
    ("{'*': acme-claude}", False),
    ("{'claude-opus-*': acme-claude, 'claude-*': acme-claude}", False),
    ("{'claude-opus-*': acme-claude}", True),
    ("{'claude-opus-*': unpriced-thing, 'claude-*': acme-claude}", True),
])  # fmt: skip
def test_a_glob_route_mapped_whole_to_a_priced_model_is_covered(model_map: str, warned: bool) -> None:
    members = "".join(f"  - {{name: a{i}, base_url: 'http://127.0.0.1:9000/v1', api_key: k{i}, apis: [messages], "
                      f"model_map: {model_map}}}\n" for i in (1, 2))  # fmt: skip
    text = (f"upstreams:\n{members}pools: [{{name: claude, models: ['claude-*'], deployments: [a1, a2]}}]\n"
            "prices: {acme-claude: {input: 3, output: 15}}\n" + REDIS + "keys: [{name: cc, key: gk-cc, budget: {usd: 5}}]\n")
    warnings = [w for w in config_warnings(parse_config(text, env={})) if "no price" in w]
    assert bool(warnings) is warned, warnings
    if warned:
        assert "'claude-*' (partly)" in warnings[0]

def test_budgets_kept_in_memory_are_a_warning() -> None:
    budgeted = "keys: [{name: k, key: gk-k, budget: {usd: 5}, models: ['gpt-4o']}]"
    (warning,) = config_warnings(parse_config(UP + budgeted, env={}))
    assert warning.startswith("keys: key 'k' has a budget and state.backend is memory")
    assert "restart" in warning and "state: {backend: redis" in warning
    teams = "keys: [{name: k, key: gk-k, team: t, models: ['gpt-4o']}]\nteams: [{name: t, budget: {usd: 5}}]"
    (warning,) = config_warnings(parse_config(UP + teams, env={}))
    assert warning.startswith("keys: team 't' has a budget and state.backend is memory")
    assert not config_warnings(parse_config(UP + REDIS + budgeted, env={}))
    assert not config_warnings(parse_config(UP + "keys: [{name: k, key: gk-k, requests_per_minute: 5}]", env={}))


# A context_window lowers output budgets before they are sent (pipeline/output_cap.py): the
# shipped default once said 128000 for every model, so gpt-5 (400,000) behind `make run` had
# its max_completion_tokens cut to what 128k left beside the prompt.
@pytest.mark.parametrize("path", ["config/gateway.yaml", "deploy/gateway.container.yaml"])
def test_the_shipped_default_assumes_no_context_window_unless_told(path: str) -> None:
    assert load_config(ROOT / path, env={}).upstreams[0].context_window is None
    assert load_config(ROOT / path, env={"UPSTREAM_CONTEXT_WINDOW": ""}).upstreams[0].context_window is None
    told = load_config(ROOT / path, env={"UPSTREAM_CONTEXT_WINDOW": "32768"})
    assert told.upstreams[0].context_window == 32768


def test_no_shipped_config_gives_openais_models_one_window() -> None:
    import yaml

    # OpenAI's models range from 128k (gpt-4o) to about 1M (gpt-4.1) tokens: any one number cuts some.
    # "Context window: 400,000 / Maximum output tokens: 128,000" (https://vercel.com/ai-gateway/models/gpt-5-fast.md);
    # "Context window: 1,047,576" (https://vercel.com/ai-gateway/models/gpt-4.1-fast.md).
    texts = [p.read_text() for p in sorted((ROOT / "config").rglob("*.yaml"))]
    texts.append(yaml.safe_load((ROOT / "deploy/kubernetes/configmap.yaml").read_text())["data"]["gateway.yaml"])
    for text in texts:
        for up in (yaml.safe_load(text) or {}).get("upstreams", []):
            if "api.openai.com" in str(up.get("base_url")):
                assert "context_window" not in up, up["name"]


def test_an_empty_context_window_or_output_limit_is_unset() -> None:
    text = "upstreams: [{name: a, base_url: 'http://x/v1', context_window: '${W:-}', max_output_tokens: '${M:-}'}]"
    up = parse_config(text, env={}).upstreams[0]
    assert (up.context_window, up.max_output_tokens) == (None, None)
    up = parse_config(text, env={"W": "8192", "M": "1024"}).upstreams[0]
    assert (up.context_window, up.max_output_tokens) == (8192, 1024)


def test_an_unset_key_variable_is_reported_once_and_given_no_default() -> None:
    """``key: "${ALICE_GATEWAY_KEY}"`` unset printed a default to use, which a secret must not
    have, and then "keys[0].key: must be printable ASCII without spaces" about the empty string
    it left: only the first is the problem."""
    text = "keys: [{name: alice, key: '${ALICE_GATEWAY_KEY}'}]\n" + MINIMAL
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert e.value.problems == (
        "keys[0].key: environment variable ALICE_GATEWAY_KEY is not set (it holds a secret, which has no "
        "default: set it in the gateway's environment)",
    )
    with pytest.raises(ConfigError) as e:  # one of a rotated key's values
        parse_config("keys: [{name: alice, key: [gk-alice-old, '${ALICE_NEW}']}]\n" + MINIMAL, env={})
    assert e.value.problems == (
        "keys[0].key[1]: environment variable ALICE_NEW is not set (it holds a secret, which has no "
        "default: set it in the gateway's environment)",
    )


def test_a_key_may_be_given_several_values_to_rotate_it() -> None:
    """Names are unique, so one person could not hold an old and a new key at once: rotating
    cut off running agent sessions, or split the account in two. ``key`` (and ``key_sha256``)
    take a list: every value is the same named key, one spend and one set of limits."""
    new_digest = hashlib.sha256(b"gk-alice-new").hexdigest()
    cfg = parse_config("keys:\n"
                       "  - {name: alice, key: [gk-alice-old, gk-alice-new]}\n"
                       f"  - {{name: bob, key_sha256: ['{'a' * 64}', '{'b' * 64}']}}\n" + MINIMAL, env={})  # fmt: skip
    assert cfg.keys[0].key == ("gk-alice-old", "gk-alice-new") and cfg.keys[1].key_sha256 == ("a" * 64, "b" * 64)
    assert parse_config("keys: [{name: alice, key: gk-alice}]\n" + MINIMAL, env={}).keys[0].key == ("gk-alice",)
    with pytest.raises(ConfigError) as e:
        parse_config(f"keys:\n  - {{name: alice, key: [gk-alice-old, gk-alice-new]}}\n"
                     f"  - {{name: bob, key_sha256: '{new_digest}'}}\n" + MINIMAL, env={})  # fmt: skip
    assert "keys: two keys (in keys: or server.client_keys) are the same key" in e.value.problems
    with pytest.raises(ConfigError) as e:
        parse_config("keys: [{name: alice, key: []}]\n" + MINIMAL, env={})
    assert e.value.problems == ("keys[0].key: must have at least 1 item(s)",)
    with pytest.raises(ConfigError) as e:  # `sha256sum` alone adds "  -"
        parse_config(f"keys: [{{name: alice, key_sha256: ['{'a' * 64}', '{'b' * 64}  -']}}]\n" + MINIMAL, env={})
    assert e.value.problems == ("keys[0].key_sha256: must be a SHA-256 digest: 64 hex digits (sha256sum's "
                                "first field alone)",)


@pytest.mark.parametrize(("url", "said"), [
    ("redis://h:badport/0", "state.url: its port is not a number from 0 to 65535"),
    ("redis://:s3cretpw@h:99999/0", "state.url: its port is not a number from 0 to 65535"),
    *((f"redis://:s3c{c}retpw@h:6379/0", "state.url: its port is not a number from 0 to 65535 (a password "
       "holding # / ? or @ must be percent-encoded)") for c in "#/?"),
    ("redis://:s3cretpw@h:6379/0?socket_timeout=abc",
     "state.url: is not a usable Redis URL: Invalid value for 'socket_timeout' in connection URL."),
])  # fmt: skip
def test_a_redis_url_redis_py_would_refuse_is_a_config_error_without_its_password(url: str, said: str) -> None:
    """Start-up died with redis-py's traceback (ValueError from Redis.from_url)."""
    text = f"upstreams: [{{name: a, base_url: 'http://127.0.0.1:9/v1'}}]\nstate: {{backend: redis, url: '{url}'}}\n"
    with pytest.raises(ConfigError) as e:
        parse_config(text, env={})
    assert said in str(e.value) and "s3cretpw" not in str(e.value)


@pytest.mark.parametrize(("extra", "field"), [
    ("upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', models: ['gpt-4o', 'gpt-[4']}]", "upstreams[0].models"),
    ("upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', model_map: {'gpt-[4': gpt-4o}}]",
     "upstreams[0].model_map"),
    (MINIMAL + "\npools: [{name: p, models: 'gpt-[4', deployments: [a]}]", "pools[0].models"),
    (MINIMAL + "\nkeys: [{name: k, key: gk-0123456789abcdef, models: ['gpt-[4']}]", "keys[0].models"),
    (MINIMAL + "\ntool_outputs: {rules: [{tool: 'mcp__[x'}]}", "tool_outputs.rules[0].tool"),
    (MINIMAL + "\nprices: {'gpt-[4': {input: 1, output: 2}}", "prices"),
])  # fmt: skip
def test_a_glob_with_a_bracket_nothing_closes_is_refused_naming_its_field(extra: str, field: str) -> None:
    """fnmatch reads the ``[`` of ``gpt-[4`` as a literal: the pattern would match no model
    the operator meant, without a word (policy/globs.problem)."""
    with pytest.raises(ConfigError) as e:
        parse_config(extra, env={})
    [line] = str(e.value).splitlines()
    assert line.startswith(f"{field}: ") and "no ']' closes the '['" in line and "write [[] for a literal" in line


def test_workers_on_the_memory_backend_warn_that_pools_conversation_homes_are_each_workers() -> None:
    """Each worker keeps its own pools' homes: a conversation a rate limit moved on one worker
    goes back to its old key on another, away from its prompt cache (audit). The start-up
    warning names it, beside the circuits and resets it already named."""
    (warning,) = [w for w in config_warnings(parse_config(MINIMAL + "\nserver: {workers: 2}", env={}))
                  if w.startswith("server.workers is 2")]  # fmt: skip
    assert "conversation homes" in warning and "prompt cache" in warning
    assert "state: {backend: redis} shares them" in warning
