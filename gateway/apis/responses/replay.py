"""Replay and match on Responses (see ``apis/replay.py``).

Until the replay has reproduced the shown text, its events are dropped: the response's
opening, reasoning items (the client has its own, kept where they were), the message item
and text part openings, the shown text. At the seam the message item and its text part are
opened again (the continuation splicer, ``resume.py``, maps them onto the ones the client has
open) with a delta holding only the text after the seam. After it, the message's ``*.done``
events lose the shown part of their text, which the splicer puts back, so they carry the
whole text once. A tool call, a refusal or the response's end before the seam is a
divergence. The replay's usage counts the whole answer already.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.replay import Match, worth_replaying
from gateway.sse import parse_event

_OPENING = frozenset({"response.created", "response.in_progress", "response.queued"})
_END = frozenset({"response.completed", "response.incomplete", "response.failed"})


def request(payload: Mapping[str, Any], mode: str) -> dict[str, Any] | None:
    return dict(payload) if worth_replaying(payload, mode, seed=False) else None


class Trim:
    __slots__ = ("content_index", "here", "item", "item_id", "match")

    def __init__(self, shown: str) -> None:
        self.match = Match(shown)
        self.item: int | None = None  # the replay's output_index of the message being compared
        self.item_id = ""
        self.content_index = 0
        self.here = 0  # how much of the shown text this message item reproduced

    def __call__(self, raw: bytes) -> bytes:
        doc = parse_event(raw).json()
        name = doc.get("type") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(name, str):
            return raw if self.match.matched else b""
        if not self.match.matched:
            return self._before_seam(name, doc)
        if doc.get("output_index") == self.item and _strip_shown(name, doc, self.here):
            return _event(name, doc)
        return raw

    def _before_seam(self, name: str, doc: dict[str, Any]) -> bytes:
        index = doc.get("output_index")
        if name == "response.output_item.added":
            item = doc.get("item")
            kind = item.get("type") if isinstance(item, dict) else None
            if kind == "message" and isinstance(item, dict) and isinstance(index, int):
                self.item, self.item_id, self.here = index, str(item.get("id") or ""), 0
            elif kind != "reasoning":
                self.match.diverge()  # a tool call where the client has text
        elif name == "response.content_part.added" and index == self.item:
            part = doc.get("part")
            if isinstance(part, dict) and part.get("type") == "output_text":
                self.content_index = doc.get("content_index") or 0
                return self._fed(str(part.get("text") or ""))
            self.match.diverge()  # a refusal
        elif name == "response.output_text.delta" and index == self.item:
            return self._fed(doc["delta"]) if isinstance(doc.get("delta"), str) else b""
        elif name.startswith("response.refusal") or name in _END:
            self.match.diverge()
        return b""

    def _fed(self, text: str) -> bytes:
        rest = self.match.feed(text)
        self.here += len(text) - len(rest)
        if not self.match.matched:
            return b""
        assert self.item is not None
        where = {"item_id": self.item_id, "output_index": self.item, "content_index": self.content_index}
        item = {"id": self.item_id, "type": "message", "role": "assistant", "status": "in_progress",
                "content": []}  # fmt: skip
        out = _event("response.output_item.added", {"output_index": self.item, "item": item})
        out += _event("response.content_part.added",
                      {**where, "part": {"type": "output_text", "text": "", "annotations": []}})  # fmt: skip
        if rest:
            out += _event("response.output_text.delta", {**where, "delta": rest, "logprobs": []})
        return out


def _strip_shown(name: str, doc: dict[str, Any], n: int) -> bool:
    """The message's ``*.done`` text without its first ``n`` characters (the shown part)."""
    holder: dict[str, Any] | None = None
    if name == "response.output_text.done":
        holder = doc
    elif name == "response.content_part.done" and isinstance(doc.get("part"), dict):
        holder = doc["part"]
    elif name == "response.output_item.done" and isinstance(doc.get("item"), dict):
        content = doc["item"].get("content")
        if isinstance(content, list) and content and isinstance(content[0], dict):
            holder = content[0]
    if holder is None or not isinstance(holder.get("text"), str):
        return False
    holder["text"] = holder["text"][n:]
    return True


def _event(name: str, doc: dict[str, Any]) -> bytes:
    body = json.dumps({"type": name, "sequence_number": 0} | doc, separators=(",", ":")).encode()
    return f"event: {name}\ndata: ".encode() + body + b"\n\n"
