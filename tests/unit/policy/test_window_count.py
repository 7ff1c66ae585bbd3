"""What a pool deployment's tokens window counted of an answered call (policy/window_count.py),
from real answers' usage read as the gateway reads it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gateway.apis.chat.wire import chat_usage
from gateway.apis.messages.wire import anthropic_usage
from gateway.policy.window_count import counted

ANSWERS = Path(__file__).parents[2] / "corpus" / "answers"


def _body(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((ANSWERS / name).read_text())["body"]
    return body


def test_an_openai_answer_counts_its_prompt_and_its_output() -> None:
    usage = chat_usage(_body("chat-openai-gpt-4.1-text.json")["usage"])  # 19 prompt, 200 output
    assert counted(usage, azure=False, anthropic=False, api="chat", sent_output=4096) == 219


def test_an_azure_answer_counts_the_output_budget_it_was_sent_not_the_output_it_used() -> None:
    """Azure counts a request at admission, its prompt and its max_tokens, and gives nothing
    back for a short answer: the count stays at the budget sent, or the output where more came
    or none was named (its chat answers are OpenAI's shape)."""
    usage = chat_usage(_body("chat-openai-gpt-4.1-text.json")["usage"])
    assert counted(usage, azure=True, anthropic=False, api="chat", sent_output=4096) == 19 + 4096
    assert counted(usage, azure=True, anthropic=False, api="chat", sent_output=None) == 219
    assert counted(usage, azure=True, anthropic=False, api="chat", sent_output=100) == 219


def test_an_anthropic_answer_counts_its_uncached_input_not_its_cache_reads_nor_its_output() -> None:
    """ITPM counts input_tokens and cache writes; cache reads do not count towards it, and the
    output has its own window (OTPM)."""
    usage = anthropic_usage(_body("messages-api-reference-example.json")["usage"])
    assert usage["prompt"] == 2095 + 2051 + 2051 and usage["cache_read"] == 2051
    assert counted(usage, azure=False, anthropic=True, api="messages", sent_output=1024) == 2095 + 2051


def test_another_messages_server_counts_its_prompt_and_its_output() -> None:
    """The ITPM/OTPM split is Anthropic's: DeepSeek's, MiniMax's or vLLM's Messages API say
    nothing of it, and a ``tokens_per_minute`` configured for one counts the whole call."""
    usage = anthropic_usage(_body("messages-api-reference-example.json")["usage"])
    assert counted(usage, azure=False, anthropic=False, api="messages", sent_output=1024) == (
        usage["prompt"] + usage["completion"])


def test_a_usage_without_a_prompt_or_an_output_replaces_nothing() -> None:
    assert counted({"prompt": 10}, azure=False, anthropic=False, api="chat", sent_output=None) is None
    assert counted({"completion": 10}, azure=True, anthropic=False, api="chat", sent_output=5) is None
