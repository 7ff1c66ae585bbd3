"""What the h1 client writes and decodes: request heads, URL targets, body encodings.

Pure functions and small objects, no I/O; ``connection.py`` drives them.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from gateway.upstream import BadRequestHead
from gateway.upstream.proxy import NO_EGRESS_PROXY, Egress, Proxy

try:  # the same optional decoders aiohttp uses, so either client accepts the same bodies
    import brotli  # type: ignore[import-untyped]
except ImportError:  # pragma: no cover - a dependency; absent only in a trimmed install
    brotli = None
try:
    from backports.zstd import ZstdDecompressor
except ImportError:  # pragma: no cover - Python 3.14 has it in the standard library
    try:
        from compression.zstd import ZstdDecompressor  # type: ignore[import-not-found,no-redef]
    except ImportError:
        ZstdDecompressor = None  # type: ignore[assignment,misc]

_OPTIONAL = (["br"] if brotli is not None else []) + (["zstd"] if ZstdDecompressor is not None else [])
ACCEPT_ENCODING = ", ".join(["gzip", "deflate", *_OPTIONAL])


@dataclass(frozen=True, slots=True)
class Target:
    """Where one URL goes: the pool key, the request line's target and the Host header."""

    key: tuple[str, str, int]  # (scheme, host, port): one pool of connections each
    target: str
    host_header: str
    # Credentials in the URL (``http://user:pass@host``) become Basic auth, replacing any
    # Authorization header given, as aiohttp does with them.
    authorization: str | None = None
    # The forward proxy the connection goes through (server.upstream_proxy): a CONNECT tunnel
    # for https; for http the request itself goes to the proxy, its URL whole in the request
    # line, with the proxy's credentials.
    proxy: Proxy | None = None
    proxy_authorization: str | None = None


def parse_target(url: str, egress: Egress = NO_EGRESS_PROXY) -> Target:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise BadRequestHead(f"unsupported URL scheme {scheme!r}")
    host = parts.hostname
    if not host:
        raise BadRequestHead("URL has no host")
    default = 443 if scheme == "https" else 80
    port = parts.port or default
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    proxy = egress.proxy_for(scheme, host, port)
    if proxy is None or scheme == "https":
        return Target((scheme, host, port), target, host_header, authorization, proxy)
    absolute = f"http://{host_header}{target}"  # RFC 9112 §3.2.2: the absolute form, to a proxy
    return Target((scheme, host, port), absolute, host_header, authorization, proxy, proxy.authorization)


# The longest URL kept split: a client's query string goes into the URL (up to the ~8 KB
# request line aiohttp reads), and the cache holds each one twice (the URL, the target), so
# 1,024 of them were up to 16 MB. Longer ones are split again each time (~2 µs).
CACHED_URL_MAX = 1024


class TargetCache:
    """URLs repeat (a few upstreams, a few paths): each is split once."""

    __slots__ = ("_egress", "_known", "_max")

    def __init__(self, max_entries: int = 1024, egress: Egress = NO_EGRESS_PROXY) -> None:
        self._known: dict[str, Target] = {}
        self._max = max_entries
        self._egress = egress

    def __call__(self, url: str) -> Target:
        found = self._known.get(url)
        if found is None:
            found = parse_target(url, self._egress)
            if len(url) > CACHED_URL_MAX:
                return found
            if len(self._known) >= self._max:
                self._known.clear()  # a client sweeping query strings must not grow this
            self._known[url] = found
        return found


def request_head(method: str, target: Target, headers: Mapping[str, str], body_length: int | None) -> bytes:
    """The request line and headers, the blank line included. ``Host``, ``Content-Length``
    and the framing are ours; like aiohttp the client adds ``Accept: */*`` and the encodings
    it decodes when not given, and no User-Agent (the client's, if any, is the one sent)."""
    lines = [f"{method} {target.target} HTTP/1.1\r\nHost: {target.host_header}\r\n"]
    if target.authorization is not None:
        lines.append(f"Authorization: {target.authorization}\r\n")
    if target.proxy_authorization is not None:
        lines.append(f"Proxy-Authorization: {target.proxy_authorization}\r\n")
    accept = encoding = False
    for name, value in headers.items():
        if ":" in name:
            raise BadRequestHead(f"header {name[:64]!r} has a line break or colon in it")
        lower = name.lower()
        if lower in _OURS or (lower == "authorization" and target.authorization is not None):
            continue
        accept = accept or lower == "accept"
        encoding = encoding or lower == "accept-encoding"
        lines.append(f"{name}: {value}\r\n")
    if not accept:
        lines.append("Accept: */*\r\n")
    if not encoding:
        lines.append(f"Accept-Encoding: {ACCEPT_ENCODING}\r\n")
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}\r\n")
    lines.append("\r\n")
    head = "".join(lines)
    # Every line above ends in the one CRLF it was written with (the first holds two): a CR or
    # LF inside a header would split it and smuggle what follows as another; a NUL is no more
    # allowed in a field value (RFC 9110 §5.5). One count over the head instead of four
    # searches per header (~0.6 µs a request, issue #38).
    if head.count("\r") + head.count("\n") != 2 * (len(lines) + 1) or "\x00" in head:
        raise BadRequestHead(_split_by(headers, target))
    return head.encode("utf-8", "surrogateescape")


def _split_by(headers: Mapping[str, str], target: Target) -> str:
    """Which line of the head has a line break of its own (only the headers that are sent)."""
    for name, value in headers.items():
        lower = name.lower()
        if lower in _OURS or (lower == "authorization" and target.authorization is not None):
            continue
        if any(c in name or c in value for c in "\r\n\x00"):
            return f"header {name[:64]!r} has a line break or NUL in it"
    return "the request line or its Host header has a line break or NUL in it"


# The framing is the client's to write: a caller's would contradict the body it sends.
_OURS = frozenset({"host", "content-length", "transfer-encoding", "connection", "proxy-authorization"})


class DecodeError(ValueError):
    """A body that does not decode in its Content-Encoding."""


Decoder = Callable[[bytes], bytes]


class _Zlib:
    """gzip (members one after another, as RFC 1952 allows) or deflate (zlib-wrapped, or
    raw as some servers send it: told apart by the first byte's CM, RFC 1950 §2.2, as aiohttp
    does)."""

    __slots__ = ("_d", "_gzip", "_started")

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._started = False
        self._d: zlib._Decompress | None = None

    def __call__(self, data: bytes) -> bytes:
        if not data:
            return b""
        if self._d is None:
            if self._gzip:
                wbits = 16 + zlib.MAX_WBITS
            else:
                wrapped = data[0] & 0x0F == 8  # CM = 8: a zlib header (known from one byte)
                wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
            self._d = zlib.decompressobj(wbits)
        out: list[bytes] = []
        try:
            while data:
                out.append(self._d.decompress(data))
                data = self._d.unused_data if self._d.eof else b""
                if data and self._gzip:
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member
                elif data:
                    break  # bytes after the end of a deflate stream: ignored, as aiohttp does
        except zlib.error as e:
            raise DecodeError(str(e)) from None
        return b"".join(out)


class _Brotli:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        assert brotli is not None
        self._d = brotli.Decompressor()

    def __call__(self, data: bytes) -> bytes:
        try:
            return bytes(self._d.process(data))
        except brotli.error as e:
            raise DecodeError(str(e)) from None


class _Zstd:
    __slots__ = ("_d",)

    def __init__(self) -> None:
        self._d = ZstdDecompressor()

    def __call__(self, data: bytes) -> bytes:
        if not data:
            return b""
        try:
            return bytes(self._d.decompress(data))
        except Exception as e:  # its ZstdError, whichever module provides it
            raise DecodeError(type(e).__name__) from None


def decoder_for(content_encoding: str | None) -> Decoder | None:
    """The body's decoder; None for identity; DecodeError for an encoding this client
    cannot decode. Such a body is refused rather than passed on: the client leg is identity by
    contract (``routing.py`` drops Content-Encoding), so raw bytes would reach the client
    mislabelled. (aiohttp passes them raw; the upstream was never offered that encoding.)"""
    if not content_encoding:
        return None
    encoding = content_encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return _Zlib(gzip=True)
    if encoding == "deflate":
        return _Zlib(gzip=False)
    if encoding == "br" and brotli is not None:
        return _Brotli()
    if encoding == "zstd" and ZstdDecompressor is not None:
        return _Zstd()
    raise DecodeError(f"undecodable Content-Encoding {encoding[:32]!r}")
