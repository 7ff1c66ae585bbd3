"""classify(status, headers, body) → Classification: what an upstream error *is*, and why.

The class is decided from evidence, strongest first; the first piece of evidence that
decides wins and is recorded in ``Classification.evidence`` (and in the request's log line).
The steps are numbered as in ``docs/classification.md``:

0. **No response** (connect error, reset, timeout) → ``provider_unavailable``.
1. **Status 402** → ``budget``, whatever the body says.
2. **Provider codes and types that name one class**: ``context_length_exceeded``,
   ``insufficient_quota``, ``usage_limit_reached``, ``overloaded_error``,
   ``MODEL_CAPACITY_EXHAUSTED``, ``invalid_api_key``, byte-limit codes, Google QuotaFailure
   quota ids (per day or zero → budget, per minute → rate limit). Generic types that
   providers reuse for other classes (``rate_limit_error``, ``invalid_request_error``,
   ``server_error``) are *weak* and only read at step 7.
3. **Numbers in the body**: a request bigger than its limit (``Limit 6000, Requested 12328``)
   is an overflow; a limit's reset horizon (the wait the body or the ``retry-after`` / reset
   headers state, else the window the wording names) an hour or more away is a budget, less a
   rate limit; a quota of 0 is a budget.
4. **Headers**: a ``*-remaining`` of 0 marks a limit the body did not name.
5. **The request itself** (optional ``request=``): its estimated size against the upstream's
   ``context_window``, for bodies that say only "too large" or nothing.
6. **Wording by families of meaning** (``error_wording.py``): overflow, request bytes, an
   empty balance, a 5xx that blames the request, capacity, money, credentials, throttling.
7. **Weak codes**, then **the status**: 401/403 auth, 429 rate limit, 5xx/408/529
   provider unavailable (and Groq's 498, its flex tier at capacity), anything else unknown.

Why this order, with the cases that pin each step, is in ``docs/classification.md``; the
bodies are in ``tests/corpus/``. Pure: no I/O, no clock (``now_s`` is passed in), and
malformed bodies never raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gateway.errors import Classification, ErrorType, TransportError
from gateway.policy import error_numbers as numbers
from gateway.policy import error_wording as words
from gateway.policy import google_quota
from gateway.policy.error_fields import Fields, fields_of, parse
from gateway.policy.retry_after import refill_wait_s, reset_at_ms, server_wait_s
from gateway.sse import error_status

_MESSAGE_LIMIT = 4096

BUDGET, RATE, UNAVAILABLE = ErrorType.BUDGET, ErrorType.RATE_LIMIT, ErrorType.PROVIDER_UNAVAILABLE
OVERFLOW, AUTH, UNKNOWN = ErrorType.CONTEXT_OVERFLOW, ErrorType.AUTH, ErrorType.UNKNOWN

# Codes / types / reasons that name one class, compared lowercased.
_OVERFLOW_CODES = {
    "context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded",
    "tokens_limit_reached",
}  # fmt: skip
_BYTE_CODES = {"request_too_large", "string_above_max_length", "payload_too_large"}
_BUDGET_CODES = {
    "insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "insufficient_balance",
    "servicequotaexceededexception", "payment_required", "insufficient_credits", "usage_limit_reached",
    "arrearage", "exceeded_current_quota_error", "free_quota_exceeded", "quota_exceeded",
    "monthly_request_count", "3036", "budget_exceeded",
}  # fmt: skip
# Not "credit_limit": Together sends it with "Your rate limit is 60 queries per minute".
_AUTH_CODES = {
    "invalid_api_key", "authentication_error", "permission_error", "api_key_invalid",
    "permission_denied", "unauthenticated", "accessdeniedexception", "unrecognizedclientexception",
    "unsupported_country_region_territory", "invalid_authentication", "account_deactivated",
    "consumer_suspended", "consumer_invalid",
}  # fmt: skip
_CAPACITY_CODES = {
    "overloaded_error", "engine_overloaded_error", "model_capacity_exhausted",
    "serviceunavailableexception", "modelnotreadyexception", "3040", "capacity_exceeded",
}  # fmt: skip
_NOT_FOUND_CODES = {"model_not_found"}
# Statuses on which a capacity code or wording means "the provider is full": 5xx, and these.
# 498 is Groq's own: its flex tier "will fail quickly with status 498 and error
# capacity_exceeded. Add jittered backoff and retries" (console.groq.com/docs/flex-processing).
_WAIT_STATUSES = (408, 429, 498)
# Weak: generic types a provider also sends for other classes.
_UNAVAILABLE_CODES = {
    "unavailable", "server_error", "api_error", "internal", "internalserverexception", "unavailable_error",
    "modelstreamerrorexception", "timeout", "deadline_exceeded", "internal_error", "internal_server_error",
}  # fmt: skip
_THROTTLE_CODES = {
    "throttlingexception", "rate_limit_exceeded", "rate_limit_error", "rate_limited",
    "ratelimitexceeded", "request_limit_exceeded", "too_many_requests",
}  # fmt: skip
_REQUEST_INVALID_CODES = {"bad_input", "invalid_request_error", "badrequesterror"}


@dataclass(frozen=True, slots=True)
class RequestFacts:
    """What the gateway knows of the request that failed (step 5): all optional."""

    estimated_tokens: int | None = None
    context_window: int | None = None
    host: str | None = None  # the upstream's host name: whose documentation applies (_HOST_QUOTA_IS_RATE)
    output_tokens: int | None = None  # the most it may answer (max_tokens): metered at admission


# Hosts that answer their per-minute limits with OpenAI's quota wording, and document them as
# such: there a 429 "insufficient quota" is a rate limit, not money. Scaleway Generative APIs:
# 429 "You are exceeding your current quota ... calculated in requests [tokens] per minute"
# (scaleway.com/en/docs/generative-apis/api-cli/understanding-errors/), body "INSUFFICIENT QUOTA".
_HOST_QUOTA_IS_RATE = ("api.scaleway.ai",)


@dataclass(frozen=True, slots=True)
class _Evidence:
    """What the steps read, gathered once."""

    status: int
    f: Fields
    headers: Mapping[str, str]
    now_s: float
    quota: google_quota.GoogleQuota | None  # a Google QuotaFailure's reading


# A refusal of one model, not of the key: the provider names the model it refuses, singular.
# Bedrock's 403 "You don't have access to the model with the specified model ID."
# (tests/corpus/bedrock.json), OpenAI's 403 "You are not allowed to sample from this model"
# (a project limited to some models: open-webui/open-webui#2250) and its 400 "Your
# organization must be verified to stream this model" (tests/corpus). A key refused for all
# its models says so otherwise ("invalid x-api-key", "Access to Anthropic models is not
# allowed from ...").
_ONE_MODEL = re.compile(r"(?i)\b(?:this|the) model\b")
# A 404 naming the model as what is missing, in each provider's words (tests/corpus): OpenAI's
# code model_not_found ("The model `gpt-4` does not exist or you do not have access to it."),
# Azure's DeploymentNotFound ("The API deployment for this resource does not exist."),
# Anthropic's not_found_error "model: claude-3-opus-2099", Ollama's 'model "llama3" not found,
# try pulling it first'. Other 404s (a wrong path, a stored item gone) say nothing of the model.
# OpenAI says it with a 403 too, for a project not given the model: "Project `proj_…` does not
# have access to model `gpt-4o`", code model_not_found (Aider-AI/aider#604): a pool's key whose
# project lacks the model failed every conversation that landed on it (audit).
_MISSING_CODES = frozenset({"model_not_found", "DeploymentNotFound"})
_MODEL_MISSING = re.compile(
    r"(?i)^model: \S|^model \"[^\"]+\" not found|API deployment for this resource does not exist"
)


def classify(
    status: int | None,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now_s: float,
    transport_error: TransportError | None = None,
    request: RequestFacts | None = None,
) -> Classification:
    if transport_error is not None or status is None:
        kind = transport_error.value if transport_error is not None else "none"
        return Classification.of(UNAVAILABLE, provider_code=transport_error, evidence=f"transport:{kind}")
    doc = parse(body)
    f = fields_of(doc, body, headers)
    quota = google_quota.read(f)
    kind, evidence = _decide(_Evidence(status, f, headers, now_s, quota), request)
    # OpenAI and Anthropic send rate-limit reset headers on every response: they are a wait
    # only for a rate limit, or a 503 would inherit a 6-minute token-window reset, and a
    # key out of credit (Anthropic's 400 "credit balance is too low", OpenAI's 429
    # insufficient_quota, both sent with the request window's reset) would be taken for
    # funded again when the window refills, seconds later: a pool sat it out 1-7 s instead
    # of cooldowns.budget_s and called it again and again. A budget error takes the reset of
    # a window it spent (remaining 0), which is then the one that refused it.
    # A rate limit's reset headers are no wait of their own: they say when its window is full
    # again, not when this request fits (``refill_wait_s``, read last).
    resets = kind is BUDGET and bool(_spent_windows(headers))
    # A request too big for its window waits for nothing: Azure's "retry after 86400 seconds"
    # to one larger than its tokens-per-minute limit is no time it will fit (_by_numbers).
    wait = None if kind is OVERFLOW else server_wait_s(headers, doc, now_s, rate_limit_resets=resets)
    if wait is None and kind in (RATE, BUDGET):
        # No header says it, the body does: OpenAI's "Please try again in 20s." (a stream's error
        # event has no headers at all), Codex's resets_in_seconds. Left out, a pool sat the key
        # out for its 5 s default and met the same 429 again.
        stated = numbers.stated_wait_s(f.text, f.docs, now_s)
        wait = stated.seconds if stated is not None and stated.seconds > 0 else None
    if wait is None and kind is RATE:
        wait = refill_wait_s(headers, now_s, *_needs(request))
    if kind is BUDGET and quota is not None and quota.daily:
        # Google's per-day quota comes back at its midnight, not after the RetryInfo beside it
        # (google_quota): the wait and the reset the gateway states, and a pool's sit-out.
        wait = google_quota.next_day_s(now_s) - now_s
    return Classification.of(
        kind,
        retry_after_s=wait,
        reset_at_ms=reset_at_ms(wait, now_s) if wait is not None else None,
        provider_code=f.primary_code,
        message=f.message[:_MESSAGE_LIMIT] if f.message else None,
        evidence=evidence[:200],
        one_model=(kind is AUTH and f.message is not None and _ONE_MODEL.search(f.message) is not None)
        or (kind in (RATE, BUDGET) and quota is not None and quota.per_model),
        model_missing=status in (403, 404) and (f.primary_code in _MISSING_CODES or (
            f.message is not None and _MODEL_MISSING.search(f.message) is not None)),
        per_minute=kind is OVERFLOW and _PER_MINUTE_EVIDENCE.search(evidence) is not None,
    )


def classify_stream_event(payload: dict[str, Any], *, now_s: float) -> Classification:
    """An error event inside a stream (Anthropic ``event: error``, Responses ``response.failed``
    or ``error``, a chat chunk with ``error``), by the same rules as an HTTP error: its status is
    the one the event carries or its type stands for, else 500."""
    c = classify(error_status(payload) or 500, {}, json.dumps(payload).encode(), now_s=now_s)
    return replace(c, evidence=f"stream {c.evidence}")


def _decide(e: _Evidence, request: RequestFacts | None) -> tuple[ErrorType, str]:
    kind, evidence = _by_evidence(e, request)
    host = request.host if request is not None else None
    if kind is BUDGET and e.status == 429 and host and _is_host(host, _HOST_QUOTA_IS_RATE):
        if not words.BALANCE.search(e.f.text):  # an empty balance said outright is money anywhere
            return RATE, f"host:{host} documents its quota 429 as a per-minute limit ({evidence})"
    return kind, evidence


def _by_evidence(e: _Evidence, request: RequestFacts | None) -> tuple[ErrorType, str]:
    if e.status == 402:
        return BUDGET, "status:402"
    # Said in words that outrank any code: a refusal of this request's content (not the key's
    # fault, nor money's), and a caller's place not served (whatever the status).
    if 400 <= e.status < 500 and words.MODERATION.search(e.f.text):
        return UNKNOWN, "wording:content refused"
    if e.status >= 400 and words.REGION.search(e.f.text):
        return AUTH, "wording:place not served"
    for step in (_by_code, _by_numbers, _by_headers):
        verdict = step(e)
        if verdict is not None:
            return verdict
    if request is not None and (verdict := _by_request(e, request)) is not None:
        return verdict
    return _by_wording(e) or _by_weak_code(e) or _by_status(e.status)


def _is_host(host: str, domains: tuple[str, ...]) -> bool:
    host = host.lower().rstrip(".")
    return any(host == d or host.endswith("." + d) for d in domains)


def _by_code(e: _Evidence) -> tuple[ErrorType, str] | None:
    codes, status = e.f.codes, e.status
    if hit := codes & _BYTE_CODES:
        if words.CONTEXT_WORDS.search(e.f.text):
            return OVERFLOW, f"code:{_one(hit)}+context wording"
        return UNKNOWN, f"code:{_one(hit)} (request bytes)"
    if hit := codes & _OVERFLOW_CODES:
        return OVERFLOW, f"code:{_one(hit)}"
    if e.quota is not None:
        return e.quota.kind, e.quota.evidence
    if 400 <= status < 500 and (hit := codes & _BUDGET_CODES):
        return BUDGET, f"code:{_one(hit)}"
    if (status >= 500 or status in _WAIT_STATUSES) and (hit := codes & _CAPACITY_CODES):
        return UNAVAILABLE, f"code:{_one(hit)}"
    if 400 <= status < 500 and (hit := codes & _AUTH_CODES):
        # Anthropic-style APIs send permission_error with every 403, a plan gate or a spent
        # cap included: there the wording names the remedy, and it is money.
        if words.PLAN_GATE.search(e.f.text) or words.SPEND_CAP.search(e.f.text):
            return BUDGET, f"wording:plan or spending cap over code:{_one(hit)}"
        return AUTH, f"code:{_one(hit)}"
    if status < 500 and (hit := codes & _NOT_FOUND_CODES):
        return UNKNOWN, f"code:{_one(hit)}"
    return None


# The evidence of an overflow of a tokens-per-minute window (``Classification.per_minute``):
# each such verdict is one of _by_numbers', and its evidence names the window.
_PER_MINUTE_EVIDENCE = re.compile(r"^numbers:.*\bper-minute\b|^numbers:.*tokens-per-minute window")


def _by_numbers(e: _Evidence) -> tuple[ErrorType, str] | None:
    text, status = e.f.text, e.status
    sized = numbers.sizes(text)
    if sized is not None and status in (400, 413, 429):
        if sized.requested > sized.limit:
            window = "per-minute limit" if sized.per_minute else "limit"
            return OVERFLOW, f"numbers:requested {sized.requested} > {window} {sized.limit}"
    if words.WINDOW_OVERFLOW.search(text) and status in (413, 429):
        return OVERFLOW, "numbers:request larger than the tokens-per-minute window"
    if not _is_limit(e):
        return None
    if numbers.zero_limit(text):
        return BUDGET, "numbers:quota limit 0"
    horizon = _horizon(e)
    if horizon is None:
        return None
    if horizon.seconds >= numbers.BUDGET_HORIZON_S and status == 429 and words.TOKEN_RATE_LIMIT.search(text):
        # Azure's per-minute token limit asking a day ("Please retry after 86400 seconds"): a
        # minute's window that no wait refills for this request, so the request alone is bigger
        # than it, OpenAI's "Request too large ... Limit 30000, Requested 30601" without the
        # numbers: the same workload met both (vanderschaarlab/climb#1, Azure at 30k TPM, and
        # raising the TPM fixed it). As budget, one such request sat every deployment of its key
        # out for a day (audit).
        return OVERFLOW, f"numbers:a per-minute token limit asks {horizon.seconds:g}s: the request exceeds it"
    if horizon.seconds >= numbers.BUDGET_HORIZON_S:
        return BUDGET, f"horizon:{horizon.seconds:g}s ({horizon.source})"
    if status >= 500:
        return None  # a failing server that mentions a short window is still failing
    return RATE, f"horizon:{horizon.seconds:g}s ({horizon.source})"


def _by_headers(e: _Evidence) -> tuple[ErrorType, str] | None:
    # OpenAI and Anthropic send their window headers on every response: a 400 about the
    # request, or an outage, is not a rate limit because some window happens to be spent.
    if e.status not in (403, 429):
        return None
    exhausted = _spent_windows(e.headers)
    if exhausted:
        wait = server_wait_s(e.headers, None, e.now_s)
        if wait is not None and wait >= numbers.BUDGET_HORIZON_S:
            return BUDGET, f"header:{exhausted[0]}=0, resets in {wait:g}s"
        return RATE, f"header:{exhausted[0]}=0"
    return None


def _by_request(e: _Evidence, request: RequestFacts) -> tuple[ErrorType, str] | None:
    est = request.estimated_tokens
    if est is None or (e.status not in (400, 413, 422, 429) and e.status < 500):
        return None
    if request.context_window and est > request.context_window and (
        e.status == 413 or words.BYTES.search(e.f.text) or "too large" in e.f.text.lower() or not e.f.message
    ):
        return OVERFLOW, f"request:~{est} tokens > context_window {request.context_window}"
    return None


def _by_wording(e: _Evidence) -> tuple[ErrorType, str] | None:
    text, status = e.f.text, e.status
    if status != 429 and words.OVERFLOW.search(text):
        if words.BYTES.search(text) and not words.CONTEXT_WORDS.search(text):
            return UNKNOWN, "wording:request bytes"
        return OVERFLOW, "wording:overflow"
    if words.BYTES.search(text):
        return UNKNOWN, "wording:request bytes"
    if words.BALANCE.search(text):
        return BUDGET, "wording:empty balance"
    if status >= 500 and words.REQUEST_INVALID.search(text):
        return UNKNOWN, "wording:5xx blames the request"
    if (status >= 500 or status in _WAIT_STATUSES) and words.CAPACITY.search(text):
        return UNAVAILABLE, "wording:capacity"
    if 400 <= status < 500 and (words.SPEND_CAP.search(text) or words.PLAN_GATE.search(text)):
        return BUDGET, "wording:spending cap or plan gate"
    if 400 <= status < 500 and words.BUDGET.search(text):
        return BUDGET, "wording:money or plan"
    if 400 <= status < 500 and words.AUTH.search(text):
        return AUTH, "wording:credentials or account"
    if 400 <= status < 500 and words.THROTTLE.search(text) and status != 400:
        return RATE, "wording:throttled"
    return None


def _by_weak_code(e: _Evidence) -> tuple[ErrorType, str] | None:
    codes, status = e.f.codes, e.status
    if status >= 500 and (hit := codes & _REQUEST_INVALID_CODES):
        return UNKNOWN, f"code:{_one(hit)} on a {status}"
    throttled = codes & _THROTTLE_CODES
    if (status >= 500 or status in _WAIT_STATUSES) and (hit := codes & _UNAVAILABLE_CODES) and not throttled:
        return UNAVAILABLE, f"code:{_one(hit)}"
    if status < 500 and throttled:
        return RATE, f"code:{_one(throttled)}"
    return None


def _by_status(status: int) -> tuple[ErrorType, str]:
    if status in (401, 403):
        return AUTH, f"status:{status}"
    if status == 429:
        return RATE, "status:429"
    if status >= 500 or status in (408, 498):
        return UNAVAILABLE, f"status:{status}"
    return UNKNOWN, f"status:{status}"


def _is_limit(e: _Evidence) -> bool:
    """Whether the error is about a limit at all; only then does a reset horizon decide."""
    if e.status == 429 or e.f.codes & (_THROTTLE_CODES | _BUDGET_CODES):
        return True
    if e.status == 403:
        return bool(words.LIMIT.search(e.f.text))
    # On a 5xx only a day-long (or longer) allowance named in words counts ("500,000 per day"):
    # a failing server's prose mentions hours and limits for other reasons.
    named = numbers.named_window_s(e.f.text)
    daily = named is not None and named.seconds >= 86400
    return e.status >= 500 and daily and bool(words.LIMIT.search(e.f.text))


def _horizon(e: _Evidence) -> numbers.Horizon | None:
    stated = numbers.stated_wait_s(e.f.text, e.f.docs, e.now_s)
    if stated is not None:
        return stated
    # retry-after / retry-after-ms / RetryInfo are a wait for this error; the window reset
    # headers ride on every response and count only when their window is spent.
    wait = server_wait_s(e.headers, _first_doc(e.f), e.now_s, rate_limit_resets=False)
    if wait is not None:
        return numbers.Horizon(wait, "retry-after or RetryInfo")
    if _spent_windows(e.headers):
        wait = server_wait_s(e.headers, None, e.now_s)
        if wait is not None:
            return numbers.Horizon(wait, "reset header of a spent window")
    return numbers.named_window_s(e.f.text)


def _needs(request: RequestFacts | None) -> tuple[int, int]:
    """The input and output tokens a refused request needs of its windows (estimates)."""
    if request is None:
        return 0, 0
    return request.estimated_tokens or 0, request.output_tokens or 0


def _spent_windows(headers: Mapping[str, str]) -> list[str]:
    spent = [
        k for k, v in headers.items()
        if (k.endswith("-remaining") or k.startswith("x-ratelimit-remaining")) and v.strip() == "0"
    ]  # fmt: skip
    if headers.get("anthropic-ratelimit-unified-status", "").strip() == "rejected":
        spent.append("anthropic-ratelimit-unified-status")
    return spent


def _first_doc(f: Fields) -> Any:
    return f.docs[0] if f.docs else None


def _one(codes: frozenset[str] | set[str]) -> str:
    return sorted(codes)[0]
