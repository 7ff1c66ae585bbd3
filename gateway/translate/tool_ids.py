"""Tool-call ids between APIs whose id alphabets differ.

Anthropic requires ``tool_use.id`` (and so ``tool_result.tool_use_id``) to match
``^[a-zA-Z0-9_-]+$`` (Messages API reference); chat and Responses clients may send any string
(``functions.get_weather:0``, ids with dots or colons from other providers). Such an id is
encoded, deterministically, so the same client id maps to the same Anthropic id in every
request of a conversation (a call and its result always match), and decoded on the way back.
"""

from __future__ import annotations

import base64
import binascii
import re

_ID_OK = re.compile(r"[A-Za-z0-9_-]+")
ESCAPE = "gwid_"  # marks an id the gateway encoded; Anthropic's own ids start with toolu_


def to_anthropic_id(client_id: str) -> str:
    # fullmatch: ``$`` also matches before a final newline, which Anthropic's pattern does not.
    if _ID_OK.fullmatch(client_id) and not client_id.startswith(ESCAPE):
        return client_id
    return ESCAPE + base64.urlsafe_b64encode(client_id.encode()).decode().rstrip("=")


def from_anthropic_id(anthropic_id: str) -> str:
    if not anthropic_id.startswith(ESCAPE):
        return anthropic_id
    encoded = anthropic_id[len(ESCAPE) :]
    try:
        return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return anthropic_id
