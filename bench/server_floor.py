"""`python -m bench.server_floor`: what the server side of a request costs, before any proxying.

The same one-line JSON answer to the bench's chat request from four servers on uvloop, each
pinned to core 1 with wrk (``-c32``) on core 0, CPU per request from /proc, in interleaved
rounds:

- an aiohttp ``web.Application`` with one route (what the gateway runs on);
- the same, answering with the gateway's ``OneWriteResponse`` (gateway/one_write.py);
- aiohttp's low-level ``web.Server`` (no router, no application);
- a bare ``asyncio.Protocol`` on httptools: parse, answer, nothing else (the floor; it has
  none of what a real server needs: limits, streamed bodies, errors, drain).

The gap between the first and the last bounds what a purpose-built server side could save
per request (issue #38: bench/RESULTS.md). Read the user-space column for that: the bare
server answers faster than one wrk core asks, so its req/s is the load's and its kernel time
per request is lower partly because its reads and writes come in batches.

    python -m bench.server_floor [ROUNDS] [SECONDS]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

from bench import load
from bench.__main__ import free_port, pinned, wait_port

ANSWER = b'{"ok":true}'

SERVER = r'''
import asyncio, sys, uvloop
from aiohttp import web
ANSWER = b'{"ok":true}'
mode, port = sys.argv[1], int(sys.argv[2])
if mode.endswith("-one"):
    from gateway.one_write import OneWriteResponse as Answer
else:
    Answer = web.Response

async def answer(request):
    await request.read()
    return Answer(body=ANSWER, content_type="application/json")

async def main():
    if mode.startswith("application"):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", answer)
        runner = web.AppRunner(app, access_log=None)
    else:
        runner = web.ServerRunner(web.Server(answer), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    await asyncio.Event().wait()

uvloop.run(main())
'''

BARE = r'''
import asyncio, sys, httptools, uvloop
ANSWER = b'{"ok":true}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(ANSWER)

class Bare(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.parser, self.body = transport, httptools.HttpRequestParser(self), []

    def on_body(self, chunk):
        self.body.append(chunk)

    def on_message_complete(self):
        body, self.body = b"".join(self.body), []
        asyncio.get_running_loop().create_task(self.answer(body))

    async def answer(self, body):
        self.transport.write(HEAD + ANSWER)

    def data_received(self, data):
        self.parser.feed_data(data)

async def main():
    await asyncio.get_running_loop().create_server(Bare, "127.0.0.1", int(sys.argv[1]))
    await asyncio.Event().wait()

uvloop.run(main())
'''

TARGETS = {"aiohttp web.Application (one route)": [SERVER, "application"],
           "the same, answered with the gateway's one-write response": [SERVER, "application-one"],
           "aiohttp web.Server (low level)": [SERVER, "server"],
           "asyncio.Protocol on httptools (bare)": [BARE]}


def cpu_split(pid: int) -> tuple[float, float]:
    """A process's user and kernel CPU seconds so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    if not load.have_wrk():
        sys.exit("bench.server_floor needs wrk (Debian: apt-get install wrk)")
    procs: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    try:
        for name, (code, *args) in TARGETS.items():
            port = free_port()
            proc = subprocess.Popen([*pinned(1), sys.executable, "-c", code, *args, str(port)])
            procs[name] = proc, f"http://127.0.0.1:{port}/v1/chat/completions"
            wait_port(port, "/v1/chat/completions")
        cpu: dict[str, list[tuple[float, float, float]]] = {n: [] for n in procs}  # user, kernel, req/s
        for _, url in procs.values():
            load.wrk(url, 32, 1)  # warm-up
        for _ in range(rounds):
            for name, (proc, url) in procs.items():
                u0, k0 = cpu_split(proc.pid)
                r = load.wrk(url, 32, seconds)
                u1, k1 = cpu_split(proc.pid)
                n = max(r["requests"], 1)
                cpu[name].append(((u1 - u0) / n * 1e6, (k1 - k0) / n * 1e6, r["requests"] / seconds))
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(10)
    print(f"One-line JSON answer, uvloop, wrk -c32, server on core 1; median of {rounds} rounds of {seconds}s\n")
    print("| server | CPU per request | of it user space | of it kernel | req/s |\n| --- | ---: | ---: | ---: | ---: |")
    for name, xs in cpu.items():
        total = statistics.median(u + k for u, k, _ in xs)
        user = statistics.median(u for u, _, _ in xs)
        kernel = statistics.median(k for _, k, _ in xs)
        rps = statistics.median(r for _, _, r in xs)
        print(f"| {name} | {total:.1f} µs | {user:.1f} µs | {kernel:.1f} µs | {rps:,.0f} |")


if __name__ == "__main__":
    main()
