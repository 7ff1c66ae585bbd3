"""Start-up as an operator meets it: `python -m gateway` refusing, warning and explaining
bad configs in one go, and `make` set-up that survives `make run` + `make test` at once."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_KEY = "sk-operator-5ecret"


def gateway(config: Path, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "--config", str(config)], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_config_problem_on_its_own_line_exit_2_no_traceback(tmp_path: Path) -> None:
    cfg = write(tmp_path, "server: {prot: 1, port: x}\n"
                          "upstreams: [{name: a, base_ulr: 'http://127.0.0.1:9/v1'}]\n")
    r = gateway(cfg)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    assert r.stderr.splitlines() == [
        "llm-gateway: invalid config: server.port: Input should be a valid integer, unable to parse string as an integer",
        "llm-gateway: invalid config: server.prot: unknown key (did you mean 'port'?)",
        "llm-gateway: invalid config: upstreams[0].base_ulr: unknown key (did you mean 'base_url'?)",
        "llm-gateway: invalid config: upstreams[0].base_url: is required",
    ]


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cfg = write(tmp_path, f"server: {{port: {port}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:9/v1'}}]\n")
        r = gateway(cfg)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"llm-gateway: cannot listen on 127.0.0.1:{port}: address already in use"]


def test_a_password_in_base_url_is_refused_without_printing_it(tmp_path: Path) -> None:
    cfg = write(tmp_path, "upstreams: [{name: a, base_url: 'https://user:pw-5ecret@api.example.com/v1'}]\n")
    r = gateway(cfg)
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["llm-gateway: invalid config: upstreams[0].base_url: must not contain "
                                     "credentials (user:password@); put the key in api_key"]
    assert "5ecret" not in r.stdout + r.stderr


def test_refuses_to_serve_the_operators_key_to_the_network(tmp_path: Path) -> None:
    cfg = write(tmp_path, "server: {host: 0.0.0.0, port: 0}\n"
                          "upstreams: [{name: openai, base_url: 'http://127.0.0.1:9/v1', api_key: '${K}'}]\n")
    r = gateway(cfg, env={"K": OPERATOR_KEY})
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith("llm-gateway: refusing to listen on 0.0.0.0:0 without client keys")
    assert OPERATOR_KEY not in r.stdout + r.stderr


def run_until_ready(cfg: Path, port: int) -> tuple[int, str, str]:
    """Start the gateway, wait for /readyz, stop it: (exit code, stdout, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(cfg)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                assert time.monotonic() < deadline, "gateway did not become ready"
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def test_on_loopback_it_starts_with_one_loud_warning_per_risk(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{host: 127.0.0.1, port: {port}, drain_s: 0}}\n"
                          f"upstreams: [{{name: openai, base_url: 'http://127.0.0.1:9', api_key: {OPERATOR_KEY}}}]\n")
    code, out, err = run_until_ready(cfg, port)
    assert code == 0
    lines = err.splitlines()
    assert len(lines) == 2, err
    assert lines[0].startswith("llm-gateway: warning: upstreams[0].base_url has no path")
    assert "did you mean http://127.0.0.1:9/v1?" in lines[0]
    assert lines[1].startswith("llm-gateway: WARNING: no server.client_keys")
    assert OPERATOR_KEY not in out + err
    assert '"client_auth":"off"' in out


def _started(out: str) -> dict[str, object]:
    found = [json.loads(line) for line in out.splitlines() if '"event":"started"' in line]
    assert len(found) == 1, out
    return found[0]


def test_the_started_line_names_the_memory_backend(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")
    code, out, err = run_until_ready(cfg, port)
    assert code == 0 and err == ""
    assert _started(out)["state"] == {"backend": "memory", "shared": "no (this process only)"}


def test_the_started_line_names_what_each_upstream_speaks_and_how_models_map(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', apis: [chat],"
                          " model_map: {'claude-*': qwen}}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0
    [up] = _started(out)["upstreams"]  # type: ignore[misc]
    assert up["apis"] == ["chat"] and up["model_map"] == {"claude-*": "qwen"}


def test_the_started_line_lists_the_pools(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1', api_key: ka},"
                          " {name: b, base_url: 'http://127.0.0.1:9/v1', api_key: kb},"
                          " {name: local, base_url: 'http://127.0.0.1:9/v1'}]\n"
                          "pools: [{name: gpt, models: ['gpt-*'], deployments: [a, b], strategy: headroom,"
                          " fallbacks: [local]}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0
    assert _started(out)["pools"] == [{"name": "gpt", "models": ["gpt-*"], "deployments": ["a", "b"],
                                       "strategy": "headroom", "affinity": True, "fallbacks": ["local"]}]
    assert "ka" not in out.replace("gateway", "")  # keys never, only whether one is set


def test_the_started_line_says_where_apis_left_out_came_from(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: o, base_url: 'https://api.openai.com/v1', models: ['gpt-*']},"
                          " {name: l, base_url: 'http://127.0.0.1:9/v1'},"
                          " {name: c, base_url: 'https://api.anthropic.com/v1', apis: [chat]}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0
    o, local, c = _started(out)["upstreams"]  # type: ignore[misc]
    assert (o["apis"], o["apis_from"]) == (["chat", "responses"], "host api.openai.com")
    assert (local["apis"], local["apis_from"]) == (["chat", "messages", "responses"], "default")
    assert c["apis"] == ["chat"] and "apis_from" not in c  # as configured


def test_the_started_line_names_the_header_each_key_goes_in(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: key, base_url: 'https://api.anthropic.com/v1', api_key: sk-ant-api03-k},"
                          " {name: oauth, base_url: 'https://api.anthropic.com/v1', api_key: sk-ant-oat01-t},"
                          " {name: said, base_url: 'https://api.anthropic.com/v1', api_key: k, key_header: api-key},"
                          " {name: local, base_url: 'http://127.0.0.1:9/v1', api_key: sk-local},"
                          " {name: own, base_url: 'https://api.anthropic.com/v1'}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0
    said = {u["name"]: u["api_key"] for u in _started(out)["upstreams"]}  # type: ignore[attr-defined]
    assert said == {"key": "set (x-api-key)", "oauth": "set (authorization)", "said": "set (api-key)",
                    "local": "set (authorization)", "own": "forwarded-from-client"}
    assert "sk-ant-api03-k" not in out and "sk-ant-oat01-t" not in out


def test_the_started_line_says_whether_tracing_is_on_and_where_to(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0 and _started(out)["tracing"] == "off"
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n"
                          f"tracing: {{enabled: true, endpoint: 'http://u:pw-5ecret@127.0.0.1:{free_port()}', sample_ratio: 0.1}}\n")
    code, out, err = run_until_ready(cfg, port)
    assert code == 0
    tracing = _started(out)["tracing"]
    assert tracing["sample_ratio"] == 0.1 and tracing["endpoint"].startswith("http://127.0.0.1:")  # type: ignore[index]
    assert "5ecret" not in out + err


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (scripts/test-deps.sh)")
def test_the_started_line_says_whether_redis_answered(tmp_path: Path) -> None:
    from tests.integration.test_state_redis import RedisServer

    redis = RedisServer(free_port(), tmp_path)
    secret = "redis-pa55word"
    base = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\nloop_breaker: {secret: shared}\n"
    # Nothing listens on the Redis port yet: the gateway still starts, and says so loudly.
    port = free_port()
    url = f"redis://:{secret}@127.0.0.1:{redis.port}/0"
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n{base}state: {{backend: redis, url: '{url}'}}\n")
    code, out, err = run_until_ready(cfg, port)
    assert code == 0
    (line,) = err.splitlines()
    assert line.startswith("llm-gateway: WARNING: state.backend is redis but Redis did not answer at start-up (")
    assert "within state.timeout_ms=50); serving from this replica's own memory" in line
    state = _started(out)["state"]
    assert state["backend"] == "redis" and str(state["redis"]).startswith("did not answer (")  # type: ignore[index]
    assert secret not in out + err and "127.0.0.1:" + str(redis.port) not in out + err
    redis.start()
    try:
        port = free_port()
        # Patient: the start-up PING is bounded by timeout_ms, 50 ms by default, which a loaded
        # host's new process (connection, PING, a write) missed with Redis up.
        cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n{base}"
                              f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 5000}}\n")
        code, out, err = run_until_ready(cfg, port)
    finally:
        redis.stop()
    assert code == 0 and err == ""
    assert _started(out)["state"] == {"backend": "redis", "redis": "answered"}


def test_redis_without_a_shared_secret_warns_at_start_up(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n"
                          f"state: {{backend: redis, url: 'redis://127.0.0.1:{free_port()}/0'}}\n")
    code, _, err = run_until_ready(cfg, port)
    assert code == 0
    assert err.splitlines()[0].startswith(
        "llm-gateway: warning: state.backend is redis but loop_breaker.secret is not set")


def test_help_describes_the_three_apis() -> None:
    r = subprocess.run([sys.executable, "-m", "gateway", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses", "python -m gateway.fake"):
        assert path in r.stdout
    assert "chat completions." not in r.stdout.splitlines()[2]


def test_the_started_log_never_prints_url_userinfo() -> None:
    from gateway.server import _without_userinfo

    assert _without_userinfo("https://u:pw@h:1/v1") == "https://***@h:1/v1"
    assert _without_userinfo("https://h:1/v1") == "https://h:1/v1"


# A stand-in for python: `-m venv` and `-m pip install` are slow and record what they
# do; a pip run that starts while another is still going writes OVERLAP. `-c` runs the
# real interpreter (the Makefile reads pyproject.toml with it).
FAKE_PYTHON = """#!/bin/sh
log="$FAKE_LOG"
if [ "$1 $2" = "-m venv" ]; then
  echo "venv $3" >> "$log"; sleep 0.3
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && exit 0
fi
if [ "$1 $2 $3" = "-m pip install" ]; then
  mkdir "$FAKE_LOG.busy" 2>/dev/null || echo OVERLAP >> "$log"
  echo "pip $*" >> "$log"; sleep 0.3; rmdir "$FAKE_LOG.busy" 2>/dev/null; exit 0
fi
if [ "$1" = "-c" ]; then exec "$REAL_PYTHON" "$@"; fi
echo "unexpected: $*" >> "$log"; exit 1
"""


@pytest.mark.skipif(shutil.which("flock") is None or shutil.which("make") is None, reason="needs make and flock")
def test_make_run_and_make_test_set_up_the_venv_safely_at_the_same_time(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "calls.log"
    env = {**os.environ, "FAKE_LOG": str(log), "REAL_PYTHON": sys.executable}
    env.pop("MAKEFLAGS", None)
    # `venv` and `venv-dev` are what `make run` and `make test` depend on, without then
    # starting a server or the suite.
    procs = [subprocess.Popen(["make", f"PYTHON={fake}", target], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for target in ("venv", "venv-dev")]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    calls = log.read_text().splitlines()
    assert "OVERLAP" not in calls, calls
    assert [c for c in calls if c.startswith("venv")] == ["venv .venv"], calls
    # The runtime install ran once (whoever waited found it done), the dev extras once,
    # and never as `-e .[dev]`, which would reinstall the gateway under a running `make run`.
    assert sum(c.endswith("install -q -e .") for c in calls) == 1, calls
    assert sum("dev-requirements.txt" in c for c in calls) == 1, calls
    assert "pytest>=8" in (tmp_path / ".venv" / "dev-requirements.txt").read_text().split()
    assert (tmp_path / ".venv" / "bin" / ".runtime").exists() and (tmp_path / ".venv" / "bin" / ".dev").exists()


# The shipped configs and deployments start safely: `make run` works out of the box on
# loopback, anything listening on the network needs client keys (or an explicit opt-out).
def verdict(path: Path, **env: str) -> tuple[str | None, str | None]:
    from gateway.auth import startup_check
    from gateway.config import load_config

    v = startup_check(load_config(path, env=env))
    return v.refusal, v.warning


def test_make_run_config_starts_on_loopback_and_refuses_on_the_network_without_keys() -> None:
    default = ROOT / "config" / "gateway.yaml"
    assert verdict(default) == (None, None)  # pass-through: no operator key to give away
    refusal, warning = verdict(default, OPENAI_API_KEY="sk-x")
    assert refusal is None and warning is not None
    refusal, _ = verdict(default, OPENAI_API_KEY="sk-x", GATEWAY_HOST="0.0.0.0")
    assert refusal is not None
    assert verdict(default, OPENAI_API_KEY="sk-x", GATEWAY_HOST="0.0.0.0", GATEWAY_CLIENT_KEYS="gk-1,gk-2") == (None, None)
    refusal, warning = verdict(default, OPENAI_API_KEY="sk-x", GATEWAY_HOST="0.0.0.0",
                               GATEWAY_ALLOW_UNAUTHENTICATED="true")
    assert refusal is None and warning is not None


def test_container_and_kubernetes_configs_need_client_keys_with_an_operator_key() -> None:
    import yaml

    from gateway.auth import startup_check
    from gateway.config import parse_config

    container = ROOT / "deploy" / "gateway.container.yaml"
    assert verdict(container, OPENAI_API_KEY="sk-x")[0] is not None
    assert verdict(container, OPENAI_API_KEY="sk-x", GATEWAY_CLIENT_KEYS="gk-1") == (None, None)

    k8s = ROOT / "deploy" / "kubernetes"
    configmap = yaml.safe_load((k8s / "configmap.yaml").read_text())["data"]["gateway.yaml"]
    secret_env = yaml.safe_load((k8s / "secret.example.yaml").read_text())["stringData"]
    assert "GATEWAY_CLIENT_KEYS" in secret_env
    assert startup_check(parse_config(configmap, env=secret_env)).refusal is None
    without = {k: v for k, v in secret_env.items() if k != "GATEWAY_CLIENT_KEYS"}
    assert startup_check(parse_config(configmap, env=without)).refusal is not None


def test_compose_publishes_on_loopback_and_passes_client_keys() -> None:
    import yaml

    gw = yaml.safe_load((ROOT / "deploy" / "compose.yaml").read_text())["services"]["gateway"]
    assert gw["ports"] == ["127.0.0.1:8080:8080"]
    assert gw["environment"]["GATEWAY_CLIENT_KEYS"] == "${GATEWAY_CLIENT_KEYS:-}"


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_gateway_runs_on_the_event_loop_it_is_told_uvloop_by_default(tmp_path: Path, loop: str) -> None:
    port = free_port()
    chosen = "" if loop == "uvloop" else ", event_loop: asyncio"
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0{chosen}}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0 and _started(out)["event_loop"] == loop
    assert "busy_poll_us" not in _started(out)  # off unless asked


def test_the_started_line_says_the_loop_busy_polls_when_asked(tmp_path: Path) -> None:
    port = free_port()
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0, busy_poll_us: 300}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")
    code, out, _ = run_until_ready(cfg, port)
    assert code == 0 and _started(out)["busy_poll_us"] == 300


@pytest.mark.parametrize("workers", [1, 2])
def test_the_health_check_asks_where_the_running_gateway_listens(tmp_path: Path, workers: int) -> None:
    """The container's HEALTHCHECK (``python -m gateway.healthcheck CONFIG``) follows the address
    the gateway wrote (``LLM_GATEWAY_ADDRESS_FILE``), not the file: a config it refused on reload
    marked a healthy container unhealthy."""
    port = free_port()
    address = tmp_path / "address"
    env = {**os.environ, "LLM_GATEWAY_ADDRESS_FILE": str(address)}
    cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0, workers: {workers}}}\n"
                          "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--config", str(cfg)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def healthcheck() -> int:
        return subprocess.run([sys.executable, "-m", "gateway.healthcheck", str(cfg)], cwd=ROOT, env=env,
                              capture_output=True, timeout=30).returncode

    try:
        deadline = time.monotonic() + 30
        while healthcheck() != 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the gateway never became healthy"
            time.sleep(0.2)
        assert json.loads(address.read_text())["listen"] == [f"http://127.0.0.1:{port}"]
        cfg.write_text(f"server: {{port: {free_port()}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:9/v1'}}]\n")
        assert healthcheck() == 0  # a port change waits for a restart: the gateway is where it was
        cfg.write_text("server: {port: eighty}\n")
        proc.send_signal(signal.SIGHUP)  # refused: the gateway serves on, unchanged
        assert healthcheck() == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert not address.exists()  # nothing listens there any more
    assert healthcheck() == 1


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (scripts/test-deps.sh)")
def test_a_redis_configuration_that_will_not_heal_is_an_error_saying_so(tmp_path: Path) -> None:
    """A wrong or missing password, a database Redis does not have, rediss:// to a Redis
    without TLS: each read "did not answer (AuthenticationError); local state until it does", as
    if it would pass (audit of Redis). The gateway still starts (as when Redis is down: a
    password changed under running replicas would otherwise take every restarted one down),
    but says what is wrong and that waiting will not heal it."""
    from tests.integration.test_state_redis import RedisServer

    secret = "s3cret-redis-pw"
    redis = RedisServer(free_port(), tmp_path, extra=("--requirepass", secret))
    base = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\nloop_breaker: {secret: shared}\n"
    where = f"127.0.0.1:{redis.port}"
    cases = [
        (f"redis://{where}/0", "AuthenticationError", "Redis refused the credentials in state.url"),
        (f"redis://:wrong-pw@{where}/0", "AuthenticationError", "Redis refused the credentials in state.url"),
        (f"redis://:{secret}@{where}/99", "ResponseError", "Redis has no database 99"),
        (f"rediss://:{secret}@{where}/0", "TimeoutError", "state.url says rediss:// (TLS), but Redis there speaks plain Redis"),
    ]
    redis.start()
    try:
        for url, error, problem in cases:
            port = free_port()
            cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n{base}"
                                  f"state: {{backend: redis, url: '{url}', timeout_ms: 500}}\n")
            code, out, err = run_until_ready(cfg, port)
            assert code == 0, err
            (line,) = err.splitlines()
            assert line.startswith(f"llm-gateway: ERROR: state.backend is redis but Redis cannot be used ({error}): "
                                   + problem), line
            assert "This will not heal by waiting: fix it and restart" in line
            said = str(_started(out)["state"]["redis"])  # type: ignore[index]
            assert said.startswith(f"cannot be used ({error}): {problem}") and said.endswith("local state until fixed")
            assert secret not in out + err and "wrong-pw" not in out + err and where not in out + err
    finally:
        redis.stop()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server (scripts/test-deps.sh)")
def test_a_full_redis_is_said_at_start_up_not_answered(tmp_path: Path) -> None:
    """maxmemory reached under noeviction: a PING is answered, every write refused. Start-up
    said "answered"."""
    from tests.integration.test_state_redis import RedisServer

    redis = RedisServer(free_port(), tmp_path, extra=("--maxmemory", "1", "--maxmemory-policy", "noeviction"))
    redis.start()
    try:
        port = free_port()
        cfg = write(tmp_path, f"server: {{port: {port}, drain_s: 0}}\n"
                              "upstreams: [{name: a, base_url: 'http://127.0.0.1:9/v1'}]\nloop_breaker: {secret: s}\n"
                              f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 500}}\n")
        code, out, err = run_until_ready(cfg, port)
    finally:
        redis.stop()
    assert code == 0
    (line,) = err.splitlines()
    assert line.startswith("llm-gateway: WARNING: state.backend is redis and Redis answered at start-up, but it "
                           "refuses writes (OutOfMemoryError): Redis is full: it reached its maxmemory"), line
    assert str(_started(out)["state"]["redis"]).startswith("answered, refuses writes (OutOfMemoryError)")  # type: ignore[index]
