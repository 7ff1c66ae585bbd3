"""The OpenAI Responses dialect: stream grammar, usage, error envelope, compression."""

import copy
import json
from pathlib import Path

import pytest
from openai.types.responses import ResponseFailedEvent

from gateway.apis import OPENAI_RESPONSES
from gateway.apis.base import Ending, EventKind, Inbound, Rejection
from gateway.errors import Classification, ErrorType
from tests.fakeupstream import responses_head, responses_stream, sse
from tests.responses_convo import INSTRUCTIONS, assert_valid_input, responses_conversation, size

D = OPENAI_RESPONSES
CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "requests"
STREAM = responses_stream()


@pytest.mark.parametrize(("raw", "kind"), [
    (STREAM[0], EventKind.CONTENTLESS),  # response.created
    (STREAM[1], EventKind.CONTENTLESS),  # response.in_progress
    (STREAM[2], EventKind.CONTENTLESS),  # an empty message item
    (STREAM[3], EventKind.CONTENTLESS),  # an empty content part
    (STREAM[4], EventKind.VISIBLE),  # output_text.delta
    (STREAM[-1], EventKind.FINAL),  # response.completed
    (sse("response.incomplete", {"type": "response.incomplete", "sequence_number": 9,
                                 "response": {"status": "incomplete"}}), EventKind.FINAL),
    (sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 2, "item": {
        "type": "function_call", "call_id": "c1", "name": "shell", "arguments": ""}}), EventKind.VISIBLE),
    (sse("response.failed", {"type": "response.failed", "sequence_number": 3, "response": {
        "status": "failed", "error": {"code": "server_error", "message": "boom"}}}), EventKind.ERROR),
    (sse("error", {"type": "error", "sequence_number": 3, "code": "rate_limit_exceeded",
                   "message": "Rate limit reached", "param": None}), EventKind.ERROR),
    (b": keep-alive\n\n", EventKind.CONTENTLESS),
])  # fmt: skip
def test_event_kinds_before_commit(raw: bytes, kind: EventKind) -> None:
    assert D.reader(False).kind(raw, committed=False) is kind


def test_committed_stream_tracks_end_usage_and_sequence() -> None:
    r = D.reader(False)
    for raw in STREAM[:4]:
        r.kind(raw, committed=False)
    kinds = [r.kind(raw, committed=True) for raw in STREAM[4:]]
    assert kinds[-1] is EventKind.FINAL and all(k is EventKind.VISIBLE for k in kinds[:-1])
    assert r.usage == {"prompt": 30, "completion": 9}
    assert r.next_seq == len(STREAM)


def test_a_text_delta_after_commit_still_numbers_the_stream_and_keeps_its_text() -> None:
    """A ``response.output_text.delta`` is read on its name after commit (``_TEXT_DELTA_EVENT``):
    its sequence number and the text a continuation needs are still taken, and words in it that
    name the end are no end."""
    tracked, plain = D.reader(False), D.reader(False)
    tracked.track()
    for r in (tracked, plain):
        for raw in STREAM[:4]:
            r.kind(raw, committed=False)
    delta = sse("response.output_text.delta", {"type": "response.output_text.delta", "sequence_number": 41,
                                               "item_id": "msg_1", "output_index": 0, "content_index": 0,
                                               "delta": 'response.completed "web_search_call"'})  # fmt: skip
    usage = dict(tracked.usage)
    assert [r.kind(delta, committed=True) for r in (tracked, plain)] == [EventKind.VISIBLE] * 2
    assert tracked.next_seq == plain.next_seq == 42
    assert tracked.shown_text().endswith('response.completed "web_search_call"')
    assert tracked.usage == usage and not tracked.ended


def test_stream_errors_are_normalised_for_the_classifier() -> None:
    r = D.reader(False)
    r.kind(sse("error", {"type": "error", "sequence_number": 3, "code": "rate_limit_exceeded",
                         "message": "Rate limit reached", "param": None}), committed=True)
    assert r.error == {"error": {"code": "rate_limit_exceeded", "message": "Rate limit reached", "param": None,
                                 "status": 429}}


def test_broken_stream_ends_with_one_response_failed_continuing_the_sequence() -> None:
    r = D.reader(False)
    for raw in STREAM[:6]:
        r.kind(raw, committed=False)
    c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE)
    raw = r.broken(Ending(c, "the upstream connection was reset mid-stream", "stream_broken"), "rid", None)
    assert raw.startswith(b"event: response.failed\ndata: ")
    doc = json.loads(raw.split(b"data: ", 1)[1])
    assert doc["type"] == "response.failed" and doc["sequence_number"] == 6
    assert doc["response"]["id"] == "resp_fake123" and doc["response"]["status"] == "failed"
    # A code of the Responses schema, the gateway's own beside it; the response is whole, as
    # response.created gave it: a typed client reads the event.
    assert doc["response"]["error"]["code"] == "server_error"
    assert doc["response"]["error"]["x_llm_code"] == "stream_broken"
    assert doc["response"]["error"]["x_llm_error_type"] == "provider_unavailable"
    ResponseFailedEvent.model_validate(doc)


_FAILED_AT_6 = sse("response.failed", {"type": "response.failed", "sequence_number": 6, "response": {
    "status": "failed", "error": {"code": "server_error", "message": "boom"}}})
_ERROR_AT_6 = sse("error", {"type": "error", "sequence_number": 6, "code": "server_error",
                            "message": "An error occurred while processing your request.", "param": None})
_CUT_AT_6 = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":6,"de\n\n'


@pytest.mark.parametrize("withheld", [_FAILED_AT_6, _ERROR_AT_6, _CUT_AT_6],
                         ids=["response.failed", "error", "malformed"])  # fmt: skip
def test_the_gateways_response_failed_takes_the_number_of_the_upstream_event_it_stands_for(
    withheld: bytes,
) -> None:
    """The client saw 0..5; the upstream's failure at 6 is not relayed (the gateway ends the
    stream with its own response.failed), so that one is 6: OpenAI numbers every event a
    client sees consecutively, and a gap read as a lost event."""
    r = D.reader(False)
    for raw in STREAM[:4]:
        r.kind(raw, committed=False)
    for raw in STREAM[4:6]:
        assert r.kind(raw, committed=True) is EventKind.VISIBLE
    assert r.kind(withheld, committed=True) is EventKind.ERROR
    assert r.next_seq == 6
    end = r.broken(Ending(Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "boom", "server_error"), "rid", None)
    assert json.loads(end.split(b"data: ", 1)[1])["sequence_number"] == 6


def test_error_envelope_and_admission() -> None:
    doc = json.loads(D.error_body(400, "bad", "invalid_json", Classification.of(ErrorType.UNKNOWN), "r"))
    assert doc == {"error": {"message": "bad", "type": "invalid_request_error", "param": None,
                             "code": "invalid_json", "x_llm_error_type": "unknown", "retryable": False}}
    assert isinstance(D.admit(b"{}", {"model": "m", "input": "hi"}), Inbound)
    assert isinstance(D.admit(b"{}", {"input": 3}), Rejection)
    assert isinstance(D.admit(b"{}", {"input": ["x"]}), Rejection)
    assert D.body_usage({"usage": {"input_tokens": 5, "output_tokens": 2}}) == {"prompt": 5, "completion": 2}


def test_compressed_input_is_valid_and_keeps_what_must_not_change() -> None:
    items = responses_conversation(rounds=40, output_bytes=4000)
    payload = {"model": "gpt-5-codex", "instructions": INSTRUCTIONS, "input": items, "stream": True,
               "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]}
    original = copy.deepcopy(payload)
    result = D.compress(payload, error_message="Your input exceeds the context window of this model.",
                        context_window=20000)
    assert result.payload is not None, result.report
    assert payload == original
    out = result.payload
    assert out["instructions"] == INSTRUCTIONS and out["tools"] is payload["tools"]
    new = out["input"]
    assert_valid_input(new)
    assert size(new) < size(items) / 2
    assert new[-5:] == items[-5:]  # the newest user message and the current step
    assert new[0] == items[0]  # the developer message
    kept_reasoning = [i for i in new if i.get("type") == "reasoning"]
    assert all(i in items for i in kept_reasoning), "reasoning items are never edited"
    assert "llm-gateway" in json.dumps(new)


def test_compression_keeps_codex_tools_declared_in_an_input_item() -> None:
    """Codex's responses-lite shape (its default model) declares its tools in an
    ``additional_tools`` item, first in ``input``; read as an old turn it was the first thing
    compression dropped, and the rescued request offered the model no tools."""
    lite = json.loads((CORPUS / "codex-0.171-lite-first.json").read_text())["body"]
    items = responses_conversation(rounds=40, output_bytes=4000)
    payload = {**lite, "input": [lite["input"][0], *items]}
    result = D.compress(payload, error_message="Your input exceeds the context window of this model.",
                        context_window=20000)
    assert result.payload is not None, result.report
    new = result.payload["input"]
    assert new[0] is lite["input"][0]  # kept whole, first
    assert size(new) < size(items) / 2
    assert_valid_input(new[1:])


def test_previous_response_id_is_rescued_by_the_apis_own_truncation() -> None:
    payload = {"model": "m", "previous_response_id": "resp_1", "input": [{"role": "user", "content": "go on"}]}
    result = D.compress(payload, error_message=None, context_window=None)
    assert result.payload == {**payload, "truncation": "auto"}
    again = D.compress(result.payload, error_message=None, context_window=None)
    assert again.payload is None


def test_string_input_and_easy_messages_map_back() -> None:
    items = [{"role": "user", "content": "x" * 50000}, {"role": "assistant", "content": "y" * 50000},
             {"role": "user", "content": "latest"}]
    result = D.compress({"model": "m", "input": items}, error_message=None, context_window=8000)
    assert result.payload is not None
    new = result.payload["input"]
    assert new[-1] == items[-1]
    assert all(isinstance(i.get("content"), (str, list)) for i in new)
    assert size(new) < size(items) / 3


def test_head_of_a_failed_replay_is_not_counted_twice() -> None:
    r = D.reader(False)
    for raw in responses_head():
        assert r.kind(raw, committed=False) is EventKind.CONTENTLESS


def _reasoned_rounds(interleaved: bool, with_message: bool) -> tuple[list[dict], dict[str, str]]:
    """Codex-like rounds of two parallel calls after one reasoning item; and which reasoning
    item each call needs (OpenAI: "Item 'fc_…' of type 'function_call' was provided without its
    required 'reasoning' item: 'rs_…'.")."""
    items: list[dict] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go."}]}]
    needs: dict[str, str] = {}
    for k in range(12):
        items.append({"type": "reasoning", "id": f"rs_{k}", "summary": [], "encrypted_content": f"gAAAA{k}"})
        if with_message:
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "On it."}]})
        calls = [{"type": "function_call", "id": f"fc_{k}_{j}", "call_id": f"call_{k}_{j}", "name": "shell",
                  "arguments": "{}"} for j in range(2)]  # fmt: skip
        outputs = [{"type": "function_call_output", "call_id": f"call_{k}_{j}", "output": f"{k}.{j} " + "o" * 3000}
                   for j in range(2)]  # fmt: skip
        items += [x for pair in zip(calls, outputs, strict=True) for x in pair] if interleaved else calls + outputs
        needs.update({c["id"]: f"rs_{k}" for c in calls})
        if k == 8:
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "More."}]})
    return items, needs


@pytest.mark.parametrize("interleaved", [True, False])
@pytest.mark.parametrize("with_message", [True, False])
@pytest.mark.parametrize("share", [0.8, 0.6, 0.4, 0.2])
def test_a_call_is_never_sent_without_its_reasoning_item(interleaved: bool, with_message: bool, share: float) -> None:
    """Parallel calls sent as ``rs, fc1, out1, fc2, out2``: an output closed the turn, and fc2
    was a unit of its own, kept after its reasoning item was dropped."""
    items, needs = _reasoned_rounds(interleaved, with_message)
    result = D.compress({"model": "gpt-5", "input": items}, error_message=None,
                        context_window=int(size(items) / 3.5 * share))
    assert result.payload is not None, result.report
    new = result.payload["input"]
    assert_valid_input(new)
    kept = {i.get("id") for i in new}
    assert result.report["messages_removed"] > 0
    assert [c for c, rs in needs.items() if c in kept and rs not in kept] == []
