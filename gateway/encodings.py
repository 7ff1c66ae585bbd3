"""Request bodies in a Content-Encoding: decoded here, bounded, or refused in the dialect's
shape (aiohttp's own decoder is off: it answers unsupported codings with a bare plain-text
400 before our pipeline runs, and a corrupt gzip body with a 500).

RFC 9110 §8.4: codings are listed in the order they were applied, so they are undone
last-first. ``gzip``/``x-gzip`` and ``deflate`` (zlib-wrapped, or raw as some clients
send it) are accepted; anything else is 415, as §15.5.16 says for an unsupported coding.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

SUPPORTED = ("gzip", "x-gzip", "deflate", "identity")
MAX_CODINGS = 2  # "gzip, gzip" is legal; a long chain is only a way to burn CPU


@dataclass(frozen=True, slots=True)
class EncodingProblem:
    status: int  # 400 corrupt, 413 too large once decoded, 415 unsupported
    message: str
    code: str


def decode_body(body: bytes, content_encoding: str, max_bytes: int) -> bytes | EncodingProblem:
    codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if not codings:
        return body
    unsupported = [c for c in codings if c not in SUPPORTED]
    if unsupported:
        return EncodingProblem(
            415, f"unsupported Content-Encoding '{unsupported[0][:32]}'; send identity, gzip or deflate",
            "unsupported_content_encoding",
        )  # fmt: skip
    if len(codings) > MAX_CODINGS:
        return EncodingProblem(400, "too many Content-Encoding layers", "invalid_content_encoding")
    for coding in reversed(codings):
        decoded = _inflate(body, coding, max_bytes)
        if isinstance(decoded, EncodingProblem):
            return decoded
        body = decoded
    return body


def _inflate(data: bytes, coding: str, max_bytes: int) -> bytes | EncodingProblem:
    attempts = (31,) if coding in ("gzip", "x-gzip") else (15, -15)  # deflate: zlib, else raw
    for wbits in attempts:
        d = zlib.decompressobj(wbits)
        try:
            # Bounded: a small bomb must not become gigabytes in memory.
            out = d.decompress(data, max_bytes + 1)
        except zlib.error:
            continue
        if len(out) > max_bytes or d.unconsumed_tail:
            return EncodingProblem(
                413, f"the request body is larger than the gateway's limit of {max_bytes} bytes once decoded",
                "request_too_large",
            )  # fmt: skip
        if not d.eof:
            continue  # truncated stream
        return out
    return EncodingProblem(400, f"the request body is not valid {coding} data", "invalid_content_encoding")
