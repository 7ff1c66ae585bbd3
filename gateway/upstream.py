"""The only place that talks to upstreams: one pooled aiohttp ClientSession, timeouts,
and aiohttp's exceptions mapped once into :class:`TransportError`.

Everything above this module sees the :class:`Sender` protocol, so tests can inject a
sender that never opens a socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from gateway.config import GatewayConfig, TimeoutsConfig
from gateway.errors import TransportError


class UpstreamFailure(Exception):
    """Raised for failures that left us without a usable response (or body)."""

    def __init__(self, kind: TransportError, detail: str = "") -> None:
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    method: str
    url: str  # already encoded; sent as is
    headers: Mapping[str, str]
    body: bytes
    first_byte_timeout_s: float  # the smaller of timeouts.first_byte_s and what the deadline leaves


class UpstreamResponse(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def read(self, limit: int) -> bytes:
        """The whole body (at most ``limit`` bytes kept); raises UpstreamFailure."""
        ...

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; raises UpstreamFailure on reset or idle timeout."""
        ...

    def close(self) -> None:
        """Abort the exchange (drops the connection if the body was not read to the end)."""
        ...


class Sender(Protocol):
    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse: ...


_RESET_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientOSError,
    ConnectionResetError,
    aiohttp.ClientResponseError,  # malformed response head
)


class _AiohttpResponse:
    __slots__ = ("_idle_s", "_resp")

    def __init__(self, resp: aiohttp.ClientResponse, idle_s: float) -> None:
        self._resp = resp
        self._idle_s = idle_s

    @property
    def status(self) -> int:
        return self._resp.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self._resp.headers

    async def _next_chunk(self) -> bytes:
        """The next body bytes (b"" at the end), with our own idle timer: aiohttp's sock_read
        would also cap the wait for the response head, which first_byte_s governs."""
        try:
            async with asyncio.timeout(self._idle_s):
                return await self._resp.content.readany()
        except TimeoutError:
            raise UpstreamFailure(TransportError.IDLE_TIMEOUT, "no data within idle_s") from None
        except _RESET_ERRORS as e:
            raise UpstreamFailure(TransportError.STREAM_BROKEN, type(e).__name__) from None

    def _finish(self) -> None:
        # A body read to the end can go back to the pool; anything else must not be reused.
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()

    async def read(self, limit: int) -> bytes:
        parts: list[bytes] = []
        kept = 0
        try:
            while chunk := await self._next_chunk():
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
        self._resp.close()


class AiohttpSender:
    """Sends upstream requests over one shared, bounded connection pool."""

    def __init__(self, timeouts: TimeoutsConfig, max_connections: int) -> None:
        self._timeouts = timeouts
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=self._max_connections,
            keepalive_timeout=30,
            enable_cleanup_closed=True,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeouts.connect_s),
            auto_decompress=True,  # the client always gets identity bodies; see relay headers
            skip_auto_headers=("User-Agent",),
            trust_env=False,  # never route through an ambient HTTP(S)_PROXY
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse:
        assert self._session is not None, "AiohttpSender.start() was not awaited"
        try:
            async with asyncio.timeout(request.first_byte_timeout_s):
                resp = await self._session.request(
                    request.method,
                    request.url,
                    headers=request.headers,
                    data=request.body if request.body or request.method != "GET" else None,
                    allow_redirects=False,
                    compress=None,
                )
        except TimeoutError:
            raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT, "no response head") from None
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:
            raise UpstreamFailure(TransportError.CONNECT, type(e).__name__) from None
        except aiohttp.ClientError as e:  # resets, malformed heads, anything else on the wire
            raise UpstreamFailure(TransportError.RESET, type(e).__name__) from None
        return _AiohttpResponse(resp, self._timeouts.idle_s)


def pool_size(cfg: GatewayConfig) -> int:
    return sum(u.max_connections for u in cfg.upstreams)
