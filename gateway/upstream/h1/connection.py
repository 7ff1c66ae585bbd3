"""One HTTP/1.1 connection, and the response of the one exchange on it at a time.

The connection is an asyncio protocol whose bytes go to its llhttp parser (``httptools``:
the parser Node.js uses, in C); the parser's callbacks fill in the exchange under way. A
small answer usually arrives whole in one read, so the head, the body and its end are all
known before anyone awaits anything.

Only :class:`H1Response` (what the pipeline holds) refers to the connection, never the other
way round: a response dropped without being read or closed is freed at once and gives its
pool slot back (``__del__``), where a reference from the connection would keep it, and its
slot, for as long as the socket stayed open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, cast

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.errors import TransportError
from gateway.upstream import BodyTooLarge, UpstreamFailure
from gateway.upstream.deadline import Deadline
from gateway.upstream.h1.codec import DecodeError, Decoder, decoder_for

if TYPE_CHECKING:
    from gateway.upstream.h1.pool import Pool

# A body the reader does not keep up with stops the socket being read past this much
# (the upstream then waits on TCP), and reading resumes once the reader has taken it.
HIGH_WATER = 1 << 20
# Far more than any real response head; aiohttp's limit is 8,190 bytes per line.
MAX_HEAD_BYTES = 1 << 16

_EMPTY: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
_NO_BODY_STATUSES = frozenset({204, 304})


class Connection(asyncio.Protocol):
    """A socket to one (scheme, host, port), carrying one exchange after another.

    The exchange's state lives here, reset by :meth:`begin`; failures are data until
    someone reads (a reset after the last byte a reader wanted harms nobody).
    """

    def __init__(self, key: tuple[str, str, int], gone: Callable[[Connection], None]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self._gone = gone
        self._parser = httptools.HttpResponseParser(self)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.busy = False
        self._reset(False)

    def _reset(self, head_only: bool) -> None:
        self._head_only = head_only  # a HEAD request: its answer has no body whatever it says
        self._raw: list[tuple[str, str]] = []
        self._head_bytes = 0
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY
        self.head_done = False
        self._informational = False
        self._decoder: Decoder | None = None
        self.until_close = False  # no length, not chunked: the body ends when the socket does
        self.chunks: list[bytes] = []
        self._queued = 0
        self._paused = False
        self.complete = False
        self._keep_alive = False
        self._after_end = False  # bytes after the end of the answer: the socket is not reused
        self.failure: UpstreamFailure | None = None
        self._waiter: asyncio.Future[None] | None = None

    def begin(self, loop: asyncio.AbstractEventLoop, head_only: bool) -> None:
        """A new exchange on this connection (the last one ended cleanly)."""
        self._loop = loop
        self.busy = True
        self._reset(head_only)

    def end(self) -> bool:
        """The exchange is over; whether the socket can carry another."""
        self.busy = False
        reusable = (
            self.complete and self._keep_alive and self.failure is None
            and not self._after_end and not self.until_close and not self.closed
        )  # fmt: skip
        self.chunks = []
        self._waiter = None
        if reusable and self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return reusable

    # asyncio's protocol callbacks.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport whichever loop made it (uvloop's is no asyncio.Transport subclass).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.abort()  # bytes nobody asked for: what follows on this socket cannot be trusted
            return
        if not self.head_done:
            self._head_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(TransportError.RESET, "unexpected protocol upgrade")
        except httptools.HttpParserError:
            if self.failure is None:  # not a failure a callback already recorded
                kind = TransportError.STREAM_BROKEN if self.head_done else TransportError.RESET
                self._fail(kind, "malformed response" if self.head_done else "malformed response head")
        if not self.head_done and self._head_bytes > MAX_HEAD_BYTES and self.failure is None:
            self._fail(TransportError.RESET, "response head too large")

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost ends the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.busy and not self.complete and self.failure is None:
            if self.head_done and self.until_close:
                self.complete = True  # the socket's end is the body's end
                self._wake()
            elif self.head_done:
                self._fail(TransportError.STREAM_BROKEN, "ServerDisconnectedError")
            else:
                self._fail(TransportError.RESET, "ServerDisconnectedError")
        self._gone(self)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # The parser's callbacks (httptools calls them by name).

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:
            self._after_end = True
            return
        # Decoded as they come, and the multidict made from that list: made from a generator
        # over the raw pairs, a head of five headers cost 28,800 instructions, not 20,200 (#38).
        self._raw.append((name.decode("utf-8", "surrogateescape"), value.decode("utf-8", "surrogateescape")))

    def on_headers_complete(self) -> None:
        if self.complete:
            self._after_end = True
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            # 1xx (100 Continue, 103 Early Hints) come before the answer: not it (RFC 9110 §15.2).
            self._raw = []
            self._informational = True
            return
        self.status = status
        headers = CIMultiDict(self._raw)
        self._raw = []
        try:
            self._decoder = decoder_for(headers.get("Content-Encoding"))
        except DecodeError:
            self._fail(TransportError.RESET, "undecodable Content-Encoding")  # the head is refused
            return
        self.headers = CIMultiDictProxy(headers)
        self.head_done = True
        if self._head_only:
            # llhttp knows 204 and 304 have no body, but not that this one answers a HEAD: the
            # answer ends here, and the next one is read by a fresh parser (this one would
            # take it for the announced body; if anything else follows, it does, and the
            # socket goes).
            self.complete = True
            self._keep_alive = self._parser.should_keep_alive()
            self._parser = httptools.HttpResponseParser(self)
        elif status not in _NO_BODY_STATUSES:
            chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
            self.until_close = not chunked and "Content-Length" not in headers
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.failure is not None:
            return
        if self.complete:
            self._after_end = True
            return
        if self._decoder is not None:
            try:
                body = self._decoder(body)
            except DecodeError:
                self._fail(TransportError.STREAM_BROKEN, "ContentEncodingError")
                return
            if not body:
                return
        self.chunks.append(body)
        self._queued += len(body)
        if self._queued > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.failure is not None:
            return
        if self.complete:
            self._after_end = True
            return
        self.complete = True
        self._keep_alive = self._parser.should_keep_alive()
        self._wake()

    # For the response.

    def _fail(self, kind: TransportError, detail: str) -> None:
        if self.failure is None:
            self.failure = UpstreamFailure(kind, detail)
        self.abort()  # whatever the socket says next is not to be believed
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until the parser has more to say (the head, body bytes, the end or a failure)."""
        assert self._loop is not None
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    def take(self) -> bytes:
        chunks = self.chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._queued = 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data


class H1Response:
    """The answer to one request (the UpstreamResponse protocol): status and headers, then
    the body as it arrives. It holds the connection's pool slot until read to the end,
    closed, or dropped."""

    __slots__ = ("_conn", "_deadline", "_finished", "_idle_s", "_pool", "headers", "status")

    def __init__(self, conn: Connection, pool: Pool, idle_s: float, deadline: Deadline) -> None:
        self._conn = conn
        self._pool = pool
        self._idle_s = idle_s
        self._deadline = deadline
        self._finished = False
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY

    async def head(self) -> None:
        """Until the head is in; raises what broke the exchange before it."""
        conn = self._conn
        while not conn.head_done and conn.failure is None:
            await conn.wait()
        if not conn.head_done:
            assert conn.failure is not None
            raise conn.failure
        # A failure after the head (a body that does not decode, a cut) is the body's: the
        # reader meets it, after whatever arrived before it.
        self.status, self.headers = conn.status, conn.headers

    async def _more(self) -> None:
        await self._deadline.within(
            self._idle_s, self._conn.wait(), TransportError.IDLE_TIMEOUT, "no data within idle_s"
        )

    async def read(self, limit: int, *, whole: bool = False) -> bytes:
        conn = self._conn
        parts: list[bytes] = []
        kept = 0
        try:
            while True:
                if conn.failure is not None:
                    raise conn.failure  # what arrived before it is no answer
                if conn.chunks:
                    chunk = conn.take()
                    if whole and kept + len(chunk) > limit:
                        raise BodyTooLarge(limit)  # unfinished: _finish drops the connection
                    if kept < limit:
                        parts.append(chunk[: limit - kept])
                        kept += len(parts[-1])
                elif conn.complete:
                    break
                else:
                    await self._more()
        finally:
            self._finish()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        try:
            while True:
                if conn.chunks:
                    yield conn.take()  # what arrived before a failure is still the client's
                elif conn.complete:
                    return
                elif conn.failure is not None:
                    raise conn.failure
                else:
                    await self._more()
        finally:
            self._finish()

    def close(self) -> None:
        self._finish()

    def __del__(self) -> None:
        # Dropped unfinished (a path that neither read nor closed it): the slot must not be
        # held for good, or after max_connections of those every request would wait.
        if not self._finished:
            try:
                self._finish()
            except RuntimeError:
                pass  # the loop is already closed (interpreter exit): nothing left to free

    def _finish(self) -> None:
        """The exchange is over: the socket back to the pool if it can carry another."""
        if self._finished:
            return
        self._finished = True
        self._deadline.close()
        conn = self._conn
        self._pool.release(conn, conn.end())
