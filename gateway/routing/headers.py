"""Which headers travel with a request each way, and the upstream URL it goes to. Pure, no I/O."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import unquote, unquote_plus

from gateway.config import (
    ANTHROPIC_HOST,
    ANTHROPIC_KEY_PREFIX,
    ANTHROPIC_OAUTH_PREFIX,
    UpstreamConfig,
    on_azure_openai,
)

# RFC 9110 §7.6.1 connection-specific headers, plus the de-facto Proxy-Connection and
# Keep-Alive; they describe one hop and must never be forwarded.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
    "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
})  # fmt: skip

# Recomputed by the hop that sends the body; the client leg is always identity-encoded
# because the upstream leg is decompressed on arrival. ``Expect: 100-continue`` was the
# client's of the gateway, answered before its body was read (pipeline/admit.py): forwarded,
# the aiohttp client held the body back for the upstream's 100, which a server need not send
# (RFC 9110 §10.1.1), and the request hung until first_byte_s.
_REQUEST_DROP = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "content-encoding", "expect"}
_RESPONSE_DROP = HOP_BY_HOP | {
    "content-length", "content-encoding", "server", "date",
    # Ours to set: the gateway decides about retries and request ids.
    "x-should-retry", "x-request-id",
}  # fmt: skip


def pick_upstream(upstreams: Iterable[UpstreamConfig], model: str | None) -> UpstreamConfig | None:
    """The first upstream whose glob patterns match ``model``; without a model, the first."""
    ups = tuple(upstreams)
    if not model:
        return ups[0] if ups else None
    for u in ups:
        if any(fnmatchcase(model, pattern) for pattern in u.models):
            return u
    return None


class UnsafePath(ValueError):
    pass


def upstream_url(base_url: str, raw_path: str, query_string: str) -> str:
    """Map ``/v1/<rest>`` onto the upstream's base URL, refusing anything that could climb out.

    ``raw_path`` is the still-encoded request path. A segment that decodes (once or
    repeatedly, to beat double encoding) to ``.`` or ``..``, or that hides a ``/`` or
    ``\\``, is refused rather than normalised: no legitimate API path contains one.
    """
    if not raw_path.startswith("/v1/") and raw_path != "/v1":
        raise UnsafePath("only /v1/... paths are proxied")
    rest = raw_path[len("/v1") :]
    for segment in rest.split("/")[1:]:
        decoded = segment
        for _ in range(3):
            if "%" not in decoded:
                break
            decoded = unquote(decoded)
        if "%" in decoded and decoded != unquote(decoded):
            raise UnsafePath("path is encoded too many times")
        if decoded in (".", "..") or "/" in decoded or "\\" in decoded or "\x00" in decoded:
            raise UnsafePath("path segments may not be '.' or '..', nor hold a slash, a backslash or a NUL")
    url = base_url + rest
    return f"{url}?{query_string}" if query_string else url


def with_fixed_query(client: str, fixed: str, names: frozenset[str]) -> str:
    """The client's query string with an upstream's configured parameters (``fixed``, encoded):
    those ``names`` replace the client's own of the same name, the rest of the client's stay."""
    if not fixed:
        return client
    kept = [p for p in client.split("&") if p and unquote_plus(p.partition("=")[0]) not in names]
    return "&".join([*kept, fixed])


# What each wire API asks of a request's headers besides its credential (``Outbound.key``),
# by the names config uses in ``upstreams[].apis``. Applied where the gateway, not the
# client, made the request what it is (``in_api``: a body the gateway wrote, translated or
# under the upstream's model name; ``required_for``: a path of no API on an upstream that
# speaks one). A client calling an API as it is sends what that API needs, or hears the
# provider say what is missing.
#
# Messages: "you must send an anthropic-version request header"
# (https://docs.anthropic.com/en/api/versioning); the client's own version goes when it
# sent one, else 2023-06-01, the version whose request and event shapes translate/ writes
# and reads. The credential is x-api-key and bodies go as content-type: application/json
# (https://docs.anthropic.com/en/api/getting-started).
# Chat completions and Responses: the credential only, `Authorization: Bearer`; OpenAI-
# Organization and OpenAI-Project are optional (https://platform.openai.com/docs/api-reference/authentication).
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True)
class ApiHeaders:
    required: tuple[tuple[str, str], ...]  # (lower-case name, value when the client sent none)
    own: tuple[str, ...]  # lower-case prefixes of the headers that belong to this API alone


API_HEADERS: dict[str, ApiHeaders] = {
    "messages": ApiHeaders((("anthropic-version", ANTHROPIC_VERSION),), ("anthropic-",)),
    "chat": ApiHeaders((), ("openai-",)),
    "responses": ApiHeaders((), ("openai-",)),
    # The Gemini API: the credential only (x-goog-api-key, https://ai.google.dev/api#authentication);
    # x-goog-api-client is the Google SDKs' own telemetry header.
    "gemini": ApiHeaders((), ("x-goog-api-client",)),
}
# Every API here takes JSON bodies; one the gateway wrote is labelled so, whatever type the
# client's body was sent as (curl -d says application/x-www-form-urlencoded).
JSON_BODY = ("Content-Type", "application/json")
# By API: the prefixes of the headers that belong to the other APIs only.
# Where a forwarded credential goes by its kind on one provider's host (``Outbound.by_kind``).
Placer = Callable[[dict[str, str]], dict[str, str]]

_FOREIGN = {
    api: tuple(p for other in API_HEADERS.values() for p in other.own if p not in rules.own)
    for api, rules in API_HEADERS.items()
}


def in_api(
    headers: dict[str, str], api: str, moves_to: tuple[str, str] | None = None, query_key: str | None = None,
    by_kind: Placer | None = None,
) -> dict[str, str]:
    """``headers`` (from ``request_headers``) for a body the gateway wrote in ``api``: labelled
    JSON, with what ``api`` requires, without what belongs to another API (an OpenAI
    organization id is nothing Anthropic should learn, nor Anthropic's betas OpenAI). With
    ``moves_to``, the client's credential goes where that upstream takes one
    (``credential_moved``; ``by_kind``: ``Outbound.by_kind``). ``request_headers(..., api=...)``
    does both in its own pass."""
    out, _, taken = _filtered(headers.items(), frozenset(), _FOREIGN[api], moves_to is not None)
    _in_api_tail(out, api, taken, moves_to, query_key)
    return by_kind(out) if by_kind is not None else out


def _filtered(
    items: Iterable[tuple[str, str]], drop: frozenset[str], foreign: tuple[str, ...] | None, moving: bool
) -> tuple[dict[str, str], str | None, dict[str, str] | None]:
    """One pass over headers: those not in ``drop`` (the ``Connection`` values among them
    joined, for the caller to apply), and with ``foreign`` (an API's ``_FOREIGN``) not
    ``Content-Type`` nor another API's; ``moving``: the credential headers apart, by
    lower-case name."""
    out: dict[str, str] = {}
    connection: str | None = None
    taken: dict[str, str] | None = None
    for k, v in items:
        lk = k.lower()
        if lk in drop:
            if lk == "connection":
                connection = v if connection is None else f"{connection},{v}"
            continue
        if foreign is not None:
            if lk == "content-type" or lk.startswith(foreign):
                continue
            if moving and lk in CREDENTIAL_HEADERS:
                if taken is None:
                    taken = {}
                taken[lk] = v
                continue
        if k in out:  # a field sent on several lines is one list (RFC 9110 §5.3), not the last line
            v = f"{out[k]}; {v}" if lk == "cookie" else f"{out[k]},{v}"  # (cookies: RFC 6265 §5.4)
        out[k] = v
    return out, connection, taken


def _in_api_tail(
    out: dict[str, str], api: str, taken: dict[str, str] | None, moves_to: tuple[str, str] | None,
    query_key: str | None,
) -> dict[str, str]:
    """What ``in_api`` adds once the foreign headers are out and the credentials ``taken``."""
    out[JSON_BODY[0]] = JSON_BODY[1]
    required = API_HEADERS[api].required
    if required:  # (most APIs require nothing: no call)
        _required(out, required)
    if moves_to is not None:
        _move_credential(out, taken or {}, moves_to, query_key)
    return out


def required_for(headers: dict[str, str], upstream: UpstreamConfig) -> dict[str, str]:
    """``headers`` for a path that belongs to no API (``/v1/models``) on ``upstream``: what its
    API requires when it speaks only one (an Anthropic upstream wants its version everywhere)."""
    if len(upstream.apis) != 1:
        return headers
    return _required(headers, API_HEADERS[upstream.apis[0]].required)


def _required(headers: dict[str, str], required: tuple[tuple[str, str], ...]) -> dict[str, str]:
    if required:
        sent = {k.lower() for k in headers}
        for name, value in required:
            if name not in sent:
                headers[name] = value
    return headers


# Every header a client may use to send a credential. When the gateway supplies the
# upstream's key, or the client's credential is a gateway key (server.client_keys), none
# of them may travel upstream: a leftover `x-api-key` next to our `Authorization` would
# reach the provider, and the provider may even prefer it.
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})

# How each `key_header` carries the configured key: the header's name and what goes before
# the key (a prefix, not a format string: ``str.format`` costs ~1,700 instructions a
# translated request more, issue #38).
_KEY_HEADER: dict[str, tuple[str, str]] = {
    "authorization": ("Authorization", "Bearer "),
    "x-api-key": ("x-api-key", ""),
    "api-key": ("api-key", ""),
    "x-goog-api-key": ("x-goog-api-key", ""),
}


@dataclass(frozen=True, slots=True)
class Outbound:
    """What an upstream's request headers need from its config, decided once: reading
    ``forwards_client_credentials`` (a pydantic private attribute) per request costs more
    than filtering the headers themselves."""

    drop: frozenset[str]  # lower-case names never forwarded to this upstream
    key: tuple[str, str] | None  # the configured credential header, if any
    # Where a client credential forwarded to this upstream goes when it arrived in another
    # API's place (a translated request, a Gemini ``?key=``); None: none is forwarded.
    moves_to: tuple[str, str] | None = None
    # upstreams[].headers: set on every request, last, over the client's and the API's own.
    added: tuple[tuple[str, str], ...] = ()
    # With the client's credential forwarded, where its kind is taken, as the client sent it or
    # not: Anthropic's API (``placed_by_kind``), Azure OpenAI (``placed_for_azure``).
    by_kind: Placer | None = None

    @classmethod
    def of(cls, upstream: UpstreamConfig) -> Outbound:
        # The client's cookies and addresses (config.WITHHELD_CLIENT_HEADERS) stay here unless
        # server.forward_client_headers names them.
        drop = _REQUEST_DROP | {"x-request-id"} | upstream.withheld_client_headers
        # The config's replace the client's, but for a list (an anthropic-beta of its own joins
        # the client's betas: ``_added``).
        drop |= {name.lower() for name in upstream.headers} - LIST_HEADERS
        if not upstream.forwards_client_credentials:
            drop |= CREDENTIAL_HEADERS
        key = None
        if upstream.api_key is not None:
            name, prefix = _KEY_HEADER[upstream.key_header]
            key = (name, prefix + upstream.api_key)
        forwards = upstream.forwards_client_credentials
        moves_to = _KEY_HEADER[upstream.key_header] if forwards else None
        by_kind: Placer | None = None
        if forwards and upstream.host == ANTHROPIC_HOST and not upstream.key_header_given:
            # A key_header the config names is where the credential goes, whatever its kind.
            by_kind = placed_by_kind
        elif forwards and on_azure_openai(upstream.base_url):
            # Whatever key_header says: Azure reads an Entra ID token in no other place.
            by_kind = placed_for_azure
        return cls(frozenset(drop), key, moves_to, tuple(upstream.headers.items()), by_kind)


def request_headers(
    client: Mapping[str, str] | Iterable[tuple[str, str]],
    upstream: UpstreamConfig | Outbound,
    request_id: str,
    api: str | None = None,
    moves_to: tuple[str, str] | None = None,
    query_key: str | None = None,
) -> dict[str, str]:
    """The headers sent upstream: the client's, minus hop-by-hop ones, with our credential.

    With ``api_key`` set it goes in ``key_header`` and every client credential header is
    dropped. Without it the client's credential headers pass through, unless the gateway
    uses client keys (then they are gateway keys and the upstream gets none).

    With ``api``: ``in_api(request_headers(...), api, moves_to, query_key)`` in this one pass
    over the client's headers (a translated call's; each pass costs ~2 µs, issue #38).
    """
    # hasattr, not isinstance(..., Mapping): an ABC check that fails (an items view, the
    # usual argument) costs ~0.3 µs a call, and this runs for every request.
    items = client.items() if hasattr(client, "items") else client
    plan = upstream if isinstance(upstream, Outbound) else Outbound.of(upstream)
    foreign = _FOREIGN[api] if api is not None else None
    out, connection, taken = _filtered(items, plan.drop, foreign, moves_to is not None)
    if connection is not None:
        # Headers named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
        tokens = {t.strip().lower() for t in connection.split(",")}
        for k in [k for k in out if k.lower() in tokens]:
            del out[k]
        if taken:
            taken = {k: v for k, v in taken.items() if k not in tokens}
    if plan.key is not None:
        out[plan.key[0]] = plan.key[1]
    out["X-Request-Id"] = request_id
    if api is not None:
        _in_api_tail(out, api, taken, moves_to, query_key)
    if plan.by_kind is not None:
        plan.by_kind(out)
    if plan.added:
        _added(out, plan.added)
    return out


def outbound_headers(
    client: Mapping[str, str] | Iterable[tuple[str, str]],
    upstream: Outbound,
    request_id: str,
    api: str | None,
    *,
    translated: bool = False,
    query_key: str | None = None,
) -> dict[str, str]:
    """``request_headers`` for a request the gateway sends ``upstream`` in ``api`` (None: a path
    of no API, the model listing), with the client's own credential moved where the upstream
    takes one when it came in another API's place (``translated``) or as a Gemini client's
    ``?key=`` (``query_key``), which is never forwarded in the URL (docs/security.md). The one
    rule for every call that forwards a client's key: content generation (``pipeline/legs.py``),
    ``countTokens`` and the model listing."""
    moves_to = upstream.moves_to if translated or query_key is not None else None
    if api is not None:
        return request_headers(client, upstream, request_id, api, moves_to, query_key)
    headers = request_headers(client, upstream, request_id)
    if moves_to is not None:
        credential_moved(headers, moves_to, query_key, upstream.by_kind)
    return headers


def placed_for_azure(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` (changed in place) with a Microsoft Entra ID token alone in ``api-key`` (a
    translated client's bearer token moved to the host's ``key_header``, or a client's own)
    sent as ``Authorization: Bearer``: Azure OpenAI authenticates a request by an API key in the
    ``api-key`` header or by an Entra ID token as ``Authorization: Bearer`` (its REST reference,
    "Authentication"), so a token in ``api-key`` is read as a key and refused. A key stays."""
    key = None
    for k in headers:
        lk = k.lower()
        if lk == "authorization":
            return headers
        if lk == "api-key":
            key = k
    if key is not None and is_jwt(token := headers[key].strip()):
        _replaced(headers, key, "Authorization", f"Bearer {token}")
    return headers


# A JSON Web Token in compact form (RFC 7519 §3.1): three base64url parts joined by dots, the
# first a JSON header object (``{"`` encodes as ``eyJ``). An Entra ID access token is one; an
# API key has no dots.
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def is_jwt(token: str) -> bool:
    """Whether ``token`` has a JSON Web Token's shape (``_JWT``); nothing is decoded."""
    return _JWT.fullmatch(token) is not None


def placed_by_kind(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` (changed in place) with an Anthropic credential alone in the place of the
    other kind moved to its own: a key (``sk-ant-api…``) sent as a bearer token to x-api-key,
    an OAuth token (``sk-ant-oat…``) sent in x-api-key to ``Authorization: Bearer``
    (config.ANTHROPIC_HOST: Anthropic refuses each in the other's place). A bearer token of no
    known kind goes as it came; with both headers sent, both go as they came."""
    auth = key = None
    for k in headers:
        lk = k.lower()
        if lk == "authorization":
            auth = k
        elif lk == "x-api-key":
            key = k
    if auth is not None and key is None:
        value = headers[auth]
        token = value[7:].strip() if value[:7].lower() == "bearer " else ""
        if token.startswith(ANTHROPIC_KEY_PREFIX):
            _replaced(headers, auth, "x-api-key", token)
    elif key is not None and auth is None:
        token = headers[key].strip()
        if token.startswith(ANTHROPIC_OAUTH_PREFIX):
            _replaced(headers, key, "Authorization", f"Bearer {token}")
    return headers


def _replaced(headers: dict[str, str], old: str, name: str, value: str) -> None:
    """``old`` replaced by ``name: value`` where it stood: one order of headers, however made."""
    items = [(name, value) if k == old else (k, v) for k, v in headers.items()]
    headers.clear()
    headers.update(items)


# Headers whose value is a comma-separated list that the config's entry extends: "include all
# feature names in the header separated by commas: anthropic-beta: feature1,feature2,feature3"
# (https://docs.claude.com/en/api/beta-headers). Replaced, Claude Code's own betas were lost and
# Anthropic refused its mid-conversation system turns on every request.
LIST_HEADERS = frozenset({"anthropic-beta"})


def with_added(headers: Mapping[str, str], added: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """A copy of ``headers`` with ``added`` set over them, a list header (anthropic-beta)
    extended rather than replaced."""
    out = dict(headers)
    _added(out, added)
    return out


def _added(out: dict[str, str], added: tuple[tuple[str, str], ...]) -> None:
    """The config's headers over what the API rules put in (``anthropic-version``, say)."""
    for name, value in added:
        lower = name.lower()
        same = [k for k in out if k.lower() == lower]
        given = [out.pop(k) for k in same]
        if lower in LIST_HEADERS and given:
            items = [i.strip() for v in (*given, value) for i in v.split(",") if i.strip()]
            value = ",".join(dict.fromkeys(items))
        out[name] = value


def credential_moved(
    headers: dict[str, str], to: tuple[str, str], query_key: str | None, by_kind: Placer | None = None
) -> dict[str, str]:
    """``headers`` (changed in place) with the client's own credential in the header the
    upstream takes one in (``to``: its ``key_header``): a request translated to another API
    carries the credential where the client's API puts it (an OpenAI client's
    ``Authorization: Bearer``, which Google refuses), and a Gemini client may have sent it as
    ``?key=``, which is never forwarded as given. One already in ``to`` goes as it came.
    ``by_kind`` (``Outbound.by_kind``): then where its kind is taken."""
    taken = {k.lower(): headers.pop(k) for k in [k for k in headers if k.lower() in CREDENTIAL_HEADERS]}
    _move_credential(headers, taken, to, query_key)
    return by_kind(headers) if by_kind is not None else headers


def _move_credential(
    headers: dict[str, str], taken: dict[str, str], to: tuple[str, str], query_key: str | None
) -> None:
    """``taken``: the client's credential headers (lower-case names), already out of ``headers``."""
    name, prefix = to
    kept = taken.get(name.lower()) if taken else None
    if kept is not None:
        headers[name] = kept
        return
    value = query_key
    for lk, v in taken.items():
        value = v[7:].strip() if lk == "authorization" and v[:7].lower() == "bearer " else v
        break
    if value:
        headers[name] = prefix + value


# An answer to the gateway's own credential says whose it is: OpenAI's ``openai-organization``
# is "the organization associated with the request" and ``openai-project`` its project
# (developers.openai.com/api/reference/overview, "Debugging requests"), the operator's, and a
# cookie is set for the operator's session with the provider. Not the client's to read or keep.
_OPERATOR_HEADERS = frozenset({"set-cookie", "openai-organization", "openai-project"})


def response_headers(
    upstream: Mapping[str, str] | Iterable[tuple[str, str]], operator: bool = False
) -> list[tuple[str, str]]:
    """The upstream's answer headers as relayed; ``operator``: the gateway sent its own key
    (``_OPERATOR_HEADERS`` stay out)."""
    items = upstream.items() if hasattr(upstream, "items") else upstream  # see request_headers
    out: list[tuple[str, str]] = []
    connection: list[str] = []
    upstream_ids: list[str] = []
    for k, v in items:  # one pass: this runs for every answer
        lk = k.lower()
        if lk in _RESPONSE_DROP:
            if lk == "connection":
                connection.append(v)
            elif lk == "x-request-id":
                upstream_ids.append(v)
            continue
        if operator and lk in _OPERATOR_HEADERS:
            continue
        if lk == "request-id":
            # Anthropic's id ("request-id: A globally unique identifier for the request", on
            # every response: https://docs.anthropic.com/en/api/overview): passed on, as the
            # anthropic SDKs read it there, and under our name too.
            upstream_ids.append(v)
        out.append((k, v))
    if connection:
        # Headers named in Connection are hop-by-hop too (RFC 9110 §7.6.1).
        tokens = {t.strip().lower() for v in connection for t in v.split(",")}
        out = [(k, v) for k, v in out if k.lower() not in tokens]
    # Keep the provider's request id for support tickets without clobbering ours.
    out.extend(("x-upstream-request-id", v) for v in upstream_ids)
    return out


def with_content_type(headers: Iterable[tuple[str, str]], ctype: str) -> list[tuple[str, str]]:
    """``headers`` (an upstream's, as relayed) for a body of another kind than the upstream's
    own: a stream the gateway gathered into one answer, an answer it made a stream."""
    return [*((k, v) for k, v in headers if k.lower() != "content-type"), ("Content-Type", ctype)]
