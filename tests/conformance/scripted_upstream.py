"""A real HTTP/1.1 upstream on loopback that answers with bytes a test writes itself.

No HTTP library on this side: the test controls framing, resets and timing exactly. The
server records every request as received (raw bytes and parsed) and counts connections, so
a test can assert what a client put on the wire and how it used its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class RawRequest:
    conn_id: int  # 1 for the first connection accepted, 2 for the next, ...
    raw: bytes  # head and body exactly as received
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]  # in order, names as sent
    body: bytes

    def values(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def header(self, name: str) -> str | None:
        got = self.values(name)
        assert len(got) <= 1, f"{name} sent {len(got)} times"
        return got[0] if got else None


class Conn:
    """One accepted connection, as the script sees it."""

    def __init__(self, server: ScriptedServer, conn_id: int,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.id = conn_id
        self.reader = reader
        self.writer = writer

    async def request(self) -> RawRequest | None:
        """The next request on this connection, or None when the client closed it."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as e:
            if not e.partial:
                return None
            raise AssertionError(f"client closed in the middle of a request head: {e.partial!r}") from None
        except (ConnectionResetError, BrokenPipeError):
            return None
        lines = head[:-4].decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
        headers: list[tuple[str, str]] = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name, value.strip(" \t")))
        req = RawRequest(self.id, head, method, target, version, headers, b"")
        if req.values("transfer-encoding"):
            raise AssertionError("these tests send bodies of known length; got a chunked request")
        length = req.header("content-length")
        if length is not None:
            req.body = await self.reader.readexactly(int(length))
            req.raw = head + req.body
        self.server.requests.append(req)
        self.server.request_seen.set()
        return req

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def flush(self) -> None:
        await self.writer.drain()

    async def close(self) -> None:
        """Close after what was sent is flushed (the client sees EOF)."""
        with contextlib.suppress(ConnectionError):
            await self.writer.drain()
        self.writer.close()

    async def hang(self) -> None:
        """Say nothing more, until the test ends."""
        await asyncio.Event().wait()


Script = Callable[[Conn], Awaitable[None]]


@dataclass
class ScriptedServer:
    script: Script
    requests: list[RawRequest] = field(default_factory=list)
    accepted: int = 0
    open_now: int = 0
    max_open: int = 0
    request_seen: asyncio.Event = field(default_factory=asyncio.Event)
    conn_closed: asyncio.Event = field(default_factory=asyncio.Event)  # set as each one ends
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: list[asyncio.StreamWriter] = field(default_factory=list)
    _stopping: bool = False

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.open_now += 1
        self.max_open = max(self.max_open, self.open_now)
        self._writers.append(writer)
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self.script(Conn(self, self.accepted, reader, writer))
            # The script is done with this connection: wait for the client to let go of it,
            # so open_now counts what the client holds, not what the script has finished.
            with contextlib.suppress(ConnectionError):
                while await reader.read(65536):
                    pass
        except asyncio.CancelledError:
            # stop() cancels what is still running; a cancelled connection task would make
            # asyncio log an error from start_server's done-callback (Python 3.11).
            if not self._stopping:
                raise
        finally:
            self.open_now -= 1
            self.conn_closed.set()
            writer.close()
            self._tasks.discard(task)

    async def all_closed(self) -> None:
        """Until the client has let go of every connection."""
        while self.open_now:
            self.conn_closed.clear()
            await self.conn_closed.wait()

    async def stop(self) -> None:
        assert self._server is not None
        self._stopping = True
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for writer in self._writers:
            writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


def response(status: int = 200, body: bytes = b"", headers: Iterable[tuple[str, str]] = (),
             *, reason: str = "OK", version: str = "HTTP/1.1", length: bool = True) -> bytes:
    """A response head (and body) with a Content-Length unless ``length`` is False."""
    lines = [f"{version} {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked_head(status: int = 200, headers: Iterable[tuple[str, str]] = ()) -> bytes:
    return response(status, b"", [*headers, ("Transfer-Encoding", "chunked")], length=False)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def chunked(parts: Iterable[bytes]) -> bytes:
    return b"".join(chunk(p) for p in parts if p) + LAST_CHUNK


def per_request(*actions: Callable[[Conn, RawRequest], Awaitable[bool]],
                then: bytes = response(200, b"ok")) -> Script:
    """A keep-alive script: the n-th request (across all connections) gets the n-th action,
    later ones ``then``. An action returns False when the connection is finished."""

    async def script(conn: Conn) -> None:
        while (req := await conn.request()) is not None:
            n = len(conn.server.requests) - 1
            if n < len(actions):
                if not await actions[n](conn, req):
                    return
            else:
                conn.send(then)
                await conn.flush()

    return script


def reply(data: bytes, *, keep: bool = True) -> Callable[[Conn, RawRequest], Awaitable[bool]]:
    """An action sending ``data``; closes the connection after it unless ``keep``."""

    async def action(conn: Conn, req: RawRequest) -> bool:
        conn.send(data)
        if keep:
            await conn.flush()
        else:
            await conn.close()
        return keep

    return action
