"""The gateway's own HTTP/1.1 client for upstreams (``server.upstream_client: h1``).

Purpose-built for what the gateway sends: one request head written with its body in one
``write``, answers parsed by llhttp (``httptools``), connections pooled per host. It does
less than aiohttp's client (no cookies, redirects, HTTP/1.0 requests or client-side
tracing: the gateway uses none of them) and costs a fraction of its CPU per request
(``bench/RESULTS.md``). ``tests/conformance/`` holds both clients to one contract.
"""

from __future__ import annotations

import asyncio
import ssl

from gateway.config import TimeoutsConfig
from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure, UpstreamRequest, UpstreamResponse
from gateway.upstream.deadline import Deadline, SharedTimer, shared_timer
from gateway.upstream.h1.codec import TargetCache, request_head
from gateway.upstream.h1.connection import H1Response
from gateway.upstream.h1.pool import Pool
from gateway.upstream.proxy import NO_EGRESS_PROXY, Egress

# Up to this size the body is copied into the head's buffer: one write, one segment.
_JOIN_BELOW = 1 << 16


class H1Sender:
    """Sends upstream requests over pooled HTTP/1.1 connections (at most
    ``max_connections`` in use at once)."""

    def __init__(
        self, timeouts: TimeoutsConfig, max_connections: int, ssl_context: ssl.SSLContext | None = None,
        egress: Egress = NO_EGRESS_PROXY,
    ) -> None:  # fmt: skip
        """``ssl_context``: whom https upstreams are verified against; the system's CAs when None.
        ``egress``: the forward proxies requests go through (none by default)."""
        self._timeouts = timeouts
        self._idle_s = timeouts.idle_s  # read per request: a plain attribute, not the model's (#38)
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._targets = TargetCache(egress=egress)
        self._pool: Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: SharedTimer | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._timer = shared_timer(self._loop)
        connect_s = self._timeouts.connect_s
        self._pool = Pool(self._loop, self._max_connections, connect_s, ssl_context=self._ssl_context)

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse:
        pool, loop = self._pool, self._loop
        assert pool is not None and loop is not None, "H1Sender.start() was not awaited"
        target = self._targets(request.url)
        body = request.body
        length = len(body) if body or request.method != "GET" else None
        head = request_head(request.method, target, request.headers, length)
        deadline = Deadline(loop, self._timer)
        deadline.arm(request.first_byte_timeout_s)  # the pool's queue and the connect included
        response: H1Response | None = None
        try:
            conn = await pool.acquire(target.key, target.proxy)
            conn.begin(loop, head_only=request.method == "HEAD")
            response = H1Response(conn, pool, self._idle_s, deadline)
            transport = conn.transport
            assert transport is not None
            if len(body) < _JOIN_BELOW:
                transport.write(head + body if body else head)
            else:
                transport.write(head)
                transport.write(body)
            request.written = True
            await response.head()
        except asyncio.CancelledError:
            _abandon(response, deadline)
            if deadline.expired():
                raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT, "no response head") from None
            raise
        except BaseException:
            _abandon(response, deadline)
            raise
        if response.status == 407 and target.proxy is not None:
            # A plain http request's proxy refusing it (RFC 9110 §15.5.8): the gateway's egress,
            # not the upstream, answered; relayed, the client took it for its own proxy's.
            _abandon(response, deadline)
            raise UpstreamFailure(TransportError.CONNECT, "the proxy refused the request: 407", "proxy:407")
        deadline.disarm()  # the body's reads re-arm it with idle_s
        return response


def _abandon(response: H1Response | None, deadline: Deadline) -> None:
    """No answer to hand over: the socket goes (it may still carry the unread one)."""
    deadline.close()
    if response is not None:
        response.close()  # unfinished: the socket is dropped, the slot handed on
