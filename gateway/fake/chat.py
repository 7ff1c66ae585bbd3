"""OpenAI chat-completions bodies as the fake upstream sends them."""

from __future__ import annotations

import json
import time
from typing import Any

from gateway.fake.steps import Reply


def chat_completion(model: str = "gpt-4o-mini", content: str = "Hello from the fake upstream.",
                    prompt_tokens: int = 12, completion_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake123",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }  # fmt: skip


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake123", "object": "chat.completion.chunk", "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip


def stream_events(model: str = "gpt-4o-mini", words: tuple[str, ...] = ("Hello", " from", " fake."),
                  include_usage: bool = False) -> list[Any]:
    events: list[Any] = [chunk({"role": "assistant", "content": ""}, model=model)]
    events += [chunk({"content": w}, model=model) for w in words]
    events.append(chunk({}, "stop", model=model))
    if include_usage:
        events.append({"id": "chatcmpl-fake123", "object": "chat.completion.chunk",
                       "created": int(time.time()), "model": model, "choices": [],
                       "usage": {"prompt_tokens": 11, "completion_tokens": len(words),
                                 "total_tokens": 11 + len(words)}})  # fmt: skip
    return events


def estimate_tokens(payload: dict[str, Any]) -> int:
    """The fake's 'tokenizer': deliberately not the gateway's estimator (3.5 chars/token)."""
    messages = payload.get("messages", [])
    text = json.dumps(messages) + (json.dumps(payload["system"]) if payload.get("system") else "")
    return int(len(text) / 3.5) + 3 * (len(messages) if isinstance(messages, list) else 0)


def wants_usage(payload: dict[str, Any]) -> bool:
    """Whether a chat stream asks for its usage chunk (``stream_options.include_usage``)."""
    options = payload.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def overflow_error(limit: int, used: int, completion: int | None) -> Reply:
    if completion:
        msg = (f"This model's maximum context length is {limit} tokens. However, you requested "
               f"{used + completion} tokens ({used} in the messages, {completion} in the completion). "
               "Please reduce the length of the messages or completion.")
    else:
        msg = (f"This model's maximum context length is {limit} tokens. However, your messages "
               f"resulted in {used} tokens. Please reduce the length of the messages.")
    return Reply(400, {"error": {"message": msg, "type": "invalid_request_error",
                                 "param": "messages", "code": "context_length_exceeded"}})  # fmt: skip
