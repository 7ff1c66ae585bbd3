"""The upstream sender on aiohttp's client: one pooled ClientSession, timeouts, and
aiohttp's exceptions mapped once into :class:`TransportError`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterable, Mapping
from contextvars import ContextVar
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from gateway.config import TimeoutsConfig
from gateway.errors import TransportError
from gateway.upstream import BadRequestHead, BodyTooLarge, UpstreamFailure, UpstreamRequest, UpstreamResponse
from gateway.upstream.deadline import Deadline
from gateway.upstream.proxy import NO_EGRESS_PROXY, Egress

_RESET_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientOSError,
    ConnectionResetError,
    aiohttp.ClientResponseError,  # malformed response head
)


class _AiohttpResponse:
    __slots__ = ("_deadline", "_idle_s", "_resp")

    def __init__(self, resp: aiohttp.ClientResponse, idle_s: float, deadline: Deadline) -> None:
        self._resp = resp
        self._idle_s = idle_s
        self._deadline = deadline

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    async def _next_chunk(self) -> bytes:
        """The next body bytes (b"" at the end), with our own idle timer: aiohttp's sock_read
        would also cap the wait for the response head, which first_byte_s governs."""
        content = self._resp.content
        try:
            chunk = content.read_nowait()  # what has arrived already needs no timer
            if chunk or content.at_eof():
                return chunk
            return await self._deadline.within(
                self._idle_s, content.readany(), TransportError.IDLE_TIMEOUT, "no data within idle_s"
            )
        except _RESET_ERRORS as e:
            raise UpstreamFailure(TransportError.STREAM_BROKEN, type(e).__name__) from None

    def _finish(self) -> None:
        # A body read to the end can go back to the pool; anything else must not be reused.
        self._deadline.close()
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()

    async def read(self, limit: int, *, whole: bool = False) -> bytes:
        parts: list[bytes] = []
        kept = 0
        content = self._resp.content
        try:
            while True:
                # A small body has usually arrived with the head: take it without a coroutine.
                try:
                    chunk = content.read_nowait()
                except _RESET_ERRORS as e:
                    raise UpstreamFailure(TransportError.STREAM_BROKEN, type(e).__name__) from None
                if not chunk and not content.at_eof():
                    chunk = await self._next_chunk()
                if not chunk:
                    break
                if whole and kept + len(chunk) > limit:
                    raise BodyTooLarge(limit)  # unfinished: _finish closes the connection
                if kept < limit:
                    parts.append(chunk[: limit - kept])
                    kept += len(parts[-1])
        finally:
            self._finish()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_chunks(self) -> AsyncIterator[bytes]:
        try:
            while chunk := await self._next_chunk():
                yield chunk
        finally:
            self._finish()

    def close(self) -> None:
        self._deadline.close()
        self._resp.close()


_SKIP_USER_AGENT: CIMultiDict[None] = CIMultiDict({"User-Agent": None})


class _Request(aiohttp.ClientRequest):
    """aiohttp's request, never adding its own User-Agent (the client's, if any, is what the
    upstream sees). ``skip_auto_headers`` would say the same, but rebuilds and copies the
    headers on every request (~7 us); this keeps aiohttp's other defaults as they are."""

    def update_auto_headers(self, skip_auto_headers: Iterable[str] | None) -> None:
        self._skip_auto_headers = _SKIP_USER_AGENT
        headers = self.headers
        for name, value in self.DEFAULT_HEADERS.items():
            if name not in headers:
                headers[name] = value

    async def send(self, conn: aiohttp.connector.Connection) -> aiohttp.ClientResponse:
        response = await super().send(conn)  # the head written, the body too (or being written)
        sending = _SENDING.get()
        if sending is not None:
            sending.written = True
        return response


# The request the running task is sending, for ``_Request.send`` to mark ``written``: the
# session makes its request object itself, from nothing of ours but the request's parts.
_SENDING: ContextVar[UpstreamRequest | None] = ContextVar("upstream_request_sending", default=None)


_DIRECT: tuple[dict[str, Any], str | None] = ({}, None)


class AiohttpSender:
    """Sends upstream requests over one shared, bounded connection pool."""

    def __init__(
        self, timeouts: TimeoutsConfig, max_connections: int, ssl_context: ssl.SSLContext | None = None,
        egress: Egress = NO_EGRESS_PROXY,
    ) -> None:  # fmt: skip
        """``ssl_context``: whom https upstreams are verified against; the system's CAs when None.
        ``egress``: the forward proxies requests go through (none by default)."""
        self._timeouts = timeouts
        self._max_connections = max_connections
        self._ssl_context = ssl_context
        self._egress = egress
        self._proxies: dict[tuple[str, str, int], tuple[dict[str, Any], str | None]] = {}  # by origin: few
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=self._max_connections,
            keepalive_timeout=30,
            enable_cleanup_closed=True,
            ssl=self._ssl_context if self._ssl_context is not None else True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts.connect_s),
            auto_decompress=True,  # the client always gets identity bodies; see relay headers
            request_class=_Request,
            trust_env=False,  # proxies are server.upstream_proxy's (which may say: the environment's)
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _proxy_for(self, url: str) -> tuple[dict[str, Any], str | None]:
        """The proxy arguments of aiohttp's request for ``url`` (none when it goes direct), and
        the Proxy-Authorization a plain http request carries itself: aiohttp sends its
        ``proxy_headers`` on CONNECT only."""
        if not self._egress.proxies:
            return _DIRECT
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname or ""
        origin = (scheme, host, parts.port or (443 if scheme == "https" else 80))
        found = self._proxies.get(origin)
        if found is None:
            proxy = self._egress.proxy_for(*origin)
            found = ({}, None)
            if proxy is not None:
                shown = f"[{proxy.host}]" if ":" in proxy.host else proxy.host
                # aiohttp's sock_connect bounds only the TCP connect to the proxy, not its answer
                # to CONNECT (a slow proxy took first_byte_s, 300 s); ``connect`` bounds both,
                # the wait for a pooled connection included.
                connect_s = self._timeouts.connect_s
                args: dict[str, Any] = {"proxy": f"http://{shown}:{proxy.port}",
                                        "timeout": aiohttp.ClientTimeout(total=None, connect=connect_s,
                                                                         sock_connect=connect_s)}  # fmt: skip
                if proxy.authorization is not None and scheme == "https":
                    args["proxy_headers"] = {"Proxy-Authorization": proxy.authorization}
                found = (args, proxy.authorization if scheme == "http" else None)
            if len(self._proxies) < 1024:
                self._proxies[origin] = found
        return found

    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse:
        assert self._session is not None, "AiohttpSender.start() was not awaited"
        deadline = Deadline(self._loop)
        deadline.arm(request.first_byte_timeout_s)
        proxy_args, proxy_authorization = self._proxy_for(request.url)
        headers = request.headers
        if proxy_authorization is not None:
            headers = {**headers, "Proxy-Authorization": proxy_authorization}
        if any("\x00" in v for v in headers.values()):
            # aiohttp refuses a CR or LF (a ValueError, below) but writes a NUL, which no field
            # value may hold either (RFC 9110 §5.5): refused as the h1 client refuses it.
            deadline.close()
            raise BadRequestHead(_with_nul(headers))
        sending = _SENDING.set(request)
        try:
            resp = await self._session.request(
                request.method,
                URL(request.url, encoded=True),  # sent as given: yarl would re-quote %2F in a query
                headers=headers,
                data=request.body if request.body or request.method != "GET" else None,
                allow_redirects=False,
                compress=None,
                **proxy_args,
            )
        except asyncio.CancelledError:
            deadline.close()
            if deadline.expired():
                raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT, "no response head") from None
            raise
        except aiohttp.ConnectionTimeoutError as e:
            deadline.close()
            raise UpstreamFailure(TransportError.CONNECT_TIMEOUT, type(e).__name__) from None
        except aiohttp.ClientConnectorError as e:
            deadline.close()
            raise UpstreamFailure(TransportError.CONNECT, type(e).__name__) from None
        except aiohttp.ClientHttpProxyError as e:  # the proxy refused the tunnel
            deadline.close()
            detail = f"the proxy refused CONNECT: {e.status}"
            raise UpstreamFailure(TransportError.CONNECT, detail, f"proxy:{e.status}") from None
        except aiohttp.ClientError as e:  # resets, malformed heads, anything else on the wire
            deadline.close()
            raise UpstreamFailure(TransportError.RESET, type(e).__name__) from None
        except ValueError:  # aiohttp's "Newline or carriage return character detected in ... header"
            deadline.close()
            raise BadRequestHead("a header of the request has a line break in it") from None
        except BaseException:
            deadline.close()
            raise
        finally:
            _SENDING.reset(sending)
        if resp.status == 407 and proxy_args:  # the proxy's refusal of a plain http request
            resp.close()
            deadline.close()
            raise UpstreamFailure(TransportError.CONNECT, "the proxy refused the request: 407", "proxy:407")
        deadline.disarm()  # the body's reads re-arm it with idle_s
        return _AiohttpResponse(resp, self._timeouts.idle_s, deadline)


def _with_nul(headers: Mapping[str, str]) -> str:
    name = next((k for k, v in headers.items() if "\x00" in v), "")
    return f"header {name[:64]!r} has a NUL in it"
