"""A local token estimate: no tokenizer can be downloaded at run time, so count bytes.

BPE tokenizers average about 4 characters per token on English prose and nearer 3 on
code, JSON and non-Latin scripts; dividing UTF-8 *bytes* by 3.5 errs on the high side for
prose and lands close for code, and a CJK character (3 bytes) counts as about one token,
as it does in practice. When the provider reports the real count, ``compress`` calibrates
against it, so this only has to be consistent, not exact.
"""

from __future__ import annotations

import json
from typing import Any

BYTES_PER_TOKEN = 3.5
MESSAGE_OVERHEAD = 4  # role and separators, per message (OpenAI's chat format adds 3-4)
IMAGE_TOKENS = 800  # a high-detail image tile set; conservative for one image part
REQUEST_OVERHEAD = 8


def text_tokens(text: str) -> float:
    return len(text.encode("utf-8", "replace")) / BYTES_PER_TOKEN


def content_tokens(content: Any) -> float:
    if content is None:
        return 0.0
    if isinstance(content, str):
        return text_tokens(content)
    if isinstance(content, list):
        total = 0.0
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                total += text_tokens(part["text"])
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image"):
                total += IMAGE_TOKENS
            else:
                total += text_tokens(json.dumps(part, default=str))
        return total
    return text_tokens(json.dumps(content, default=str))


def message_tokens(message: dict[str, Any]) -> float:
    total = MESSAGE_OVERHEAD + content_tokens(message.get("content"))
    calls = message.get("tool_calls")
    if calls:
        total += text_tokens(json.dumps(calls, default=str))
    fc = message.get("function_call")
    if fc:
        total += text_tokens(json.dumps(fc, default=str))
    name = message.get("name")
    if isinstance(name, str):
        total += text_tokens(name)
    return total


def request_tokens(payload: dict[str, Any]) -> float:
    """The prompt side of a chat request: messages plus tool definitions."""
    messages = payload.get("messages")
    total = float(REQUEST_OVERHEAD)
    if isinstance(messages, list):
        total += sum(message_tokens(m) for m in messages if isinstance(m, dict))
    for key in ("tools", "functions", "response_format"):
        if payload.get(key):
            total += text_tokens(json.dumps(payload[key], default=str))
    return total
