"""Tool call ids as a chat completions upstream takes them.

OpenAI's chat completions (and Azure's, and GitHub Copilot's) take a tool call id of at most 40
characters ("Invalid 'messages[1].tool_calls[0].id': string too long. Expected a string with
maximum length 40, but got a string with length 92 instead.", anomalyco/opencode#12653,
Portkey-AI/gateway#1062). Longer ones reach a chat upstream from another provider's
conversation: the gateway's own Gemini ids carrying a thought signature (``..__gsig_<sig>``,
``translate/chat_gemini/signature.py``), Gemini CLI's own
(``run_shell_command-1759912345678-3f2a9c8b1d4e7``, 45), the 64 the Responses API takes. The
translations to chat send such an id as a digest of itself, the same on the call and on its
result, so they still pair. Nothing maps it back: an answer carries the upstream's own ids,
never these.

A chat client's own conversation carries the gateway's Gemini ids too, when it began on a
Gemini upstream; on a chat upstream (a fallback) they are the client's to send, but the
signature in them is the gateway's own carriage, which only its translation to Gemini reads:
``chat_request_ids`` writes those as a chat upstream takes them. A client's other ids are sent
as it wrote them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

CHAT_ID_MAX = 40
# How a Gemini call id carries its thought signature in a chat id.
GEMINI_SIGNED = "__gsig_"


def short_id(call_id: str, limit: int, digits: int) -> str:
    """``call_id`` within ``limit`` characters: as it is, else ``call_`` and ``digits`` hex
    digits of its SHA-256 (the same for a call and its result, so they still pair)."""
    if len(call_id) <= limit:
        return call_id
    return "call_" + hashlib.sha256(call_id.encode()).hexdigest()[:digits]


def to_chat_id(call_id: str) -> str:
    """``call_id`` as a chat upstream takes it: at most ``CHAT_ID_MAX`` characters."""
    return short_id(call_id, CHAT_ID_MAX, CHAT_ID_MAX - 5)


def chat_request_ids(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A chat request with the tool call ids that carry a Gemini signature, and are longer than a
    chat upstream takes, written as ``to_chat_id`` writes them (on the call and its result
    alike); None when it has none."""
    messages = doc.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[Any] = []
    changed = False
    for m in messages:
        if isinstance(m, dict):
            calls = m.get("tool_calls")
            if isinstance(calls, list) and any(isinstance(c, dict) and _signed(c.get("id")) for c in calls):
                m = {**m, "tool_calls": [_short_call(c) for c in calls]}
                changed = True
            if _signed(m.get("tool_call_id")):
                m = {**m, "tool_call_id": to_chat_id(m["tool_call_id"])}
                changed = True
        out.append(m)
    return {**doc, "messages": out} if changed else None


def _short_call(call: Any) -> Any:
    if isinstance(call, dict) and _signed(call.get("id")):
        return {**call, "id": to_chat_id(call["id"])}
    return call


def _signed(call_id: Any) -> bool:
    return isinstance(call_id, str) and len(call_id) > CHAT_ID_MAX and GEMINI_SIGNED in call_id
