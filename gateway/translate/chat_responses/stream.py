"""A Responses stream as a chat-completions stream, event by event.

Chunk grammar produced (OpenAI API reference, "The chat completion chunk object"): the role
chunk first, then ``content`` / ``refusal`` / ``reasoning_content`` / ``tool_calls`` deltas (a
call's first delta carries its ``index``, ``id``, ``type`` and ``name``, later ones argument
fragments only), one chunk with the ``finish_reason``, the usage chunk (``choices: []``) when
the client set ``stream_options.include_usage``, then ``data: [DONE]``.

A ``response.failed`` or ``error`` event never reaches ``event``: the Responses reader takes
it as the stream's error and the relay ends the client's stream with ``broken``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Ending
from gateway.apis.chat.wire import broken_chunk
from gateway.sse import parse_event
from gateway.translate.base import CONTINUED, Context, Known, chat_data, continued, wants_usage
from gateway.translate.chat_responses.answer import chat_id, chat_usage, finish_reason
from gateway.translate.chat_responses.request import function_names

_DONE = b"data: [DONE]\n\n"
_FINAL = frozenset({"response.completed", "response.incomplete"})
_REASONING = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})



class ChatStream:
    """One Responses stream as one chat-completions stream (``StreamTranslator``)."""

    def __init__(self, ctx: Context, created: int, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.include_usage = wants_usage(ctx)
        self.base: dict[str, Any] = {"id": chat_id(None, ctx), "object": "chat.completion.chunk",
                                     "created": created, "model": ctx.requested_model}  # fmt: skip
        self.started = False
        self.finished = False
        self.calls: dict[Any, int] = {}  # output_index -> tool call index
        self.bare: set[Any] = set()  # calls no argument text has been sent for yet
        self.thought: tuple[Any, Any] | None = None  # the reasoning part last written from
        self.response: Mapping[str, Any] = {}
        self.continued = False  # the gateway continued the stream: its end says so

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return chat_data({**self.base, "choices": [choice]})

    def _start(self) -> bytes:
        if self.started:
            return b""
        self.started = True
        return self._chunk({"role": "assistant", "content": ""})

    def event(self, raw: bytes) -> bytes:
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None:
            doc = parse_event(raw).json()
        if not isinstance(doc, dict) or self.finished:
            return b""
        kind = doc.get("type")
        if kind == "response.created":
            self._take(doc.get("response"))
            return self._start()
        if kind in _FINAL:
            self._take(doc.get("response"))
            self.continued = continued(doc) or continued(self.response)
            return self.close()
        if kind == "response.output_item.added":
            return self._start() + self._added(doc.get("output_index"), doc.get("item"))
        if kind == "response.output_text.delta" and _text(doc, "delta"):
            return self._start() + self._chunk({"content": doc["delta"]})
        if kind == "response.refusal.delta" and _text(doc, "delta"):
            return self._start() + self._chunk({"refusal": doc["delta"]})
        if kind in _REASONING and _text(doc, "delta"):
            return self._start() + self._reasoning(doc)
        if kind == "response.function_call_arguments.delta" and _text(doc, "delta"):
            return self._arguments(doc.get("output_index"), doc["delta"])
        if kind == "response.function_call_arguments.done":
            return self._arguments(doc.get("output_index"), doc.get("arguments"), last=True)
        if kind == "response.output_item.done":
            item = doc.get("item")
            arguments = item.get("arguments") if isinstance(item, dict) else None
            return self._arguments(doc.get("output_index"), arguments, last=True)
        return b""  # in_progress, content parts, text done, hosted tools' progress: nothing to show

    def _take(self, response: Any) -> None:
        if not isinstance(response, dict):
            return
        self.response = response
        if isinstance(response.get("id"), str) and response["id"]:
            self.base["id"] = chat_id(response["id"], self.ctx)
        usage = response.get("usage")
        if isinstance(usage, dict):
            counts = chat_usage(usage)
            self.ctx.notes["usage"] = {"prompt": counts["prompt_tokens"],
                                       "completion": counts["completion_tokens"]}  # fmt: skip

    def _added(self, index: Any, item: Any) -> bytes:
        if not isinstance(item, dict) or item.get("type") != "function_call":
            return b""
        self.calls[index] = len(self.calls)
        arguments = item.get("arguments") if isinstance(item.get("arguments"), str) else ""
        if not arguments:
            self.bare.add(index)
        call_id = str(item.get("call_id") or item.get("id") or "")
        name = function_names(self.ctx.request.get("tools")).client(str(item.get("name") or ""))
        fn = {"name": name, "arguments": arguments}
        return self._chunk({"tool_calls": [{"index": self.calls[index], "id": call_id, "type": "function",
                                            "function": fn}]})  # fmt: skip

    def _arguments(self, index: Any, text: Any, last: bool = False) -> bytes:
        """An argument fragment; with ``last``, the call's whole arguments, sent only when no
        fragment came (``{}`` when they are empty: clients parse them as JSON)."""
        if index not in self.calls or (last and index not in self.bare):
            return b""
        self.bare.discard(index)
        if last and not (isinstance(text, str) and text):
            text = "{}"
        if not isinstance(text, str):
            return b""
        return self._chunk({"tool_calls": [{"index": self.calls[index], "function": {"arguments": text}}]})

    def _reasoning(self, doc: Mapping[str, Any]) -> bytes:
        # Parts and items of reasoning are apart by a blank line, as in the buffered answer.
        part = (doc.get("output_index"), doc.get("summary_index", doc.get("content_index")))
        gap = "\n\n" if self.thought is not None and part != self.thought else ""
        self.thought = part
        return self._chunk({"reasoning_content": gap + doc["delta"]})

    def close(self) -> bytes:
        if self.finished:
            return b""
        out = self._start() + b"".join(self._arguments(i, None, last=True) for i in list(self.bare))
        r = self.response
        # A continued stream's finish and usage chunks are marked, as a chat upstream's are.
        mark = {CONTINUED: True} if self.continued else {}
        finish = finish_reason(r.get("status"), r.get("incomplete_details"), bool(self.calls))
        out += chat_data({**self.base, "choices": [{"index": 0, "delta": {}, "logprobs": None,
                                                    "finish_reason": finish}], **mark})  # fmt: skip
        if self.include_usage:
            out += chat_data({**self.base, "choices": [], "usage": chat_usage(r.get("usage")), **mark})
        self.finished = True
        return out + _DONE

    def broken(self, ending: Ending) -> bytes:
        """The gateway's own chat broken chunk (``finish_reason: "error"`` with ``error``),
        made by the chat dialect's reader so both stay one shape; never ``[DONE]``."""
        self.finished = True
        return broken_chunk(self.base, ending, self.ctx.request_id, self.ctx.requested_model)


def _text(doc: Mapping[str, Any], key: str) -> bool:
    return isinstance(doc.get(key), str) and bool(doc[key])
