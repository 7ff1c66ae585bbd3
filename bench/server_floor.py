"""`python -m bench.server_floor`: what the server side of a request costs, before any proxying.

The same one-line JSON answer to the bench's chat request from six servers on uvloop, each
pinned to core 1 with wrk (``-c32``) on core 0, CPU per request from /proc, in interleaved
rounds:

- an aiohttp ``web.Application`` with one route (what the gateway runs on);
- the same, answering with the gateway's ``OneWriteResponse`` (gateway/one_write.py);
- aiohttp's low-level ``web.Server`` (no router, no application);
- a lean protocol on httptools (keep-alive, pipelining in order, a task per request) that
  still builds aiohttp's ``web.Request`` and answers through aiohttp's response machinery:
  what replacing only aiohttp's ``RequestHandler`` would give, the pipeline unchanged;
- a lean server on httptools with its own request (headers as a ``CIMultiDictProxy``) and its
  own answer head (Date, Server, Content-Length, control characters refused): what a
  purpose-built server side would cost. A sketch: no flow control, no streamed bodies, no
  drain;
- a bare ``asyncio.Protocol`` on httptools: parse, answer, nothing else (the floor; it has
  none of what a real server needs: limits, streamed bodies, errors, drain).

The gap between the first and the last bounds what a purpose-built server side could save
per request (issue #38: bench/RESULTS.md). It bounds, it does not predict: the lean servers
lack what a real connection adds back (a streamed body, a task and context per request, limits,
the idle timer). A full connection handler on httptools built from the lean protocol (branch
``experiment/h1-server``) cost the same as aiohttp's on this bench with a real request's
headers, and more in the gateway (RESULTS.md, ninth pass). Read the user-space column for that: the bare
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

MIDDLE = r'''
import asyncio, collections, sys, time, httptools, uvloop
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import HttpVersion11, RawRequestMessage
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import StreamReader
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL
from gateway.one_write import OneWriteResponse as Answer
ANSWER = b'{"ok":true}'
KEEPALIVE_S = 75.0

async def answer(request):
    await request.read()
    return Answer(body=ANSWER, content_type="application/json")

class Middle(BaseProtocol):
    # aiohttp's request reads these from its protocol

    ssl_context = None
    peername = ("127.0.0.1", 0)
    sockname = ("127.0.0.1", 0)
    def __init__(self):
        super().__init__(asyncio.get_running_loop())
    def connection_made(self, transport):
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.url, self.raw, self.body = b"", [], []
        self.queue, self.task = collections.deque(), None
        self.last = self._loop.time()
    def on_url(self, url):
        self.url += url
    def on_header(self, name, value):
        self.raw.append((name, value))
    def on_body(self, chunk):
        self.body.append(chunk)
    def on_message_complete(self):
        raw = tuple(self.raw)
        headers = CIMultiDictProxy(CIMultiDict((n.decode("latin-1"), v.decode("latin-1")) for n, v in raw))
        url = httptools.parse_url(self.url)
        u = URL.build(path=url.path.decode("latin-1"), query_string=(url.query or b"").decode("latin-1"), encoded=True)
        msg = RawRequestMessage(self.parser.get_method().decode(), self.url.decode("latin-1"), HttpVersion11, headers, raw,
                                not self.parser.should_keep_alive(), None, False, False, u)
        body = b"".join(self.body)
        self.url, self.raw, self.body = b"", [], []
        if self.task is None:
            self.task = self._loop.create_task(self.serve(msg, body))
        else:
            self.queue.append((msg, body))
    async def serve(self, msg, body):
        while True:
            payload = StreamReader(self, 2**16, loop=self._loop)
            if body:
                payload.feed_data(body)
            payload.feed_eof()
            writer = StreamWriter(self, self._loop)
            request = web.Request(msg, payload, self, writer, self.task, self._loop)
            resp = await answer(request)
            await resp.prepare(request)
            await resp.write_eof()
            if msg.should_close:
                self.transport.close(); break
            self.last = self._loop.time()
            if not self.queue:
                break
            msg, body = self.queue.popleft()
        self.task = None
    def data_received(self, data):
        self.parser.feed_data(data)
    def connection_lost(self, exc):
        super().connection_lost(exc)
        if self.task is not None:
            self.task.cancel()

async def main():
    await asyncio.get_running_loop().create_server(Middle, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await asyncio.Event().wait()
uvloop.run(main())
'''

LEAN = r'''
import asyncio, collections, sys, time, httptools, uvloop
from email.utils import formatdate
from multidict import CIMultiDict, CIMultiDictProxy
ANSWER = b'{"ok":true}'
MAX_BODY, KEEPALIVE_S = 1 << 20, 75.0
REASONS = {200: "OK", 400: "Bad Request", 413: "Content Too Large", 500: "Internal Server Error"}
_date = [0, b""]

def http_date():
    now = int(time.time())
    if now != _date[0]:
        _date[0], _date[1] = now, formatdate(now, usegmt=True).encode()
    return _date[1]

def head(status, headers, length):
    lines = [f"HTTP/1.1 {status} {REASONS[status]}\r\n"]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
            raise ValueError("a header with a control character")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1") + b"Content-Length: %d\r\nDate: %s\r\nServer: lean\r\n\r\n" % (length, http_date())

class Request:
    __slots__ = ("method", "path", "query", "headers", "body", "keep_alive")

async def answer(request):
    return 200, [("Content-Type", "application/json")], ANSWER

class Lean(asyncio.Protocol):
    def connection_made(self, transport):
        self.loop = asyncio.get_running_loop()
        self.transport, self.parser = transport, httptools.HttpRequestParser(self)
        self.url, self.raw, self.body, self.size = b"", [], [], 0
        self.queue, self.task = collections.deque(), None
        self.last = self.loop.time()
        self.idle = self.loop.call_at(self.last + KEEPALIVE_S, self.check_idle)

    def on_url(self, url):
        self.url += url

    def on_header(self, name, value):
        self.raw.append((name.decode("latin-1"), value.decode("latin-1")))

    def on_body(self, chunk):
        self.size += len(chunk)
        if self.size > MAX_BODY:
            raise httptools.HttpParserError("body too large")
        self.body.append(chunk)

    def on_message_complete(self):
        r = Request()
        r.method = self.parser.get_method().decode()
        url = httptools.parse_url(self.url)
        r.path = url.path.decode("latin-1")
        r.query = url.query.decode("latin-1") if url.query else ""
        r.headers = CIMultiDictProxy(CIMultiDict(self.raw))
        r.body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        r.keep_alive = self.parser.should_keep_alive()
        self.url, self.raw, self.body, self.size = b"", [], [], 0
        if self.task is None:
            self.task = self.loop.create_task(self.serve(r))
        else:
            self.queue.append(r)  # pipelined: answered in order

    async def serve(self, r):
        while True:
            try:
                status, headers, body = await answer(r)
                data = head(status, headers, len(body)) + body
            except Exception:
                data = head(500, [], 0)
            if self.transport.is_closing():
                break
            self.transport.write(data)
            if not r.keep_alive:
                self.transport.close()
                break
            self.last = self.loop.time()
            if not self.queue:
                break
            r = self.queue.popleft()
        self.task = None

    def data_received(self, data):
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.transport.write(head(400, [], 0))
            self.transport.close()

    def check_idle(self):
        due = self.last + KEEPALIVE_S
        if self.task is None and self.loop.time() >= due:
            self.transport.close()
        else:
            self.idle = self.loop.call_at(max(due, self.loop.time() + 1), self.check_idle)

    def connection_lost(self, exc):
        self.idle.cancel()
        if self.task is not None:
            self.task.cancel()

async def main():
    await asyncio.get_running_loop().create_server(Lean, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    await asyncio.Event().wait()

uvloop.run(main())
'''

TARGETS = {"aiohttp web.Application (one route)": [SERVER, "application"],
           "the same, answered with the gateway's one-write response": [SERVER, "application-one"],
           "aiohttp web.Server (low level)": [SERVER, "server"],
           "a lean protocol on httptools, aiohttp's request and responses (see MIDDLE)": [MIDDLE],
           "a lean server on httptools, its own request and answer (see LEAN)": [LEAN],
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
