"""A chat completions stream as a Gemini ``streamGenerateContent?alt=sse`` stream.

Grammar kept (Gemini API reference, streamGenerateContent): every event is one whole
GenerateContentResponse, ``data: {…}`` and a blank line, no named events and no end marker;
``candidates[0].content`` holds this chunk's parts with ``role: "model"``; the last event has
``finishReason`` and ``usageMetadata``.

What the translation has to do that chat does not:

* text and thoughts go out as they come, one event per chat delta;
* a ``functionCall`` part is whole (``args`` an object), so a tool call's argument fragments
  are gathered, and every call goes out in the last event, with ``finishReason``, once the
  chat stream has ended (its usage comes after its finish_reason, in a chunk of its own);
* Gemini CLI treats a stream whose last event has no ``finishReason`` as broken and retries
  it, so the last event always has one, and ``usageMetadata`` beside it;
* Claude's signed thinking (``thinking_blocks`` deltas, each block whole once it closed) is
  gathered and sealed into the first call's ``thoughtSignature`` in that last event
  (``answer.py``);
* a structured answer whose schema went inside an object (a list, an enum: ``root.py``) is
  held to the end and goes out as one text part of that last event, the value taken out of the
  wrapper: its fragments cannot be unwrapped one by one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Ending
from gateway.apis.chat.call_slots import CallSlots
from gateway.apis.gemini.wire import broken_event, sse_event
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import loads_event, parse_event
from gateway.translate import sealed_thinking
from gateway.translate.base import CONTINUED, Context, Known, continued, input_tokens
from gateway.translate.gemini_chat.answer import (
    estimate_input_tokens,
    finish_reason,
    function_call,
    response_id,
    shows_thoughts,
    signed_calls,
    usage_metadata,
)
from gateway.translate.gemini_chat.names import NONE, names_for
from gateway.translate.gemini_chat.request import answer_wrapping
from gateway.translate.messages_chat.answer import reasoning_of
from gateway.translate.root import unwrapped


class _Call:
    __slots__ = ("args", "id", "name")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.args: list[str] = []


def _data(raw: bytes) -> bytes | str | None:
    """The data of one event; a fast path for the one-line ``data: …`` every server sends."""
    if raw.startswith(b"data: ") and raw.endswith(b"\n\n") and b"\n" not in raw[6:-2]:
        return raw[6:-2]
    return parse_event(raw).data


class GeminiStream:
    def __init__(self, ctx: Context, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.thoughts = shows_thoughts(ctx.request)
        self.calls: dict[int, _Call] = {}  # by CallSlots' number
        self.signed: list[dict[str, Any]] = []  # Claude's thinking blocks, for the first call
        self.slots = CallSlots()
        self.finish: Any = None
        self.chat_usage: dict[str, Any] | None = None
        self.shown = 0  # bytes of content sent, for an output estimate when usage never comes
        self.done = False
        self.continued = False  # the gateway continued the stream: its end says so
        self.head = {"modelVersion": ctx.requested_model, "responseId": response_id(ctx)}
        self.wrapping = answer_wrapping(ctx.request)
        self.held: list[str] = []  # a wrapped answer's text, until the end

    def event(self, raw: bytes) -> bytes:
        if self.done:
            return b""
        data = _data(raw)
        if data is None:
            return b""  # a keep-alive comment: Gemini streams have none
        if isinstance(data, str):
            data = data.encode()
        if len(data) < 16 and data.strip() == b"[DONE]":
            return self._finish()
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None:
            doc = loads_event(data)
        if not isinstance(doc, dict):
            return b""
        if isinstance(doc.get("usage"), dict):
            self.chat_usage = doc["usage"]
        self.continued = self.continued or continued(doc)
        out: list[bytes] = []
        for choice in doc.get("choices") or ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, out)
                break
        return b"".join(out)

    def close(self) -> bytes:
        return self._finish()

    def broken(self, ending: Ending) -> bytes:
        self.done = True
        return broken_event(ending, self.ctx.request_id)

    def _choice(self, choice: Mapping[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = reasoning_of(delta)
            if reasoning and self.thoughts:
                out.append(self._parts([{"text": reasoning, "thought": True}]))
            self.signed += sealed_thinking.carried(delta)
            for key in ("content", "refusal"):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    if self.wrapping and key == "content":
                        self.held.append(text)
                    else:
                        out.append(self._parts([{"text": text}]))
            for position, call in enumerate(delta.get("tool_calls") or ()):
                if isinstance(call, dict):
                    self._call(call, position)
        if choice.get("finish_reason"):
            self.finish = choice["finish_reason"]

    def _call(self, call: dict[str, Any], position: int) -> None:
        tool = self.calls.setdefault(self.slots.slot(call, position), _Call())
        if isinstance(call.get("id"), str) and call["id"] and tool.id is None:
            tool.id = call["id"]
        function = call.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and tool.name is None:
                tool.name = function["name"]
            if isinstance(function.get("arguments"), str):
                tool.args.append(function["arguments"])

    def _parts(self, parts: list[dict[str, Any]]) -> bytes:
        self.shown += sum(len(p.get("text", "")) for p in parts)
        candidate = {"content": {"role": "model", "parts": parts}, "index": 0}
        return sse_event({"candidates": [candidate], **self.head})

    def _finish(self) -> bytes:
        if self.done:
            return b""
        self.done = True
        request = self.ctx.request
        names = names_for(request.get("tools"), request.get("contents")) if self.calls else NONE
        parts = [function_call(c.id, names.client(c.name), "".join(c.args))
                 for c in self.calls.values() if c.name]  # fmt: skip
        signed_calls(parts, self.signed, self.ctx.upstream_model)
        if self.held and self.wrapping:
            text = unwrapped("".join(self.held), self.wrapping)
            parts.insert(0, {"text": text})
            self.shown += len(text)
        self.shown += sum(len("".join(c.args)) for c in self.calls.values())
        if self.finish is None:
            self.ctx.notes["finish_reason_missing"] = True
        estimate = input_tokens(self.ctx, estimate_input_tokens)
        usage, estimated = usage_metadata(self.chat_usage, estimate, round(self.shown / BYTES_PER_TOKEN))
        if estimated:
            self.ctx.notes["usage_estimated"] = True
        candidate = {"content": {"role": "model", "parts": parts or [{"text": ""}]},
                     "finishReason": finish_reason(self.finish), "index": 0}  # fmt: skip
        # Gemini has no end marker of its own: the event with the finishReason is marked.
        mark = {CONTINUED: True} if self.continued else {}
        return sse_event({"candidates": [candidate], "usageMetadata": usage, **self.head, **mark})
