"""A CONNECT tunnel through a forward proxy (RFC 9110 §9.3.6): the socket it hands back
carries bytes to the upstream's host, for TLS to be started on it."""

from __future__ import annotations

import asyncio
import socket

from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure
from gateway.upstream.proxy import Proxy

# A proxy's answer to CONNECT is a status line and a few headers; past this, it is no proxy.
MAX_ANSWER_BYTES = 1 << 14


def connect_request(proxy: Proxy, host: str, port: int) -> bytes:
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    lines = [f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n"]
    if proxy.authorization is not None:
        lines.append(f"Proxy-Authorization: {proxy.authorization}\r\n")
    lines.append("\r\n")
    return "".join(lines).encode("ascii", "strict")


def tunnel_status(head: bytes) -> int:
    """The status of a proxy's answer head (``HTTP/1.1 200 Connection established``)."""
    line = head.split(b"\r\n", 1)[0].split(None, 2)
    if len(line) < 2 or not line[0].startswith(b"HTTP/1.") or not line[1].isdigit():
        raise UpstreamFailure(TransportError.CONNECT, "the proxy's answer to CONNECT is not HTTP")
    return int(line[1])


async def open_tunnel(loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int) -> socket.socket:
    """A connected socket through ``proxy`` to ``host:port``. Failures: ``OSError`` (the proxy
    unreachable) or ``UpstreamFailure`` (``connect``: the proxy refused the tunnel, its status
    in the detail: 407 for its credentials, 403 for its rules, 502 when it could not reach
    the host)."""
    sock = await _connected(loop, proxy)
    try:
        await loop.sock_sendall(sock, connect_request(proxy, host, port))
        head = b""
        while b"\r\n\r\n" not in head:
            # A proxy sends nothing of the tunnel before the client's TLS hello: what is read
            # past the head is the body of a refusal, dropped with the socket.
            chunk = await loop.sock_recv(sock, 4096)
            if not chunk:
                raise UpstreamFailure(TransportError.CONNECT, "the proxy closed the connection on CONNECT")
            head += chunk
            if len(head) > MAX_ANSWER_BYTES:
                raise UpstreamFailure(TransportError.CONNECT, "the proxy's answer to CONNECT has no end")
        status = tunnel_status(head)
        if not 200 <= status < 300:
            detail = f"the proxy refused CONNECT: {status}"
            raise UpstreamFailure(TransportError.CONNECT, detail, f"proxy:{status}")
    except BaseException:
        sock.close()
        raise
    return sock


async def _connected(loop: asyncio.AbstractEventLoop, proxy: Proxy) -> socket.socket:
    infos = await loop.getaddrinfo(proxy.host, proxy.port, type=socket.SOCK_STREAM)
    failure: OSError = OSError(f"the proxy host {proxy.host!r} resolves to no address")
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
        except OSError as e:
            sock.close()
            failure = e
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise failure
