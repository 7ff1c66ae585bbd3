"""JSON bodies the gateway writes itself (translated requests and answers): orjson, ~25x
faster than json on an agent-sized request (a Claude Code request: 451 → 16 µs), except
where only Python's json is exact.

orjson reads strictly and writes strictly: it refuses NaN/Infinity and lone surrogates on
reading (admission re-judges a refused body with json, refusing NaN/Infinity as orjson does:
they are not JSON), and on writing refuses lone surrogates and integers beyond 64 bits but
writes a non-finite float (in an upstream's answer) as ``null``, which would change what was
sent. So a document that only json could read is marked (``Lenient``) and written back by
json, as it was read (but for lone surrogates, read as U+FFFD: ``mended``); everything else
goes through orjson.
A known limit: orjson reads an integer beyond 64 bits (past -2**63 or 2**64 - 1) as a float,
without an error, so a body carrying one that the gateway rewrites (translated, tool outputs
cut) sends it on as a float; unchanged bodies go upstream byte for byte, and so does a chat
stream asked for its usage (the member is written into the client's bytes: pipeline/asked.py). Detecting it
with a scan costs ~100 µs per 7 KB (a regex), too much for every request.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson


class Lenient(dict[str, Any]):
    """A JSON object only Python's json reads (a huge integer; in an upstream's answer, NaN or
    Infinity too): write it with json."""


def dumps(doc: Mapping[str, Any], *, lenient: bool = False) -> bytes:
    if not lenient:
        try:
            # orjson hands back its whole write buffer as the bytes object (4.8 KB for a 7-byte
            # document, 312 KB for Claude Code's 76 KB request, by tracemalloc), and a request
            # body lives as long as its request (a held-open stream, a retry): an exact copy
            # costs 0.2 µs small, 6 µs at 76 KB.
            return bytes(memoryview(orjson.dumps(doc)))
        except TypeError:  # orjson.JSONEncodeError: a huge int, a lone surrogate, a non-str key
            pass
    # ASCII escapes: a lone surrogate (which json reads from "\ud800") cannot be UTF-8 encoded.
    return json.dumps(doc, separators=(",", ":")).encode()


def loads(body: bytes) -> tuple[Any, bool]:
    """The document and whether only json could read it (``ValueError`` when neither can)."""
    try:
        return orjson.loads(body), False
    except orjson.JSONDecodeError:
        return mended(json.loads(body)), True


def mended(doc: Any) -> Any:
    """``doc`` with every lone UTF-16 surrogate in its strings replaced (U+FFFD), pairs joined.
    JavaScript slices strings in UTF-16 code units: a server may end one event's text on the
    first half of a pair and begin the next one's with the second, and a client may cut a long
    string mid-emoji. A lone half can be encoded as no UTF-8: a translated event holding one
    could not be written (the client's connection was cut mid-answer), and a request holding
    one could not be rewritten, fingerprinted or compressed (500s)."""
    if isinstance(doc, str):
        if any("\ud800" <= c <= "\udfff" for c in doc):
            return doc.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return doc
    if isinstance(doc, dict):
        return {mended(k): mended(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [mended(v) for v in doc]
    return doc
