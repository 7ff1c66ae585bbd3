"""The image built from deploy/Dockerfile and run with podman, as a deployer would.

`make test-deploy` runs these (scripts/deploy-deps.sh installs podman and makes the base
images from Debian packages: no registry is reachable here). Containers use the host's
network, so the fake upstream, Redis and Prometheus all meet on loopback; the flags every
`podman run` needs on these machines are in ``RUN_FLAGS`` (see shared/CONTAINERS.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = "localhost/llm-gateway:deploy-test"
PODMAN = shutil.which("podman")
# crun refuses this host's cgroup layout; podman's default open-file limit is above the hard
# limit root has here.
GLOBAL = ["--runtime", "runc"]
RUN_FLAGS = ["--network", "host", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
CA = "/etc/ssl/certs/ca-certificates.crt"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.container)


def podman(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    assert PODMAN is not None
    r = subprocess.run([PODMAN, *GLOBAL, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} -> {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


@dataclass
class Built:
    image: str
    seconds: float
    size_bytes: int


@pytest.fixture(scope="session")
def image() -> Iterator[Built]:
    if PODMAN is None:
        pytest.fail("podman is not installed: `make test-deploy` installs it (scripts/deploy-deps.sh)",
                    pytrace=False)  # fmt: skip
    t0 = time.monotonic()
    # The Dockerfile as users have it; the host's CA bundle is mounted for pip only while building.
    podman("build", "--pull=never", "--format", "docker", "--network", "host",
           "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096", "-v", f"{CA}:{CA}:ro",
           "-f", str(ROOT / "deploy" / "Dockerfile"), "-t", IMAGE, str(ROOT), timeout=600)  # fmt: skip
    seconds = time.monotonic() - t0
    size = int(json.loads(podman("image", "inspect", IMAGE).stdout)[0]["Size"])
    yield Built(IMAGE, seconds, size)


@dataclass
class Container:
    name: str
    base: str

    def logs(self) -> str:
        r = podman("logs", self.name, check=False)
        return r.stdout + r.stderr

    def state(self) -> dict[str, object]:
        return dict(json.loads(podman("inspect", self.name).stdout)[0]["State"])


def run_container(image: str, port: int, *, env: dict[str, str] | None = None, config: Path | None = None,
                  extra: list[str] | None = None, name: str | None = None) -> Container:  # fmt: skip
    name = name or f"gw-{uuid.uuid4().hex[:8]}"
    args = ["run", "-d", "--name", name, *RUN_FLAGS]
    for k, v in (env or {}).items():
        args += ["-e", f"{k}={v}"]
    if config is not None:
        args += ["-v", f"{config}:/etc/llm-gateway/gateway.yaml:ro"]
    podman(*args, *(extra or []), image)
    return Container(name, f"http://127.0.0.1:{port}")


def wait_healthy(c: Container, timeout_s: float = 30) -> float:
    """Seconds until /healthz answered 200."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            with urllib.request.urlopen(c.base + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"{c.name} never became healthy:\n{c.logs()[-3000:]}")


def remove(*containers: Container) -> None:
    for c in containers:
        podman("rm", "-f", "-t", "0", c.name, check=False)
