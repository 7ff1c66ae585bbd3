"""Servers the tests start as real subprocesses on loopback (the gateway, an inference
server): started in their own session, ready when an HTTP path answers 200, stopped with a
signal to the whole group."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningProcess:
    base: str
    proc: subprocess.Popen[bytes]
    log_path: Path

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def logs_when(self, ready: Callable[[str], bool], timeout_s: float = 3.0) -> str:
        """The log once ``ready(log)`` holds: the gateway writes lines in batches (within 50 ms)."""
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


def base_env(**extra: str) -> dict[str, str]:
    """This environment without proxies or an OpenAI key, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.pop("OPENAI_API_KEY", None)
    env.update(extra)
    return env


def start(cmd: list[str], env: dict[str, str], port: int, log_path: Path, *,
          ready_path: str = "/readyz", timeout_s: float = 120, scheme: str = "http") -> RunningProcess:  # fmt: skip
    with log_path.open("wb") as log:  # the child keeps its own descriptor
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    running = RunningProcess(f"{scheme}://127.0.0.1:{port}", proc, log_path)
    # Readiness only: whom the certificate convinces is each test's to check.
    unverified = ssl.create_default_context()
    unverified.check_hostname, unverified.verify_mode = False, ssl.CERT_NONE
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{cmd[:3]} exited with {proc.returncode}:\n{running.logs()[-4000:]}")
        try:
            with urllib.request.urlopen(running.base + ready_path, timeout=2, context=unverified) as r:
                if r.status == 200:
                    return running
        except OSError:
            pass
        time.sleep(0.1)
    running.stop()
    raise AssertionError(f"{cmd[:3]} not ready after {timeout_s}s:\n{running.logs()[-4000:]}")
