"""One request per client API holding every field its translator reads, and each of those fields
with the JSON types the API allows there: the cases of the tests that a field of another type is
a 400 naming the field (``translate/typed.py``), as an audit's fuzz found it was not (a crash,
answered 500 ``internal_error``)."""

from __future__ import annotations

import copy
import re
from typing import Any

from gateway.translate.base import Refusal, Target, Translator

_TOOL_SCHEMA = {"type": "object", "properties": {"a": {"type": "string"}}}

CHAT: dict[str, Any] = {
    "model": "m", "max_tokens": 20, "max_completion_tokens": 20,
    "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": _TOOL_SCHEMA}}],
    "tool_choice": {"type": "function", "function": {"name": "f"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "object"}}},
    "stop": ["x"], "temperature": 0.5, "top_p": 1, "top_k": 5, "n": 1, "seed": 1, "user": "u",
    "reasoning_effort": "low", "logprobs": False, "top_logprobs": 0, "modalities": ["text"],
    "presence_penalty": 0.1, "frequency_penalty": 0.1, "parallel_tool_calls": True,
}  # fmt: skip

MESSAGES: dict[str, Any] = {
    "model": "m", "max_tokens": 20, "system": [{"type": "text", "text": "s"}],
    "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "r", "is_error": False}]},
    ],
    "tools": [{"type": "custom", "name": "f", "description": "d", "input_schema": _TOOL_SCHEMA, "strict": False}],
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": False},
    "stop_sequences": ["x"], "temperature": 0.5, "top_p": 1, "metadata": {"user_id": "u"},
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}},
}  # fmt: skip

RESPONSES: dict[str, Any] = {
    "model": "m", "max_output_tokens": 20, "instructions": "s",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ],
    "tools": [{"type": "function", "name": "f", "description": "d", "parameters": _TOOL_SCHEMA, "strict": False}],
    "tool_choice": "auto",
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": False}},
    "reasoning": {"effort": "low"}, "temperature": 0.5, "top_p": 1, "user": "u", "parallel_tool_calls": True,
}  # fmt: skip

GEMINI: dict[str, Any] = {
    "model": "m",
    "systemInstruction": {"parts": [{"text": "s"}]},
    "contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": 1}}}]},
    ],
    "tools": [{"functionDeclarations": [{"name": "f", "description": "d", "parameters": {"type": "OBJECT"}}]}],
    "toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["f"]}},
    "generationConfig": {
        "maxOutputTokens": 20, "temperature": 0.5, "topP": 1, "seed": 1, "candidateCount": 1,
        "presencePenalty": 0.1, "frequencyPenalty": 0.1, "stopSequences": ["x"], "responseModalities": ["TEXT"],
        "responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"},
        "thinkingConfig": {"thinkingBudget": 100, "includeThoughts": True},
    },
}  # fmt: skip

BASE = {"chat": CHAT, "messages": MESSAGES, "responses": RESPONSES, "gemini": GEMINI}

STR, ARR, OBJ, NUM, INT, BOOL = "string", "array", "object", "number", "integer", "boolean"

# The fields each direction's request translator reads, with the JSON types its client's API allows.
_CHAT_BOTH = [
    ("messages.0", (OBJ,)), ("messages.0.role", (STR,)), ("messages.0.content", (STR, ARR)),
    ("messages.1.content", (STR, ARR)), ("messages.1.content.0", (OBJ,)), ("messages.1.content.0.type", (STR,)),
    ("messages.1.content.0.text", (STR,)), ("messages.2.tool_calls", (ARR,)), ("messages.2.tool_calls.0", (OBJ,)),
    ("messages.2.tool_calls.0.id", (STR,)), ("messages.2.tool_calls.0.function", (OBJ,)),
    ("messages.2.tool_calls.0.function.name", (STR,)), ("messages.3.tool_call_id", (STR,)),
    ("messages.3.content", (STR, ARR)), ("tools", (ARR,)), ("tools.0", (OBJ,)), ("tools.0.function", (OBJ,)),
    ("tools.0.function.name", (STR,)), ("tools.0.function.description", (STR,)),
    ("tools.0.function.parameters", (OBJ,)), ("tool_choice", (STR, OBJ)), ("tool_choice.type", (STR,)),
    ("tool_choice.function", (OBJ,)), ("tool_choice.function.name", (STR,)), ("response_format", (OBJ,)),
    ("response_format.type", (STR,)), ("response_format.json_schema", (OBJ,)),
    ("response_format.json_schema.schema", (OBJ,)), ("stop", (STR, ARR)), ("stop.0", (STR,)), ("temperature", (NUM,)),
    ("top_p", (NUM,)), ("top_k", (INT,)), ("n", (INT,)), ("max_tokens", (INT,)), ("max_completion_tokens", (INT,)),
    ("reasoning_effort", (STR,)), ("logprobs", (BOOL,)), ("top_logprobs", (INT,)), ("modalities", (ARR,)),
    ("audio", (OBJ,)),
]  # fmt: skip
FIELDS: dict[tuple[str, str], list[tuple[str, tuple[str, ...]]]] = {
    ("chat", "gemini"): [*_CHAT_BOTH, ("seed", (INT,)), ("presence_penalty", (NUM,)), ("frequency_penalty", (NUM,))],
    ("chat", "responses"): [*_CHAT_BOTH, ("user", (STR,)), ("safety_identifier", (STR,)),
                            ("parallel_tool_calls", (BOOL,)), ("seed", (INT,)), ("presence_penalty", (NUM,)),
                            ("frequency_penalty", (NUM,)), ("store", (BOOL,))],
    ("chat", "messages"): [*_CHAT_BOTH, ("user", (STR,)), ("safety_identifier", (STR,)), ("parallel_tool_calls", (BOOL,))],
    ("messages", "chat"): [
        ("system", (STR, ARR)), ("system.0", (OBJ,)), ("system.0.text", (STR,)), ("messages.0", (OBJ,)),
        ("messages.0.role", (STR,)), ("messages.0.content", (STR, ARR)), ("messages.0.content.0", (OBJ,)),
        ("messages.0.content.0.type", (STR,)), ("messages.0.content.0.text", (STR,)),
        ("messages.1.content.0.id", (STR,)), ("messages.1.content.0.name", (STR,)),
        ("messages.1.content.0.input", (OBJ,)), ("messages.2.content.0.tool_use_id", (STR,)),
        ("messages.2.content.0.content", (STR, ARR)), ("messages.2.content.0.is_error", (BOOL,)), ("tools", (ARR,)),
        ("tools.0", (OBJ,)), ("tools.0.type", (STR,)), ("tools.0.name", (STR,)), ("tools.0.description", (STR,)),
        ("tools.0.input_schema", (OBJ,)), ("tools.0.strict", (BOOL,)), ("tool_choice", (OBJ,)),
        ("tool_choice.type", (STR,)), ("tool_choice.name", (STR,)), ("tool_choice.disable_parallel_tool_use", (BOOL,)),
        ("stop_sequences", (ARR,)), ("stop_sequences.0", (STR,)), ("temperature", (NUM,)), ("top_p", (NUM,)),
        ("max_tokens", (INT,)), ("metadata", (OBJ,)), ("metadata.user_id", (STR,)), ("thinking", (OBJ,)),
        ("thinking.type", (STR,)), ("thinking.budget_tokens", (INT,)), ("output_config", (OBJ,)),
        ("output_config.effort", (STR,)), ("output_config.format", (OBJ,)), ("output_config.format.type", (STR,)),
        ("output_config.format.schema", (OBJ,)),
    ],
    ("responses", "chat"): [
        ("instructions", (STR, ARR)), ("input.0", (OBJ,)), ("input.0.type", (STR,)), ("input.0.role", (STR,)),
        ("input.0.content", (STR, ARR)), ("input.0.content.0", (OBJ,)), ("input.0.content.0.type", (STR,)),
        ("input.0.content.0.text", (STR,)), ("input.1.name", (STR,)), ("input.1.call_id", (STR,)),
        ("input.2.call_id", (STR,)), ("input.2.output", (STR, ARR)), ("tools", (ARR,)), ("tools.0", (OBJ,)),
        ("tools.0.type", (STR,)), ("tools.0.name", (STR,)), ("tools.0.description", (STR,)),
        ("tools.0.parameters", (OBJ,)), ("tools.0.strict", (BOOL,)), ("tool_choice", (STR, OBJ)), ("text", (OBJ,)),
        ("text.format", (OBJ,)), ("text.format.type", (STR,)), ("text.format.name", (STR,)),
        ("text.format.schema", (OBJ,)), ("text.format.strict", (BOOL,)), ("reasoning", (OBJ,)),
        ("reasoning.effort", (STR,)), ("temperature", (NUM,)), ("top_p", (NUM,)), ("max_output_tokens", (INT,)),
        ("user", (STR,)), ("safety_identifier", (STR,)), ("parallel_tool_calls", (BOOL,)),
    ],
    ("gemini", "chat"): [
        ("systemInstruction", (STR, OBJ, ARR)), ("systemInstruction.parts", (ARR,)), ("systemInstruction.parts.0", (OBJ,)),
        ("systemInstruction.parts.0.text", (STR,)), ("contents.0", (OBJ,)), ("contents.0.role", (STR,)),
        ("contents.0.parts", (ARR,)), ("contents.0.parts.0", (OBJ,)), ("contents.0.parts.0.text", (STR,)),
        ("contents.1.parts.0.thought", (BOOL,)), ("contents.1.parts.0.functionCall", (OBJ,)),
        ("contents.1.parts.0.functionCall.name", (STR,)), ("contents.1.parts.0.functionCall.id", (STR,)),
        ("contents.1.parts.0.functionCall.args", (OBJ,)), ("contents.2.parts.0.functionResponse", (OBJ,)),
        ("contents.2.parts.0.functionResponse.name", (STR,)), ("contents.2.parts.0.functionResponse.id", (STR,)),
        ("contents.2.parts.0.functionResponse.response", (OBJ,)),
        ("contents.2.parts.0.functionResponse.parts", (ARR,)), ("tools", (ARR,)), ("tools.0", (OBJ,)),
        ("tools.0.functionDeclarations", (ARR,)), ("tools.0.functionDeclarations.0", (OBJ,)),
        ("tools.0.functionDeclarations.0.name", (STR,)), ("tools.0.functionDeclarations.0.description", (STR,)),
        ("tools.0.functionDeclarations.0.parameters", (OBJ,)),
        ("tools.0.functionDeclarations.0.parametersJsonSchema", (OBJ,)), ("toolConfig", (OBJ,)),
        ("toolConfig.functionCallingConfig", (OBJ,)), ("toolConfig.functionCallingConfig.mode", (STR,)),
        ("toolConfig.functionCallingConfig.allowedFunctionNames", (ARR,)), ("generationConfig", (OBJ,)),
        ("generationConfig.temperature", (NUM,)), ("generationConfig.topP", (NUM,)),
        ("generationConfig.maxOutputTokens", (INT,)), ("generationConfig.seed", (INT,)),
        ("generationConfig.presencePenalty", (NUM,)), ("generationConfig.frequencyPenalty", (NUM,)),
        ("generationConfig.candidateCount", (INT,)), ("generationConfig.stopSequences", (ARR,)),
        ("generationConfig.stopSequences.0", (STR,)), ("generationConfig.responseModalities", (ARR,)),
        ("generationConfig.responseMimeType", (STR,)), ("generationConfig.responseSchema", (OBJ,)),
        ("generationConfig.responseJsonSchema", (OBJ,)), ("generationConfig.thinkingConfig", (OBJ,)),
        ("generationConfig.thinkingConfig.thinkingBudget", (INT,)),
        ("generationConfig.thinkingConfig.thinkingLevel", (STR,)),
        ("generationConfig.thinkingConfig.includeThoughts", (BOOL,)),
    ],
}  # fmt: skip

# One value of each JSON type; a field gets each one its API does not allow there.
_ONE_OF = {INT: 5, NUM: 1.5, STR: "x", BOOL: True, ARR: [5], OBJ: {"a": 1}}


def wrong_values(allowed: tuple[str, ...]) -> list[Any]:
    """Every value of a JSON type ``allowed`` does not hold (a number field holds integers)."""
    held = set(allowed) | ({INT} if NUM in allowed else set())
    return [value for kind, value in _ONE_OF.items() if kind not in held]


def mutated(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    """A copy of ``base`` with the field at ``dotted`` (``messages.0.content``) set to ``value``."""
    out = copy.deepcopy(base)
    *parents, last = [int(k) if k.isdigit() else k for k in dotted.split(".")]
    node: Any = out
    for key in parents:
        node = node[key]
    node[last] = value
    return out


def named(client: str, dotted: str) -> str:
    """The field as the client's API names it in an error: Anthropic as the dotted path,
    OpenAI and Google with indexes in brackets, each between quotes."""
    if client == "messages":
        return f"{dotted}:"
    return "'" + re.sub(r"\.(\d+)", r"[\1]", dotted) + "'"


# The upstream model each API is asked under: one every rule of its translator takes.
TARGETS = {"chat": Target("m"), "messages": Target("claude-sonnet-4-5"), "gemini": Target("gemini-2.5-flash"),
           "responses": Target("m")}  # fmt: skip


def refusal(translator: Translator, payload: dict[str, Any]) -> Refusal:
    out = translator.request(payload, TARGETS[translator.upstream])
    assert isinstance(out, Refusal), out
    return out
