"""Configuration: one YAML file, frozen pydantic models, secrets from the environment.

Every key has a default, so a file that names one upstream is complete. Unknown keys
are errors: a typo must not be silently ignored; nor may a key given twice, of which YAML
keeps only the last.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import hashlib
import ipaddress
import os
import re
import types
import typing
import zoneinfo
from collections.abc import Iterable, Mapping, Sequence
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

from gateway import tls
from gateway.policy import globs


class ConfigError(Exception):
    """Config problems, each worded as one line that names the field.

    ``problems`` holds every problem found, so an operator fixes them in one round
    instead of one per restart; ``str()`` is those lines joined by newlines.
    """

    def __init__(self, *problems: str) -> None:
        super().__init__("\n".join(problems))
        self.problems: tuple[str, ...] = problems


def header_value_problem(value: str) -> str | None:
    """What keeps ``value`` from being sent as a header value, worded without quoting it (it
    may be a secret); None: nothing. A Secret created with ``kubectl create secret
    --from-file`` keeps the file's final newline, hence the guess."""
    if value.rstrip("\r\n") != value and not any(c in value.rstrip("\r\n") for c in "\r\n\x00"):
        return "ends with a line break (a Kubernetes Secret made with --from-file?); remove it"
    if any(c in value for c in "\r\n\x00"):
        return "has a line break or NUL in it"
    return None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        # Pydantic's lax mode reads true as 1: `port: true` listened on port 1. Strict mode
        # would refuse the string a ${PORT} expands to, so only booleans are refused here.
        if isinstance(v, bool) and info.field_name is not None:
            kinds = _kinds(cls.model_fields[info.field_name].annotation)
            if bool not in kinds and kinds & {int, float}:
                wanted = "a number" if float in kinds else "an integer"
                raise ValueError(f"{wanted} is wanted, not {str(v).lower()}")
        return v


def _kinds(annotation: Any) -> set[Any]:
    """The classes an annotation admits, through unions, Optional and Annotated (not Literal's values)."""
    if isinstance(annotation, type):
        return {annotation}
    if typing.get_origin(annotation) is Literal:
        return set()
    return set().union(*(_kinds(a) for a in typing.get_args(annotation)))


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
    host: str = Field(
        default="127.0.0.1",
        description="Address to listen on. On an address other than loopback the gateway refuses to start "
        "when an upstream injects an `api_key` and no client key is configured (see "
        "`allow_unauthenticated`).",
    )
    port: int = Field(default=8080, ge=0, le=65535, description="TCP port to listen on.")
    max_body_bytes: int = Field(
        default=32 * 1024 * 1024, gt=0,
        description="Largest request body accepted, in bytes, before or after decoding its Content-Encoding; "
        "a larger one is refused with 413 `request_too_large` before it is read.",
    )  # fmt: skip
    drain_s: float = Field(
        default=30.0, ge=0,
        description="Seconds that requests in flight get to finish after SIGTERM; then a stream still open "
        "ends with a `gateway_shutdown` error event, and a request whose answer has not begun is answered "
        "503 `gateway_shutdown` (retryable).",
    )  # fmt: skip
    # A client that connects and sends nothing, or its head a byte at a time, holds a socket
    # and a file descriptor: unbounded (aiohttp's own limit is an hour), a few hundred of them
    # exhausted the process's descriptors and every other client failed. A real client's head
    # arrives in the packet after the handshake; 15 s is as lenient as a slow mobile link needs.
    header_timeout_s: float = Field(
        default=15.0, gt=0,
        description="Seconds a new client connection may take to send a complete request head; past "
        "them it is closed without an answer.",
    )  # fmt: skip
    # Above the idle timeouts of the load balancers in front (AWS's 60 s, nginx's upstream
    # keepalive_timeout 60 s), so that the gateway is never the side that closes a connection
    # a balancer is about to reuse (the balancer would answer that request 502).
    keepalive_s: float = Field(
        default=75.0, gt=0,
        description="Seconds a client connection may stay open between the end of one answer and the "
        "complete head of its next request. Behind a load balancer that keeps idle connections "
        "longer (Google Cloud's: 600 s), set it above the balancer's.",
    )  # fmt: skip
    responses_websocket: bool = Field(
        default=True,
        description="Serve the Responses API's WebSocket mode (`GET /v1/responses` upgraded, as Codex on its "
        "built-in provider and the openai and Agents SDKs' websocket transports open it): each "
        "`response.create` is one request through the pipeline of `POST /v1/responses`. False: the "
        "upgrade is answered 426 `websocket_not_supported`, on which Codex goes on over HTTPS. Turned off "
        "by a reload, each open connection is closed 1001 Going Away, at once when idle, after its turns "
        "under way when busy; each turn it holds and has not started gets the error event "
        "`websocket_not_supported` with its `stream_id`, at once.",
    )  # fmt: skip
    # OpenAI's own limit (its WebSocket mode guide: "Connections last up to 60 minutes"), which
    # the clients of the mode reconnect on; a connection kept open by its pings alone does not
    # hold its socket and its memory of the last response for good.
    responses_websocket_max_age_s: float = Field(
        default=3600.0, gt=0,
        description="Seconds a WebSocket connection of the Responses API's mode is served. Past them, once "
        "its turn (if any) is answered, it gets the error event `websocket_connection_limit_reached` (status "
        "400, as OpenAI's after its 60 minutes) and is closed 1001 Going Away; Codex and the Agents SDK open "
        "a new one. A turn under way is never cut; each turn the connection holds and has not started gets "
        "that error event with its `stream_id`, at once.",
    )  # fmt: skip
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        default="info", description="Lowest level of log line written."
    )
    # One string may hold several comma-separated keys, so a single environment variable
    # (`client_keys: ${GATEWAY_CLIENT_KEYS:-}`) can carry them all.
    client_keys: tuple[str, ...] = Field(
        default=(), repr=False,
        description="Keys clients must present (`Authorization: Bearer`, `x-api-key`, `api-key` or "
        "`x-goog-api-key`, or a Gemini client's `?key=`) to use the gateway; one string may hold several, "
        "comma-separated. Empty: no client authentication "
        "(unless `keys` names some).",
    )  # fmt: skip
    # Serving the operator's provider key to anyone who reaches a non-loopback port must
    # be a deliberate choice, never the default (see gateway.auth.startup_check).
    allow_unauthenticated: bool = Field(
        default=False,
        description="Start on an address other than loopback although an upstream injects an `api_key` and "
        "no client key is configured (a private network, or an authenticating proxy in front); a warning "
        "is logged instead of a refusal.",
    )
    # SO_REUSEPORT, one listening socket each (gateway/workers/). The range sits in the type, so a
    # bad value is worded from it in one line (see _union_wording).
    workers: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        default=1,
        description="Processes serving the port, 1 to 256; `auto`: one per core this process may run on.",
    )
    # "h1" is a third of aiohttp's CPU per request (bench/RESULTS.md); both pass one conformance
    # suite (tests/conformance/).
    upstream_client: Literal["h1", "aiohttp"] = Field(
        default="h1",
        description="HTTP client for upstream requests: `h1`, the gateway's own HTTP/1.1 client, or "
        "`aiohttp`, aiohttp's client.",
    )
    tls_cert_file: str | None = Field(
        default=None,
        description="PEM file of the certificate chain to serve HTTPS with (its key in `tls_key_file`, or in "
        "this file too); unset: plain HTTP, for TLS terminated in front (a load balancer, an ingress). A "
        "renewed certificate written to the same path is served without a restart: the files are re-read "
        "on SIGHUP and when they change (checked every 30 s). Another path takes a restart.",
    )  # fmt: skip
    tls_key_file: str | None = Field(
        default=None,
        description="PEM file of `tls_cert_file`'s private key (unset: in `tls_cert_file`).",
    )
    # The variables every HTTP client reads, by default: a deployment that reaches providers
    # through an egress proxy has them set already (gateway/upstream/proxy.py).
    upstream_proxy: str = Field(
        default="env", repr=False,
        description="Forward proxy for upstream requests: `env` (`https_proxy`, `http_proxy`, `all_proxy` "
        "and `no_proxy`, in lower or upper case, as curl and the provider SDKs read them), `direct` (none, "
        "whatever the environment says) or an `http://[user:password@]host:port` URL. An https upstream "
        "is reached through a CONNECT tunnel, TLS end to end; loopback upstreams and the hosts "
        "`no_proxy` names always go direct.",
    )  # fmt: skip
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="Event loop the server runs on: `uvloop` (installed with the gateway everywhere but "
        "Windows) or `asyncio`'s own.",
    )
    busy_poll_us: int = Field(
        default=0,
        ge=0,
        le=10_000,
        description="After activity, keep the event loop polling for up to this many microseconds "
        "instead of sleeping (the window adapts to the gaps between requests, down to nothing when "
        "they are far apart). Lowers the added latency at low concurrency on virtual machines, at "
        "the price of CPU time spent polling. 0: off.",
    )
    forward_client_headers: tuple[str, ...] = Field(
        default=(),
        description="Client headers that are withheld from providers unless named here (case-insensitive): "
        "`cookie`, `forwarded`, `x-forwarded-for`, `x-forwarded-host`, `x-forwarded-proto`, "
        "`x-forwarded-port`, `x-real-ip`. No other header can be named.",
    )
    # Off by default: an editor's half-saved file must not be tried unless the operator asks for it.
    watch_config: bool = Field(
        default=False,
        description="Reload when the config file's content changes (checked every second), as on SIGHUP.",
    )

    @property
    def worker_count(self) -> int:
        if self.workers == "auto":
            return max(1, len(os.sched_getaffinity(0)))
        return self.workers

    @model_validator(mode="after")
    def _servable_tls(self) -> Self:
        if self.tls_cert_file is None:
            if self.tls_key_file is not None:
                raise ValueError("tls_key_file is set without tls_cert_file")
            return self
        why = tls.problem(self.tls_cert_file, self.tls_key_file)
        if why is not None:
            raise ValueError(why)  # it names the setting, tls_cert_file or tls_key_file
        return self

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
# Azure OpenAI, a host per resource (https://<resource>.openai.azure.com): OpenAI's chat
# completions and Responses, no Messages. Its v1 API (base URL .../openai/v1) serves both, the
# deployment named as the model ("client.responses.create(model=...)", chat completions alike:
# learn.microsoft.com/azure/ai-foundry/openai/api-version-lifecycle); under a classic deployment
# path (.../openai/deployments/<name>) only chat completions is the deployment's: Responses is
# the resource's /openai/responses, not the deployment's path.
AZURE_OPENAI_SUFFIX = ".openai.azure.com"
# And it takes a key in `api-key`: "all API requests must include a valid API key in the api-key
# HTTP header" (learn.microsoft.com/azure/api-management/api-management-authenticate-authorize-
# azure-openai, "Authenticate with API key"); `Authorization: Bearer` is its Microsoft Entra ID
# token's place (the same page, and the REST reference's "Authentication"). Whether its v1 API
# also reads a key as a bearer token no Microsoft page found here says; `api-key` is read by both
# paths, so it is the default on an Azure OpenAI host.


def apis_of_host(base_url: Any) -> tuple[ApiName, ...] | None:
    """What the provider at ``base_url``'s host is known to serve (APIS_BY_HOST, Azure OpenAI's
    hosts); None: nothing known."""
    host = _hostname(base_url)
    known = APIS_BY_HOST.get(host)
    if known is None and _azure_openai(host):
        deployment = "/openai/deployments/" in urlsplit(base_url).path.lower()
        known = ("chat",) if deployment else ("chat", "responses")
    return known


# Anthropic's API takes a key in x-api-key: "All requests to the Anthropic API must include an
# x-api-key header with your API key" (https://docs.anthropic.com/en/api/overview). A key
# (sk-ant-api03-…) sent as a bearer token is refused, 401 {"type":"error","error":{"type":
# "authentication_error","message":"Invalid bearer token"}} (alibaba/open-code-review#71, whose
# fix, #77: "standard sk-ant-* API keys use x-api-key, while OAuth/federated tokens use
# Authorization: Bearer"). Its OAuth access tokens (sk-ant-oat01-…, what Claude Code's
# subscription login holds) are bearer tokens, and refused in x-api-key ("invalid x-api-key":
# BerriAI/litellm#21039). The host decides, not the API: an Anthropic-compatible server takes
# what it takes (vLLM's Messages endpoint reads Authorization only, vllm-project/vllm#51572).
ANTHROPIC_HOST = "api.anthropic.com"
ANTHROPIC_KEY_PREFIX = "sk-ant-api"
ANTHROPIC_OAUTH_PREFIX = "sk-ant-oat"


class DeploymentLimits(_Model):
    """A deployment's own rate limits, as its provider set them for its key."""

    requests_per_minute: int | None = Field(
        default=None, gt=0,
        description="Requests a minute this deployment's key may make, per model it is sent (after its "
        "`model_map`: names mapped to one model share its count)."
    )
    tokens_per_minute: int | None = Field(
        default=None, gt=0, description="Tokens a minute this deployment's key may use, per model it is sent "
        "(after its `model_map`)."
    )


# RFC 9110 §5.1: a field name is a token.
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# What upstreams[].headers cannot set: the framing and hop-by-hop headers the HTTP client and
# the relay write (RFC 9110 §7.6.1), and the request id the gateway stamps on every call.
CONFIG_HEADERS_REFUSED = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
    "proxy-authorization", "proxy-authenticate", "proxy-connection", "content-encoding", "accept-encoding",
    "x-request-id",
})  # fmt: skip


def _meant_globs(patterns: Iterable[str]) -> None:
    """Refuses a model or tool glob that fnmatch would read other than as written: an unclosed
    ``[`` is a literal there, so ``gpt-[4`` would silently match nothing meant (policy/globs)."""
    problems = [p for g in patterns if (p := globs.problem(g)) is not None]
    if problems:
        raise ValueError("; ".join(problems))


class UpstreamConfig(_Model):
    name: str = Field(
        min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
        description="The upstream's name (letters, digits, `_`, `.`, `-`): used in logs, metric labels, "
        "`fallbacks` and pool `deployments`. Required; unique.",
    )  # fmt: skip
    base_url: str = Field(
        description="Absolute `http://` or `https://` URL that `/v1/<rest>` maps onto as `<base_url>/<rest>` "
        "(so usually ends in `/v1`, or `/v1beta` for the Gemini API); no credentials, query or fragment. "
        "Required."
    )
    api_key: str | None = Field(
        default=None, repr=False,
        description="The provider key sent upstream. Unset or empty: the client's own credential is "
        "forwarded, unless client keys are configured (then none is sent).",
    )  # fmt: skip
    models: tuple[str, ...] = Field(
        default=("*",),
        description="Glob patterns of the model names this upstream serves. Outside pools, the first "
        "upstream whose pattern matches the requested model serves it.",
    )
    context_window: int | None = Field(
        default=None, gt=0,
        description="The model's context window, in tokens: used to recognise an overflow from the request's "
        "size, to size compression and tool-output shares, to pick a larger fallback, to lower an output "
        "budget that cannot fit beside the prompt before it is sent, and, over 200,000 on a model behind the "
        "Messages API whose name does not say its window, to keep up to 600 images a request instead of 100.",
    )  # fmt: skip
    max_output_tokens: int | None = Field(
        default=None, gt=0,
        description="The most output tokens an answer from this upstream may have: a request asking for "
        "more, or naming no limit, is sent asking for this many. Unset: the client's own budget, lowered "
        "only when the provider refuses it and states the model's limit (learned per model for the process).",
    )  # fmt: skip
    max_connections: int = Field(
        default=256, gt=0,
        description="Most connections open to this upstream at once (kept alive and reused)."
    )
    stream_usage: bool = Field(
        default=True,
        description="Ask chat-completions streams for their usage chunk (`stream_options.include_usage`) "
        "to count tokens. A server that refuses the option as an unknown input gets it left out after its "
        "first refusal (`x-llm-params-dropped: stream_options`); turning this off spares that one call.",
    )
    key_header: Literal["authorization", "x-api-key", "api-key", "x-goog-api-key"] = Field(
        default="authorization",
        description="The header that carries `api_key`: `authorization` (`Bearer <key>`: OpenAI and most "
        "compatibles), `x-api-key` (Anthropic), `api-key` (Azure OpenAI) or `x-goog-api-key` (the Gemini "
        "API). Not given: `x-goog-api-key` for an upstream that speaks only Gemini (Google also takes "
        "`?key=`, which would land in access logs); on `api.anthropic.com`, `x-api-key` (Anthropic refuses "
        "a key sent as `Bearer`), but `authorization` for an OAuth token (`sk-ant-oat…`, as Claude Code's "
        "subscription login holds); on `*.openai.azure.com`, `api-key` (Azure OpenAI's place for a key; "
        "`Authorization` is its Entra ID token's); else `authorization`.",
    )
    # repr=False: a value may be a secret (a Cloudflare AI Gateway's cf-aig-authorization).
    headers: dict[str, str] = Field(
        default_factory=dict, repr=False,
        description="Headers added to every request to this upstream, replacing a client's header of the "
        "same name (case-insensitive), but for `anthropic-beta`, whose betas join the client's (to turn "
        "one on for every client): OpenRouter's "
        "`HTTP-Referer` and `X-Title`, `OpenAI-Project`, a Cloudflare AI Gateway's `cf-aig-authorization` "
        "(`${VAR}` for a secret). One whose value is empty (an unset `${VAR:-}`) is not sent. Not the "
        "credential (`api_key`), nor the framing, hop-by-hop and request-id headers the gateway writes. "
        "The value of one whose name holds `auth`, `key`, `token`, `secret`, `passw`, `credential` or "
        "`cookie` is redacted from the upstream's errors as `api_key` is (docs/security.md).",
    )  # fmt: skip
    # Azure OpenAI's classic path takes its API version in the query, "api-version=2024-10-21" on
    # every call (learn.microsoft.com/en-us/azure/ai-foundry/openai/reference); stock SDKs and
    # tools aimed at a base URL send none, and Azure answers 404 "Resource not found" (audit).
    query: dict[str, str] = Field(
        default_factory=dict,
        description="Query parameters added to every request to this upstream, replacing a client's of the "
        "same name: Azure OpenAI's deployment path (`base_url: https://<resource>.openai.azure.com/openai/"
        "deployments/<deployment>`) needs `api-version` (`query: {api-version: '2024-10-21'}`); its v1 API "
        "(`https://<resource>.openai.azure.com/openai/v1`) needs none. Not for a credential: a name holding "
        "`key`, `token`, `secret`, `auth`, `passw` or `credential` is refused (set `api_key`). One whose "
        "value is empty is not sent.",
    )
    fallbacks: tuple[str, ...] = Field(
        default=(),
        description="Upstreams or pools (any wire API) that serve this one's requests when it cannot, tried "
        "in order within the same deadline and retry counts (see `fallback`); not followed recursively.",
    )
    # Never assumed: `none` ends a broken stream with one typed error, as without continuation.
    continuation: Literal[
        "none", "prefill", "continue_final_message", "prefix", "replay", "replay_any"
    ] = Field(
        default="none",
        description="How a stream broken mid-answer is continued on this upstream: `prefill` (a trailing "
        "assistant turn; Anthropic models that accept it), `continue_final_message` (vLLM's trailing "
        "assistant message; on `/v1/responses` one marked `status: in_progress`), `prefix` "
        "(DeepSeek, Mistral prefix completion), `replay` (the request sent again and relayed past the text "
        "already shown; deterministic requests only: temperature 0 or a seed), `replay_any` (replay for "
        "every request: this upstream's answers repeat), or `none` (the stream ends with one typed error).",
    )
    apis: tuple[ApiName, ...] = Field(
        default=ALL_APIS,
        description="The wire APIs this upstream speaks; a request in another API is translated to the first "
        "of these that has a translator. Unset or blank: what its host is known to serve (`api.openai.com`: "
        "chat and responses; `api.anthropic.com`: messages; `generativelanguage.googleapis.com`: gemini; "
        "`*.openai.azure.com`: chat and responses, chat alone under a `/openai/deployments/` path), "
        "else chat, messages and responses (never gemini). One string may list several, comma-separated.",
    )
    model_map: tuple[tuple[str, str], ...] = Field(
        default=(),
        description="The model the upstream is asked for, by the requested model: a mapping of glob to name, "
        "first match wins; a model that matches none is sent as requested. Also on the paths passed through "
        "that name the generating model (`/v1/completions`, `/v1/messages/count_tokens`, "
        "`/v1/responses/input_tokens`, `/v1/responses/compact`); not on embeddings, moderations, audio or "
        "images. Answers still name the requested model where the API echoes one.",
    )
    first_token_s: float | None = Field(
        default=None, gt=0,
        description="This upstream's own `timeouts.first_token_s`, in seconds (a reasoning model thinks "
        "longer before its first token than a small fast one); unset: the global value.",
    )  # fmt: skip
    weight: float = Field(
        default=1.0, gt=0, le=1_000_000,
        description="As a deployment of a pool: its share of new conversations under the `weighted` "
        "strategy, relative to its siblings' weights.",
    )  # fmt: skip
    limits: DeploymentLimits | None = Field(
        default=None,
        description="As a deployment of a pool: the limits of its key, used when its answers carry no "
        "rate-limit headers; shared across replicas through `state` (with Redis, every call is counted "
        "against them before it is made, atomically, so they hold across replicas).",
    )
    # Set by GatewayConfig: with client keys in use, what a client sends in its credential
    # headers is a gateway key, never a provider key, so it must not travel upstream.
    _client_keys_in_use: bool = PrivateAttr(default=False)
    # Set by GatewayConfig from server.forward_client_headers.
    _forwarded_client_headers: tuple[str, ...] = PrivateAttr(default=())
    # Where `apis` came from, for the start-up line: "config", "host <name>" or "default".
    _apis_from: str = PrivateAttr(default="config")
    # Whether the config named `key_header` (else a default chose it): a named one is where
    # the client's forwarded credential goes too, whatever its kind (routing/headers.py).
    _key_header_given: bool = PrivateAttr(default=True)

    @model_validator(mode="wrap")
    @classmethod
    def _apis_by_host(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        if not isinstance(data, dict):
            return handler(data)
        given = data.get("key_header") is not None
        if data.get("apis") not in (None, ""):
            up = handler(_default_key_header(data))
        else:
            host = _hostname(data.get("base_url"))
            known = apis_of_host(data.get("base_url"))
            up = handler(_default_key_header({**data, "apis": known or ALL_APIS}))
            up._apis_from = f"host {host}" if known else "default"
        up._key_header_given = given
        return up

    @property
    def key_header_given(self) -> bool:
        return self._key_header_given

    @property
    def apis_from(self) -> str:
        return self._apis_from

    @property
    def host(self) -> str:
        """The host name of ``base_url``, lower-case."""
        return _hostname(self.base_url)

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
            raise ValueError("must not have a query string or fragment (parameters every request needs, "
                             "such as Azure's api-version, go in `query`)")
        return v.rstrip("/")

    @property
    def forwards_client_credentials(self) -> bool:
        """Whether the client's Authorization / x-api-key / api-key go upstream as they came."""
        return self.api_key is None and not self._client_keys_in_use

    @property
    def withheld_client_headers(self) -> frozenset[str]:
        """The client's headers (lower-case) this upstream does not get (WITHHELD_CLIENT_HEADERS)."""
        return WITHHELD_CLIENT_HEADERS.difference(self._forwarded_client_headers)

    @field_validator("headers", "query", mode="before")
    @classmethod
    def _header_values_as_written(cls, v: Any) -> Any:
        # YAML reads `anthropic-version: 2023-06-01` as a date and `X-Priority: 1` as a number:
        # written back as they were written. A boolean (yes, on, true) was not meant as a word.
        if not isinstance(v, dict):
            return v
        out = {}
        for name, value in v.items():
            if isinstance(value, bool):
                raise ValueError(f"the value of {name} reads as a boolean: quote it ('{str(value).lower()}')")
            if isinstance(value, int | float):
                value = str(value)
            elif isinstance(value, datetime.date):
                value = value.isoformat()
            out[name] = value
        return out

    @field_validator("headers")
    @classmethod
    def _sendable_headers(cls, v: dict[str, str]) -> dict[str, str]:
        problems = []
        for name, value in v.items():
            lower = name.lower()
            if not _HEADER_NAME.fullmatch(name):
                problems.append(f"{name[:64]!r} is not a header name (letters, digits and !#$%&'*+.^_`|~-)")
            elif lower in CONFIG_HEADERS_REFUSED:
                problems.append(f"{name} is the gateway's to write, not a config header")
            elif lower in ("authorization", "x-api-key", "api-key", "x-goog-api-key"):
                problems.append(f"{name} carries the credential: set api_key (and key_header) instead")
            elif problem := header_value_problem(value):  # named, never quoted: it may be a secret
                problems.append(f"the value of {name} {problem}")
        lowered = [n.lower() for n in v]
        problems += [f"{n} is given twice (header names are case-insensitive)"
                     for n in sorted({n for n in lowered if lowered.count(n) > 1})]  # fmt: skip
        if problems:
            raise ValueError("; ".join(problems))
        return {name: value.strip() for name, value in v.items() if value.strip()}

    @field_validator("query")
    @classmethod
    def _plain_query(cls, v: dict[str, str]) -> dict[str, str]:
        problems = []
        for name, value in v.items():
            if not name.strip() or any(c in name + value for c in "\r\n\x00"):
                problems.append(f"{name[:64]!r}: a parameter needs a name, and neither may hold a line "
                                "break or NUL")  # fmt: skip
            elif _secret(name):
                # A URL lands in access logs and traces, where a header does not.
                problems.append(f"{name[:64]} reads as a credential: set api_key (and key_header) instead")
        if problems:
            raise ValueError("; ".join(problems))
        return {name: value.strip() for name, value in v.items() if value.strip()}

    @field_validator("api_key")
    @classmethod
    def _blank_key_is_none(cls, v: str | None) -> str | None:
        # Sent as a header value: a line break in it made every request fail 400
        # invalid_header, blamed on the client. Refused, not stripped: the file says what it is.
        if v and (problem := header_value_problem(v)):
            raise ValueError(problem)
        # `api_key: ${OPENAI_API_KEY:-}` with the variable unset means "forward the client's".
        return v or None

    @field_validator("context_window", "max_output_tokens", mode="before")
    @classmethod
    def _blank_limit_is_none(cls, v: Any) -> Any:
        # `context_window: ${UPSTREAM_CONTEXT_WINDOW:-}` with the variable unset means "none
        # assumed": a number here lowers output budgets, so a default one would cut them on
        # every model with a larger window.
        return None if isinstance(v, str) and not v.strip() else v

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
        _meant_globs(pattern for pattern, _ in v)
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
        _meant_globs(v)
        return v


def _default_key_header(data: dict[str, Any]) -> dict[str, Any]:
    """Unless told otherwise, an upstream that speaks only Gemini takes its key in
    x-goog-api-key, Anthropic's API in x-api-key, an OAuth token as a bearer token
    (ANTHROPIC_HOST), and Azure OpenAI in api-key (AZURE_OPENAI_SUFFIX); ``api_key`` is the
    value itself here, its variables already read."""
    if data.get("key_header") is not None:
        return data
    if data.get("apis") in ("gemini", ["gemini"], ("gemini",)):
        return {**data, "key_header": "x-goog-api-key"}
    host = _hostname(data.get("base_url"))
    if _azure_openai(host):
        return {**data, "key_header": "api-key"}
    if host == ANTHROPIC_HOST:
        oauth = str(data.get("api_key") or "").startswith(ANTHROPIC_OAUTH_PREFIX)
        return {**data, "key_header": "authorization" if oauth else "x-api-key"}
    return data


def on_azure_openai(base_url: str) -> bool:
    """Whether ``base_url`` is an Azure OpenAI resource's (AZURE_OPENAI_SUFFIX)."""
    return _azure_openai(_hostname(base_url))


def _azure_openai(host: str) -> bool:
    """Whether ``host`` (lower-case) is an Azure OpenAI resource's (AZURE_OPENAI_SUFFIX)."""
    return host.endswith(AZURE_OPENAI_SUFFIX)


def _hostname(url: Any) -> str:
    try:
        return (urlsplit(url).hostname or "") if isinstance(url, str) else ""
    except ValueError:
        return ""  # base_url's own validator says what is wrong with it


class RetryClassConfig(_Model):
    max_retries: int = Field(ge=0, le=100, description="Retries after the first attempt, 0 to 100.")
    base_delay_s: float = Field(
        gt=0,
        description="Backoff base, in seconds: without a wait named by the upstream, the wait before retry n "
        "is between half and all of `min(max_delay_s, base_delay_s × 2^(n-1))`.",
    )
    max_delay_s: float = Field(gt=0, description="Cap of the backoff wait between two attempts, in seconds.")


class RetryBudgetConfig(_Model):
    ttl_s: float = Field(
        default=10.0, gt=0,
        description="Length of the window retries are counted in, in seconds.",
    )
    min_retries_per_s: float = Field(
        default=10.0, ge=0,
        description="Retries a second always allowed, however few requests there were: "
        "`min_retries_per_s × ttl_s` retries per window on top of the percentage.",
    )  # fmt: skip
    percent_can_retry: float = Field(
        default=20.0, ge=0, le=100,
        description="Across requests, retries may be at most this percentage of the requests of the last "
        "`ttl_s` seconds (plus the minimum above); shared by replicas through `state`.",
    )  # fmt: skip


_RETRY_CLASS_DEFAULTS: dict[str, dict[str, float]] = {
    "rate_limit": {"max_retries": 3, "base_delay_s": 1.0, "max_delay_s": 20.0},
    "provider_unavailable": {"max_retries": 5, "base_delay_s": 0.5, "max_delay_s": 10.0},
}


class RetryConfig(_Model):
    rate_limit: RetryClassConfig = Field(
        default=RetryClassConfig.model_validate(_RETRY_CLASS_DEFAULTS["rate_limit"]),
        description="Retries of `rate_limit` errors; a key left out keeps this class's default.",
    )
    provider_unavailable: RetryClassConfig = Field(
        default=RetryClassConfig.model_validate(_RETRY_CLASS_DEFAULTS["provider_unavailable"]),
        description="Retries of `provider_unavailable` errors (5xx, 529, connection failures, timeouts); a "
        "key left out keeps this class's default.",
    )
    max_retry_after_s: float = Field(
        default=30.0, ge=0,
        description="A wait the upstream asks for (`retry-after`, a reset time) longer than this many "
        "seconds is not waited out: the error is answered at once.",
    )  # fmt: skip
    deadline_s: float = Field(
        default=600.0, gt=0,
        description="Seconds that all attempts of one request, on every upstream of its chain, may take "
        "together.",
    )  # fmt: skip
    budget: RetryBudgetConfig = Field(
        default=RetryBudgetConfig(),
        description="The cross-request retry budget: a bound on retries as a share "
        "of recent requests, so an outage does not multiply the load.",
    )

    @field_validator("rate_limit", "provider_unavailable", mode="before")
    @classmethod
    def _fill_defaults(cls, v: Any, info: ValidationInfo) -> Any:
        # The two classes have different defaults, so RetryClassConfig cannot carry them:
        # a partial section (`rate_limit: {max_retries: 1}`) takes the rest from its class.
        if isinstance(v, Mapping) and info.field_name is not None:
            return {**_RETRY_CLASS_DEFAULTS[info.field_name], **v}
        return v


class CircuitBreakerConfig(_Model):
    failure_threshold: int = Field(
        default=5, gt=0,
        description="Consecutive requests of one model that failed as `provider_unavailable` (after their "
        "retries) that open that model's circuit.",
    )  # fmt: skip
    # See policy/breaker.open_period_s.
    open_s: float = Field(
        default=30.0, gt=0,
        description="The longest a circuit stays open before a probe, in seconds: without a fallback, each "
        "failed probe doubles the open period up to this.",
    )  # fmt: skip
    probe_interval_s: float = Field(
        default=5.0, gt=0,
        description="The first open period, in seconds, and every one while the upstream has a fallback to "
        "carry its traffic: a recovered upstream is back within about this long under steady traffic.",
    )  # fmt: skip
    models_to_open: int = Field(
        default=2, ge=1,
        description="The whole upstream's circuit opens once a failure streak spans this many distinct "
        "models (a provider outage rather than one model's).",
    )  # fmt: skip


class FallbackConfig(_Model):
    """When a request moves on to the next upstream of its chain."""

    # Auth and request errors never fail over: another upstream would refuse the same request
    # for the same reason.
    when: tuple[Literal["provider_unavailable", "rate_limit", "budget"], ...] = Field(
        default=("provider_unavailable", "rate_limit", "budget"),
        description="The error classes that move a request on to the next upstream of its chain.",
    )
    retries_per_upstream: int = Field(
        default=1, ge=0,
        description="Retries on one upstream before moving on, while a fallback is left to try."
    )
    context_overflow: bool = Field(
        default=False,
        description="On a context overflow, try a fallback with a larger `context_window` before "
        "compressing.",
    )


PoolStrategy = Literal["weighted", "least_busy", "latency", "headroom"]


class CooldownsConfig(_Model):
    """How long a deployment of a pool sits out after an answer that says its key cannot serve."""

    rate_limit_s: float = Field(
        default=5.0, gt=0,
        description="Seconds a deployment sits out after a rate limit whose answer names no wait (one that "
        "does, in retry-after, its body or its rate-limit headers: that wait).",
    )  # fmt: skip
    # Top-ups are rarely instant.
    budget_s: float = Field(
        default=300.0, gt=0,
        description="Seconds a deployment sits out when its key is out of credit and the answer names no "
        "reset.",
    )  # fmt: skip
    # Revoked keys stay revoked, so one request an hour asks again rather than one a turn.
    auth_s: float = Field(
        default=3600.0, gt=0,
        description="Seconds a deployment sits out after the provider refused its key (401 or 403).",
    )  # fmt: skip
    # Azure: "If you created the deployment within the last 5 minutes, please wait a moment".
    model_missing_s: float = Field(
        default=300.0, gt=0,
        description="Seconds a deployment sits out, for the model asked, after a 404 saying it has no such "
        "model (Azure's DeploymentNotFound, OpenAI's model_not_found, a model not pulled) or OpenAI's 403 "
        "model_not_found for a project not given the model.",
    )  # fmt: skip


class AffinityConfig(_Model):
    """Prompt-cache affinity: a conversation stays on its home, the deployment that holds its cache."""

    enabled: bool = Field(
        default=True, description="Keep each conversation on the deployment that holds its prompt cache."
    )
    max_entries: int = Field(
        default=10_000, gt=0, le=10_000_000,
        description="Conversations remembered per pool and process (with Redis: this process's copy of "
        "their shared homes); the least recently used are forgotten first.",
    )  # fmt: skip
    # Longer than the providers' longest prompt-cache lifetime (1 h).
    idle_s: float = Field(
        default=3600.0, gt=0, description="Seconds a conversation's home is remembered after its last turn."
    )


class PoolConfig(_Model):
    """Several deployments (upstreams) serving the same models; a strategy picks among them."""

    name: str = Field(
        min_length=1, pattern=r"^[A-Za-z0-9_.-]+$",
        description="The pool's name (letters, digits, `_`, `.`, `-`), not an upstream's; a metric label and "
        "a possible fallback target. Required; unique.",
    )  # fmt: skip
    models: tuple[str, ...] = Field(
        default=("*",),
        description="Glob patterns of the models the pool serves; a request for one goes to the pool before "
        "any upstream outside it. No two pools may claim the same model.",
    )
    deployments: tuple[str, ...] = Field(
        min_length=1,
        description="Names of the upstreams the pool picks among; they serve only through the pool. "
        "Required.",
    )
    strategy: PoolStrategy = Field(
        default="weighted",
        description="How a deployment is picked: `weighted` (at random in proportion to `weight`), "
        "`least_busy` (fewest requests in flight here), `latency` (lowest recent time to first token) or "
        "`headroom` (the largest share of its rate limit left).",
    )
    fallbacks: tuple[str, ...] = Field(
        default=(),
        description="Upstreams or pools tried, in order, once no deployment of this pool can serve."
    )
    affinity: AffinityConfig = Field(
        default=AffinityConfig(), description="Prompt-cache affinity: a conversation stays on its deployment."
    )
    cooldowns: CooldownsConfig = Field(
        default=CooldownsConfig(),
        description="How long a deployment sits out after an answer that says its key cannot serve.",
    )
    # OpenAI keeps a stored response 30 days (gateway/routing/stored.py cites it): a chained
    # turn after that is refused wherever it goes.
    stored_s: float = Field(
        default=30 * 24 * 3600.0, ge=0,
        description="Seconds the gateway remembers which deployment made each Responses answer the "
        "provider stores, and each conversation, so that a turn chained to one (`previous_response_id`, "
        "`conversation`) goes to the key that can read it (OpenAI keeps them 30 days). With Redis each costs "
        "a key of about 165 bytes for that long; 0: not remembered (such turns go where the strategy picks).",
    )  # fmt: skip

    @field_validator("models", "deployments", "fallbacks", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("models")
    @classmethod
    def _non_empty(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("must list at least one model pattern")
        _meant_globs(v)
        return v

    @field_validator("deployments")
    @classmethod
    def _distinct(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        dupes = sorted({n for n in v if v.count(n) > 1})
        if dupes:
            raise ValueError(f"lists a deployment twice: {', '.join(dupes)}")
        return v


def patterns_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Whether some model name could match a pattern of both (`*-mini` and `gpt-*` do:
    `gpt-4o-mini`)."""
    return any(globs.overlap(p, q) for p in a for q in b)


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
    connect_s: float = Field(default=10.0, gt=0, description="Seconds to open a connection to an upstream.")
    first_byte_s: float = Field(
        default=300.0, gt=0,
        description="Seconds from sending a request upstream to its response head arriving.",
    )  # fmt: skip
    # As long as first_byte_s by default: a streamed request may think as long as an unstreamed
    # one may before its head, so slow reasoning models are not cut, yet a stream that only sends
    # pings is bounded.
    first_token_s: float | None = Field(
        default=300.0, gt=0,
        description="Seconds from sending a streamed request to its first visible event (text, a tool call, "
        "thinking; not head events or keep-alive pings); null: no limit. `upstreams[].first_token_s` "
        "overrides it per upstream.",
    )  # fmt: skip
    idle_s: float = Field(
        default=120.0, gt=0,
        description="Seconds a response may go silent mid-body; also bounds each wait for more of a "
        "client's request body (408 `request_timeout`; 400 on Messages, as Anthropic answers it), and how "
        "long a client whose socket is full may take none of its answer before its connection is closed.",
    )  # fmt: skip


class CompressionConfig(_Model):
    enabled: bool = Field(
        default=True,
        description="On a context overflow, compress the conversation and retry once (compress-and-retry).",
    )
    # Claude Code only summarises when it has enough history (a short run that overflows just dies),
    # and the rescued answer's usage reports a nearly full window, which is what triggers their own
    # compaction on the next turn, so history stays bounded.
    self_compacting_clients: Literal["rescue", "pass_through"] = Field(
        default="rescue",
        description="Clients that summarise their own conversation (Claude Code, Codex): `rescue` compresses "
        "and retries as for any client; `pass_through` hands them the provider's overflow untouched.",
    )
    max_tool_output_tokens: int | None = Field(
        default=None, ge=64,
        description="Opt-in: before the first send, on every API, any single tool output above this many "
        "tokens is cut to head and tail. With `max_tool_output_share` too, the smaller limit wins.",
    )  # fmt: skip
    max_tool_output_share: float | None = Field(
        default=None, gt=0, le=0.5,
        description="Opt-in: as `max_tool_output_tokens`, as a share (up to 0.5) of the upstream's "
        "`context_window`, for upstreams that declare one.",
    )  # fmt: skip


class ToolRuleConfig(_Model):
    """What to do with the outputs of the tools whose name matches ``tool`` (a glob)."""

    tool: str = Field(
        min_length=1,
        description="Glob on the tool's name (found from the call the output answers). Required.",
    )
    project: str | None = Field(
        default=None,
        description="A JMESPath expression applied to the output's JSON before any cut; the raw output is "
        "kept when it is not JSON or the expression fails or selects nothing.",
    )
    oversized: Literal["cut", "exclude"] = Field(
        default="cut",
        description="An output still above the limit: `cut` to head and tail, or `exclude`d, replaced by a "
        "structured \"oversized\" result the model can act on.",
    )
    max_tokens: int | None = Field(
        default=None, ge=64, description="This tool's own limit, in tokens; unset: `tool_outputs.max_tokens`."
    )
    max_share: float | None = Field(
        default=None, gt=0, le=1,
        description="This tool's own limit as a share of the upstream's `context_window`; unset: "
        "`tool_outputs.max_share`.",
    )  # fmt: skip

    @field_validator("tool")
    @classmethod
    def _meant(cls, v: str) -> str:
        _meant_globs((v,))
        return v

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
    """Per-tool projection and oversized-output policy."""

    # Projections are applied up front whenever a rule has one, whatever this says.
    upfront: bool = Field(
        default=False,
        description="Enforce the limits before the first send too; off: only once the provider said the "
        "conversation is too long.",
    )
    max_share: float = Field(
        default=0.3, gt=0, le=1,
        description="An output above this share of the upstream's `context_window` is oversized.",
    )  # fmt: skip
    max_tokens: int | None = Field(
        default=None, ge=64,
        description="An output above this many tokens is oversized; with `max_share` too, the smaller wins.",
    )  # fmt: skip
    rules: tuple[ToolRuleConfig, ...] = Field(
        default=(),
        description="Per-tool rules; the first whose glob matches the tool's name wins. Tools no rule "
        "matches are cut.",
    )


class StateConfig(_Model):
    """Where cross-request state lives: ``memory`` (this process) or ``redis`` (shared by replicas)."""

    backend: Literal["memory", "redis"] = Field(
        default="memory",
        description="Where cross-request state lives (circuits, retry budget, rate-limit resets, pool state, "
        "remembered answers, key accounting): `memory` (this process) or `redis` (shared by every replica "
        "and worker).",
    )
    url: str | None = Field(
        default=None, repr=False,
        description="The Redis URL (`redis://`, `rediss://` or `unix://`); required when `backend` is "
        "`redis`.",
    )  # fmt: skip
    key_prefix: str = Field(
        default="llm-gateway:", max_length=64, description="Prefix of every Redis key the gateway writes."
    )
    timeout_ms: int = Field(
        default=50, gt=0, le=10_000,
        description="Milliseconds after which an operation on the shared store is suspect: a PING, timed "
        "against this process's own event-loop lag, asks Redis; late too, the replica leaves Redis (slow or "
        "down) and serves every operation from its own memory at once, so an operation waits about twice "
        "this at most; on time, the wait is this process's own and the operation waits on, up to "
        "`recover_s`.",
    )  # fmt: skip
    recover_s: float = Field(
        default=1.0, gt=0,
        description="While Redis is taken for down or slow, how often, in seconds, a probe in the background "
        "asks whether it answers within `timeout_ms` again (the first goes at once; 3 PINGs in a row on time "
        "bring the replica back, and one taken off again within a minute of its return stays off 2, 4, ... "
        "times this, at most 30 s or this if longer); also the longest a PING "
        "may take to count as answered, and an operation's longest wait on a Redis that is answering (see "
        "`timeout_ms`).",
    )  # fmt: skip
    max_connections: int = Field(
        default=100, ge=1, le=10_000,
        description="Most operations each gateway process has in flight on Redis at once, each on its own "
        "connection; one past it waits for its turn, within its wait (see `timeout_ms`).",
    )  # fmt: skip
    # Each costs a Redis round trip at most once per cache_ms, not per request.
    cache_ms: int = Field(
        default=200, ge=0, le=10_000,
        description="How stale, in milliseconds, a replica's view of circuit state and of remembered "
        "loop-breaker answers may be.",
    )  # fmt: skip

    @field_validator("url")
    @classmethod
    def _redis_url(cls, v: str | None) -> str | None:
        if v and urlsplit(v).scheme not in ("redis", "rediss", "unix"):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        if v:
            # What redis-py would refuse at start-up with a traceback, said here; never the URL
            # itself, which may hold the password.
            try:
                _ = urlsplit(v).port  # parsed on access
            except ValueError:
                # An unencoded # / or ? in a password ends the host part early (RFC 3986 3.2), so
                # the rest of the password reads as the port: the likely cause when there is an @.
                hint = " (a password holding # / ? or @ must be percent-encoded)" if "@" in v else ""
                raise ValueError(f"its port is not a number from 0 to 65535{hint}") from None
            from redis.connection import parse_url  # the Redis client only when Redis is configured

            try:
                parse_url(v)  # type: ignore[no-untyped-call]
            except ValueError as e:  # names the parameter, never its value: "Invalid value for 'x' ..."
                raise ValueError(f"is not a usable Redis URL: {e}") from None
        return v or None

    @model_validator(mode="after")
    def _redis_needs_url(self) -> StateConfig:
        if self.backend == "redis" and not self.url:
            raise ValueError("backend redis needs a url (redis://host:6379/0)")
        return self


class LoopBreakerConfig(_Model):
    """How long a failed request's answer is replayed to an identical request (same path,
    body and credential) instead of sending it again."""

    enabled: bool = Field(
        default=True,
        description="Answer a request identical to one that just failed (same path, body and credential) "
        "from memory instead of sending it again.",
    )
    window_s: float = Field(
        default=10.0, ge=0,
        description="Seconds an `unknown`, `auth` or unrescued `context_overflow` failure is answered from "
        "memory.",
    )  # fmt: skip
    # Short: must not outlive a top-up by much.
    budget_window_s: float = Field(
        default=5.0, ge=0, description="Seconds a `budget` failure is answered from memory."
    )
    retryable_window_s: float | None = Field(
        default=None, ge=0,
        description="Seconds a retryable failure the gateway gave up on is answered from memory when the "
        "provider named no wait; unset: `circuit_breaker.open_s`.",
    )  # fmt: skip
    max_window_s: float = Field(
        default=60.0, ge=0,
        description="Cap, in seconds, on a window taken from a reset time, a `retry-after` or an open "
        "circuit.",
    )  # fmt: skip
    # Longer than any client's gap between two repeats.
    turn_idle_s: float = Field(
        default=120.0, ge=0,
        description="After a retryable failure's window, identical repeats are sent as one-attempt probes "
        "while each comes within this many seconds of the last window's end.",
    )  # fmt: skip
    turn_max_s: float = Field(
        default=900.0, ge=0,
        description="Probing of a failed turn stops this many seconds after the turn first failed.",
    )  # fmt: skip
    max_entries: int = Field(
        default=10_000, gt=0, description="Most answers remembered; the least recently used go first."
    )
    max_body_bytes: int = Field(
        default=64 * 1024, gt=0, description="An answer with a larger body, in bytes, is not remembered."
    )
    max_total_bytes: int = Field(
        default=64 * 1024 * 1024, gt=0,
        description="Most bytes of remembered answers in all; the least recently used go first.",
    )  # fmt: skip
    secret: str | None = Field(
        default=None, repr=False,
        description="Key of the fingerprint (a keyed BLAKE2b MAC), of the tag in the ids of WebSocket "
        "`generate: false` responses, and, when set here, of the names of "
        "pools' conversations in the state store. Replicas share remembered answers only if they share it; "
        "unset or empty: each gateway draws a random one (its workers share it) for the fingerprint, and "
        "conversations are named by a plain digest, which every replica computes alike.",
    )  # fmt: skip
    # Set by workers/seat.worker_config when ``secret`` is the supervisor's drawn one, not the
    # file's: other replicas cannot know it, so what every replica must name alike (a pool's
    # conversation homes in Redis) is not keyed by it.
    _secret_drawn: bool = PrivateAttr(default=False)

    @field_validator("secret")
    @classmethod
    def _blank_secret_is_none(cls, v: str | None) -> str | None:
        return v or None  # `${LOOP_BREAKER_SECRET:-}` unset means "draw one per process"

    @property
    def shared_secret(self) -> str | None:
        """The secret when the operator set it (so every replica given the file has it), else None."""
        return None if self._secret_drawn else self.secret


class TracingConfig(_Model):
    """OpenTelemetry traces over OTLP/HTTP. Off unless switched on here or by the standard
    variables: ``enabled`` unset means "on when OTEL_EXPORTER_OTLP_ENDPOINT (or
    ..._TRACES_ENDPOINT) is set", and OTEL_SDK_DISABLED=true always wins. Every field left unset
    here takes its OTEL_* variable, then the SDK's default."""

    enabled: bool | None = Field(
        default=None,
        description="Export traces. Unset: on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or "
        "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; `OTEL_SDK_DISABLED=true` always turns them off.",
    )
    endpoint: str | None = Field(
        default=None,
        description="The OTLP/HTTP collector's base URL (`/v1/traces` is appended); unset: "
        "`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`.",
    )
    service_name: str | None = Field(
        default=None,
        description="`service.name` of the spans; unset: `OTEL_SERVICE_NAME`, else `llm-gateway`."
    )
    sample_ratio: float | None = Field(
        default=None, ge=0, le=1,
        description="Share of new traces sampled, 0 to 1 (a child follows its parent's decision); unset: "
        "`OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, else every trace.",
    )  # fmt: skip
    # When the collector is down and the queue is full the oldest are dropped (the SDK logs it
    # once), so memory stays bounded.
    max_queue_size: int | None = Field(
        default=None, gt=0, le=1_000_000,
        description="Spans waiting for export; when full, the oldest are dropped. Unset: "
        "`OTEL_BSP_MAX_QUEUE_SIZE`, else 2048.",
    )  # fmt: skip
    export_timeout_s: float | None = Field(
        default=None, gt=0, le=60,
        description="Bound on one export, in seconds (in the exporter's own thread); unset: "
        "`OTEL_EXPORTER_OTLP_TIMEOUT`, else 10.",
    )  # fmt: skip
    capture_content: bool = Field(
        default=False,
        description="Put prompts, completions and tool outputs in span attributes (`gen_ai.input.messages`, "
        "...), with key-like strings redacted. Off: spans carry sizes, counts and decisions only.",
    )


class BudgetConfig(_Model):
    """A spend cap per period, in USD; periods are calendar days, weeks from Monday or months in
    ``timezone`` (UTC unless given)."""

    usd: float = Field(gt=0, description="The most that may be spent per period, in USD. Required.")
    period: Literal["day", "week", "month"] = Field(
        default="month",
        description="The period the cap applies to, in `timezone`: `day`, `week` (from Monday) or `month`.",
    )
    timezone: str = Field(
        default="UTC",
        description="The IANA time zone whose midnights start and end each period (`America/Los_Angeles`, "
        "`Europe/Berlin`): a team's day from its own midnight, 23 or 25 hours on its daylight-saving days. "
        "Reset times are still answered in UTC.",
    )
    soft_usd: float | None = Field(
        default=None, gt=0,
        description="A warning threshold below `usd`, in USD: crossing it refuses nothing; the first "
        "crossing in a period logs one `budget_soft_limit` line, and the key view and "
        "`llm_gateway_budget_soft_usd` show it (alert `LLMGatewayKeyBudgetSoftLimitCrossed`).",
    )

    @model_validator(mode="after")
    def _soft_below_hard(self) -> Self:
        if self.soft_usd is not None and self.soft_usd >= self.usd:
            raise ValueError(f"soft_usd ({self.soft_usd:g}) must be below usd ({self.usd:g}): it warns "
                             "before the budget is spent, which usd refuses at")
        return self

    @field_validator("timezone")
    @classmethod
    def _a_zone(cls, v: str) -> str:
        if v == "UTC":
            return v
        # Only names (tzdata's), not offsets: a fixed "-08:00" would be an hour off half the year,
        # and "Etc/GMT+8" is UTC-8 (POSIX's sign). Nor names that read the host ("localtime",
        # "posixrules", "Factory": replicas on hosts set apart would name periods apart) or
        # tzdata's "right/" (leap seconds) and "posix/" copies (review: "right/America/Los_Angeles"
        # read PDT in November).
        try:
            if (v.strip() != v or v.startswith(("/", ".", "right/", "posix/", "Etc/GMT+", "Etc/GMT-"))
                    or ".." in v or v in ("localtime", "posixrules", "Factory")):
                raise ValueError
            zoneinfo.ZoneInfo(v)
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise ValueError(f"'{v[:64]}' is not an IANA time zone name: give one such as "
                             "America/Los_Angeles, Europe/Berlin or UTC") from None
        place = _ABBREVIATED_ZONES.get(v)
        if place is not None:
            # tzdata keeps these abbreviations for old systems, each a fixed offset all year (its
            # "backward" file links them to America/Panama and America/Phoenix): "EST" read as
            # New York's zone began a summer day at 01:00 there, an hour late, as a fixed "-05:00"
            # would, while "PST" was refused (review).
            raise ValueError(f"'{v}' is a fixed offset, the same all year (no daylight saving): give the "
                             f"place's zone, such as {place}")
        return v


# tzdata's US abbreviations that are zones of a fixed offset, whose places mostly keep daylight
# saving (EST5EDT and the like follow it, and stay allowed; HST is Honolulu's own, which keeps
# none): where each is meant, and where its fixed offset is the place's own.
_ABBREVIATED_ZONES = {
    "EST": "America/New_York (America/Panama for UTC-5 all year)",
    "MST": "America/Denver (America/Phoenix for UTC-7 all year)",
}


class ClientKeyConfig(_Model):
    """A gateway key for a person, a CI job or an agent."""

    name: str = Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$",
        description="What logs, metrics and answers show of the key, never the key itself (letters, digits, "
        "`_`, `.`, `@`, `-`; up to 64). Required; unique.",
    )  # fmt: skip
    key: tuple[str, ...] | None = Field(
        default=None, repr=False, min_length=1,
        description="The key itself, printable ASCII without spaces (e.g. `${ALICE_GATEWAY_KEY}`), or a list "
        "of keys, each the same named key with one spend and one set of limits: to rotate it, add the new "
        "one, hand it out, then remove the old one. Exactly one of `key` and `key_sha256` is given.",
    )  # fmt: skip
    key_sha256: tuple[str, ...] | None = Field(
        default=None, min_length=1,
        description="The key's SHA-256 digest in hex, instead of the key itself; or a list of digests, as "
        "`key` takes a list.",
    )  # fmt: skip
    team: str | None = Field(default=None, description="A team of `teams`, whose budget its keys share.")
    models: tuple[str, ...] = Field(
        default=("*",),
        description="Glob patterns of the models the key may use; another is refused with 403."
    )
    requests_per_minute: int | None = Field(
        default=None, gt=0, description="Requests a minute the key may make; past it, 429."
    )
    tokens_per_minute: int | None = Field(
        default=None, gt=0,
        description="Tokens (prompt and completion) a minute the key may use; past it, 429."
    )
    parallel: int | None = Field(
        default=None, gt=0, description="Requests the key may have in flight at once; past it, 429."
    )
    budget: BudgetConfig | None = Field(
        default=None, description="The key's own spend cap; once spent, requests are refused with 402."
    )
    admin: bool = Field(
        default=False,
        description="May read every key's state (`GET /v1/gateway/keys`), not only its own, and issue and "
        "revoke keys at run time (`POST /v1/gateway/keys`, `DELETE /v1/gateway/keys/{name}`).",
    )
    expires_at: datetime.datetime | None = Field(
        default=None,
        description="When the key stops working: a date, a time and a time zone (`2026-12-31T23:59:59Z`, "
        "`2027-01-15T18:00:00+01:00`). From then on it is refused with 401 `expired_client_key`, in the "
        "client's API's shape, naming the key and the time; a reload that moves it lets the key in again.",
    )  # fmt: skip
    disabled: bool = Field(
        default=False,
        description="Turns the key off, keeping its name, spend and metrics: it is refused with 401 "
        "`disabled_client_key` in the client's API's shape, telling its holder to ask the operator; an admin "
        "key still reads its state. A reload that removes it lets the key in again.",
    )  # fmt: skip

    @field_validator("models", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("models")
    @classmethod
    def _meant(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        _meant_globs(v)
        return v

    @field_validator("expires_at", mode="before")
    @classmethod
    def _an_instant(cls, v: Any) -> Any:
        # YAML reads `2026-12-31` as a date and `2026-12-31T10:00:00` as a time in no zone:
        # whether the key works through that day, or until the start of it, and in whose
        # evening, would be a guess.
        if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
            raise ValueError(f"{v.isoformat()} is a day, not an instant: give the time and its zone, "
                             f"e.g. {v.isoformat()}T23:59:59Z")
        return v

    @field_validator("expires_at")
    @classmethod
    def _zoned(cls, v: datetime.datetime | None) -> datetime.datetime | None:
        if v is not None and v.utcoffset() is None:
            raise ValueError(f"{v.isoformat()} has no time zone: add one, e.g. {v.isoformat()}Z")
        return v

    @field_validator("key", "key_sha256", mode="before")
    @classmethod
    def _one_or_several(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("key")
    @classmethod
    def _printable(cls, keys: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for v in keys or ():
            if v and v.rstrip("\r\n") != v and (problem := header_value_problem(v)):
                raise ValueError(problem)
            if not v or any(c.isspace() or not c.isprintable() for c in v) or not v.isascii():
                raise ValueError("must be printable ASCII without spaces")  # never echo the key
        return keys

    @field_validator("key_sha256")
    @classmethod
    def _hex_digests(cls, digests: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for v in digests or ():
            if not re.fullmatch(r"[0-9a-fA-F]{64}", v):
                raise ValueError("must be a SHA-256 digest: 64 hex digits (sha256sum's first field alone)")
        return digests

    @model_validator(mode="after")
    def _one_credential(self) -> Self:
        if (self.key is None) == (self.key_sha256 is None):
            raise ValueError(f"key '{self.name}' needs exactly one of key, key_sha256")
        return self


class TeamConfig(_Model):
    name: str = Field(
        min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.@-]+$",
        description="The team's name, as keys' `team` names it. Required; unique.",
    )  # fmt: skip
    budget: BudgetConfig | None = Field(
        default=None, description="A spend cap the team's keys share; once spent, they are refused with 402."
    )
    disabled: bool = Field(
        default=False,
        description="Turns every key of the team off, as `keys[].disabled` does one "
        "(401 `disabled_client_key`).",
    )


class PriceConfig(_Model):
    """USD per million tokens; a cache price left out is the input price."""

    input: float = Field(
        ge=0, description="USD per million prompt tokens not read from or written to a cache. Required."
    )
    output: float = Field(
        ge=0,
        description="USD per million completion tokens (reasoning included). Required.",
    )
    cache_read: float | None = Field(
        default=None, ge=0, description="USD per million prompt tokens read from the cache; unset: `input`."
    )
    cache_write: float | None = Field(
        default=None, ge=0, description="USD per million prompt tokens written to the cache; unset: `input`."
    )
    cache_write_1h: float | None = Field(
        default=None, ge=0,
        description="USD per million prompt tokens written to Anthropic's cache for an hour (`ttl: \"1h\"`); "
        "unset: twice `input`, Anthropic's rule.",
    )  # fmt: skip
    web_search: float | None = Field(
        default=None, ge=0,
        description="USD per web search a server-side tool makes (Anthropic's `web_search`, the Responses "
        "API's, Gemini's grounding with Google Search), on top of tokens: per search, not per million; "
        "unset: the shipped fee of the model's family (docs/reference/prices.md), none for a family "
        "without one.",
    )  # fmt: skip


class ReferenceTokensConfig(_Model):
    """What an attachment named by reference (a URL, a ``file_id``), not sent in the request's
    bytes, is reserved as. The defaults and their sources: gateway/keys/references.py."""

    document: int = Field(
        default=25_000, ge=0,
        description="Prompt tokens reserved for each document (a PDF, a file, Gemini's `cachedContent`) a "
        "request names by reference: about five pages at Anthropic's 1,500-3,000 text tokens a page plus "
        "each page's image. A longer one costs what the provider counts, past the reservation.",
    )  # fmt: skip
    image: int = Field(
        default=2_500, ge=0,
        description="Prompt tokens reserved for each image a request names by reference (its URL, a "
        "`file_id`): Anthropic's ~1,600 for the largest image it does not scale down, OpenAI's 1,536 "
        "patches × 1.62 for its mini models.",
    )  # fmt: skip


class KeysApiConfig(_Model):
    """Keys issued at run time by an admin key (``POST /v1/gateway/keys``), for an orchestrator
    that gives each agent run its own key, budget and expiry without editing this file."""

    max_issued: int = Field(
        default=1000, ge=0,
        description="The most issued keys that may exist at once, not yet expired or revoked; past it, 409 "
        "`issued_keys_full`. 0: keys are not issued (501 `keys_api_off`).",
    )  # fmt: skip
    default_ttl_s: float = Field(
        default=86400, gt=0,
        description="How long an issued key works when the request gives neither `expires_at` nor `ttl_s`: "
        "every issued key ends, so keys an orchestrator forgot to revoke cannot pile up.",
    )  # fmt: skip
    issued_per_minute: int = Field(
        default=60, gt=0,
        description="The most keys issued a minute, all admin keys and replicas together; past it, 429 "
        "`issue_rate_limited`.",
    )  # fmt: skip
    max_ttl_s: float = Field(
        default=30 * 86400, gt=0,
        description="The longest an issued key may work, however its `expires_at` or `ttl_s` asks: an "
        "issued key ends, and its records in the state store with it.",
    )  # fmt: skip


class AccountingConfig(_Model):
    """How keys' limits and budgets are counted."""

    when_store_down: Literal["open", "closed"] = Field(
        default="open",
        description="When the state store does not answer: `open` serves, counting in this process's memory "
        "only; `closed` refuses keys with limits or budgets with 503 `accounting_unavailable`.",
    )
    default_max_tokens: int = Field(
        default=4096, gt=0,
        description="Output tokens reserved against limits and budgets for a request that names no output "
        "limit and is sent none (one translated to a Messages upstream is reserved the limit the translation "
        "sends it).",
    )  # fmt: skip
    # Claude Code 2.1.332 asks max_tokens 128000: at $25/M out its worst case is $3.29, more than
    # a $2 budget, which then served one of its requests at a time (audit).
    reserved_output_max: int | None = Field(
        default=None, gt=0,
        description="The most output tokens a request's reservation counts against budgets and "
        "`tokens_per_minute`. Unset: every token it asks for, so a budget is overspent by at most the last "
        "request admitted. Set, a key serves more requests at once whose agents ask for far more than they "
        "write; each is still settled at its usage, and each in flight may overspend by what it writes above "
        "this.",
    )  # fmt: skip
    # Codex declares `web_search` on every request and names no bound: 5 held a turn on a $0.10 key
    # refused its second concurrent turn (429 key_budget_held) with $0.0855 left (audit).
    reserved_searches: int = Field(
        default=1, ge=0,
        description="The web searches reserved against budgets for a request declaring a search tool that "
        "names no bound of its own (a tool's `max_uses` or the request's `max_tool_calls` is reserved as it "
        "stands). Each search made is charged at the settle, so a request in flight may overspend its key's "
        "budget by the fees of the searches it makes beyond this.",
    )  # fmt: skip
    reference_tokens: ReferenceTokensConfig = Field(
        default=ReferenceTokensConfig(),
        description="Prompt tokens reserved against budgets and `tokens_per_minute` for each attachment a "
        "request names by reference instead of sending it (a PDF or image by URL, a `file_id`, Gemini's "
        "`fileData` and `cachedContent`): its bytes are not in the request to estimate from.",
    )


class GatewayConfig(_Model):
    server: ServerConfig = Field(
        default=ServerConfig(), description="The listening side: address, limits, client keys, processes."
    )
    upstreams: tuple[UpstreamConfig, ...] = Field(
        min_length=1,
        description="The LLM APIs requests go to. A request goes to the pool whose `models` match, else to "
        "the first upstream outside every pool whose `models` match. At least one is required.",
    )
    retry: RetryConfig = Field(
        default=RetryConfig(),
        description="Retries per error class, and their bounds.",
    )
    circuit_breaker: CircuitBreakerConfig = Field(
        default=CircuitBreakerConfig(),
        description="Per-model and per-upstream circuits that fail fast while an upstream is failing.",
    )
    timeouts: TimeoutsConfig = Field(default=TimeoutsConfig(), description="Timeouts of upstream requests.")
    compression: CompressionConfig = Field(
        default=CompressionConfig(),
        description="Compress-and-retry on context overflow, and tool-output caps."
    )
    tool_outputs: ToolOutputsConfig = Field(
        default=ToolOutputsConfig(), description="Per-tool projection and oversized-output policy."
    )
    state: StateConfig = Field(
        default=StateConfig(),
        description="Where cross-request state lives: this process, or Redis shared by replicas."
    )
    loop_breaker: LoopBreakerConfig = Field(
        default=LoopBreakerConfig(),
        description="Identical repeats of a failed request answered from memory instead of sent again.",
    )
    fallback: FallbackConfig = Field(
        default=FallbackConfig(), description="When a request moves on to the next upstream of its chain."
    )
    tracing: TracingConfig = Field(
        default=TracingConfig(),
        description="OpenTelemetry traces over OTLP/HTTP.",
    )
    pools: tuple[PoolConfig, ...] = Field(
        default=(),
        description="Several deployments (upstreams) serving the same models; a strategy picks one."
    )
    keys: tuple[ClientKeyConfig, ...] = Field(
        default=(), description="Named gateway keys, each with its own models, limits and budget."
    )
    teams: tuple[TeamConfig, ...] = Field(default=(), description="Teams whose keys share a budget.")
    prices: dict[str, PriceConfig] = Field(
        default_factory=dict,
        description="Prices by model glob, consulted before the shipped price table, to count keys' spend.",
    )
    accounting: AccountingConfig = Field(
        default=AccountingConfig(), description="How keys' limits and budgets are counted."
    )
    keys_api: KeysApiConfig = Field(
        default=KeysApiConfig(),
        description="Keys issued at run time by a key with `admin: true` (`POST /v1/gateway/keys`).",
    )

    @field_validator("upstreams")
    @classmethod
    def _unique_names(cls, v: tuple[UpstreamConfig, ...]) -> tuple[UpstreamConfig, ...]:
        return v

    @field_validator("prices")
    @classmethod
    def _meant_price_globs(cls, v: dict[str, PriceConfig]) -> dict[str, PriceConfig]:
        _meant_globs(v)
        return v

    @model_validator(mode="after")
    def _usable_proxy(self) -> Self:
        # Here, not on the field: ServerConfig's default is built at import, before gateway.upstream
        # (which imports this module) can be, and a bad variable must not break an import.
        from gateway.upstream.proxy import egress

        egress(self.server.upstream_proxy, os.environ)  # a ProxyError names the variable or setting
        return self

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
        digests = [d.lower() for k in self.keys for d in k.key_sha256 or ()]
        digests += [_sha256(v) for k in self.keys for v in k.key or ()]
        digests += [_sha256(k) for k in self.server.client_keys]
        if len(set(digests)) != len(digests):
            problems.append("keys: two keys (in keys: or server.client_keys) are the same key")
        counted = counted_per_worker(self)
        if counted is not None:
            problems.append(counted)
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


def counted_per_worker(cfg: GatewayConfig) -> str | None:
    """Why ``cfg`` would let each worker count its own limits and budgets, or None. Also asked
    of a reloaded config once the running ``state`` and ``server.workers`` are put back (they
    change only at a restart): a file saying redis, or one worker, passed the check as written,
    and the limits it added were held on memory by each of 2 workers, twice over (audit)."""
    workers = cfg.server.worker_count
    if workers <= 1 or cfg.state.backend != "memory":
        return None
    counted = [f"key '{k.name}'" for k in cfg.keys if any(
        v is not None for v in (k.requests_per_minute, k.tokens_per_minute, k.parallel, k.budget))]
    counted += [f"team '{t.name}'" for t in cfg.teams if t.budget is not None]
    if not counted:
        return None
    # Each worker is a process with its own memory: every limit and budget would hold once per
    # worker, which is a budget that can be overspent N times over.
    shown = ", ".join(counted[:3]) + (f" and {len(counted) - 3} more" if len(counted) > 3 else "")
    return (f"keys: {shown} {'has' if len(counted) == 1 else 'have'} limits or budgets, and "
            f"server.workers is {workers} with "
            f"state.backend memory: each worker would count its own, so each limit and budget "
            f"would hold {workers} times over; use state: {{backend: redis}} (the workers share "
            "it) or one worker")  # fmt: skip


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
            "remembered answers, and pools' conversations are named in Redis by a plain digest of their "
            "opening (one who reads Redis can confirm a guessed prompt); give every replica the same secret "
            "(loop_breaker: {secret: ${LOOP_BREAKER_SECRET}})"
        )
    workers = cfg.server.worker_count
    if workers > 1 and cfg.state.backend == "memory":
        out.append(
            f"server.workers is {workers} with state.backend memory: each worker keeps its own circuits, "
            "loop-breaker memory, rate-limit resets and pools' conversation homes (a retry that lands on "
            "another worker is sent again; an outage is learnt once per worker; a conversation a rate limit "
            "moved off its key goes back there on the workers that did not see it, away from its prompt "
            "cache); state: {backend: redis} shares them"
        )
    out += _budgets_in_memory(cfg) + _unpriced(cfg)
    return out


def _budgets_in_memory(cfg: GatewayConfig) -> list[str]:
    """Budgets counted in this process's memory: a restart (a deploy, a crash, an OOM kill)
    starts every budget's period from nothing spent, so a key can spend its budget again after
    each one, and nothing says so."""
    if cfg.state.backend != "memory":
        return []
    budgeted = [f"key '{k.name}'" for k in cfg.keys if k.budget is not None]
    budgeted += [f"team '{t.name}'" for t in cfg.teams if t.budget is not None]
    if not budgeted:
        return []
    shown = ", ".join(budgeted[:3]) + (f" and {len(budgeted) - 3} more" if len(budgeted) > 3 else "")
    return [f"keys: {shown} {'has a budget' if len(budgeted) == 1 else 'have budgets'} and state.backend is "
            "memory: what is spent is kept in this process only, so a restart sets every budget back to "
            "unspent, and a key may spend its budget again after each; state: {backend: redis, url: ...}, "
            "with an append-only file (deploy/), keeps it"]  # fmt: skip


def _unpriced(cfg: GatewayConfig) -> list[str]:
    """One line naming the routes a key with a budget can reach that prices do not cover fully:
    a request for a model no price covers is refused to it (``model_not_priced``,
    pipeline/accounting.py), which its holder learns only from a refusal. A route is covered
    when a price's glob covers its glob (``gpt-4o*`` by ``gpt-4o*``), or it names one model that
    is priced, as itself or as the model its upstream's ``model_map`` sends. ``*`` and a partly
    priced glob (``gpt-*``, ``gemini-*``) count: most such routes are an agent's, whose default
    models then were refused without a word at load (review: Claude Code's claude-sonnet-5-5,
    Codex's gpt-6.2-sol, Gemini CLI's gemini-3.5-flash-lite)."""
    from gateway.keys.prices import SHIPPED

    priced = [*cfg.prices, *(glob for glob, _ in SHIPPED)]
    teams = {t.name for t in cfg.teams if t.budget is not None}
    budgeted = [k for k in cfg.keys if k.budget is not None or k.team in teams]
    if not budgeted:
        return []
    by_name = {u.name: u for u in cfg.upstreams}
    routes = [(g, [by_name[d] for d in p.deployments if d in by_name]) for p in cfg.pools for g in p.models]
    routes += [(g, [u]) for u in cfg.upstreams if cfg.pool_of(u.name) is None for g in u.models]
    found: dict[str, list[str]] = {}
    partly: set[str] = set()  # routes of which some models are priced
    for key in budgeted:
        for route, members in routes:
            for reached in _reached(route, key.models):
                sent = [[any(_covers(price, name) for price in priced) for name in _sent_as(u, reached)]
                        for u in members]  # fmt: skip
                if any(_covers(price, reached) for price in priced) or all(all(s) for s in sent):
                    continue
                names = found.setdefault(reached, [])
                if key.name not in names:
                    names.append(key.name)
                # A price that meets the glob, or a model_map entry sending some of it to a priced
                # model (`xl-sonnet` to claude-sonnet-4-5 read as `'xl-*' (none)`, audit).
                if any(_overlap(p, reached) for p in priced) or any(any(s) for s in sent):
                    partly.add(reached)
    if not found:
        return []
    keys = list(dict.fromkeys(n for names in found.values() for n in names))
    who = ", ".join(f"key {n!r}" for n in keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
    shown = ", ".join(f"{r!r}" + ("" if _literal(r) else " (partly)" if r in partly else " (none)")
                      for r in found)  # fmt: skip
    return [f"keys: {who} {'has a budget' if len(keys) == 1 else 'have budgets'} and may be routed models "
            f"no price (prices:, or the shipped table) covers: {shown}; a request for such a model is "
            "refused to a budgeted key (model_not_priced): add prices: entries for the models its agents "
            'use (USD per million tokens), or a "*" catch-all: prices: {"*": {input: ..., output: ...}}']


def _sent_as(upstream: UpstreamConfig, reached: str) -> list[str]:
    """The names ``upstream`` sends the models of glob ``reached`` as: the target of each
    ``model_map`` entry some of them meet, up to the first entry that takes them all; where no
    entry does, the rest go as asked (``reached`` itself). A pool of keys that maps
    ``claude-*`` to one priced name is covered, which only a literal route was (audit with the
    agents on pools and budgeted keys: the warning named ``claude-*``, ``gpt-*`` and ``*``)."""
    if _literal(reached):
        return [upstream.upstream_model(reached)]
    sent: list[str] = []
    for pattern, name in upstream.model_map:
        if _covers(pattern, reached):
            return [*sent, name]
        if _overlap(pattern, reached):
            sent.append(name)
    return [*sent, reached]


def _reached(route: str, allowed: tuple[str, ...]) -> list[str]:
    """The part of a route's glob a key's ``models`` let it use, as globs: the narrower of each
    pair that overlaps (either, when neither covers the other: the route's)."""
    if allowed == ("*",):
        return [route]
    out = []
    for glob in allowed:
        if _covers(route, glob):
            out.append(glob)
        elif _covers(glob, route) or _overlap(glob, route):
            out.append(route)
    return out


def _literal(glob: str) -> bool:
    return not set(glob) & set("*?[")


def _overlap(a: str, b: str) -> bool:
    """Whether some model name matches both globs. Exact for ``*`` alone; a ``?`` or ``[..]``
    in either is taken to overlap (not determinable here, so never warned of)."""
    if set(a + b) & set("?["):
        return True

    @functools.cache
    def meet(i: int, j: int) -> bool:
        if i == len(a) and j == len(b):
            return True
        if i < len(a) and a[i] == "*":
            return meet(i + 1, j) or (j < len(b) and meet(i, j + 1))
        if j < len(b) and b[j] == "*":
            return meet(i, j + 1) or (i < len(a) and meet(i + 1, j))
        return i < len(a) and j < len(b) and a[i] == b[j] and meet(i + 1, j + 1)

    return meet(0, 0)


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
# Any other ``${`` (up to its ``}``, or the end of the line): a reference mistyped, which taken
# literally went upstream as the key (``${KEY-default}``, ``${KEY`` unclosed, ``${ KEY }``).
# Compose's ``${VAR-default}`` and ``${VAR:=x}`` are not SPEC's forms: refused, not guessed.
_REF = re.compile(_VAR.pattern + r"|\$\{[^}\n]*\}?")


Used = list[tuple[str, str]]  # (variable, value) pairs that went into a text
Loc = tuple[int | str, ...]


def expand_env(text: str, env: Mapping[str, str], unset: list[str] | None = None, used: Used | None = None,
               secret: bool = False, reload_at: Loc | None = None) -> str:  # fmt: skip
    """Replace ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?why}``. An unset ``${VAR}`` is an
    error, and so is an unset or empty ``${VAR:?why}`` (a key that must not be blank: an empty
    api_key would mean "forward the client's credential").

    With ``unset`` given, each problem is appended to it as a line instead of raising, so that
    every missing variable can be reported at once; with ``used`` given, each variable whose
    value went into the text is appended as (name, value). ``secret``: the text fills a field
    that holds a credential. ``reload_at``: the field's place, on a reload (None at start-up),
    whose advice for a variable not set is its own (``_reload_advice``).
    """

    def sub(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if name is None:
            problem = f"`{m.group(0)}` is not a variable reference: write ${{VAR}} or ${{VAR:-default}}"
            if unset is None:
                raise ConfigError(problem)
            unset.append(problem)
            return ""
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
            if reload_at is not None and name not in env:
                problem += f" ({_reload_advice(reload_at, secret or _secret(name))})"
        elif name in env:
            return ""
        elif reload_at is not None:
            advice = _reload_advice(reload_at, secret or _secret(name))
            problem = f"environment variable {name} is not set ({advice})"
        else:
            problem = _unset_message(name, secret)
        if unset is None:
            raise ConfigError(problem)
        unset.append(problem)
        return ""

    return _REF.sub(sub, text)


def _unset_message(name: str, secret: bool = False) -> str:
    if secret or _secret(name):
        # A default for a key is a key in the config file, shared by whoever reads it.
        return (f"environment variable {name} is not set (it holds a secret, which has no default: "
                "set it in the gateway's environment)")  # fmt: skip
    return f"environment variable {name} is not set (use ${{{name}:-default}})"


def _reload_advice(loc: Loc, secret: bool) -> str:
    """What to do about a variable a reload cannot read. A reload reads the environment the
    process started with (os.environ, which nothing outside the process changes): start-up's
    "set it in the gateway's environment" could not be followed without a restart, and the
    documented rotation (a new key's variable beside the old one's) was refused (audit)."""
    started = "a reload reads the environment the process started with"
    if loc[:1] == ("keys",) and "key" in loc:  # a key may be given by its digest, which is no secret
        return f"{started}: put the key's key_sha256 (or the key) in the file, or restart"
    if secret:
        return f"{started}: put the value in the file, or restart with it set"
    return f"{started}: put the value in the file (or a default), or restart with it set"

def _expand_tree(node: Any, env: Mapping[str, str], unset: list[str], origins: dict[Loc, Used],
                 loc: Loc = (), failed: set[Loc] | None = None, reload: bool = False) -> Any:  # fmt: skip
    """``node`` with its variables expanded; ``origins`` learns which variables filled which
    field, so that an error on that field can name them (the file only says ``${VAR}``). A
    variable that cannot fill its field is reported under the field, as every other problem is;
    ``failed`` learns those fields, whose value (empty where the variable was) is not the
    problem to report. ``reload``: a reload's, whose unset variables are worded for it."""
    # Expanding after YAML parsing keeps a secret containing ':' or '#' from changing the YAML.
    if isinstance(node, str):
        used: Used = []
        problems: list[str] = []
        field = next((part for part in reversed(loc) if isinstance(part, str)), "")
        out = expand_env(node, env, problems, used, secret=_secret(field), reload_at=loc if reload else None)
        unset.extend(f"{_field_path(loc)}: {p}" for p in problems)
        if problems and failed is not None:
            failed.add(loc)
        if used:
            origins[loc] = used
        return out
    if isinstance(node, list):
        return [_expand_tree(x, env, unset, origins, (*loc, i), failed, reload) for i, x in enumerate(node)]
    if isinstance(node, dict):
        return {k: _expand_tree(v, env, unset, origins, (*loc, k), failed, reload) for k, v in node.items()}
    return node


# A variable or field so named holds a credential: its value is never printed.
_SECRET_WORDS = ("KEY", "SECRET", "TOKEN", "PASSW", "CREDENTIAL", "AUTH")


def _secret(name: str) -> bool:
    return any(w in name.upper() for w in _SECRET_WORDS)


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


def _without_index(loc: Loc) -> Loc:
    while loc and isinstance(loc[-1], int):
        loc = loc[:-1]
    return loc


def _describe(err: ValidationError, origins: Mapping[Loc, Used] | None = None,
              unset: Iterable[Loc] = ()) -> list[str]:  # fmt: skip
    """One line per problem; none for a field a variable could not fill (``unset``): that is
    reported already, and what it left there ("must be printable ASCII") is not the cause."""
    errors = _unknown_keys_first(list(err.errors()))
    # Every problem's place, the unset ones' among them: a list whose item an unset variable
    # spoilt is too short only because of it (an unset ${HOST} in the one upstream's base_url
    # also said "upstreams: must have at least 1 item(s)", an operations audit found).
    every = [tuple(e["loc"]) for e in errors]
    # An item of a list (a rotated key's values) is checked with its list: the field is the list.
    gone = [_without_index(f) for f in unset]
    errors = [e for e in errors if not any(tuple(e["loc"])[: len(f)] == f for f in gone)]
    locs = [tuple(e["loc"]) for e in errors]
    out: list[str] = []
    unions: set[Loc] = set()
    for e, loc in zip(errors, locs, strict=True):
        if e["type"] == "too_short" and any(other[: len(loc)] == loc and other != loc for other in every):
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


class _Loader(yaml.SafeLoader):
    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> datetime.date:
        # A plain scalar shaped like a date is read as one, anywhere: 2026-13-01 made
        # datetime raise a bare ValueError, which no YAMLError handler caught (a traceback at
        # start-up, a reload task dying unseen). Said as YAML's other mistakes are, with its place.
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError as e:
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is not a date ({e}); quote it if it is not meant as one",
                node.start_mark,
            ) from None


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _Loader.construct_yaml_timestamp)


def parse_config(text: str, env: Mapping[str, str] | None = None, source: str = "config", *,
                 reload: bool = False) -> GatewayConfig:  # fmt: skip
    """``reload``: parsed by a running process, whose environment is the one it started with."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        repeated = _repeated_keys(node) if node is not None else []
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{source}: invalid YAML{where}: {problem}") from None
    except (ValueError, TypeError, OverflowError) as e:  # a constructor's own error: no place known
        raise ConfigError(f"{source}: invalid YAML: {e}") from None
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of sections")
    unset: list[str] = []
    origins: dict[Loc, Used] = {}
    failed: set[Loc] = set()
    data = _expand_tree(data, os.environ if env is None else env, unset, origins, failed=failed,
                        reload=reload)  # fmt: skip
    problems = repeated + list(dict.fromkeys(unset))
    try:
        cfg = GatewayConfig.model_validate(data)
    except ValidationError as e:
        problems += _describe(e, origins, failed)
        # GatewayConfig's cross-section checks do not run once a field fails: run them on what
        # was written, so that an unknown fallback is not learnt one restart after a bad port.
        sections = [data.get(k) for k in ("upstreams", "pools")]
        crossed = reference_problems(*(s if isinstance(s, list) else [] for s in sections))
        problems += [p for p in crossed if p not in problems]
    if problems:
        raise ConfigError(*problems) from None
    return cfg


def _repeated_keys(root: yaml.Node) -> list[str]:
    """Every key a mapping of the file gives more than once, as one problem each, with its lines.
    YAML keeps the last of them without a word, so ``server: {port: 1}`` and, further down,
    ``server: {port: 2}`` served on port 2; a repeat is refused as an unknown key is. A key that
    a merge (``<<: *anchor``) brings in and the mapping then sets is no repeat: that is what a
    merge is for."""
    problems: list[str] = []
    seen: set[int] = set()  # an anchor's node is met again wherever it is used

    def walk(node: yaml.Node, loc: Loc) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*loc, i))
        elif isinstance(node, yaml.MappingNode):
            lines: dict[tuple[str, str], list[int]] = {}
            for key, _ in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    lines.setdefault((key.tag, key.value), []).append(key.start_mark.line + 1)
            for (_, name), at in lines.items():
                if len(at) > 1:
                    where = f"line {at[0]}" if len(set(at)) == 1 else f"lines {_listed(at)}"
                    times = "twice" if len(at) == 2 else f"{len(at)} times"
                    problems.append(f"{_field_path((*loc, name))}: given {times} ({where}); "
                                    "YAML keeps only the last, so remove or merge one")  # fmt: skip
            for key, value in node.value:
                walk(value, (*loc, key.value) if isinstance(key, yaml.ScalarNode) else loc)

    walk(root, ())
    return problems


def _listed(numbers: list[int]) -> str:
    shown = [str(n) for n in dict.fromkeys(numbers)]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


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
