"""The gateway as a user runs it: a subprocess started the way the README says, in
front of the scriptable fake upstream (in a thread), on loopback only."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakeupstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningGateway:
    base: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logs_when(self, ready: Callable[[str], bool], timeout_s: float = 3.0) -> str:
        """The log once ``ready(log)`` holds: lines are written in batches (within 50 ms)."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.logs()
            if ready(text) or time.monotonic() > deadline:
                return text
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                return self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                return self.proc.wait(5)
        return self.proc.returncode


def wait_ready(base: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"gateway exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(base + "/readyz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"gateway not ready after {timeout}s:\n{log_path.read_text()}")


def start(cmd: list[str], env: dict[str, str], port: int, log_path: Path) -> RunningGateway:
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_ready(base, proc, log_path)
    return RunningGateway(base, proc, log_path)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture
def upstream(fake: FakeUpstream) -> FakeUpstream:
    fake.steps.clear()
    fake.requests.clear()
    fake.context_limit = None
    return fake


@pytest.fixture(scope="session")
def readme_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """`make run`, exactly as README says, pointed at the fake through the shipped config's env."""
    port = free_port()
    env = base_env(GATEWAY_PORT=str(port), UPSTREAM_BASE_URL=fake.url)
    gw = start(["make", "--no-print-directory", "run"], env, port,
               tmp_path_factory.mktemp("gw") / "gateway.log")
    yield gw
    gw.stop()


def launch_cli(fake: FakeUpstream, tmp: Path, extra_yaml: str = "", upstream_yaml: str = "") -> RunningGateway:
    """`python -m gateway --config` with short timeouts, for hang/stall/circuit scenarios.
    ``upstream_yaml``: more fields of the one upstream (", continuation: prefix")."""
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 5}}\n"
        f"upstreams: [{{name: primary, base_url: '{fake.url}', context_window: 8000{upstream_yaml}}}]\n"
        "timeouts: {connect_s: 2, first_byte_s: 1, idle_s: 1}\n"
        + extra_yaml
    )
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")


FAST_RETRIES = (
    "retry:\n"
    "  provider_unavailable: {max_retries: 5, base_delay_s: 0.05, max_delay_s: 0.2}\n"
    "  rate_limit: {max_retries: 3, base_delay_s: 0.05, max_delay_s: 0.2}\n"
)


@pytest.fixture(scope="session")
def fast_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    gw = launch_cli(fake, tmp_path_factory.mktemp("fastgw"),
                    FAST_RETRIES + "circuit_breaker: {failure_threshold: 3, open_s: 1}\n")
    yield gw
    gw.stop()


@pytest.fixture
def sdk() -> Iterator[object]:
    """`sdk(gateway, **options)` → an openai.OpenAI client for it, closed after the test."""
    import openai

    made: list[openai.OpenAI] = []

    def make(gw: RunningGateway, api_key: str = "sk-client-key", **kw: object) -> openai.OpenAI:
        c = openai.OpenAI(base_url=gw.base + "/v1", api_key=api_key, **kw)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
