"""A chat completion as an Anthropic Messages ``message``, and the pieces the stream shares.

Content order is thinking (from ``reasoning_content`` or ``reasoning``), text, then tool_use:
the order a chat answer implies, since chat has one field of each. A thinking block made
here has an empty ``signature``: there is nothing to sign it with, and the request side
drops thinking blocks from history anyway.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.policy.tokens import BYTES_PER_TOKEN, IMAGE_TOKENS
from gateway.translate.base import Context, input_tokens
from gateway.translate.messages_chat.request import answer_wrapped, declared_tools, function_names
from gateway.translate.root import unwrapped
from gateway.translate.tool_ids import to_anthropic_id

# The key a tool_use input gets when the model's arguments are not a JSON object, so the
# client's tool validation reports the bad call back to the model instead of it vanishing.
INVALID_ARGUMENTS = "_invalid_json_arguments"

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def message_id(ctx: Context) -> str:
    rid = ctx.request_id
    # The gateway's own ids are hex: nothing to strip. Tested as bytes: ``str.isalnum`` asks
    # four Unicode tables a character, ``bytes.isalnum`` one ASCII table (a 32-digit id ~1,800
    # instructions against ~850 with the encode, issue #38); the same answer for ASCII text.
    if not (rid.isascii() and rid.encode().isalnum()):
        rid = _UNSAFE.sub("", rid)
    return "msg_" + (rid[:48] or "gateway")


def tool_id(ctx: Context, index: int) -> str:
    """For a tool call the upstream sent without an id (some servers do)."""
    return f"toolu_{_UNSAFE.sub('', ctx.request_id)[:24]}_{index}"


def tool_input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if not isinstance(arguments, str) or not arguments.strip():
        return {}  # no-argument tools often come with "" arguments
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):  # a model's text nested past json's recursion, too
        return {INVALID_ARGUMENTS: arguments}
    return parsed if isinstance(parsed, dict) else {INVALID_ARGUMENTS: arguments}


def stop_reason(finish: Any, tools: bool, refused: bool, matched: str | None) -> str:
    """Chat ``finish_reason`` → Messages ``stop_reason``.

    A tool call with finish ``stop`` (llama.cpp and vLLM parsers sometimes say so) is still a
    tool_use turn: agent loops run tools only on ``tool_use``. And ``tool_calls`` with no call
    in the answer (a server whose tool-call parser gave up) is not one: ``tool_use`` without a
    tool_use block leaves an agent with nothing to run and nothing to show."""
    if refused or finish == "content_filter":
        return "refusal"
    if finish == "length":
        return "max_tokens"
    if tools:
        return "tool_use"
    if matched is not None:
        return "stop_sequence"
    return "end_turn"


def matched_stop(choice: Mapping[str, Any], request: Mapping[str, Any]) -> str | None:
    """The stop sequence that ended the answer, when the upstream names it (vLLM's
    ``choice.stop_reason``); chat completions itself never says which one matched."""
    named = choice.get("stop_reason")
    stops = request.get("stop_sequences")
    if isinstance(named, str) and isinstance(stops, list) and named in stops:
        return named
    return None


def usage(chat: Any, estimated_input: int, estimated_output: int = 0) -> tuple[dict[str, Any], bool]:
    """Messages usage from chat usage (estimates where it is missing), and whether any
    number in it is an estimate. Cached prompt tokens are ``cache_read_input_tokens`` and
    written ones (``cache_write_tokens``: OpenRouter's Claude, OpenAI's GPT-5.6 and later)
    ``cache_creation_input_tokens``, neither part of ``input_tokens``, as Anthropic counts
    them; chat counts both in ``prompt_tokens`` (``apis/common.token_counts``)."""
    chat = chat if isinstance(chat, dict) else {}
    prompt = chat.get("prompt_tokens")
    completion = chat.get("completion_tokens")
    estimated = False
    if not isinstance(prompt, int):
        prompt, estimated = estimated_input, True
    if not isinstance(completion, int):
        completion, estimated = estimated_output, True
    cached = written = 0
    # Each test once, and the cache's members only where the usage has one: this reads every
    # translated answer's usage (issue #38).
    if "prompt_tokens_details" in chat or "prompt_cache_hit_tokens" in chat:
        details = chat.get("prompt_tokens_details")
        found = details.get("cached_tokens") if isinstance(details, dict) else None
        if not isinstance(found, int):
            found = chat.get("prompt_cache_hit_tokens")  # DeepSeek's own name
        cached = min(max(found, 0), prompt) if isinstance(found, int) else 0
        wrote = details.get("cache_write_tokens") if isinstance(details, dict) else None
        written = min(max(wrote, 0), prompt - cached) if isinstance(wrote, int) else 0
    return {
        "input_tokens": prompt - cached - written,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": cached,
        "output_tokens": completion,
    }, estimated


def estimate_input_tokens(request: Mapping[str, Any], size: int | None = None) -> int:
    """The prompt size a chat upstream does not report before its last chunk: the request's
    bytes (``size`` when the caller knows them) at policy/tokens.py's rate, with each base64
    image counted as one image."""
    if size is None:
        try:
            size = len(orjson.dumps(request))
        except TypeError:
            size = len(json.dumps(request, default=str))
    images = 0
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            inner = block.get("content") if isinstance(block, dict) else None
            for b in [block, *(inner if isinstance(inner, list) else ())]:
                source = b.get("source") if isinstance(b, dict) and b.get("type") == "image" else None
                if isinstance(source, dict) and isinstance(source.get("data"), str):
                    size -= len(source["data"])
                    images += 1
    return max(1, round(size / BYTES_PER_TOKEN) + images * IMAGE_TOKENS)


def reasoning_of(message: Mapping[str, Any]) -> str:
    """``reasoning_content`` (DeepSeek, vLLM, llama.cpp) or ``reasoning`` (Groq, OpenRouter,
    newer vLLM); never both, which some servers send with the same text."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def answer(doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    choices = doc.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    choice: Mapping[str, Any] = first if isinstance(first, dict) else {}
    found = choice.get("message")
    message: Mapping[str, Any] = found if isinstance(found, dict) else {}
    content: list[dict[str, Any]] = []
    # Membership before the look-ups: most answers have neither reasoning nor tool calls.
    thinking = reasoning_of(message) if "reasoning_content" in message or "reasoning" in message else ""
    if thinking:
        content.append({"type": "thinking", "thinking": thinking, "signature": ""})
    text = message.get("content")
    if isinstance(text, list):  # a few servers answer with content parts
        text = "".join(
            p.get("text", "") for p in text if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if isinstance(text, str) and text:
        if answer_wrapped(ctx.request):  # the JSON the client's schema asked for, not our wrapper
            text = unwrapped(text, "json")
        content.append({"type": "text", "text": text})
    refusal = message.get("refusal")
    refused = isinstance(refusal, str) and refusal != ""
    if refused:
        content.append({"type": "text", "text": refusal})
    tools = False
    calls = message.get("tool_calls")
    if calls and isinstance(calls, list):  # most answers call no tool: no names to map
        functions = function_names(declared_tools(ctx.request))
        for i, call in enumerate(calls):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                continue
            given = call.get("id")  # in Anthropic's alphabet: the client may send it on to Anthropic
            call_id = to_anthropic_id(given) if isinstance(given, str) and given else tool_id(ctx, i)
            content.append({"type": "tool_use", "id": call_id,
                            "name": functions.client(function["name"]),
                            "input": tool_input(function.get("arguments"))})  # fmt: skip
            tools = True
    matched = matched_stop(choice, ctx.request) if "stop_reason" in choice else None
    reported = doc.get("usage")
    out_usage, estimated = usage(reported, 0, 0)
    if estimated:
        # Estimates (the prompt's, the answer's) only where the upstream gave no count.
        counts = reported if isinstance(reported, dict) else {}
        out_usage, _ = usage(
            reported,
            0 if isinstance(counts.get("prompt_tokens"), int) else input_tokens(ctx, estimate_input_tokens),
            0 if isinstance(counts.get("completion_tokens"), int) else _output_estimate(content),
        )  # fmt: skip
        ctx.notes["usage_estimated"] = True
    return {
        "id": message_id(ctx),
        "type": "message",
        "role": "assistant",
        "model": ctx.requested_model,
        "content": content,
        "stop_reason": stop_reason(choice.get("finish_reason"), tools, refused, matched),
        "stop_sequence": matched,
        "usage": out_usage,
    }


def _output_estimate(content: list[dict[str, Any]]) -> int:
    size = 0
    for block in content:
        for key in ("text", "thinking"):
            if isinstance(block.get(key), str):
                size += len(block[key].encode())
        if block["type"] == "tool_use":
            size += len(json.dumps(block["input"]))
    return round(size / BYTES_PER_TOKEN)
