"""Configuration: one YAML file, frozen pydantic models, secrets from the environment.

Every key has a default, so a file that names one upstream is complete. Unknown keys
are errors: a typo must not be silently ignored.
"""

from __future__ import annotations

import difflib
import hashlib
import ipaddress
import os
import re
import types
import typing
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal, Self
from urllib.parse import urlsplit

import jmespath
import yaml
from jmespath.exceptions import JMESPathError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails


class ConfigError(Exception):
    """Config problems, each worded as one line that names the field.

    ``problems`` holds every problem found, so an operator fixes them in one round
    instead of one per restart; ``str()`` is those lines joined by newlines.
    """

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# Client headers that describe the client's own connection, withheld from providers unless
# server.forward_client_headers names them. The gateway is the provider's client, on a
# connection of its own: a cookie is the client's credential for whatever site set it (the
# gateway's host, or a proxy in front of it), never for the provider, and the forwarding
# headers (RFC 7239 Forwarded and the de-facto X-Forwarded-*, X-Real-IP) carry end users'
# addresses and internal host names that are personal data or topology a provider has no use for.
WITHHELD_CLIENT_HEADERS = frozenset({
    "cookie", "forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto",
    "x-forwarded-port", "x-real-ip",
})  # fmt: skip


class ServerConfig(_Model):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    drain_s: float = Field(default=30.0, ge=0)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Keys clients must present (Authorization: Bearer, x-api-key or api-key) to use the
    # gateway. One string may hold several comma-separated keys, so a single environment
    # variable (`client_keys: ${GATEWAY_CLIENT_KEYS:-}`) can carry them all; empty means
    # no client authentication.
    client_keys: tuple[str, ...] = Field(default=(), repr=False)
    # Serving the operator's provider key to anyone who reaches a non-loopback port must
    # be a deliberate choice, never the default (see gateway.auth.startup_check).
    allow_unauthenticated: bool = False
    # Processes serving the port (SO_REUSEPORT, one listening socket each; see
    # gateway/workers/). "auto": one per core this process may run on. The range sits in the
    # type, so a bad value is worded from it in one line (see _union_wording).
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = 1
    # The HTTP client upstream requests go out on (gateway/upstream/): "h1", the gateway's
    # own HTTP/1.1 client (a third of aiohttp's CPU per request, bench/RESULTS.md), or
    # "aiohttp", aiohttp's client. Both pass one conformance suite (tests/conformance/).
    upstream_client: Literal["h1", "aiohttp"] = "h1"
    # The event loop the server runs on: uvloop (libuv; the default where it is installed, which
    # the package's dependencies make everywhere but Windows) or asyncio's own.
    event_loop: Literal["uvloop", "asyncio"] = "uvloop"
    # Client headers the provider does not get unless named here (any of WITHHELD_CLIENT_HEADERS,
    # case-insensitive): the client's cookies and its addresses as proxies recorded them.
    forward_client_headers: tuple[str, ...] = ()
    # Reload when the file's content changes (checked every second), as on SIGHUP; off by
    # default: an editor's half-saved file must not be tried unless the operator asks for it.
    watch_config: bool = False

    @property
    def worker_count(self) -> int:
        if self.workers == "auto":
            return max(1, len(os.sched_getaffinity(0)))
        return self.workers

    @field_validator("forward_client_headers")
    @classmethod
    def _withheld_only(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(n.strip().lower() for n in v))
        other = [n for n in names if n not in WITHHELD_CLIENT_HEADERS]
        if other:
            raise ValueError(
                f"{', '.join(other)} cannot be named here: only withheld headers can be forwarded "
                f"({', '.join(sorted(WITHHELD_CLIENT_HEADERS))}); every other client header is "
                "forwarded already, except credentials and hop-by-hop headers, which never are"
            )
        return names

    @field_validator("client_keys", mode="before")
    @classmethod
    def _split_keys(cls, v: Any) -> Any:
        items = [v] if isinstance(v, str) else v
        if v is None:
            return ()
        if not isinstance(items, list | tuple):
            return v  # let pydantic say what type it wanted
        if not all(isinstance(item, str) for item in items):
            return v  # let pydantic name the item that is not a string
        keys = [k.strip() for item in items for k in item.split(",")]
        return tuple(dict.fromkeys(k for k in keys if k))  # a repeated key adds nothing

    @field_validator("client_keys")
    @classmethod
    def _header_safe(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for i, key in enumerate(v):
            # Never echo the key: only its position says which one is wrong.
            if any(c.isspace() or not c.isprintable() for c in key) or not key.isascii():
                raise ValueError(f"key #{i + 1} must be printable ASCII without spaces")
        return v

    @property
    def is_loopback(self) -> bool:
        """Whether only this machine can connect (127.0.0.0/8, ::1 or localhost)."""
        if self.host.lower() in ("localhost", "localhost."):
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False  # a hostname may resolve to anything: assume reachable


# The wire APIs by the names config uses: OpenAI chat completions, Anthropic Messages,
# OpenAI Responses, the Gemini API (generateContent).
ApiName = Literal["chat", "messages", "responses", "gemini"]
# What an upstream speaks when neither `apis` nor its host says: the three OpenAI-compatible
# servers commonly offer. Gemini is spoken by Google's endpoint alone, so it is never assumed
# (a Gemini client on such a server is translated to chat, as before Gemini upstreams existed).
ALL_APIS: tuple[ApiName, ...] = ("chat", "messages", "responses")

# What the providers at well-known hosts serve, for an upstream whose `apis` is not given.
# OpenAI's API has chat completions and Responses, no Messages (platform.openai.com/docs/
# api-reference). Anthropic's has Messages; its chat completions endpoint is a compatibility
# layer "primarily intended to test and compare model capabilities" without prompt caching
# or thinking output (docs.claude.com/en/api/openai-sdk), so chat clients are better served
# translated to Messages. Any other host keeps all three: every request goes out in the
# client's own API, as configs written before translation expect.
APIS_BY_HOST: dict[str, tuple[ApiName, ...]] = {
    "api.openai.com": ("chat", "responses"),
    "api.anthropic.com": ("messages",),
    # Google AI Studio's Gemini API (https://ai.google.dev/api): generateContent. Its OpenAI
    # compatibility layer (/v1beta/openai/) is a chat upstream of its own: say `apis: [chat]`.
    "generativelanguage.googleapis.com": ("gemini",),
}


class DeploymentLimits(_Model):
    """A deployment's own rate limits, as its provider set them for its key."""

    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)


class UpstreamConfig(_Model):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    base_url: str
    api_key: str | None = Field(default=None, repr=False)
    models: tuple[str, ...] = ("*",)
    context_window: int | None = Field(default=None, gt=0)
    max_connections: int = Field(default=256, gt=0)
    # Ask streams for their usage chunk (stream_options.include_usage) to count tokens;
    # turn off for a server that rejects the option.
    stream_usage: bool = True
    # Which header carries api_key: `Authorization: Bearer <key>` (OpenAI and most
    # compatibles), `x-api-key: <key>` (Anthropic), `api-key: <key>` (Azure OpenAI) or
    # `x-goog-api-key: <key>` (the Gemini API). Not given: x-goog-api-key for an upstream that
    # speaks only Gemini (Google takes a key there or in ?key=, which would land in access logs),
    # else authorization.
    key_header: Literal["authorization", "x-api-key", "api-key", "x-goog-api-key"] = "authorization"
    # Upstreams or pools (any wire API) that serve this one's requests when it cannot: tried in
    # order, within the same deadline and retry counts (see `fallback:`). Not followed recursively.
    fallbacks: tuple[str, ...] = ()
    # How this upstream can go on from a partial answer when a stream breaks mid-answer:
    # `prefill` (a trailing assistant turn: Anthropic models that accept it), vLLM's
    # `continue_final_message` (on /v1/responses: vLLM's trailing assistant message marked
    # `status: in_progress`), `prefix` (DeepSeek, Mistral prefix completion), or, on any
    # upstream of any API, `replay` (the request sent again, relayed only past the text
    # already shown; deterministic requests only: temperature 0 or a seed) and `replay_any`
    # (every request: this upstream's answers repeat). Never assumed: `none` ends a broken
    # stream with one typed error, as without continuation.
    continuation: Literal[
        "none", "prefill", "continue_final_message", "prefix", "replay", "replay_any"
    ] = "none"
    # The wire APIs this upstream speaks. A request in another API is translated to one of
    # these (the first that has a translator, in this order). Not given (or blank: an unset
    # variable), what its host is known to serve (APIS_BY_HOST), else all three.
    apis: tuple[ApiName, ...] = ALL_APIS
    # The model the upstream is asked for, by the model the client requested: glob → name,
    # first match wins; a requested model that matches none is sent as it is. Answers still
    # name the model the client asked for where its API echoes one.
    model_map: tuple[tuple[str, str], ...] = ()
    # This upstream's own timeouts.first_token_s (a reasoning model thinks longer before its
    # first token than a small fast one); unset: the global value.
    first_token_s: float | None = Field(default=None, gt=0)
    # As a deployment of a pool (`pools:`): its share of new conversations under the
    # `weighted` strategy, and the limits its key has when its answers carry no rate-limit
    # headers (per model it serves, per minute; shared across replicas through `state`).
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    limits: DeploymentLimits | None = None
    # Set by GatewayConfig: with client keys in use, what a client sends in its credential
    # headers is a gateway key, never a provider key, so it must not travel upstream.
    _client_keys_in_use: bool = PrivateAttr(default=False)
    # Set by GatewayConfig from server.forward_client_headers.
    _forwarded_client_headers: tuple[str, ...] = PrivateAttr(default=())
    # Where `apis` came from, for the start-up line: "config", "host <name>" or "default".
    _apis_from: str = PrivateAttr(default="config")

    @model_validator(mode="wrap")
    @classmethod
    def _apis_by_host(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            return handler(data)
        if data.get("apis") not in (None, ""):
            return handler(_gemini_key_header(data))
        host = _hostname(data.get("base_url"))
        known = APIS_BY_HOST.get(host)
        up = handler(_gemini_key_header({**data, "apis": known or ALL_APIS}))
        up._apis_from = f"host {host}" if known else "default"
        return up

    @property
    def apis_from(self) -> str:
        return self._apis_from

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        try:
            parts = urlsplit(v)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            raise ValueError("must be an absolute http:// or https:// URL") from None
        if "@" in parts.netloc:
            # Never echo the URL: the part before '@' is a password. aiohttp would also
            # refuse the URL on every request, so this is a start-up error, not a 500 later.
            raise ValueError("must not contain credentials (user:password@); put the key in api_key")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an absolute http:// or https:// URL")
        if parts.query or parts.fragment:
            raise ValueError("must not have a query string or fragment")
        return v.rstrip("/")

    @property
    def forwards_client_credentials(self) -> bool:
        """Whether the client's Authorization / x-api-key / api-key go upstream as they came."""
        return self.api_key is None and not self._client_keys_in_use

    @property
    def withheld_client_headers(self) -> frozenset[str]:
        """The client's headers (lower-case) this upstream does not get (WITHHELD_CLIENT_HEADERS)."""
        return WITHHELD_CLIENT_HEADERS.difference(self._forwarded_client_headers)

    @field_validator("api_key")
    @classmethod
    def _blank_key_is_none(cls, v: str | None) -> str | None:
        # `api_key: ${OPENAI_API_KEY:-}` with the variable unset means "forward the client's".
        return v or None

    @field_validator("models", "fallbacks", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        # `models: "gpt-*"` means one pattern, as a YAML writer would expect; a list stays a list.
        return (v,) if isinstance(v, str) else v

    @field_validator("apis", mode="before")
    @classmethod
    def _one_api_is_a_list(cls, v: Any) -> Any:
        # "chat" or "chat,messages": one environment variable can say it (UPSTREAM_APIS).
        return tuple(a.strip() for a in v.split(",") if a.strip()) if isinstance(v, str) else v

    @field_validator("apis")
    @classmethod
    def _some_api(cls, v: tuple[ApiName, ...]) -> tuple[ApiName, ...]:
        if not v:
            raise ValueError("must list at least one of chat, messages, responses, gemini")
        return tuple(dict.fromkeys(v))

    @field_validator("model_map", mode="before")
    @classmethod
    def _map_in_order(cls, v: Any) -> Any:
        # YAML mappings keep their order; a list of one-key mappings is accepted too.
        if isinstance(v, dict):
            return tuple(v.items())
        if isinstance(v, list) and all(isinstance(i, dict) and len(i) == 1 for i in v):
            return tuple(next(iter(i.items())) for i in v)
        return v

    @field_validator("model_map")
    @classmethod
    def _empty_name_keeps_the_requested(cls, v: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        # `{"*": "${UPSTREAM_MODEL:-}"}` with the variable unset means "no mapping".
        return tuple((pattern, name) for pattern, name in v if name)

    def upstream_model(self, requested: str) -> str:
        for pattern, name in self.model_map:
            if fnmatchcase(requested, pattern):
                return name
        return requested

    @field_validator("models")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("must list at least one model pattern")
        return v


def _gemini_key_header(data: dict[str, Any]) -> dict[str, Any]:
    """An upstream that speaks only Gemini takes its key in x-goog-api-key unless told otherwise."""
    apis = data.get("apis")
    only = apis in ("gemini", ["gemini"], ("gemini",))
    return {**data, "key_header": "x-goog-api-key"} if only and data.get("key_header") is None else data


def _hostname(url: Any) -> str:
    try:
        return (urlsplit(url).hostname or "") if isinstance(url, str) else ""
    except ValueError:
        return ""  # base_url's own validator says what is wrong with it


class RetryClassConfig(_Model):
    max_retries: int = Field(ge=0, le=100)
    base_delay_s: float = Field(gt=0)
    max_delay_s: float = Field(gt=0)


class RetryBudgetConfig(_Model):
    ttl_s: float = Field(default=10.0, gt=0)
    min_retries_per_s: float = Field(default=10.0, ge=0)
    percent_can_retry: float = Field(default=20.0, ge=0, le=100)


_RETRY_CLASS_DEFAULTS: dict[str, dict[str, float]] = {
    "rate_limit": {"max_retries": 3, "base_delay_s": 1.0, "max_delay_s": 20.0},
    "provider_unavailable": {"max_retries": 5, "base_delay_s": 0.5, "max_delay_s": 10.0},
}


class RetryConfig(_Model):
    rate_limit: RetryClassConfig = RetryClassConfig.model_validate(_RETRY_CLASS_DEFAULTS["rate_limit"])
    provider_unavailable: RetryClassConfig = RetryClassConfig.model_validate(
        _RETRY_CLASS_DEFAULTS["provider_unavailable"]
    )
    max_retry_after_s: float = Field(default=30.0, ge=0)
    deadline_s: float = Field(default=600.0, gt=0)
    budget: RetryBudgetConfig = RetryBudgetConfig()

    @field_validator("rate_limit", "provider_unavailable", mode="before")
    @classmethod
    def _fill_defaults(cls, v: Any, info: ValidationInfo) -> Any:
        # The two classes have different defaults, so RetryClassConfig cannot carry them:
        # a partial section (`rate_limit: {max_retries: 1}`) takes the rest from its class.
        if isinstance(v, Mapping) and info.field_name is not None:
            return {**_RETRY_CLASS_DEFAULTS[info.field_name], **v}
        return v


class CircuitBreakerConfig(_Model):
    failure_threshold: int = Field(default=5, gt=0)
    # The longest a circuit stays open before a probe (see policy/breaker.open_period_s).
    open_s: float = Field(default=30.0, gt=0)
    # The first open period, and every one while the upstream has a fallback to carry its
    # traffic: a recovered primary is back within about this long under steady traffic.
    probe_interval_s: float = Field(default=5.0, gt=0)
    # Consecutive failures open the circuit of the failing model only; the whole upstream's
    # circuit opens once a failure streak spans this many distinct models (a provider outage).
    models_to_open: int = Field(default=2, ge=1)


class FallbackConfig(_Model):
    """When a request moves on to the next upstream of its chain."""

    # The classes that fail over. Auth and request errors never do: another upstream would
    # refuse the same request for the same reason.
    when: tuple[Literal["provider_unavailable", "rate_limit", "budget"], ...] = (
        "provider_unavailable", "rate_limit", "budget",
    )  # fmt: skip
    # Retries on one upstream before moving on, when a fallback is left to try.
    retries_per_upstream: int = Field(default=1, ge=0)
    # Try a fallback with a larger context_window before compressing an overflow.
    context_overflow: bool = False


PoolStrategy = Literal["weighted", "least_busy", "latency", "headroom"]


class CooldownsConfig(_Model):
    """How long a deployment of a pool sits out after an answer that says its key cannot serve."""

    # A rate limit whose answer names no reset (else: until the reset it names).
    rate_limit_s: float = Field(default=5.0, gt=0)
    # An exhausted key (budget), unless its answer names a reset: top-ups are rarely instant.
    budget_s: float = Field(default=300.0, gt=0)
    # A key the provider refused (401/403 on the operator's own key): revoked keys stay revoked,
    # so one request an hour asks again rather than one a turn.
    auth_s: float = Field(default=3600.0, gt=0)


class AffinityConfig(_Model):
    """Prompt-cache affinity: a conversation stays on the deployment that served it."""

    enabled: bool = True
    # Conversations remembered per pool and process (least recently used go first), and how
    # long an idle one is kept: longer than the providers' longest prompt-cache lifetime (1 h).
    max_entries: int = Field(default=10_000, gt=0, le=10_000_000)
    idle_s: float = Field(default=3600.0, gt=0)


class PoolConfig(_Model):
    """Several deployments (upstreams) serving the same models; a strategy picks among them."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    models: tuple[str, ...] = ("*",)
    deployments: tuple[str, ...] = Field(min_length=1)
    strategy: PoolStrategy = "weighted"
    # Upstreams or pools tried, in order, once no deployment of this pool can serve.
    fallbacks: tuple[str, ...] = ()
    affinity: AffinityConfig = AffinityConfig()
    cooldowns: CooldownsConfig = CooldownsConfig()

    @field_validator("models", "deployments", "fallbacks", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("models")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("must list at least one model pattern")
        return v

    @field_validator("deployments")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = sorted({n for n in v if v.count(n) > 1})
        if dupes:
            raise ValueError(f"lists a deployment twice: {', '.join(dupes)}")
        return v


def patterns_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether some model name could match a pattern of both (each pattern tried as a name
    against the other: `*` overlaps everything, `claude-*` overlaps `claude-sonnet-*`)."""
    return any(fnmatchcase(p, q) or fnmatchcase(q, p) for p in a for q in b)


def _names(raw: Any) -> tuple[str, ...]:
    """The strings of a list that may be written as one string; anything else counts as none
    (pydantic reports it)."""
    items = (raw,) if isinstance(raw, str) else raw if isinstance(raw, list | tuple) else ()
    return tuple(i for i in items if isinstance(i, str))


def reference_problems(upstreams: Sequence[Any], pools: Sequence[Any]) -> list[str]:
    """Names that point elsewhere (fallbacks, deployments) and names that collide, every
    problem on its own line, each naming its section (see _describe): one must not hide another.

    Takes the sections as mappings, not models, so that parse_config can run it on what was
    written when some field is invalid (GatewayConfig's own validators do not run then), and
    an operator learns of an unknown fallback in the same round as a bad port."""
    ups = [u["name"] for u in upstreams if isinstance(u, Mapping) and isinstance(u.get("name"), str)]
    pool_list = [p for p in pools if isinstance(p, Mapping) and isinstance(p.get("name"), str)]
    pool_names = [p["name"] for p in pool_list]
    targets = ups + pool_names
    problems = []
    members: dict[str, str] = {}
    for p in pool_list:
        if p["name"] in ups:
            problems.append(f"pools: pool '{p['name']}' has an upstream's name; a pool needs its own")
        deployments = _names(p.get("deployments"))
        missing = [d for d in deployments if d not in ups]
        if missing:
            problems.append(f"pools: pool '{p['name']}' names deployments that are no upstream: "
                            f"{', '.join(missing)} (upstream names: {', '.join(ups)})")
        for d in deployments:
            members.setdefault(d, p["name"])
    known = "upstream and pool names" if pool_names else "upstream names"
    named = [("upstream", u) for u in upstreams if isinstance(u, Mapping) and isinstance(u.get("name"), str)]
    for kind, section in [*named, *(("pool", p) for p in pool_list)]:
        name, fallbacks = section["name"], _names(section.get("fallbacks"))
        unknown = [f for f in fallbacks if f not in targets]
        where = f"{kind}s: {kind} '{name}'"
        if unknown:
            problems.append(f"{where} names unknown fallbacks: {', '.join(unknown)} "
                            f"({known}: {', '.join(dict.fromkeys(targets))})")
        if name in fallbacks:
            problems.append(f"{where} lists itself as a fallback")
    for _, u in named:
        if u["name"] in members and _names(u.get("fallbacks")):
            problems.append(f"upstreams: upstream '{u['name']}' is a deployment of pool "
                            f"'{members[u['name']]}', where its fallbacks go (pools[].fallbacks)")
    for what, names in (("upstream", ups), ("pool", pool_names)):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            problems.append(f"{what}s: {what} names must be unique, repeated: {', '.join(dupes)}")
    models = [(p["name"], _names(p.get("models", ("*",)))) for p in pool_list]
    for i, (a, a_models) in enumerate(models):
        for b, b_models in models[i + 1 :]:
            if patterns_overlap(a_models, b_models):
                problems.append(f"pools: pools '{a}' and '{b}' both claim models matching "
                                f"{', '.join(a_models)} / {', '.join(b_models)}; a model has one pool")
    return problems  # fmt: skip


class TimeoutsConfig(_Model):
    connect_s: float = Field(default=10.0, gt=0)
    first_byte_s: float = Field(default=300.0, gt=0)
    # From sending a streamed request to its first visible event (text, a tool call, thinking;
    # not the contentless head events or keep-alive pings). As long as first_byte_s by default:
    # a streamed request may think as long as an unstreamed one may before its head, so slow
    # reasoning models are not cut, yet a stream that only sends pings is bounded. null: off.
    first_token_s: float | None = Field(default=300.0, gt=0)
    idle_s: float = Field(default=120.0, gt=0)


class CompressionConfig(_Model):
    enabled: bool = True
    # Clients that summarise their own conversation (Claude Code, Codex) are rescued like any
    # other by default: Claude Code only summarises when it has enough history (a short run
    # that overflows just dies), and the rescued answer's usage reports a nearly full window,
    # which is what triggers their own compaction on the next turn, so history stays bounded.
    # `pass_through` hands them the provider's overflow untouched instead.
    self_compacting_clients: Literal["rescue", "pass_through"] = "rescue"
    # Opt-in, before the first send on every API: any single tool output above this many
    # tokens is cut to head + tail. Either a number, or a share of the upstream's
    # context_window (for upstreams that declare one); with both, the smaller wins.
    max_tool_output_tokens: int | None = Field(default=None, ge=64)
    max_tool_output_share: float | None = Field(default=None, gt=0, le=0.5)


class ToolRuleConfig(_Model):
    """What to do with the outputs of the tools whose name matches ``tool`` (a glob)."""

    tool: str = Field(min_length=1)
    # A JMESPath expression applied to the output's JSON before any cut or cap; the raw
    # output is kept when it is not JSON or the expression fails or selects nothing.
    project: str | None = None
    # An output still above the limit: cut to head + tail, or replaced by a structured
    # "oversized" result the model can act on.
    oversized: Literal["cut", "exclude"] = "cut"
    max_tokens: int | None = Field(default=None, ge=64)  # this tool's limit (else tool_outputs')
    max_share: float | None = Field(default=None, gt=0, le=1)

    @field_validator("project")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                jmespath.compile(v)
            except JMESPathError as e:
                # jmespath's message draws a caret under the expression over three lines; the
                # config error is one line per problem.
                first = str(e).splitlines()[0].rstrip(" ,:") if str(e) else "parse error"
                raise ValueError(f"not a JMESPath expression: {first}") from None
        return v


class ToolOutputsConfig(_Model):
    """Per-tool projection and oversized-output policy (README "Tool outputs")."""

    # Enforce the limits before the first send too; off: only when the provider said the
    # conversation is too long (projections are applied up front whenever a rule has one).
    upfront: bool = False
    max_share: float = Field(default=0.3, gt=0, le=1)  # of the upstream's context_window
    max_tokens: int | None = Field(default=None, ge=64)  # with both, the smaller wins
    rules: tuple[ToolRuleConfig, ...] = ()  # first match wins; unmatched tools: cut, as always


class StateConfig(_Model):
    """Where cross-request state lives: ``memory`` (this process) or ``redis`` (shared by replicas)."""

    backend: Literal["memory", "redis"] = "memory"
    # repr=False: a redis URL may carry a password.
    url: str | None = Field(default=None, repr=False)
    key_prefix: str = Field(default="llm-gateway:", max_length=64)
    # A request never waits on the shared store longer than this per operation; past it the
    # replica falls back to its own memory until the store answers again.
    timeout_ms: int = Field(default=50, gt=0, le=10_000)
    recover_s: float = Field(default=1.0, gt=0)  # how long to stay local after a store failure
    # Circuit state, and whether any replica remembers a loop-breaker answer, may be this
    # stale per replica (each costs a Redis round trip at most once per cache_ms, not per request).
    cache_ms: int = Field(default=200, ge=0, le=10_000)

    @field_validator("url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        if v and urlsplit(v).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return v or None

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StateConfig:
        if self.backend == "redis" and not self.url:
            raise ValueError("backend redis needs a url (redis://host:6379/0)")
        return self


class LoopBreakerConfig(_Model):
    """How long a failed request's answer is replayed to an identical request (same path,
    body and credential) instead of sending it again."""

    enabled: bool = True
    window_s: float = Field(default=10.0, ge=0)  # unknown, auth, unrescued context_overflow
    budget_window_s: float = Field(default=5.0, ge=0)  # short: must not outlive a top-up by much
    # A given-up retryable error without a hint; None: circuit_breaker.open_s.
    retryable_window_s: float | None = Field(default=None, ge=0)
    max_window_s: float = Field(default=60.0, ge=0)  # cap for reset-at / retry-after / open circuit
    # After a retryable failure's window, identical repeats are sent as one-attempt probes while
    # they keep coming: each within turn_idle_s of the last window's end (longer than any
    # client's gap between two repeats), for at most turn_max_s since the turn first failed.
    turn_idle_s: float = Field(default=120.0, ge=0)
    turn_max_s: float = Field(default=900.0, ge=0)
    max_entries: int = Field(default=10_000, gt=0)
    max_body_bytes: int = Field(default=64 * 1024, gt=0)  # a larger answer is not remembered
    max_total_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    # Keys the fingerprint (a keyed BLAKE2b MAC). Replicas share answers only if they share it; when unset,
    # each process draws a random one.
    secret: str | None = Field(default=None, repr=False)

    @field_validator("secret")
    @classmethod
    def _blank_secret_is_none(cls, v: str | None) -> str | None:
        return v or None  # `${LOOP_BREAKER_SECRET:-}` unset means "draw one per process"


class TracingConfig(_Model):
    """OpenTelemetry traces over OTLP/HTTP (README "Tracing"). Off unless switched on here or
    by the standard variables: ``enabled`` unset means "on when OTEL_EXPORTER_OTLP_ENDPOINT
    (or ..._TRACES_ENDPOINT) is set", and OTEL_SDK_DISABLED=true always wins. Every field left
    unset here takes its OTEL_* variable, then the SDK's default."""

    enabled: bool | None = None
    # Where spans go: the collector's base URL (``/v1/traces`` is appended), as
    # OTEL_EXPORTER_OTLP_ENDPOINT is read.
    endpoint: str | None = None
    service_name: str | None = None  # else OTEL_SERVICE_NAME, else "llm-gateway"
    sample_ratio: float | None = Field(default=None, ge=0, le=1)  # else OTEL_TRACES_SAMPLER(_ARG)
    # Spans wait here for the exporter's thread; when the collector is down and it is full,
    # the oldest are dropped (the SDK logs it once), so memory stays bounded.
    max_queue_size: int | None = Field(default=None, gt=0, le=1_000_000)  # else OTEL_BSP_MAX_QUEUE_SIZE, 2048
    export_timeout_s: float | None = Field(default=None, gt=0, le=60)  # else OTEL_EXPORTER_OTLP_TIMEOUT, 10
    # Prompts, completions and tool outputs in span attributes (gen_ai.input.messages, ...),
    # key-like strings redacted. Off: spans carry sizes, counts and decisions only.
    capture_content: bool = False


class BudgetConfig(_Model):
    """A spend cap per period, in USD; periods are UTC (a day, a week from Monday, a month)."""

    usd: float = Field(gt=0)
    period: Literal["day", "week", "month"] = "month"


class ClientKeyConfig(_Model):
    """A gateway key for a person, a CI job or an agent (README "Keys and budgets")."""

    # What logs, metrics and answers show of the key; never the key itself.
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    key: str | None = Field(default=None, repr=False)  # e.g. ${ALICE_GATEWAY_KEY}
    key_sha256: str | None = Field(default=None, pattern=r"^[0-9a-fA-F]{64}$")  # or its digest only
    team: str | None = None  # a team of `teams:`, whose budget its keys share
    models: tuple[str, ...] = ("*",)  # the models it may use (globs)
    requests_per_minute: int | None = Field(default=None, gt=0)
    tokens_per_minute: int | None = Field(default=None, gt=0)  # prompt and completion
    parallel: int | None = Field(default=None, gt=0)  # requests in flight at once
    budget: BudgetConfig | None = None
    # May read every key's state (GET /v1/gateway/keys), not only its own.
    admin: bool = False

    @field_validator("models", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("key")
    @classmethod
    def _printable(cls, v: str | None) -> str | None:
        if v is not None and (not v or any(c.isspace() or not c.isprintable() for c in v) or not v.isascii()):
            raise ValueError("must be printable ASCII without spaces")  # never echo the key
        return v or None

    @model_validator(mode="after")
    def _one_credential(self) -> Self:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key '{self.name}' needs exactly one of key, key_sha256")
        return self


class TeamConfig(_Model):
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$")
    budget: BudgetConfig | None = None


class PriceConfig(_Model):
    """USD per million tokens; a cache price left out is the input price."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)


class AccountingConfig(_Model):
    """How keys' limits and budgets are counted (README "Keys and budgets")."""

    # The state store is down: serve, counting in this process's memory only (open), or
    # refuse keys with limits or budgets (closed) with a 503.
    when_store_down: Literal["open", "closed"] = "open"
    # A request that names no output limit is reserved as if it asked for this many tokens.
    default_max_tokens: int = Field(default=4096, gt=0)


class GatewayConfig(_Model):
    server: ServerConfig = ServerConfig()
    upstreams: tuple[UpstreamConfig, ...] = Field(min_length=1)
    retry: RetryConfig = RetryConfig()
    circuit_breaker: CircuitBreakerConfig = CircuitBreakerConfig()
    timeouts: TimeoutsConfig = TimeoutsConfig()
    compression: CompressionConfig = CompressionConfig()
    tool_outputs: ToolOutputsConfig = ToolOutputsConfig()
    state: StateConfig = StateConfig()
    loop_breaker: LoopBreakerConfig = LoopBreakerConfig()
    fallback: FallbackConfig = FallbackConfig()
    tracing: TracingConfig = TracingConfig()
    # Several deployments (upstreams) serving the same models (README "Pools").
    pools: tuple[PoolConfig, ...] = ()
    # Named gateway keys with their limits and budgets, teams, prices (README "Keys and budgets").
    keys: tuple[ClientKeyConfig, ...] = ()
    teams: tuple[TeamConfig, ...] = ()
    prices: dict[str, PriceConfig] = Field(default_factory=dict)  # model glob -> price, before the shipped
    accounting: AccountingConfig = AccountingConfig()

    @field_validator("upstreams")
    @classmethod
    def _unique_names(cls, v: tuple[UpstreamConfig, ...]) -> tuple[UpstreamConfig, ...]:
        return v

    @model_validator(mode="after")
    def _references(self) -> Self:
        problems = reference_problems(
            [{"name": u.name, "fallbacks": u.fallbacks} for u in self.upstreams],
            [{"name": p.name, "fallbacks": p.fallbacks, "deployments": p.deployments, "models": p.models}
             for p in self.pools],
        )  # fmt: skip
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="after")
    def _keys_and_teams(self) -> Self:
        problems = []
        for what, names in (("key", [k.name for k in self.keys]), ("team", [t.name for t in self.teams])):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                problems.append(f"{what}s: {what} names must be unique, repeated: {', '.join(dupes)}")
        teams = {t.name for t in self.teams}
        for k in self.keys:
            if k.team is not None and k.team not in teams:
                problems.append(f"keys: key '{k.name}' names team '{k.team}', which `teams:` does not list")
        digests = [k.key_sha256.lower() if k.key_sha256 else _sha256(k.key or "") for k in self.keys]
        digests += [_sha256(k) for k in self.server.client_keys]
        if len(set(digests)) != len(digests):
            problems.append("keys: two keys (in keys: or server.client_keys) are the same key")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def uses_client_keys(self) -> bool:
        """Whether clients must present a gateway key (flat client_keys or named keys)."""
        return bool(self.server.client_keys or self.keys)

    def pool_of(self, upstream: str) -> PoolConfig | None:
        return next((p for p in self.pools if upstream in p.deployments), None)

    @model_validator(mode="after")
    def _mark_client_keys(self) -> Self:
        for u in self.upstreams:
            u._client_keys_in_use = self.uses_client_keys
            u._forwarded_client_headers = self.server.forward_client_headers
        return self


def _sha256(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def config_warnings(cfg: GatewayConfig) -> list[str]:
    """Settings that are valid but almost certainly not what was meant, one line each."""
    out = _shadowed(cfg)
    for i, u in enumerate(cfg.upstreams):
        if urlsplit(u.base_url).path in ("", "/"):
            # /v1/<rest> maps onto base_url + /<rest>, so a bare host loses the /v1.
            if u.apis == ("gemini",):  # Google serves the Gemini API under /v1beta
                out.append(
                    f"upstreams[{i}].base_url has no path, so a generateContent request is sent to "
                    f"{u.base_url}/models/...; did you mean {u.base_url}/v1beta?"
                )
            else:
                out.append(
                    f"upstreams[{i}].base_url has no path, so /v1/chat/completions is sent to "
                    f"{u.base_url}/chat/completions; did you mean {u.base_url}/v1?"
                )
        if cfg.uses_client_keys and u.api_key is None:
            out.append(
                f"upstreams[{i}] ({u.name}) has no api_key while server.client_keys is set: "
                "client keys are never forwarded, so this upstream receives no credential"
            )
    if cfg.state.backend == "redis" and cfg.loop_breaker.enabled and cfg.loop_breaker.secret is None:
        out.append(
            # One gateway's workers share the secret their supervisor draws (gateway/workers/seat.py):
            # only separate gateways (other machines, other containers) end up with different ones.
            "state.backend is redis but loop_breaker.secret is not set: each replica draws its own "
            "(the workers of one replica share their supervisor's), so separate replicas never share "
            "remembered answers; give every replica the same secret "
            "(loop_breaker: {secret: ${LOOP_BREAKER_SECRET}})"
        )
    workers = cfg.server.worker_count
    if workers > 1 and cfg.state.backend == "memory":
        out.append(
            f"server.workers is {workers} with state.backend memory: each worker keeps its own circuits, "
            "loop-breaker memory and rate-limit resets (a retry that lands on another worker is sent "
            "again; an outage is learnt once per worker); state: {backend: redis} shares them"
        )
    return out


def _shadowed(cfg: GatewayConfig) -> list[str]:
    """Upstreams no model is routed to: routing tries pools, then the upstreams outside them in
    order, first match wins, so one whose every pattern an earlier one covers never gets a turn."""
    pooled = {d for p in cfg.pools for d in p.deployments}
    fallbacks = {f for u in cfg.upstreams for f in u.fallbacks} | {f for p in cfg.pools for f in p.fallbacks}
    earlier = [(f"pools[{i}] ({p.name})", p.models) for i, p in enumerate(cfg.pools)]
    out, first = [], True
    for i, u in enumerate(cfg.upstreams):
        if u.name in pooled:  # a deployment is picked by its pool, never by its own models
            continue
        if not first and all(any(_covers(q, p) for _, qs in earlier for q in qs) for p in u.models):
            by = [name for name, qs in earlier if any(_covers(q, p) for q in qs for p in u.models)]
            # A spare kept for fallbacks is a fine setup: say so, rather than call it unused.
            role, fix = ", nor anyone's fallback", "list it first or narrow their models"
            if u.name in fallbacks:
                role, fix = "; reached only as a fallback", "fine for a spare"
            out.append(f"upstreams[{i}] ({u.name}) is never chosen for any model{role}: every model it "
                       f"matches ({', '.join(u.models)}) goes to {', '.join(by)} first (the first match "
                       f"wins); {fix}")  # fmt: skip
        # The first upstream outside the pools also serves requests that name no model.
        first = False
        earlier.append((f"upstreams[{i}] ({u.name})", u.models))
    return out


def _covers(earlier: str, later: str) -> bool:
    """Whether glob ``earlier`` matches every name glob ``later`` does. Matching the later
    pattern's text is exact while ``earlier`` has only ``*`` wildcards; a ``?`` or ``[..]`` in it
    could match one of ``later``'s wildcards as if it were a letter (``?`` against ``*``)."""
    if set(earlier) & set("?[") and set(later) & set("*?["):
        return False
    return fnmatchcase(later, earlier)


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([-?])([^}]*))?\}")


Used = list[tuple[str, str]]  # (variable, value) pairs that went into a text


def expand_env(text: str, env: Mapping[str, str], unset: list[str] | None = None, used: Used | None = None,
               ) -> str:  # fmt: skip
    """Replace ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?why}``. An unset ``${VAR}`` is an
    error, and so is an unset or empty ``${VAR:?why}`` (a key that must not be blank: an empty
    api_key would mean "forward the client's credential").

    With ``unset`` given, each problem is appended to it as a line instead of raising, so that
    every missing variable can be reported at once; with ``used`` given, each variable whose
    value went into the text is appended as (name, value).
    """

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if value:
            if used is not None:
                used.append((name, value))
            return value
        if op == "-":
            return arg
        if op == "?":
            problem = f"environment variable {name} is {'empty' if name in env else 'not set'}"
            problem += f": {arg}" if arg else " (it must not be empty)"
        elif name in env:
            return ""
        else:
            problem = _unset_message(name)
        if unset is None:
            raise ConfigError(problem)
        unset.append(problem)
        return ""

    return _VAR.sub(sub, text)


def _unset_message(name: str) -> str:
    return f"environment variable {name} is not set (use ${{{name}:-default}})"


Loc = tuple[int | str, ...]


def _expand_tree(node: Any, env: Mapping[str, str], unset: list[str], origins: dict[Loc, Used],
                 loc: Loc = ()) -> Any:  # fmt: skip
    """``node`` with its variables expanded; ``origins`` learns which variables filled which
    field, so that an error on that field can name them (the file only says ``${VAR}``)."""
    # Expanding after YAML parsing keeps a secret containing ':' or '#' from changing the YAML.
    if isinstance(node, str):
        used: Used = []
        out = expand_env(node, env, unset, used)
        if used:
            origins[loc] = used
        return out
    if isinstance(node, list):
        return [_expand_tree(x, env, unset, origins, (*loc, i)) for i, x in enumerate(node)]
    if isinstance(node, dict):
        return {k: _expand_tree(v, env, unset, origins, (*loc, k)) for k, v in node.items()}
    return node


# A variable or field so named holds a credential: its value is never printed.
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSW", "CREDENTIAL", "AUTH")


def _from_env(loc: Loc, origins: Mapping[Loc, Used]) -> str:
    """``NAME=value, ...: `` for the variables that filled the field at ``loc`` (or the field
    it is part of: `client_keys` is split into items after expansion); empty when none did."""
    for n in range(len(loc), 0, -1):
        if loc[:n] in origins:
            field = str(loc[n - 1]).upper() if isinstance(loc[n - 1], str) else ""
            shown = []
            for name, value in origins[loc[:n]]:
                if any(w in name.upper() or w in field for w in _SECRET_WORDS):
                    value = "<hidden>"
                else:
                    # A URL's user:password@ is a credential whatever the variable is called.
                    value = re.sub(r"//[^/@\s]*@", "//***@", value)
                shown.append(f"{name}={value}")
            return ", ".join(shown) + ": "
    return ""


def _field_path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "config"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The config section that ``loc`` points into, by walking the field annotations."""
    tp: Any = GatewayConfig
    for part in loc:
        if isinstance(part, int):
            args = [a for a in typing.get_args(tp) if a is not Ellipsis]
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        else:
            return None
        # Unwrap `X | None` to X.
        if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
            models = [a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)]
            tp = models[0] if models else tp
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def _unknown_key(loc: tuple[int | str, ...]) -> str:
    model = _model_at(loc[:-1])
    known = sorted(model.model_fields) if model else []
    near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if near:
        return f"unknown key (did you mean '{near[0]}'?)"
    if known:
        return f"unknown key (known keys: {', '.join(known)})"
    return "unknown key"


def _unknown_keys_first(errors: list[ErrorDetails]) -> list[ErrorDetails]:
    """An unknown key goes before the "is required" of the key it is a typo of (`base_ulr`,
    `base_url`): the typo is the cause, pydantic lists the effect first."""
    out = [e for e in errors if e["type"] != "extra_forbidden"]
    for e in (e for e in errors if e["type"] == "extra_forbidden"):
        loc = tuple(e["loc"])
        missing = {str(o["loc"][-1]): i for i, o in enumerate(out)
                   if o["type"] == "missing" and tuple(o["loc"])[:-1] == loc[:-1]}
        near = difflib.get_close_matches(str(loc[-1]), list(missing), n=1, cutoff=0.6)
        if near:
            out.insert(missing[near[0]], e)
        else:
            # Where pydantic put it: after the errors that precede it in the original order.
            before = errors[: errors.index(e)]
            at = max((out.index(o) + 1 for o in before if o in out), default=0)
            out.insert(at, e)
    return out


def _options(tp: Any) -> list[Any]:
    """The types a union allows besides None; ``[tp]`` for anything else."""
    if isinstance(tp, types.UnionType) or typing.get_origin(tp) is typing.Union:
        return [a for a in typing.get_args(tp) if a is not type(None)]
    return [tp]


def _union_at(loc: Loc) -> tuple[int, Any] | None:
    """Where ``loc`` enters a branch of a union (pydantic reports every branch that failed:
    `server.workers.int`, `server.workers.literal['auto']`): that part's index, and the union."""
    tp: Any = GatewayConfig
    for i, part in enumerate(loc):
        options = _options(tp)
        if len(options) > 1:
            return i, tp
        tp = options[0]
        if typing.get_origin(tp) is Annotated:
            tp = typing.get_args(tp)[0]
        if isinstance(part, int):
            args = [a for a in typing.get_args(tp) if a is not Ellipsis]
            tp = args[0] if args else None
        elif isinstance(tp, type) and issubclass(tp, BaseModel) and part in tp.model_fields:
            tp = tp.model_fields[part].annotation
        else:
            return None
    return None


def _wording(tp: Any) -> str:
    """One option of a union in words: "an integer between 1 and 256", "auto"."""
    bounds: dict[str, object] = {}
    if typing.get_origin(tp) is Annotated:
        tp, *meta = typing.get_args(tp)
        for m in meta:
            for c in [m, *getattr(m, "metadata", ())]:
                bounds.update({k: getattr(c, k) for k in ("ge", "le") if getattr(c, k, None) is not None})
    if typing.get_origin(tp) is Literal:
        return " or ".join(str(a) for a in typing.get_args(tp))
    noun = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp)
    if noun is None:
        noun = "a section" if isinstance(tp, type) and issubclass(tp, BaseModel) else "a list"
    if "ge" in bounds and "le" in bounds:
        return f"{noun} between {bounds['ge']} and {bounds['le']}"
    if bounds:
        return f"{noun} of at {'least' if 'ge' in bounds else 'most'} {bounds.get('ge', bounds.get('le'))}"
    return noun


def _describe(err: ValidationError, origins: Mapping[Loc, Used] | None = None) -> list[str]:
    errors = _unknown_keys_first(list(err.errors()))
    locs = [tuple(e["loc"]) for e in errors]
    out: list[str] = []
    unions: set[Loc] = set()
    for e, loc in zip(errors, locs, strict=True):
        if e["type"] == "too_short" and any(other[: len(loc)] == loc and other != loc for other in locs):
            # A list whose only item is invalid is reported as too short as well: noise.
            continue
        msg = e["msg"]
        union = _union_at(loc)
        if union is not None:
            # One line for the field, not one per type it could have been.
            loc = loc[: union[0]]
            if loc in unions:
                continue
            unions.add(loc)
            msg = "must be " + ", or ".join(_wording(o) for o in _options(union[1]))
        elif e["type"] == "extra_forbidden":
            msg = _unknown_key(loc)
        elif e["type"] == "missing":
            msg = "is required"
        elif e["type"] == "too_short":
            msg = f"must have at least {e.get('ctx', {}).get('min_length', 1)} item(s)"
        msg = msg.removeprefix("Value error, ")
        # A problem across sections (GatewayConfig's own validators) names its section itself.
        where = f"{_field_path(loc)}: {_from_env(loc, origins or {})}" if loc else ""
        out.extend(f"{where}{line}" for line in msg.split("\n"))
    return out


def parse_config(text: str, env: Mapping[str, str] | None = None, source: str = "config") -> GatewayConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    unset: list[str] = []
    origins: dict[Loc, Used] = {}
    data = _expand_tree(data, os.environ if env is None else env, unset, origins)
    problems = list(dict.fromkeys(unset))
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as e:
        problems += _describe(e, origins)
        # GatewayConfig's cross-section checks do not run once a field fails: run them on what
        # was written, so that an unknown fallback is not learnt one restart after a bad port.
        sections = [data.get(k) for k in ("upstreams", "pools")]
        crossed = reference_problems(*(s if isinstance(s, list) else [] for s in sections))
        problems += [p for p in crossed if p not in problems]
    if problems:
        raise ConfigError(*problems) from None
    return cfg


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> GatewayConfig:
    return parse_config(read_config_text(path), env, source=str(Path(path)))


def read_config_text(path: str | Path) -> str:
    """The file's text; a reload reads it once, both to parse and to know what it has seen."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path is a directory, not a file: {p}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {p}: {e}") from None
