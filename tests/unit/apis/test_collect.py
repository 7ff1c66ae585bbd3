"""A whole stream collected into the buffered answer it stands for (gateway/apis/collect.py),
checked against what the APIs' own SDKs accumulate from the same recorded streams: openai's
``ChatCompletionStreamState`` and anthropic's ``accumulate_event``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk
from pydantic import TypeAdapter

from gateway.apis import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from gateway.apis.collect import collect
from gateway.fake import gemini
from gateway.fake.chat import chunk, stream_events
from gateway.fake.messages import anthropic_head, sse, text_delta
from gateway.fake.responses import Seq, response_object, responses_head, responses_stream
from gateway.sse import EventSplitter, parse_event
from tests.unit.translate.messages_helpers import corpus_answer, wire_stream

CHAT_STREAMS = ["openai-gpt-4o-text.stream.json", "openai-gpt-4o-parallel-tools.stream.json",
                "openai-gpt-4o-length.stream.json", "llama-cpp-python-0.3.36-text.stream.json",
                "deepseek-reasoner-tool-call.stream.json"]  # fmt: skip
MESSAGES_STREAMS = ["messages-stream-sdk-text-then-tool.json", "messages-stream-text-after-tool-result.json",
                    "messages-stream-text-then-two-tools.json", "messages-stream-thinking-then-tool-use.json"]  # fmt: skip


def _wire(name: str) -> bytes:
    doc = corpus_answer(name)
    return doc["body"].encode() if isinstance(doc.get("body"), str) else wire_stream(doc)


def _datas(wire: bytes) -> list[dict[str, Any]]:
    splitter = EventSplitter()
    events = splitter.feed(wire) + ([splitter.pending] if splitter.pending.strip() else [])
    return [d for d in (parse_event(e).json() for e in events) if isinstance(d, dict)]


def _sent(events: list[Any]) -> bytes:
    return b"".join(e if isinstance(e, bytes) else b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)


@pytest.mark.parametrize("name", CHAT_STREAMS)
def test_a_chat_stream_makes_the_completion_the_openai_sdk_accumulates(name: str) -> None:
    wire = _wire(name)
    got = collect(OPENAI_CHAT, wire)
    assert got.error is None and got.answer is not None
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for doc in _datas(wire):
        state.handle_chunk(ChatCompletionChunk.model_validate(doc))
    sdk = state.current_completion_snapshot.model_dump(exclude_none=True)  # (final: parses, refuses "length")
    mine = got.answer
    assert mine["object"] == "chat.completion" and mine["id"] == sdk["id"] and mine["model"] == sdk["model"]
    assert mine.get("usage") == sdk.get("usage")
    assert len(mine["choices"]) == len(sdk["choices"])
    for ours, theirs in zip(mine["choices"], sdk["choices"], strict=True):
        assert ours["finish_reason"] == theirs["finish_reason"]
        message, expected = ours["message"], theirs["message"]
        assert message["role"] == expected["role"]
        assert (message["content"] or None) == (expected.get("content") or None)
        calls = [(c["id"], c["type"], c["function"]["name"], c["function"]["arguments"])
                 for c in message.get("tool_calls") or ()]  # fmt: skip
        assert calls == [(c["id"], c["type"], c["function"]["name"], c["function"]["arguments"])
                         for c in expected.get("tool_calls") or ()]  # fmt: skip
        if "reasoning_content" in message:  # DeepSeek's, which the SDK keeps as an extra field
            assert message["reasoning_content"] == expected["reasoning_content"]


@pytest.mark.parametrize("name", MESSAGES_STREAMS)
def test_a_messages_stream_makes_the_message_the_anthropic_sdk_accumulates(name: str) -> None:
    wire = _wire(name)
    got = collect(ANTHROPIC_MESSAGES, wire)
    assert got.error is None and got.answer is not None
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    snapshot: Any = None
    json_bufs: dict[int, bytes] = {}
    for doc in _datas(wire):
        if doc.get("type") == "ping":
            continue
        snapshot = accumulate_event(event=adapter.validate_python(doc), current_snapshot=snapshot, json_bufs=json_bufs)
    sdk = snapshot.model_dump(exclude_none=True)
    mine = got.answer
    for key in ("id", "type", "role", "model", "stop_reason"):
        assert mine.get(key) == sdk.get(key), key
    assert {k: v for k, v in mine["usage"].items() if v is not None} == \
        {k: v for k, v in sdk["usage"].items() if k in mine["usage"]}  # fmt: skip
    assert len(mine["content"]) == len(sdk["content"])
    for ours, theirs in zip(mine["content"], sdk["content"], strict=True):
        assert {k: v for k, v in ours.items() if k not in ("parsed_output", "citations") or v} == \
            {k: v for k, v in theirs.items() if k not in ("parsed_output",)}, name  # fmt: skip


def test_a_responses_stream_makes_the_response_its_last_event_carries() -> None:
    wire = _sent(responses_stream("gpt-5-codex", ("Hel", "lo")))
    got = collect(OPENAI_RESPONSES, wire)
    assert got.answer is not None
    assert got.answer["output"][0]["content"][0]["text"] == "Hello" and got.answer["status"] == "completed"
    assert got.answer["usage"]["output_tokens"] == 9


def test_a_responses_stream_whose_last_event_lists_no_output_gets_the_items_it_finished() -> None:
    seq = Seq()
    done = response_object(text="Hi")
    item = done["output"][0]
    wire = _sent([*responses_head(seq=seq), seq("response.output_item.done", output_index=0, item=item),
                  seq("response.completed", response={**done, "output": []})])  # fmt: skip
    got = collect(OPENAI_RESPONSES, wire)
    assert got.answer is not None and got.answer["output"] == [item]


def test_a_gemini_stream_makes_one_response_its_text_joined() -> None:
    wire = _wire("gemini-pro-text.stream.json")
    chunks = _datas(wire)
    got = collect(GEMINI, wire)
    assert got.answer is not None
    [candidate] = got.answer["candidates"]
    assert candidate["content"]["parts"] == [
        {"text": "".join(p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"])}]
    assert candidate["finishReason"] == "STOP" and candidate["content"]["role"] == "model"
    assert got.answer.get("usageMetadata") == next(
        (c["usageMetadata"] for c in reversed(chunks) if "usageMetadata" in c), None)


def test_a_gemini_stream_keeps_a_call_and_a_signed_part_apart_from_the_text() -> None:
    call, _ = gemini.function_call("gemini-2.5-flash", "ls", {"path": "."})
    first = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Let me "}]}}]}
    second = {"candidates": [{"content": {"role": "model", "parts": [{"text": "look."}, call]},
                              "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 3}}  # fmt: skip
    got = collect(GEMINI, _sent([first, second]))
    assert got.answer is not None
    assert got.answer["candidates"][0]["content"]["parts"] == [{"text": "Let me look."}, call]
    assert got.answer["usageMetadata"] == {"promptTokenCount": 3}


def test_the_fakes_streams_make_the_fakes_answers() -> None:
    chat = collect(OPENAI_CHAT, _sent([*stream_events("m", ("Hello", " there"), include_usage=True)]))
    assert chat.answer is not None and chat.answer["choices"][0]["message"]["content"] == "Hello there"
    assert chat.answer["usage"]["completion_tokens"] > 0
    gem = collect(GEMINI, _sent(gemini.stream_chunks("g", ("a", "b"))))
    assert gem.answer is not None and gem.answer["candidates"][0]["content"]["parts"] == [{"text": "ab"}]


@pytest.mark.parametrize(("dialect", "events"), [
    (OPENAI_CHAT, [chunk({"role": "assistant", "content": "Hi"}),
                   {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}]),
    (ANTHROPIC_MESSAGES, [*anthropic_head(), text_delta("Hi"),
                          sse("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})]),
    (GEMINI, [{"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}]),
])  # fmt: skip
def test_an_error_event_in_the_stream_is_its_error(dialect: Any, events: list[Any]) -> None:
    got = collect(dialect, _sent(events))
    assert got.answer is None and got.error is not None and isinstance(got.error.get("error"), dict)


@pytest.mark.parametrize(("dialect", "events"), [
    (OPENAI_CHAT, [chunk({"role": "assistant", "content": "Hi"})]),
    (ANTHROPIC_MESSAGES, [*anthropic_head(), text_delta("Hi")]),
    (OPENAI_RESPONSES, responses_head()),
    (GEMINI, [{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]}}]}]),
    (OPENAI_CHAT, []),
])  # fmt: skip
def test_a_stream_without_its_end_is_no_answer(dialect: Any, events: list[Any]) -> None:
    got = collect(dialect, _sent(events))
    assert got.answer is None and got.error is None
