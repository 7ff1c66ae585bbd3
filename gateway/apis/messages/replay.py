"""Replay and match on Messages (see ``apis/replay.py``).

Until the replay has reproduced the shown text, its events are dropped: ``message_start``,
pings, thinking blocks (the client has its own), the shown text. The text block that crosses
the seam is opened again as index 0 (the continuation splicer, ``resume.py``, then goes on in
the block the client has open) with only the text after the seam; later blocks are numbered
from it. A tool use, another kind of delta or the message's end before the seam is a
divergence. The replay's ``message_delta`` usage counts the whole answer already.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.replay import Match, worth_replaying
from gateway.sse import parse_event

_THINKING = frozenset({"thinking", "redacted_thinking"})
_THINKING_DELTAS = frozenset({"thinking_delta", "signature_delta"})


def request(payload: Mapping[str, Any], mode: str) -> dict[str, Any] | None:
    # top_k 1 is greedy decoding too; Messages has no seed.
    greedy = payload.get("top_k") == 1 and mode == "replay"
    return dict(payload) if greedy or worth_replaying(payload, mode, seed=False) else None


class Trim:
    __slots__ = ("base", "block", "match")

    def __init__(self, shown: str) -> None:
        self.match = Match(shown)
        self.block: int | None = None  # the replay's text block being compared
        self.base = 0  # the replay's index of the block that crosses the seam

    def __call__(self, raw: bytes) -> bytes:
        event = parse_event(raw)
        doc = event.json()
        name = event.name or (doc.get("type") if isinstance(doc, dict) else None)
        if not isinstance(doc, dict) or not isinstance(name, str):
            return raw if self.match.matched else b""
        if self.match.matched:
            if name.startswith("content_block_") and isinstance(doc.get("index"), int):
                doc["index"] -= self.base
                return _event(name, doc)
            return raw
        return self._before_seam(name, doc)

    def _before_seam(self, name: str, doc: dict[str, Any]) -> bytes:
        index = doc.get("index")
        if name == "content_block_start":
            block = doc.get("content_block")
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block, dict) and isinstance(index, int):
                self.block = index
                return self._fed(index, block.get("text") or "")
            if kind not in _THINKING:
                self.match.diverge()  # a tool use where the client has text
        elif name == "content_block_delta":
            delta = doc.get("delta")
            kind = delta.get("type") if isinstance(delta, dict) else None
            if kind == "text_delta" and isinstance(delta, dict) and isinstance(index, int):
                return self._fed(index, delta.get("text") or "") if index == self.block else b""
            if kind not in _THINKING_DELTAS:
                self.match.diverge()
        elif name in ("message_delta", "message_stop"):
            self.match.diverge()  # the answer ended short of what the client has
        return b""  # message_start, pings, thinking, block ends, the shown text

    def _fed(self, index: int, text: str) -> bytes:
        rest = self.match.feed(text)
        if not self.match.matched:
            return b""
        self.base = index
        out = _event("content_block_start", {"type": "content_block_start", "index": 0,
                                             "content_block": {"type": "text", "text": ""}})  # fmt: skip
        if rest:
            out += _event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                  "delta": {"type": "text_delta", "text": rest}})  # fmt: skip
        return out


def _event(name: str, doc: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
