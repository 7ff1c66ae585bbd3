"""What an answer generated, as text, in each API: its message text, its reasoning and its
tool calls' arguments, from a buffered answer or from one stream event. A provider bills all
of them as output; the gateway counts them (3.5 bytes a token, gateway/policy/tokens.py)
only when an answer carries no count of its own (a server that omits usage, a stream cut
before its count), so that a key's spend never misses what was generated: an agent's turn is
often mostly a tool call's arguments (a file it writes).

Where each API puts them (its answer's reference shape):

- chat completions: ``choices[].message``: ``content`` (a string, or parts with ``text``),
  ``reasoning_content`` / ``reasoning`` (DeepSeek, vLLM, OpenRouter), ``tool_calls[].function``'s
  ``name`` and ``arguments``, the legacy ``function_call``'s;
- Messages: ``content[]`` blocks: ``text``, ``thinking``, ``tool_use``'s ``name`` and ``input``;
- Responses: ``output[]`` items: ``message`` content parts' ``text`` (``output_text``,
  ``refusal``), ``function_call``'s ``name`` and ``arguments``, ``custom_tool_call``'s ``name``
  and ``input``, ``reasoning``'s ``summary[].text``;
- Gemini: ``candidates[].content.parts[]``: ``text`` (thoughts included), ``functionCall``'s
  ``name`` and ``args``;
- legacy completions (``/v1/completions``, relayed as it is and read as chat): ``choices[].text``,
  in an answer and in each chunk of its stream alike ("both the streamed and non-streamed
  response objects share the same shape", OpenAI API reference, the completion object).

And in their streams: a chat chunk's ``choices[].delta`` (the same fields, arguments in
pieces); Messages' ``content_block_delta`` (``text_delta``, ``thinking_delta``,
``input_json_delta``'s ``partial_json``) and a tool call's name in its ``content_block_start``;
the Responses events ``response.*.delta`` of output text, refusals, function-call arguments,
custom tool input and reasoning, and a tool call's name in ``response.output_item.added``; a
Gemini stream's chunks, each shaped as a whole answer.
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


def chat_event_text(doc: Mapping[str, Any]) -> str:
    return "".join(_chat(doc, "delta"))


def messages_event_text(doc: Mapping[str, Any]) -> str:
    if doc.get("type") == "content_block_start":  # a tool call's name comes whole at its start
        block = doc.get("content_block")
        name = block.get("name") if isinstance(block, dict) else None
        return name if isinstance(name, str) else ""
    if doc.get("type") != "content_block_delta":
        return ""
    delta = doc.get("delta")
    if not isinstance(delta, dict):
        return ""
    for name in ("text", "thinking", "partial_json"):
        value = delta.get(name)
        if isinstance(value, str):
            return value
    return ""


_RESPONSES_DELTAS = frozenset({
    "response.output_text.delta", "response.refusal.delta", "response.function_call_arguments.delta",
    "response.custom_tool_call_input.delta", "response.reasoning_summary_text.delta",
    "response.reasoning_text.delta",
})  # fmt: skip


def responses_event_text(doc: Mapping[str, Any]) -> str:
    if doc.get("type") == "response.output_item.added":  # a tool call's name comes whole at its start
        item = doc.get("item")
        name = item.get("name") if isinstance(item, dict) else None
        return name if isinstance(name, str) else ""
    delta = doc.get("delta")
    return delta if doc.get("type") in _RESPONSES_DELTAS and isinstance(delta, str) else ""


def _chat(doc: Mapping[str, Any], member: str = "message") -> Iterator[str]:
    for choice in _dicts(doc.get("choices")):
        yield from _strings(choice.get("text"))  # a legacy completion's, whole or a chunk's
        message = choice.get(member)
        if not isinstance(message, dict):
            continue
        yield from _text_or_parts(message.get("content"))
        for name in ("reasoning_content", "reasoning"):
            yield from _strings(message.get(name))
        for call in _dicts(message.get("tool_calls")):
            function = call.get("function")
            if isinstance(function, dict):
                yield from _strings(function.get("name"))
                yield from _strings(function.get("arguments"))
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            yield from _strings(legacy.get("name"))
            yield from _strings(legacy.get("arguments"))


def _messages(doc: Mapping[str, Any]) -> Iterator[str]:
    for block in _dicts(doc.get("content")):
        kind = block.get("type")
        if kind == "text":
            yield from _strings(block.get("text"))
        elif kind == "thinking":
            yield from _strings(block.get("thinking"))
        elif kind in ("tool_use", "server_tool_use"):
            yield from _strings(block.get("name"))
            yield _json(block.get("input"))


def _responses(doc: Mapping[str, Any]) -> Iterator[str]:
    for item in _dicts(doc.get("output")):
        kind = item.get("type")
        if kind == "message":
            for part in _dicts(item.get("content")):
                yield from _strings(part.get("text"))
                yield from _strings(part.get("refusal"))
        elif kind == "function_call":
            yield from _strings(item.get("name"))
            yield from _strings(item.get("arguments"))
        elif kind == "custom_tool_call":
            yield from _strings(item.get("name"))
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
                yield from _strings(call.get("name"))
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
