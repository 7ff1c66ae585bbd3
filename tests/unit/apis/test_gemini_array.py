"""The JSON-array framing of a Gemini stream (gateway/apis/gemini/array.py), without a server."""

from __future__ import annotations

import json

from gateway.apis.gemini.array import as_array, wants_array


def test_only_a_stream_without_alt_sse_wants_the_array() -> None:
    assert wants_array("streamGenerateContent", None) and wants_array("streamGenerateContent", "json")
    assert not wants_array("streamGenerateContent", "sse") and not wants_array("generateContent", None)


def test_a_whole_sse_answer_becomes_its_events_as_elements() -> None:
    body = b'data: {"a":1}\r\n\r\n: keep-alive\r\n\r\ndata: {"b":2}\r\n\r\n'
    framed = as_array(body, "text/event-stream")
    assert framed == b'[{"a":1}\n,\r\n{"b":2}\n]' and json.loads(framed) == [{"a": 1}, {"b": 2}]
    assert as_array(b"", "text/event-stream") == b"[]"


def test_an_error_document_is_wrapped_and_anything_else_left_alone() -> None:
    assert json.loads(as_array(b'{"error": {"code": 400}}', "application/json")) == [{"error": {"code": 400}}]
    assert as_array(b"<html>bad gateway</html>", "text/html") == b"<html>bad gateway</html>"
