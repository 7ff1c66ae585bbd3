"""Which agent session a request belongs to, for the log line: what the agent itself calls it.

Claude Code sends ``X-Claude-Code-Session-Id`` (and the session inside ``metadata.user_id``),
Codex ``session-id`` / ``session_id`` (and ``thread-id``), other clients the OpenAI ``user``
field. Shown as sent (agents' session ids are UUIDs, no secret), cut to 64 printable ASCII
characters: a client cannot put a line break or a megabyte into the log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_HEADERS = ("x-claude-code-session-id", "session-id", "session_id", "thread-id")
MAX_LEN = 64


def session_of(headers: Mapping[str, str], payload: Mapping[str, Any]) -> str | None:
    for name in _HEADERS:
        value = headers.get(name)
        if value:
            return _clean(value)
    metadata = payload.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id:
        try:  # Claude Code: a JSON string of device, account and session ids
            inner = json.loads(user_id)
        except ValueError:
            inner = None
        if isinstance(inner, dict) and isinstance(inner.get("session_id"), str):
            return _clean(inner["session_id"])
        return _clean(user_id)
    user = payload.get("user")
    return _clean(user) if isinstance(user, str) and user else None


def _clean(value: str) -> str | None:
    text = "".join(c for c in value[: MAX_LEN * 2] if c.isascii() and c.isprintable())[:MAX_LEN]
    return text or None
