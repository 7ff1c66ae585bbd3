"""The gateway as a user runs it: a subprocess started the way the README says, in
front of the scriptable fake upstream (in a thread), on loopback only."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakeupstream import FakeUpstream
from tests.procs import ROOT, RunningProcess, base_env, free_port, start

__all__ = ["ROOT", "RunningGateway", "base_env", "free_port", "start"]


# The gateway is one of the processes tests/procs.py starts.
RunningGateway = RunningProcess


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture
def upstream(fake: FakeUpstream) -> FakeUpstream:
    fake.steps.clear()
    fake.requests.clear()
    fake.context_limit = None
    fake.output_limit = None
    fake.refused_params = frozenset()
    fake.refusal_style = "openai"
    return fake


def make_run(fake: FakeUpstream, log_dir: Path) -> RunningGateway:
    """`make run`, exactly as README says, pointed at the fake through the shipped config's env."""
    port = free_port()
    env = base_env(GATEWAY_PORT=str(port), UPSTREAM_BASE_URL=fake.url)
    return start(["make", "--no-print-directory", "run"], env, port, log_dir / "gateway.log")


@pytest.fixture(scope="session")
def readme_gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    """`make run`, shared by every test file that asks for it: a test that leaves it remembering
    a failure for a window takes `readme_gateway_alone` instead."""
    gw = make_run(fake, tmp_path_factory.mktemp("gw"))
    yield gw
    gw.stop()


@pytest.fixture
def readme_gateway_alone(fake: FakeUpstream, tmp_path: Path) -> Iterator[RunningGateway]:
    """`make run` for one test, for a test whose request gives up on the upstream: the gateway
    then remembers it for a window (docs/errors/loop-breaker.md: an outage noted on the upstream
    for `circuit_breaker.open_s`, 30 s, in which any model's first failure there is final; a
    429's stated reset pending on its model and key), and on the shared gateway that turned the
    retries of the next test on it, in this file or another, into one attempt."""
    gw = make_run(fake, tmp_path)
    yield gw
    gw.stop()


def launch_cli(fake: FakeUpstream, tmp: Path, extra_yaml: str = "", upstream_yaml: str = "",
               server_yaml: str = "") -> RunningGateway:  # fmt: skip
    """`python -m gateway --config` with short timeouts, for hang/stall/circuit scenarios.
    ``upstream_yaml``: more fields of the one upstream (", continuation: prefix"); ``server_yaml``:
    more fields of ``server`` (", responses_websocket: false")."""
    port = free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 5{server_yaml}}}\n"
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
