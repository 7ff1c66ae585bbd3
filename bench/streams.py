"""Many streams held open at once: the upstream trickles one token every INTERVAL for a
while, and the proxy relays them all. Reports, per proxy: RSS per open stream, CPU per
1,000 relayed chunks, streams that did not end complete (must be 0).

The client is a bare asyncio protocol (no HTTP library): it writes one request per
connection and counts ``data:`` events until the chunked body ends, so thousands of
streams cost it little of the shared machine.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.load import STREAM_BODY


@dataclass
class StreamStats:
    opened: int = 0
    complete: int = 0  # saw [DONE] and the end of the chunked body
    broken: int = 0
    events: int = 0
    errors: list[str] = field(default_factory=list)


class _Stream(asyncio.Protocol):
    def __init__(self, stats: StreamStats, done: asyncio.Future[None]) -> None:
        self.stats, self.done = stats, done
        self.tail = b""
        self.saw_done = False
        self.head_ok: bool | None = None

    def data_received(self, data: bytes) -> None:
        if self.head_ok is None:
            self.head_ok = data.startswith(b"HTTP/1.1 200")
        buf = self.tail + data
        self.stats.events += buf.count(b"data: ")
        self.saw_done = self.saw_done or b"[DONE]" in buf
        if buf.endswith(b"\r\n0\r\n\r\n") or buf.endswith(b"\n0\r\n\r\n"):
            if self.head_ok and self.saw_done:
                self.stats.complete += 1
            else:
                self.stats.broken += 1
            if not self.done.done():
                self.done.set_result(None)
        self.tail = buf[-16:]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.stats.broken += 1
            self.done.set_result(None)


async def hold_streams(port: int, n: int, count: int, interval_s: float,
                       on_all_open: asyncio.Future[None] | None = None) -> StreamStats:
    """Open ``n`` streams (ramped: a burst would overflow the listen backlog) and wait
    until every one has ended."""
    loop = asyncio.get_running_loop()
    stats = StreamStats()
    body = STREAM_BODY.encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"x-bench-trickle: {count},{interval_s}\r\n\r\n"
    ).encode() + body
    waits: list[asyncio.Future[None]] = []
    transports = []
    for i in range(n):
        done: asyncio.Future[None] = loop.create_future()
        try:
            transport, _ = await loop.create_connection(lambda d=done: _Stream(stats, d), "127.0.0.1", port)
        except OSError as e:
            stats.errors.append(type(e).__name__)
            continue
        transport.write(request)
        transports.append(transport)
        waits.append(done)
        stats.opened += 1
        if i % 250 == 249:
            await asyncio.sleep(0.05)
    if on_all_open is not None:
        on_all_open.set_result(None)
    await asyncio.gather(*waits)
    for t in transports:
        t.close()
    return stats


def run(port: int, n: int, count: int, interval_s: float, sample: callable) -> tuple[StreamStats, dict[str, float]]:  # type: ignore[valid-type]
    """Hold the streams; ``sample()`` is called while all are open (after a settle)."""

    async def main() -> tuple[StreamStats, dict[str, float]]:
        opened: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        task = asyncio.create_task(hold_streams(port, n, count, interval_s, opened))
        await opened
        await asyncio.sleep(min(3.0, count * interval_s / 3))
        during = sample()
        stats = await task
        return stats, during

    t0 = time.monotonic()
    stats, during = asyncio.run(main())
    during["wall_s"] = time.monotonic() - t0
    return stats, during
