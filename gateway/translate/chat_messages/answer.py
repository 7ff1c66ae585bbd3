"""Anthropic Messages answers → OpenAI chat completions, buffered and streamed.

Stream grammar produced (OpenAI API reference, "The chat completion chunk object"): a first
chunk with ``role``, then ``content`` / ``reasoning_content`` / ``tool_calls`` deltas (a tool
call's first delta carries its ``index``, ``id``, ``type`` and ``name``, later ones argument
fragments only), one chunk with the ``finish_reason``, the usage chunk (``choices: []``) when
the client set ``stream_options.include_usage``, then ``data: [DONE]``. Each Messages event
becomes its chunks at once: nothing is held back.

A delta is routed by its own type, not by the type its block was opened with: a
``thinking_delta`` is reasoning even inside a text block (LiteLLM #33224).

Signed thinking rides in ``thinking_blocks`` on the message (LiteLLM's field for it, which
clients written for LiteLLM already send back): ``{"type": "thinking", "thinking", "signature"}``
and ``{"type": "redacted_thinking", "data"}``, in the answer's order. Anthropic wants them back
as they came when a tool loop goes on with thinking on (the request side, ``request.py``).
Streamed, a thinking block's entry comes whole once the block closes (its signature is the
block's last delta), with an ``index`` (its rank among the answer's thinking blocks) so that
delta accumulators (the openai SDK's) keep entries apart instead of raising on a list of
objects without one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.apis.base import Ending
from gateway.apis.chat.wire import broken_chunk
from gateway.sse import parse_event
from gateway.translate import names
from gateway.translate.base import CONTINUED, Context, Known, chat_data, continued, wants_usage
from gateway.translate.names import Names
from gateway.translate.tool_ids import from_anthropic_id

FINISH_REASON = {
    "end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
    "max_tokens": "length", "model_context_window_exceeded": "length",
    "tool_use": "tool_calls", "refusal": "content_filter",
}  # fmt: skip

_DONE = b"data: [DONE]\n\n"
_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'


def _json_of(raw: bytes) -> Any:
    """The JSON of one Messages event. Anthropic sends each as one ``event:`` line and one
    ``data:`` line: that shape is read without the general SSE parse (half the per-event cost);
    anything else (comments, split data lines, CRs, what orjson refuses) goes the long way."""
    if raw.startswith(b"event: ") and raw.endswith(b"\n\n") and b"\r" not in raw:
        head = raw.find(b"\ndata: ")
        if head > 0 and raw.count(b"\n", head + 1) == 2:
            try:
                return orjson.loads(raw[head + 7 : -2])
            except orjson.JSONDecodeError:
                pass
    return parse_event(raw).json()



def finish_reason(stop_reason: Any) -> str:
    return FINISH_REASON.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def chat_usage(usage: Any) -> dict[str, Any]:
    """Chat usage from Messages usage: every input kind is a prompt token (the provider
    processed and bills all of them); cache reads are the chat API's ``cached_tokens``, cache
    writes its ``cache_write_tokens`` when there are any (the openai SDK's PromptTokensDetails
    has the field)."""
    u = usage if isinstance(usage, Mapping) else {}

    def count(key: str) -> int:
        value = u.get(key)
        return value if isinstance(value, int) and value >= 0 else 0

    cached, written = count("cache_read_input_tokens"), count("cache_creation_input_tokens")
    prompt = count("input_tokens") + written + cached
    completion = count("output_tokens")
    cache = {"cached_tokens": cached, **({"cache_write_tokens": written} if written else {})}
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion, "prompt_tokens_details": cache}  # fmt: skip
    details = u.get("output_tokens_details")
    if isinstance(details, Mapping) and isinstance(details.get("thinking_tokens"), int):
        out["completion_tokens_details"] = {"reasoning_tokens": details["thinking_tokens"]}
    return out



@names.per_tools
def function_names(tools: Any) -> Names:
    """The chat tools' names as Anthropic takes them (``translate/names.py``): a chat server
    takes an MCP tool's ``github.create_issue``, Anthropic refuses it ("tools.0.custom.name:
    String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", gateway/fake/messages_rules.py)."""
    return names.names_for(names.chat_declared(tools), names.MESSAGES)

def chat_completion(doc: Mapping[str, Any], ctx: Context, created: int) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    signed: list[dict[str, Any]] = []
    for block in doc.get("content") or []:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append(block.get("text") or "")
        elif kind in ("thinking", "redacted_thinking"):
            if kind == "thinking":
                reasoning.append(block.get("thinking") or "")
            carried = thinking_block(block)
            if carried is not None:
                signed.append(carried)
        elif kind == "tool_use":
            name = function_names(ctx.request.get("tools")).client(str(block.get("name", "")))
            fn = {"name": name, "arguments": json.dumps(block.get("input") or {})}
            call_id = from_anthropic_id(str(block.get("id", "")))
            calls.append({"id": call_id, "type": "function", "function": fn})
        # server tool blocks: nothing a chat message can hold
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if signed:
        message["thinking_blocks"] = signed
    if calls:
        message["tool_calls"] = calls
    return {
        "id": _chat_id(doc.get("id"), ctx),
        "object": "chat.completion",
        "created": created,
        "model": ctx.requested_model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": finish_reason(doc.get("stop_reason"))}],
        "usage": chat_usage(doc.get("usage")),
    }  # fmt: skip


def thinking_block(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """A thinking or redacted_thinking block as ``thinking_blocks`` carries it; None for one
    that cannot go back (unsigned: Anthropic checks the signature)."""
    if block.get("type") == "redacted_thinking":
        data = block.get("data")
        return {"type": "redacted_thinking", "data": data} if isinstance(data, str) and data else None
    thinking, signature = block.get("thinking"), block.get("signature")
    if not isinstance(signature, str) or not signature:
        return None
    text = thinking if isinstance(thinking, str) else ""
    return {"type": "thinking", "thinking": text, "signature": signature}


def _chat_id(message_id: Any, ctx: Context) -> str:
    return f"chatcmpl-{message_id if isinstance(message_id, str) and message_id else ctx.request_id}"


class ChatStream:
    """One Messages stream as one chat-completions stream (``StreamTranslator``)."""

    def __init__(self, ctx: Context, created: int, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.include_usage = wants_usage(ctx)
        self.base: dict[str, Any] = {"id": _chat_id(None, ctx), "object": "chat.completion.chunk",
                                     "created": created, "model": ctx.requested_model}  # fmt: skip
        self.started = False
        self.finished = False
        self.tools: dict[int, int] = {}  # content block index -> tool call index
        self.bare: set[int] = set()  # tool blocks no argument text has been sent for yet
        self.thinking: dict[int, dict[str, Any]] = {}  # open thinking blocks by index, as they grow
        self.signed = 0  # thinking_blocks entries sent
        self.stop_reason: Any = None
        self.usage: dict[str, Any] = {}
        self.continued = False  # the gateway continued the stream: its end says so
        self._head: bytes | None = None  # a delta chunk's bytes before its delta

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        if finish is not None:
            return chat_data({**self.base, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                    "finish_reason": finish}], **self._mark()})  # fmt: skip
        # The hot path (one chunk per upstream delta): only the delta is serialised; the
        # envelope around it is made once per stream.
        if self._head is None:
            head = orjson.dumps({**self.base, "choices": [{"index": 0, "delta": None}]})
            self._head = b"data: " + head[: head.rindex(b"null")]
        return self._head + orjson.dumps(delta) + _TAIL

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, raw: bytes) -> bytes:
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None:
            doc = _json_of(raw)
        if not isinstance(doc, dict) or self.finished:
            return b""
        kind = doc.get("type")
        if kind == "content_block_delta":  # most of a stream's events: asked first, no call to _start
            chunk = self._delta(doc.get("index"), doc.get("delta"))
            return chunk if self.started else self._start() + chunk
        if kind == "message_start":
            message = doc.get("message")
            if not isinstance(message, dict):
                message = {}
            if isinstance(message.get("id"), str):
                self.base["id"] = _chat_id(message["id"], self.ctx)
                self._head = None
            self._take_usage(message.get("usage"))
            return self._start()
        if kind == "content_block_start":
            return self._start() + self._block_start(doc.get("index"), doc.get("content_block"))
        if kind == "message_delta":
            delta = doc.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self.stop_reason = delta["stop_reason"]
            self._take_usage(doc.get("usage"))
            self.continued = self.continued or continued(doc)
            return b""
        if kind == "content_block_stop":
            index = doc.get("index")
            block = self.thinking.pop(index, None) if isinstance(index, int) else None
            if block is not None:
                carried = thinking_block({"type": "thinking", **block})
                return self._thinking_block(carried) if carried is not None else b""
            return self._no_arguments(index)
        if kind == "message_stop":
            return self.close()
        return b""  # ping, anything newer: nothing to show

    def _block_start(self, index: Any, block: Any) -> bytes:
        if not isinstance(block, dict):
            return b""
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            return self._chunk({"content": block["text"]})
        if kind == "thinking" and isinstance(index, int):
            text = block.get("thinking")
            self.thinking[index] = {"thinking": text if isinstance(text, str) else "", "signature": ""}
            return self._chunk({"reasoning_content": text}) if text else b""
        if kind == "redacted_thinking":
            carried = thinking_block(block)
            return self._thinking_block(carried) if carried is not None else b""
        if kind == "tool_use" and isinstance(index, int):
            self.tools[index] = len(self.tools)
            arguments = json.dumps(block["input"]) if block.get("input") else ""
            if not arguments:
                self.bare.add(index)
            call_id = from_anthropic_id(str(block.get("id", "")))
            name = function_names(self.ctx.request.get("tools")).client(str(block.get("name", "")))
            fn = {"name": name, "arguments": arguments}
            return self._chunk({"tool_calls": [{"index": self.tools[index], "id": call_id, "type": "function",
                                                "function": fn}]})  # fmt: skip
        return b""

    def _delta(self, index: Any, delta: Any) -> bytes:
        if not isinstance(delta, dict):
            return b""
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            return self._chunk({"content": delta["text"]})
        if kind == "thinking_delta" and delta.get("thinking"):
            if index in self.thinking and isinstance(delta["thinking"], str):
                self.thinking[index]["thinking"] += delta["thinking"]
            return self._chunk({"reasoning_content": delta["thinking"]})
        if kind == "signature_delta" and index in self.thinking and isinstance(delta.get("signature"), str):
            self.thinking[index]["signature"] += delta["signature"]
            return b""
        if kind == "input_json_delta" and delta.get("partial_json") and index in self.tools:
            self.bare.discard(index)
            fragment = {"index": self.tools[index], "function": {"arguments": delta["partial_json"]}}
            return self._chunk({"tool_calls": [fragment]})
        return b""  # citations_delta, empty fragments

    def _thinking_block(self, carried: dict[str, Any]) -> bytes:
        self.signed += 1
        return self._chunk({"thinking_blocks": [{"index": self.signed - 1, **carried}]})

    def _no_arguments(self, index: Any) -> bytes:
        """``{}`` for a call to a tool without parameters, whose input Anthropic streams as
        nothing (or one empty fragment): the buffered answer gives ``{}``, and clients parse
        the arguments as JSON (the openai SDK's ``responses.stream()`` raises on ``""``)."""
        if index not in self.bare:
            return b""
        self.bare.discard(index)
        return self._chunk({"tool_calls": [{"index": self.tools[index], "function": {"arguments": "{}"}}]})

    def _take_usage(self, usage: Any) -> None:
        # message_delta's counts are cumulative: the latest value of each kind wins.
        if isinstance(usage, dict):
            self.usage.update({k: v for k, v in usage.items() if isinstance(v, int | dict)})
            counts = chat_usage(self.usage)
            self.ctx.notes["usage"] = {"prompt": counts["prompt_tokens"],
                                       "completion": counts["completion_tokens"]}  # fmt: skip

    def close(self) -> bytes:
        if self.finished:
            return b""
        out = self._start() + b"".join(self._no_arguments(i) for i in sorted(self.bare))
        out += self._chunk({}, finish_reason(self.stop_reason))
        if self.include_usage:
            out += chat_data({**self.base, "choices": [], "usage": chat_usage(self.usage), **self._mark()})
        self.finished = True
        return out + _DONE

    def _mark(self) -> dict[str, bool]:
        """On the finish and usage chunks of a continued stream, as a chat upstream's splice
        marks them (``apis/chat/resume.py``)."""
        return {CONTINUED: True} if self.continued else {}

    def broken(self, ending: Ending) -> bytes:
        """The gateway's own chat broken chunk (``finish_reason: "error"`` with ``error``),
        made by the chat dialect's reader so both stay one shape; never ``[DONE]``."""
        self.finished = True
        return broken_chunk(self.base, ending, self.ctx.request_id, self.ctx.requested_model)
