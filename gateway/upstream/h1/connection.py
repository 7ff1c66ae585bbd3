"""One HTTP/1.1 connection, and the response of the one exchange on it at a time.

The connection is an asyncio protocol: bytes from the socket go to the current
exchange's llhttp parser (``httptools``: the parser Node.js uses, in C), whose callbacks
fill in the :class:`H1Response`. A small answer usually arrives whole in one read, so the
head, the body and the end are all known before anyone awaits anything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure
from gateway.upstream.deadline import Deadline
from gateway.upstream.h1.codec import DecodeError, Decoder, decoder_for

if TYPE_CHECKING:
    from gateway.upstream.h1.pool import Pool

# A body the reader does not keep up with stops the socket being read past this much
# (the upstream then waits on TCP), and reading resumes once it is down to the low mark.
HIGH_WATER = 1 << 20
LOW_WATER = 1 << 18
# Far more than any real response head; aiohttp's limit is 8,190 bytes per line.
MAX_HEAD_BYTES = 1 << 16

_EMPTY: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())
# A finished exchange swaps its parser for this one: the parser holds the exchange's bound
# callbacks, so keeping it would leave a reference cycle per request for the cyclic garbage
# collector, whose full passes then stall the loop for milliseconds (seen at p99).
_SPENT = httptools.HttpResponseParser(object())
_NO_BODY_STATUSES = frozenset({204, 304})


class Connection(asyncio.Protocol):
    """A socket to one (scheme, host, port), reused for one exchange after another."""

    def __init__(self, key: tuple[str, str, int], gone: Callable[[Connection], None]) -> None:
        self.key = key
        self.transport: asyncio.Transport | None = None
        self.exchange: H1Response | None = None
        self.closed = False
        self.idle_since = 0.0
        self._gone = gone

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            self.abort()  # bytes nobody asked for: what follows on this socket cannot be trusted
            return
        exchange.feed(data)

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost tells the exchange

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        exchange = self.exchange
        if exchange is not None:
            exchange.lost()
        self._gone(self)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class H1Response:
    """The answer to one request: status and headers once the head is in, then the body.

    The parser calls ``on_*`` as bytes arrive; the reader takes what has queued up. Failures
    are data until someone reads: a reset after the last byte a reader wanted harms nobody.
    """

    def __init__(
        self, conn: Connection, pool: Pool, idle_s: float, deadline: Deadline,
        loop: asyncio.AbstractEventLoop, head_only: bool,
    ) -> None:  # fmt: skip
        self._conn = conn
        self._pool = pool
        self._idle_s = idle_s
        self._deadline = deadline
        self._loop = loop
        self._head_only = head_only  # a HEAD request: its answer has no body whatever it says
        self._parser = httptools.HttpResponseParser(self)
        self._raw: list[tuple[bytes, bytes]] = []
        self._head_bytes = 0
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY
        self.head_done = False
        self._informational = False
        self._decoder: Decoder | None = None
        self._until_close = False  # no length, not chunked: the body ends when the socket does
        self._chunks: list[bytes] = []
        self._queued = 0
        self._paused = False
        self._complete = False
        self._keep_alive = False
        self._after_end = False  # bytes after the end of the answer: the socket is not reused
        self.failure: UpstreamFailure | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._finished = False

    # The parser's callbacks (httptools calls them by name).

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._complete:
            self._after_end = True
            return
        self._raw.append((name, value))

    def on_headers_complete(self) -> None:
        if self._complete:
            self._after_end = True
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:
            # 1xx (100 Continue, 103 Early Hints) come before the answer: not it (RFC 9110 §15.2).
            self._raw = []
            self._informational = True
            return
        self.status = status
        headers = CIMultiDict(
            (n.decode("utf-8", "surrogateescape"), v.decode("utf-8", "surrogateescape")) for n, v in self._raw
        )
        self._raw = []
        self.headers = CIMultiDictProxy(headers)
        self.head_done = True
        try:
            self._decoder = decoder_for(headers.get("Content-Encoding"))
        except DecodeError:
            self._fail(TransportError.RESET, "undecodable Content-Encoding")
            return
        if self._head_only:
            # llhttp knows 204 and 304 have no body, but not that this one answers a HEAD:
            # the answer ends here and the socket, whose parser may still expect a body, goes.
            self._complete = True
        elif status not in _NO_BODY_STATUSES:
            chunked = "chunked" in headers.get("Transfer-Encoding", "").lower()
            self._until_close = not chunked and "Content-Length" not in headers
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.failure is not None:
            return
        if self._complete:
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
        self._chunks.append(body)
        self._queued += len(body)
        if self._queued > HIGH_WATER and not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        if self.failure is not None:
            return
        if self._complete:
            self._after_end = True
            return
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()
        self._wake()

    # Driven by the connection.

    def feed(self, data: bytes) -> None:
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

    def lost(self) -> None:
        if self._complete or self.failure is not None:
            return
        if self.head_done and self._until_close:
            self._complete = True  # the socket's end is the body's end
            self._wake()
        elif self.head_done:
            self._fail(TransportError.STREAM_BROKEN, "ServerDisconnectedError")
        else:
            self._fail(TransportError.RESET, "ServerDisconnectedError")

    def _fail(self, kind: TransportError, detail: str) -> None:
        if self.failure is None:
            self.failure = UpstreamFailure(kind, detail)
        self._conn.abort()  # whatever the socket says next is not to be believed
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until the parser has more to say (the head, body bytes, the end or a failure)."""
        waiter = self._waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None

    # What the pipeline reads (the UpstreamResponse protocol).

    def _take(self) -> bytes:
        chunks = self._chunks
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._queued = 0
        if self._paused and self._conn.transport is not None:
            self._paused = False
            self._conn.transport.resume_reading()
        return data

    async def _more(self) -> None:
        deadline = self._deadline
        deadline.arm(self._idle_s)
        try:
            await self.wait()
        except asyncio.CancelledError:
            if deadline.expired():
                raise UpstreamFailure(TransportError.IDLE_TIMEOUT, "no data within idle_s") from None
            raise
        finally:
            deadline.disarm()

    async def read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        kept = 0
        try:
            while True:
                if self.failure is not None:
                    raise self.failure  # what arrived before it is no answer
                if self._chunks:
                    chunk = self._take()
                    if kept < limit:
                        parts.append(chunk[: limit - kept])
                        kept += len(parts[-1])
                elif self._complete:
                    break
                else:
                    await self._more()
        finally:
            self._finish()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                if self._chunks:
                    yield self._take()
                elif self._complete:
                    return
                elif self.failure is not None:
                    raise self.failure
                else:
                    await self._more()
        finally:
            self._finish()

    def close(self) -> None:
        self._finish()

    def discard(self) -> None:
        """The exchange is abandoned before its head was handed over: the socket goes."""
        if self.failure is None:
            self.failure = UpstreamFailure(TransportError.RESET, "abandoned")
        self._finish()

    def _finish(self) -> None:
        """The exchange is over: the socket back to the pool if it can carry another."""
        if self._finished:
            return
        self._finished = True
        self._deadline.close()
        keep_alive = self._complete and self._keep_alive
        self._parser = _SPENT
        conn = self._conn
        conn.exchange = None
        reusable = (
            keep_alive and self.failure is None
            and not self._after_end and not self._until_close and not conn.closed
        )  # fmt: skip
        if self._paused and reusable and conn.transport is not None:
            conn.transport.resume_reading()
        self._pool.release(conn, reusable)
