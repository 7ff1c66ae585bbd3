"""classify(status, headers, body) → Classification: what an upstream error *is*.

Precedence, first match wins (each step is a small rule table below):

1. No response at all (connect error, reset, timeout) → ``provider_unavailable``.
2. ``context_overflow`` by code or wording, on any error status — llama.cpp once sent it as
   a 500, Groq sends a too-large-for-TPM request as 413 — unless the wording is about
   request *bytes* (``request_too_large``, "string too long"), which no compression fixes.
3. ``budget``: 402, quota / billing / credit codes and wording on any 4xx (Anthropic says
   "credit balance is too low" with a 400, xAI "credits" with 403 or 429), Google
   per-day quotas, Bedrock ``ServiceQuotaExceededException``.
4. ``auth``: 401, 403, and key errors some providers send as 400 (Gemini ``API_KEY_INVALID``);
   never a 5xx, whatever its body says: the provider is failing, not the key.
5. ``provider_unavailable`` codes on 5xx, 408 and 429 (Bedrock ``ModelNotReadyException``
   is a 429; Anthropic ``overloaded_error`` a 529).
6. ``rate_limit``: 429 and throttling codes (Bedrock ``ThrottlingException`` may come as 400).
7. ``provider_unavailable``: 5xx, 529, 408.
8. everything else ``unknown``: 400, 404, 409, 413 byte limits, 422 ...

Real bodies for every rule, with where each was seen, live in ``tests/corpus/``. Pure: no
I/O, no clock (``now_s`` is passed in), and malformed bodies never raise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gateway.errors import Classification, ErrorType, TransportError
from gateway.policy.retry_after import reset_at_ms, server_wait_s

_SCAN_LIMIT = 64 * 1024  # error bodies are small; a huge one is scanned only at its head
_MESSAGE_LIMIT = 4096

# Codes / types / statuses / reasons, compared lowercased.
_OVERFLOW_CODES = {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
_BYTE_LIMIT_CODES = {"request_too_large", "string_above_max_length", "payload_too_large"}
_BUDGET_CODES = {
    "insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "insufficient_balance",
    "servicequotaexceededexception", "credit_limit", "payment_required",
}  # fmt: skip
_AUTH_CODES = {
    "invalid_api_key", "authentication_error", "permission_error", "api_key_invalid",
    "permission_denied", "unauthenticated", "accessdeniedexception", "unrecognizedclientexception",
    "unsupported_country_region_territory", "invalid_authentication", "account_deactivated",
}  # fmt: skip
_UNAVAILABLE_CODES = {
    "overloaded_error", "serviceunavailableexception", "modelnotreadyexception", "unavailable",
    "server_error", "api_error", "internal", "internalserverexception", "unavailable_error",
    "modelstreamerrorexception", "timeout", "deadline_exceeded",
}  # fmt: skip
_THROTTLE_CODES = {"throttlingexception", "rate_limit_exceeded", "rate_limit_error", "rate_limited"}
_RATE_CODES = _THROTTLE_CODES | {
    "too_many_requests", "tokens", "requests",
}  # fmt: skip

_OVERFLOW_TEXT = re.compile(
    r"maximum context length"  # OpenAI, Azure, vLLM, DeepSeek, Mistral, OpenRouter
    r"|context[ _]length[ _]exceeded"
    r"|prompt is too long"  # Anthropic (also via Bedrock / Vertex)
    r"|input is too long"  # Bedrock ValidationException
    r"|exceeds? (?:the )?(?:available |maximum )?context (?:size|length|window)"  # llama.cpp, Ollama, OpenAI
    r"|exceeds the maximum number of tokens allowed"  # Gemini
    r"|exceed context limit"  # Anthropic: input length and `max_tokens` exceed context limit
    r"|longer than the maximum model length"  # vLLM (newer)
    r"|maximum (?:prompt|input) length"  # xAI, vLLM
    r"|tokens \+ `?max_new_tokens`? must be <="  # TGI / Together
    r"|too large for model with \d+ maximum context"  # Mistral
    r"|context window (?:of this model|exceeded|is exceeded|limit)"
    r"|reduce the length of the messages"  # Groq's code-less variant
    r"|request too large for model .* tokens per minute"  # Groq 413: bigger than the TPM window
    r"|the model is loaded with context length of only"  # LM Studio
    r"|greater than the context length"  # LM Studio
    r"|exceeded (?:max )?context length"  # Ollama: prompt too long; exceeded max context length by N
    r"|exceeded model token limit"  # Kimi
    r"|context window exceeds limit"  # MiniMax
    r"|range of input length should be"  # DashScope / Qwen
    r"|configured context size is"
    r"|token count of \d+ exceeds the limit"  # GitHub Copilot
    r"|longer than the model'?s context length"
    r"|too many input tokens",  # not bare "too many tokens": Bedrock throttling says that
    re.IGNORECASE,
)
_BYTE_LIMIT_TEXT = re.compile(
    r"maximum allowed number of bytes|request entity too large|payload too large|string too long",
    re.IGNORECASE,
)
_BUDGET_TEXT = re.compile(
    r"exceeded your current quota"  # OpenAI insufficient_quota (Gemini reuses it per minute: see below)
    r"|credit balance|insufficient (?:credits|balance|funds)|out of credits|no credits"
    r"|(?:more|any) credits|purchase credits|spending limit|billing|payment required"
    r"|quota exceeded for .*per ?day|per day|daily (?:quota|limit)|monthly (?:quota|limit)",
    re.IGNORECASE,
)
_AUTH_TEXT = re.compile(r"api key not valid|invalid api key|incorrect api key", re.IGNORECASE)


def classify(
    status: int | None,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now_s: float,
    transport_error: TransportError | None = None,
) -> Classification:
    if transport_error is not None or status is None:
        return Classification.of(ErrorType.PROVIDER_UNAVAILABLE, provider_code=transport_error)
    doc = _parse(body)
    fields = _Fields.of(doc, body, headers)
    kind = _decide(status, fields, doc)
    wait = server_wait_s(
        headers, doc, now_s, rate_limit_resets=kind in (ErrorType.RATE_LIMIT, ErrorType.BUDGET)
    )
    return Classification.of(
        kind,
        retry_after_s=wait,
        reset_at_ms=reset_at_ms(wait, now_s) if wait is not None else None,
        provider_code=fields.primary_code,
        message=fields.message[:_MESSAGE_LIMIT] if fields.message else None,
    )


def _decide(status: int, f: _Fields, doc: Any) -> ErrorType:
    text = f.text
    # A 429 is about the rate, whatever it says about tokens, unless its code says overflow.
    if f.codes & _OVERFLOW_CODES or (status != 429 and _OVERFLOW_TEXT.search(text)):
        if not (f.codes & _BYTE_LIMIT_CODES or _BYTE_LIMIT_TEXT.search(text)) or _says_context(text):
            return ErrorType.CONTEXT_OVERFLOW
    if 400 <= status < 500 and _is_budget(status, f, doc):
        return ErrorType.BUDGET
    if status in (401, 403) or (status < 500 and (f.codes & _AUTH_CODES or _AUTH_TEXT.search(text))):
        return ErrorType.AUTH
    if f.codes & _UNAVAILABLE_CODES and not f.codes & _RATE_CODES and (status >= 500 or status in (408, 429)):
        return ErrorType.PROVIDER_UNAVAILABLE
    if status == 429 or f.codes & _THROTTLE_CODES:
        return ErrorType.RATE_LIMIT
    if status >= 500 or status == 408:
        return ErrorType.PROVIDER_UNAVAILABLE
    return ErrorType.UNKNOWN


def _says_context(text: str) -> bool:
    # A 413 whose message says the context window was exceeded is an overflow after all.
    return re.search(r"context (?:window|length|size)", text, re.IGNORECASE) is not None


def _is_budget(status: int, f: _Fields, doc: Any) -> bool:
    if status == 402 or f.codes & _BUDGET_CODES:
        return True
    google = _google_quota_period(doc)
    if google is not None:
        return google == "day"
    if f.codes & _THROTTLE_CODES:
        # An explicit rate-limit code wins over wording: OpenAI's "requests per day (RPD)"
        # limit is a rate limit with a long reset, answered at once with its reset time.
        return False
    return _BUDGET_TEXT.search(f.text) is not None


def _google_quota_period(doc: Any) -> str | None:
    """For Google's RESOURCE_EXHAUSTED with QuotaFailure details: "day" or "minute"."""
    err = doc.get("error") if isinstance(doc, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    if not isinstance(details, list):
        return None
    period = None
    for d in details:
        if not isinstance(d, dict) or not str(d.get("@type", "")).endswith("QuotaFailure"):
            continue
        for v in d.get("violations") or []:
            if not isinstance(v, dict):
                continue
            ident = f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}".lower()
            if "perday" in ident or "per_day" in ident or "daily" in ident:
                return "day"
            period = "minute"
    return period


def _parse(body: bytes) -> Any:
    head = body[:_SCAN_LIMIT]
    try:
        doc = json.loads(head)
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, list) and doc:
        doc = doc[0]  # Gemini's OpenAI-compatible errors come wrapped in a list
    return doc


class _Fields:
    """The parts of an error body that rules look at, dialect differences flattened."""

    __slots__ = ("codes", "message", "primary_code", "text")

    def __init__(self, codes: set[str], primary_code: str | None, message: str, text: str) -> None:
        self.codes = codes
        self.primary_code = primary_code
        self.message = message
        self.text = text

    @classmethod
    def of(cls, doc: Any, body: bytes, headers: Mapping[str, str]) -> _Fields:
        codes: list[str] = []
        messages: list[str] = []
        if isinstance(doc, dict):
            _collect(doc, codes, messages)
            err = doc.get("error")
            if isinstance(err, dict):
                _collect(err, codes, messages)
                meta = err.get("metadata")
                if isinstance(meta, dict) and isinstance(meta.get("raw"), str):
                    messages.append(meta["raw"])  # OpenRouter: the provider's own error, verbatim
                for d in err.get("details") or []:
                    if isinstance(d, dict) and isinstance(d.get("reason"), str):
                        codes.append(d["reason"])
            elif isinstance(err, str):
                messages.append(err)  # Ollama, TGI: {"error": "..."}
            if isinstance(doc.get("detail"), str):
                messages.append(doc["detail"])  # FastAPI-style servers
        amz = headers.get("x-amzn-errortype")
        if amz:
            codes.append(amz.split(":", 1)[0])
        message = " ".join(m for m in messages if m).strip()
        text = message or body[:_SCAN_LIMIT].decode("utf-8", "replace")
        primary = next((c for c in codes if c), None)
        return cls({c.lower() for c in codes if c}, primary, message, text)


def _collect(obj: dict[str, Any], codes: list[str], messages: list[str]) -> None:
    for key in ("code", "type", "status", "error_type", "__type", "reason"):
        value = obj.get(key)
        if isinstance(value, str) and value and value != "error":
            codes.append(value.rsplit("#", 1)[-1])  # Bedrock: "com.amazon...#ThrottlingException"
    msg = obj.get("message") or obj.get("Message")
    if isinstance(msg, str):
        messages.append(msg)
