"""A chat completions chunk stream as a Responses event stream, event by event:

``response.created`` → ``response.in_progress`` → per output item ``output_item.added`` →
(``content_part.added`` → ``output_text.delta``… → ``output_text.done`` →
``content_part.done`` | ``refusal.delta``… → ``refusal.done`` → ``content_part.done`` |
``function_call_arguments.delta``… → ``function_call_arguments.done`` |
``reasoning_text.delta``…) → ``output_item.done`` … → ``response.completed`` (or
``response.incomplete``) with the response id, the whole output and usage; every event with a
``sequence_number`` counting from 0. Codex reads ``output_item.done`` for tool calls and needs
``response.completed`` with an ``id`` (codex-rs/codex-api/src/sse/responses.rs), so the
arguments are complete in ``function_call_arguments.done`` and ``output_item.done`` whatever
the chunking (LiteLLM #27144), and no item is done without having been added (llm-rosetta #56).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import jsonbody
from gateway.apis.base import Ending
from gateway.apis.chat.call_slots import CallSlots
from gateway.apis.responses.failed import failed_response
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import EventSplitter, loads_event, parse_event
from gateway.translate.base import CONTINUED, Context, Known, continued
from gateway.translate.responses_chat import thinking, tool_search
from gateway.translate.responses_chat.answer import (
    as_dict,
    call_id_of,
    call_item,
    envelope,
    finish,
    item_id,
    message_item,
    reasoning_item,
    reasoning_of,
    text_part,
    usage,
)
from gateway.translate.responses_chat.tools import ToolNames, tool_names

# What a call item holds when it is added, before its arguments come: a search call's
# arguments are an object, known once whole (no event streams them).
_OPENING: dict[str, dict[str, Any]] = {"function_call": {"arguments": ""}, "custom_tool_call": {"input": ""},
                                       "tool_search_call": {"arguments": {}}}  # fmt: skip


@dataclass(slots=True)
class _Call:
    """One chat tool call (by its chunk ``index``) as it streams."""

    call_id: str
    chat_name: str
    args: list[str] = field(default_factory=list)
    out_index: int | None = None  # set once its output item was added
    kind: str = ""  # its item's type, once added
    done: bool = False


class ResponsesStream:
    """One chat chunk stream as one Responses event stream; see the module docstring."""

    def __init__(self, ctx: Context, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.names: ToolNames = tool_names(tool_search.effective_tools(ctx.request))
        self.seq = 0
        self.started = False
        self.ended = False
        self.created = 0
        self.items: list[dict[str, Any] | None] = []  # by output index; None while open
        self.open: str | None = None  # "reasoning" | "message" | "refusal" | "call"
        self.buf: list[str] = []  # text of the open reasoning or message item
        self.signed: list[dict[str, Any]] = []  # signed thinking for the open reasoning item
        self.calls: dict[int, _Call] = {}  # by CallSlots' number
        self.slots = CallSlots()
        self.open_call: _Call | None = None
        self.finish_reason: str | None = None
        self.chat_usage: Any = None
        self.continued = False  # the gateway continued the stream: its end says so
        self.out: list[bytes] = []
        self.at: dict[str, Any] = {}  # where the open text item's deltas go

    # -- emitting --------------------------------------------------------------------------
    def _emit(self, name: str, fields: dict[str, Any]) -> None:
        doc = {"type": name, "sequence_number": self.seq, **fields}
        self.seq += 1
        try:
            data = orjson.dumps(doc)
        except TypeError:  # the envelope echoes the request: a schema nested past orjson's 255 levels
            data = jsonbody.dumps(doc)
        self.out.append(b"event: " + name.encode() + b"\ndata: " + data + b"\n\n")

    def _take(self) -> bytes:
        out, self.out = b"".join(self.out), []
        return out

    def _start(self) -> None:
        if self.started:
            return
        self.started = True
        shell = envelope(self.ctx, self.created, "in_progress")
        self._emit("response.created", {"response": shell})
        self._emit("response.in_progress", {"response": shell})

    # -- items -----------------------------------------------------------------------------
    def _add(self, item: dict[str, Any]) -> int:
        index = len(self.items)
        self.items.append(None)
        self._emit("response.output_item.added", {"output_index": index, "item": item})
        return index

    def _status(self) -> str:
        return "incomplete" if self.finish_reason in ("length", "content_filter") else "completed"

    def _open_text(self, kind: str) -> None:
        if self.open == kind:
            return
        self._close_open()
        index = len(self.items)
        if kind == "reasoning":
            item = {**reasoning_item(self.ctx, index, "", "in_progress"), "content": []}
            part = {"type": "reasoning_text", "text": ""}
        elif kind == "refusal":
            # Its own message item, as the buffered answer gives it (answer.py).
            item = message_item(self.ctx, index, [], "in_progress")
            part = {"type": "refusal", "refusal": ""}
        else:
            item = message_item(self.ctx, index, [], "in_progress")
            part = text_part("")
        self._add(item)
        self._emit(
            "response.content_part.added",
            {"item_id": item["id"], "output_index": index, "content_index": 0, "part": part},
        )
        self.open, self.buf = kind, []
        self.at = {"item_id": item["id"], "output_index": index, "content_index": 0}

    def _text(self, kind: str, delta: str) -> None:
        self._open_text(kind)
        self.buf.append(delta)
        at = self.at
        if kind == "reasoning":
            self._emit("response.reasoning_text.delta", {**at, "delta": delta})
        elif kind == "refusal":
            self._emit("response.refusal.delta", {**at, "delta": delta})
        else:
            self._emit("response.output_text.delta", {**at, "delta": delta, "logprobs": []})

    def _close_text(self) -> None:
        index = len(self.items) - 1
        text = "".join(self.buf)
        status = self._status()
        if self.open == "reasoning":
            item = reasoning_item(self.ctx, index, text, status, signed=self.signed)
            self.signed = []
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            self._emit("response.reasoning_text.done", {**at, "text": text})
            self._emit("response.content_part.done", {**at, "part": {"type": "reasoning_text", "text": text}})
        elif self.open == "refusal":
            part = {"type": "refusal", "refusal": text}
            item = message_item(self.ctx, index, [part], status)
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            self._emit("response.refusal.done", {**at, "refusal": text})
            self._emit("response.content_part.done", {**at, "part": part})
        else:
            item = message_item(self.ctx, index, [text_part(text)], status)
            at = {"item_id": item["id"], "output_index": index, "content_index": 0}
            self._emit("response.output_text.done", {**at, "text": text, "logprobs": []})
            self._emit("response.content_part.done", {**at, "part": text_part(text)})
        self._done(index, item)

    def _done(self, index: int, item: dict[str, Any]) -> None:
        self.items[index] = item
        self._emit("response.output_item.done", {"output_index": index, "item": item})

    def _close_open(self) -> None:
        if self.open in ("reasoning", "message", "refusal"):
            self._close_text()
        elif self.open == "call" and self.open_call is not None:
            self._close_call(self.open_call)
        self.open, self.buf, self.open_call = None, [], None

    def _call_item(self, call: _Call, status: str) -> dict[str, Any]:
        assert call.out_index is not None
        return call_item(
            self.ctx,
            call.out_index,
            call.call_id,
            self.names.lookup(call.chat_name),
            "".join(call.args),
            status,
        )

    def _open_call(self, call: _Call) -> None:
        self._close_open()
        call.out_index = len(self.items)
        item = self._call_item(call, "in_progress")
        item.update(_OPENING[item["type"]])
        call.kind = item["type"]
        self._add(item)
        self.open, self.open_call = "call", call
        given = "".join(call.args)
        if given and item["type"] == "function_call":
            self._emit(
                "response.function_call_arguments.delta",
                {"item_id": item["id"], "output_index": call.out_index, "delta": given},
            )

    def _close_call(self, call: _Call) -> None:
        if call.done or call.out_index is None:
            return
        call.done = True
        item = self._call_item(call, self._status())
        at = {"item_id": item["id"], "output_index": call.out_index}
        if item["type"] == "function_call":
            if not any(call.args):  # no text came: the deltas add up to the "{}" it is given
                self._emit("response.function_call_arguments.delta", {**at, "delta": item["arguments"]})
            self._emit("response.function_call_arguments.done", {**at, "arguments": item["arguments"]})
        elif item["type"] == "custom_tool_call":  # the raw input is only known once the JSON is whole
            self._emit("response.custom_tool_call_input.delta", {**at, "delta": item["input"]})
            self._emit("response.custom_tool_call_input.done", {**at, "input": item["input"]})
        self._done(call.out_index, item)

    def _tool_delta(self, tc: Mapping[str, Any], position: int) -> None:
        fn = as_dict(tc.get("function"))
        index = self.slots.slot(tc, position)
        call = self.calls.get(index)
        if call is None:
            call = _Call(call_id_of(self.ctx, tc, len(self.calls)), "")
            self.calls[index] = call
        if isinstance(fn.get("name"), str) and fn["name"] and call.out_index is None:
            call.chat_name += fn["name"]
        args = fn.get("arguments")
        piece = args if isinstance(args, str) else (orjson.dumps(args).decode() if args is not None else "")
        if call.out_index is None:
            call.args.append(piece)
            if call.chat_name:
                self._open_call(call)
            return
        if not piece:
            return
        call.args.append(piece)
        if call.done:
            # A delta for a call already closed (servers interleaving parallel calls): kept for
            # the final output, but its output_item.done went out without it.
            self.ctx.notes["late_tool_call_delta"] = True
        if call.kind == "function_call":
            self._emit(
                "response.function_call_arguments.delta",
                {
                    "item_id": item_id(self.ctx, "fc", call.out_index),
                    "output_index": call.out_index,
                    "delta": piece,
                },
            )

    # -- the StreamTranslator protocol -------------------------------------------------------
    def event(self, raw: bytes) -> bytes:
        if self.ended:
            return b""
        if raw.count(b"\n\n") > 1 or b"\r" in raw:  # several events handed over at once
            return b"".join(self._one(e) for e in EventSplitter().feed(raw + b"\n\n"))
        return self._one(raw)

    def _one(self, raw: bytes) -> bytes:
        if self.ended:
            return b""
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None and raw.startswith(b"data: ") and raw.count(b"\n") == 2:
            # One data line, what every chat server sends: no general SSE parse needed.
            data = raw[6:].rstrip()
            if data == b"[DONE]":
                return self._end()
            doc = loads_event(data)
        elif doc is None:
            ev = parse_event(raw)
            if ev.data is None:
                return b""  # comments and keep-alives: nothing to say yet
            if ev.is_done:
                return self._end()
            doc = ev.json()
        if not isinstance(doc, dict):
            return b""
        if not self.started and isinstance(doc.get("created"), int):
            self.created = doc["created"]
        self._start()
        if doc.get("usage"):
            self.chat_usage = doc["usage"]
        self.continued = self.continued or continued(doc)
        for choice in doc.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = as_dict(choice.get("delta"))
            reasoning = reasoning_of(delta)
            if reasoning:
                self._text("reasoning", reasoning)
            signed = thinking.carried(delta)
            if signed:
                # A block's signature comes after its text (chat_messages/answer.py), while
                # its reasoning item is open; redacted thinking, which has no text, opens one.
                self._open_text("reasoning")
                self.signed += signed
            content = delta.get("content")
            if isinstance(content, str) and content:
                self._text("message", content)
            refusal = delta.get("refusal")
            if isinstance(refusal, str) and refusal:
                self._text("refusal", refusal)
            for position, tc in enumerate(delta.get("tool_calls") or []):
                if isinstance(tc, dict):
                    self._tool_delta(tc, position)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                self.ctx.notes["finish_reason"] = self.finish_reason
                self._close_open()
        return self._take()

    def _end(self) -> bytes:
        self._start()
        self._close_open()
        for call in self.calls.values():
            if call.out_index is None:  # never named: still the client's call, under no name
                self._open_call(call)
            self._close_call(call)
        final = envelope(self.ctx, self.created, "completed")
        finish(final, self.finish_reason)
        final["output"] = [item for item in self.items if item is not None]
        final["usage"] = usage(self.chat_usage)
        if final["usage"] is None:
            # Some servers (llama-cpp-python) send no usage chunk even when asked; Responses
            # clients (the openai SDK, Codex) expect usage on every completed response.
            final["usage"] = estimated_usage(self.ctx, final["output"])
            self.ctx.notes["usage_estimated"] = True
        if final["usage"] is not None:
            self.ctx.notes["usage"] = {
                "prompt": final["usage"]["input_tokens"],
                "completion": final["usage"]["output_tokens"],
            }
        name = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        if self.continued:  # where a Responses upstream's splice marks it (apis/responses/resume.py)
            final[CONTINUED] = True
            self._emit(name, {"response": final, CONTINUED: True})
        else:
            self._emit(name, {"response": final})
        self.ended = True
        return self._take()

    def close(self) -> bytes:
        return b"" if self.ended else self._end()

    def broken(self, ending: Ending) -> bytes:
        if self.ended:
            return b""
        self._start()
        failed = failed_response(envelope(self.ctx, self.created, "failed"), ending)
        failed["output"] = [item for item in self.items if item is not None]
        self._emit("response.failed", {"response": failed})
        self.ended = True
        return self._take()


def estimated_usage(ctx: Context, output: list[Any]) -> dict[str, Any]:
    """Usage from sizes, at policy/tokens.py's rate: the request for the input (its bytes as
    the client sent them, when known), the text and arguments of the output items for the
    output."""
    asked = ctx.request_bytes
    if asked is None:
        try:
            asked = len(orjson.dumps(ctx.request))
        except TypeError:
            asked = len(str(ctx.request).encode())
    shown = 0
    for item in output:
        if not isinstance(item, Mapping):
            continue
        for key in ("arguments", "input"):
            if isinstance(item.get(key), str):
                shown += len(item[key].encode())
        for part in item.get("content") or item.get("summary") or ():
            if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                shown += len(part["text"].encode())
    prompt, completion = max(1, round(asked / BYTES_PER_TOKEN)), round(shown / BYTES_PER_TOKEN)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }
