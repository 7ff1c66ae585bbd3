"""The gateway's own upstream key taken out of what a provider said, before a client sees it.

A provider's error may quote the credential it was sent: whole ("Key sk-... has exceeded its
credit balance", a debugging server's "auth=sk-..."), or masked, the start and the last four
characters kept (OpenAI's "Incorrect API key provided: sk-proj-********abcd", its error-codes
guide, platform.openai.com/docs/guides/error-codes). When the key is the client's own, that is
the client's business; when the gateway sent the operator's ``api_key``, a client holding a
gateway key must not read it, nor enough of it to tell which key the operator uses.

The same holds for a secret the operator configured among an upstream's ``headers``: a gateway
in front of the provider takes its own key beside the provider's (Portkey's
``x-portkey-api-key``, docs.portkey.ai/docs/api-reference/inference-api/headers; Cloudflare AI
Gateway's ``cf-aig-authorization: Bearer <token>``,
developers.cloudflare.com/ai-gateway/configuration/authentication; Helicone's ``Helicone-Auth``),
and may quote it as a provider quotes a key. Which configured headers hold one is told by their
name (``upstream_secrets``): a value's shape cannot tell a token from an ``OpenAI-Project`` id,
and taking every configured value would rewrite wording clients read (an ``anthropic-beta`` name
quoted in a refusal of that beta).

Only error bodies and messages pass through here, and only when the gateway sent a secret of
its own, so a success costs nothing. A key shorter than ``MIN_KEY`` is left alone: such values are
placeholders (vLLM's ``EMPTY``, ``dummy``), and replacing a short word wherever it appears
would rewrite the wording clients match on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
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


# A header name that says its value is a credential: authorization (cf-aig-authorization,
# Helicone-Auth, x-auth-token), a key (x-portkey-api-key, x-portkey-virtual-key), a token or
# session token, a secret (x-portkey-aws-secret-access-key), a password, a cookie.
_CREDENTIAL_NAME = re.compile(r"(?i)auth|key|token|secret|passw|credential|cookie")
# RFC 9110 §11.4's credentials: a scheme, then the token a provider would quote on its own.
_SCHEME = re.compile(r"(?i)(?:bearer|basic|token)\s+(\S+)")


def upstream_secrets(api_key: str | None, headers: Mapping[str, str]) -> tuple[str, ...]:
    """What the gateway sends an upstream that is the operator's to hide: ``api_key``, and the
    value of each configured header whose name says it is a credential (the token alone when it
    follows a scheme, ``Bearer <token>``). Values shorter than ``MIN_KEY`` are left out, as
    placeholders are."""
    found = [api_key] if api_key else []
    for name, value in headers.items():
        if _CREDENTIAL_NAME.search(name):
            m = _SCHEME.fullmatch(value)
            found.append(m.group(1) if m else value)
    return tuple(dict.fromkeys(v for v in found if len(v) >= MIN_KEY))


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
