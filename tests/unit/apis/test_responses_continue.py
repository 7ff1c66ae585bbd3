"""The Responses continuation request and splice, without I/O."""

import json

from gateway.apis.base import EventKind
from gateway.apis.responses.resume import continuation, splicer
from gateway.apis.responses.wire import ResponsesStreamReader
from gateway.sse import parse_event
from tests.fakeupstream import Seq, responses_deltas, responses_head, sse


def test_a_string_input_becomes_a_user_turn_before_the_in_progress_answer() -> None:
    body = continuation({"model": "m", "input": "hi", "stream": True}, "Hel", "continue_final_message")
    assert body == {"model": "m", "stream": True, "input": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel", "status": "in_progress"}]}


def test_the_clients_own_in_progress_prefill_is_extended_not_repeated() -> None:
    items = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Sure: ", "status": "in_progress"}]
    body = continuation({"input": items}, "one", "continue_final_message")
    assert body is not None and body["input"][-1]["content"] == "Sure: one" and len(body["input"]) == 2


def test_other_modes_and_shapes_are_not_continued() -> None:
    for mode in ("prefill", "prefix", "none"):
        assert continuation({"input": "hi"}, "Hel", mode) is None
    assert continuation({"input": {"bad": 1}}, "Hel", "continue_final_message") is None
    assert continuation({"input": "hi"}, "", "continue_final_message") is None


def reader_after(*events: bytes) -> ResponsesStreamReader:
    """As the relay reads them: held back until the first visible event, then committed."""
    r = ResponsesStreamReader()
    r.track()
    committed = False
    for raw in events:
        committed = r.kind(raw, committed=committed) is EventKind.VISIBLE or committed
    return r


def test_only_an_open_text_part_without_a_tool_call_is_continuable() -> None:
    head = [*responses_head(), *responses_deltas(("Hel", "lo"))]
    assert reader_after(*head).partial() == "Hello"
    tool = sse("response.output_item.added", {"type": "response.output_item.added", "output_index": 1,
                                              "item": {"type": "function_call", "id": "fc"}})
    assert reader_after(*head, tool).partial() is None
    refusal = sse("response.refusal.delta", {"type": "response.refusal.delta", "output_index": 0, "delta": "No"})
    assert reader_after(*head, refusal).partial() is None
    closed = sse("response.content_part.done", {"type": "response.content_part.done", "output_index": 0,
                                                "item_id": "msg_fake1", "content_index": 0, "part": {}})
    assert reader_after(*head, closed).partial() is None
    assert reader_after(*responses_head()).partial() is None  # nothing shown yet


def test_items_after_the_continued_message_are_numbered_after_the_originals() -> None:
    reader = reader_after(*responses_head(), *responses_deltas(("Hel",)))
    splice = splicer(reader, "Hel")
    seq = Seq()
    msg = {"id": "m2", "type": "message", "role": "assistant", "content": []}
    call = {"id": "fc_9", "type": "function_call", "call_id": "c", "name": "ls", "arguments": "{}"}
    out = [splice(raw) for raw in (
        seq("response.output_item.added", output_index=0, item=msg),
        seq("response.content_part.added", item_id="m2", output_index=0, content_index=0, part={"type": "output_text"}),
        seq("response.output_text.delta", item_id="m2", output_index=0, content_index=0, delta="lo"),
        seq("response.output_item.added", output_index=1, item=call),
        seq("response.output_item.done", output_index=1, item=call),
        seq("response.completed", response={"id": "resp_other", "output": [], "usage": {"output_tokens": 2}}),
    )]  # fmt: skip
    assert out[0] == out[1] == b""
    docs = [json.loads(parse_event(raw).data or "") for raw in out[2:]]
    assert docs[0]["item_id"] == "msg_fake1" and docs[0]["output_index"] == 0
    assert docs[1]["output_index"] == docs[2]["output_index"] == 1
    assert [d["sequence_number"] for d in docs] == [5, 6, 7, 8] and reader.next_seq == 9
    final = docs[3]["response"]
    assert [i["id"] for i in final["output"]] == ["msg_fake1", "fc_9"]
    assert final["output"][0]["content"][0]["text"] == "Hello"  # rebuilt: no output_item.done came
    assert final["id"] == "resp_fake123" and final["usage"]["output_tokens"] == 3


def test_a_continuation_after_the_upstreams_error_event_numbers_on_without_a_gap() -> None:
    """The upstream's error event (never relayed) ended the original at 5; the continuation's
    first event the client sees is 5, not 6."""
    reader = reader_after(*responses_head(), *responses_deltas(("Hel",)))
    failed = sse("error", {"type": "error", "sequence_number": 5, "code": "server_error", "message": "boom"})
    assert reader.kind(failed, committed=True) is EventKind.ERROR
    splice = splicer(reader, "Hel")
    seq = Seq()
    msg = {"id": "m2", "type": "message", "role": "assistant", "content": []}
    out = [splice(raw) for raw in (
        seq("response.output_item.added", output_index=0, item=msg),
        seq("response.output_text.delta", item_id="m2", output_index=0, content_index=0, delta="lo"),
    )]  # fmt: skip
    assert json.loads(parse_event(out[1]).data or "")["sequence_number"] == 5 and reader.next_seq == 6
