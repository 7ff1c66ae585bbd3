"""`python -m bench.held`: what the gateway keeps per in-flight request, by tracemalloc.

The gateway runs in this process (tracemalloc on), the mock (``bench/upstream.py``) and the
client in others, so that only the gateway's own allocations are counted. ``--n`` requests
of about ``--body-kb`` KB go at once, each on its own connection, and the mock holds each
for ``--hold-s``: a snapshot is taken while all are held, compared with one taken idle
(after a warm-up), and the growth is printed per request, by the line that allocated it.

Kinds: ``chat`` (buffered, the client's own API), ``chat-stream`` (a stream held open after
its first token), ``messages`` and ``messages-stream`` (a Messages client on a chat-only
upstream: translated). RSS per request is ``bench.public``'s figure; this one says who holds
what.

    python -m bench.held --kind chat --n 300
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from aiohttp import web

from bench import load
from bench.__main__ import free_port, raise_fd_limit, wait_port
from bench.public import HeldRequest, big_chat_body

PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages"}


def body_for(kind: str, kb: int) -> bytes:
    doc = json.loads(big_chat_body(kb))
    if kind.startswith("messages"):
        doc = {"model": doc["model"], "max_tokens": 256, "system": doc["messages"][0]["content"],
               "messages": doc["messages"][1:]}
    if kind.endswith("-stream"):
        doc["stream"] = True
    return json.dumps(doc, separators=(",", ":")).encode()


async def client(port: int, path: str, n: int, body: bytes, headers: str) -> None:
    """Run in its own process: ``n`` requests at once, each on its own connection."""
    loop = asyncio.get_running_loop()
    request = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {load.KEY}\r\nanthropic-version: 2023-06-01\r\nConnection: close\r\n"
               f"{headers}Content-Length: {len(body)}\r\n\r\n").encode() + body
    waits = []
    for i in range(n):
        done: asyncio.Future[bool] = loop.create_future()
        transport, _ = await loop.create_connection(lambda d=done: HeldRequest(d), "127.0.0.1", port)
        transport.write(request)
        waits.append(done)
        if i % 100 == 99:
            await asyncio.sleep(0.02)
    ok = sum(await asyncio.gather(*waits))
    print(json.dumps({"ok": ok, "n": n}), flush=True)


async def _run(cmd: list[str], body: bytes) -> bytes:
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, _ = await proc.communicate(body)
    return out


def _kib(stat: tracemalloc.StatisticDiff) -> float:
    return stat.size_diff / 1024


async def measure(a: argparse.Namespace) -> None:
    from gateway.app import create_app
    from gateway.config import parse_config
    from gateway.server import make_runner

    raise_fd_limit()
    tmp = Path(tempfile.mkdtemp())
    up_port, port = free_port(), free_port()
    # Before serving: nothing waits on this loop yet.
    mock = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-m", "bench.upstream", str(up_port)], cwd=Path(__file__).parents[1],
        stdout=(tmp / "mock.log").open("wb"), stderr=subprocess.STDOUT)
    wait_port(up_port, "/")
    apis = "apis: [chat], " if a.kind.startswith("messages") else ""
    cfg = parse_config(f"server: {{host: 127.0.0.1, port: {port}, log_level: warning}}\n"
                       f"upstreams: [{{name: bench, base_url: 'http://127.0.0.1:{up_port}/v1', {apis}"
                       f"max_connections: 12000}}]\n")
    runner = make_runner(create_app(cfg))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    path = PATHS[a.kind.split("-")[0]]
    body = body_for(a.kind, a.body_kb)
    streamed = a.kind.endswith("-stream")
    # A stream: its first token at once, the next after the hold (held open mid-answer);
    # buffered: the answer after the hold.
    extra = f"x-bench-trickle: 2,{a.hold_s}\r\n" if streamed else f"x-bench-delay-ms: {int(a.hold_s * 1000)}\r\n"
    cmd = [sys.executable, "-m", "bench.held", "--client", str(port), path, str(a.n), extra]
    try:
        warm_extra = "x-bench-trickle: 2,0.01\r\n" if streamed else "x-bench-delay-ms: 10\r\n"
        warm = await _run([*cmd[:-2], "8", warm_extra], body)
        assert b'"ok": 8' in warm, warm
        await asyncio.sleep(0.5)
        gc.collect()
        tracemalloc.start(a.frames)
        idle = tracemalloc.take_snapshot()
        client_run = asyncio.ensure_future(_run(cmd, body))
        t0 = time.monotonic()
        await asyncio.sleep(a.at_s)
        gc.collect()
        held = tracemalloc.take_snapshot()
        out = await client_run
        print(f"{a.kind}: {a.n} requests of {len(body)} bytes, snapshot at {time.monotonic() - t0:.1f}s; "
              f"client: {out.decode().strip()}")
        stats = held.compare_to(idle, "traceback" if a.frames > 1 else "lineno")
        total = sum(s.size_diff for s in stats) / 1024 / a.n
        print(f"growth per request: {total:.1f} KiB")
        for s in stats[: a.top]:
            if abs(_kib(s)) / a.n < 0.5:
                break
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in s.traceback[: a.frames])
            print(f"  {_kib(s) / a.n:8.1f} KiB  {where}")
    finally:
        tracemalloc.stop()
        await runner.cleanup()
        mock.terminate()
        mock.wait(10)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        port, path, n, extra = sys.argv[2:6]
        asyncio.run(client(int(port), path, int(n), sys.stdin.buffer.read(), extra))
        return
    p = argparse.ArgumentParser(prog="python -m bench.held", description=__doc__.split("\n\n")[0])
    p.add_argument("--kind", choices=("chat", "chat-stream", "messages", "messages-stream"), default="chat")
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--body-kb", type=int, default=150)
    p.add_argument("--hold-s", type=float, default=8.0)
    p.add_argument("--at-s", type=float, default=5.0, help="when the snapshot is taken, after the first send")
    p.add_argument("--frames", type=int, default=1)
    p.add_argument("--top", type=int, default=12)
    asyncio.run(measure(p.parse_args()))


if __name__ == "__main__":
    main()
