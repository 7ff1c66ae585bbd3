"""The only place that talks to upstreams: one pooled aiohttp ClientSession, timeouts,
and aiohttp's exceptions mapped once into :class:`TransportError`.

Everything above this module sees the :class:`Sender` protocol, so tests can inject a
sender that never opens a socket.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from multidict import CIMultiDict

from gateway.config import GatewayConfig, TimeoutsConfig
from gateway.errors import TransportError


class UpstreamFailure(Exception):
    """Raised for failures that left us without a usable response (or body)."""

    def __init__(self, kind: TransportError, detail: str = "") -> None:
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind


@dataclass(slots=True)  # not frozen: one per attempt, never changed (see apis.base.Inbound)
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


class _Deadline:
    """One timer for a whole upstream exchange, in place of an ``asyncio.timeout`` scope
    per await (each of those schedules and cancels its own timer).

    ``arm(s)`` sets the deadline ``s`` from now. The timer is only rescheduled when the new
    deadline is earlier than the one pending; a later one is picked up lazily when the
    pending timer fires and finds it has not expired yet. So re-arming per chunk costs
    a clock read, and waits that never suspend cost nothing. When it expires while armed
    it cancels the task, and :meth:`expired` turns that cancellation into a timeout,
    exactly as ``asyncio.timeout`` does (a cancellation from elsewhere stays one).
    """

    __slots__ = ("_at", "_cancelling", "_fired", "_handle", "_loop", "_task")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # The sender passes its loop: asyncio.get_running_loop() costs a getpid(2) in 3.11.
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._task: asyncio.Task[object] | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._at: float | None = None
        self._fired = False
        self._cancelling = 0

    def arm(self, seconds: float) -> None:
        at = self._loop.time() + seconds
        self._at = at
        self._task = task = asyncio.current_task(self._loop)
        self._cancelling = task.cancelling() if task is not None else 0
        handle = self._handle
        if handle is None or handle.when() > at:
            if handle is not None:
                handle.cancel()
            self._handle = self._loop.call_at(at, self._check)

    def disarm(self) -> None:
        self._at = None  # the pending timer, if any, finds nothing to do

    def _check(self) -> None:
        self._handle = None
        at = self._at
        if at is None or self._task is None:
            return
        if self._loop.time() >= at:
            self._at = None
            self._fired = True
            self._task.cancel()
        else:
            self._handle = self._loop.call_at(at, self._check)

    def expired(self) -> bool:
        """Called on CancelledError: was it ours? Then the task is uncancelled."""
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def close(self) -> None:
        self._at = None
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class _AiohttpResponse:
    __slots__ = ("_deadline", "_idle_s", "_resp")

    def __init__(self, resp: aiohttp.ClientResponse, idle_s: float, deadline: _Deadline) -> None:
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
            deadline = self._deadline
            deadline.arm(self._idle_s)
            try:
                return await content.readany()
            except asyncio.CancelledError:
                if deadline.expired():
                    raise UpstreamFailure(TransportError.IDLE_TIMEOUT, "no data within idle_s") from None
                raise
            finally:
                deadline.disarm()
        except _RESET_ERRORS as e:
            raise UpstreamFailure(TransportError.STREAM_BROKEN, type(e).__name__) from None

    def _finish(self) -> None:
        # A body read to the end can go back to the pool; anything else must not be reused.
        self._deadline.close()
        if self._resp.content.at_eof():
            self._resp.release()
        else:
            self._resp.close()

    async def read(self, limit: int) -> bytes:
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


class AiohttpSender:
    """Sends upstream requests over one shared, bounded connection pool."""

    def __init__(self, timeouts: TimeoutsConfig, max_connections: int) -> None:
        self._timeouts = timeouts
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
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
            request_class=_Request,
            trust_env=False,  # never route through an ambient HTTP(S)_PROXY
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse:
        assert self._session is not None, "AiohttpSender.start() was not awaited"
        deadline = _Deadline(self._loop)
        deadline.arm(request.first_byte_timeout_s)
        try:
            resp = await self._session.request(
                request.method,
                request.url,
                headers=request.headers,
                data=request.body if request.body or request.method != "GET" else None,
                allow_redirects=False,
                compress=None,
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
        except aiohttp.ClientError as e:  # resets, malformed heads, anything else on the wire
            deadline.close()
            raise UpstreamFailure(TransportError.RESET, type(e).__name__) from None
        except BaseException:
            deadline.close()
            raise
        deadline.disarm()  # the body's reads re-arm it with idle_s
        return _AiohttpResponse(resp, self._timeouts.idle_s, deadline)


def pool_size(cfg: GatewayConfig) -> int:
    return sum(u.max_connections for u in cfg.upstreams)
