"""The only place that talks to upstreams, behind one small seam.

Everything above this package sees the :class:`Sender` protocol (an :class:`UpstreamRequest`
in, an :class:`UpstreamResponse` out, every transport failure an :class:`UpstreamFailure`
naming its :class:`TransportError`), so tests can inject a sender that never opens a
socket, and the HTTP client behind it is a choice (``aiohttp_sender.py``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from gateway.config import GatewayConfig
from gateway.errors import TransportError
from gateway.upstream.proxy import Egress, egress


class UpstreamFailure(Exception):
    """Raised for failures that left us without a usable response (or body)."""

    def __init__(self, kind: TransportError, detail: str = "", evidence: str | None = None) -> None:
        """``evidence``: what the log line's ``evidence`` adds to the kind (a forward proxy's
        refusal: ``proxy:407``); short, and nothing of the request."""
        super().__init__(f"{kind.value}: {detail}" if detail else kind.value)
        self.kind = kind
        self.evidence = evidence


class BadRequestHead(ValueError):
    """A request head the client cannot write as given: a CR, LF or NUL in a header or the
    request line (RFC 9110 §5.5), which would split the head or smuggle what follows. Nothing
    was sent; the request, not the upstream, is at fault (the pipeline answers 400)."""


class BodyTooLarge(Exception):
    """A body longer than the reader would hold whole (``read(limit, whole=True)``)."""


@dataclass(slots=True)  # not frozen: one per attempt, changed only by its sender (``written``)
class UpstreamRequest:
    method: str
    url: str  # already encoded; sent as is
    headers: Mapping[str, str]
    body: bytes
    first_byte_timeout_s: float  # the smaller of timeouts.first_byte_s and what the deadline leaves
    # Set by the sender once the request (head and body) went to a connected upstream: left
    # after that, waiting for the answer, it was read all the same (a key pays its prompt).
    written: bool = False


class UpstreamResponse(Protocol):
    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def read(self, limit: int, *, whole: bool = False) -> bytes:
        """The whole body, at most ``limit`` bytes of it kept (the rest read and dropped), or
        with ``whole`` BodyTooLarge past them (reading stops, the connection is dropped);
        raises UpstreamFailure."""
        ...

    def iter_chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive; raises UpstreamFailure on reset or idle timeout."""
        ...

    def close(self) -> None:
        """Abort the exchange (drops the connection if the body was not read to the end)."""
        ...


class Sender(Protocol):
    async def __call__(self, request: UpstreamRequest) -> UpstreamResponse: ...


class StartableSender(Sender, Protocol):
    """A sender that owns a connection pool: started and closed with the app."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def pool_size(cfg: GatewayConfig) -> int:
    return sum(u.max_connections for u in cfg.upstreams)


def new_sender(cfg: GatewayConfig) -> StartableSender:
    """The HTTP client ``server.upstream_client`` names."""
    if cfg.server.upstream_client == "aiohttp":
        from gateway.upstream.aiohttp_sender import AiohttpSender

        return AiohttpSender(cfg.timeouts, pool_size(cfg), egress=egress_of(cfg))
    from gateway.upstream.h1 import H1Sender

    return H1Sender(cfg.timeouts, pool_size(cfg), egress=egress_of(cfg))


def egress_of(cfg: GatewayConfig) -> Egress:
    """The proxies ``server.upstream_proxy`` names, read from the environment now (as at start-up
    and on each reload that builds a new client)."""
    return egress(cfg.server.upstream_proxy, os.environ)
