"""A real inference server and the gateway in front of it, both as subprocesses on loopback.

The server is llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct and a
1,024-token window, installed by ``scripts/real-deps.sh`` (``make test-real``) into
``.venv-real``; it starts once per session. The gateway starts once per session too, the way
``tests/e2e`` starts it (``python -m gateway --config``), with a config naming that server.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import ROOT, RunningProcess, base_env, free_port, start

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


Proc = RunningProcess


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    if not REAL_PYTHON.exists() or not REAL_MODEL.exists():
        pytest.fail(
            f"{REAL_PYTHON} or {REAL_MODEL} is missing: `make test-real` installs both "
            "(scripts/real-deps.sh)",
            pytrace=False,
        )
    server = start_llama(N_CTX, tmp_path_factory.mktemp("llama"))
    yield server
    server.stop()


def start_llama(n_ctx: int, tmp: Path) -> Proc:
    """The llama-cpp-python chat server on a free port with an ``n_ctx``-token window."""
    port = free_port()
    cmd = [
        str(REAL_PYTHON), "-m", "llama_cpp.server",
        "--model", str(REAL_MODEL), "--model_alias", MODEL,
        "--n_ctx", str(n_ctx), "--host", "127.0.0.1", "--port", str(port),
        "--n_threads", str(min(2, os.cpu_count() or 1)), "--seed", "0",
    ]  # fmt: skip
    return start(cmd, base_env(), port, tmp / "server.log", ready_path="/v1/models", timeout_s=180)


@dataclass
class Gateway(RunningProcess):
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
    p = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log",
              timeout_s=60)  # fmt: skip
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
