"""Continuing a broken chat-completions stream from the text already shown.

Modes, declared per upstream (``continuation:``), never assumed:

* ``prefill``: a trailing assistant message (Anthropic models behind an OpenAI-compatible
  endpoint, OpenRouter);
* ``continue_final_message``: vLLM's chat extension (``continue_final_message: true``,
  ``add_generation_prompt: false``), which continues the last assistant message;
* ``prefix``: DeepSeek's and Mistral's prefix completion (``"prefix": true`` on the trailing
  assistant message).

The continuation's chunks are rewritten into the original stream: its role-only opening is
dropped, ``id``/``created``/``model`` are the original's, and its finishing chunk says
``"x_llm_continued": true`` so a client can tell a continued answer from an uninterrupted one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.base import Splice
from gateway.apis.common import add_shown_tokens
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import parse_event

MODES = ("prefill", "continue_final_message", "prefix")


def continuation(payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
    messages = payload.get("messages")
    if mode not in MODES or not isinstance(messages, list) or not partial:
        return None
    history = list(messages)
    text = partial
    last = history[-1] if history else None
    if isinstance(last, dict) and last.get("role") == "assistant":
        # The client prefilled already: the model's output went on from its text.
        if not isinstance(last.get("content"), str) or last.get("tool_calls"):
            return None
        text = last["content"] + partial
        history.pop()
    turn: dict[str, Any] = {"role": "assistant", "content": text}
    out: dict[str, Any] = {**payload, "messages": [*history, turn]}
    if mode == "prefix":
        turn["prefix"] = True
    elif mode == "continue_final_message":
        out["continue_final_message"] = True
        out["add_generation_prompt"] = False
    return out


def splicer(
    identity: tuple[str | None, str | None, int | None], partial: str, *, count_shown: bool = True
) -> Splice:
    """``count_shown``: add the broken part's estimated tokens to the usage (a replay's
    usage counts the whole answer already)."""
    sid, model, created = identity
    shown_tokens = round(len(partial.encode()) / BYTES_PER_TOKEN) if count_shown else 0

    def splice(raw: bytes) -> bytes:
        data = parse_event(raw).data
        if data is None or data.strip() == "[DONE]":
            return raw
        try:
            doc = json.loads(data)
        except ValueError:
            return raw
        if not isinstance(doc, dict):
            return raw
        choices = doc.get("choices")
        if isinstance(choices, list) and choices and _opening_only(choices):
            return b""  # the continuation's own role-only start: the client has one already
        for key, value in (("id", sid), ("model", model), ("created", created)):
            if value is not None and key in doc:
                doc[key] = value
        if isinstance(choices, list) and any(isinstance(c, dict) and c.get("finish_reason") for c in choices):
            doc["x_llm_continued"] = True
        if add_shown_tokens(doc.get("usage"), "completion_tokens", shown_tokens):
            doc["x_llm_continued"] = True
        return b"data: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"

    return splice


def _opening_only(choices: list[Any]) -> bool:
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason"):
            return False
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        if any(k != "role" and v not in (None, "", [], {}) for k, v in delta.items()):
            return False
    return True
