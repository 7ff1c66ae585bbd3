"""A buffered answer whose head and body leave in one write, made without aiohttp's response
machinery.

For a ``web.Response`` aiohttp runs, per answer: ``prepare`` → ``_start`` (Content-Length)
→ ``_prepare_headers`` (keep-alive, chunking, Date, Server, Connection) → the app's
``on_response_prepare`` hook → ``_write_headers`` (status line, serialised into a buffer) and
then ``write_eof`` through three classes down to ``StreamWriter``, which joins that buffer
with the body for its one write: about ten coroutines and a dozen multidict operations for a head
that, for the gateway's answers, is always the same shape. :class:`OneWriteResponse` writes
the same bytes itself in the common case and hands every other case to aiohttp unchanged:
HTTP/1.0, ``HEAD`` and ``CONNECT``, 1xx/204/304, a connection to be closed, cookies, compression, a
non-bytes body, an app with ``on_response_prepare`` handlers, or an aiohttp without the
attributes it reads (checked once, at import).

What it keeps from aiohttp: the headers a response gets (Content-Length, Content-Type's
default, Date from aiohttp's per-second cache, Server from the module constant the gateway
sets), added to ``response.headers`` in aiohttp's order; the head made by aiohttp's own
serialiser, so the same bytes and the same ``ValueError`` for a control character (raised
before anything is written); a ``ConnectionResetError`` for a closing transport; the drain
while the client reads slowly. tests/unit/test_one_write.py holds its bytes to aiohttp's for
each case.
"""

from __future__ import annotations

from aiohttp import hdrs, web, web_response
from aiohttp.abc import AbstractStreamWriter
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import HttpVersion11

try:  # aiohttp's own head serialiser: C where its extensions are built, its Python twin elsewhere
    from aiohttp.http_writer import _serialize_headers
except ImportError:  # pragma: no cover - an aiohttp that moved it: every answer through aiohttp
    _serialize_headers = None  # type: ignore[assignment]

_NO_BODY_STATUS = frozenset({204, 304})
_NO_BODY_METHODS = frozenset({hdrs.METH_HEAD, hdrs.METH_CONNECT})  # CONNECT: its 2xx carry none
_ATTRIBUTES = (
    "_eof_sent", "_payload_writer", "_status", "_reason", "_headers", "_cookies",
    "_compression", "_chunked", "_keep_alive", "_body", "_body_length", "_must_be_empty_body",
)  # fmt: skip


def _supported() -> bool:
    """Whether this aiohttp's responses carry every attribute the fast path reads or sets."""
    probe = web.Response(body=b"")
    return _serialize_headers is not None and all(hasattr(probe, name) for name in _ATTRIBUTES)


SUPPORTED = _supported()


class OneWriteResponse(web.Response):
    """A ``web.Response`` that, once prepared, has been written whole (head and body)."""

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self._eof_sent:
            return None
        if self._payload_writer is not None:
            return self._payload_writer
        head = _head(self, request) if SUPPORTED else None
        if head is None:
            return await super().prepare(request)
        body: bytes = self._body  # type: ignore[assignment]  # _head checked its type
        writer = request.writer
        transport = request.transport
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client closed the connection before its answer")
        data = head + body
        transport.write(data)
        writer.output_size += len(data)
        self._must_be_empty_body = False
        self._keep_alive = True
        self._eof_sent = True
        self._body_length = writer.output_size  # what aiohttp's write_eof records
        await writer.drain()  # waits only while the client's socket buffer is full
        return None


def _head(resp: OneWriteResponse, request: web.BaseRequest) -> bytes | None:
    """The response's head as aiohttp would write it, or None where aiohttp must write it."""
    body = resp._body
    status = resp._status
    if (
        type(body) is not bytes
        or request.version != HttpVersion11
        or request.method in _NO_BODY_METHODS
        or status < 200
        or status in _NO_BODY_STATUS
        or resp._keep_alive is False
        or not request.keep_alive
        or resp._cookies
        or resp._compression
        or resp._chunked
    ):
        return None
    match_info = getattr(request, "_match_info", None)
    if match_info is not None:
        for app in match_info.apps:
            if app.on_response_prepare:
                return None  # aiohttp runs the app's handlers between the head and its write
    headers = resp._headers
    if hdrs.CONTENT_LENGTH not in headers:
        headers[hdrs.CONTENT_LENGTH] = str(len(body))
    if body and hdrs.CONTENT_TYPE not in headers:
        headers[hdrs.CONTENT_TYPE] = "application/octet-stream"
    if hdrs.DATE not in headers:
        headers[hdrs.DATE] = rfc822_formatted_time()
    if hdrs.SERVER not in headers:
        headers[hdrs.SERVER] = web_response.SERVER_SOFTWARE  # type: ignore[attr-defined]
    # aiohttp's own serialiser (C): the same bytes, and its ValueError for a control character.
    return _serialize_headers(f"HTTP/1.1 {status} {resp._reason}", headers)
