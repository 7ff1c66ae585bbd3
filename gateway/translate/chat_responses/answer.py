"""A Responses ``response`` as a ``chat.completion``, and the pieces the stream shares.

Reasoning goes where the gateway puts it for every chat client (``reasoning_content``, as
chat_messages and chat_gemini do): the summaries OpenAI writes, or the raw ``reasoning_text``
a server that shows it (vLLM, Ollama) sends. Encrypted reasoning has no place in chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate.base import Context
from gateway.translate.chat_responses.request import function_names

# Why a response stopped early (``incomplete_details.reason``), as chat names it.
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


def finish_reason(status: Any, details: Any, called: bool) -> str:
    if status == "incomplete":
        reason = details.get("reason") if isinstance(details, Mapping) else None
        return _INCOMPLETE.get(reason, "length") if isinstance(reason, str) else "length"
    return "tool_calls" if called else "stop"


def chat_usage(usage: Any) -> dict[str, Any]:
    """Chat usage from Responses usage; cache writes (GPT-5.6 and later) under chat's own
    ``prompt_tokens_details.cache_write_tokens`` when there are any."""
    u = usage if isinstance(usage, Mapping) else {}

    def count(doc: Any, key: str) -> int:
        value = doc.get(key) if isinstance(doc, Mapping) else None
        return value if isinstance(value, int) and value >= 0 else 0

    prompt, completion = count(u, "input_tokens"), count(u, "output_tokens")
    details: dict[str, int] = {"cached_tokens": count(u.get("input_tokens_details"), "cached_tokens")}
    written = count(u.get("input_tokens_details"), "cache_write_tokens")
    if written:
        details["cache_write_tokens"] = written
    return {
        "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": {
            "reasoning_tokens": count(u.get("output_tokens_details"), "reasoning_tokens")},
    }  # fmt: skip


def reasoning_text(item: Mapping[str, Any]) -> str:
    """What a reasoning item says: its summaries, else its raw reasoning text."""
    texts = [s.get("text") for s in item.get("summary") or () if isinstance(s, Mapping)]
    if not any(texts):
        texts = [c.get("text") for c in item.get("content") or () if isinstance(c, Mapping)]
    return "\n\n".join(t for t in texts if isinstance(t, str) and t)


def chat_id(response_id: Any, ctx: Context) -> str:
    return f"chatcmpl-{response_id if isinstance(response_id, str) and response_id else ctx.request_id}"


def chat_completion(doc: Mapping[str, Any], ctx: Context, created: int) -> dict[str, Any]:
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    functions = function_names(ctx.request.get("tools"))
    for item in doc.get("output") or ():
        kind = item.get("type") if isinstance(item, Mapping) else None
        if kind == "message":
            for part in item.get("content") or ():
                if not isinstance(part, Mapping):
                    continue
                if part.get("type") == "output_text" and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                elif part.get("type") == "refusal" and isinstance(part.get("refusal"), str):
                    refusals.append(part["refusal"])
        elif kind == "reasoning":
            said = reasoning_text(item)
            if said:
                reasoning.append(said)
        elif kind == "function_call":
            arguments = item.get("arguments")
            # Clients parse the arguments as JSON: a call without parameters gets ``{}``.
            arguments = arguments if isinstance(arguments, str) and arguments else "{}"
            fn = {"name": functions.client(str(item.get("name") or "")), "arguments": arguments}
            call_id = str(item.get("call_id") or item.get("id") or "")
            calls.append({"id": call_id, "type": "function", "function": fn})
        # hosted tools' items (web_search_call…): the server ran them; the text tells what they found
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None,
                               "refusal": "".join(refusals) if refusals else None}  # fmt: skip
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    stamp = doc.get("created_at")
    return {
        "id": chat_id(doc.get("id"), ctx),
        "object": "chat.completion",
        "created": stamp if isinstance(stamp, int) else created,
        "model": ctx.requested_model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(doc.get("status"), doc.get("incomplete_details"),
                                                    bool(calls))}],
        "usage": chat_usage(doc.get("usage")),
    }  # fmt: skip
