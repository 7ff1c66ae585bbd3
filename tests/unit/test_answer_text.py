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

ANSWERS = Path(__file__).resolve().parents[1] / "corpus" / "answers"


def body(name: str) -> dict[str, Any]:
    doc = json.loads((ANSWERS / f"{name}.json").read_text())["body"]
    assert isinstance(doc, dict)
    return doc


def test_a_tool_call_is_its_arguments() -> None:
    assert OPENAI_CHAT.answer_text(body("chat-openai-gpt-4.1-tool-call")) == '{"path":"README.md"}'


def test_reasoning_counts_with_the_answer() -> None:
    doc = body("chat-deepseek-reasoner")
    message = doc["choices"][0]["message"]
    assert OPENAI_CHAT.answer_text(doc) == message["content"] + message["reasoning_content"]


def test_thinking_and_a_tool_use_in_messages() -> None:
    doc = body("messages-thinking-then-tool-use")
    text = ANTHROPIC_MESSAGES.answer_text(doc)
    thinking = next(b["thinking"] for b in doc["content"] if b["type"] == "thinking")
    tool_input = next(b["input"] for b in doc["content"] if b["type"] == "tool_use")
    assert text.startswith(thinking) and json.loads(text[len(thinking):]) == tool_input
    assert "signature" not in text and doc["content"][0]["signature"][:20] not in text


def test_a_gemini_function_call_without_usage_metadata() -> None:
    # Google sent this answer with no usageMetadata at all: the case the estimate is for.
    doc = body("gemini-pro-function-call")
    assert GEMINI.body_usage(doc) == {}
    assert json.loads(GEMINI.answer_text(doc)) == {"movie": "Barbie", "location": "Mountain View, CA"}


def test_responses_items() -> None:
    # The item shapes of the Responses API reference (the corpus holds no buffered answer of it).
    doc = {"object": "response", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Think."}]},
        {"type": "message", "content": [{"type": "output_text", "text": "Hi."}, {"type": "refusal", "refusal": "No."}]},
        {"type": "function_call", "name": "f", "arguments": '{"a":1}'},
    ]}  # fmt: skip
    assert OPENAI_RESPONSES.answer_text(doc) == 'Think.Hi.No.{"a":1}'


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
