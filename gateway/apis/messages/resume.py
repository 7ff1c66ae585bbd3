"""Continuing a broken Messages stream from the text already shown: assistant prefill.

The continuation request ends with an assistant turn holding the text so far; the API
then generates what comes next (Anthropic docs, "Prefill Claude's response"). Prefill
cannot end in whitespace, so trailing whitespace is left out of it and the continuation's
leading whitespace is dropped at the seam (the client already has it). Extended thinking
cannot be combined with prefill, and recent models refuse prefill outright (400: the
conversation must end with a user message): upstreams declare the mode, and a refusal
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
from gateway.sse import parse_event


def continuation(payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
    messages = payload.get("messages")
    thinking = payload.get("thinking")
    if mode != "prefill" or not isinstance(messages, list) or not partial.strip():
        return None
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        return None
    history = list(messages)
    text = partial
    last = history[-1] if history else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        if not isinstance(last.get("content"), str):
            return None
        text = last["content"] + partial  # the client's own prefill came first
        history.pop()
    return {**payload, "messages": [*history, {"role": "assistant", "content": text.rstrip()}]}


def splicer(open_block: int | None, next_index: int, output_tokens: int, partial: str) -> Splice:
    """``open_block``: the text block the client has open (None if none); ``next_index``:
    the index a new block gets; ``output_tokens``: what the broken part produced."""
    index_map: dict[int, int] = {}
    trim = partial != partial.rstrip()  # the prefill left that whitespace out
    state = {"trimmed": not trim}

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
        if name in ("content_block_start", "content_block_delta", "content_block_stop"):
            i = doc.get("index")
            if isinstance(i, int):
                doc["index"] = index_map.get(i, next_index + i)
            delta = doc.get("delta")
            if not state["trimmed"] and isinstance(delta, dict) and isinstance(delta.get("text"), str):
                delta["text"] = delta["text"].lstrip()
                state["trimmed"] = True
        if name == "message_delta":
            add_shown_tokens(doc.get("usage"), "output_tokens", output_tokens)
            doc["x_llm_continued"] = True
        return f"event: {name}\ndata: ".encode() + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    return splice
