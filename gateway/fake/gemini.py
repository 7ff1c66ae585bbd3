"""Gemini API bodies, streams and errors as the fake upstream sends them.

Shapes from Google's API reference (https://ai.google.dev/api/generate-content):
GenerateContentResponse is ``candidates[].content.{role: "model", parts}``, ``finishReason``,
``usageMetadata.{promptTokenCount, candidatesTokenCount, totalTokenCount,
thoughtsTokenCount, cachedContentTokenCount}``, ``modelVersion`` and ``responseId``; a
stream (``:streamGenerateContent?alt=sse``) is server-sent events separated by CRLF pairs,
each one whole GenerateContentResponse, usage and ``finishReason`` on the last, no end
marker; without ``alt=sse`` the same chunks go out as one JSON array written as it grows
(``[{…}\\r\\n,{…}]``). countTokens answers ``{"totalTokens", "promptTokensDetails"}``
(https://ai.google.dev/api/tokens).

Errors are ``{"error": {"code", "message", "status", "details"}}`` (google.rpc.Status,
https://ai.google.dev/gemini-api/docs/troubleshooting); on a JSON-array stream the same
envelope comes wrapped in an array, as quoted in google-gemini/gemini-cli#4504. The words are
the API's own, each as quoted with its source:

* 429 RESOURCE_EXHAUSTED per minute, QuotaFailure + RetryInfo ``retryDelay``: the body of
  RooCodeInc/Roo-Code#3883 (tests/corpus/google.json, gemini-per-minute-quota-is-rate-limit);
  out of quota for the day (the fake's "exhausted" key): diegosouzapw/OmniRoute#9504;
* 503 UNAVAILABLE "The model is overloaded. Please try again later." (lobehub/lobehub#9728);
* 400 INVALID_ARGUMENT "The input token count (N) exceeds the maximum number of tokens
  allowed (L)." (google-gemini/gemini-cli#4118);
* 400 INVALID_ARGUMENT "API key not valid. Please pass a valid API key." with ErrorInfo
  ``API_KEY_INVALID`` (Google's troubleshooting page);
* 403 PERMISSION_DENIED "Method doesn't allow unregistered callers …" for a request with no
  key (PublicAffairs/openai-gemini#92);
* 401 UNAUTHENTICATED "Request had invalid authentication credentials. Expected OAuth 2 access
  token …" for an ``Authorization`` header, which Google reads as an OAuth token even next to
  a valid ``key`` (cnpack/cnwizards#215, rohitaryal/imageFX-api#2).
"""

from __future__ import annotations

import json
import math
import re
import uuid
from typing import Any

from gateway.fake import structured
from gateway.fake.steps import Reply, Stream

MODEL = "gemini-2.5-flash"
QUOTA = "type.googleapis.com/google.rpc.QuotaFailure"
RETRY = "type.googleapis.com/google.rpc.RetryInfo"
HELP = "type.googleapis.com/google.rpc.Help"
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"
# The Gemini API's method paths, under both versions its clients call (the model may be
# "models/…"-less only: the path segment is the model's id). The method follows the segment's
# last colon, as in Google's path templates (a custom method is ":" and a verb at the end,
# https://google.aip.dev/136): a model named "qwen2.5:7b" is that model, as a translated
# request's is, not an unknown path.
_PATH = re.compile(r"/(v1beta|v1)/models/([^/]+):(generateContent|streamGenerateContent|countTokens)")
_QUOTA_TEXT = ("You exceeded your current quota, please check your plan and billing details. For more "
               "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.")  # fmt: skip


def method_of(path: str) -> tuple[str, str, str] | None:
    """(API version, model, method) of a Gemini API path; None for any other path."""
    m = _PATH.fullmatch(path)
    return (m.group(1), m.group(2), m.group(3)) if m else None


def usage(prompt: int = 12, answer: int = 7, thoughts: int = 0, cached: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {"promptTokenCount": prompt, "candidatesTokenCount": answer,
                           "totalTokenCount": prompt + answer + thoughts,
                           "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]}  # fmt: skip
    if thoughts:
        out["thoughtsTokenCount"] = thoughts
    if cached:
        out["cachedContentTokenCount"] = cached
    return out


def response(model: str = MODEL, parts: list[dict[str, Any]] | None = None, finish: str | None = "STOP",
             meta: dict[str, Any] | None = None, response_id: str = "fakeResp0001") -> dict[str, Any]:
    """One GenerateContentResponse; ``finish`` None for a stream's chunk before the last."""
    candidate: dict[str, Any] = {"content": {"parts": parts if parts is not None else
                                             [{"text": "Hello from the fake upstream."}], "role": "model"},
                                 "index": 0}  # fmt: skip
    if finish is not None:
        candidate["finishReason"] = finish
    doc: dict[str, Any] = {"candidates": [candidate]}
    if meta is not None:
        doc["usageMetadata"] = meta
    doc["modelVersion"] = model
    doc["responseId"] = response_id
    return doc


def answer(model: str = MODEL, text: str = "Hello from the fake upstream.", prompt: int = 12) -> dict[str, Any]:
    return response(model, [{"text": text}], "STOP", usage(prompt, max(1, len(text.split()))))


def stream_chunks(model: str = MODEL, words: tuple[str, ...] = ("Hello", " from", " fake."),
                  prompt: int = 11, finish: bool = True) -> list[dict[str, Any]]:
    """Each word a chunk; the last one with ``finishReason`` and ``usageMetadata`` (unless
    ``finish`` is False: a stream cut before its end)."""
    out = [response(model, [{"text": w}], None) for w in words]
    if finish and out:
        last = out[-1]["candidates"][0]
        last["finishReason"] = "STOP"
        out[-1] = {"candidates": [last], "usageMetadata": usage(prompt, len(words)),
                   "modelVersion": model, "responseId": "fakeResp0001"}  # fmt: skip
    return out


def stream(chunks: list[dict[str, Any]], framing: str, then: str = "eof") -> Stream:
    """``framing``: "sse-crlf" (``alt=sse``) or "json-array" (no ``alt``)."""
    return Stream(list(chunks), then=then, framing=framing,
                  headers={"Content-Type": "text/event-stream" if framing == "sse-crlf" else "application/json"})  # fmt: skip


def function_call(model: str, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The part of a call, with the id Gemini 3 gives each call and the opaque signature its
    thinking models attach to the part (https://ai.google.dev/gemini-api/docs/thought-signatures);
    and that id."""
    call_id = f"fc_{uuid.uuid4().hex[:12]}"
    signature = "ZmFrZS1zaWduYXR1cmUt" + uuid.uuid4().hex  # base64-looking, as the real ones are
    return {"functionCall": {"id": call_id, "name": name, "args": args}, "thoughtSignature": signature}, call_id


def json_answer(payload: dict[str, Any]) -> str | None:
    """The text of an answer to a request that asks for JSON (``generationConfig.responseMimeType:
    application/json``): the smallest document its ``responseJsonSchema`` / ``responseSchema``
    allows, else ``{}``; None when it asks for text. Gemini CLI's model router asks this of
    every "auto" turn and retries an answer that is not that JSON for over a minute (the
    document: structured.py, shared with the other APIs' fakes)."""
    config = payload.get("generationConfig") or payload.get("generation_config") or {}
    mime = config.get("responseMimeType") or config.get("response_mime_type") if isinstance(config, dict) else None
    if mime != "application/json":
        return None
    schema: dict[str, Any] = next((config[k] for k in ("responseJsonSchema", "response_json_schema", "responseSchema",
                                       "response_schema") if isinstance(config.get(k), dict)), {})  # fmt: skip
    return json.dumps(structured.instance(schema) if schema else {})


def sketch(payload: dict[str, Any]) -> str:
    """A request body's fields in the order sent, for the log: ``contents[N]`` and
    ``tools[N]`` with how many turns and function declarations, so a reader of the log sees
    what a client sent (or what a gateway left of it) without its text."""
    out = []
    for name, value in payload.items():
        if name == "contents" and isinstance(value, list):
            out.append(f"{name}[{len(value)}]")
        elif name == "tools" and isinstance(value, list):
            decls = sum(len(t.get("functionDeclarations") or t.get("function_declarations") or ())
                        for t in value if isinstance(t, dict))  # fmt: skip
            out.append(f"{name}[{decls}]")
        else:
            out.append(name)
    return " ".join(out)


def count(total: int) -> dict[str, Any]:
    return {"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}


def estimate_tokens(payload: dict[str, Any]) -> int:
    """The fake's 'tokenizer' for a Gemini request (3.5 characters a token, as for the others):
    contents, the system instruction and the tools."""
    parts = [payload.get(k) for k in ("contents", "systemInstruction", "system_instruction", "tools")]
    text = "".join(json.dumps(p) for p in parts if p)
    contents = payload.get("contents")
    return int(len(text) / 3.5) + 3 * (len(contents) if isinstance(contents, list) else 0)


# -- errors -------------------------------------------------------------------------------------

_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}  # fmt: skip


def error(code: int, message: str, details: list[dict[str, Any]] | None = None) -> Reply:
    err: dict[str, Any] = {"code": code, "message": message, "status": _STATUS.get(code, "UNKNOWN")}
    if details:
        err["details"] = details
    return Reply(code, {"error": err})


def retry_delay(seconds: float) -> str:
    # Whole seconds, as the API writes RetryInfo ("26s"); never 0, which would mean "now".
    return f"{max(1, math.ceil(seconds - 1e-6))}s"


def rate_limited(model: str, wait_s: float, limit: int | None = None, dimension: str = "requests") -> Reply:
    quota = ("GenerateContentInputTokensPerModelPerMinute-FreeTier" if dimension == "tokens"
             else "GenerateRequestsPerMinutePerProjectPerModel-FreeTier")  # fmt: skip
    metric = "input_token_count" if dimension == "tokens" else "requests"
    violation: dict[str, Any] = {"quotaMetric": f"generativelanguage.googleapis.com/generate_content_free_tier_{metric}",
                                 "quotaId": quota, "quotaDimensions": {"location": "global", "model": model}}  # fmt: skip
    if limit is not None:
        violation["quotaValue"] = str(limit)
    details: list[dict[str, Any]] = [
        {"@type": QUOTA, "violations": [violation]},
        {"@type": HELP, "links": [{"description": "Learn more about Gemini API quotas",
                                   "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
    ]  # fmt: skip
    if wait_s > 0:
        details.append({"@type": RETRY, "retryDelay": retry_delay(wait_s)})
    return error(429, _QUOTA_TEXT, details)


def out_of_quota(model: str) -> Reply:
    """The free tier's requests for the day are spent: a per-day QuotaFailure, a budget."""
    violation = {"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
                 "quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
                 "quotaDimensions": {"location": "global", "model": model}, "quotaValue": "20"}  # fmt: skip
    message = (f"{_QUOTA_TEXT[:-1]}. To monitor your current usage, head to: https://ai.dev/rate-limit. \n"
               f"* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, "
               f"limit: 20, model: {model}")  # fmt: skip
    return error(429, message, [{"@type": QUOTA, "violations": [violation]}])


def unavailable() -> Reply:
    return error(503, "The model is overloaded. Please try again later.")


def overflow(used: int, limit: int) -> Reply:
    return error(400, f"The input token count ({used}) exceeds the maximum number of tokens allowed ({limit}).")


def invalid_key() -> Reply:
    return error(400, "API key not valid. Please pass a valid API key.",
                 [{"@type": ERROR_INFO, "reason": "API_KEY_INVALID", "domain": "googleapis.com",
                   "metadata": {"service": "generativelanguage.googleapis.com"}}])  # fmt: skip


def missing_key() -> Reply:
    return error(403, "Method doesn't allow unregistered callers (callers without established identity). "
                      "Please use API Key or other form of API consumer identity to call this API.")  # fmt: skip


def bearer_refused() -> Reply:
    return error(401, "Request had invalid authentication credentials. Expected OAuth 2 access token, login "
                      "cookie or other valid authentication credential. See "
                      "https://developers.google.com/identity/sign-in/web/devconsole-project.")  # fmt: skip


def not_found(model: str, method: str, version: str = "v1beta") -> Reply:
    # The wording quoted in wwardaww/gnome-gemini-ai#22.
    return error(404, f"models/{model} is not found for API version {version}, or is not supported for {method}. "
                      "Call ListModels to see the list of available models and their supported methods.")  # fmt: skip


def model_entry(model: str) -> dict[str, Any]:
    """One Model as models.list and models.get describe it (https://ai.google.dev/api/models)."""
    return {"name": f"models/{model}", "version": "001", "displayName": model,
            "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
            "temperature": 1, "topP": 0.95, "topK": 64, "thinking": True}  # fmt: skip
