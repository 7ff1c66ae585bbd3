"""Chat completions answers as Responses ``response`` objects: ``answer`` for a buffered
``chat.completion``, and the pieces the stream shares with it (ids, items, usage, the envelope).

Ids the gateway makes up carry the request id (``resp_<rid>``, ``msg_<rid>_<n>``…), so they
are unique per request and the same in every event of one stream. ``model`` is what the
client asked for. A chat ``tool_call.id`` becomes the item's ``call_id`` unchanged, so the
``function_call_output`` the client sends next pairs with the chat ``tool`` message by it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.translate.base import Context
from gateway.translate.responses_chat import additional_tools, thinking, tool_search
from gateway.translate.responses_chat.tools import CUSTOM_INPUT, Origin, offered, tool_names

# What a Responses object echoes of its request (OpenAI API reference, "The response object").
_ECHOED = (
    "instructions",
    "max_output_tokens",
    "parallel_tool_calls",
    "temperature",
    "tool_choice",
    "tools",
    "top_p",
    "truncation",
    "user",
    "metadata",
    "reasoning",
    "text",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
)
_DEFAULTS: dict[str, Any] = {
    "instructions": None,
    "max_output_tokens": None,
    "parallel_tool_calls": True,
    "temperature": None,
    "tool_choice": "auto",
    "tools": [],
    "top_p": None,
    "truncation": "disabled",
    "user": None,
    "metadata": {},
    "reasoning": {"effort": None, "summary": None},
    "text": {"format": {"type": "text"}},
}
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_SAFE = re.compile(r"[^a-zA-Z0-9_-]")


def rid(ctx: Context) -> str:
    return _SAFE.sub("", ctx.request_id) or "0"


def item_id(ctx: Context, prefix: str, index: int) -> str:
    return f"{prefix}_{rid(ctx)}_{index}"


def envelope(ctx: Context, created: int, status: str) -> dict[str, Any]:
    """The response object without output and usage."""
    doc: dict[str, Any] = {
        "id": f"resp_{rid(ctx)}",
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": ctx.requested_model,
        "output": [],
        "usage": None,
        "previous_response_id": None,
        "background": False,
        # Never the request's `store: true`: a chat upstream keeps nothing, so neither GET
        # /v1/responses/{id} nor a previous_response_id could find this response.
        "store": False,
    }
    for key in _ECHOED:
        if key in ctx.request:
            # The tools the model was offered: the hosted ones a chat server cannot run are not.
            doc[key] = offered(ctx.request[key]) if key == "tools" else ctx.request[key]
        elif key in _DEFAULTS:
            doc[key] = _DEFAULTS[key]
    return doc


def finish(doc: dict[str, Any], finish_reason: Any) -> None:
    """Status and incomplete_details from a chat finish_reason."""
    reason = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    doc["status"] = "incomplete" if reason else "completed"
    doc["incomplete_details"] = {"reason": reason} if reason else None


def usage(chat_usage: Any) -> dict[str, Any] | None:
    """Chat usage as Responses usage; DeepSeek's ``prompt_cache_hit_tokens`` counts as cached
    where ``prompt_tokens_details`` is missing."""
    if not isinstance(chat_usage, Mapping):
        return None

    def count(value: Any) -> int:
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    prompt, completion = count(chat_usage.get("prompt_tokens")), count(chat_usage.get("completion_tokens"))
    pdet = chat_usage.get("prompt_tokens_details")
    pdet = pdet if isinstance(pdet, Mapping) else {}
    cached = count(pdet.get("cached_tokens")) or count(chat_usage.get("prompt_cache_hit_tokens"))
    written = count(pdet.get("cache_write_tokens"))  # OpenRouter reports it; the SDK requires the field
    cdet = chat_usage.get("completion_tokens_details")
    reasoning = count(cdet.get("reasoning_tokens")) if isinstance(cdet, Mapping) else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": written},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": count(chat_usage.get("total_tokens")) or prompt + completion,
    }


def reasoning_item(
    ctx: Context, index: int, text: str, status: str = "completed", signed: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Chat ``reasoning_content`` is the model's raw reasoning: Responses' reasoning *content*
    (``reasoning_text``, what vLLM's and Ollama's Responses endpoints send for open models),
    not a summary; there is no summary to give. ``signed``: Anthropic's signed thinking
    blocks, sealed into ``encrypted_content`` for the client to send back (``thinking.py``),
    naming the model the upstream was asked for (``Context.upstream_model``)."""
    item = {
        "id": item_id(ctx, "rs", index),
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": status,
    }
    sealed = thinking.seal(signed, ctx.upstream_model) if signed else None
    if sealed is not None:
        item["encrypted_content"] = sealed
    return item


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def message_item(
    ctx: Context, index: int, parts: list[dict[str, Any]], status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id(ctx, "msg", index),
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": parts,
    }


def call_item(
    ctx: Context, index: int, call_id: str, origin: Origin, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    """A chat tool call as the Responses item the client's tool knows: a ``function_call``
    with its own name and namespace, a ``custom_tool_call`` with its raw input, or the
    ``tool_search_call`` of a client-executed search."""
    # The request's tools are read only for a call that may be the search.
    searched = origin.name == tool_search.NAME
    if searched and tool_search.is_search(origin, additional_tools.declared(ctx.request)):
        return tool_search.call_item(item_id(ctx, "tsc", index), call_id, arguments, status)
    if origin.custom:
        item = {
            "id": item_id(ctx, "ctc", index),
            "type": "custom_tool_call",
            "status": status,
            "call_id": call_id,
            "name": origin.name,
            "input": custom_input(arguments),
        }
    else:
        item = {
            "id": item_id(ctx, "fc", index),
            "type": "function_call",
            "status": status,
            "call_id": call_id,
            "name": origin.name,
            # A call that got no argument text (a tool without parameters, streamed by some
            # servers as nothing) is ``{}``: clients parse arguments as JSON, and the openai SDK's
            # ``responses.stream()`` raises on "" for a strict tool.
            "arguments": arguments or "{}",
        }
    if origin.namespace:  # a custom one too: Codex's `exec` is in namespace `functions`
        item["namespace"] = origin.namespace
    return item


def custom_input(arguments: str) -> str:
    """The raw text of a custom tool call from its chat arguments ``{"input": "…"}``; arguments
    that are not that shape are given whole rather than lost."""
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):  # a model's text nested past json's recursion, too
        return arguments
    if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
        return str(parsed[CUSTOM_INPUT])
    return arguments


def call_id_of(ctx: Context, call: Mapping[str, Any], index: int) -> str:
    value = call.get("id")
    return value if isinstance(value, str) and value else f"call_{rid(ctx)}_{index}"


def answer(doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """A buffered ``chat.completion`` as a Responses ``response`` object."""
    created = doc.get("created")
    out = envelope(ctx, created if isinstance(created, int) else 0, "completed")
    choices = doc.get("choices")
    choice = as_dict(choices[0] if isinstance(choices, list) and choices else None)
    message = as_dict(choice.get("message"))
    names = tool_names(tool_search.effective_tools(ctx.request))
    items: list[dict[str, Any]] = []
    reasoning, signed = reasoning_of(message), thinking.carried(message)
    if reasoning or signed:
        items.append(reasoning_item(ctx, len(items), reasoning, signed=signed))
    text = text_of(message.get("content"))
    if text:
        items.append(message_item(ctx, len(items), [text_part(text)]))
    if isinstance(message.get("refusal"), str) and message["refusal"]:
        items.append(message_item(ctx, len(items), [{"type": "refusal", "refusal": message["refusal"]}]))
    for n, call in enumerate(message.get("tool_calls") or []):
        if not isinstance(call, dict):
            continue
        fn = as_dict(call.get("function"))
        args = fn.get("arguments")
        items.append(
            call_item(
                ctx,
                len(items),
                call_id_of(ctx, call, n),
                names.lookup(str(fn.get("name", ""))),
                args if isinstance(args, str) else orjson.dumps(args or {}).decode(),
            )
        )
    finish(out, choice.get("finish_reason"))
    if out["status"] == "incomplete" and items:
        items[-1]["status"] = "incomplete"
    out["output"] = items
    out["usage"] = usage(doc.get("usage"))
    return out


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def reasoning_of(delta: Mapping[str, Any]) -> str:
    """``reasoning_content`` (DeepSeek, llama.cpp, older vLLM) or ``reasoning`` (newer vLLM,
    OpenRouter)."""
    for key in ("reasoning_content", "reasoning"):
        value = delta.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""
