"""The h1 client's pure parts: URL targets, request heads, body decoders."""

from __future__ import annotations

import dataclasses
import gzip
import zlib

import brotli
import pytest
from backports.zstd import ZstdCompressor

from gateway.upstream.h1.codec import (
    ACCEPT_ENCODING,
    BadRequestHead,
    DecodeError,
    TargetCache,
    decoder_for,
    parse_target,
    request_head,
)


@pytest.mark.parametrize(
    ("url", "key", "target", "host"),
    [
        ("http://127.0.0.1:8080/v1/chat/completions", ("http", "127.0.0.1", 8080), "/v1/chat/completions",
         "127.0.0.1:8080"),
        ("https://api.openai.com/v1/responses?x=1", ("https", "api.openai.com", 443), "/v1/responses?x=1",
         "api.openai.com"),
        ("HTTP://Example.COM:80", ("http", "example.com", 80), "/", "example.com"),
        ("http://[::1]:9000/v1/a%2Fb?q=%20", ("http", "::1", 9000), "/v1/a%2Fb?q=%20", "[::1]:9000"),
    ],
)  # fmt: skip
def test_targets_keep_the_encoded_path_and_name_the_host(
    url: str, key: tuple, target: str, host: str
) -> None:
    t = parse_target(url)
    assert (t.key, t.target, t.host_header) == (key, target, host)


def test_credentials_in_the_url_become_basic_auth_as_aiohttp_makes_them() -> None:
    t = parse_target("https://us%40er:p%3Ass@h.example/v1")
    assert t.authorization == "Basic dXNAZXI6cDpzcw=="  # base64("us@er:p:ss")
    head = request_head("POST", t, {"Authorization": "Bearer other"}, 0).decode()
    assert "Authorization: Basic dXNAZXI6cDpzcw==\r\n" in head and "Bearer" not in head
    assert "us%40er" not in head and parse_target("http://h/").authorization is None


@pytest.mark.parametrize("url", ["ftp://x/y", "http:///nohost", "unix:/tmp/s"])
def test_a_url_the_client_cannot_reach_is_refused(url: str) -> None:
    with pytest.raises(BadRequestHead):
        parse_target(url)


def test_the_target_cache_stays_bounded() -> None:
    cache = TargetCache(max_entries=4)
    for i in range(10):
        assert cache(f"http://h/{i}").target == f"/{i}"
    assert len(cache._known) <= 4


def test_the_target_cache_keeps_no_long_url() -> None:
    """A client's query string is in the URL: 1,024 URLs of 8 KB each were 16 MB kept."""
    cache = TargetCache()
    for i in range(10):
        assert cache(f"http://h/v1/x?q={i}&{'a' * 8000}").target.startswith(f"/v1/x?q={i}&a")
    assert cache._known == {}
    cache("http://h/v1/x?q=1")
    assert list(cache._known) == ["http://h/v1/x?q=1"]


def test_the_head_carries_host_length_and_the_given_headers_in_order() -> None:
    t = parse_target("http://127.0.0.1:9/v1/messages")
    head = request_head(
        "POST", t, {"content-type": "application/json", "x-api-key": "k", "X-Request-Id": "r"}, 12
    )
    assert head == (
        b"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1:9\r\ncontent-type: application/json\r\n"
        b"x-api-key: k\r\nX-Request-Id: r\r\nAccept: */*\r\nAccept-Encoding: " + ACCEPT_ENCODING.encode()
        + b"\r\nContent-Length: 12\r\n\r\n"
    )  # fmt: skip
    assert b"User-Agent" not in head


def test_framing_headers_are_the_clients_own_and_given_accepts_are_kept() -> None:
    t = parse_target("http://h/x")
    given = {"Host": "evil", "Content-Length": "999", "Transfer-Encoding": "chunked", "Connection": "close",
             "Accept": "text/event-stream", "Accept-Encoding": "identity"}  # fmt: skip
    head = request_head("GET", t, given, None).decode()
    assert head.count("Host:") == 1 and "Host: h\r\n" in head
    assert "999" not in head and "chunked" not in head and "Connection" not in head
    assert "Content-Length" not in head  # a GET without a body says nothing of one
    assert "Accept: text/event-stream\r\n" in head and "Accept-Encoding: identity\r\n" in head
    assert "*/*" not in head


@pytest.mark.parametrize(
    "headers",
    [{"x-a": "1\r\nx-injected: 2"}, {"x-a": "1\nx-b: 2"}, {"x-a\r\nx-b": "1"}, {"x:a": "1"}],
)
def test_a_header_that_would_split_the_head_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(BadRequestHead):
        request_head("POST", parse_target("http://h/x"), headers, 0)


def test_a_line_break_is_refused_wherever_it_would_land_and_named_when_a_header_holds_it() -> None:
    with pytest.raises(BadRequestHead, match="x-a"):
        request_head("POST", parse_target("http://h/x"), {"ok": "1", "x-a": "1\r\nx-b: 2"}, 0)
    # The host header comes from the configured URL: a CR there would split the head too.
    target = dataclasses.replace(parse_target("http://h/x"), host_header="h\r\nx-b: 2")
    with pytest.raises(BadRequestHead, match="request line"):
        request_head("POST", target, {"ok": "1"}, 0)
    # A framing header is never sent, so what it holds cannot reach the upstream.
    head = request_head("POST", parse_target("http://h/x"), {"Connection": "close\r\nx-b: 2"}, 0)
    assert b"x-b" not in head
    # ... nor is it the one named when a header that is sent splits the head.
    with pytest.raises(BadRequestHead, match="x-a"):
        request_head("POST", parse_target("http://h/x"), {"Connection": "a\nb", "x-a": "1\nx-b: 2"}, 0)


def test_a_nul_is_refused_in_a_header_and_in_the_request_line() -> None:
    """RFC 9110 §5.5: a field value holds no CR, LF or NUL. A Gemini ``?key=AIza%00x`` was
    decoded into x-goog-api-key and sent with its NUL."""
    with pytest.raises(BadRequestHead, match="x-goog-api-key"):
        request_head("POST", parse_target("http://h/x"), {"ok": "1", "x-goog-api-key": "AIza\x00x"}, 0)
    with pytest.raises(BadRequestHead):
        request_head("POST", parse_target("http://h/x"), {"x-a\x00": "1"}, 0)
    with pytest.raises(BadRequestHead, match="request line"):
        request_head("GET", parse_target("http://h/x?q=a\x00b"), {}, None)
    # A framing header is never sent: what it holds cannot reach the upstream.
    assert b"\x00" not in request_head("POST", parse_target("http://h/x"), {"Connection": "a\x00"}, 0)


BODY = b'{"id":"chatcmpl-1","choices":[{"message":{"content":"hi"}}]}' * 50


def _feed(encoding: str, data: bytes, pieces: int = 7) -> bytes:
    decode = decoder_for(encoding)
    assert decode is not None
    step = max(1, len(data) // pieces)
    return b"".join(decode(data[i : i + step]) for i in range(0, len(data), step))


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", gzip.compress),
        ("x-gzip", gzip.compress),
        ("deflate", zlib.compress),  # RFC 1950 zlib-wrapped, as the RFC says
        ("deflate", lambda b: zlib.compress(b)[2:-4]),  # raw deflate, as some servers send it
        ("br", brotli.compress),
        ("zstd", lambda b: ZstdCompressor().compress(b, ZstdCompressor.FLUSH_FRAME)),
        ("GZIP ", gzip.compress),
    ],
)
def test_bodies_decode_whatever_the_pieces_they_arrive_in(encoding: str, encode: object) -> None:
    encoded = encode(BODY)  # type: ignore[operator]
    assert _feed(encoding, encoded) == BODY
    assert _feed(encoding, encoded, pieces=len(encoded)) == BODY  # one byte at a time


def test_gzip_members_one_after_another_decode_as_one_body() -> None:
    assert _feed("gzip", gzip.compress(b"first ") + gzip.compress(b"second")) == b"first second"


def test_identity_needs_no_decoder() -> None:
    assert decoder_for(None) is None and decoder_for("identity") is None and decoder_for("") is None


@pytest.mark.parametrize("encoding", ["compress", "exi", "gzip, br"])
def test_an_encoding_the_client_cannot_decode_is_refused(encoding: str) -> None:
    with pytest.raises(DecodeError):
        decoder_for(encoding)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "zstd"])
def test_a_corrupt_body_is_a_decode_error(encoding: str) -> None:
    decode = decoder_for(encoding)
    assert decode is not None
    with pytest.raises(DecodeError):
        decode(b"\xff\xfe this is not compressed data at all \x00" * 4)


def test_every_encoding_the_client_decodes_is_advertised() -> None:
    assert ACCEPT_ENCODING == "gzip, deflate, br, zstd"
