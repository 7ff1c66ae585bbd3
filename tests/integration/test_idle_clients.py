"""Client connections that send no request are closed (gateway/idle_clients.py): one that sends
nothing, or its head a byte at a time, within ``server.header_timeout_s``; one kept alive after
an answer within ``server.keepalive_s``. Before, aiohttp held either for an hour, and a few
hundred of them took every file descriptor. A request being answered is never cut by either."""

from __future__ import annotations

import asyncio
import time

from tests.fakeupstream import Reply, chat_completion

HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
LIMITS = "server: {header_timeout_s: 0.5, keepalive_s: 1.5}\n"


async def _closed_after(reader: asyncio.StreamReader, within_s: float = 5.0) -> float:
    """Seconds until the gateway closes the connection (reading whatever it sends first)."""
    started = time.monotonic()
    while await asyncio.wait_for(reader.read(4096), within_s):
        pass
    return time.monotonic() - started


async def _connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = base.removeprefix("http://").split(":")
    return await asyncio.open_connection(host, int(port))


async def test_a_connection_that_sends_nothing_is_closed_after_header_timeout(make_gateway) -> None:
    gw = await make_gateway(LIMITS)
    reader, writer = await _connect(gw.base)
    took = await _closed_after(reader)
    writer.close()
    assert 0.4 < took < 1.5, took


async def test_a_head_sent_a_byte_at_a_time_is_closed_after_header_timeout(make_gateway) -> None:
    gw = await make_gateway(LIMITS)
    reader, writer = await _connect(gw.base)
    started = time.monotonic()

    async def trickle() -> None:
        for i in range(len(HEAD) - 2):  # never the blank line that ends the head
            writer.write(HEAD[i : i + 1])
            await asyncio.sleep(0.05)

    dripping = asyncio.create_task(trickle())
    data = await asyncio.wait_for(reader.read(), 5)
    took = time.monotonic() - started
    dripping.cancel()
    writer.close()
    assert data == b""  # closed, not answered: there is no request to answer
    assert 0.4 < took < 1.5, took


async def test_a_kept_alive_connection_gets_keepalive_s_between_requests(make_gateway) -> None:
    gw = await make_gateway(LIMITS)
    reader, writer = await _connect(gw.base)
    for _ in range(2):  # longer than header_timeout_s apart: the wait after an answer is keepalive_s
        writer.write(HEAD)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200")
        length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(length)
        await asyncio.sleep(0.8)
    took = await _closed_after(reader)
    writer.close()
    assert 0.4 < took < 1.5, took  # 1.5 s after the last answer: 0.8 of them slept above


async def test_an_answer_that_takes_longer_than_either_limit_is_not_cut(make_gateway) -> None:
    gw = await make_gateway("server: {header_timeout_s: 0.2, keepalive_s: 0.3}\n")
    gw.fake.script(Reply(200, chat_completion(), delay_s=0.7))
    status, _, _ = await gw.chat()
    assert status == 200
    assert (await gw.chat())[0] == 200  # and the pooled connection, or a new one, still serves
