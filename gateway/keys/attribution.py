"""Which agent session a request belongs to, for the log line: what the agent itself calls it.

Claude Code sends ``X-Claude-Code-Session-Id`` (and the session inside ``metadata.user_id``),
Codex ``session-id`` / ``session_id`` (and ``thread-id``), other clients the OpenAI ``user``
field. Shown as sent (agents' session ids are UUIDs, no secret), cut to 64 printable ASCII
characters: a client cannot put a line break or a megabyte into the log. But what a client
puts in ``user`` or a session header is its own choice, and some put an email address or a
token there: an email's local part is masked (``***@example.com``: the person is PII, the domain
tells an operator whose traffic it is), and a token-shaped part is replaced by ``[redacted]``
as in the log's ``user_agent`` (a key's prefix, a bearer, a JWT, a long run mixing upper and
lower case and digits, which a UUID or a hex digest never does).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from multidict import istr

# Case-insensitive names made once (aiohttp's own ``hdrs`` are so): a plain str is folded again
# at each look-up, and this runs for every request (issue #38).
_NAMES = ("x-claude-code-session-id", "session-id", "session_id", "thread-id")
_CLAUDE, _SESSION, _SESSION_, _THREAD = (istr(name) for name in _NAMES)
MAX_LEN = 64


def session_of(headers: Mapping[str, str], payload: Mapping[str, Any]) -> str | None:
    # Unrolled, and the body's members tested before they are read: most requests name no
    # session, and every request's log line asks (~0.3 us a request, where the loop took ~0.6).
    value = headers.get(_CLAUDE) or headers.get(_SESSION) or headers.get(_SESSION_) or headers.get(_THREAD)
    if value:
        return _clean(value)
    if "metadata" not in payload and "user" not in payload:
        return None
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


_EMAIL = re.compile(r"[^\s@<>()\[\],;:\"]+(@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})")
_TOKENISH = re.compile(
    r"(?i:bearer|basic)\s*\S*"
    r"|(?<![A-Za-z0-9])(?:(?i:sk-|key-|api[_-]?key)|gh[pousr]_|github_pat_|xox[abpr]-|AIza|eyJ|llmgw_)\S*"
    r"|(?P<run>[A-Za-z0-9_\-.+/=:]{24,})"
)
_KEYISH_RUN = re.compile(r"(?i)(?<![A-Za-z0-9])(?:sk|key)-")


def _token(m: re.Match[str]) -> str:
    run = m.group("run")
    # A long run is an id (a UUID, a hex digest, words joined) unless it mixes upper and lower
    # case and digits as generated keys do, or holds a key's prefix.
    if run is not None and not _KEYISH_RUN.search(run) and not (
        any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run)
    ):  # fmt: skip
        return run
    return "[redacted]"


def _clean(value: str) -> str | None:
    text = "".join(c for c in value[: MAX_LEN * 2] if c.isascii() and c.isprintable())
    text = _TOKENISH.sub(_token, _EMAIL.sub(r"***\1", text))[:MAX_LEN]
    return text or None
