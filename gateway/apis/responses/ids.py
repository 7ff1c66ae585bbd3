"""Call ids as a Responses upstream takes them, in a request passed to it as it came.

OpenAI's Responses API takes a ``call_id`` of at most 64 characters ("Invalid
'input[2].call_id': string too long. Expected a string with maximum length 64",
NousResearch/hermes-agent#73538). A Responses client's conversation that began on a Gemini
upstream carries the gateway's own Gemini ids, whose thought signature makes them longer
(``..__gsig_<sig>``, ``translate/chat_gemini/signature.py``); on an OpenAI Responses upstream
(a fallback, a pool's other deployment) that signature is of no use, and the id would be
refused on every turn. Those ids go as a digest of themselves, the same on a call and on its
output, so they still pair (as ``translate/chat_responses`` writes any long id). A client's
other ids are sent as it wrote them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.chat.ids import GEMINI_SIGNED, short_id

CALL_ID_MAX = 64


def to_responses_id(call_id: str) -> str:
    """``call_id`` as a Responses upstream takes it: at most ``CALL_ID_MAX`` characters
    (``translate/chat_responses`` writes a chat request's ids the same way)."""
    return short_id(call_id, CALL_ID_MAX, 40)


def responses_request_ids(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """``doc`` with the gateway's signed Gemini call ids longer than OpenAI takes written as
    digests; None when it has none."""
    items = doc.get("input")
    if not isinstance(items, list):
        return None
    out: list[Any] = []
    changed = False
    for item in items:
        call_id = item.get("call_id") if isinstance(item, dict) else None
        if isinstance(call_id, str) and len(call_id) > CALL_ID_MAX and GEMINI_SIGNED in call_id:
            item = {**item, "call_id": to_responses_id(call_id)}
            changed = True
        out.append(item)
    return {**doc, "input": out} if changed else None
