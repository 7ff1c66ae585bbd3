"""Span attributes from what the pipeline has: pure functions, no SDK.

Nothing here reads a prompt or a completion, except ``input_content`` / ``output_content``,
which only run when an operator turned on ``tracing.capture_content``; even then key-like
strings are masked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

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


def _pick(doc: Any, keys: tuple[str, ...]) -> str | None:
    if not isinstance(doc, dict):
        return None
    picked = {k: doc[k] for k in keys if k in doc}
    return redact(orjson.dumps(picked)) if picked else None


def input_content(sent: bytes | Mapping[str, Any]) -> str | None:
    """The conversation as sent upstream (system, messages, input), key-like strings masked."""
    doc: Any = sent
    if isinstance(sent, bytes):
        try:
            doc = orjson.loads(sent)
        except orjson.JSONDecodeError:
            return None
    return _pick(doc, ("system", "instructions", "messages", "input"))


def output_content(body: bytes) -> str | None:
    """A buffered answer's choices / content / output, key-like strings masked."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return _pick(doc, ("choices", "content", "output"))
