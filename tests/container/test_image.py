"""One container from the shipped image, checked the way a deployer would: it answers, it
forwards to a provider with the key from its environment, the config mounted over the default
takes effect, no secret is in the image, it runs as non-root, its HEALTHCHECK works, and
SIGTERM (``podman stop``) lets an in-flight stream finish."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.container.conftest import Built, Container, podman, remove, run_container, wait_healthy
from tests.e2e.conftest import free_port
from tests.fakeupstream import FakeUpstream, Stream, stream_events

SECRET = "sk-deploy-test-3f9a1c7e5b2d4068"
CLIENT_KEY = "gw-deploy-test-key-7d1e"


def gateway_config(tmp: Path, port: int, upstream: str, extra: str = "") -> Path:
    path = tmp / "gateway.yaml"
    path.write_text(
        f"server: {{host: 127.0.0.1, port: {port}, drain_s: 20, client_keys: '${{GATEWAY_CLIENT_KEYS}}'}}\n"
        f"upstreams: [{{name: provider, base_url: '{upstream}', api_key: '${{OPENAI_API_KEY}}'}}]\n" + extra
    )
    path.chmod(0o644)  # read by the container's non-root user
    return path


@pytest.fixture(scope="module")
def running(image: Built, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Container, FakeUpstream, float]]:
    with FakeUpstream.in_thread() as fake:
        port = free_port()
        config = gateway_config(tmp_path_factory.mktemp("ctr"), port, fake.url)
        c = run_container(image.image, port, config=config,
                          env={"OPENAI_API_KEY": SECRET, "GATEWAY_CLIENT_KEYS": CLIENT_KEY})  # fmt: skip
        try:
            started_s = wait_healthy(c)
            yield c, fake, started_s
        finally:
            remove(c)


def post(base: str, payload: dict[str, object], key: str = CLIENT_KEY) -> tuple[int, bytes]:
    req = urllib.request.Request(base + "/v1/chat/completions", data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_image_holds_no_secret_and_runs_as_non_root(image: Built, running: tuple[Container, FakeUpstream, float]) -> None:
    c, _, _ = running
    inspected = podman("image", "inspect", image.image).stdout
    assert SECRET not in inspected and CLIENT_KEY not in inspected
    cfg = json.loads(inspected)[0]["Config"]
    assert cfg["User"] == "10001"
    assert not [e for e in cfg.get("Env", []) if "KEY" in e.split("=", 1)[0]]  # secrets come at run time only
    assert podman("exec", c.name, "id", "-u").stdout.strip() == "10001"
    # Nor in the image's files: the config baked in reads every secret from the environment.
    baked = podman("run", "--rm", "--network", "host", "--ulimit", "nofile=4096:4096", "--ulimit",
                   "nproc=4096:4096", "--entrypoint", "cat", image.image, "/etc/llm-gateway/gateway.yaml").stdout
    assert "${OPENAI_API_KEY:-}" in baked and SECRET not in baked


def test_answers_and_forwards_with_the_key_from_its_environment(running: tuple[Container, FakeUpstream, float]) -> None:
    c, fake, _ = running
    status, body = post(c.base, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    sent = fake.requests[-1]
    assert sent.headers["Authorization"] == f"Bearer {SECRET}"  # the provider key, never the client's
    assert post(c.base, {"model": "gpt-4o-mini", "messages": []}, key="wrong")[0] == 401
    deadline, logs = time.monotonic() + 10, ""
    while '"logger":"gateway.access"' not in logs and time.monotonic() < deadline:
        time.sleep(0.1)  # access lines are written out in batches by a thread
        logs = c.logs()
    assert '"status":200' in logs and '"status":401' in logs
    assert SECRET not in logs and CLIENT_KEY not in logs


def test_the_mounted_config_replaces_the_default(running: tuple[Container, FakeUpstream, float]) -> None:
    c, _, _ = running
    # The default config listens on 0.0.0.0:8080; ours says 127.0.0.1 and a free port.
    assert c.base.endswith(str(c.base.rsplit(":", 1)[1])) and ":8080" not in c.base
    with urllib.request.urlopen(c.base + "/readyz", timeout=5) as r:
        assert r.status == 200


def test_the_healthcheck_reports_healthy(running: tuple[Container, FakeUpstream, float]) -> None:
    c, _, _ = running
    r = podman("healthcheck", "run", c.name, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    health = c.state().get("Health") or c.state().get("Healthcheck")
    assert isinstance(health, dict) and health.get("Status") == "healthy"


def test_sigterm_lets_an_in_flight_stream_finish(image: Built, tmp_path: Path) -> None:
    with FakeUpstream.in_thread() as fake:
        port = free_port()
        c = run_container(image.image, port, config=gateway_config(tmp_path, port, fake.url),
                          env={"OPENAI_API_KEY": SECRET, "GATEWAY_CLIENT_KEYS": CLIENT_KEY})  # fmt: skip
        try:
            wait_healthy(c)
            words = tuple(f" w{i}" for i in range(12))
            fake.script(Stream(stream_events(words=words), delay_s=0.25))  # ~3 s of stream
            got: dict[str, object] = {}

            def read() -> None:
                got["status"], got["body"] = post(c.base, {"model": "gpt-4o-mini", "stream": True,
                                                           "messages": [{"role": "user", "content": "count"}]})

            reader = threading.Thread(target=read)
            reader.start()
            deadline = time.monotonic() + 10
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # a few chunks are through: the stream is in flight
            stopped = podman("stop", "-t", "30", c.name, timeout=60)  # SIGTERM, then 30 s before SIGKILL
            reader.join(30)
            assert stopped.returncode == 0
            body = got["body"]
            assert got["status"] == 200 and isinstance(body, bytes)
            assert body.rstrip().endswith(b"data: [DONE]")  # the whole answer, not a cut
            assert all(w.strip().encode() in body for w in words)
            state = c.state()
            assert state["ExitCode"] == 0, c.logs()[-2000:]
        finally:
            remove(c)


def test_size_and_start_up_are_reported(image: Built, running: tuple[Container, FakeUpstream, float]) -> None:
    _, _, started_s = running
    # Figures for docs/operations/deploying.md; printed so `make test-deploy -s` shows them.
    print(f"\nimage: {image.size_bytes / 1e6:.0f} MB, built in {image.seconds:.1f} s; "
          f"start to /healthz 200: {started_s:.2f} s")
    assert image.size_bytes > 0 and started_s > 0


def test_two_workers_in_one_container_serve_count_and_stop_cleanly(image: Built, tmp_path: Path) -> None:
    """server.workers in the image as shipped: the supervisor is the container's PID 1 and
    non-root, so it must find a writable place for the workers' metrics sockets, pass
    `podman stop`'s SIGTERM on, and exit 0 once both workers have drained."""
    with FakeUpstream.in_thread() as fake:
        port = free_port()
        config = gateway_config(tmp_path, port, fake.url).read_text().replace("drain_s: 20,", "drain_s: 20, workers: 2,")
        (tmp_path / "gateway.yaml").write_text(config)
        c = run_container(image.image, port, config=tmp_path / "gateway.yaml",
                          env={"OPENAI_API_KEY": SECRET, "GATEWAY_CLIENT_KEYS": CLIENT_KEY})  # fmt: skip
        try:
            wait_healthy(c)
            deadline = time.monotonic() + 30
            while c.logs().count('"event":"started"') < 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert c.logs().count('"event":"started"') == 2, c.logs()[-2000:]
            statuses = []
            for _ in range(30):  # urllib: a connection per request, spread over both workers
                statuses.append(post(c.base, {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})[0])
            assert statuses == [200] * 30
            with urllib.request.urlopen(c.base + "/metrics", timeout=10) as r:
                text = r.read().decode()
            assert "llm_gateway_workers_reporting 2.0" in text
            total = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                        if line.startswith("llm_gateway_requests_total{"))  # fmt: skip
            assert total == 30
            stopped = podman("stop", "-t", "30", c.name, timeout=60)
            assert stopped.returncode == 0
            assert c.state()["ExitCode"] == 0, c.logs()[-2000:]
            logs = c.logs()
            assert logs.count('"event":"stopped"') == 2 and '"event":"workers_stopped","status":0' in logs
            assert SECRET not in logs and CLIENT_KEY not in logs
        finally:
            remove(c)
