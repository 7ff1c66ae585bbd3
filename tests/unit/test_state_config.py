"""The state and loop_breaker config sections: defaults, validation, secrets kept out of repr."""

import pytest

from gateway.config import ConfigError, parse_config
from gateway.state import MemoryStore, build_store

ONE = "upstreams: [{name: p, base_url: 'http://127.0.0.1:1/v1'}]\n"


def test_defaults_are_memory_and_a_loop_breaker_that_is_on() -> None:
    cfg = parse_config(ONE, env={})
    assert cfg.state.backend == "memory" and cfg.state.timeout_ms == 50
    assert cfg.loop_breaker.enabled and cfg.loop_breaker.window_s == 10 and cfg.loop_breaker.budget_window_s == 5
    assert isinstance(build_store(cfg), MemoryStore)


@pytest.mark.parametrize(("yaml", "message"), [
    ("state: {backend: redis}", "state: backend redis needs a url"),
    ("state: {backend: redis, url: 'http://x'}", "state.url: must be a redis://"),
    ("state: {backend: etcd}", "state.backend"),
    ("state: {timeout_ms: 0}", "state.timeout_ms"),
    ("loop_breaker: {window: 3}", "loop_breaker.window: unknown key"),
])
def test_bad_state_config_names_the_field(yaml: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(")):
        parse_config(ONE + yaml, env={})


async def test_redis_backend_and_secrets_stay_out_of_repr() -> None:
    text = ONE + "state: {backend: redis, url: '${R}'}\nloop_breaker: {secret: '${S:-}'}\n"
    cfg = parse_config(text, env={"R": "redis://:hunter2@127.0.0.1:1/0"})
    assert cfg.loop_breaker.secret is None  # blank means "draw one per process"
    assert "hunter2" not in repr(cfg)
    store = build_store(cfg)
    assert store.backend == "redis"  # built without connecting
    await store.close()
