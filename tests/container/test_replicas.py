"""The replica deployment docs/operations/deploying.md recommends, run for real: two gateway containers and a Redis
container sharing state, and a real Prometheus scraping both with the shipped rules loaded.

A circuit opened through one replica is seen by the other (it refuses without calling the
provider), and an outage (one replica stopped) fires the shipped ``LLMGatewayDown`` alert.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.container.conftest import Built, Container, podman, remove, run_container, wait_healthy
from tests.e2e.conftest import free_port
from tests.fakeupstream import FakeUpstream, Reply

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
SECRET = "lb-secret-shared-by-replicas-0123456789abcdef"


@dataclass
class Deployment:
    a: Container
    b: Container
    redis: str
    fake: FakeUpstream


def replica_config(tmp: Path, name: str, port: int, upstream: str, redis_port: int) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"server: {{host: 127.0.0.1, port: {port}, drain_s: 2}}\n"
        f"upstreams: [{{name: provider, base_url: '{upstream}'}}]\n"
        "retry: {provider_unavailable: {max_retries: 0, base_delay_s: 0.01, max_delay_s: 0.01}}\n"
        "circuit_breaker: {failure_threshold: 2, open_s: 30}\n"
        f"state: {{backend: redis, url: 'redis://127.0.0.1:{redis_port}/0'}}\n"
        "loop_breaker: {secret: '${LOOP_BREAKER_SECRET}'}\n"
    )
    path.chmod(0o644)
    return path


@pytest.fixture(scope="module")
def deployment(image: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("replicas")
    redis_port = free_port()
    redis = f"redis-{redis_port}"
    # compose.yaml's redis service command, on its own port (the containers share the host's network).
    podman("run", "-d", "--name", redis, "--network", "host", "--ulimit", "nofile=4096:4096",
           "--ulimit", "nproc=4096:4096", "docker.io/library/redis:7.4-alpine",
           "redis-server", "--port", str(redis_port), "--save", "", "--appendonly", "yes", "--appendfsync",
           "everysec", "--maxmemory", "256mb", "--maxmemory-policy", "volatile-ttl")  # fmt: skip
    with FakeUpstream.in_thread() as fake:
        pa, pb = free_port(), free_port()
        env = {"LOOP_BREAKER_SECRET": SECRET}
        a = run_container(image.image, pa, env=env, config=replica_config(tmp, "a", pa, fake.url, redis_port))
        b = run_container(image.image, pb, env=env, config=replica_config(tmp, "b", pb, fake.url, redis_port))
        try:
            wait_healthy(a)
            wait_healthy(b)
            yield Deployment(a, b, redis, fake)
        finally:
            remove(a, b)
            podman("rm", "-f", "-t", "0", redis, check=False)


def post(base: str, text: str) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(base + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_a_circuit_opened_through_one_replica_is_seen_by_the_other(deployment: Deployment) -> None:
    d = deployment
    d.fake.script(*[Reply(503, {"error": {"message": "down", "type": "server_error"}})] * 2)
    for i in range(2):  # failure_threshold consecutive failures, different requests
        status, _, _ = post(d.a.base, f"storm {i}")
        assert status == 503
    calls = len(d.fake.requests)
    status, headers, body = post(d.b.base, "a fresh request on the other replica")
    assert status == 503 and json.loads(body)["error"]["code"] == "circuit_open", body
    assert headers.get("x-llm-attempts") == "0" and len(d.fake.requests) == calls  # refused from Redis


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="make test-deploy installs prometheus")
def test_prometheus_scrapes_both_replicas_and_fires_an_alert_on_an_outage(deployment: Deployment,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    d = deployment
    check = subprocess.run(["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    targets = [c.base.removeprefix("http://") for c in (d.a, d.b)]
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{ALERTS}']\n"
        f"scrape_configs: [{{job_name: llm-gateway, static_configs: [{{targets: {json.dumps(targets)}}}]}}]\n"
    )
    proc = subprocess.Popen(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        up = wait_for(lambda: query(api, "sum(up{job='llm-gateway'})"), lambda v: v == 2.0, 60)
        assert up == 2.0  # both replicas scraped
        podman("stop", "-t", "5", d.b.name)  # the outage: one replica gone
        firing = wait_for(lambda: alerts(api), lambda names: "LLMGatewayDown" in names, 150)
        assert "LLMGatewayDown" in firing
    finally:
        proc.terminate()
        proc.wait(10)


def query(api: str, expr: str) -> float | None:
    with urllib.request.urlopen(f"{api}/query?query={urllib.parse.quote(expr)}", timeout=2) as r:
        result = json.loads(r.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def alerts(api: str) -> set[str]:
    with urllib.request.urlopen(f"{api}/alerts", timeout=2) as r:
        found = json.loads(r.read())["data"]["alerts"]
    return {a["labels"]["alertname"] for a in found if a["state"] == "firing"}


def wait_for(read, done, timeout_s: float):  # type: ignore[no-untyped-def]
    deadline, value = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            value = read()
            if done(value):
                return value
        except OSError:
            pass
        time.sleep(1)
    return value
