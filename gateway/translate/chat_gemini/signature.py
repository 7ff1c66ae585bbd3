"""Where a Gemini ``thoughtSignature`` rides while a chat client holds the conversation.

Gemini 3 refuses a replayed ``functionCall`` without the signature its answer carried ("Function
call is missing a thought_signature in functionCall parts", 400; Gemini API docs, "Thought
signatures"). A chat tool call has no field for it, and the gateway keeps no state, so the
signature travels with the call itself, in two places:

* ``extra_content.google.thought_signature`` on the tool call: where Google's own OpenAI
  compatibility layer puts it, so a client written for that layer keeps it;
* the tool call id: ``<id>__gsig_<signature as base64url>``. Every client sends a call's id
  back (on the call and on its result), whatever it rebuilds, so this one always returns.
  The alphabet stays ``[A-Za-z0-9_-]`` (what Anthropic allows), so a Messages client composed
  through chat keeps it too.

Going back, the id loses the suffix (the functionCall and the functionResponse get the id
Gemini issued) and the signature goes on the functionCall part, as received.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gateway.apis.chat.ids import GEMINI_SIGNED

MARK = GEMINI_SIGNED
# Google's documented stand-in for a call that no Gemini model signed (a conversation begun on
# another upstream): validation is skipped for it (Gemini API docs, "Thought signatures", FAQ).
SKIP = "skip_thought_signature_validator"


def carry(call_id: str, signature: str | None) -> str:
    """The chat id of a Gemini call: its own id, with the signature when it has one (the
    signature's own characters, base64url-encoded: exactly the same string comes back)."""
    if not signature:
        return call_id
    return call_id + MARK + base64.urlsafe_b64encode(signature.encode()).decode().rstrip("=")


def split(chat_id: str) -> tuple[str, str | None]:
    """A chat id as the Gemini call id and the signature it carries (None: none)."""
    call_id, mark, encoded = chat_id.partition(MARK)
    if not mark or not encoded:
        return chat_id, None
    try:
        return call_id, base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, ValueError):  # not one the gateway wrote: the id as it is
        return chat_id, None


def of_tool_call(call: Mapping[str, Any]) -> tuple[str, str | None]:
    """The Gemini id and signature of a chat tool call: ``extra_content`` first, then the id."""
    call_id, signature = split(str(call.get("id") or ""))
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, Mapping) else None
    given = google.get("thought_signature") if isinstance(google, Mapping) else None
    return call_id, given if isinstance(given, str) and given else signature


def extra_content(signature: str) -> dict[str, Any]:
    return {"google": {"thought_signature": signature}}
