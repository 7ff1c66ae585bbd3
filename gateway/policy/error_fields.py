"""The parts of an upstream error body the classifier reads, dialect differences flattened.

Providers nest their errors differently (``{"error": {...}}``, ``{"type": "error", ...}``,
``{"detail": ...}``, a Google ``google.rpc.Status`` in a list, a Cloudflare ``errors`` array),
and relays wrap the provider's own body as a *string*: OpenRouter's ``metadata.raw``, clients
and gateways that put the provider's JSON in ``error.message``. A message that is itself JSON
is opened (a few levels deep) so the provider's own codes count like any other.

Pure: no I/O; malformed input never raises.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PARSE_LIMIT = 1024 * 1024  # a JSON error body bigger than this is not an error body worth parsing
SCAN_LIMIT = 64 * 1024  # the wording rules read at most this much text
_NESTED_DEPTH = 3
_CODE_KEYS = ("code", "error_code", "type", "status", "error_type", "__type", "reason")


@dataclass(frozen=True, slots=True)
class Fields:
    codes: frozenset[str]  # every code/type/status/reason, lowercased
    primary_code: str | None  # the first one, as sent: what the logs show
    message: str  # the messages joined: what compression parses for numbers
    text: str  # what the wording rules read: the message, or the raw body when there is none
    docs: tuple[dict[str, Any], ...]  # the body and every error object opened inside it


def parse(body: bytes) -> Any:
    try:
        doc = json.loads(body[:PARSE_LIMIT])
    except (ValueError, RecursionError):
        return None
    if isinstance(doc, list) and doc:
        doc = doc[0]  # Google's errors (and Gemini's OpenAI-compatible ones) come in a list
    return doc


def fields_of(doc: Any, body: bytes, headers: Mapping[str, str]) -> Fields:
    codes: list[str] = []
    messages: list[str] = []
    docs: list[dict[str, Any]] = []
    if isinstance(doc, dict):
        _walk(doc, codes, messages, docs, _NESTED_DEPTH)
    elif isinstance(doc, str):
        messages.append(doc)  # a body that is one JSON string (xAI's team messages)
    amz = headers.get("x-amzn-errortype")
    if amz:
        codes.append(amz.split(":", 1)[0])
    message = " ".join(m for m in messages if m).strip()
    text = message[:SCAN_LIMIT] or body[:SCAN_LIMIT].decode("utf-8", "replace")
    primary = next((c for c in codes if c), None)
    return Fields(frozenset(c.lower() for c in codes if c), primary, message, text, tuple(docs))


def dicts(value: Any) -> list[dict[str, Any]]:
    return [d for d in value if isinstance(d, dict)] if isinstance(value, list) else []


def _walk(
    doc: dict[str, Any], codes: list[str], messages: list[str], docs: list[dict[str, Any]], depth: int
) -> None:
    docs.append(doc)
    _collect(doc, codes, messages, docs, depth)
    err = doc.get("error")
    if isinstance(err, dict):
        docs.append(err)
        _collect(err, codes, messages, docs, depth)
        meta = err.get("metadata")
        if isinstance(meta, dict):
            raw = meta.get("raw")
            if isinstance(raw, dict):
                _walk(raw, codes, messages, docs, depth - 1)  # OpenRouter: the provider's error
            elif isinstance(raw, str):
                _text_or_json(raw, codes, messages, docs, depth)
        param = err.get("param")
        if isinstance(param, dict):
            _collect(param, codes, messages, docs, depth)  # Vercel AI Gateway: the provider's error here
        for d in dicts(err.get("details")):
            if isinstance(d.get("reason"), str):
                codes.append(d["reason"])  # Google ErrorInfo: API_KEY_INVALID, MODEL_CAPACITY_EXHAUSTED
        for item in dicts(err.get("errors")):
            if isinstance(item.get("reason"), str):
                codes.append(item["reason"])  # Google's legacy errors[]: rateLimitExceeded, forbidden
    elif isinstance(err, str):
        _text_or_json(err, codes, messages, docs, depth)  # Ollama, TGI, LM Studio, xAI
    detail = doc.get("detail")
    if isinstance(detail, str):
        messages.append(detail)  # FastAPI-style servers (Xinference)
    elif isinstance(detail, dict):
        _collect(detail, codes, messages, docs, depth)  # KoboldCpp: {"detail": {"msg", "type"}}
    for item in dicts(doc.get("errors")):
        _collect(item, codes, messages, docs, depth)  # watsonx, Llama Stack, Cloudflare v4
    response = doc.get("response")
    if isinstance(response, dict) and isinstance(response.get("error"), dict):
        _walk(response, codes, messages, docs, depth - 1)  # Responses API: response.failed


def _collect(
    obj: dict[str, Any], codes: list[str], messages: list[str], docs: list[dict[str, Any]], depth: int
) -> None:
    for key in _CODE_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value and value != "error":
            codes.append(value.rsplit("#", 1)[-1])  # Bedrock: "com.amazon...#ThrottlingException"
        elif isinstance(value, int) and not isinstance(value, bool) and key == "code" and value > 999:
            codes.append(str(value))  # Cloudflare Workers AI: 3036, 3040
    msg = obj.get("message") or obj.get("Message") or obj.get("msg")
    if isinstance(msg, str):
        _text_or_json(msg, codes, messages, docs, depth)


def _text_or_json(
    text: str, codes: list[str], messages: list[str], docs: list[dict[str, Any]], depth: int
) -> None:
    """A message that is itself a provider's JSON error (a relay's wrapping) is opened."""
    stripped = text.strip()
    if depth > 0 and stripped[:1] in ("{", "[") and len(stripped) < PARSE_LIMIT:
        inner = parse(stripped.encode())
        if isinstance(inner, dict):
            _walk(inner, codes, messages, docs, depth - 1)
            return
    messages.append(text)
