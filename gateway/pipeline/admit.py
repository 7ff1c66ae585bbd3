"""What a client sends is checked here, before anything goes upstream.

Bad input gets a clear 4xx in the dialect's error shape and is never forwarded: a body
over ``server.max_body_bytes`` (refused without reading it into memory), a client too
slow to send its body, invalid JSON (NaN and Infinity included), a body that is not an
object or whose object names a member twice, ``messages`` that is not a list, ``model`` /
``stream`` of the wrong type.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from gateway.auth import AuthResult
from gateway.encodings import EncodingProblem, decode_body
from gateway.jsonbody import Lenient, Members, first_repeated, mended, repeated_member
from gateway.keys.issued import may_be_issued
from gateway.keys.registry import credentials, digest
from gateway.live import LIVE
from gateway.pipeline.outcome import Failure, bad_request

if TYPE_CHECKING:
    from gateway.services import Services

# A request whose key a check before its handler's already looked for in the store (the
# ``Expect: 100-continue`` answer, a WebSocket upgrade's): the handler's own check does not
# look again, which held a wrong key's 401 a second poll interval (review).
LOOKED_AGAIN = web.RequestKey("llm_looked_again", bool)
# Outcomes a key issued elsewhere a moment ago can hide behind: unknown, or known beside an
# expired or disabled one (Claude Code sends ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY both).
_MAY_HIDE_NEW = frozenset({"invalid", "expired", "disabled"})


async def identify(svc: Services, headers: Mapping[str, str], query_key: str | None,
                   look: bool = True) -> AuthResult:  # fmt: skip
    """The gateway key a request presents (``ClientAuth.check``). One shaped as an issued key
    and not known here is looked for in the store once more before it is refused
    (``IssuedKeys.look_again``): it may have been issued on another replica since this one
    last read it. ``look`` false: a check before this one looked already."""
    result = svc.auth.check(headers, query_key, svc.wall())
    if look and result.outcome in _MAY_HIDE_NEW \
            and _may_be_new(svc, [*credentials(headers), query_key or ""]):  # fmt: skip
        await svc.issued.look_again()  # type: ignore[union-attr]  # _may_be_new: not None
        result = svc.auth.check(headers, query_key, svc.wall())  # the ring the read put in force
    return result


def _may_be_new(svc: Services, presented: list[str]) -> bool:
    """Whether one of these keys could be one issued on another replica that this one has not
    read yet: issued-shaped and unknown here, where issued keys are taken at all (beside named
    keys, as ``ClientAuth.from_config`` takes them, whatever this replica's own ``max_issued``:
    one that issues none still serves those issued elsewhere; a replica of flat keys only
    never puts one in its ring)."""
    if svc.issued is None or not svc.cfg.keys:
        return False
    ring = svc.auth.ring.by_digest
    return any(may_be_issued((p,)) and digest(p) not in ring for p in presented if p)


# The query parameter a route's API takes a key in (Gemini's ``key``), for a request.
KeyParam = Callable[[web.Request], str | None]


def expect_continue(key_param: KeyParam) -> Callable[[web.Request], Awaitable[None]]:
    """The route's answer to ``Expect: 100-continue``: a 100 only for a body the handler will
    read. A client announcing an oversized body, or holding no gateway key (the same digest
    lookup authentication makes, so nothing a handler would let in is held back), gets no 100:
    the handler answers its 413 or 401 at once, with the whole header contract, and the client
    never uploads the body for nothing."""

    async def expect(request: web.Request) -> None:
        # Before observe: the config new requests get (the handler's own check reads its request's).
        svc = request.app[LIVE].services
        if request.headers.get("Expect", "").lower() != "100-continue":
            return  # an unknown expectation is ignored, as RFC 9110 §10.1.1 allows
        declared = request.content_length
        if declared is not None and declared > svc.cfg.server.max_body_bytes:
            return
        if svc.auth.required:
            param = key_param(request)
            query_key = request.query.get(param) if param else None
            if not (await identify(svc, request.headers, query_key)).ok:
                request[LOOKED_AGAIN] = True
                return
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0

    return expect


async def read_body(request: web.Request, max_bytes: int, idle_s: float, total_s: float) -> bytes | Failure:
    """The request's body: each wait for more of it at most ``idle_s``, all of them together at
    most ``total_s`` (the request's deadline). With the first bound alone a client trickling a
    byte just inside ``idle_s`` held its connection and a request in flight for as long as it
    liked (20 such clients held theirs past a 20 s deadline; at the default 120 s, a byte every
    two minutes kept a 32 MiB body open for weeks), and the config generation it began on with it."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        return too_large(max_bytes)
    parts: list[bytes] = []
    size = 0
    content = request.content
    give_up_at: float | None = None
    try:
        while not content.at_eof():
            chunk = content.read_nowait()  # what has arrived already needs no timer
            if not chunk:
                loop = asyncio.get_running_loop()
                if give_up_at is None:
                    give_up_at = loop.time() + total_s
                left = give_up_at - loop.time()
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(min(idle_s, left)):
                    chunk = await content.readany()
            if not chunk:
                break
            size += len(chunk)
            if size > max_bytes:
                return too_large(max_bytes)
            parts.append(chunk)
    except TimeoutError:
        late = give_up_at is not None and asyncio.get_running_loop().time() >= give_up_at
        waited = total_s if late else idle_s
        message = f"the request body did not arrive within {waited:g}s"
        return bad_request(message, "request_timeout", status=408)
    body = parts[0] if len(parts) == 1 else b"".join(parts)
    encoding = request.headers.get("Content-Encoding")
    if not encoding:
        return body
    decoded = decode_body(body, encoding, max_bytes)
    if isinstance(decoded, EncodingProblem):
        return bad_request(decoded.message, decoded.code, status=decoded.status)
    return decoded


def too_large(max_bytes: int) -> Failure:
    return bad_request(
        f"request body is larger than the gateway's limit of {max_bytes} bytes",
        "request_too_large",
        status=413,
    )


_UTF8 = ("utf-8", "utf-8-sig")  # (a byte order mark is read past, as json does)


def parse_json_object(body: bytes) -> dict[str, Any] | Failure:
    if not body.strip():
        return bad_request("the request body is empty; a JSON object is required", "invalid_json")
    try:
        doc = orjson.loads(body)  # fast; stricter than json, so any refusal is re-judged below
    except orjson.JSONDecodeError:
        doc = None
    if doc is None and json.detect_encoding(body) not in _UTF8:
        # json reads UTF-16 and UTF-32 as well, and the body would go upstream as it came: "JSON
        # text exchanged between systems that are not part of a closed ecosystem MUST be
        # encoded using UTF-8" (RFC 8259 §8.1), and orjson, as providers' parsers, reads nothing else.
        return bad_request("the request body is not valid UTF-8", "invalid_json")
    try:
        if doc is None:
            # A lone surrogate ("\ud83d": a JavaScript client cut a string mid-emoji, as Claude
            # Code may a long tool output) is read as U+FFFD: as a string it could not be
            # encoded anywhere the request is rewritten, fingerprinted or compressed.
            doc = mended(json.loads(body, parse_constant=_not_json, parse_float=_finite))
            if isinstance(doc, dict):
                doc = Lenient(doc)  # a translation writes it back with json, as it was read
    except UnicodeDecodeError:
        return bad_request("the request body is not valid UTF-8", "invalid_json")
    except RecursionError:
        return _too_deep()
    except ValueError as e:
        return bad_request(f"the request body is not valid JSON: {_short(e)}", "invalid_json")
    if not isinstance(doc, dict):
        return bad_request("the request body must be a JSON object", "invalid_body")
    try:
        repeated = repeated_member(body, doc)
    except RecursionError:  # orjson reads 1024 levels, json about 990
        return _too_deep()
    return doc if repeated is None else repeated_refusal(repeated)


def repeated_refusal(name: str) -> Failure:
    """A body whose top-level object names ``name`` twice: the gateway reads the last of them,
    and an upstream sent the body as it came may read the first (``jsonbody.repeated_member``),
    so neither is admitted. Named, never a value (the name as decoded, cut short)."""
    shown = mended(name)
    shown = shown if len(shown) <= 64 else shown[:64] + "..."
    return bad_request(f"the request body names the member '{shown}' more than once; names in a JSON object "
                       "should be unique (RFC 8259 §4), and servers differ on which one they read",
                       "duplicate_member")


def refuses_repeats(failure: Failure) -> bool:
    """Whether ``failure`` is ``repeated_refusal``'s."""
    return failure.own is not None and failure.own.code == "duplicate_member"


def _too_deep() -> Failure:
    return bad_request("the request body is nested too deeply", "invalid_json")


def _not_json(constant: str) -> Any:
    # RFC 8259 §6: "Numeric values that cannot be represented in the grammar below (such as
    # Infinity and NaN) are not permitted." Python's json reads them (orjson does not): a
    # provider may refuse them, or read them as something the client did not mean.
    raise ValueError(f"{constant} is not a JSON number (RFC 8259 §6)")


def _finite(number: str) -> float:
    # 1e400 is in JSON's grammar but no double: json reads it as inf, which a rewritten request
    # would then send as the non-JSON Infinity (orjson refuses it, and so does this).
    value = float(number)
    if math.isinf(value):
        raise ValueError(f"the number {number[:40]} is beyond the range of a double")
    return value


def _short(e: ValueError) -> str:
    # json's messages give a position but never echo the input, so they are safe to return.
    return str(e).split("\n", 1)[0][:200]


def is_json(content_type: str) -> bool:
    """Whether a Content-Type names JSON: ``application/json`` or a ``+json`` type (RFC 6839
    §3.1), whatever its parameters. A search for "json" took ``text/plain; a=json``."""
    media = content_type.partition(";")[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def model_of(body: bytes, content_type: str) -> str | Failure | None:
    """Best-effort model name of a non-chat request, for routing; an error only for a body whose
    object names a member twice (``repeated_refusal``), which goes upstream as it came."""
    if not is_json(content_type) or not body or len(body) > 1024 * 1024:
        return None
    if json.detect_encoding(body) not in _UTF8:
        return None  # nothing to route by in what no provider reads (it refuses it itself)
    try:
        members = json.loads(body, object_pairs_hook=Members)
    except (ValueError, RecursionError):
        return None
    if not isinstance(members, Members):
        return None
    repeated = first_repeated(members)
    if repeated is not None:
        return repeated_refusal(repeated)
    model = dict(members).get("model")
    # Read as the rest of admission reads a body: a lone surrogate cannot be written as UTF-8,
    # and the name goes on to a metric label, a log line and a routing cache.
    return mended(model) if isinstance(model, str) else None
