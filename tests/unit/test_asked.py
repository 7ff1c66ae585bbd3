"""The request document is not held while the upstream works (``Inbound.drop``,
``pipeline/asked.py``): what the stages after the send read again must equal what admission
made, and the bytes that go upstream must be what they were."""

from __future__ import annotations

import json

from gateway.apis import GEMINI, OPENAI_CHAT
from gateway.apis.base import Inbound, Where
from gateway.jsonbody import Lenient
from gateway.pipeline.admit import parse_json_object
from gateway.pipeline.asked import SPLICE_FROM, Asked

LONG = "a long conversation " * 500  # above SPLICE_FROM: a body worth not keeping twice
CHAT = (b'{"model": "m", "messages": [{"role": "user", "content": "hi \\u00e9 %s"}], "n": 1, '
        b'"seed": 18446744073709551617}\n' % LONG.encode())


def _admit(body: bytes, dialect=OPENAI_CHAT, where: Where | None = None) -> Inbound:
    doc = parse_json_object(body)
    assert isinstance(doc, dict)
    inbound = dialect.admit(body, doc, where) if where is not None else dialect.admit(body, doc)
    assert isinstance(inbound, Inbound)
    return inbound


def test_a_dropped_document_is_read_again_equal_and_the_unchanged_body_is_the_clients() -> None:
    inbound = _admit(CHAT)
    before = inbound.payload
    asked = Asked(inbound, OPENAI_CHAT, stream_usage=True, client=inbound.payload)
    assert asked.body() is CHAT and not asked.changed  # not a stream: nothing to ask for
    asked.drop()
    assert inbound.held is None
    again = asked.payload()
    assert again == before and again is not before and again is inbound.payload
    assert inbound.size == len(CHAT)


def test_a_stream_asked_for_its_usage_sends_the_clients_bytes_with_the_member_and_keeps_one_body() -> None:
    body = CHAT[:-2] + b', "stream": true}\n'
    inbound = _admit(body)
    admitted = dict(inbound.payload)
    asked = Asked(inbound, OPENAI_CHAT, stream_usage=True, client=inbound.payload)
    sent = asked.body()
    assert asked.strip_usage and sent == body.rstrip()[:-1] + b',"stream_options":{"include_usage":true}}'
    # The integer beyond 64 bits goes on as the client wrote it (a rewrite would send a float).
    assert b"18446744073709551617" in sent
    assert json.loads(sent) == {**json.loads(body), "stream_options": {"include_usage": True}}
    assert inbound.body is sent and inbound.size == len(body)  # the client's own bytes are not kept
    asked.drop()
    assert inbound.payload == admitted and "stream_options" not in inbound.payload
    assert asked.payload() == {**admitted, "stream_options": {"include_usage": True}}
    assert asked.body() is sent


def test_a_small_stream_is_written_again() -> None:
    body = b'{"model": "m", "messages": [], "stream": true}'
    inbound = _admit(body)
    sent = Asked(inbound, OPENAI_CHAT, stream_usage=True, client=inbound.payload).body()
    assert sent == b'{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}'
    assert inbound.body is body and len(body) < SPLICE_FROM


def test_a_stream_whose_options_are_null_is_written_again_not_spliced() -> None:
    body = b'{"model": "m", "messages": [], "stream": true, "stream_options": null, "user": "%s"}' % LONG.encode()
    inbound = _admit(body)
    asked = Asked(inbound, OPENAI_CHAT, stream_usage=True, client=inbound.payload)
    sent = asked.body()
    assert json.loads(sent)["stream_options"] == {"include_usage": True} and sent.count(b"stream_options") == 1
    assert inbound.body is body


def test_a_payload_a_stage_changed_is_kept_and_sent_as_written() -> None:
    inbound = _admit(CHAT)
    capped = {**inbound.payload, "messages": [{"role": "user", "content": "cut"}]}
    asked = Asked(inbound, OPENAI_CHAT, stream_usage=True, client=capped)
    asked.drop()
    assert asked.client() is capped and json.loads(asked.body())["messages"][0]["content"] == "cut"
    assert asked.payload()["messages"] == capped["messages"]


def test_a_lenient_document_stays_lenient_when_read_again() -> None:
    body = b'{"model": "m", "seed": 123456789012345678901234, "messages": [{"role": "user", "content": "\\ud800"}]}'
    inbound = _admit(body)
    assert isinstance(inbound.payload, Lenient)
    inbound.drop()
    assert inbound.lenient and isinstance(inbound.payload, Lenient)
    assert inbound.payload["seed"] == 123456789012345678901234
    assert inbound.payload["messages"][0]["content"] == "\ufffd"  # a lone surrogate read as U+FFFD


def test_a_gemini_document_gets_its_path_fields_again() -> None:
    body = b'{"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}'
    where = Where({"model": "gemini-2.5-flash", "method": "streamGenerateContent"}, {"alt": "sse"})
    inbound = _admit(body, GEMINI, where)
    before = inbound.payload
    inbound.drop()
    assert inbound.payload == before and before["model"] == "gemini-2.5-flash" and before["stream"] is True
