"""Span attributes from what the pipeline has: pure functions, no SDK.

Nothing here reads a prompt or a completion, except ``input_content`` / ``output_content``,
which only run when an operator turned on ``tracing.capture_content``; even then key-like
strings are masked. What they write follows the GenAI conventions' message schemas
(genai_messages.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from gateway.tracing.genai_messages import input_messages, output_messages

P = "llm_gateway."  # the prefix of every attribute that is the gateway's own (docs/operations/tracing.md)

# Hosts whose provider is known; any other host is named by the API it is spoken to in
# (what the GenAI conventions ask of a compatible server: the client-side flavour).
_HOSTS = (
    ("anthropic.com", "anthropic"),
    ("openai.azure.com", "azure.ai.openai"),
    ("openai.com", "openai"),
    ("googleapis.com", "gcp.gemini"),
    ("mistral.ai", "mistral_ai"),
    ("groq.com", "groq"),
    ("deepseek.com", "deepseek"),
    ("x.ai", "x_ai"),
    ("amazonaws.com", "aws.bedrock"),
)
_API_PROVIDER = {"chat": "openai", "responses": "openai", "messages": "anthropic", "gemini": "gcp.gemini"}


def operation_name(api: str) -> str:
    """``gen_ai.operation.name`` of a call in ``api`` (OpenTelemetry GenAI conventions: the
    Gemini API's is ``generate_content``, the others' ``chat``)."""
    return "generate_content" if api == "gemini" else "chat"


def provider_name(host: str, api: str) -> str:
    host = host.lower()
    for suffix, name in _HOSTS:
        if host == suffix or host.endswith("." + suffix):
            return name
    return _API_PROVIDER.get(api, api)


def usage_attrs(usage: Mapping[str, int]) -> dict[str, int]:
    a = {}
    if "prompt" in usage:
        a["gen_ai.usage.input_tokens"] = usage["prompt"]
    if "completion" in usage:
        a["gen_ai.usage.output_tokens"] = usage["completion"]
    return a


def _finish_reasons(doc: Mapping[str, Any]) -> list[str]:
    choices = doc.get("choices")
    if isinstance(choices, list):  # chat completions
        return [str(c["finish_reason"]) for c in choices if isinstance(c, dict) and c.get("finish_reason")]
    if isinstance(doc.get("stop_reason"), str):  # messages
        return [doc["stop_reason"]]
    if doc.get("object") == "response" and isinstance(doc.get("status"), str):  # responses
        return [doc["status"]]
    return []


def _identity(doc: Mapping[str, Any]) -> dict[str, Any]:
    a: dict[str, Any] = {}
    if isinstance(doc.get("id"), str):
        a["gen_ai.response.id"] = doc["id"]
    if isinstance(doc.get("model"), str):
        a["gen_ai.response.model"] = doc["model"]
    return a


def response_attrs(body: bytes) -> dict[str, Any]:
    """id, model and finish reasons of a buffered answer in any of the three APIs."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {}
    if not isinstance(doc, dict):
        return {}
    a = _identity(doc)
    reasons = _finish_reasons(doc)
    if reasons:
        a["gen_ai.response.finish_reasons"] = reasons
    return a


def stream_identity(held: list[bytes]) -> dict[str, Any]:
    """id and model from a stream's first events (chat: every chunk; messages: message_start's
    ``message``; responses: response.created's ``response``)."""
    for raw in held:
        for line in raw.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            try:
                doc = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            if not isinstance(doc, dict):
                continue
            for inner in (doc, doc.get("message"), doc.get("response")):
                if isinstance(inner, dict):
                    found = _identity(inner)
                    if "gen_ai.response.id" in found:
                        return found
    return {}


def compression_attrs(report: Mapping[str, Any], status: int | None, detector: str | None) -> dict[str, Any]:
    """The compress-and-retry as attributes: what detected the overflow, the estimates before
    and after, and how it ended (``result``: success | second_overflow | other_error, known
    once the request is answered)."""
    a: dict[str, Any] = {f"{P}compression.outcome": str(report.get("outcome"))}
    if detector is not None:
        a[f"{P}compression.detector"] = detector[:120]
    for key, name in (
        ("limit_source", "limit_source"),
        ("estimated_before", "tokens_before"),
        ("estimated_after", "tokens_after"),
        ("target_tokens", "target_tokens"),
        ("messages_removed", "messages_removed"),
        ("turns_removed", "turns_removed"),
        ("outputs_truncated", "outputs_truncated"),
        ("max_tokens_lowered_to", "max_tokens_lowered_to"),
        ("reason", "reason"),
    ):
        v = report.get(key)
        if isinstance(v, (str, int, float, bool)):
            a[f"{P}compression.{name}"] = v
    outcome = report.get("outcome")
    if status is not None and outcome in ("applied", "still_overflow"):
        if outcome == "still_overflow":
            a[f"{P}compression.result"] = "second_overflow"
        else:
            a[f"{P}compression.result"] = "success" if status < 400 else "other_error"
    return a


def tool_output_attrs(report: Mapping[str, Any]) -> dict[str, Any]:
    """What the per-tool output policy did, per stage (``{"upfront": {"projected": 2, ...}}``,
    counts only), flattened: ``llm_gateway.tool_outputs.upfront.projected``."""
    a: dict[str, Any] = {}

    def walk(prefix: str, node: Mapping[str, Any]) -> None:
        for key, value in node.items():
            name = f"{prefix}.{key}"
            if isinstance(value, Mapping):
                walk(name, value)
            elif isinstance(value, (int, float)) and not isinstance(value, bool) and value:
                a[name] = value

    walk(f"{P}tool_outputs", report)
    return a


# Content capture (opt-in)

CONTENT_MAX = 64 * 1024
_KEYISH = re.compile(
    rb"(?i)(?:sk-(?:ant-)?[A-Za-z0-9_\-]{8,}|bearer\s+[A-Za-z0-9._\-+/=]{8,}|AKIA[0-9A-Z]{16}"
    # `api_key: "..."`, also inside a JSON string (quotes escaped)
    rb"|(?:api[_-]?key|authorization|x-api-key|secret|password|token)(?:\\?\")?\s*[:=]\s*(?:\\?\")?[^\s\\\",}]{4,})"
)


def redact(data: bytes) -> str:
    return _KEYISH.sub(b"[redacted]", data[:CONTENT_MAX]).decode("utf-8", "replace")


_KEYISH_STR = re.compile(_KEYISH.pattern.decode())
# A member whose name says it holds a secret (a tool call's `{"api_key": "..."}`): its value
# is masked as the pattern above masks `api_key: ...` in text.
_SECRET_NAME = re.compile(r"(?i)api[_-]?key|authorization|secret|password|token")


def _scrub(value: Any, cap: int | None = None) -> Any:
    """``value`` with key-like strings masked, each string cut to ``cap`` characters: the
    JSON stays whole (the conventions: "Instrumentation MAY provide a configuration option
    allowing to truncate properties such as individual message contents, preserving JSON
    structure")."""
    if isinstance(value, str):
        text = _KEYISH_STR.sub("[redacted]", value)
        return text if cap is None or len(text) <= cap else text[:cap] + "…"
    if isinstance(value, list):
        return [_scrub(v, cap) for v in value]
    if isinstance(value, dict):
        return {k: "[redacted]" if isinstance(v, str) and len(v) >= 4 and _SECRET_NAME.search(str(k))
                else _scrub(v, cap) for k, v in value.items()}  # fmt: skip
    return value


def _encoded(value: list[Any]) -> str | None:
    """JSON of ``value`` masked and within CONTENT_MAX: the longest strings are cut first
    (the largest cap that fits), then, when the parts alone are too many, the oldest items
    are left out; the order stays."""
    if not value:
        return None
    out = orjson.dumps(_scrub(value))
    if len(out) <= CONTENT_MAX:
        return out.decode()
    lo, hi = 0, CONTENT_MAX
    while lo < hi:  # the largest cap that fits
        mid = (lo + hi + 1) // 2
        if len(orjson.dumps(_scrub(value, mid))) <= CONTENT_MAX:
            lo = mid
        else:
            hi = mid - 1
    items = _scrub(value, max(lo, 64))
    while items:
        out = orjson.dumps(items)
        if len(out) <= CONTENT_MAX:
            return out.decode()
        items = items[1:]
    return None


def _parsed(body: bytes | Mapping[str, Any]) -> Any:
    if isinstance(body, bytes):
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
    return body


def input_content(sent: bytes | Mapping[str, Any], api: str) -> dict[str, str]:
    """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a request as sent
    upstream in ``api`` (genai_messages has the mapping), key-like strings masked."""
    system, messages = input_messages(api, _parsed(sent))
    a = {}
    if (text := _encoded(system)) is not None:
        a["gen_ai.system_instructions"] = text
    if (text := _encoded(messages)) is not None:
        a["gen_ai.input.messages"] = text
    return a


def output_content(body: bytes, api: str) -> dict[str, str]:
    """``gen_ai.output.messages`` of a buffered answer in ``api``, key-like strings masked."""
    text = _encoded(output_messages(api, _parsed(body)))
    return {"gen_ai.output.messages": text} if text is not None else {}
