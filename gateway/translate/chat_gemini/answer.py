"""Gemini API answers → OpenAI chat completions, buffered and streamed.

A GenerateContentResponse (Gemini API reference, "Generating content"): ``candidates[0]``
holds ``content.parts`` (``text``, ``text`` with ``thought: true``, ``functionCall`` with
``args`` an object and, on thinking models, a ``thoughtSignature``), ``finishReason`` and
``index``; ``usageMetadata`` counts the prompt (cached part included), a server-side tool's
prompt (``toolUsePromptTokenCount``), the answer (``candidatesTokenCount``) and the thoughts
(``thoughtsTokenCount``) apart.

A stream (``streamGenerateContent?alt=sse``) is the same document per event, each holding the
parts new since the last; the last one has ``finishReason`` and ``usageMetadata``, and no end
marker follows. Each event becomes its chat chunks at once: text and thoughts as deltas, each
``functionCall`` (always whole in Gemini) as one tool-call delta with its id, name and all its
arguments. The finish chunk, the usage chunk (when the client set
``stream_options.include_usage``) and ``[DONE]`` follow when the upstream stream ends.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Ending
from gateway.apis.chat.wire import broken_chunk
from gateway.apis.gemini.fields import field
from gateway.apis.gemini.wire import prompt_tokens
from gateway.sse import parse_event
from gateway.translate.base import Context, Known, chat_data, wants_usage
from gateway.translate.chat_gemini import signature
from gateway.translate.chat_gemini.request import function_names
from gateway.translate.names import NONE, Names

# Gemini finishReason → chat finish_reason (a turn that called functions ends with STOP in
# Gemini; chat says tool_calls). Every reason a filter gave is content_filter.
FINISH_REASON = {
    "STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter", "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter", "LANGUAGE": "content_filter",
}  # fmt: skip
_DONE = b"data: [DONE]\n\n"
# Gemini's own words for a turn that failed to call a function: no chat finish_reason says it,
# and an empty "stop" ended agents' turns in silence (Claude Code and Codex show nothing). The
# model is told nothing either way; the person is, and may ask again (Gemini CLI retries these).
FAILED_CALL = {"MALFORMED_FUNCTION_CALL": "was malformed", "UNEXPECTED_TOOL_CALL": "named no declared tool"}


def failed_call_text(reason: Any) -> str | None:
    says = FAILED_CALL.get(reason) if isinstance(reason, str) else None
    return f"[the model's function call {says} (Gemini finishReason {reason}); ask again]" if says else None


def finish_reason(reason: Any, called: bool) -> str:
    if called:
        return "tool_calls"
    return FINISH_REASON.get(reason, "stop") if isinstance(reason, str) else "stop"


def chat_usage(usage: Any) -> dict[str, Any]:
    """Chat usage from usageMetadata: the prompt with its cached part (as Google counts it, and
    as chat's ``cached_tokens`` is a part of ``prompt_tokens``) and the tool-use prompt, which
    Google counts apart and bills as input (``gemini.wire.prompt_tokens``): chat has no field
    of its own for it; thoughts are completion tokens (billed as output) and chat's
    ``reasoning_tokens``."""
    u = usage if isinstance(usage, Mapping) else {}

    def count(name: str) -> int:
        value = field(u, name)
        return value if isinstance(value, int) and value >= 0 else 0

    prompt, thoughts = prompt_tokens(u) or 0, count("thoughtsTokenCount")
    completion = count("candidatesTokenCount") + thoughts
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion,
                           "prompt_tokens_details": {"cached_tokens": count("cachedContentTokenCount")},
                           "completion_tokens_details": {"reasoning_tokens": thoughts}}  # fmt: skip
    return out


def first_candidate(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    candidates = doc.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, Mapping) else {}


def parts_of(candidate: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, Mapping) else None
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def tool_call(part: Mapping[str, Any], fallback_id: str, functions: Names = NONE) -> dict[str, Any] | None:
    """A functionCall part as a chat tool call: its id (Gemini's, else ``fallback_id``) with
    the part's thoughtSignature carried (``signature.py``), under the name the client declared."""
    call = field(part, "functionCall")
    if not isinstance(call, Mapping) or not isinstance(call.get("name"), str):
        return None
    given = call.get("id")
    call_id = given if isinstance(given, str) and given else fallback_id
    signed = field(part, "thoughtSignature")
    signed = signed if isinstance(signed, str) and signed else None
    args = call.get("args")
    function = {"name": functions.client(call["name"]), "arguments": json.dumps(args or {})}
    out: dict[str, Any] = {"id": signature.carry(call_id, signed), "type": "function", "function": function}
    if signed:
        out["extra_content"] = signature.extra_content(signed)
    return out


def one_call(ctx: Context) -> bool:
    """Whether the client asked for at most one call an answer (``parallel_tool_calls: false``).
    Gemini has no such knob (googleapis/python-genai#1831, open): a second call in the answer
    is left out. The client then answers the one call it got, and the model turn it sends back
    holds that call alone, the first, which carries the answer's thoughtSignature ("only the
    first functionCall part" has it, the thought-signatures guide): one call, one response, as
    Gemini requires ("the number of function response parts is equal to the number of function
    call parts"). The model asks again for what it still needs, one call at a time."""
    return ctx.request.get("parallel_tool_calls") is False


def chat_completion(doc: Mapping[str, Any], ctx: Context, created: int) -> dict[str, Any]:
    candidate = first_candidate(doc)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    functions = function_names(ctx.request.get("tools"))
    most = 1 if one_call(ctx) else None
    for part in parts_of(candidate):
        text = part.get("text")
        if isinstance(text, str):
            (reasoning if part.get("thought") is True else texts).append(text)
            continue
        call = tool_call(part, f"call_{ctx.request_id}_{len(calls)}", functions)
        if call is not None and len(calls) != most:
            calls.append(call)
        # inlineData (an image the model made), executableCode, …: nothing a chat message holds
    failed = None if calls else failed_call_text(field(candidate, "finishReason"))
    if failed is not None:
        # Set apart from text the model wrote, if any: an empty part is none (a client parsing
        # the content as JSON, response_format's .parse(), then reads the note alone).
        texts.append(("\n\n" if any(texts) else "") + failed)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    reason = field(candidate, "finishReason")
    if not candidate and _blocked(doc):
        reason = "SAFETY"  # the prompt was blocked: no candidate at all
    return {
        "id": _chat_id(doc, ctx),
        "object": "chat.completion",
        "created": created,
        "model": ctx.requested_model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(reason, bool(calls))}],
        "usage": chat_usage(field(doc, "usageMetadata")),
    }  # fmt: skip


def _blocked(doc: Mapping[str, Any]) -> bool:
    feedback = field(doc, "promptFeedback")
    return isinstance(feedback, Mapping) and bool(field(feedback, "blockReason"))


def _chat_id(doc: Mapping[str, Any] | None, ctx: Context) -> str:
    given = field(doc, "responseId") if doc is not None else None
    return f"chatcmpl-{given if isinstance(given, str) and given else ctx.request_id}"



class ChatStream:
    """One Gemini stream as one chat-completions stream (``StreamTranslator``)."""

    def __init__(self, ctx: Context, created: int, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.include_usage = wants_usage(ctx)
        self.base: dict[str, Any] = {"id": _chat_id(None, ctx), "object": "chat.completion.chunk",
                                     "created": created, "model": ctx.requested_model}  # fmt: skip
        self.started = False
        self.finished = False
        self.calls = 0
        self.said = False  # content text was shown: the failed-call note is set apart from it
        self.reason: Any = None
        self.usage: Any = None
        self.functions = function_names(ctx.request.get("tools"))
        self.most = 1 if one_call(ctx) else None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return chat_data({**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                "finish_reason": finish}]})  # fmt: skip

    def event(self, raw: bytes) -> bytes:
        if self.finished:
            return b""
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None:
            doc = parse_event(raw).json()
        if not isinstance(doc, dict):
            return b""  # a comment; a malformed event is the reader's to end the stream on
        out: list[bytes] = []
        if not self.started:
            self.started = True
            self.base["id"] = _chat_id(doc, self.ctx)
            out.append(self._chunk({"role": "assistant", "content": ""}))
        candidate = first_candidate(doc)
        for part in parts_of(candidate):
            text = part.get("text")
            if isinstance(text, str):
                if text:
                    key = "reasoning_content" if part.get("thought") is True else "content"
                    self.said = self.said or key == "content"
                    out.append(self._chunk({key: text}))
                continue
            call = tool_call(part, f"call_{self.ctx.request_id}_{self.calls}", self.functions)
            if call is not None and self.calls != self.most:
                out.append(self._chunk({"tool_calls": [{"index": self.calls, **call}]}))
                self.calls += 1
        reason = field(candidate, "finishReason")
        if reason:
            self.reason = reason
        elif not candidate and _blocked(doc):
            self.reason = "SAFETY"  # the prompt was blocked: no candidate at all, as buffered
        usage = field(doc, "usageMetadata")
        if isinstance(usage, Mapping):
            self.usage = usage
            counts = chat_usage(usage)
            self.ctx.notes["usage"] = {"prompt": counts["prompt_tokens"],
                                       "completion": counts["completion_tokens"]}  # fmt: skip
        return b"".join(out)

    def close(self) -> bytes:
        if self.finished:
            return b""
        out = b""
        if not self.started:
            self.started = True
            out = self._chunk({"role": "assistant", "content": ""})
        failed = None if self.calls else failed_call_text(self.reason)
        if failed is not None:
            out += self._chunk({"content": ("\n\n" if self.said else "") + failed})
        out += self._chunk({}, finish_reason(self.reason, self.calls > 0))
        if self.include_usage:
            out += chat_data({**self.base, "choices": [], "usage": chat_usage(self.usage)})
        self.finished = True
        return out + _DONE

    def broken(self, ending: Ending) -> bytes:
        """The gateway's own chat broken chunk, made by the chat dialect's reader so both stay
        one shape; never ``[DONE]``."""
        self.finished = True
        return broken_chunk(self.base, ending, self.ctx.request_id, self.ctx.requested_model)
