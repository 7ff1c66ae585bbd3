"""Replay and match on chat completions (see ``apis/replay.py``).

Until the replay has reproduced the shown text, its chunks are dropped (the role-only
opening, ``reasoning_content`` the client already has its own of, the shown ``content``);
the chunk that crosses the seam keeps only the content after it. A tool call, a finish or
``[DONE]`` before the seam is a divergence. What follows goes through the continuation
splicer (``resume.py``) unchanged: ids, ``x_llm_continued``; the usage is the replay's own,
which already counts the whole answer.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.replay import Match, worth_replaying
from gateway.sse import parse_event


def request(payload: Mapping[str, Any], mode: str) -> dict[str, Any] | None:
    return dict(payload) if worth_replaying(payload, mode, seed=True) else None


class Trim:
    __slots__ = ("match",)

    def __init__(self, shown: str) -> None:
        self.match = Match(shown)

    def __call__(self, raw: bytes) -> bytes:
        if self.match.matched:
            return raw
        event = parse_event(raw)
        if event.data is None:
            return b""  # comments, keep-alives
        if event.is_done:
            self.match.diverge()
            return b""
        doc = event.json()
        if not isinstance(doc, dict):
            return b""
        choices = doc.get("choices")
        if not isinstance(choices, list) or not choices:
            return raw  # a usage-only chunk: bookkeeping, spliced as it is
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(delta, dict) or len(choices) > 1:
            self.match.diverge()
            return b""
        content = delta.get("content")
        rest = self.match.feed(content) if isinstance(content, str) else ""
        if not self.match.matched:
            if delta.get("tool_calls") or delta.get("function_call") or choice.get("finish_reason"):
                self.match.diverge()  # the replay went elsewhere before reaching the seam
            return b""
        delta.pop("role", None)
        delta.pop("reasoning_content", None)
        if isinstance(content, str):
            delta["content"] = rest
        if not any(v not in (None, "", [], {}) for v in delta.values()) and not choice.get("finish_reason"):
            return b""  # the seam fell at the end of this chunk
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"
