"""A real trace backend for tests/trace: Arize Phoenix (from PyPI, installed into .venv-trace by
scripts/trace-deps.sh), receiving OTLP/HTTP on /v1/traces and answering span queries on its REST
API. The gateway runs as a subprocess configured only by the standard OTEL_* variables, as an
operator would run it; the fake upstream runs in a thread."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.fakeupstream import FakeUpstream
from tests.procs import ROOT, RunningProcess, base_env, free_port, start
from tests.spans import Node

PHOENIX = ROOT / ".venv-trace" / "bin" / "phoenix"


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not PHOENIX.exists():
        pytest.fail("Phoenix is not installed: run `make test-trace` (scripts/trace-deps.sh installs it)")
    work = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = base_env(PHOENIX_WORKING_DIR=str(work), PHOENIX_PORT=str(port), PHOENIX_HOST="127.0.0.1",
                   PHOENIX_GRPC_PORT=str(free_port()), PHOENIX_TELEMETRY_ENABLED="false")
    proc = start([str(PHOENIX), "serve"], env, port, work / "phoenix.log", ready_path="/healthz", timeout_s=300)
    yield proc.base
    proc.stop()


@dataclass
class Traced:
    """The gateway in front of fake upstreams, exporting to Phoenix under its own project."""

    gateway: RunningProcess
    phoenix: str
    project: str

    def spans(self, count: int, timeout_s: float = 30.0) -> list[Node]:
        """The project's spans once ``count`` of them arrived (the exporter batches)."""
        deadline = time.monotonic() + timeout_s
        while True:
            data = _get(f"{self.phoenix}/v1/projects/{self.project}/spans?limit=1000")
            if len(data) >= count or time.monotonic() > deadline:
                return [_node(s) for s in data]
            time.sleep(0.2)


def _get(url: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return list(json.load(r)["data"])
    except urllib.error.HTTPError as e:
        if e.code == 404:  # the project exists once its first span arrived
            return []
        raise


def _node(s: dict[str, Any]) -> Node:
    ctx = s["context"]
    events = [e["name"] for e in s.get("events") or []]
    start_ns = int(datetime.fromisoformat(s["start_time"]).timestamp() * 1e9)
    return Node(s["name"], ctx["span_id"], s.get("parent_id"), ctx["trace_id"], s.get("span_kind", ""),
                dict(s.get("attributes") or {}), events, start_ns)


@pytest.fixture
def traced(phoenix: str, tmp_path: Path):
    made: list[RunningProcess] = []

    def make(upstreams: str, extra: str = "", env: dict[str, str] | None = None) -> Traced:
        project = f"gw-{uuid.uuid4().hex[:12]}"
        port = free_port()
        cfg = tmp_path / f"gateway-{port}.yaml"
        cfg.write_text(f"server: {{port: {port}}}\nupstreams:\n{upstreams}"
                       "timeouts: {connect_s: 2, first_byte_s: 5, idle_s: 2}\nloop_breaker: {enabled: false}\n" + extra)
        otel = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix,
            "OTEL_SERVICE_NAME": "llm-gateway-under-test",
            # Phoenix files spans under this project; one per test keeps their queries apart.
            "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            **(env or {}),
        }
        gw = start([os.fspath(ROOT / ".venv/bin/python"), "-m", "gateway", "--config", str(cfg)],
                   base_env(**otel), port, tmp_path / f"gateway-{port}.log")
        made.append(gw)
        return Traced(gw, phoenix, project)

    yield make
    for gw in made:
        gw.stop()


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f


@pytest.fixture
def backup() -> Iterator[FakeUpstream]:
    with FakeUpstream.in_thread() as f:
        yield f
