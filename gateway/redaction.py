"""The gateway's own upstream key taken out of what a provider said, before a client sees it.

A provider's error may quote the credential it was sent: whole ("Key sk-... has exceeded its
credit balance", a debugging server's "auth=sk-..."), or masked, the start and the last four
characters kept (OpenAI's "Incorrect API key provided: sk-proj-********abcd", its error-codes
guide, platform.openai.com/docs/guides/error-codes). When the key is the client's own, that is
the client's business; when the gateway sent the operator's ``api_key``, a client holding a
gateway key must not read it, nor enough of it to tell which key the operator uses.

Only error bodies and messages pass through here, and only when the gateway sent its own key,
so a success costs nothing. A key shorter than ``MIN_KEY`` is left alone: such values are
placeholders (vLLM's ``EMPTY``, ``dummy``), and replacing a short word wherever it appears
would rewrite the wording clients match on.
"""

from __future__ import annotations

import re
from functools import lru_cache

MARKER = "[redacted]"
MIN_KEY = 8
# A masked form is the key's first MIN_KEY or more characters, a run of mask characters, then
# its last four: fewer kept characters would match other keys of the same kind (every OpenAI
# project key starts "sk-proj-").
_TAIL = 4
_MIN_MASKED = MIN_KEY + _TAIL  # a shorter key has no hidden middle to mask
_MASK = r"(?:\*|•|…|\\u202[26]|\.{3})+"  # also as a JSON string escapes them
_KEY_CHAR = r"[A-Za-z0-9_\-]"


@lru_cache(maxsize=256)
def _patterns(key: str) -> tuple[re.Pattern[str], re.Pattern[bytes]]:
    parts = [re.escape(key)]
    if len(key) >= _MIN_MASKED:
        # The kept start, as far as it goes (checked against the key in _keep_or_mark).
        parts.append(f"{re.escape(key[:MIN_KEY])}(?P<more>{_KEY_CHAR}*?){_MASK}{re.escape(key[-_TAIL:])}"
                     f"(?!{_KEY_CHAR})")  # fmt: skip
    text = "|".join(parts)
    return re.compile(text), re.compile(text.encode())


def _marked(key: str, m: re.Match[str]) -> str:
    more = m.groupdict().get("more")
    # The masked form's kept start goes on past MIN_KEY other than the key does: another key.
    if more and not key.startswith(key[:MIN_KEY] + more):
        return m.group(0)
    return MARKER


def redact_text(text: str, key: str | None) -> str:
    """``text`` with ``key`` (whole or masked) replaced by MARKER."""
    if not key or len(key) < MIN_KEY or key[:MIN_KEY] not in text:
        return text  # the cheap test: neither form can be there
    pattern, _ = _patterns(key)
    return pattern.sub(lambda m: _marked(key, m), text)


def redact_bytes(data: bytes, key: str | None) -> bytes:
    """``data`` (a body, any encoding that keeps ASCII as ASCII) with ``key`` replaced."""
    if not key or len(key) < MIN_KEY:
        return data
    start = key[:MIN_KEY].encode()
    if start not in data:
        return data
    _, pattern = _patterns(key)
    marker = MARKER.encode()

    def one(m: re.Match[bytes]) -> bytes:
        more = m.groupdict().get("more")
        if more and not key.startswith(key[:MIN_KEY] + more.decode()):
            return m.group(0)
        return marker

    return pattern.sub(one, data)
