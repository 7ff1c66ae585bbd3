"""Both upstream clients through a real forward proxy (tinyproxy, from Debian; installed by
scripts/test-deps.sh): https upstreams through a CONNECT tunnel, TLS end to end; http ones
by absolute URL; the proxy's credentials; what goes around it.

The upstream is named by this machine's host name, not a loopback address (loopback
upstreams always go direct); the proxy resolves the name, the gateway never does."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trustme

from gateway.config import TimeoutsConfig
from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure, UpstreamRequest
from gateway.upstream.aiohttp_sender import AiohttpSender
from gateway.upstream.h1 import H1Sender
from gateway.upstream.proxy import egress
from tests.conformance.test_upstream_tls import ANSWER, Server, serve, shut
from tests.procs import free_port
from tests.tinyproxy import Tinyproxy
from tests.tinyproxy import tinyproxy as running_tinyproxy

CLIENTS = {"aiohttp": AiohttpSender, "h1": H1Sender}
TIMEOUTS = TimeoutsConfig(connect_s=5, first_byte_s=5, idle_s=5)
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def tinyproxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tinyproxy]:
    with running_tinyproxy(tmp_path_factory.mktemp("tinyproxy")) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_server(ca: trustme.CA) -> AsyncIterator[Server]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(HOST).configure_cert(context)
    server, srv = await serve(context, socket.gethostbyname(HOST))
    yield server
    await shut(server, srv)


@pytest.fixture
async def plain_server() -> AsyncIterator[Server]:
    server, srv = await serve(None, socket.gethostbyname(HOST))
    yield server
    await shut(server, srv)


def _request(url: str) -> UpstreamRequest:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-upstream"}
    return UpstreamRequest("POST", url, headers, b'{"q":1}', 5.0)


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_https_upstream_is_reached_through_a_connect_tunnel_kept_open(
    client: str, ca: trustme.CA, tls_server: Server, tinyproxy: Tinyproxy
) -> None:
    before = tinyproxy.saw(f"CONNECT {HOST}:{tls_server.port}")
    sender = CLIENTS[client](TIMEOUTS, 4, ssl_context=_trusting(ca), egress=egress(tinyproxy.url(), {}))
    await sender.start()
    try:
        for _ in range(3):
            resp = await sender(_request(f"https://{HOST}:{tls_server.port}/v1/chat/completions"))
            assert resp.status == 200 and await resp.read(1 << 20) == ANSWER
    finally:
        await sender.close()
    assert tinyproxy.saw(f"CONNECT {HOST}:{tls_server.port}") == before + 1  # one tunnel, three requests
    assert tls_server.connections == 1 and len(tls_server.heads) == 3
    head = tls_server.heads[0].decode()
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")  # as to the server itself
    assert "Authorization: Bearer sk-upstream\r\n" in head and "Proxy-Authorization" not in head


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_http_upstream_is_reached_through_the_proxy_with_its_credentials(
    client: str, plain_server: Server, tinyproxy: Tinyproxy
) -> None:
    sender = CLIENTS[client](TIMEOUTS, 4, egress=egress("env", {"http_proxy": tinyproxy.url()}))
    await sender.start()
    try:
        resp = await sender(_request(f"http://{HOST}:{plain_server.port}/v1/models?x=1"))
        assert resp.status == 200 and await resp.read(1 << 20) == ANSWER
    finally:
        await sender.close()
    assert tinyproxy.saw("Request (file descriptor") >= 1
    head = plain_server.heads[-1].decode()
    assert head.startswith("POST /v1/models?x=1 HTTP/1.1\r\n")  # the proxy sent it on in origin form
    assert "Proxy-Authorization" not in head and "Authorization: Bearer sk-upstream\r\n" in head


async def _failure(sender: Any, url: str) -> UpstreamFailure:
    """What ``sender`` (started here, closed after) raises for a request to ``url``."""
    await sender.start()
    try:
        with pytest.raises(UpstreamFailure) as e:
            await sender(_request(url))
    finally:
        await sender.close()
    return e.value


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_proxy_that_refuses_the_tunnel_is_a_connect_failure_and_nothing_reaches_the_upstream(
    client: str, ca: trustme.CA, tls_server: Server, tinyproxy: Tinyproxy
) -> None:
    wrong = egress(tinyproxy.url(password="wrong"), {})
    sender = CLIENTS[client](TIMEOUTS, 4, ssl_context=_trusting(ca), egress=wrong)
    failure = await _failure(sender, f"https://{HOST}:{tls_server.port}/v1/chat/completions")
    assert failure.kind is TransportError.CONNECT
    # tinyproxy says 401 to wrong credentials, where RFC 9110 §15.5.8 has 407.
    assert "the proxy refused CONNECT: 401" in str(failure) and failure.evidence == "proxy:401"
    assert tls_server.connections == 0


@pytest.mark.parametrize("client", CLIENTS)
async def test_loopback_and_no_proxy_hosts_go_direct(client: str, plain_server: Server) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: any request through it would fail
    for env in ({"https_proxy": dead, "http_proxy": dead, "no_proxy": HOST}, {"http_proxy": dead}):
        sender = CLIENTS[client](TIMEOUTS, 4, egress=egress("env", env))
        await sender.start()
        try:
            host = HOST if "no_proxy" in env else socket.gethostbyname(HOST)
            if not host.startswith("127."):
                continue  # the host name leads elsewhere here: only no_proxy applies
            resp = await sender(_request(f"http://{host}:{plain_server.port}/v1/x"))
            assert resp.status == 200 and await resp.read(1 << 20) == ANSWER
        finally:
            await sender.close()
    assert len(plain_server.heads) >= 1


async def _proxy_that(answer: bytes | None) -> tuple[int, asyncio.Server]:
    """A stand-in proxy that answers every request with ``answer``, or never (None)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if answer is None:
                await asyncio.sleep(30)
            else:
                writer.write(answer)
                await writer.drain()
                await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(serve, "127.0.0.1", 0)
    return srv.sockets[0].getsockname()[1], srv


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_proxys_407_to_a_plain_http_request_is_a_connect_failure_not_the_upstreams_answer(client: str) -> None:
    """Relayed, a client took the 407 for its own proxy's (the openai SDK: APIStatusError 407)."""
    port, srv = await _proxy_that(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
                                  b"Content-Length: 0\r\n\r\n")  # fmt: skip
    sender = CLIENTS[client](TIMEOUTS, 4, egress=egress(f"http://alice:wrong@127.0.0.1:{port}", {}))
    try:
        failure = await _failure(sender, f"http://{HOST}:9/v1/chat/completions")
    finally:
        srv.close()
    assert failure.kind is TransportError.CONNECT and failure.evidence == "proxy:407"


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_proxy_that_does_not_answer_connect_is_bounded_by_connect_s(client: str, ca: trustme.CA) -> None:
    port, srv = await _proxy_that(None)
    quick = TimeoutsConfig(connect_s=0.5, first_byte_s=20, idle_s=20)
    sender = CLIENTS[client](quick, 4, ssl_context=_trusting(ca), egress=egress(f"http://127.0.0.1:{port}", {}))
    started = time.monotonic()
    try:
        failure = await _failure(sender, f"https://{HOST}:9/v1/chat/completions")
    finally:
        srv.close()
    assert failure.kind is TransportError.CONNECT_TIMEOUT and time.monotonic() - started < 5
