"""A real forward proxy for the tests: tinyproxy (Debian's; scripts/test-deps.sh installs it),
on a free loopback port, with Basic credentials, logging each tunnel and request it serves."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.procs import free_port

USER, PASSWORD = "alice", "s3cret-Pa55"


@dataclass
class Tinyproxy:
    port: int
    log: Path

    def url(self, user: str = USER, password: str = PASSWORD) -> str:
        return f"http://{user}:{password}@127.0.0.1:{self.port}"

    def saw(self, what: str) -> int:
        return self.log.read_text(errors="replace").count(what)


@contextmanager
def tinyproxy(tmp: Path) -> Iterator[Tinyproxy]:
    binary = shutil.which("tinyproxy") or "/usr/bin/tinyproxy"
    if not Path(binary).exists():
        raise AssertionError("tinyproxy is not installed: scripts/test-deps.sh installs it (make test runs it)")
    port = free_port()
    log = tmp / "tinyproxy.log"
    conf = tmp / "tinyproxy.conf"
    conf.write_text(f"Port {port}\nListen 127.0.0.1\nTimeout 30\nLogLevel Connect\nMaxClients 64\n"
                    f"BasicAuth {USER} {PASSWORD}\n")  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen([binary, "-d", "-c", str(conf)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"tinyproxy did not start: {log.read_text(errors='replace')[-800:]}") from None
                time.sleep(0.05)
        yield Tinyproxy(port, log)
    finally:
        proc.terminate()
        proc.wait(10)
