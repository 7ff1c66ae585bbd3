"""Who may use the gateway: client keys (``server.client_keys``) and the start-up guard.

Pure, no I/O. The pipeline calls :meth:`ClientAuth.check` with the request headers and,
when the result is not ``ok``, answers 401 in the request's dialect with
``result.message``; it never needs (or gets) a key.

Keys are kept only as SHA-256 digests and compared with :func:`hmac.compare_digest`
against every configured key, with no early exit: how long a check takes says nothing
about which key, or which prefix of a key, came close. Digests also make every
comparison the same length, so a key's length does not leak either.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from gateway.config import GatewayConfig

AuthOutcome = Literal["not_required", "ok", "missing", "invalid"]

# Sent with a 401 so that clients and curl users see which scheme is expected.
WWW_AUTHENTICATE = 'Bearer realm="llm-gateway"'


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The outcome of one check; safe to log (it never holds a key)."""

    outcome: AuthOutcome

    @property
    def ok(self) -> bool:
        """Serve the request: a configured key matched, or no keys are configured."""
        return self.outcome in ("ok", "not_required")

    @property
    def required(self) -> bool:
        return self.outcome != "not_required"

    @property
    def message(self) -> str:
        """What to tell the client in the 401 body (empty when ``ok``)."""
        if self.outcome == "missing":
            return ("this gateway requires a key: send 'Authorization: Bearer <key>' "
                    "or 'x-api-key: <key>'")
        if self.outcome == "invalid":
            return "the gateway key is not valid"
        return ""


_NOT_REQUIRED = AuthResult("not_required")  # every request of a gateway without keys


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """The configured client keys, as digests. Build once at start-up, share freely."""

    _digests: tuple[bytes, ...]

    @classmethod
    def from_config(cls, cfg: GatewayConfig) -> ClientAuth:
        return cls.from_keys(cfg.server.client_keys)

    @classmethod
    def from_keys(cls, keys: Iterable[str]) -> ClientAuth:
        return cls(tuple(_digest(k) for k in keys if k))

    @property
    def required(self) -> bool:
        """Whether requests must carry a client key (at least one is configured)."""
        return bool(self._digests)

    def check(self, headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> AuthResult:
        """Whether these request headers carry a configured key.

        Accepted: ``Authorization: Bearer <key>``, ``x-api-key: <key>``, ``api-key: <key>``
        (header names in any case). A request that presents several is let in when any
        one of them matches, since SDKs add their own header next to a custom one.
        """
        if not self._digests:
            return _NOT_REQUIRED
        presented = _credentials(headers)
        if not presented:
            return AuthResult("missing")
        matched = False
        for candidate in presented:
            d = _digest(candidate)
            for key in self._digests:
                # `|` rather than `or`: every key is compared, whatever matched before.
                matched = hmac.compare_digest(d, key) | matched
        return AuthResult("ok" if matched else "invalid")

    def __repr__(self) -> str:
        return f"ClientAuth(keys={len(self._digests)})"


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).digest()


def _credentials(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> list[str]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    out = []
    for name, value in items:
        lname = name.lower()
        if lname == "authorization":
            scheme, _, token = value.strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                out.append(token.strip())
        elif lname in ("x-api-key", "api-key") and value.strip():
            out.append(value.strip())
    return out


@dataclass(frozen=True, slots=True)
class StartupVerdict:
    """What start-up must do about client authentication: refuse, warn, or nothing."""

    refusal: str | None = None
    warning: str | None = None


def startup_check(cfg: GatewayConfig) -> StartupVerdict:
    """Refuse to serve the operator's provider key to anyone who can reach the port.

    The risk exists when some upstream injects an ``api_key`` and no client key is
    configured: every request is then paid for with the operator's key. On a loopback
    address only this machine can connect, so it is a warning; on any other address it
    is a refusal unless ``server.allow_unauthenticated`` says it is deliberate (e.g. a
    private network or an authenticating proxy in front).
    """
    keyed = [u.name for u in cfg.upstreams if u.api_key is not None]
    if cfg.server.client_keys or not keyed:
        return StartupVerdict()
    where = f"{cfg.server.host}:{cfg.server.port}"
    names = ", ".join(keyed)
    if cfg.server.allow_unauthenticated:
        return StartupVerdict(
            warning=f"WARNING: anyone who reaches {where} is served with the api_key of "
            f"upstream(s) {names} (server.allow_unauthenticated is true)"
        )
    if cfg.server.is_loopback:
        return StartupVerdict(
            warning=f"WARNING: no server.client_keys: every local process that reaches {where} "
            f"is served with the api_key of upstream(s) {names}"
        )
    return StartupVerdict(
        refusal=f"refusing to listen on {where} without client keys: upstream(s) {names} "
        "inject an api_key that anyone reaching the port would use; set server.client_keys "
        "(e.g. GATEWAY_CLIENT_KEYS), or server.allow_unauthenticated: true if that is intended"
    )
