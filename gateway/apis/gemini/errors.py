"""Errors in Google's envelope (google.rpc.Status as JSON, https://ai.google.dev/gemini-api/docs/troubleshooting
and https://cloud.google.com/apis/design/errors):

    {"error": {"code": <HTTP status>, "message": "...", "status": "<canonical code>",
               "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", ...},
                           {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}]}}

What Google's clients act on: the google-genai SDKs raise ``APIError`` from ``code``, ``message``
and ``status`` (an ``{"error": …}`` event inside a stream too); Gemini CLI waits what
``RetryInfo.retryDelay`` says on a 429 or 503 and retries, gives up on a 429 whose message
says ``limit: 0`` or whose QuotaFailure is per day, and reports a 404 as a missing model.
"""

from __future__ import annotations

import json
from typing import Any

from gateway.apis.base import ForeignError
from gateway.apis.common import overflow_numbers, per_minute_message, told_per_minute, upstream_detail
from gateway.errors import Classification, ErrorType

# HTTP status -> canonical code, as google/rpc/code.proto maps them ("HTTP Mapping" of each
# code; googleapis-common-protos). Every error in Google's envelope is answered with one of
# these statuses (``google_status``), so that ``code`` and ``status`` agree as in Google's own
# answers, save two the gateway keeps on purpose:
# * 402, a spent budget, as RESOURCE_EXHAUSTED: not 429, which every Gemini client retries;
# * 408, a body that did not arrive in time, as DEADLINE_EXCEEDED (what happened; no code maps
#   to 408): 504 would say the server timed out, and google-genai retries a 408 as it is
#   (``_api_client._RETRY_HTTP_STATUS_CODES``: 408, 429, 500, 502, 503, 504).
_STATUS = {
    400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 402: "RESOURCE_EXHAUSTED", 403: "PERMISSION_DENIED",
    404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 409: "ABORTED", 429: "RESOURCE_EXHAUSTED", 499: "CANCELLED",
    500: "INTERNAL", 501: "UNIMPLEMENTED", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED",
}  # fmt: skip
# The rest, as Google answers the same: a payload over its limit is a 400 INVALID_ARGUMENT
# ("Request payload size exceeds the limit: N bytes.", not 413), a body it cannot read one too;
# an upstream that failed (the gateway's 502) or shed load (529) is a 503 UNAVAILABLE.
_AS_GOOGLE = {413: 400, 415: 400, 502: 503, 529: 503}


def google_status(status: int) -> int:
    """The status an error with ``status`` is answered with in Google's envelope."""
    if status in _STATUS:
        return status
    return _AS_GOOGLE.get(status) or (500 if status >= 500 else 400)

# An upstream that is down, by the status it answered, as the Gemini API says it
# (https://ai.google.dev/gemini-api/docs/troubleshooting): 500 INTERNAL "An unexpected error
# occurred on Google's side", 503 UNAVAILABLE "The service may be temporarily overloaded or
# down", 504 DEADLINE_EXCEEDED. Overloaded or unavailable (a 503, 529, a proxy's 502, capacity
# said on a 429) is 503; timed out (504, 408) 504; any other failure the 500 INTERNAL it is.
_UNAVAILABLE = {429: 503, 502: 503, 503: 503, 529: 503, 408: 504, 504: 504}

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
DOMAIN = "llm-gateway"


def own_status(status: int, code: str) -> int:
    """The status a gateway-made error with ``code`` is answered with in Google's envelope.
    ``upstream_auth`` (the provider refused the gateway's own key; a 502 elsewhere), and
    ``pool_auth`` (every key of a pool refused so), is a 403
    PERMISSION_DENIED: as a 503 UNAVAILABLE, Gemini CLI retried it ten times over 3.5 minutes
    (``isRetryableError``: 429, 499 and every 5xx; measured with 0.61), and google-genai retries
    every 5xx too; a 403 is retried by neither, and its message says whose key it is."""
    if code in ("upstream_auth", "pool_auth"):
        return 403
    return google_status(status)


def passed_status(status: int, upstream_status: int | None, body: bytes) -> int:
    """The status an upstream's error, passed through untouched, is answered with: the one
    Google's envelope states as ``error.code`` where the gateway's rule would answer another
    (a spent per-day quota is Google's 429 RESOURCE_EXHAUSTED, which the gateway answers 402
    elsewhere because every SDK retries a 429). A body must not contradict its status, and
    Gemini clients read the quota's kind in the body: Gemini CLI stops on a per-day
    QuotaFailure (its TerminalQuotaError), and google-genai retries nothing unless told to
    (``_api_client.retry_args``: no retry options, "the 'never retry' stop strategy")."""
    if upstream_status is None or status == upstream_status:
        return status
    return upstream_status if _stated(body) == upstream_status else status


def _stated(body: bytes) -> int | None:
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None
    if isinstance(doc, list) and len(doc) == 1:  # the JSON-array framing's error
        doc = doc[0]
    err = doc.get("error") if isinstance(doc, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def status_name(status: int) -> str:
    return _STATUS[google_status(status)]


def retry_delay(seconds: float) -> str:
    """A google.protobuf.Duration in its JSON form: seconds with an ``s`` (``"30s"``, ``"1.5s"``)."""
    return f"{max(0.0, round(seconds, 3)):g}s"


def google_error(
    status: int,
    message: str,
    code: str,
    c: Classification,
    request_id: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The envelope; ``code`` (the gateway's or the provider's) goes in an ErrorInfo
    ``reason``, upper-cased as ErrorInfo asks, and the wait in a RetryInfo where there is one."""
    details: list[dict[str, Any]] = [{
        "@type": ERROR_INFO, "reason": _reason(code), "domain": DOMAIN,
        "metadata": {"code": code, "x_llm_error_type": c.type.value, "request_id": request_id},
    }]  # fmt: skip
    if c.retry_after_s is not None:
        details.append({"@type": RETRY_INFO, "retryDelay": retry_delay(c.retry_after_s)})
    err: dict[str, Any] = {
        "code": status, "message": message, "status": status_name(status), "details": details,
        "x_llm_error_type": c.type.value, "retryable": c.retryable,
    }  # fmt: skip
    if extra:
        err.update(extra)
    return {"error": err}


def gemini_error(status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
    return json.dumps(google_error(status, message, code, c, request_id)).encode()


def foreign_error(e: ForeignError, request_id: str) -> tuple[int, bytes]:
    """An upstream's error on a translated request, worded the way the Gemini API says it."""
    status, message = _terms(e)
    status = google_status(status)
    c = e.classification
    doc = google_error(status, message, c.provider_code or c.type.value, c, request_id,
                       {"x_llm_upstream": upstream_detail(e)})  # fmt: skip
    return status, json.dumps(doc).encode()


def _terms(e: ForeignError) -> tuple[int, str]:
    c = e.classification
    message = c.message or f"the upstream answered {e.upstream_status}"
    if c.type is ErrorType.CONTEXT_OVERFLOW and told_per_minute(e):
        return 400, per_minute_message(e, "maxOutputTokens")
    if c.type is ErrorType.CONTEXT_OVERFLOW:
        # The Gemini API's own overflow wording (a 400 INVALID_ARGUMENT).
        prompt, limit = overflow_numbers(e)
        return (
            400,
            f"The input token count ({prompt}) exceeds the maximum number of tokens allowed ({limit}).",
        )
    if c.type is ErrorType.RATE_LIMIT:
        return 429, message
    if c.type is ErrorType.BUDGET:
        return 402, message  # not 429: every Gemini client retries a 429
    if c.type is ErrorType.AUTH:
        return (403, message) if e.status == 403 else (401, message)
    if c.type is ErrorType.PROVIDER_UNAVAILABLE:
        return _UNAVAILABLE.get(e.status, 500), message
    return e.status, message


def _reason(code: str) -> str:
    out = "".join(ch if ch.isalnum() else "_" for ch in code.upper()).strip("_")
    return out or "UNKNOWN"
