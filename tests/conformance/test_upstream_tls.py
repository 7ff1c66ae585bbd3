"""Both upstream clients over TLS (a throwaway CA from trustme) and with credentials in the URL."""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import trustme

from gateway.config import TimeoutsConfig
from gateway.errors import TransportError
from gateway.upstream import UpstreamFailure, UpstreamRequest
from gateway.upstream.aiohttp_sender import AiohttpSender
from gateway.upstream.h1 import H1Sender
from tests.procs import ROOT

CLIENTS = {"aiohttp": AiohttpSender, "h1": H1Sender}
TIMEOUTS = TimeoutsConfig(connect_s=2, first_byte_s=2, idle_s=2)
ANSWER = b'{"ok":true}'


@dataclass
class Server:
    port: int
    heads: list[bytes] = field(default_factory=list)
    connections: int = 0
    open: set[asyncio.StreamWriter] = field(default_factory=set)


async def shut(server: Server, srv: asyncio.Server) -> None:
    """Stops listening and closes the connections still open. Python 3.11's ``Server.close``
    leaves them to their handlers, which learn of a client's close only when its FIN arrives: a
    tunnel through tinyproxy (another process) closed after the test's loop on a loaded host,
    and the loop's close met the open transport (EBUSY, an unclosed-transport warning)."""
    srv.close()
    for writer in list(server.open):
        writer.close()
    await asyncio.gather(*(w.wait_closed() for w in list(server.open)), return_exceptions=True)


async def serve(ssl_context: ssl.SSLContext | None, host: str = "127.0.0.1") -> tuple[Server, asyncio.Server]:
    """An upstream answering ANSWER to every request, recording their heads and connections."""
    server = Server(0)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        server.open.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                server.heads.append(head)
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)  # fmt: skip
                await reader.readexactly(length)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER))  # fmt: skip
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            server.open.discard(writer)
            writer.close()

    srv = await asyncio.start_server(answer, host, 0, ssl=ssl_context)
    server.port = srv.sockets[0].getsockname()[1]
    return server, srv


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture
async def tls_server(ca: trustme.CA) -> AsyncIterator[Server]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    server, srv = await serve(context)
    yield server
    await shut(server, srv)


def _request(url: str, headers: dict[str, str] | None = None) -> UpstreamRequest:
    return UpstreamRequest("POST", url, headers or {"Content-Type": "application/json"}, b'{"q":1}', 2.0)


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_https_upstream_is_verified_and_its_connection_kept(
    client: str, ca: trustme.CA, tls_server
) -> None:
    trusted = ssl.create_default_context()
    ca.configure_trust(trusted)
    sender = CLIENTS[client](TIMEOUTS, 4, ssl_context=trusted)
    await sender.start()
    try:
        for host in ("localhost", "localhost", "127.0.0.1"):
            resp = await sender(_request(f"https://{host}:{tls_server.port}/v1/chat/completions"))
            assert resp.status == 200 and await resp.read(1 << 20) == ANSWER
    finally:
        await sender.close()
    assert len(tls_server.heads) == 3
    assert tls_server.connections == 2  # one per host name: the pool is per (scheme, host, port)
    assert tls_server.heads[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")


@pytest.mark.parametrize("client", CLIENTS)
async def test_an_upstream_whose_certificate_is_not_trusted_is_a_connect_failure(
    client: str, tls_server
) -> None:
    sender = CLIENTS[client](TIMEOUTS, 4)  # the system's CAs: the throwaway CA is not among them
    await sender.start()
    try:
        with pytest.raises(UpstreamFailure) as e:
            await sender(_request(f"https://localhost:{tls_server.port}/v1/chat/completions"))
        assert e.value.kind is TransportError.CONNECT
        assert tls_server.heads == []  # nothing was sent over the unverified connection
    finally:
        await sender.close()


@pytest.mark.parametrize("client", CLIENTS)
async def test_credentials_in_the_url_are_sent_as_basic_auth_by_both(client: str) -> None:
    server, srv = await serve(None)
    sender = CLIENTS[client](TIMEOUTS, 4)
    await sender.start()
    try:
        resp = await sender(_request(f"http://us%40er:p%3Ass@127.0.0.1:{server.port}/v1/x"))
        assert resp.status == 200 and await resp.read(1 << 20) == ANSWER
    finally:
        await sender.close()
        await shut(server, srv)
    head = server.heads[0].decode()
    assert "Authorization: Basic dXNAZXI6cDpzcw==\r\n" in head  # base64("us@er:p:ss")
    assert "us%40er" not in head


_TRUST_FROM_ENV = """
import asyncio, sys
from gateway.config import TimeoutsConfig
from gateway.upstream import UpstreamRequest
from gateway.upstream.aiohttp_sender import AiohttpSender
from gateway.upstream.h1 import H1Sender

async def main() -> None:
    for cls in (H1Sender, AiohttpSender):
        sender = cls(TimeoutsConfig(connect_s=2, first_byte_s=2, idle_s=2), 4)
        await sender.start()
        try:
            resp = await sender(UpstreamRequest("POST", sys.argv[1], {}, b"{}", 2.0))
            print(cls.__name__, resp.status, (await resp.read(1 << 20)).decode())
        finally:
            await sender.close()

asyncio.run(main())
"""


async def test_both_clients_trust_the_ca_bundle_ssl_cert_file_names(
    ca: trustme.CA, tls_server: Server, tmp_path: Path
) -> None:
    """A proxy that inspects TLS re-signs every provider's certificate with its own CA: the
    deployer names a bundle holding it in SSL_CERT_FILE, as for curl and the SDKs."""
    bundle = tmp_path / "bundle.pem"
    ca.cert_pem.write_to_path(str(bundle))
    env = {**os.environ, "SSL_CERT_FILE": str(bundle)}
    url = f"https://localhost:{tls_server.port}/v1/chat/completions"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", _TRUST_FROM_ENV, url, env=env, cwd=ROOT,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().splitlines() == ["H1Sender 200 " + ANSWER.decode(), "AiohttpSender 200 " + ANSWER.decode()]
