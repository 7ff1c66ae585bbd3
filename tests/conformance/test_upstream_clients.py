"""The contract every upstream HTTP client behind the Sender seam must keep (#24).

Each test runs against every class in ``SENDERS`` (conftest.py) and a real scripted upstream
on loopback (scripted_upstream.py) that writes raw bytes, so framing, resets and timing are
exact; nothing is mocked. Only the seam is used: UpstreamRequest in, UpstreamResponse out,
transport failures as UpstreamFailure(kind). Synchronisation is by events, never sleeps;
the only clocks are the short timeouts the timeout cases are about.

Where a case records what aiohttp does rather than what a gateway would ideally want, its
docstring says so ("Recorded:").
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import random
import socket
import zlib
from collections.abc import Awaitable, Callable, Iterator

import brotli
import pytest

try:
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]  # Python 3.14+
except ImportError:
    from backports import zstd

from gateway.errors import TransportError
from gateway.upstream import (
    BadRequestHead,
    BodyTooLarge,
    Sender,
    UpstreamFailure,
    UpstreamRequest,
    UpstreamResponse,
)
from tests.conformance.conftest import AIOHTTP_ONLY, MakeSender, deviates
from tests.conformance.scripted_upstream import (
    LAST_CHUNK,
    Conn,
    RawRequest,
    Script,
    ScriptedServer,
    chunk,
    chunked,
    chunked_head,
    per_request,
    reply,
    response,
)

Serve = Callable[[Script], Awaitable[ScriptedServer]]
BIG = 64 << 20  # a read limit above every body here


def req(server: ScriptedServer, path: str = "/v1/chat/completions", *, method: str = "POST",
        body: bytes = b'{"a":1}', headers: dict[str, str] | None = None,
        first_byte_s: float = 5.0) -> UpstreamRequest:
    hdrs = {"Content-Type": "application/json"} if headers is None else headers
    return UpstreamRequest(method, server.base + path, hdrs, body, first_byte_s)


async def drain(resp: UpstreamResponse) -> list[bytes]:
    return [c async for c in resp.iter_chunks()]


async def ok_after(sender: Sender, server: ScriptedServer) -> None:
    """The next request on the same sender succeeds: the failure did not poison the pool."""
    resp = await sender(req(server))
    assert resp.status == 200
    assert await resp.read(BIG) == b"ok"


def text(n: int, seed: int = 7) -> bytes:
    """Compressible but not trivial bytes, the same on every run."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choices(b"abcdefghijklmnopqrstuvwxyz", k=rnd.randint(2, 9))) for _ in range(500)]
    out = bytearray()
    while len(out) < n:
        out += rnd.choice(words) + b" "
    return bytes(out[:n])


def pieces(data: bytes, size: int) -> Iterator[bytes]:
    return (data[i:i + size] for i in range(0, len(data), size))


# 1. Content-Length bodies, statuses and headers ---------------------------------------------


async def test_content_length_body_status_and_headers(sender: Sender, serve: Serve) -> None:
    body = b'{"id":"x","text":"hello"}'
    head = [("Content-Type", "application/json"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"),
            ("X-A", "one"), ("x-a", "two"), ("x-request-id", "r-1")]
    server = await serve(per_request(reply(response(200, body, head))))
    resp = await sender(req(server))
    assert resp.status == 200
    assert resp.headers.get("content-type") == "application/json"
    assert resp.headers["CONTENT-TYPE"] == "application/json"
    assert resp.headers.get("X-Request-Id") == "r-1"
    assert resp.headers.get("x-missing") is None
    items = list(resp.headers.items())
    assert [v for k, v in items if k.lower() == "set-cookie"] == ["a=1", "b=2"]
    assert [v for k, v in items if k.lower() == "x-a"] == ["one", "two"]
    assert resp.headers["x-a"] == "one"  # a repeated name reads as its first value
    assert await resp.read(BIG) == body


@pytest.mark.parametrize("status", [400, 401, 404, 413, 429, 500, 502, 503, 529])
async def test_error_status_is_a_response_not_a_failure(sender: Sender, serve: Serve, status: int) -> None:
    body = b'{"error":{"type":"overloaded"}}'
    server = await serve(per_request(reply(response(status, body, [("Retry-After", "3")], reason="Err"))))
    resp = await sender(req(server))
    assert resp.status == status
    assert resp.headers.get("retry-after") == "3"
    assert await resp.read(BIG) == body
    await ok_after(sender, server)
    assert server.accepted == 1


async def test_empty_content_length_body(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(response(200, b""))))
    resp = await sender(req(server))
    assert await resp.read(BIG) == b""
    assert b"".join(await drain(await sender(req(server)))) == b"ok"
    assert server.accepted == 1


# 2. Chunked bodies -------------------------------------------------------------------------


async def test_chunked_body_read_joined(sender: Sender, serve: Serve) -> None:
    # Chunk extensions and a trailer are legal framing; the next request on the same
    # connection shows the client consumed all of it.
    wire = (chunked_head(200, [("Content-Type", "text/event-stream")])
            + b"5;name=val\r\nhello\r\n" + chunk(b", ") + chunk(b"world") + b"0\r\nX-Trailer: t\r\n\r\n")
    server = await serve(per_request(reply(wire)))
    resp = await sender(req(server))
    assert resp.status == 200
    assert resp.headers.get("transfer-encoding") == "chunked"
    assert await resp.read(BIG) == b"hello, world"
    await ok_after(sender, server)
    assert server.accepted == 1


async def test_chunked_body_streams_progressively(sender: Sender, serve: Serve) -> None:
    go_on = asyncio.Event()

    async def action(conn: Conn, _: RawRequest) -> bool:
        conn.send(chunked_head() + chunk(b"data: first\n\n"))
        await conn.flush()
        await go_on.wait()  # set by the test only once the client holds chunk 1
        conn.send(chunk(b"data: second\n\n") + LAST_CHUNK)
        await conn.flush()
        return True

    server = await serve(per_request(action))
    resp = await sender(req(server))
    it = resp.iter_chunks()
    got = b""
    while len(got) < len(b"data: first\n\n"):
        got += await anext(it)
    assert got == b"data: first\n\n"
    go_on.set()
    rest = [c async for c in it]
    assert got + b"".join(rest) == b"data: first\n\ndata: second\n\n"
    await ok_after(sender, server)
    assert server.accepted == 1


# 3. Keep-alive ----------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(response(200, b"one")), reply(chunked_head() + chunked([b"two"]))))
    assert await (await sender(req(server))).read(BIG) == b"one"
    assert b"".join(await drain(await sender(req(server)))) == b"two"
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 1, 1]
    assert server.accepted == 1


async def test_a_body_past_the_limit_is_kept_in_part_or_refused_whole(sender: Sender, serve: Serve) -> None:
    # An error's first bytes are enough (the rest is read and dropped: the connection stays
    # usable); an answer relayed whole is refused past the limit, never cut and passed on.
    body = text(40_000)
    server = await serve(per_request(reply(response(200, body)), reply(chunked_head() + chunked(list(pieces(body, 4096)))),
                                     reply(response(200, body))))
    assert await (await sender(req(server))).read(1000) == body[:1000]
    with pytest.raises(BodyTooLarge):
        await (await sender(req(server))).read(1000, whole=True)
    assert await (await sender(req(server))).read(len(body), whole=True) == body  # exactly the limit: whole
    await ok_after(sender, server)


async def test_close_mid_body_drops_the_connection(sender: Sender, serve: Serve) -> None:
    got_head = asyncio.Event()

    async def half(conn: Conn, _: RawRequest) -> bool:
        conn.send(response(200, b"x" * 10, length=False, headers=[("Content-Length", "20")]))
        await conn.flush()
        got_head.set()
        return True  # then waits for a next request on this connection, which must not come

    server = await serve(per_request(half))
    resp = await sender(req(server))
    assert resp.status == 200
    resp.close()
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 2]


async def test_stream_abandoned_by_consumer_drops_the_connection(sender: Sender, serve: Serve) -> None:
    # The gateway's client went away mid-stream: the consumer stops iterating. The upstream
    # is still sending, so that connection must not be reused.
    server = await serve(per_request(reply(chunked_head() + chunk(b"first"))))
    resp = await sender(req(server))
    it = resp.iter_chunks()
    got = b""
    while got != b"first":
        got += await anext(it)
    await it.aclose()  # type: ignore[attr-defined]
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 2]


async def test_sender_close_closes_pooled_connections(make_sender: MakeSender, serve: Serve) -> None:
    sender = await make_sender()
    server = await serve(per_request())
    await ok_after(sender, server)
    assert server.open_now == 1  # kept alive in the pool
    await sender.close()  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        await server.all_closed()


@pytest.mark.parametrize("kind", ["connection-close", "http/1.0"])
async def test_no_reuse_after_connection_close_or_http10(sender: Sender, serve: Serve, kind: str) -> None:
    # The server keeps the connection open after answering: a client that reused it anyway
    # would be answered on connection 1, which the assertion below catches.
    if kind == "connection-close":
        first = response(200, b"bye", [("Connection", "close")])
    else:
        first = response(200, b"bye", version="HTTP/1.0")
    server = await serve(per_request(reply(first)))
    assert await (await sender(req(server))).read(BIG) == b"bye"
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 2]


async def test_http10_keep_alive_response(sender: Sender, serve: Serve) -> None:
    """Recorded: an HTTP/1.0 response that says ``Connection: keep-alive`` and has a
    Content-Length; aiohttp reads it whole and reuses the connection, as RFC 9112 9.3 allows."""
    first = response(200, b"kept", [("Connection", "keep-alive")], version="HTTP/1.0")
    server = await serve(per_request(reply(first)))
    assert await (await sender(req(server))).read(BIG) == b"kept"
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 1]


# 4. Pool limit ----------------------------------------------------------------------------


async def test_pool_limit_holds_under_concurrency(make_sender: MakeSender, serve: Serve) -> None:
    sender = await make_sender(max_connections=2)
    release = asyncio.Event()
    waiting = 0
    two_waiting = asyncio.Event()

    async def script(conn: Conn) -> None:
        nonlocal waiting
        while (r := await conn.request()) is not None:
            waiting += 1
            if waiting == 2:
                two_waiting.set()
            await release.wait()
            conn.send(response(200, r.body))
            await conn.flush()

    server = await serve(script)

    async def one(i: int) -> bytes:
        return await (await sender(req(server, body=b"%d" % i))).read(BIG)

    tasks = [asyncio.create_task(one(i)) for i in range(5)]
    await two_waiting.wait()
    assert server.open_now == 2
    release.set()
    assert await asyncio.gather(*tasks) == [b"%d" % i for i in range(5)]
    assert server.max_open == 2
    assert len(server.requests) == 5
    assert server.accepted == 2  # each of the 2 connections was reused for the others


# 5. Content-Encoding ----------------------------------------------------------------------

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # RFC 9110 "deflate" is the zlib format
    "br": functools.partial(brotli.compress, quality=5),  # the default, 11, takes 0.3 s here
    "zstd": zstd.compress,
}


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("encoding", sorted(ENCODERS))
@pytest.mark.parametrize("reader", ["read", "iter_chunks"])
async def test_content_encoding_decoded(sender: Sender, serve: Serve, encoding: str, framing: str,
                                        reader: str) -> None:
    """Recorded: the headers stay as received (Content-Encoding and the encoded length);
    the relay drops both (gateway/routing.py)."""
    plain = text(300_000)
    wire_body = ENCODERS[encoding](plain)
    head = [("Content-Type", "application/json"), ("Content-Encoding", encoding)]
    if framing == "content-length":
        wire = response(200, wire_body, head)
    else:
        wire = chunked_head(200, head) + chunked(pieces(wire_body, 1000))
    server = await serve(per_request(reply(wire)))
    resp = await sender(req(server))
    assert resp.headers.get("content-encoding") == encoding
    if framing == "content-length":
        assert resp.headers.get("content-length") == str(len(wire_body))
    got = await resp.read(BIG) if reader == "read" else b"".join(await drain(resp))
    assert got == plain
    await ok_after(sender, server)
    assert server.accepted == 1


async def test_accept_encoding_advertises_what_is_decoded(sender: Sender, serve: Serve) -> None:
    """Recorded: aiohttp sends ``Accept-Encoding: gzip, deflate, br, zstd`` when the caller
    gives none (br and zstd because Brotli and backports.zstd are installed)."""
    server = await serve(per_request())
    await ok_after(sender, server)
    advertised = server.requests[0].header("accept-encoding")
    assert advertised is not None
    codings = {c.split(";")[0].strip() for c in advertised.split(",")}
    assert codings >= set(ENCODERS)


async def test_accept_encoding_given_by_caller_is_sent_as_is(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(response(200, b"plain"))))
    resp = await sender(req(server, headers={"Accept-Encoding": "identity"}))
    assert await resp.read(BIG) == b"plain"
    assert server.requests[0].values("accept-encoding") == ["identity"]


async def test_unknown_content_encoding_is_refused_never_passed_on_as_decoded(
    sender: Sender, serve: Serve, sender_name: str, request: pytest.FixtureRequest
) -> None:
    """A coding the client never offered and cannot decode (``compress``) fails the head
    (RESET): the gateway's client leg is identity by contract and drops Content-Encoding,
    so raw bytes handed on would reach the client mislabelled."""
    deviates(request, sender_name, {"aiohttp"}, "aiohttp passes the raw body on (recorded below)")
    raw = b"\x1f\x9d\x90not really lzw"
    server = await serve(per_request(reply(response(200, raw, [("Content-Encoding", "compress")]))))
    with pytest.raises(UpstreamFailure) as e:
        await (await sender(req(server))).read(BIG)
    assert e.value.kind is TransportError.RESET
    await ok_after(sender, server)


@AIOHTTP_ONLY
async def test_unknown_content_encoding_as_aiohttp_passes_it(sender: Sender, serve: Serve) -> None:
    """Recorded: aiohttp does not decode a coding it does not know (``compress``); the
    body arrives as sent, with its Content-Encoding header, and is no failure."""
    raw = b"\x1f\x9d\x90not really lzw"
    server = await serve(per_request(reply(response(200, raw, [("Content-Encoding", "compress")]))))
    resp = await sender(req(server))
    assert resp.status == 200
    assert resp.headers.get("content-encoding") == "compress"
    assert await resp.read(BIG) == raw
    await ok_after(sender, server)


async def test_corrupt_gzip_body_is_stream_broken(sender: Sender, serve: Serve) -> None:
    """Recorded: a body that says gzip but is not fails the read as STREAM_BROKEN."""
    bad = b"\x1f\x8b\x08\x00garbage-not-deflate" * 4
    server = await serve(per_request(reply(response(200, bad, [("Content-Encoding", "gzip")]))))
    resp = await sender(req(server))
    with pytest.raises(UpstreamFailure) as e:
        await resp.read(BIG)
    assert e.value.kind is TransportError.STREAM_BROKEN
    await ok_after(sender, server)


# 6. The request as sent -------------------------------------------------------------------


async def test_request_as_sent(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request())
    path = "/v1/models/a%2Fb:generate?alt=sse&q=a%20b&plus=a+b&empty="
    body = b'{"model":"m","messages":[]}'
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-test",
               "anthropic-version": "2023-06-01", "X-Custom": "v1"}
    resp = await sender(req(server, path, body=body, headers=headers))
    assert await resp.read(BIG) == b"ok"
    got = server.requests[0]
    assert (got.method, got.target, got.version) == ("POST", path, "HTTP/1.1")
    assert got.header("host") == f"127.0.0.1:{server.port}"
    assert got.header("content-length") == str(len(body))
    assert got.header("transfer-encoding") is None
    for name, value in headers.items():
        assert got.values(name) == [value]
    assert got.header("user-agent") is None
    assert got.body == body
    assert got.raw.endswith(b"\r\n\r\n" + body)


async def test_request_user_agent_given_is_sent(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request())
    await (await sender(req(server, headers={"User-Agent": "claude-cli/1.0"}))).read(BIG)
    assert server.requests[0].values("user-agent") == ["claude-cli/1.0"]


async def test_request_target_sent_byte_for_byte(sender: Sender, serve: Serve) -> None:
    """UpstreamRequest.url is "already encoded; sent as is". Left to itself yarl re-quotes it
    (%2F in the query decoded, which a server may split on; %3A in the path, %7E anywhere;
    lower-case escapes upper-cased): the aiohttp sender passes it as an encoded URL."""
    server = await serve(per_request())
    path = "/p/a%2Fb%3Ac%7e?k=%2F%20%3D&k2=a+b&t=%7E&empty="
    await (await sender(req(server, path, method="GET", body=b""))).read(BIG)
    assert server.requests[0].target == path


async def test_get_with_empty_body_has_no_body(sender: Sender, serve: Serve) -> None:
    """Recorded: aiohttp sends a bodiless GET with neither Content-Length nor
    Transfer-Encoding."""
    server = await serve(per_request())
    await (await sender(req(server, "/v1/models", method="GET", body=b"", headers={}))).read(BIG)
    got = server.requests[0]
    assert got.method == "GET"
    assert got.header("content-length") is None
    assert got.header("transfer-encoding") is None
    assert got.body == b""
    assert got.raw.endswith(b"\r\n\r\n")


async def test_post_with_empty_body_says_length_zero(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request())
    await (await sender(req(server, body=b""))).read(BIG)
    got = server.requests[0]
    assert got.header("content-length") == "0"
    assert got.body == b""
    await ok_after(sender, server)
    assert server.accepted == 1


# aiohttp warns about any bytes body over 1 MiB (it is written in one go); harmless here.
@pytest.mark.filterwarnings("ignore:Sending a large body directly with raw bytes:ResourceWarning")
async def test_large_request_body_exact(sender: Sender, serve: Serve) -> None:
    body = random.Random(5).randbytes(5 << 20)
    server = await serve(per_request())
    await (await sender(req(server, body=body))).read(BIG)
    got = server.requests[0]
    assert got.header("content-length") == str(len(body))
    assert got.body == body


# 7. Large responses and read limits -------------------------------------------------------


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_large_response_read_whole(sender: Sender, serve: Serve, framing: str) -> None:
    body = random.Random(20).randbytes(20 << 20)
    if framing == "content-length":
        wire = response(200, body)
    else:
        wire = chunked_head() + chunked(pieces(body, 256 << 10))
    server = await serve(per_request(reply(wire)))
    assert await (await sender(req(server))).read(BIG) == body
    await ok_after(sender, server)
    assert server.accepted == 1


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_read_limit_keeps_limit_bytes_and_the_connection(sender: Sender, serve: Serve, framing: str) -> None:
    """Recorded: aiohttp's sender reads past the limit to the end of the body (discarding
    it), so the connection goes back to the pool and is reused."""
    body = text(1 << 20)
    wire = response(200, body) if framing == "content-length" else chunked_head() + chunked(pieces(body, 4096))
    server = await serve(per_request(reply(wire)))
    assert await (await sender(req(server))).read(10) == body[:10]
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 1]


# 8. Resets and malformed responses --------------------------------------------------------


async def _close_at_once(conn: Conn, _: RawRequest) -> bool:
    await conn.close()
    return False


async def test_closed_before_head_is_reset(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(_close_at_once))
    with pytest.raises(UpstreamFailure) as e:
        await sender(req(server))
    assert e.value.kind is TransportError.RESET
    await ok_after(sender, server)


async def test_reused_connection_closed_on_request_is_reset(sender: Sender, serve: Serve) -> None:
    """Recorded: the upstream answers one request, then closes the kept-alive connection
    when the next request arrives on it (the race between a client reusing a connection
    and a server timing it out, made deterministic). aiohttp does not retry a POST on a
    new connection: RESET, which the gateway's own retry policy handles."""

    async def drop(conn: Conn, _: RawRequest) -> bool:
        await conn.close()
        return False

    server = await serve(per_request(reply(response(200, b"one")), drop))
    assert await (await sender(req(server))).read(BIG) == b"one"
    with pytest.raises(UpstreamFailure) as e:
        await sender(req(server))
    assert e.value.kind is TransportError.RESET
    await ok_after(sender, server)
    assert [r.conn_id for r in server.requests] == [1, 1, 2]


async def test_closed_mid_head_is_reset(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(b"HTTP/1.1 200 OK\r\nContent-Ty", keep=False)))
    with pytest.raises(UpstreamFailure) as e:
        await sender(req(server))
    assert e.value.kind is TransportError.RESET
    await ok_after(sender, server)


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 abc Nope\r\nContent-Length: 0\r\n\r\n",
    b"\x00\x01\x02 garbage \xff\r\n\r\n",
    b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nthis line has no colon\r\n\r\nok",
    b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\nok",
], ids=["bad-status", "binary", "not-http", "header-without-colon", "bad-content-length"])
async def test_malformed_head_is_reset(sender: Sender, serve: Serve, head: bytes) -> None:
    server = await serve(per_request(reply(head, keep=False)))
    with pytest.raises(UpstreamFailure) as e:
        await sender(req(server))
    assert e.value.kind is TransportError.RESET
    await ok_after(sender, server)


def _cut(wire: bytes) -> Callable[[Conn, RawRequest], Awaitable[bool]]:
    return reply(wire, keep=False)


CUTS = {
    "content-length-half": (response(200, b"x" * 50, length=False, headers=[("Content-Length", "100")]), b"x" * 50),
    "chunked-mid-chunk": (chunked_head() + chunk(b"a" * 20) + b"40\r\n" + b"b" * 30, b"a" * 20 + b"b" * 30),
    "chunked-no-last-chunk": (chunked_head() + chunk(b"a" * 20), b"a" * 20),
}


@pytest.mark.parametrize("cut", sorted(CUTS))
async def test_body_cut_is_stream_broken_from_read(sender: Sender, serve: Serve, cut: str) -> None:
    server = await serve(per_request(_cut(CUTS[cut][0])))
    resp = await sender(req(server))
    assert resp.status == 200
    with pytest.raises(UpstreamFailure) as e:
        await resp.read(BIG)
    assert e.value.kind is TransportError.STREAM_BROKEN
    await ok_after(sender, server)


@pytest.mark.parametrize("cut", sorted(CUTS))
async def test_body_cut_is_stream_broken_from_iter_chunks(sender: Sender, serve: Serve, cut: str) -> None:
    wire, arrived = CUTS[cut]
    server = await serve(per_request(_cut(wire)))
    resp = await sender(req(server))
    got: list[bytes] = []
    with pytest.raises(UpstreamFailure) as e:
        async for c in resp.iter_chunks():
            got.append(c)
    assert e.value.kind is TransportError.STREAM_BROKEN
    assert b"".join(got) == arrived
    await ok_after(sender, server)


def _bad_chunk_size_after_one(got_one: asyncio.Event) -> Callable[[Conn, RawRequest], Awaitable[bool]]:
    # The bad framing is sent only once the client holds chunk 1: sent together with the
    # head, aiohttp's parser fails the whole response (a RESET), which would depend on how
    # the bytes happen to be split into reads.
    async def action(conn: Conn, _: RawRequest) -> bool:
        conn.send(chunked_head() + chunk(b"a" * 20))
        await conn.flush()
        await got_one.wait()
        conn.send(b"zz\r\nbbb\r\n")
        await conn.close()
        return False

    return action


async def _bad_chunk_size_kind(sender: Sender, serve: Serve) -> TransportError:
    got_one = asyncio.Event()
    server = await serve(per_request(_bad_chunk_size_after_one(got_one)))
    resp = await sender(req(server))
    got = b""
    with pytest.raises(UpstreamFailure) as e:
        async for c in resp.iter_chunks():
            got += c
            if got == b"a" * 20:
                got_one.set()
    assert got == b"a" * 20
    await ok_after(sender, server)
    return e.value.kind


async def test_bad_chunk_size_is_stream_broken(make_sender: MakeSender, serve: Serve, sender_name: str,
                                               request: pytest.FixtureRequest) -> None:
    deviates(request, sender_name, {"aiohttp"},
             "aiohttp drops the framing error and the body waits for idle_s (recorded below)")
    sender = await make_sender(idle_s=0.2)
    assert await _bad_chunk_size_kind(sender, serve) is TransportError.STREAM_BROKEN


@AIOHTTP_ONLY
async def test_bad_chunk_size_as_aiohttp_reports_it(make_sender: MakeSender, serve: Serve) -> None:
    """Recorded: after a chunk-size line that is not hex, aiohttp's body neither ends nor
    fails; the read waits until the idle timer fires. The failure is still an
    UpstreamFailure the gateway retries, only idle_s later than it could be."""
    sender = await make_sender(idle_s=0.2)
    assert await _bad_chunk_size_kind(sender, serve) is TransportError.IDLE_TIMEOUT


# 9. Timeouts and cancellation -------------------------------------------------------------


async def _hang(conn: Conn, _: RawRequest) -> bool:
    await conn.hang()
    return False


async def test_no_head_is_first_byte_timeout(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(_hang))
    request = req(server, first_byte_s=0.2)
    with pytest.raises(UpstreamFailure) as e:
        await sender(request)
    assert e.value.kind is TransportError.FIRST_BYTE_TIMEOUT
    # The whole request reached the upstream, which may be answering it still: a key pays its prompt.
    assert request.written and server.request_seen.is_set()
    await ok_after(sender, server)


async def test_long_first_byte_timeout_does_not_stretch_idle(make_sender: MakeSender, serve: Serve) -> None:
    # first_byte governs the head, idle_s the body: a long first_byte does not stretch idle.
    sender = await make_sender(idle_s=0.2)
    server = await serve(per_request(reply(chunked_head() + chunk(b"one"))))
    resp = await sender(req(server, first_byte_s=30.0))
    with pytest.raises(UpstreamFailure) as e:
        await resp.read(BIG)
    assert e.value.kind is TransportError.IDLE_TIMEOUT
    await ok_after(sender, server)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
async def test_silent_body_is_idle_timeout_from_iter_chunks(make_sender: MakeSender, serve: Serve,
                                                             framing: str) -> None:
    sender = await make_sender(idle_s=0.2)
    if framing == "chunked":
        wire = chunked_head() + chunk(b"one")
    else:
        wire = response(200, b"one", length=False, headers=[("Content-Length", "10")])
    server = await serve(per_request(reply(wire)))
    resp = await sender(req(server))
    got: list[bytes] = []
    with pytest.raises(UpstreamFailure) as e:
        async for c in resp.iter_chunks():
            got.append(c)
    assert e.value.kind is TransportError.IDLE_TIMEOUT
    assert b"".join(got) == b"one"
    await ok_after(sender, server)


async def test_silent_body_is_idle_timeout_from_read(make_sender: MakeSender, serve: Serve) -> None:
    sender = await make_sender(idle_s=0.2)
    server = await serve(per_request(reply(chunked_head() + chunk(b"one"))))
    resp = await sender(req(server))
    with pytest.raises(UpstreamFailure) as e:
        await resp.read(BIG)
    assert e.value.kind is TransportError.IDLE_TIMEOUT
    await ok_after(sender, server)


async def test_refused_is_connect(sender: Sender, serve: Serve) -> None:
    # A bound socket that does not listen holds the port: a connect to it is refused.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        request = UpstreamRequest("POST", f"http://127.0.0.1:{port}/v1", {}, b"{}", 5.0)
        with pytest.raises(UpstreamFailure) as e:
            await sender(request)
    assert e.value.kind is TransportError.CONNECT
    assert not request.written  # nothing reached an upstream
    await ok_after(sender, await serve(per_request()))


@contextlib.contextmanager
def silent_listener() -> Iterator[int]:
    """A port whose SYNs go unanswered: a listener with backlog 0 that never accepts, its
    accept queue filled by raw connects first (Linux then drops further SYNs)."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        for _ in range(3):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            fillers.append(s)
        yield port
    finally:
        for s in fillers:
            s.close()
        listener.close()


async def test_silent_host_is_connect_timeout(make_sender: MakeSender, serve: Serve) -> None:
    sender = await make_sender(connect_s=0.2)
    with silent_listener() as port:
        with pytest.raises(UpstreamFailure) as e:
            await sender(UpstreamRequest("POST", f"http://127.0.0.1:{port}/v1", {}, b"{}", 5.0))
    assert e.value.kind is TransportError.CONNECT_TIMEOUT
    await ok_after(sender, await serve(per_request()))


async def test_cancel_while_waiting_for_head_stays_cancelled(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(_hang))
    request = req(server, first_byte_s=30.0)
    task = asyncio.create_task(sender(request))
    await server.request_seen.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert request.written  # left while the upstream had it: read all the same
    await ok_after(sender, server)


async def test_cancel_while_reading_body_stays_cancelled(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(chunked_head() + chunk(b"one"))))
    resp = await sender(req(server))
    got_one = asyncio.Event()

    async def consume() -> None:
        async for _ in resp.iter_chunks():
            got_one.set()

    task = asyncio.create_task(consume())
    await got_one.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await ok_after(sender, server)


# 10. Bodies without length, HEAD, 204/304, 1xx --------------------------------------------


async def test_read_until_close_body(sender: Sender, serve: Serve) -> None:
    body = text(100_000)
    server = await serve(per_request(reply(response(200, body, [("Content-Type", "text/plain")], length=False),
                                           keep=False)))
    resp = await sender(req(server))
    assert await resp.read(BIG) == body
    await ok_after(sender, server)
    assert server.accepted == 2


async def test_read_until_close_body_streams(sender: Sender, serve: Serve) -> None:
    server = await serve(per_request(reply(response(200, b"abc", length=False) + b"def", keep=False)))
    assert b"".join(await drain(await sender(req(server)))) == b"abcdef"
    await ok_after(sender, server)


async def test_head_request_has_no_body(make_sender: MakeSender, serve: Serve) -> None:
    # A client that waited for the 1000 announced bytes would hit idle_s and fail here.
    sender = await make_sender(idle_s=0.2)
    server = await serve(per_request(reply(response(200, length=False, headers=[("Content-Length", "1000")]))))
    resp = await sender(req(server, method="HEAD", body=b"", headers={}))
    assert resp.status == 200
    assert resp.headers.get("content-length") == "1000"
    assert await resp.read(BIG) == b""
    await ok_after(sender, server)
    assert server.accepted == 1


@pytest.mark.parametrize("status", [204, 304])
async def test_no_content_statuses_have_no_body(sender: Sender, serve: Serve, status: int) -> None:
    # 304 may repeat the representation's Content-Length; there is still no body.
    extra = [("Content-Length", "1000")] if status == 304 else []
    server = await serve(per_request(reply(response(status, length=False, headers=extra, reason="X"))))
    resp = await sender(req(server))
    assert resp.status == status
    assert await resp.read(BIG) == b""
    await ok_after(sender, server)
    assert server.accepted == 1


@pytest.mark.parametrize("informational", [b"HTTP/1.1 100 Continue\r\n\r\n",
                                           b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"],
                         ids=["100", "103"])
async def test_informational_response_is_skipped(sender: Sender, serve: Serve, informational: bytes) -> None:
    """Recorded: aiohttp skips 1xx responses it did not ask for and returns the final one."""
    server = await serve(per_request(reply(informational + response(200, b"final"))))
    resp = await sender(req(server))
    assert resp.status == 200
    assert await resp.read(BIG) == b"final"
    await ok_after(sender, server)


# 12. Header injection ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nX-Injected: 1", "a\rX-Injected: 1", "a\x00X-Injected"],
                         ids=["crlf", "lf", "cr", "nul"])
async def test_header_value_with_newline_or_nul_is_refused(sender: Sender, serve: Serve, value: str) -> None:
    """A BadRequestHead before anything is sent (RFC 9110 §5.5: no CR, LF or NUL in a field
    value), which the pipeline answers as the client's mistake; not an UpstreamFailure, as
    nothing reached the wire. (aiohttp raises a ValueError for CR and LF, and wrote a NUL.)"""
    server = await serve(per_request())
    with pytest.raises(BadRequestHead):
        await sender(req(server, headers={"X-Evil": value}))
    assert not any(b"X-Injected" in r.raw for r in server.requests)
    await ok_after(sender, server)
