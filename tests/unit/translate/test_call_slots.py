"""Parallel tool calls from servers that leave ``tool_calls[].index`` out or give every call the
same one (gateway/apis/chat/call_slots.py), read by every reader of a chat stream: the three
translations to other clients and the collector of a stream sent for a buffered request.

The streams are tests/corpus/answers (each with its source). Before, the calls of the first two
came out as one call whose arguments were ``{…}{…}{…}`` (Claude Code: "Bash was called with
input that could not be parsed as JSON"), the other calls lost."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.apis.collect import chat_answer, responses_answer
from gateway.sse import EventSplitter, parse_event
from gateway.translate.base import Context
from gateway.translate.gemini_chat import GeminiToChat
from gateway.translate.messages_chat import MessagesToChat
from gateway.translate.responses_chat import ResponsesToChat
from tests.unit.translate.messages_helpers import (
    check_grammar,
    corpus_answer,
    run,
    sdk_final_message,
    wire_stream,
)

INDEXLESS = "chat-gemini-openai-compat-indexless-parallel.stream.json"
REUSED = "chat-gcli2api-reused-index-parallel.stream.json"
SPLIT = "chat-gemini-openai-compat-split-arguments.stream.json"

# (name, arguments as a JSON value) of each call the stream stands for
CALLS = {
    INDEXLESS: [("read_file", {"path": "a.md"}), ("read_file", {"path": "b.md"}), ("read_file", {"path": "c.md"})],
    REUSED: [("get_weather", {"city": "北京"}), ("get_weather", {"city": "上海"}), ("get_weather", {"city": "广州"})],
    SPLIT: [("read", {"offset": 1, "limit": 100, "path": "/app/skills/agent-runtime/stage-design/SKILL.md"})],
}
IDS = {
    INDEXLESS: ["call_2048146", "call_2048154", "call_2048158"],
    REUSED: [json.loads(c)["choices"][0]["delta"]["tool_calls"][0]["id"]
             for c in corpus_answer(REUSED)["chunks"][:3]],
    SPLIT: ["call_297140"],
}  # fmt: skip
NAMES = ("read_file", "get_weather", "read")
SHAPES = list(CALLS)


def _wire(name: str) -> bytes:
    return wire_stream(corpus_answer(name)) + b"data: [DONE]\n\n"


def _raws(wire: bytes) -> list[bytes]:
    return EventSplitter().feed(wire)


@pytest.mark.parametrize("name", SHAPES)
def test_claude_code_gets_each_call_as_its_own_tool_use(name: str) -> None:
    request = {"messages": [{"role": "user", "content": "go"}],
               "tools": [{"name": n, "input_schema": {"type": "object"}} for n in NAMES]}  # fmt: skip
    ctx = Context(requested_model="claude-opus-4-8", request=request, request_id="0123456789abcdef")
    stream = run(MessagesToChat().stream(ctx), _wire(name))
    check_grammar(stream)
    message = sdk_final_message(stream)
    assert [(b.name, b.input) for b in message.content] == CALLS[name]
    assert [b.id for b in message.content] == IDS[name]
    assert message.stop_reason == "tool_use"
    assert "tool_fragments_dropped" not in ctx.notes


@pytest.mark.parametrize("name", SHAPES)
def test_gemini_cli_gets_each_call_as_its_own_function_call(name: str) -> None:
    request = {"contents": [{"role": "user", "parts": [{"text": "go"}]}],
               "tools": [{"functionDeclarations": [{"name": n, "parameters": {"type": "object"}} for n in NAMES]}]}
    ctx = Context(requested_model="gemini-2.5-flash", request=request, request_id="req1")
    st = GeminiToChat().stream(ctx)
    out = b"".join(st.event(raw) for raw in _raws(_wire(name))) + st.close()
    last = json.loads(out.split(b"\r\n\r\n")[-2][len(b"data: "):])
    parts = last["candidates"][0]["content"]["parts"]
    assert [(p["functionCall"]["name"], p["functionCall"]["args"]) for p in parts] == CALLS[name]
    assert [p["functionCall"]["id"] for p in parts] == IDS[name]


@pytest.mark.parametrize("name", SHAPES)
def test_codex_gets_each_call_as_its_own_function_call_item(name: str) -> None:
    request = {"model": "gpt-5-codex", "input": "go",
               "tools": [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in NAMES]}
    ctx = Context(requested_model="gpt-5-codex", request=request, request_id="req1")
    st = ResponsesToChat().stream(ctx)
    out = b"".join(st.event(raw) for raw in _raws(_wire(name))) + st.close()
    docs = [parse_event(raw).json() for raw in EventSplitter().feed(out)]
    answer = responses_answer(docs)
    calls = [item for item in answer["output"] if item["type"] == "function_call"]
    assert [(c["name"], json.loads(c["arguments"])) for c in calls] == CALLS[name]
    assert [c["call_id"] for c in calls] == IDS[name]
    assert "late_tool_call_delta" not in ctx.notes


@pytest.mark.parametrize("name", SHAPES)
def test_a_stream_collected_for_a_buffered_request_keeps_each_call(name: str) -> None:
    """A server that streams whatever it is asked (gateway/apis/collect.py)."""
    docs: list[dict[str, Any]] = [json.loads(c) for c in corpus_answer(name)["chunks"]]
    message = chat_answer(docs)["choices"][0]["message"]
    calls = message["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == CALLS[name]
    assert [c["id"] for c in calls] == IDS[name]


def test_openais_own_parallel_calls_still_pair_by_index() -> None:
    """The reference shape: index 0 then 1, the id once with each call's first fragment."""
    raws = _raws(wire_stream(corpus_answer("openai-gpt-4o-parallel-tools.stream.json")))
    docs = [d for d in (parse_event(raw).json() for raw in raws) if isinstance(d, dict)]
    calls = chat_answer(docs)["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("call_lQnnsesjFMWMQ5IeWPHzR4th", "GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("call_2xjOUgaCdiwAcl9ZBL9LyMUU", "get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]


def test_a_second_id_on_a_calls_later_fragments_without_a_name_is_still_that_call() -> None:
    """poolsideai/pool#9: the first chunk carries one id with the name, every later chunk of the
    same call another id. Only a new id that names a function starts a new call. The real
    OpenAI stream with such a second id put on its later fragments."""
    docs = [d for d in (parse_event(raw).json() for raw in _raws(wire_stream(corpus_answer(
        "openai-gpt-4o-parallel-tools.stream.json")))) if isinstance(d, dict)]  # fmt: skip
    for d in docs:
        for call in (d["choices"][0]["delta"].get("tool_calls") or []) if d["choices"] else []:
            call.setdefault("id", "call_later_" + str(call["index"]))
    calls = chat_answer(docs)["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_lQnnsesjFMWMQ5IeWPHzR4th", "call_2xjOUgaCdiwAcl9ZBL9LyMUU"]
    assert json.loads(calls[1]["function"]["arguments"]) == {"ticker": "AAPL", "exchange": "NASDAQ"}
