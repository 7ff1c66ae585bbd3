"""An upstream that records each request head exactly as it arrived (no HTTP library on its
side) and answers every request with one small JSON document: for tests of what the gateway
puts on the wire, on either upstream client."""

from __future__ import annotations

import asyncio
import contextlib

LISTING = b'{"object": "list", "data": [], "first_id": null, "last_id": null, "has_more": false}'


class Capture:
    """An upstream that records each request line as it came and answers an empty listing."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.heads: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> Capture:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                self.lines.append(head.split(b"\r\n", 1)[0])
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(LISTING), LISTING))  # fmt: skip
                await writer.drain()
        writer.close()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
