"""Continuing a broken Messages stream from the text already shown: assistant prefill.

The continuation request ends with an assistant turn holding the text so far; the API
then generates what comes next (Anthropic docs, "Prefill Claude's response"). Prefill
cannot end in whitespace, so trailing whitespace is left out of it and the model writes that
whitespace again: the continuation's leading whitespace, however its deltas split it, is held
until its first other character, and only what goes beyond the whitespace the client already
has is shown (an indent is never doubled; see ``Seam``). Extended thinking
cannot be combined with prefill, and Claude 4.6 and later refuse prefill outright ("This model
does not support assistant message prefill. The conversation must end with a user message."):
known by the model's name (``claude_models.py``), those are not asked; a refusal from any other
ends the stream with the original error instead.

The continuation's events are rewritten into the original stream: its ``message_start``
is dropped; its first text block continues the block the client has open (or opens the
next index); indexes shift accordingly; ``message_delta`` carries the summed output
tokens and ``"x_llm_continued": true``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Splice
from gateway.apis.common import add_shown_tokens
from gateway.apis.messages.claude_models import takes_prefill
from gateway.sse import parse_event


def continuation(payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
    messages = payload.get("messages")
    thinking = payload.get("thinking")
    if mode != "prefill" or not isinstance(messages, list) or not partial.strip():
        return None
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        return None
    model = payload.get("model")
    if isinstance(model, str) and not takes_prefill(model):
        return None  # Claude 4.6 and later refuse any prefill: a call spent on a sure 400
    history = list(messages)
    text = partial
    last = history[-1] if history else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        if not isinstance(last.get("content"), str):
            return None
        text = last["content"] + partial  # the client's own prefill came first
        history.pop()
    return {**payload, "messages": [*history, {"role": "assistant", "content": text.rstrip()}]}


def splicer(
    open_block: int | None, next_index: int, output_tokens: int, partial: str, *, prefilled: bool = True
) -> Splice:
    """``open_block``: the text block the client has open (None if none); ``next_index``:
    the index a new block gets; ``output_tokens``: what the broken part produced (0 for a
    replay, whose usage counts it); ``prefilled``: the continuation was asked with the
    shown text as prefill (a replay was not: no whitespace was left out)."""
    index_map: dict[int, int] = {}
    seam = Seam(partial[len(partial.rstrip()) :] if prefilled else "")  # what the prefill left out

    def splice(raw: bytes) -> bytes:
        event = parse_event(raw)
        doc = event.json()
        name = event.name or (doc.get("type") if isinstance(doc, dict) else None)
        if not isinstance(doc, dict) or name in (None, "ping", "message_stop"):
            return raw
        if name == "message_start":
            return b""
        if name == "content_block_start":
            i = doc.get("index")
            block = doc.get("content_block")
            if i == 0 and open_block is not None and isinstance(block, dict) and block.get("type") == "text":
                index_map[0] = open_block
                return b""  # the client's text block is still open: go on in it
            if isinstance(i, int):
                index_map[i] = next_index + len([k for k in index_map if index_map[k] >= next_index])
        before = b""
        if name in ("content_block_start", "content_block_delta", "content_block_stop"):
            i = doc.get("index")
            if isinstance(i, int):
                doc["index"] = index_map.get(i, next_index + i)
            delta = doc.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("text"), str) and not seam.done:
                delta["text"] = seam.text(delta["text"])
                if not delta["text"]:
                    return b""  # whitespace only so far: held until the seam is known
            if name == "content_block_stop" and (rest := seam.flush()):
                delta_doc = {"type": "content_block_delta", "index": doc.get("index"),
                             "delta": {"type": "text_delta", "text": rest}}  # fmt: skip
                before = _event("content_block_delta", delta_doc)
        if name == "message_delta":
            add_shown_tokens(doc.get("usage"), "output_tokens", output_tokens)
            doc["x_llm_continued"] = True
        return before + _event(name, doc)

    return splice


def _event(name: str, doc: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: ".encode() + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


class Seam:
    """The continuation's leading whitespace against the whitespace the client already has
    (``owed``: what the prefill left out). Whatever the delta sizes, the whitespace is held
    until its first other character; then only what goes beyond ``owed`` is shown: the
    model that writes ``owed`` again (the usual case) adds nothing at the seam, one that
    writes more (a deeper indent, a blank line) adds only the difference. Whitespace that is
    not a continuation of ``owed`` cannot be taken back from the client and is dropped."""

    __slots__ = ("done", "held", "owed")

    def __init__(self, owed: str) -> None:
        self.owed = owed
        self.held = ""
        self.done = not owed

    def text(self, text: str) -> str:
        """What the client is shown of this delta's text (empty while still undecided)."""
        if self.done:
            return text
        text = self.held + text
        body = text.lstrip()
        if not body:
            self.held = text
            return ""
        self.done, self.held = True, ""
        return self._beyond(text[: len(text) - len(body)]) + body

    def flush(self) -> str:
        """The block ended with only whitespace after the seam: what of it is new."""
        if self.done:
            return ""
        held, self.done, self.held = self.held, True, ""
        return self._beyond(held)

    def _beyond(self, lead: str) -> str:
        return lead[len(self.owed) :] if lead.startswith(self.owed) else ""
