"""The writer of translated bodies: orjson's bytes where they say what json's would."""

from __future__ import annotations

import json
import math
from typing import Any

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


# A body's top-level object naming a member twice: the gateway reads the last, an upstream may
# read the first. The name as decoded, whatever the spelling; only the top level counts.
REPEATS = [
    (b'{"model":"allowed","messages":[],"model":"forbidden"}', "model"),
    (b'{"model": "allowed", "messages": [], "model": "forbidden"}', "model"),  # not canonical
    (b'{"model":"allowed","mod\\u0065l":"forbidden"}', "model"),  # an escape decodes to the same name
    (b'{"mod\\u0065l":"a","model":"b"}', "model"),
    (b'{"a\\/b":1,"a/b":2}', "a/b"),
    (b'{"stream":false,"stream":true}', "stream"),
    (b'{"max_tokens":1,"messages":[],"max_tokens":100000}', "max_tokens"),
    (b'{"tools":[],"tools":[{"name":"t"}]}', "tools"),
    (b'{"x":1,"x":1}', "x"),  # the same value twice is still two members
    (b'{"":1,"":2}', ""),
    (b'{"\\u00e9":1,"\xc3\xa9":2}', "\xe9"),
    (b'{"model":"m","user":"\\ud800","model":"n"}', "model"),  # only json reads it (Lenient)
    (b'{"model":"m","seed":123456789012345678901234,"model":"n"}', "model"),  # a huge int
]
UNIQUE = [
    b'{"model":"m","messages":[{"role":"user","content":"say \\"model\\": twice, \\"model\\""}]}',
    b'{"model":"m","messages":[{"role":"user","content":"{\\"model\\":\\"x\\",\\"model\\":\\"y\\"}"}]}',
    b'{"model":"m","tools":[{"input_schema":{"properties":{"model":{},"model":{}}}}]}',  # nested: not ours
    b'{"model":"m","metadata":{"model":"x"},"messages":[{"model":"y"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "\\u00e9"}]}',  # not canonical
    b'{"Model":"m","model":"n"}',  # names are case-sensitive
    b'{"model":"m","mod\\\\u0065l":"n"}',  # an escaped backslash: the name is mod\u0065l, not model
    b'{}',
]


@pytest.mark.parametrize(("body", "name"), REPEATS)
def test_a_top_level_member_named_twice_is_found_by_its_decoded_name(body: bytes, name: str) -> None:
    doc, lenient = jsonbody.loads(body)
    assert jsonbody.repeated_member(body, Lenient(doc) if lenient else doc) == name


@pytest.mark.parametrize("body", UNIQUE)
def test_names_repeated_in_strings_or_nested_objects_are_not(body: bytes) -> None:
    doc, _ = jsonbody.loads(body)
    assert jsonbody.repeated_member(body, doc) is None


@pytest.mark.parametrize(("body", "name"), REPEATS)
def test_admission_refuses_a_repeated_member_naming_it_never_its_values(body: bytes, name: str) -> None:
    refused = parse_json_object(body)
    assert isinstance(refused, Failure) and refused.status == 400 and refused.own is not None
    assert refused.own.code == "duplicate_member" and f"'{name}'" in refused.own.message
    assert b"forbidden" not in refused.own.message.encode() and "allowed" not in refused.own.message


@pytest.mark.parametrize("body", UNIQUE)
def test_admission_takes_a_body_whose_repeats_are_nested_or_in_strings(body: bytes) -> None:
    assert isinstance(parse_json_object(body), dict)


def test_a_repeated_name_is_shown_cut_short_and_writable() -> None:
    long = "n" * 10_000
    refused = parse_json_object(b'{"%s":1,"%s":2}' % (long.encode(), long.encode()))
    assert isinstance(refused, Failure) and refused.own is not None
    assert len(refused.own.message) < 300
    # A lone surrogate (json reads one) cannot be written as UTF-8: shown as U+FFFD.
    refused = parse_json_object(b'{"\\ud800":1,"\\ud800":2}')
    assert isinstance(refused, Failure) and refused.own is not None
    assert "'\ufffd'" in refused.own.message and refused.own.message.encode()


def test_a_canonical_body_is_not_read_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    # What JSON.stringify, serde_json and the openai / anthropic SDKs write: one orjson.dumps
    # shows there is no repeat at any depth; json reads again only what is written otherwise.
    read_again: list[str] = []
    real = jsonbody._PAIRS

    class Counting:
        def decode(self, text: str) -> Any:
            read_again.append(text)
            return real.decode(text)

    monkeypatch.setattr(jsonbody, "_PAIRS", Counting())
    canonical = json.dumps({"model": "m", "messages": [{"role": "user", "content": "é \"model\": x"}]},
                           ensure_ascii=False, separators=(",", ":")).encode()
    assert isinstance(parse_json_object(canonical), dict) and read_again == []
    assert isinstance(parse_json_object(canonical.replace(b":", b": ", 1)), dict) and len(read_again) == 1


def test_a_relayed_body_in_utf16_names_no_model_to_route_by() -> None:
    """json reads UTF-16; no provider does. Routing by a model read from it sent the bytes on
    to the model's upstream as if they were a request for it."""
    from gateway.pipeline.admit import model_of

    body = '{"model": "text-embedding-3-small", "input": "hi"}'
    assert model_of(body.encode(), "application/json") == "text-embedding-3-small"
    assert model_of(body.encode("utf-16"), "application/json") is None
    assert model_of(body.encode("utf-32"), "application/json") is None
