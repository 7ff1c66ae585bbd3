import gzip
import zlib

import pytest

from gateway.encodings import EncodingProblem, decode_body

RAW = b'{"model": "m", "messages": []}' * 10


def raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(("body", "encoding"), [
    (RAW, ""), (RAW, "identity"), (gzip.compress(RAW), "gzip"), (gzip.compress(RAW), "x-gzip"),
    (gzip.compress(RAW), "GZIP"), (zlib.compress(RAW), "deflate"), (raw_deflate(RAW), "deflate"),
    (gzip.compress(gzip.compress(RAW)), "gzip, gzip"), (gzip.compress(RAW), "identity, gzip"),
])  # fmt: skip
def test_supported_codings_decode(body: bytes, encoding: str) -> None:
    assert decode_body(body, encoding, 1 << 20) == RAW


@pytest.mark.parametrize(("body", "encoding", "status", "code"), [
    (RAW, "br", 415, "unsupported_content_encoding"),
    (RAW, "zstd", 415, "unsupported_content_encoding"),
    (RAW, "gzip", 400, "invalid_content_encoding"),  # the header says gzip, the body is not
    (gzip.compress(RAW)[:-10], "gzip", 400, "invalid_content_encoding"),  # truncated
    (RAW, "gzip, gzip, gzip", 400, "invalid_content_encoding"),
    (gzip.compress(b"\0" * 5_000_000), "gzip", 413, "request_too_large"),  # a small bomb
])  # fmt: skip
def test_bad_codings_are_refused_clearly(body: bytes, encoding: str, status: int, code: str) -> None:
    problem = decode_body(body, encoding, 1 << 20)
    assert isinstance(problem, EncodingProblem) and (problem.status, problem.code) == (status, code)
