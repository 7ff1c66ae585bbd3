"""The writer of translated bodies: orjson's bytes where they say what json's would."""

from __future__ import annotations

import json
import math

import pytest

from gateway import jsonbody
from gateway.jsonbody import Lenient
from gateway.pipeline.admit import parse_json_object
from gateway.pipeline.outcome import Failure


def test_a_strict_document_is_written_compact_and_reads_back_equal() -> None:
    doc = {"model": "m", "messages": [{"role": "user", "content": "héllo ☃ \u2028"}], "temperature": 0.5}
    out = jsonbody.dumps(doc)
    assert json.loads(out) == doc
    assert b" " not in out.replace(b"h\xc3\xa9llo \xe2\x98\x83 ", b"")  # compact, UTF-8 not escaped
    assert "héllo".encode() in out


def test_what_orjson_refuses_to_write_is_written_by_json() -> None:
    big = {"seed": 2**70}
    assert json.loads(jsonbody.dumps(big)) == big
    surrogate = {"text": "\ud800"}
    assert json.loads(jsonbody.dumps(surrogate)) == surrogate


def test_a_body_only_json_reads_is_marked_and_written_back_as_it_came() -> None:
    doc = parse_json_object(b'{"model": "m", "user": "\\ud800", "seed": 123456789012345678901234}')
    assert isinstance(doc, Lenient)
    out = jsonbody.dumps({**doc}, lenient=True)
    # A huge int (orjson would read a float) as it came; a lone surrogate as U+FFFD, the
    # one thing every writer of the request (rewrite, compression, fingerprint) can encode.
    assert b'"\\ufffd"' in out and b"123456789012345678901234" in out


def test_a_client_body_with_non_finite_numbers_is_refused() -> None:
    # Not JSON (RFC 8259 §6), though Python's json reads them.
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        refused = parse_json_object(b'{"model": "m", "temperature": ' + constant + b"}")
        assert isinstance(refused, Failure) and refused.status == 400


def test_an_answer_with_non_finite_numbers_is_written_back_with_them() -> None:
    # An upstream's answer is relayed, not judged: a translated one keeps what it said.
    doc, lenient = jsonbody.loads(b'{"temperature": NaN, "top_p": Infinity}')
    assert lenient
    out = jsonbody.dumps(doc, lenient=True)
    assert b"NaN" in out and b"Infinity" in out  # orjson would have written null: not what was sent
    again, lenient = jsonbody.loads(out)
    assert lenient and math.isnan(again["temperature"])


def test_a_strict_body_is_not_marked() -> None:
    doc = parse_json_object(b'{"model": "m"}')
    assert type(doc) is dict
    assert jsonbody.loads(b'{"a": 1}') == ({"a": 1}, False)
    with pytest.raises(ValueError):
        jsonbody.loads(b"{nope")


def test_a_written_body_holds_only_its_own_bytes() -> None:
    # orjson's own result keeps its whole write buffer (~4 KB for this one); a request body is
    # held as long as its request, so thousands of open streams would each carry it.
    import tracemalloc

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        bodies = [jsonbody.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "n": i})
                  for i in range(100)]  # fmt: skip
        per_body = (tracemalloc.get_traced_memory()[0] - before) / len(bodies)
    finally:
        tracemalloc.stop()
    assert per_body < 2 * len(bodies[0]) + 100
