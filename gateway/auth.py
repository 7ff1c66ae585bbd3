"""Who may use the gateway: client keys (``server.client_keys`` and the named ``keys:``) and
the start-up guard.

Pure, no I/O. The pipeline calls :meth:`ClientAuth.check` with the request headers and,
when the result is not ``ok``, answers 401 in the request's dialect with
``result.message_for(api)``; it never needs (or gets) a key. Keys are kept only as SHA-256 digests
(gateway/keys/registry.py); a named key's rules (models, limits, budget) come back with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from gateway.config import BudgetConfig, ClientKeyConfig, GatewayConfig, TeamConfig
from gateway.keys.issued import IssuedKey
from gateway.keys.periods import iso
from gateway.keys.registry import Budget, KeyRing, KeySpec, digest

AuthOutcome = Literal["not_required", "ok", "missing", "invalid", "expired", "disabled"]

# Sent with a 401 so that clients and curl users see which scheme is expected.
WWW_AUTHENTICATE = 'Bearer realm="llm-gateway"'

# The flat ``server.client_keys``: every holder is the same, nothing is counted.
FLAT_KEY_NAME = "client_keys"

# How a client is told to send its key, in the way its own API takes one: Google's clients
# (google-genai, Gemini CLI) send ``x-goog-api-key``, or ``?key=`` on the REST API, and have no
# setting for an Authorization header.
_SEND_KEY = {
    None: "'Authorization: Bearer <key>' or 'x-api-key: <key>'",
    "gemini": "'x-goog-api-key: <key>' or '?key=<key>'",
}


@dataclass(frozen=True, slots=True)
class AuthResult:
    """The outcome of one check; safe to log (it never holds a key, only a key's name)."""

    outcome: AuthOutcome
    key: KeySpec | None = None

    @property
    def ok(self) -> bool:
        """Serve the request: a configured key matched, or no keys are configured."""
        return self.outcome in ("ok", "not_required")

    @property
    def required(self) -> bool:
        return self.outcome != "not_required"

    @property
    def message(self) -> str:
        return self.message_for(None)

    def message_for(self, api: str | None) -> str:
        """What to tell a client of ``api`` in the 401 body (empty when ``ok``)."""
        if self.outcome == "missing":
            return f"this gateway requires a key: send {_SEND_KEY.get(api) or _SEND_KEY[None]}"
        if self.outcome == "invalid":
            return "the gateway key is not valid"
        if self.outcome == "expired" and self.key is not None and self.key.expires_at is not None:
            # Its holder has the key, so its name tells them nothing new; the time says why.
            return (f"the gateway key '{self.key.name}' expired at {iso(self.key.expires_at)}; "
                    "ask the gateway's operator for a new one")
        if self.outcome == "disabled" and self.key is not None and self.key.disabled == "issuer":
            return (f"the gateway key '{self.key.name}' is turned off (the admin key '{self.key.issued_by}' "
                    "that issued it is no longer one in the gateway's config); ask for a new key")
        if self.outcome == "disabled" and self.key is not None and self.key.disabled == "team_removed":
            return (f"the gateway key '{self.key.name}' is turned off (its team '{self.key.team}' is no "
                    "longer in the gateway's config); ask the gateway's operator to turn it back on")
        if self.outcome == "disabled" and self.key is not None:
            team = self.key.disabled == "team"
            why = f"its team '{self.key.team}' is disabled" if team else "it is disabled"
            return (f"the gateway key '{self.key.name}' is turned off ({why} in the gateway's config); "
                    "ask the gateway's operator to turn it back on")
        return ""


@dataclass(frozen=True, slots=True)
class ClientAuth:
    """The configured client keys, as digests. Build once at start-up, share freely."""

    ring: KeyRing

    @classmethod
    def from_config(cls, cfg: GatewayConfig, issued: Iterable[IssuedKey] = ()) -> ClientAuth:
        """``issued``: the keys issued at run time (gateway/keys/issued.py), in one ring with the
        file's, so that finding a request's key stays one dict read. One a reload gave a key of
        the file the name of is left out: the file's key is that name's."""
        teams = {t.name: t for t in cfg.teams}
        by_digest: dict[bytes, KeySpec] = {}
        flat = KeySpec(FLAT_KEY_NAME)
        for flat_key in cfg.server.client_keys:
            by_digest[digest(flat_key)] = flat
        for named in cfg.keys:
            spec = _spec(named, teams)
            for one in _digests_of(named):  # a key being rotated: its values share one spec
                by_digest[one] = spec
        names = {k.name for k in cfg.keys}
        admins = {k.name: _spec(k, teams) for k in cfg.keys if k.admin}
        # Only beside named keys: their limits and budgets are counted where the config names
        # keys (a replica with none kept no accounts, and served an issued key past its budget;
        # review), and a gateway with no keys stays open to keyless clients.
        for key in issued if names else ():
            if key.name not in names:
                by_digest.setdefault(key.digest, _issued_spec(key, teams, admins))
        return cls(KeyRing(by_digest))

    @classmethod
    def from_keys(cls, keys: Iterable[str]) -> ClientAuth:
        flat = KeySpec(FLAT_KEY_NAME)
        return cls(KeyRing({digest(k): flat for k in keys if k}))

    @property
    def required(self) -> bool:
        """Whether requests must carry a client key (at least one is configured)."""
        return self.ring.required

    def check(
        self, headers: Mapping[str, str] | Iterable[tuple[str, str]], query_key: str | None = None,
        now: float | None = None,
    ) -> AuthResult:
        """Whether these request headers carry a configured key: in ``Authorization: Bearer``,
        ``x-api-key``, ``api-key`` or ``x-goog-api-key`` (names in any case), or ``query_key``
        (Gemini's ``?key=``, passed only on the routes of an API that takes one). A request
        that presents several is let in when any one of them matches, since SDKs add their
        own header next to a custom one. ``now`` (epoch seconds): a key past its
        ``expires_at`` then is ``expired``."""
        if not self.ring.by_digest:
            return _NOT_REQUIRED  # every request asks this: no keys, nothing to look at
        found = self.ring.identify(headers, query_key, now)
        return AuthResult(found.outcome, found.key)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"ClientAuth(keys={len(self.ring.by_digest)})"


def _digests_of(k: ClientKeyConfig) -> list[bytes]:
    return [bytes.fromhex(d) for d in k.key_sha256 or ()] + [digest(v) for v in k.key or ()]


def _issued_spec(key: IssuedKey, teams: Mapping[str, TeamConfig], admins: Mapping[str, KeySpec]) -> KeySpec:
    """An issued key lives no longer than the admin key that issued it is in force: an operator
    who takes a leaked admin key out of the file (or turns it off, or ends it) takes what it
    issued with it, and puts it back by putting the admin key back (its account was kept)."""
    spec = replace(_spec(key.config, teams), issued_by=key.issued_by)
    issuer = admins.get(key.issued_by)
    if spec.disabled is not None:
        return spec
    if key.config.team is not None and key.config.team not in teams:
        # A key of the file naming a team the file lost is refused at load; an issued one went
        # on with no team budget at all (review).
        return replace(spec, disabled="team_removed")
    if issuer is None or issuer.disabled is not None:
        return replace(spec, disabled="issuer")
    if issuer.expires_at is not None and (spec.expires_at is None or issuer.expires_at < spec.expires_at):
        return replace(spec, expires_at=issuer.expires_at)  # refused as expired when its issuer ends
    return spec


def _spec(k: ClientKeyConfig, teams: Mapping[str, TeamConfig]) -> KeySpec:
    def budget(b: BudgetConfig | None) -> Budget | None:
        return Budget(b.usd, b.period, b.timezone, b.soft_usd) if b is not None else None

    team = teams.get(k.team) if k.team else None
    return KeySpec(
        name=k.name, team=k.team, models=k.models, requests_per_minute=k.requests_per_minute,
        tokens_per_minute=k.tokens_per_minute, parallel=k.parallel, budget=budget(k.budget),
        team_budget=budget(team.budget) if team is not None else None, admin=k.admin,
        expires_at=k.expires_at.timestamp() if k.expires_at is not None else None,
        disabled="key" if k.disabled else "team" if team is not None and team.disabled else None,
    )  # fmt: skip


_NOT_REQUIRED = AuthResult("not_required")


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
    if cfg.uses_client_keys or not keyed:
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
