"""Connections kept open per (scheme, host, port), at most ``limit`` in use at once.

The limit counts connections lent out or being opened, as aiohttp's connector does; a
request over it waits its turn, first come first served, and is handed the slot of the
exchange that ends (so a newcomer never overtakes a waiter). Idle connections are reused
newest first and closed after ``keepalive_s`` unused, or as soon as the server closes them.
"""

from __future__ import annotations

import asyncio
import inspect
import ssl
from collections import deque

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure
from gateway.upstream.h1.connection import Connection
from gateway.upstream.h1.tunnel import open_tunnel
from gateway.upstream.proxy import Proxy

Key = tuple[str, str, int]


class Pool:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, limit: int, connect_s: float, keepalive_s: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:  # fmt: skip
        self._loop = loop
        self._limit = limit
        self._connect_s = connect_s
        self._keepalive_s = keepalive_s
        self._busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle: dict[Key, list[Connection]] = {}
        self._open: set[Connection] = set()
        self._ssl = ssl_context
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False
        # Happy eyeballs (RFC 8305: a host with a broken IPv6 route still connects at once
        # over IPv4) where the loop has it; uvloop's create_connection has no such argument.
        self._happy_eyeballs = "happy_eyeballs_delay" in inspect.signature(loop.create_connection).parameters

    @property
    def in_use(self) -> int:
        return self._busy

    async def acquire(self, key: Key, proxy: Proxy | None = None) -> Connection:
        """A connection to ``key``'s server (through ``proxy``, when one carries it)."""
        if self._closed:
            raise UpstreamFailure(TransportError.CONNECT, "client closed")
        if self._busy < self._limit and not self._waiters:
            self._busy += 1
        else:
            await self._turn()
        try:
            idle = self._idle.get(key)
            if idle:
                now = self._loop.time()
                while idle:
                    conn = idle.pop()
                    if not conn.closed and now - conn.idle_since < self._keepalive_s:
                        return conn
                    conn.abort()
            return await self._connect(key, proxy)
        except BaseException:
            self._hand_on()
            raise

    def release(self, conn: Connection, reusable: bool) -> None:
        if reusable and not self._closed:
            conn.idle_since = self._loop.time()
            self._idle.setdefault(conn.key, []).append(conn)
            if self._sweeper is None:
                self._sweeper = self._loop.call_later(self._keepalive_s / 2, self._sweep)
        else:
            conn.abort()
        self._hand_on()

    def close(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(UpstreamFailure(TransportError.CONNECT, "client closed"))

    async def _turn(self) -> None:
        waiter = self._loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._hand_on()  # handed the slot just as it gave up: pass it on
            raise

    def _hand_on(self) -> None:
        """A slot is free: to the first waiter still waiting, else back to the count."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._busy -= 1

    async def _connect(self, key: Key, proxy: Proxy | None) -> Connection:
        context = self._context() if key[0] == "https" else None
        try:
            async with asyncio.timeout(self._connect_s):  # the proxy's tunnel included
                _, conn = await self._open_socket(key, context, proxy)
        except TimeoutError:
            raise UpstreamFailure(TransportError.CONNECT_TIMEOUT, "TimeoutError") from None
        except OSError as e:  # refused, unreachable, DNS, TLS (SSLError is an OSError)
            raise UpstreamFailure(TransportError.CONNECT, type(e).__name__) from None
        if self._closed:
            conn.abort()
            raise UpstreamFailure(TransportError.CONNECT, "client closed")
        self._open.add(conn)
        return conn

    async def _open_socket(
        self, key: Key, context: ssl.SSLContext | None, proxy: Proxy | None
    ) -> tuple[asyncio.Transport, Connection]:
        _, host, port = key
        hostname = host if context is not None else None

        def factory() -> Connection:
            return Connection(key, self._gone)

        if proxy is not None:
            if context is None:  # plain http: the requests themselves go to the proxy
                return await self._loop.create_connection(factory, proxy.host, proxy.port)
            sock = await open_tunnel(self._loop, proxy, host, port)
            try:
                return await self._loop.create_connection(
                    factory, sock=sock, ssl=context, server_hostname=hostname
                )
            except BaseException:
                sock.close()
                raise
        if self._happy_eyeballs:
            return await self._loop.create_connection(
                factory, host, port, ssl=context, server_hostname=hostname, happy_eyeballs_delay=0.25
            )
        return await self._loop.create_connection(factory, host, port, ssl=context, server_hostname=hostname)

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()  # the system's CAs, as aiohttp uses
        return self._ssl

    def _gone(self, conn: Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    def _sweep(self) -> None:
        self._sweeper = None
        cutoff = self._loop.time() - self._keepalive_s
        for idle in self._idle.values():
            for conn in [c for c in idle if c.idle_since <= cutoff]:
                idle.remove(conn)
                conn.abort()
        if any(self._idle.values()):
            self._sweeper = self._loop.call_later(self._keepalive_s / 2, self._sweep)
