"""Who is calling: the gateway keys a team hands out, each with a name and its own rules.

A key is kept only as its SHA-256 digest (the config may hold the digest itself, or the key
through ``${ENV}``), and looked up by digest. A lookup's timing can tell at most something
about the digest of what was sent, which the sender cannot steer toward a real key's: unlike
comparing key bytes, it leaks nothing about any configured key.

A key is accepted in each agent's own header: ``Authorization: Bearer`` (the OpenAI SDKs,
Codex, opencode), ``x-api-key`` (Claude Code, the anthropic SDK), ``api-key`` (Azure
clients) and ``x-goog-api-key`` (Gemini CLI, google-genai), and, on the Gemini API's routes
only, the ``?key=`` query parameter its REST examples use. A request that presents several
is let in when any of them is a key, since SDKs add their own header next to a custom one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Literal

from gateway.keys.periods import Period

CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


@dataclass(frozen=True, slots=True)
class Budget:
    usd: float
    period: Period
    timezone: str = "UTC"  # an IANA name: where the period's midnights are
    soft_usd: float | None = None  # a warning threshold below usd: never refuses


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key's name and rules; what logs and metrics show of it is ``name`` alone."""

    name: str
    team: str | None = None
    models: tuple[str, ...] = ("*",)
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    parallel: int | None = None
    budget: Budget | None = None
    team_budget: Budget | None = None
    admin: bool = False
    expires_at: float | None = None  # epoch seconds: from then on the key is refused
    # Turned off by the operator (keys[].disabled, or its team's; for an issued key, the admin
    # key that issued it, or its team, no longer in the config): refused, its account kept.
    disabled: Literal["key", "team", "issuer", "team_removed"] | None = None
    issued_by: str | None = None  # the admin key that issued it, for a key issued at run time
    _allowed: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def allows(self, model: str | None) -> bool:
        if self.models == ("*",):
            return True
        if not model:
            return True  # a request without a model (a listing) names nothing to refuse
        found = self._allowed.get(model)
        if found is None:
            found = any(fnmatchcase(model, g) for g in self.models)
            if len(self._allowed) < 1024:  # model names come from clients
                self._allowed[model] = found
        return found

    @property
    def counts_tokens(self) -> bool:
        """Whether a request's prompt size matters to this key: a budget, or tokens per minute."""
        return self.budget is not None or self.team_budget is not None or self.tokens_per_minute is not None

    @property
    def limited(self) -> bool:
        """Whether anything about this key is counted (else the accounting is skipped)."""
        return any(v is not None for v in (self.requests_per_minute, self.tokens_per_minute, self.parallel,
                                           self.budget, self.team_budget))  # fmt: skip


def digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


@dataclass(frozen=True, slots=True)
class Identified:
    outcome: str  # "not_required" | "ok" | "missing" | "invalid" | "expired" | "disabled"
    key: KeySpec | None = None


_NOT_REQUIRED = Identified("not_required")
_MISSING = Identified("missing")
_INVALID = Identified("invalid")


@dataclass(frozen=True, slots=True)
class KeyRing:
    """Every accepted key by digest. Empty: the gateway asks no key of anyone."""

    by_digest: Mapping[bytes, KeySpec] = field(default_factory=dict)

    @property
    def required(self) -> bool:
        return bool(self.by_digest)

    def identify(
        self, headers: Mapping[str, str] | Iterable[tuple[str, str]], query_key: str | None = None,
        now: float | None = None,
    ) -> Identified:
        """``query_key``: a key sent in the URL (the Gemini API's ``?key=``). It is only
        compared here: the access log writes the path without its query, and a translated
        request goes upstream without the client's query. ``now`` (epoch seconds): a key past
        its ``expires_at`` lets the request in only if another key presented is still good
        (Claude Code sends ANTHROPIC_AUTH_TOKEN and ANTHROPIC_API_KEY both when both are set);
        with none, ``expired``, naming it. A disabled key likewise: ``disabled``."""
        if not self.by_digest:
            return _NOT_REQUIRED
        presented = credentials(headers)
        if query_key and query_key.strip():
            presented.append(query_key.strip())
        if not presented:
            return _MISSING
        refused: Identified | None = None  # the first key presented that is known but turned away
        for candidate in presented:
            spec = self.by_digest.get(digest(candidate))
            if spec is None:
                continue
            if spec.disabled is not None:
                refused = refused or Identified("disabled", spec)
                continue
            if spec.expires_at is not None and now is not None and now >= spec.expires_at:
                refused = refused or Identified("expired", spec)
                continue
            return Identified("ok", spec)
        return refused or _INVALID

    def __repr__(self) -> str:
        return f"KeyRing(keys={len(self.by_digest)})"


def credentials(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for name, value in items:
        lname = name.lower()
        if lname == "authorization":
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                out.append(token.strip())
        elif lname in CREDENTIAL_HEADERS and value.strip():
            out.append(value.strip())
    return out
