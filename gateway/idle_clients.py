"""Client connections that send no request are closed: each holds a socket and a file
descriptor, and enough of them (a few hundred under a 1024 descriptor limit) leave nothing for
the clients that do send.

aiohttp closes a connection that waits for a request head past its ``keepalive_timeout``: from
the connection's start, and again from the end of each answer, to the head's last byte (a head
that trickles in counts as waiting). That one number serves two different waits here:
``server.header_timeout_s`` from the connection's start (a real client's head follows its
handshake at once) and ``server.keepalive_s`` between an answer and the next head (load
balancers and SDKs keep connections for their next request). The first is set here, per
connection, on aiohttp's own timer; the second is aiohttp's ``keepalive_timeout`` itself. Both
are read from the running config when a connection opens, so a reload applies to the next
connections. Nothing runs per request. The names used are aiohttp's private ones for that timer
(``_keepalive_handle``, ``_next_keepalive_close_time``, ``_process_keepalive``);
tests/integration/test_idle_clients.py fails if they stop being read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gateway.bad_http import QuietRequestHandler, QuietServer

# (header_timeout_s, keepalive_s, timeouts.idle_s), as the running config has them.
ClientTimeouts = Callable[[], tuple[float, float, float]]


class DeadlineRequestHandler(QuietRequestHandler):
    """aiohttp's connection handler (made quiet, bad_http.py) whose first request head must
    arrive within ``head_s`` of the connection's start, and whose client must take some of
    its answer within ``unread_s`` once its socket is full.

    A client that stops reading a stream (or a peer gone without closing) otherwise held its
    request, and the upstream connection feeding it, for as long as its socket stayed open:
    18 such readers took every connection of an 18-connection pool and every other request
    got 504s. The transport says when its buffer fills (``pause_writing``) and drains
    (``resume_writing``); past ``unread_s`` between the two the connection is aborted, and the
    request ends as any whose client left. Nothing runs while the client keeps up.

    A connection closed with bytes still queued for its client (a relayed stream cut when its
    upstream broke, a handler's failure after its answer began, aiohttp's own close) stays
    open until they are sent: the transport is "closing", and says nothing more of its buffer
    unless it was full. Its client has ``unread_s`` to take some of them, again and again, or
    the connection is aborted: one that never reads otherwise held its socket and descriptor
    for as long as it kept the connection open. The abort is the transport's own (kept from
    ``connection_made``): aiohttp forgets it (``transport = None``) when it closes one."""

    __slots__ = ("_closing_handle", "_head_s", "_socket", "_unread_handle", "_unread_s")

    def __init__(self, manager: web.Server, *, head_s: float, unread_s: float, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._head_s = head_s
        self._unread_s = unread_s
        self._unread_handle: asyncio.TimerHandle | None = None
        self._closing_handle: asyncio.TimerHandle | None = None
        self._socket: asyncio.Transport | None = None

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._unread_handle is None:
            self._unread_handle = self._loop.call_later(self._unread_s, self._unread_too_long)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._stop_unread_timer()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._stop_unread_timer()
        if self._closing_handle is not None:
            self._closing_handle.cancel()
            self._closing_handle = None
        self._socket = None
        super().connection_lost(exc)

    async def start(self) -> None:
        try:
            await super().start()
        finally:
            # The connection's last answer is over and the transport closed (by aiohttp, or by
            # the handler that cut its stream): what is still queued waits on the client.
            self._watch_closing()

    def _stop_unread_timer(self) -> None:
        if self._unread_handle is not None:
            self._unread_handle.cancel()
            self._unread_handle = None

    def _unread_too_long(self) -> None:
        self._unread_handle = None
        if self._socket is not None:
            self._socket.abort()

    def _watch_closing(self, queued_before: int | None = None) -> None:
        """Aborts a closing transport whose client took none of its queued bytes in ``unread_s``."""
        self._closing_handle = None
        transport = self._socket
        if transport is None or not transport.is_closing():
            return
        queued = transport.get_write_buffer_size()
        if queued == 0:
            return  # all sent: the transport ends the connection itself
        if queued_before is not None and queued >= queued_before:
            transport.abort()
            return
        self._closing_handle = self._loop.call_later(self._unread_s, self._watch_closing, queued)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # A stream transport whichever loop made it (uvloop's is no asyncio.Transport subclass).
        self._socket = cast(asyncio.Transport, transport)
        handle = self._keepalive_handle
        if handle is None or self._head_s == self._keepalive_timeout:
            return
        handle.cancel()
        at = self._loop.time() + self._head_s
        self._next_keepalive_close_time = at
        self._keepalive_handle = self._loop.call_at(at, self._process_keepalive)


class DeadlineServer(QuietServer):
    """A quiet ``web.Server`` whose connections get their head and keep-alive time limits from
    ``timeouts`` (None: aiohttp's own ``keepalive_timeout`` for both)."""

    timeouts: ClientTimeouts | None = None

    def __call__(self) -> RequestHandler:
        if self.timeouts is None:
            return super().__call__()
        head_s, keepalive_s, unread_s = self.timeouts()
        options = {**self._kwargs, "keepalive_timeout": keepalive_s}
        return DeadlineRequestHandler(self, loop=self._loop, head_s=head_s, unread_s=unread_s, **options)

    @classmethod
    def with_timeouts(cls, server: web.Server, timeouts: ClientTimeouts | None) -> DeadlineServer:
        made = cls.like(server)
        assert isinstance(made, DeadlineServer)
        made.timeouts = timeouts
        return made
