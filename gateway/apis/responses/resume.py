"""Continuing a broken Responses stream from the text already shown.

The one upstream behaviour this relies on, declared per upstream and never assumed:
vLLM's Responses API continues a trailing assistant input message marked
``"status": "in_progress"`` instead of starting a new turn (vllm-project/vllm PR #32100,
January 2026: the marker turns on ``continue_final_message`` for the chat template). That
is the Responses form of the same vLLM feature the chat dialect uses, so it is declared the
same way, ``continuation: continue_final_message``. No other mode applies to this API:
OpenAI documents ``status`` on input messages but does not continue them.

Only a text answer is continued: an open ``output_text`` part of a message item, with no
tool call (function, custom, hosted tool) and no refusal started. Reasoning items that
completed before the text are kept as they were shown.

The continuation's events are rewritten into the original stream: its
``response.created``/``in_progress`` and the opening of its first message item and text
part are dropped (the client has those open already); that item's events take the
original ``item_id``/``output_index``/``content_index``; other items are numbered after the
original's; every event continues the original ``sequence_number``; ``*.done`` events and
``response.completed`` carry the whole text (shown + continued), the original response's
id, the items completed before the break, summed output tokens and
``"x_llm_continued": true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.apis.base import Splice
from gateway.apis.common import add_shown_tokens
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import parse_event

MODE = "continue_final_message"
_DROPPED = frozenset({"response.created", "response.in_progress", "response.queued"})
_FINAL = frozenset({"response.completed", "response.incomplete"})
# Output items that are text (continuable) or finished thinking (kept as shown).
_TEXTUAL = frozenset({"message", "reasoning"})


class StreamState(Protocol):
    """What the splice reads and advances on the original stream's reader (the reader in
    ``wire.py`` is one; a protocol keeps this module free of an import back to it)."""

    shown: Shown | None
    next_seq: int
    response: dict[str, Any]


@dataclass(slots=True)
class OpenText:
    """The ``output_text`` part the client has open."""

    output_index: int
    item_id: str
    content_index: int
    text: list[str] = field(default_factory=list)


@dataclass(slots=True)
class Shown:
    """What a Responses stream has shown so far, kept only where continuation is possible."""

    texts: list[str] = field(default_factory=list)  # every output_text delta, in order
    open: OpenText | None = None
    done_items: dict[int, dict[str, Any]] = field(default_factory=dict)  # output_index -> item
    unsafe: bool = False  # a tool call or a refusal started: never continued
    next_index: int = 0

    def see(self, doc: dict[str, Any]) -> None:
        kind = doc.get("type")
        index = doc.get("output_index")
        if not isinstance(index, int):
            return
        self.next_index = max(self.next_index, index + 1)
        if kind == "response.output_item.added":
            item = doc.get("item")
            if not isinstance(item, dict) or item.get("type") not in _TEXTUAL:
                self.unsafe = True
        elif kind == "response.content_part.added":
            part = doc.get("part")
            item_id, content_index = doc.get("item_id"), doc.get("content_index")
            if isinstance(part, dict) and part.get("type") == "output_text" and isinstance(item_id, str) \
                    and isinstance(content_index, int):  # fmt: skip
                self.open = OpenText(index, item_id, content_index, [part.get("text") or ""])
                self.texts.append(part.get("text") or "")
            elif isinstance(part, dict) and part.get("type") == "refusal":
                self.unsafe = True
        elif kind == "response.output_text.delta":
            delta = doc.get("delta")
            if isinstance(delta, str):
                self.texts.append(delta)
                if self.open is not None and self.open.output_index == index:
                    self.open.text.append(delta)
        elif kind == "response.refusal.delta":
            self.unsafe = True
        elif kind == "response.content_part.done":
            if self.open is not None and self.open.output_index == index:
                self.open = None
        elif kind == "response.output_item.done":
            item = doc.get("item")
            if isinstance(item, dict):
                self.done_items[index] = item
            if self.open is not None and self.open.output_index == index:
                self.open = None

    def partial(self) -> str | None:
        if self.unsafe or self.open is None:
            return None
        return "".join(self.texts) or None


def continuation(payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
    items = payload.get("input")
    if mode != MODE or not partial:
        return None
    if isinstance(items, str):
        history: list[Any] = [{"role": "user", "content": items}]
    elif isinstance(items, list):
        history = list(items)
    else:
        return None
    text = partial
    last = history[-1] if history else None
    if isinstance(last, dict) and last.get("role") == "assistant" and last.get("status") == "in_progress":
        # The client prefilled already: the model's output went on from its text.
        if not isinstance(last.get("content"), str):
            return None
        text = last["content"] + partial
        history.pop()
    turn = {"role": "assistant", "content": text, "status": "in_progress"}
    return {**payload, "input": [*history, turn]}


def splicer(original: StreamState, partial: str, *, count_shown: bool = True) -> Splice:
    """Numbers the spliced events on from ``original.next_seq`` and keeps that up to date,
    so a failure after the seam goes on numbering from where the splice stopped.
    ``count_shown``: add the broken part's estimated tokens to the usage (a replay's usage
    counts the whole answer already)."""
    return _Splicer(original, partial if count_shown else "").splice


class _Splicer:
    def __init__(self, original: StreamState, partial: str) -> None:
        assert original.shown is not None and original.shown.open is not None  # else not continued
        self.original = original
        self.shown = original.shown
        self.opened: OpenText = original.shown.open
        self.shown_text = "".join(self.opened.text)
        self.shown_tokens = round(len(partial.encode()) / BYTES_PER_TOKEN)
        self.first: int | None = None  # the continuation's output_index of the message it goes on in
        self.part_opened = False
        self.index_map: dict[int, int] = {}  # continuation output_index -> the client's
        self.continued: list[str] = []  # text the continuation added to the open part
        self.merged: dict[str, Any] | None = None  # the open message, completed
        self.extra_items: dict[int, dict[str, Any]] = {}  # more items the continuation completed

    def splice(self, raw: bytes) -> bytes:
        doc = parse_event(raw).json()
        name = doc.get("type") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(name, str):
            return raw  # comments, keep-alives
        if name in _DROPPED or self._opens_what_is_open(name, doc):
            return b""
        i = doc.get("output_index")
        if isinstance(i, int):
            doc["output_index"] = self._index(i)
            if i == self.first:
                self._onto_open_part(name, doc)
            elif name == "response.output_item.done" and isinstance(doc.get("item"), dict):
                self.extra_items[doc["output_index"]] = doc["item"]
        if name in _FINAL and isinstance(doc.get("response"), dict):
            merged = self.merged or _rebuilt(self.opened, self.shown_text, "".join(self.continued))
            output = {**self.shown.done_items, **self.extra_items, self.opened.output_index: merged}
            ordered = [output[k] for k in sorted(output)]
            _final(doc["response"], self.original.response, ordered, self.shown_tokens)
            doc["x_llm_continued"] = True
        doc["sequence_number"] = self.original.next_seq
        self.original.next_seq += 1
        return f"event: {name}\ndata: ".encode() + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    def _opens_what_is_open(self, name: str, doc: dict[str, Any]) -> bool:
        """The continuation's first message item and its text part: the client has both open."""
        i = doc.get("output_index")
        if name == "response.output_item.added" and self.first is None and isinstance(i, int):
            item = doc.get("item")
            if isinstance(item, dict) and item.get("type") == "message":
                self.first = i
                self.index_map[i] = self.opened.output_index
                return True
        if name == "response.content_part.added" and i == self.first and not self.part_opened:
            self.part_opened = True
            return True
        return False

    def _index(self, i: int) -> int:
        """Items other than the continued message come after everything the client has."""
        if i not in self.index_map:
            others = [k for k in self.index_map if k != self.first]
            self.index_map[i] = self.shown.next_index + len(others)
        return self.index_map[i]

    def _onto_open_part(self, name: str, doc: dict[str, Any]) -> None:
        if "item_id" in doc:
            doc["item_id"] = self.opened.item_id
        if "content_index" in doc:
            doc["content_index"] = self.opened.content_index
        if name == "response.output_text.delta" and isinstance(doc.get("delta"), str):
            self.continued.append(doc["delta"])
        _whole_text(name, doc, self.shown_text, self.opened.item_id)
        if name == "response.output_item.done" and isinstance(doc.get("item"), dict):
            self.merged = doc["item"]


def _whole_text(name: str, doc: dict[str, Any], shown_text: str, item_id: str) -> None:
    """The continued message's ``*.done`` events carry its whole text, as shown + continued."""
    if name == "response.output_text.done" and isinstance(doc.get("text"), str):
        doc["text"] = shown_text + doc["text"]
    elif name == "response.content_part.done" and isinstance(doc.get("part"), dict):
        part = doc["part"]
        if isinstance(part.get("text"), str):
            part["text"] = shown_text + part["text"]
    elif name == "response.output_item.done" and isinstance(doc.get("item"), dict):
        item = doc["item"]
        item["id"] = item_id
        content = item.get("content")
        if isinstance(content, list) and content and isinstance(content[0], dict) \
                and isinstance(content[0].get("text"), str):  # fmt: skip
            content[0]["text"] = shown_text + content[0]["text"]


def _rebuilt(opened: OpenText, shown_text: str, continued: str) -> dict[str, Any]:
    """The merged message item when the continuation ended without an
    ``output_item.done`` for it."""
    part = {"type": "output_text", "text": shown_text + continued, "annotations": []}
    return {"id": opened.item_id, "type": "message", "role": "assistant", "status": "completed",
            "content": [part]}  # fmt: skip


def _final(response: dict[str, Any], identity: Mapping[str, Any], output: list[Any], shown: int) -> None:
    for key in ("id", "model", "created_at"):
        if key in identity:
            response[key] = identity[key]
    response["output"] = output
    add_shown_tokens(response.get("usage"), "output_tokens", shown)
    response["x_llm_continued"] = True
