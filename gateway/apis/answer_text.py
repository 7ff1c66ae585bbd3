"""What a buffered answer generated, as text, in each API: its message text, its reasoning
and its tool calls' arguments. A provider bills all of them as output; the gateway counts
them (3.5 bytes a token, gateway/policy/tokens.py) only when an answer carries no count of
its own, so that a key's spend never reads $0 for an answer that was generated.

Where each API puts them (its answer's reference shape):

- chat completions: ``choices[].message``: ``content`` (a string, or parts with ``text``),
  ``reasoning_content`` / ``reasoning`` (DeepSeek, vLLM, OpenRouter), ``tool_calls[].function
  .arguments``, the legacy ``function_call.arguments``;
- Messages: ``content[]`` blocks: ``text``, ``thinking``, ``tool_use.input``;
- Responses: ``output[]`` items: ``message`` content parts' ``text`` (``output_text``,
  ``refusal``), ``function_call.arguments``, ``custom_tool_call.input``, ``reasoning``'s
  ``summary[].text``;
- Gemini: ``candidates[].content.parts[]``: ``text`` (thoughts included), ``functionCall.args``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.apis.gemini.fields import field


def chat_text(doc: Mapping[str, Any]) -> str:
    return "".join(_chat(doc))


def messages_text(doc: Mapping[str, Any]) -> str:
    return "".join(_messages(doc))


def responses_text(doc: Mapping[str, Any]) -> str:
    return "".join(_responses(doc))


def gemini_text(doc: Mapping[str, Any]) -> str:
    return "".join(_gemini(doc))


def _chat(doc: Mapping[str, Any]) -> Iterator[str]:
    for choice in _dicts(doc.get("choices")):
        message = choice.get("message")
        if not isinstance(message, dict):
            continue
        yield from _text_or_parts(message.get("content"))
        for name in ("reasoning_content", "reasoning"):
            yield from _strings(message.get(name))
        for call in _dicts(message.get("tool_calls")):
            function = call.get("function")
            if isinstance(function, dict):
                yield from _strings(function.get("arguments"))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            yield from _strings(legacy.get("arguments"))


def _messages(doc: Mapping[str, Any]) -> Iterator[str]:
    for block in _dicts(doc.get("content")):
        kind = block.get("type")
        if kind == "text":
            yield from _strings(block.get("text"))
        elif kind == "thinking":
            yield from _strings(block.get("thinking"))
        elif kind in ("tool_use", "server_tool_use"):
            yield _json(block.get("input"))


def _responses(doc: Mapping[str, Any]) -> Iterator[str]:
    for item in _dicts(doc.get("output")):
        kind = item.get("type")
        if kind == "message":
            for part in _dicts(item.get("content")):
                yield from _strings(part.get("text"))
                yield from _strings(part.get("refusal"))
        elif kind == "function_call":
            yield from _strings(item.get("arguments"))
        elif kind == "custom_tool_call":
            yield from _strings(item.get("input"))
        elif kind == "reasoning":
            for part in _dicts(item.get("summary")):
                yield from _strings(part.get("text"))


def _gemini(doc: Mapping[str, Any]) -> Iterator[str]:
    for candidate in _dicts(doc.get("candidates")):
        content = candidate.get("content")
        if not isinstance(content, dict):
            continue
        for part in _dicts(content.get("parts")):
            yield from _strings(part.get("text"))
            call = field(part, "functionCall")
            if isinstance(call, dict):
                yield _json(call.get("args"))


def _dicts(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, list):
        yield from (v for v in value if isinstance(v, dict))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value


def _text_or_parts(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    else:
        for part in _dicts(content):
            yield from _strings(part.get("text"))


def _json(value: Any) -> str:
    return "" if value is None else json.dumps(value, ensure_ascii=False)
