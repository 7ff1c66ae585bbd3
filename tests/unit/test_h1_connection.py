"""The upstream client's connection: an answer's head as the upstream sent it."""

from __future__ import annotations

import asyncio

from gateway.upstream.h1.connection import Connection


async def test_the_head_keeps_order_repeats_and_bytes_outside_utf8() -> None:
    # The names and values are decoded as each header arrives (not once the head is whole):
    # the multidict holds them in the upstream's order, repeats included, and a byte that is
    # no UTF-8 survives as a surrogate, as aiohttp's client reads it.
    conn = Connection(("http", "upstream", 80), lambda _c: None)
    conn.begin(asyncio.get_running_loop(), head_only=False)
    conn.data_received(b"HTTP/1.1 200 OK\r\nX-A: 1\r\nx-a: 2\r\nX-Name: caf\xe9\r\nContent-Length: 2\r\n\r\nok")
    assert (conn.head_done, conn.status, conn.complete) == (True, 200, True)
    assert list(conn.headers.items()) == [("X-A", "1"), ("x-a", "2"), ("X-Name", "caf\udce9"), ("Content-Length", "2")]
    assert conn.take() == b"ok"


async def test_an_informational_head_is_not_the_answers() -> None:
    conn = Connection(("http", "upstream", 80), lambda _c: None)
    conn.begin(asyncio.get_running_loop(), head_only=False)
    conn.data_received(b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                       b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")  # fmt: skip
    assert (conn.status, list(conn.headers.items())) == (200, [("Content-Length", "0")])
