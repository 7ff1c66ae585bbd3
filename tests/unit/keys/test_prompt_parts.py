"""Prompt tokens the usage counts apart (tests/corpus/usage/prompt_parts.json): OpenAI's cache
writes, a part of the prompt priced on its own, and Gemini's tool-use prompt, input outside
``promptTokenCount``. Each is read by its API's usage reader, buffered and streamed, priced at the
shipped table (gateway/keys/prices.py), and carried into the usage of every client API the answer
is translated for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis.chat.wire import ChatStreamReader, OpenAIChat
from gateway.apis.gemini.wire import GeminiGenerate, GeminiStreamReader
from gateway.apis.responses.wire import OpenAIResponses, ResponsesStreamReader
from gateway.keys.prices import PriceTable, cost_of
from gateway.translate.chat_gemini.answer import chat_usage as chat_of_gemini
from gateway.translate.chat_responses.answer import chat_usage as chat_of_responses
from gateway.translate.messages_chat.answer import usage as messages_of_chat
from gateway.translate.responses_chat.answer import usage as responses_of_chat

CASES = {c["name"]: c for c in json.loads(
    (Path(__file__).parents[2] / "corpus" / "usage" / "prompt_parts.json").read_text())["cases"]}  # fmt: skip
TABLE = PriceTable()


def _body(name: str) -> dict[str, Any]:
    case = CASES[name]
    assert case["source"]
    body: dict[str, Any] = case["body"]
    return body


GUIDE = _body("openai-prompt-caching-guide-cache-write")  # Responses usage, the guide's example
OPENROUTER = _body("openrouter-usage-accounting-cache-write")  # a chat usage chunk
GEMINI = _body("gemini-url-context-tool-use-prompt")
# The guide says chat completions carries the same fields under prompt_tokens_details.
GUIDE_CHAT = {"usage": {"prompt_tokens": 2600, "prompt_tokens_details": GUIDE["usage"]["input_tokens_details"]}}


def test_cache_writes_are_read_as_a_part_of_the_prompt() -> None:
    """``cache_write_tokens`` was never read: a write was counted as a fresh input token."""
    assert OpenAIResponses().body_usage(GUIDE) == {"prompt": 2600, "cache_read": 2000, "cache_write": 400}
    assert OpenAIChat().body_usage(GUIDE_CHAT) == {"prompt": 2600, "cache_read": 2000, "cache_write": 400}
    assert OpenAIChat().body_usage(OPENROUTER) == {"prompt": 194, "completion": 2, "cache_write": 100}


def test_the_tool_use_prompt_is_input() -> None:
    """``toolUsePromptTokenCount`` is outside ``promptTokenCount`` (the four counts sum to
    ``totalTokenCount``) and was never read: 377,545 of 378,586 input tokens went uncharged."""
    usage = GEMINI["usageMetadata"]
    assert usage["promptTokenCount"] + usage["candidatesTokenCount"] + usage["thoughtsTokenCount"] + usage[
        "toolUsePromptTokenCount"] == usage["totalTokenCount"]  # fmt: skip
    assert GeminiGenerate().body_usage(GEMINI) == {"prompt": 1041 + 377545, "completion": 902 + 2191}
    snake = {"usage_metadata": {"prompt_token_count": 1041, "tool_use_prompt_token_count": 377545}}
    assert GeminiGenerate().body_usage(snake) == {"prompt": 1041 + 377545}  # the SDKs' own spelling
    assert GeminiGenerate().body_usage({"usageMetadata": {"toolUsePromptTokenCount": 5}}) == {"prompt": 5}


def test_streams_read_them_from_their_final_events() -> None:
    responses = ResponsesStreamReader()
    done = {"type": "response.completed", "response": {"id": "resp_1", "output": [], **GUIDE}}
    responses.kind(b"event: response.completed\ndata: " + json.dumps(done).encode() + b"\n\n", committed=False)
    assert responses.usage == {"prompt": 2600, "cache_read": 2000, "cache_write": 400}
    chat = ChatStreamReader(strip_usage=False)
    chat.kind(b"data: " + json.dumps({**OPENROUTER, "choices": []}).encode() + b"\n\n", committed=False)
    assert chat.usage == {"prompt": 194, "completion": 2, "cache_write": 100}
    gemini = GeminiStreamReader()
    gemini.kind(b"data: " + json.dumps(GEMINI).encode() + b"\r\n\r\n", committed=False)
    assert gemini.usage == {"prompt": 1041 + 377545, "completion": 902 + 2191}


def test_each_part_is_priced_at_its_own_price() -> None:
    """At the shipped prices: gpt-6.2-sol's $2.00 input, $0.10 cached, $2.50 cache writes (the
    guide's 1.25x); Claude Sonnet 4.5's $3 / $3.75 / $15 (OpenRouter's example names no model:
    a Claude model is what reports writes there); Gemini 2.5 Flash's $0.30 in and $2.50 out."""
    sol = TABLE.price_for("gpt-6.2-sol")
    guide = OpenAIResponses().body_usage(GUIDE)
    assert cost_of(sol, guide).usd == pytest.approx((200 * 2.0 + 2000 * 0.10 + 400 * 2.50) / 1e6)  # was 1,400
    sonnet = TABLE.price_for("claude-sonnet-4-5")
    assert cost_of(sonnet, OpenAIChat().body_usage(OPENROUTER)).usd == pytest.approx(
        (94 * 3.0 + 100 * 3.75 + 2 * 15.0) / 1e6)  # fmt: skip
    flash = TABLE.price_for("gemini-2.5-flash")
    assert cost_of(flash, GeminiGenerate().body_usage(GEMINI)).usd == pytest.approx(
        (378_586 * 0.30 + 3093 * 2.50) / 1e6)  # fmt: skip


def test_a_translated_answer_tells_its_client_the_same_parts() -> None:
    """What each client API has room for: chat and Responses count the tool-use prompt in their
    prompt (they have no field of its own; Google's total then holds), the writes in their own
    ``cache_write_tokens``; Messages counts writes as ``cache_creation_input_tokens``, apart
    from ``input_tokens``, as Anthropic does."""
    chat = chat_of_gemini(GEMINI["usageMetadata"])
    assert (chat["prompt_tokens"], chat["completion_tokens"]) == (1041 + 377545, 902 + 2191)
    assert chat["total_tokens"] == GEMINI["usageMetadata"]["totalTokenCount"]
    assert responses_of_chat(chat)["input_tokens"] == 1041 + 377545  # (Responses and Messages ...
    assert messages_of_chat(chat, 0)[0]["input_tokens"] == 1041 + 377545  # ... reach Gemini via chat)
    assert chat_of_responses(GUIDE["usage"])["prompt_tokens_details"] == {"cached_tokens": 2000,
                                                                           "cache_write_tokens": 400}
    assert responses_of_chat(OPENROUTER["usage"])["input_tokens_details"] == {"cached_tokens": 0,
                                                                              "cache_write_tokens": 100}
    messages, estimated = messages_of_chat(OPENROUTER["usage"], 0)
    assert not estimated
    assert messages == {"input_tokens": 94, "cache_creation_input_tokens": 100, "cache_read_input_tokens": 0,
                        "output_tokens": 2}  # was 194 input and no write
    guide = messages_of_chat(GUIDE_CHAT["usage"], 0, 7)[0]
    assert guide["input_tokens"] + guide["cache_creation_input_tokens"] + guide["cache_read_input_tokens"] == 2600
    assert (guide["input_tokens"], guide["cache_creation_input_tokens"]) == (200, 400)
