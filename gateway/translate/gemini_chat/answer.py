"""A chat completion as a Gemini GenerateContentResponse, and the pieces the stream shares.

Parts come in the order a chat answer implies (it has one field of each): thoughts (from
``reasoning_content`` or ``reasoning``, as ``{"text", "thought": true}`` parts, only when the
request asked ``thinkingConfig.includeThoughts``: the Gemini API shows thoughts only then),
text, then one ``functionCall`` part per tool call, its ``id`` the upstream's (Gemini CLI sends
it back on the ``functionResponse``, so the next request pairs them exactly).

Claude's signed thinking (a Messages upstream's, in the chat message's ``thinking_blocks``) rides
in the first ``functionCall`` part's ``thoughtSignature``, sealed (``sealed_thinking.py``): where
Gemini 3 puts its own (on the first call of parallel calls), and what Google's thought-signatures
page tells clients to "pass it back exactly as received" (ai.google.dev/gemini-api/docs/
thought-signatures; Gemini CLI does). ``request.py`` reads it back, so the tool loop keeps
thinking on. An answer without calls carries none: Anthropic
asks a turn's thinking back only inside its tool loop.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.apis.gemini.fields import field
from gateway.policy.tokens import BYTES_PER_TOKEN, IMAGE_TOKENS
from gateway.translate import sealed_thinking
from gateway.translate.base import Context, input_tokens
from gateway.translate.gemini_chat.names import NONE, names_for
from gateway.translate.gemini_chat.request import answer_wrapping
from gateway.translate.messages_chat.answer import reasoning_of, tool_input
from gateway.translate.root import unwrapped

# chat finish_reason → Gemini finishReason. A tool call ends with STOP, as the Gemini API
# ends a functionCall turn; chat's content_filter is Gemini's SAFETY.
FINISH_REASON = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "function_call": "STOP",
                 "content_filter": "SAFETY"}  # fmt: skip
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def response_id(ctx: Context) -> str:
    return _UNSAFE.sub("", ctx.request_id)[:48] or "gateway"


def finish_reason(finish: Any) -> str:
    return FINISH_REASON.get(finish, "STOP") if isinstance(finish, str) else "STOP"


def shows_thoughts(request: Mapping[str, Any]) -> bool:
    config = field(request, "generationConfig")
    thinking = field(config, "thinkingConfig") if isinstance(config, dict) else None
    return isinstance(thinking, dict) and field(thinking, "includeThoughts") is True


def function_call(call_id: str | None, name: str, arguments: Any) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": tool_input(arguments)}
    if call_id:
        call["id"] = call_id
    return {"functionCall": call}


def signed_calls(parts: list[dict[str, Any]], blocks: list[dict[str, Any]], model: str | None) -> None:
    """``blocks`` (``thinking_blocks`` entries) sealed into the first ``functionCall`` part's
    ``thoughtSignature``, naming the ``model`` that made them (``Context.upstream_model``);
    nothing when there is no call or nothing to seal."""
    first = next((p for p in parts if "functionCall" in p), None)
    sealed = sealed_thinking.seal(blocks, model) if first is not None and blocks else None
    if first is not None and sealed is not None:
        first["thoughtSignature"] = sealed


def usage_metadata(chat: Any, estimated_input: int, estimated_output: int = 0) -> tuple[dict[str, Any], bool]:
    """Gemini usage from chat usage (estimates where it is missing), and whether any number
    is an estimate. Chat's ``completion_tokens`` include reasoning; Gemini counts thoughts
    apart (``thoughtsTokenCount``) from the answer (``candidatesTokenCount``)."""
    chat = chat if isinstance(chat, dict) else {}
    prompt, completion = chat.get("prompt_tokens"), chat.get("completion_tokens")
    estimated = not isinstance(prompt, int) or not isinstance(completion, int)
    prompt = prompt if isinstance(prompt, int) else estimated_input
    completion = completion if isinstance(completion, int) else estimated_output
    details = chat.get("completion_tokens_details")
    thoughts = details.get("reasoning_tokens") if isinstance(details, dict) else None
    thoughts = min(max(thoughts, 0), completion) if isinstance(thoughts, int) else 0
    cached_of = chat.get("prompt_tokens_details")
    cached = cached_of.get("cached_tokens") if isinstance(cached_of, dict) else None
    out: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": completion - thoughts,
                           "totalTokenCount": prompt + completion}  # fmt: skip
    if isinstance(cached, int) and cached > 0:
        out["cachedContentTokenCount"] = min(cached, prompt)
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    return out, estimated


def estimate_input_tokens(request: Mapping[str, Any], size: int | None = None) -> int:
    """The prompt size when the upstream does not report it: the request's bytes at
    policy/tokens.py's rate, each inline image counted as one image, not as its base64."""
    if size is None:
        try:
            size = len(orjson.dumps(request))
        except TypeError:
            size = len(json.dumps(request, default=str))
    images = 0
    for content in request.get("contents") or ():
        for part in (content.get("parts") or ()) if isinstance(content, dict) else ():
            blob = field(part, "inlineData") if isinstance(part, dict) else None
            if isinstance(blob, dict) and isinstance(blob.get("data"), str):
                size -= len(blob["data"])
                images += 1
    return max(1, round(size / BYTES_PER_TOKEN) + images * IMAGE_TOKENS)


def answer(doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    choices = doc.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    choice: Mapping[str, Any] = first if isinstance(first, dict) else {}
    found = choice.get("message")
    message: Mapping[str, Any] = found if isinstance(found, dict) else {}
    parts: list[dict[str, Any]] = []
    thinking = reasoning_of(message)
    if thinking and shows_thoughts(ctx.request):
        parts.append({"text": thinking, "thought": True})
    text = message.get("content")
    if isinstance(text, list):  # a few servers answer with content parts
        text = "".join(
            p.get("text", "") for p in text if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if isinstance(text, str) and text:
        how = answer_wrapping(ctx.request)
        parts.append({"text": unwrapped(text, how) if how else text})
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        parts.append({"text": refusal})
    calls = message.get("tool_calls")
    names = names_for(ctx.request.get("tools"), ctx.request.get("contents")) if calls else NONE
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            name = names.client(function["name"])
            parts.append(function_call(call.get("id"), name, function.get("arguments")))
    signed_calls(parts, sealed_thinking.carried(message), ctx.upstream_model)
    reported = doc.get("usage")
    # Estimates (the prompt's, the answer's) only where the upstream gave no count.
    counts = reported if isinstance(reported, dict) else {}
    prompt = 0 if isinstance(counts.get("prompt_tokens"), int) else input_tokens(ctx, estimate_input_tokens)
    shown = 0 if isinstance(counts.get("completion_tokens"), int) else sum(len(json.dumps(p)) for p in parts)
    usage, estimated = usage_metadata(reported, prompt, round(shown / BYTES_PER_TOKEN))
    if estimated:
        ctx.notes["usage_estimated"] = True
    finish = finish_reason(choice.get("finish_reason"))
    # An answer with nothing in it is content without parts, as Google sends one (a model that
    # spent its tokens thinking): google-genai then reads ``text`` as None and its chat leaves
    # the exchange out of the history it sends next, where an empty text part was kept.
    content = {"role": "model", "parts": parts} if parts else {"role": "model"}
    candidate = {"content": content, "finishReason": finish, "index": 0}
    return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": ctx.requested_model,
            "responseId": response_id(ctx)}  # fmt: skip
