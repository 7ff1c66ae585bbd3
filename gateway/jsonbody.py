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


def dumps(doc: Mapping[str, Any], *, lenient: bool = False, held: bool = True) -> bytes:
    """``held``: the bytes live as long as their request (a request body); False for an answer,
    written to the client at once and dropped."""
    if not lenient:
        try:
            if not held:
                return orjson.dumps(doc)
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


class Members(list[tuple[str, Any]]):
    """An object's members as written, in order, a repeated name kept each time
    (``json.loads(..., object_pairs_hook=Members)``)."""


# Every object as the plain list of its members: ``list`` is called from C, where a subclass
# costs a Python-level construction per object (the whole read 1.7x orjson's, against 1x).
_PAIRS = json.JSONDecoder(object_pairs_hook=list)


def repeated_member(body: bytes, doc: Mapping[str, Any]) -> str | None:
    """The first name the top-level object of ``body`` gives to more than one member, or None;
    ``doc`` is ``body`` as admission read it. Names are compared as decoded: ``"mod\\u0065l"``
    repeats ``"model"`` (every parser decodes escapes before it compares).

    RFC 8259 §4: "The names within an object SHOULD be unique", and where they are not "the
    behavior of software that receives such an object is unpredictable". orjson and json keep
    the last; so do Go's encoding/json ("The second value for key o overwrites the first during
    Unmarshal", https://github.com/dvyukov/go-fuzz-corpus/issues/3) and JavaScript's JSON.parse
    ("lexically preceding values for the same key shall be overwritten",
    https://262.ecma-international.org/14.0/#sec-internalizejsonproperty).
    simdjson's On Demand ``find_field`` walks an object in order and stops at the first match
    (https://github.com/simdjson/simdjson/issues/1491: with several matching keys "this would
    return just one of them"), and serde's derived structs refuse the body ("duplicate field
    `limit`", https://github.com/serde-rs/serde/issues/1190). A body forwarded as it came could
    so be served a model, a stream flag or a token limit other than the one the gateway checked
    the key's rules, budget and routing against.

    Exact and cheap for what real clients send: a body that is the compact encoding of its own
    document, byte for byte (JSON.stringify, serde_json, the openai and anthropic SDKs), holds
    no repeated name at any depth, and one ``orjson.dumps`` shows it (~20 µs for Claude Code's
    76 KB request, a quarter of reading it). Any other body (indented, ``\\u``-escaped, Go's
    ``\\u003c``) is read again by json, keeping every member (about as long as orjson's read).
    ``RecursionError`` for a body nested deeper than json reads."""
    if type(doc) is dict:  # not Lenient: only json could read that one, and orjson cannot write it
        try:
            if orjson.dumps(doc) == body:
                return None
        except TypeError:  # nested deeper than orjson writes (255)
            pass
    # json.loads would build a decoder for each call (~1.5 µs): one, decoding as json.loads does.
    # ``doc`` is an object, so what this reads at the top is its list of members.
    members = _PAIRS.decode(body.decode(json.detect_encoding(body), "surrogatepass"))
    return first_repeated(members) if isinstance(members, list) else None


def first_repeated(members: list[tuple[str, Any]]) -> str | None:
    seen: set[str] = set()
    for name, _ in members:
        if name in seen:
            return name
        seen.add(name)
    return None


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
