"""classify(status, headers, body) → Classification: what an upstream error *is*.

Precedence, first match wins (each step reads the rule tables below):

1. No response at all (connect error, reset, timeout) → ``provider_unavailable``.
2. 402 → ``budget``, whatever the body says.
3. ``context_overflow`` by code or wording on any status but 429 (llama.cpp and Xinference
   have sent it as a 500, Groq as a 413), unless the wording is about request *bytes*
   (``request_too_large``, "string too long"), which no compression fixes. A 429 is an
   overflow only by code, or when one request is bigger than the whole per-minute window
   (OpenAI "Request too large ... on tokens per min"): no wait makes that request fit.
4. ``budget`` on a 4xx: quota / billing / credit codes and wording (Anthropic's "credit
   balance is too low" is a 400, xAI's credits message a 403 or 429), Google per-day or
   zero quotas, and a per-day / monthly throttle that names no wait (Bedrock "Too many
   tokens per day"). One that names a wait (OpenAI RPD "try again in 8.6s") is a
   sliding window: ``rate_limit``. An explicit balance message ("insufficient balance",
   "余额不足") outranks a throttle type: Z.ai sends it as ``rate_limit_error``.
5. ``budget`` on a 5xx only for that explicit balance wording (MiniMax answers an empty
   account with a 500 "insufficient balance (1008)"): no wait refills an account.
6. ``unknown`` for a 5xx whose body says the *request* is invalid (llama.cpp, llamafile,
   llama-cpp-python, KoboldCpp answer malformed requests with a 500): the same request
   fails the same way, so it is not retried and never counts toward the circuit breaker.
   A 500 that says only "Internal Server Error", names an OOM, a loading model or a bad
   sample from the model stays ``provider_unavailable``.
7. ``auth``: 401, 403, and key errors sent as 400 (Gemini ``API_KEY_INVALID``, xAI
   "Incorrect API key"); never a 5xx, whatever its body says.
8. ``provider_unavailable`` codes on 5xx, 408 and 429 (Bedrock ``ModelNotReadyException``
   is a 429; Anthropic ``overloaded_error`` a 529).
9. ``rate_limit``: 429 and throttling codes under any 4xx.
10. ``provider_unavailable``: 5xx, 529, 408.
11. everything else ``unknown``: 400, 404, 409, 413 byte limits, 422 ... A 400 that says
    "GenerateContentRequest", "sample_rate" or "retry" is not a rate limit.

Each rule, the question that decides it and its cases are written down in
``docs/classification.md``.

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

_PARSE_LIMIT = 1024 * 1024  # a JSON error body bigger than this is not an error body worth parsing
_SCAN_LIMIT = 64 * 1024  # the wording rules read at most this much text
_MESSAGE_LIMIT = 4096

# Codes / types / statuses / reasons, compared lowercased.
_OVERFLOW_CODES = {"context_length_exceeded", "exceed_context_size_error", "model_context_window_exceeded"}
_BYTE_LIMIT_CODES = {"request_too_large", "string_above_max_length", "payload_too_large"}
_BUDGET_CODES = {
    "insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "insufficient_balance",
    "servicequotaexceededexception", "payment_required", "insufficient_credits",
}  # fmt: skip
# Not "credit_limit": Together sends it with "Your rate limit is 60 queries per minute".
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
# Types that name the request as the fault; on a 5xx they outrank the status. KoboldCpp sends
# "bad_input" with a 500; OpenAI-style servers use "invalid_request_error" / vLLM "BadRequestError"
# only for the client's mistakes, so a server that pairs them with a 5xx still blames the request.
_REQUEST_INVALID_CODES = {"bad_input", "invalid_request_error", "badrequesterror"}

_OVERFLOW_TEXT = re.compile(
    r"maximum context length"  # OpenAI, Azure, vLLM, DeepSeek, OpenRouter, Fireworks
    r"|context[ _]length[ _]exceeded"
    r"|prompt is too long"  # Anthropic (also via Bedrock / Vertex / OpenRouter), Fireworks
    r"|input is too long"  # Bedrock ValidationException
    r"|exceeds? (?:the )?(?:available |maximum )?context (?:size|length|window|limit)"  # llama.cpp, OpenAI
    r"|exceeds the maximum number of tokens allowed"  # Gemini
    r"|longer than the maximum model length"  # vLLM (newer)
    r"|too long to fit into the model"  # vLLM: "The prompt (total length N) is too long to fit ..."
    r"|maximum (?:prompt|input) length"  # xAI, vLLM
    r"|maximum allowed input length"
    r"|tokens \+ `?max_new_tokens`? must be <="  # TGI / HF endpoints
    r"|too large for model with \d+ maximum context"  # Mistral
    r"|context window (?:of this model|exceeded|is exceeded|limit)"
    r"|reduce the length of the messages"  # Groq's code-less variant
    r"|the model is loaded with context length of only"  # LM Studio
    r"|greater than the context length"  # LM Studio
    r"|exceeded (?:max )?context length"  # Ollama: prompt too long; exceeded max context length by N
    r"|exceeded model token limit"  # Kimi
    r"|context window exceeds limit"  # MiniMax
    r"|range of input length should be"  # DashScope / Qwen
    r"|configured context size is"
    r"|token count of \d+ exceeds the limit"  # GitHub Copilot
    r"|longer than the (?:model'?s )?context length"  # Together, SGLang; Ollama "... currently available"
    r"|number of tokens \(prompt and prediction\) cannot exceed"  # Cohere
    r"|prompt exceeds max length"  # Zhipu / Z.ai code 1261
    r"|longer than the specified maximum sequence length"  # IBM watsonx
    r"|too many tokens in batch"  # Mistral embeddings
    r"|tokens exceed n_ctx"  # llama-box (GPUStack): "prefill N tokens exceed n_ctx_per_seq"
    r"|context size has been exceeded"  # llama.cpp (as a 500), LM Studio MLX
    r"|too many input tokens",  # not bare "too many tokens": Bedrock throttling says that
    re.IGNORECASE,
)
# One request bigger than the whole per-minute token window (OpenAI 429, Groq 413).
_WINDOW_OVERFLOW_TEXT = re.compile(r"request too large for .{0,200}? tokens per min", re.IGNORECASE)
_BYTE_LIMIT_TEXT = re.compile(
    r"maximum allowed number of bytes|request entity too large|payload too large|string too long"
    r"|exceeds the maximum size",
    re.IGNORECASE,
)
_BILLING_TEXT = re.compile(
    r"exceeded your current quota"  # OpenAI insufficient_quota; Gemini reuses it per minute too
    r"|credit balance|insufficient (?:credits|balance|funds|quota)|out of credits|no credits"
    r"|(?:more|any|available) credits|purchase credits|spending limit|spend limit|billing details"
    r"|payment required|plans & billing|余额不足|no resource package",
    re.IGNORECASE,
)
# A balance that is empty, said outright: outranks a throttle type and counts even on a 5xx.
_BALANCE_TEXT = re.compile(
    r"insufficient (?:balance|credits|funds)|credit balance is too low|余额不足", re.IGNORECASE
)
# A 5xx body that blames the request. Each is a server's own wording for a malformed request:
# pydantic request models and FastAPI body validation (llama-cpp-python, SGLang), nlohmann
# JSON type / parse errors while reading the request (llama.cpp, llamafile), llama-server's
# message checks, Jinja's role-order check. Response-side validation ("for ...Response",
# 'loc': ('response', ...)) is the server failing and is deliberately not matched.
_REQUEST_INVALID_TEXT = re.compile(
    r"validation errors? for \w*Request"
    r"|'loc': \(\s*'body'|\"loc\": ?\[\s*\"body\""
    r"|json\.exception\.(?:type_error|parse_error)"
    r"|expected '?content'? to be a string"
    r"|tools param requires --jinja"
    r"|response_format type must be"
    r"|failed to parse tool call arguments"
    r"|unsupported param"
    r"|conversation roles must alternate",
    re.IGNORECASE,
)
_PERIOD_QUOTA_TEXT = re.compile(r"\bper[ _]?day\b|\bdaily\b|\bmonthly\b", re.IGNORECASE)
_STATED_WAIT_TEXT = re.compile(r"(?:try again|retry) in \d", re.IGNORECASE)
_ZERO_LIMIT_TEXT = re.compile(r"\blimit: 0\b")  # Google: this plan has no quota for the model at all
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
    stated = server_wait_s(headers, doc, now_s)
    kind = _decide(status, fields, doc, stated is not None or bool(_STATED_WAIT_TEXT.search(fields.text)))
    # OpenAI and Anthropic send rate-limit reset headers on every response: they are a wait
    # only for a rate or quota error, or a 503 would inherit a 6-minute token-window reset.
    limited = kind in (ErrorType.RATE_LIMIT, ErrorType.BUDGET)
    wait = stated if limited else server_wait_s(headers, doc, now_s, rate_limit_resets=False)
    return Classification.of(
        kind,
        retry_after_s=wait,
        reset_at_ms=reset_at_ms(wait, now_s) if wait is not None else None,
        provider_code=fields.primary_code,
        message=fields.message[:_MESSAGE_LIMIT] if fields.message else None,
    )


def _decide(status: int, f: _Fields, doc: Any, stated_wait: bool) -> ErrorType:
    if status == 402:
        return ErrorType.BUDGET
    if _is_overflow(status, f):
        return ErrorType.CONTEXT_OVERFLOW
    if 400 <= status < 500 and _is_budget(status, f, doc, stated_wait):
        return ErrorType.BUDGET
    if status >= 500 and _BALANCE_TEXT.search(f.text):
        return ErrorType.BUDGET
    if status >= 500 and _blames_request(f):
        return ErrorType.UNKNOWN
    if status in (401, 403) or (status < 500 and (f.codes & _AUTH_CODES or _AUTH_TEXT.search(f.text))):
        return ErrorType.AUTH
    unavailable_code = f.codes & _UNAVAILABLE_CODES and not f.codes & _THROTTLE_CODES
    if unavailable_code and (status >= 500 or status in (408, 429)):
        return ErrorType.PROVIDER_UNAVAILABLE
    if status == 429 or f.codes & _THROTTLE_CODES:
        return ErrorType.RATE_LIMIT
    if status >= 500 or status == 408:
        return ErrorType.PROVIDER_UNAVAILABLE
    return ErrorType.UNKNOWN


def _is_overflow(status: int, f: _Fields) -> bool:
    text = f.text
    said = bool(f.codes & _OVERFLOW_CODES or _WINDOW_OVERFLOW_TEXT.search(text))
    if not said and (status == 429 or not _OVERFLOW_TEXT.search(text)):
        return False
    if f.codes & _BYTE_LIMIT_CODES or _BYTE_LIMIT_TEXT.search(text):
        # A 413 whose message says the context window was exceeded is an overflow after all.
        return re.search(r"context (?:window|length|size)", text, re.IGNORECASE) is not None
    return True


def _blames_request(f: _Fields) -> bool:
    """A 5xx whose body says the request itself is malformed: resending it cannot help."""
    return bool(f.codes & _REQUEST_INVALID_CODES or _REQUEST_INVALID_TEXT.search(f.text))


def _is_budget(status: int, f: _Fields, doc: Any, stated_wait: bool) -> bool:
    if f.codes & _BUDGET_CODES or _BALANCE_TEXT.search(f.text):
        return True
    google = _google_quota_is_budget(doc, f.text)
    if google is not None:
        return google
    throttled = status in (403, 429) or bool(f.codes & _THROTTLE_CODES)
    if throttled and not stated_wait and _PERIOD_QUOTA_TEXT.search(f.text):
        return True
    if f.codes & _THROTTLE_CODES:
        # An explicit rate-limit code outranks wording: Groq's 429 links to its billing page.
        return False
    return _BILLING_TEXT.search(f.text) is not None


def _google_quota_is_budget(doc: Any, text: str) -> bool | None:
    """Google RESOURCE_EXHAUSTED: True for a per-day or zero quota, False per-minute, None if not Google.

    Gemini says "You exceeded your current quota ... billing details" for both, so only the
    QuotaFailure violations tell them apart. A quota of 0 means the plan cannot use the model.
    """
    err = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(err, dict) or err.get("status") != "RESOURCE_EXHAUSTED":
        return None
    violations: list[dict[str, Any]] = []
    for d in _dicts(err.get("details")):
        if str(d.get("@type", "")).endswith("QuotaFailure"):
            violations.extend(_dicts(d.get("violations")))
    if not violations:
        return True if _ZERO_LIMIT_TEXT.search(text) else None
    for v in violations:
        ident = f"{v.get('quotaId', '')} {v.get('quotaMetric', '')}".lower()
        if "perday" in ident or "per_day" in ident or "daily" in ident or str(v.get("quotaValue")) == "0":
            return True
    return False


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []


def _parse(body: bytes) -> Any:
    try:
        doc = json.loads(body[:_PARSE_LIMIT])
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
                for d in _dicts(err.get("details")):
                    if isinstance(d.get("reason"), str):
                        codes.append(d["reason"])  # Google ErrorInfo: API_KEY_INVALID, ...
            elif isinstance(err, str):
                messages.append(err)  # Ollama, TGI, LM Studio, xAI: {"error": "..."}
            detail = doc.get("detail")
            if isinstance(detail, str):
                messages.append(detail)  # FastAPI-style servers (Xinference)
            elif isinstance(detail, dict):
                _collect(detail, codes, messages)  # KoboldCpp: {"detail": {"msg", "type"}}
            for item in _dicts(doc.get("errors")):
                _collect(item, codes, messages)  # IBM watsonx, Llama Stack: {"errors": [...]}
        amz = headers.get("x-amzn-errortype")
        if amz:
            codes.append(amz.split(":", 1)[0])
        message = " ".join(m for m in messages if m).strip()
        text = message[:_SCAN_LIMIT] or body[:_SCAN_LIMIT].decode("utf-8", "replace")
        primary = next((c for c in codes if c), None)
        return cls({c.lower() for c in codes if c}, primary, message, text)


def _collect(obj: dict[str, Any], codes: list[str], messages: list[str]) -> None:
    for key in ("code", "error_code", "type", "status", "error_type", "__type", "reason"):
        value = obj.get(key)
        if isinstance(value, str) and value and value != "error":
            codes.append(value.rsplit("#", 1)[-1])  # Bedrock: "com.amazon...#ThrottlingException"
    msg = obj.get("message") or obj.get("Message") or obj.get("msg")
    if isinstance(msg, str):
        messages.append(msg)
