"""Anthropic's signed thinking as one opaque string, for a client API whose own field for
reasoning it cannot read is a string it sends back as it came.

On a Messages upstream a tool loop keeps thinking on only when the turn that called the tools
comes back starting with its signed thinking blocks, unmodified (Anthropic's thinking guide,
"Preserving thinking blocks"; the rule and its 400 are quoted in ``chat_messages/request.py``).
The gateway keeps no state, so the blocks travel with the conversation: the chat hop carries
them in the assistant message's ``thinking_blocks`` (``chat_messages/answer.py``), and a client
of another API in a string of its own that it returns:

* a Responses client in a reasoning item's ``encrypted_content`` (``responses_chat/thinking.py``);
* a Gemini client in the ``thoughtSignature`` of the turn's first ``functionCall`` part
  (``gemini_chat``), which Google's thought-signatures page tells clients to send back as they
  got it, and Gemini CLI does.

The value is ``MARK`` then the blocks as compact JSON in base64url. OpenAI's encrypted content
and Google's signatures are base64 (no ``.`` or ``:``), so no value of theirs is ever read as
the gateway's; the version in the mark lets a later form be told from this one.

Coming back, a value is the client's to alter: one that is not the gateway's, too large, not
decodable, or not exactly blocks of the two shapes Anthropic issues, is no thinking at all
(thinking goes off for that loop, as before), never a refused request. One altered but still
well formed (a changed thought) is refused by Anthropic's signature check, which
``policy/foreign_reasoning.py`` answers by sending the request again without it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK as MARK

# The most a sealed value may be, in characters. One turn's thinking at Anthropic's largest
# budgets (64k tokens, about 250 KB of text, and its signature) seals well under it; more is a
# value the gateway did not write, not read.
MAX_SEALED = 4 << 20


def seal(blocks: list[dict[str, Any]]) -> str | None:
    """``blocks`` (``thinking_blocks`` entries) as one string; None when none can be carried
    (none of Anthropic's shapes, or more than ``MAX_SEALED``: that loop then goes without)."""
    kept = [k for k in (_block(b) for b in blocks) if k is not None]
    if not kept:
        return None
    value = MARK + base64.urlsafe_b64encode(json.dumps(kept, separators=(",", ":")).encode()).decode()
    return value if len(value) <= MAX_SEALED else None


def unseal(value: Any) -> list[dict[str, Any]]:
    """The thinking blocks a sealed string carries; none when it is not one the gateway could
    have written."""
    if not isinstance(value, str) or not value.startswith(MARK) or len(value) > MAX_SEALED:
        return []
    try:
        blocks = json.loads(base64.urlsafe_b64decode(value[len(MARK) :]))
    except (binascii.Error, ValueError, RecursionError):
        return []
    if not isinstance(blocks, list) or not blocks:
        return []
    kept = [b for b in blocks if isinstance(b, dict) and _block(b) == b]
    # One entry not exactly as the gateway writes it makes the whole value foreign: a part of
    # a turn's thinking is not what Anthropic issued either.
    return kept if len(kept) == len(blocks) else []


def carried(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat message's (or delta's) ``thinking_blocks`` entries."""
    blocks = message.get("thinking_blocks")
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def _block(b: Mapping[str, Any]) -> dict[str, Any] | None:
    """A block as Anthropic issued it (only its fields: it refuses others), or None."""
    kind = b.get("type")
    if kind == "thinking" and isinstance(b.get("thinking"), str) and isinstance(b.get("signature"), str) \
            and b["signature"]:  # fmt: skip
        return {"type": "thinking", "thinking": b["thinking"], "signature": b["signature"]}
    if kind == "redacted_thinking" and isinstance(b.get("data"), str) and b["data"]:
        return {"type": "redacted_thinking", "data": b["data"]}
    return None
