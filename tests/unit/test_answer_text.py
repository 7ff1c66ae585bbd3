"""What a buffered answer generated, per API (gateway/apis/answer_text.py), read from real
answers (tests/corpus/answers/), and the estimate it gives held to the providers' own counts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis import ANTHROPIC_MESSAGES, GEMINI, OPENAI_CHAT, OPENAI_RESPONSES
from gateway.apis.base import Dialect
from gateway.policy.tokens import text_tokens
from gateway.sse import EventSplitter, parse_event

ANSWERS = Path(__file__).resolve().parents[1] / "corpus" / "answers"


def body(name: str) -> dict[str, Any]:
    doc = json.loads((ANSWERS / f"{name}.json").read_text())["body"]
    assert isinstance(doc, dict)
    return doc


def test_a_tool_call_is_its_name_and_arguments() -> None:
    assert OPENAI_CHAT.answer_text(body("chat-openai-gpt-4.1-tool-call")) == 'read_file{"path":"README.md"}'


def test_reasoning_counts_with_the_answer() -> None:
    doc = body("chat-deepseek-reasoner")
    message = doc["choices"][0]["message"]
    assert OPENAI_CHAT.answer_text(doc) == message["content"] + message["reasoning_content"]


def test_thinking_and_a_tool_use_in_messages() -> None:
    doc = body("messages-thinking-then-tool-use")
    text = ANTHROPIC_MESSAGES.answer_text(doc)
    thinking = next(b["thinking"] for b in doc["content"] if b["type"] == "thinking")
    tool = next(b for b in doc["content"] if b["type"] == "tool_use")
    assert text == thinking + tool["name"] + json.dumps(tool["input"], ensure_ascii=False)
    assert "signature" not in text and doc["content"][0]["signature"][:20] not in text


def test_a_gemini_function_call_without_usage_metadata() -> None:
    # Google sent this answer with no usageMetadata at all: the case the estimate is for.
    doc = body("gemini-pro-function-call")
    assert GEMINI.body_usage(doc) == {}
    text = GEMINI.answer_text(doc)
    assert text.startswith("find_theaters")
    assert json.loads(text.removeprefix("find_theaters")) == {"movie": "Barbie", "location": "Mountain View, CA"}


def test_responses_items() -> None:
    # The item shapes of the Responses API reference (the corpus holds no buffered answer of it).
    doc = {"object": "response", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi."}, {"type": "refusal", "refusal": "No."}]},
        {"type": "function_call", "name": "f", "arguments": '{"a":1}'},
    ]}  # fmt: skip
    assert OPENAI_RESPONSES.answer_text(doc) == 'Think.Hi.No.f{"a":1}'


@pytest.mark.parametrize("dialect", [OPENAI_CHAT, ANTHROPIC_MESSAGES, OPENAI_RESPONSES, GEMINI], ids=lambda d: d.api)
@pytest.mark.parametrize("doc", [{}, {"choices": "x", "content": 3, "output": None, "candidates": [1, {"content": []}]},
                                 {"choices": [{"message": {"content": [{"text": 5}]}}]}])  # fmt: skip
def test_odd_shapes_give_no_text_and_no_error(dialect: Dialect, doc: dict[str, Any]) -> None:
    assert dialect.answer_text(doc) == ""


# Real answers with real counts (the corpus's mocks and reference examples, whose counts are
# made up, left out): the estimate lands within a factor of two or three of what the provider
# billed. A short tool call weighs more than its characters (its name and framing count too).
REAL_COUNTS = {
    "chat-deepseek-chat-text-then-tool": OPENAI_CHAT,
    "chat-openai-gpt-4.1-text": OPENAI_CHAT,
    "chat-openai-gpt-4.1-tool-call": OPENAI_CHAT,
    "chat-openrouter-gpt-4o-length": OPENAI_CHAT,
    "deepseek-reasoner-reasoning": OPENAI_CHAT,
    "deepseek-reasoner-tool-call": OPENAI_CHAT,
    "groq-qwen3-reasoning": OPENAI_CHAT,
    "llama-cpp-python-0.3.36-text": OPENAI_CHAT,
    "gemini-text-usage": GEMINI,
    "messages-text-after-tool-result": ANTHROPIC_MESSAGES,
    "messages-thinking-then-tool-use": ANTHROPIC_MESSAGES,
}


@pytest.mark.parametrize("name", list(REAL_COUNTS))
def test_the_estimate_is_near_the_providers_count(name: str) -> None:
    dialect = REAL_COUNTS[name]
    doc = body(name)
    billed = dialect.body_usage(doc)["completion"]
    estimate = text_tokens(dialect.answer_text(doc))
    assert billed / 3 <= estimate <= billed * 2, (estimate, billed)


def stream_docs(name: str) -> list[dict[str, Any]]:
    recorded = json.loads((ANSWERS / f"{name}.json").read_text())
    raw = next(v for v in (recorded.get("stream"), recorded.get("body"), recorded.get("sse")) if isinstance(v, str))
    docs = [parse_event(e).json() for e in EventSplitter().feed(raw.encode())]
    return [d for d in docs if isinstance(d, dict)]


def stream_text(dialect: Dialect, docs: list[dict[str, Any]]) -> str:
    reader = dialect.reader(False)
    return "".join(reader.event_text(d) for d in docs)


def test_a_messages_stream_counts_thinking_the_tool_name_and_its_input() -> None:
    docs = stream_docs("messages-stream-thinking-then-tool-use")
    deltas = [d["delta"] for d in docs if d.get("type") == "content_block_delta"]
    thinking = "".join(d.get("thinking", "") for d in deltas)
    partial = "".join(d.get("partial_json", "") for d in deltas)
    name = next(d["content_block"]["name"] for d in docs
                if d.get("type") == "content_block_start" and d["content_block"]["type"] == "tool_use")  # fmt: skip
    assert stream_text(ANTHROPIC_MESSAGES, docs) == thinking + name + partial
    assert json.loads(partial) == {"location": "Florence, Italy"}


def test_parallel_tool_calls_in_a_chat_stream_count_both_calls() -> None:
    text = stream_text(OPENAI_CHAT, stream_docs("openai-gpt-4o-parallel-tools.stream"))
    assert text == ('GetWeatherArgs{"city": "Edinburgh", "country": "UK", "units": "c"}'
                    'get_stock_price{"ticker": "AAPL", "exchange": "NASDAQ"}')  # fmt: skip


def test_responses_stream_events() -> None:
    # The event names and fields of the Responses streaming reference.
    docs = [
        {"type": "response.output_item.added", "item": {"type": "function_call", "name": "shell"}},
        {"type": "response.function_call_arguments.delta", "delta": '{"cmd":'},
        {"type": "response.function_call_arguments.done", "arguments": '{"cmd":"ls"}'},
        {"type": "response.output_text.delta", "delta": "Done."},
        {"type": "response.reasoning_summary_text.delta", "delta": "Why."},
        {"type": "response.completed", "response": {"output": [{"type": "message"}]}},
    ]
    assert stream_text(OPENAI_RESPONSES, docs) == 'shell{"cmd":Done.Why.'


# Recorded streams with the provider's own final count: the estimate is nearer it than the
# visible text alone, which is what a cut stream was counted by before (tool calls weigh more
# than their characters: names, ids and framing count too).
STREAM_COUNTS = {
    "chat-deepseek-chat-text-then-tool": OPENAI_CHAT,
    "chat-openai-gpt-4.1-tool-call": OPENAI_CHAT,
    "chat-openrouter-gpt-4o-text-then-tool": OPENAI_CHAT,
    "openai-gpt-4o-parallel-tools.stream": OPENAI_CHAT,
    "openai-gpt-4o-text.stream": OPENAI_CHAT,
    "messages-stream-sdk-text-then-tool": ANTHROPIC_MESSAGES,
    "messages-stream-text-after-tool-result": ANTHROPIC_MESSAGES,
    "messages-stream-text-then-two-tools": ANTHROPIC_MESSAGES,
    "messages-stream-thinking-then-tool-use": ANTHROPIC_MESSAGES,
}


@pytest.mark.parametrize("name", list(STREAM_COUNTS))
def test_a_streams_estimate_is_near_the_providers_count(name: str) -> None:
    dialect = STREAM_COUNTS[name]
    docs = stream_docs(name)
    reader = dialect.reader(False)
    reader.track()
    for doc in docs:
        reader.kind(b"data: " + json.dumps(doc).encode() + b"\n\n", committed=True)
    billed = reader.usage["completion"]
    estimate = text_tokens(stream_text(dialect, docs))
    assert billed / 6 <= estimate <= billed * 2, (estimate, billed)
    assert estimate >= text_tokens(reader.shown_text())
