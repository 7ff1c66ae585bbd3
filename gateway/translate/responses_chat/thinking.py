"""Where Anthropic's signed thinking rides while a Responses client holds the conversation.

On a Messages upstream (Responses → chat → Messages), a tool loop keeps thinking on only when
the turn that called the tools comes back starting with its signed thinking block (Anthropic's
thinking guide, "Preserving thinking blocks"; the rule and its 400 are quoted in
``chat_messages/request.py``). The gateway keeps no state, so the blocks travel with the
conversation: the chat hop carries them in the assistant message's ``thinking_blocks``
(``chat_messages/answer.py``), and the Responses client in the ``encrypted_content`` of the
reasoning item, the field Responses has for reasoning a client cannot read and sends back as it
came (Codex 0.169 does, measured; so does every client that replays the output items it got).
A request passed straight to a Responses upstream has these items left out
(``apis/responses/wire.py``): no OpenAI account can read them.

The value is ``MARK`` then the blocks as JSON in base64url. OpenAI's own encrypted content is
base64 (no ``.`` or ``:``), so no value of OpenAI's is ever read as the gateway's; the version
in the mark lets a later form be told from this one. Only a composed request bound for Messages
unseals it (``Target.onward``); on a chat upstream it is dropped with the rest of
``encrypted_content``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK as MARK


def seal(blocks: list[dict[str, Any]]) -> str:
    """``blocks`` (``thinking_blocks`` entries) as an ``encrypted_content`` value."""
    kept = [{k: v for k, v in b.items() if k != "index"} for b in blocks]  # a stream's rank, not the block
    return MARK + base64.urlsafe_b64encode(json.dumps(kept, separators=(",", ":")).encode()).decode()


def unseal(item: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks a reasoning item's ``encrypted_content`` carries; none when it is not
    the gateway's (OpenAI's own, or absent) or does not decode (then thinking is dropped for
    that loop, as before, rather than the request refused)."""
    value = item.get("encrypted_content")
    if not isinstance(value, str) or not value.startswith(MARK):
        return []
    try:
        blocks = json.loads(base64.urlsafe_b64decode(value[len(MARK) :]))
    except (binascii.Error, ValueError, RecursionError):
        return []
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []


def carried(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A chat message's (or delta's) ``thinking_blocks`` entries."""
    blocks = message.get("thinking_blocks")
    return [b for b in blocks if isinstance(b, dict)] if isinstance(blocks, list) else []
