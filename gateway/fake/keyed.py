"""The fake's per-key limits and states (:mod:`gateway.fake.limits`) as each API says them.

Headers: chat completions and Responses answer with OpenAI's ``x-ratelimit-{limit,remaining,
reset}-{requests,tokens}`` (resets as Go durations, ``6m0s``, ``20ms``: OpenAI's rate-limit
guide); Messages with Anthropic's ``anthropic-ratelimit-{requests,tokens}-{limit,remaining,
reset}`` (resets as RFC 3339 instants: Anthropic's rate-limit docs), on every answer; a 429
adds ``retry-after`` in whole seconds (an OpenAI one may go without: ``KeyLimits.retry_after``). Bodies are the real ones, as tests/corpus quotes them
with their sources: OpenAI's ``rate_limit_exceeded`` / ``insufficient_quota`` /
``invalid_api_key``, Anthropic's ``rate_limit_error`` / credit balance / ``invalid x-api-key``.
The Gemini API sends no rate-limit headers at all; its 429 says the wait in a RetryInfo
``retryDelay`` and the quota in a QuotaFailure (bodies in :mod:`gateway.fake.gemini`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from gateway.fake import gemini
from gateway.fake.chat import estimate_tokens
from gateway.fake.limits import Snapshot, Verdict
from gateway.fake.messages import anthropic_error
from gateway.fake.responses import responses_error
from gateway.fake.steps import Reply

Dialect = Literal["openai", "anthropic", "google"]
ORG = "org-fakeupstream0000000000"  # OpenAI names the organization in its rate-limit messages
NOMINAL_RPM = 60  # what a 429 states as the limit of a key limited by hand but given no rpm


def credential_of(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> str | None:
    """The key a request carries: Anthropic's ``x-api-key``, Azure's ``api-key``, Google's
    ``x-goog-api-key`` or ``?key=``, or a bearer token."""
    for name in ("x-api-key", "api-key", "x-goog-api-key"):
        if value := headers.get(name, "").strip():
            return value
    if query and (key := query.get("key", "").strip()):
        return key
    return bearer(headers)


def key_places(headers: Mapping[str, str], query: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Where a request carried a key, for the log: a client (or gateway) that puts Google's
    key in the URL, where proxies and access logs keep it, shows as ``?key=``."""
    places = [name for name in ("x-api-key", "api-key", "x-goog-api-key") if headers.get(name, "").strip()]
    if query and query.get("key", "").strip():
        places.append("?key=")
    if bearer(headers) is not None:
        places.append("Authorization")
    return tuple(places)


def bearer(headers: Mapping[str, str]) -> str | None:
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return None


def dialect_of(path: str) -> Dialect:
    if gemini.method_of(path) is not None:
        return "google"
    return "anthropic" if path.endswith(("/messages", "/messages/count_tokens")) else "openai"


def request_tokens(payload: dict[str, Any]) -> int:
    """The fake's estimate of a request's input, for chat, Messages, Responses and Gemini alike."""
    if "contents" in payload and "messages" not in payload:
        return gemini.estimate_tokens(payload)
    if "input" in payload and "messages" not in payload:
        items = payload.get("input")
        payload = {"messages": items if isinstance(items, list) else [{"content": items}],
                   "system": payload.get("instructions")}  # fmt: skip
    return estimate_tokens(payload)


def go_duration(seconds: float) -> str:
    """Seconds as Go's time.Duration prints them, to the millisecond: ``20ms``, ``1.5s``, ``6m0s``."""
    ms = math.ceil(round(seconds * 1000, 6))  # never report a reset sooner than it is
    if ms <= 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def rfc3339(epoch_s: float) -> str:
    """An instant as Anthropic writes its resets: whole seconds, UTC, rounded up (never early)."""
    return datetime.fromtimestamp(math.ceil(epoch_s - 1e-6), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rate_headers(dialect: Dialect, snap: Snapshot | None, now: float, limited_s: float = 0.0,
                 rpm: int | None = None) -> dict[str, str]:  # fmt: skip
    """The rate-limit headers for one answer; ``limited_s`` > 0: the key is limited that long."""
    out: dict[str, str] = {}
    rows: list[tuple[str, int | None, int, float]] = []  # kind, limit, remaining, seconds to full
    if snap is not None and snap.requests is not None:
        b = snap.requests
        rows.append(("requests", b.capacity, 0 if limited_s else b.remaining(), max(limited_s, b.full_in())))
    elif limited_s:
        rows.append(("requests", rpm, 0, limited_s))
    if snap is not None and snap.tokens is not None:
        rows.append(("tokens", snap.tokens.capacity, snap.tokens.remaining(), snap.tokens.full_in()))
    if dialect == "google":
        return out
    for kind, limit, remaining, full_in in rows:
        if dialect == "anthropic":
            if limit is not None:
                out[f"anthropic-ratelimit-{kind}-limit"] = str(limit)
            out[f"anthropic-ratelimit-{kind}-remaining"] = str(remaining)
            out[f"anthropic-ratelimit-{kind}-reset"] = rfc3339(now + full_in)
        else:
            if limit is not None:
                out[f"x-ratelimit-limit-{kind}"] = str(limit)
            out[f"x-ratelimit-remaining-{kind}"] = str(remaining)
            out[f"x-ratelimit-reset-{kind}"] = go_duration(full_in)
    return out


def _mask(key: str) -> str:
    # OpenAI echoes the start and end of a wrong key, the middle starred.
    return f"{key[:3]}***{key[-3:]}" if len(key) > 8 else "***"


def refusal(dialect: Dialect, v: Verdict, key: str | None, model: str, limit: int | None,
            retry_after: bool = True) -> Reply:  # fmt: skip
    """The answer a refused request gets (without the rate-limit headers, added by the caller).
    ``retry_after``: False, an OpenAI 429 goes without it (``KeyLimits.retry_after``)."""
    wait = max(1, math.ceil(v.wait_s - 1e-6))  # retry-after is whole seconds; 0 would mean "now"
    says = v.reason in ("limited", "requests", "tokens") and (retry_after or dialect == "anthropic")
    headers = {"retry-after": str(wait)} if says else {}
    if dialect == "google":
        return _google_refusal(v, model, limit)
    if dialect == "anthropic":
        if v.reason == "revoked":
            reply = anthropic_error(401, "authentication_error", "invalid x-api-key")
        elif v.reason == "exhausted":
            reply = anthropic_error(400, "invalid_request_error", "Your credit balance is too low to access "
                                    "the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.")
        else:  # a 429 body that states no numbers (claude-code#26247 in tests/corpus/anthropic.json)
            reply = anthropic_error(429, "rate_limit_error",
                                    "This request would exceed your account's rate limit. Please try again later.")
    elif v.reason == "revoked":
        reply = responses_error(401, f"Incorrect API key provided: {_mask(key or '')}. You can find your "
                                "API key at https://platform.openai.com/account/api-keys.",
                                "invalid_request_error", "invalid_api_key")
    elif v.reason == "exhausted":
        reply = responses_error(429, "You exceeded your current quota, please check your plan and billing "
                                "details. For more information on this error, read the docs: "
                                "https://platform.openai.com/docs/guides/error-codes/api-errors.",
                                "insufficient_quota", "insufficient_quota")
    elif v.reason == "too_large":
        reply = responses_error(429, f"Request too large for {model} in organization {ORG} on tokens per min "
                                f"(TPM): Limit {limit}, Requested {v.requested}. The input or output tokens "
                                "must be reduced in order to run successfully. Visit "
                                "https://platform.openai.com/account/rate-limits to learn more.",
                                "tokens", "rate_limit_exceeded")
    else:
        tokens = v.reason == "tokens"
        what = "tokens per min (TPM)" if tokens else "requests per min (RPM)"
        used = f"Used {v.used}, Requested {v.requested}" if tokens else f"Used {limit}, Requested 1"
        reply = responses_error(429, f"Rate limit reached for {model} in organization {ORG} on {what}: "
                                f"Limit {limit}, {used}. Please try again in {go_duration(v.wait_s)}. "
                                "Visit https://platform.openai.com/account/rate-limits to learn more.",
                                "tokens" if tokens else "requests", "rate_limit_exceeded")
    reply.headers.update(headers)
    return reply


def _google_refusal(v: Verdict, model: str, limit: int | None) -> Reply:
    """Google's words: no retry-after header, the wait in RetryInfo (none for a request that
    never fits the tokens limit, however long one waits)."""
    if v.reason == "revoked":
        return gemini.invalid_key()
    if v.reason == "exhausted":
        return gemini.out_of_quota(model)
    tokens = v.reason in ("tokens", "too_large")
    wait = 0.0 if v.reason == "too_large" else v.wait_s
    return gemini.rate_limited(model, wait, limit, "tokens" if tokens else "requests")


def missing_key(dialect: Dialect) -> Reply:
    if dialect == "google":
        return gemini.missing_key()
    if dialect == "anthropic":  # as quoted in n8n-io/n8n#37930
        return anthropic_error(401, "authentication_error", "x-api-key header is required")
    return responses_error(401, "You didn't provide an API key. You need to provide your API key in an "
                           "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or "
                           "as the password field (with blank username) if you're accessing the API from your "
                           "browser and are prompted for a username and password. You can obtain an API key "
                           "from https://platform.openai.com/account/api-keys.",
                           "invalid_request_error", None)  # as quoted in openai/openai-python#1434


# Anthropic's two kinds of credential, each taken in one place only. Its API keys
# (``sk-ant-api03-…``) go in x-api-key ("All requests to the Anthropic API must include an
# x-api-key header with your API key": https://docs.anthropic.com/en/api/overview); sent as a
# bearer token, one is refused with 401 {"type":"error","error":{"type":"authentication_error",
# "message":"Invalid bearer token"}} (POST https://api.anthropic.com/v1/messages with an
# sk-ant-api03 key as the bearer token, alibaba/open-code-review#71). Its OAuth access tokens
# (``sk-ant-oat01-…``, Claude Code's subscription login) are the bearer tokens it takes; sent
# in x-api-key, Anthropic "rejects with 'invalid x-api-key'" (BerriAI/litellm#21039).
ANTHROPIC_KEY_PREFIX = "sk-ant-api"
ANTHROPIC_OAUTH_PREFIX = "sk-ant-oat"


def misplaced_anthropic_credential(headers: Mapping[str, str]) -> Reply | None:
    """Anthropic's 401 for a credential of one kind alone in the other kind's place; None otherwise."""
    key = headers.get("x-api-key", "").strip()
    token = bearer(headers)
    if token is not None and not key and token.startswith(ANTHROPIC_KEY_PREFIX):
        return anthropic_error(401, "authentication_error", "Invalid bearer token")
    if key.startswith(ANTHROPIC_OAUTH_PREFIX) and token is None:
        return anthropic_error(401, "authentication_error", "invalid x-api-key")
    return None


def missing_version() -> Reply:
    # As quoted in envoyproxy/ai-gateway#1909 and PipedreamHQ/pipedream#9697.
    return anthropic_error(400, "invalid_request_error", "anthropic-version: header is required")


# OpenAI's answer to a body that does not parse, as quoted in ChatGPTNextWeb/NextChat#4064 and
# chatboxai/chatbox#812 (400, type invalid_request_error, param and code null).
OPENAI_UNPARSEABLE = (
    "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your "
    "HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not valid JSON. "
    "If you have trouble figuring out how to fix this, please contact us through our help center at "
    "help.openai.com.)"
)


# OpenAI's POST endpoints and what another method on them gets. GET on chat completions lists
# the stored ones (the OpenAPI spec's ChatCompletionList: object, data, first_id, last_id,
# has_more); anything else is a 404 "Invalid URL (GET /v1/chat/completions)", as quoted in
# bug reports of clients that sent a POST as a GET (orcarouter's base_url note: a 302 turning
# the POST into a GET "triggering 'Invalid URL (GET /v1/chat/completions)' 404").
OPENAI_POST_ONLY = ("/chat/completions", "/completions", "/responses", "/embeddings")


def wrong_method(method: str, path: str) -> Reply | None:
    """OpenAI's answer to ``method`` on one of its POST endpoints; None for a POST, or for a
    path that is not one of them."""
    if method == "POST" or not path.endswith(OPENAI_POST_ONLY):
        return None
    if method == "GET" and path.endswith("/chat/completions"):
        return Reply(200, {"object": "list", "data": [], "first_id": None, "last_id": None, "has_more": False})
    return responses_error(404, f"Invalid URL ({method} {path})", "invalid_request_error", None)


def not_json(dialect: Dialect, problem: str | None) -> Reply:
    """A body that is not a JSON object, refused with a 400 as the API refuses it (a Gemini
    method checks its body itself: ``FakeUpstream._gemini``). ``problem``:
    the parser's complaint, None when the body parsed but is not an object (an array, say),
    whose wording here is the fake's own; the status and error type are the APIs'."""
    if dialect == "anthropic":
        # "The request body is not valid JSON: no low surrogate in string: line 1 column 54841
        # (char 54840)", as quoted in a Claude Code bug report (okik25/claude-code#37).
        detail = f"The request body is not valid JSON: {problem}" if problem else "The request body must be a JSON object"
        return anthropic_error(400, "invalid_request_error", detail)
    return responses_error(400, OPENAI_UNPARSEABLE if problem else "The request body must be a JSON object",
                           "invalid_request_error", None)  # fmt: skip
