"""A real inference server and the gateway in front of it, both as subprocesses on loopback.

The server is llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct and a
1,024-token window, installed by ``scripts/real-deps.sh`` (``make test-real``) into
``.venv-real``; it starts once per session. The gateway starts once per session too, the way
``tests/e2e`` starts it (``python -m gateway --config``), with a config naming that server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
REAL_PYTHON = Path(os.environ.get("REAL_PYTHON", ROOT / ".venv-real" / "bin" / "python"))
REAL_MODEL = Path(
    os.environ.get("REAL_MODEL", ROOT / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
)
N_CTX = 1024
MODEL = "smollm2"  # the server's alias for the one model it serves


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Proc:
    base: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("OPENAI_API_KEY", None)
    return env


def _start(cmd: list[str], port: int, log_path: Path, ready_path: str, timeout_s: float) -> Proc:
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    p = Proc(f"http://127.0.0.1:{port}", proc, log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{cmd[:3]} exited with {proc.returncode}:\n{p.logs()[-4000:]}")
        try:
            with urllib.request.urlopen(p.base + ready_path, timeout=2) as r:
                if r.status == 200:
                    return p
        except OSError:
            pass
        time.sleep(0.2)
    p.stop()
    raise AssertionError(f"{cmd[:3]} not ready after {timeout_s}s:\n{p.logs()[-4000:]}")


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    if not REAL_PYTHON.exists() or not REAL_MODEL.exists():
        pytest.fail(
            f"{REAL_PYTHON} or {REAL_MODEL} is missing: `make test-real` installs both "
            "(scripts/real-deps.sh)",
            pytrace=False,
        )
    port = free_port()
    cmd = [
        str(REAL_PYTHON), "-m", "llama_cpp.server",
        "--model", str(REAL_MODEL), "--model_alias", MODEL,
        "--n_ctx", str(N_CTX), "--host", "127.0.0.1", "--port", str(port),
        "--n_threads", str(min(2, os.cpu_count() or 1)), "--seed", "0",
    ]  # fmt: skip
    server = _start(cmd, port, tmp_path_factory.mktemp("llama") / "server.log", "/v1/models", 180)
    yield server
    server.stop()


@dataclass
class Gateway(Proc):
    def metric(self, name: str, **labels: str) -> float:
        """The current value of one sample on /metrics (0 when absent)."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return 0.0


@pytest.fixture(scope="session")
def gateway(llama_server: Proc, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw")
    port = free_port()
    config = tmp / "gateway.yaml"
    # Fast retries so a wrongly retried request costs seconds, not minutes; a low breaker
    # threshold so a miscounted error would open the circuit within the tests.
    config.write_text(json.dumps({
        "server": {"port": port, "drain_s": 5},
        "upstreams": [{"name": "llama", "base_url": llama_server.base + "/v1", "context_window": N_CTX}],
        "retry": {
            "provider_unavailable": {"max_retries": 5, "base_delay_s": 0.05, "max_delay_s": 0.2},
            "rate_limit": {"max_retries": 3, "base_delay_s": 0.05, "max_delay_s": 0.2},
            "deadline_s": 240,
        },
        "circuit_breaker": {"failure_threshold": 3, "open_s": 60},
        "timeouts": {"connect_s": 5, "first_byte_s": 120, "idle_s": 60},
    }))  # fmt: skip
    p = _start(
        [sys.executable, "-m", "gateway", "--config", str(config)], port, tmp / "gateway.log", "/readyz", 60
    )
    gw = Gateway(p.base, p.proc, p.log_path)
    yield gw
    gw.stop()


@pytest.fixture(scope="session")
def client(gateway: Gateway) -> Iterator[openai.OpenAI]:
    """The real openai SDK pointed at the gateway; its own retries off, so every attempt
    counted is the gateway's."""
    c = openai.OpenAI(base_url=gateway.base + "/v1", api_key="sk-unused", max_retries=0, timeout=180)
    yield c
    c.close()
