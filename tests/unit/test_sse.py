import json
import random

import pytest

from gateway.apis.chat.wire import is_visible
from gateway.apis.chat.wire import usage_doc as usage_of
from gateway.sse import (
    EventSplitter,
    EventTooLarge,
    error_payload,
    error_status,
    event_error_fields,
    parse_event,
)


def ev(obj: object) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_splitter_reassembles_events_across_arbitrary_chunks() -> None:
    stream = ev({"a": 1}) + b": keep-alive\n\n" + ev({"b": 2}) + b"data: [DONE]\r\n\r\n"
    for size in (1, 2, 3, 7, 64, len(stream)):
        s = EventSplitter()
        out: list[bytes] = []
        for i in range(0, len(stream), size):
            out += s.feed(stream[i : i + size])
        assert b"".join(out) == stream
        assert len(out) == 4
        assert s.pending == b""


def test_a_large_event_in_many_pieces_comes_out_whole_and_what_is_pending_stays_readable() -> None:
    big = ev({"type": "response.created", "tools": ["x" * 100] * 200})  # no line end inside its data
    stream = ev({"a": 1}) + big + b"data: [DONE]\r\n\r\n" + b"data: {\"tail\":"
    for size in (1, 5, 999, 4096):
        s = EventSplitter()
        out: list[bytes] = []
        for i in range(0, len(stream), size):
            out += s.feed(stream[i : i + size])
            assert b"".join(out) + s.pending == stream[: i + size]  # pending may be read at any time
        assert out == [ev({"a": 1}), big, b"data: [DONE]\r\n\r\n"]
        assert s.pending == b'data: {"tail":'


def delta(d: dict, finish: str | None = None) -> bytes:
    return ev({"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]})


@pytest.mark.parametrize(
    ("raw", "visible"),
    [
        (delta({"role": "assistant"}), False),
        (delta({"role": "assistant", "content": ""}), False),
        (delta({}), False),
        (b": comment\n\n", False),
        (ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 1}}), False),
        (delta({"content": "Hi"}), True),
        (delta({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}), True),
        (delta({"reasoning_content": "thinking"}), True),
        (delta({}, "stop"), True),
        (b"data: [DONE]\n\n", True),
        (b"data: not json\n\n", True),
    ],
)
def test_visible_events(raw: bytes, visible: bool) -> None:
    assert is_visible(parse_event(raw)) is visible


def test_error_events_in_both_dialects() -> None:
    openai_style = ev({"error": {"message": "overloaded", "type": "server_error", "code": 503}})
    anthropic_style = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    content_mentioning_error = delta({"content": "error"})
    p = error_payload(parse_event(openai_style))
    assert p is not None and error_status(p) == 503
    assert error_payload(parse_event(anthropic_style)) is not None
    assert error_payload(parse_event(content_mentioning_error)) is None


@pytest.mark.parametrize(
    ("error_type", "status"),
    [("validation", 422), ("tool_error", 422), ("overloaded", 429), ("generation", 424),
     ("incomplete_generation", 500), ("not_a_tgi_type", None), (None, None)],
)
def test_tgi_stream_errors_keep_the_status_tgi_gives_their_type(error_type: str | None, status: int | None) -> None:
    # TGI's stream error is {"error": "<text>", "error_type": ...} (router/src/server.rs); read
    # as an object-less error it was a 500 with the gateway's own words instead of TGI's.
    doc = {"error": "Input validation error: `temperature` must be strictly positive"}
    if error_type is not None:
        doc["error_type"] = error_type
    p = error_payload(parse_event(ev(doc)))
    assert p is not None and error_status(p) == status
    assert event_error_fields(p) == (doc["error"], error_type)


def test_an_error_event_without_a_message_says_so_in_the_callers_words() -> None:
    assert event_error_fields({"error": ""}, "fallback") == ("fallback", None)
    assert event_error_fields({"error": {"code": 500}}, "fallback") == ("fallback", "500")


def test_usage_chunk_is_found() -> None:
    doc = usage_of(parse_event(ev({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})))
    assert doc is not None and doc["usage"]["completion_tokens"] == 4
    assert usage_of(parse_event(delta({"content": "the word usage"}))) is None


def test_an_event_is_parsed_once_whatever_the_reader_asks_of_it(monkeypatch) -> None:
    from gateway.apis.base import EventKind
    from gateway.apis.chat.wire import ChatStreamReader
    from tests.parse_count import count_parses

    parsed = count_parses(monkeypatch)
    reader = ChatStreamReader(strip_usage=False)
    reader.track()  # continuation tracking reads every event too
    role = b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
    text = b'data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n'
    assert reader.kind(role, committed=False) is EventKind.CONTENTLESS  # malformed? whose? visible?
    assert reader.kind(text, committed=False) is EventKind.VISIBLE
    assert len(parsed) == 2 and reader.identity == ("c1", "m") and reader.shown_text() == "Hi"
    event = parse_event(text)
    assert event.json() is event.json() and event == parse_event(text)


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\u0085"])
def test_line_separators_inside_a_json_string_do_not_end_the_line(separator: str) -> None:
    # JSON allows them unescaped (serde_json and pydantic write them so); SSE lines end at
    # CR, LF or CRLF only. Read as line ends, they made a valid event malformed.
    from gateway.apis.base import EventKind
    from gateway.apis.chat.wire import ChatStreamReader
    from gateway.apis.responses.wire import ResponsesStreamReader

    text = f"one{separator}two"
    chunk = ('data: {"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"' + text + '"}}]}\n\n').encode()
    assert parse_event(chunk).json()["choices"][0]["delta"]["content"] == text
    assert parse_event(chunk.replace(b"\n", b"\r\n")).json()["choices"][0]["delta"]["content"] == text
    reader = ChatStreamReader(strip_usage=False)
    reader.track()  # continuation on: every event is checked for being well-formed
    assert reader.kind(chunk, committed=True) is EventKind.VISIBLE and reader.error is None
    assert reader.partial() == text
    done = {"type": "response.completed", "sequence_number": 5, "response": {
        "id": "resp_1", "status": "completed", "output": [{"type": "message", "content": [
            {"type": "output_text", "text": text}]}], "usage": {"input_tokens": 3, "output_tokens": 2}}}
    raw = ("event: response.completed\ndata: " + json.dumps(done, ensure_ascii=False) + "\n\n").encode()
    responses = ResponsesStreamReader()
    assert responses.kind(raw, committed=True) is EventKind.FINAL  # not a stream cut short
    assert responses.usage == {"prompt": 3, "completion": 2}


@pytest.mark.parametrize("pieces", [
    [b"data: " + b"x" * 40, b"x" * 40],  # no line end at all (kept aside, then joined)
    [b"data: " + b"x" * 40 + b"\n", b"data: " + b"y" * 40 + b"\n"],  # lines, never the blank one
    [b"data: a\r\n", b"x" * 100],  # after a CR the general path
])  # fmt: skip
def test_an_event_that_grows_past_the_limit_is_refused(pieces: list[bytes]) -> None:
    # A 400 MiB event without a line break took the gateway to 2 GB: an event is held whole
    # until its end, so one past the limit ends the stream instead.
    splitter = EventSplitter(limit=64)
    with pytest.raises(EventTooLarge):
        for piece in pieces:
            splitter.feed(piece)


def test_events_under_the_limit_pass_however_much_the_stream_carries() -> None:
    splitter = EventSplitter(limit=64)
    out = []
    for _ in range(100):  # the limit is per event, not per stream
        out += splitter.feed(b"data: " + b"x" * 30 + b"\n\n")
    out += splitter.feed(b"data: " + b"y" * 50)  # pending, still under it
    assert len(out) == 100 and splitter.pending == b"data: " + b"y" * 50


def test_events_that_end_before_an_oversized_one_are_given_first() -> None:
    splitter = EventSplitter(limit=64)
    events = splitter.feed(b"data: a\n\n" + b"data: " + b"x" * 100)
    assert events == [b"data: a\n\n"]
    with pytest.raises(EventTooLarge):
        splitter.feed(b"x")
    with pytest.raises(EventTooLarge):
        splitter.pending  # noqa: B018 (the stream may end there)
    with pytest.raises(EventTooLarge):
        splitter.check()  # (the caller that leaves the rest to the next feed)


@pytest.mark.parametrize("committed", [False, True])
def test_a_chat_stream_ends_where_a_finish_reason_or_done_says_so_not_where_its_bytes_quote_them(
    committed: bool,
) -> None:
    """An answer quoting ``data: [DONE]`` (code an agent writes), a tool call whose arguments
    hold it, and the ``"finish_reason": ""`` some servers put on every chunk (ollama/ollama#4357,
    sgl-project/sglang#3912) were taken for the answer's end: a cut after them was relayed as
    complete (audit)."""
    from gateway.apis.base import EventKind
    from gateway.apis.chat.wire import ChatStreamReader

    def chunk(delta: dict[str, object], finish: str | None = None, spaced: bool = False) -> bytes:
        doc = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(doc, separators=None if spaced else (",", ":")).encode() + b"\n\n"

    reader = ChatStreamReader(strip_usage=False)
    quoting = chunk({"content": "if line == 'data: [DONE]': break"})
    assert reader.kind(quoting, committed=committed) is EventKind.VISIBLE
    call = chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "[DONE] P'}}]})
    assert reader.kind(call, committed=committed) is EventKind.VISIBLE
    assert reader.kind(chunk({"content": "Hi"}, ""), committed=committed) is EventKind.VISIBLE
    assert reader.kind(chunk({"content": "Hi"}, "", spaced=True), committed=committed) is EventKind.VISIBLE
    # What does end it.
    assert reader.kind(chunk({}, "stop"), committed=committed) is EventKind.FINAL
    assert reader.kind(chunk({}, "tool_calls", spaced=True), committed=committed) is EventKind.FINAL
    assert reader.kind(b"data: [DONE]\n\n", committed=committed) is EventKind.FINAL


def _walked(raw: bytes) -> tuple[str | None, str | None]:
    """The SSE grammar's walk, line by line (WHATWG HTML, "Interpreting an event stream"):
    what ``parse_event``'s shortcut for the usual shapes must agree with."""
    lines = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    name, data = None, []
    for line in lines:
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        value = value[1:] if value.startswith(b" ") else value
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    return name, b"\n".join(data).decode("utf-8", "replace") if data else None


@pytest.mark.parametrize("raw", [
    b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n',  # Anthropic's shape
    b'data: {"choices":[]}\n\n',  # chat's
    b"data: [DONE]\n\n",
    b"event: a:b\ndata:  two spaces\n\n",  # a colon in the name, a space kept in the data
    b"event:x\ndata:y\n\n",  # no space after the colons: the walk's
    b"event: x\ndata: y\n",  # no blank line (a stream's last bytes)
    b"data: a\ndata: b\n\n",  # two data lines
    b": keep-alive\n\n",
    b"event: x\n\n",
    b"id: 7\ndata: y\n\n",
    b"event: e\xff\ndata: \xfe\n\n",  # bytes that are no UTF-8
    b"event: x\r\ndata: y\r\n\r\n",
])  # fmt: skip
def test_the_usual_shapes_read_as_the_walk_reads_them(raw: bytes) -> None:
    event = parse_event(raw)
    assert (event.name, event.data) == _walked(raw)
    assert event.raw is raw


def test_any_arrangement_of_the_grammars_pieces_reads_as_the_walk_reads_it() -> None:
    pieces = [b"event: ", b"event:", b"data: ", b"data:", b":", b" ", b"x", b"{}", b"\n", b"\r", b"\xff",
              b"id: 1", b"[DONE]", b""]  # fmt: skip
    draw = random.Random(38)
    for _ in range(20_000):
        raw = b"".join(draw.choice(pieces) for _ in range(draw.randint(0, 7))) + draw.choice([b"", b"\n\n"])
        event = parse_event(raw)
        assert (event.name, event.data) == _walked(raw), raw
