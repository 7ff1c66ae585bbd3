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

from gateway.redaction import redact_text
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
# Secret shapes, each as its issuer documents it or as secret scanners match it: OpenAI and
# Anthropic keys (sk-, sk-ant-), bearer tokens, AWS access key ids (AKIA), Google API keys
# (AIza + 35), GitHub tokens (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_: docs.github.com, "About
# authentication to GitHub", token prefixes), Slack tokens (xoxa-/xoxb-/xoxp-/xoxr-), JWTs (three
# base64url parts, the first two JSON objects: eyJ), this gateway's own issued keys (llmgw_ + 43,
# gateway/keys/issued.py: it keeps only their digests, so it cannot name them as known secrets),
# then a value after a name that says it is secret (`api_key: "..."`, `AWS_SECRET_ACCESS_KEY=...`,
# also inside a JSON string).
_KEYISH = re.compile(
    rb"(?i:sk-(?:ant-)?[A-Za-z0-9_\-]{8,}|bearer\s+[A-Za-z0-9._\-+/=]{8,})|AKIA[0-9A-Z]{16}"
    rb"|AIza[0-9A-Za-z_\-]{35}|(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"
    rb"|xox[abpr]-[A-Za-z0-9\-]{10,}|llmgw_[A-Za-z0-9_\-]{20,}|eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"
    # The name's other parts are bounded, and it starts a word: a long run of letters (an image's
    # base64) is not scanned again from each of its characters. What follows the secret word
    # starts a part of its own (`AWS_SECRET_ACCESS_KEY`), and the value is not a bare number: a
    # prompt's `max_tokens: 1024` or `{"input_tokens": 5000}` is no secret (review: both were
    # masked, the captured JSON mangled).
    rb"|(?<![A-Za-z0-9_])(?i:[A-Za-z0-9_\-]{0,24}?(?:api[_-]?key|authorization|secret|password|passwd"
    rb"|credential|(?P<count>token))(?:[_\-][A-Za-z0-9_\-]{0,23})?)"
    rb"(?:\\?\")?\s*[:=]\s*(?:\\?\")?(?i:(?:bearer|basic)\s+)?"
    # (a `token` name's bare number is a count: `max_tokens`-like names end in one)
    rb"(?(count)(?![0-9]+(?:[\s\\\",}]|$)))[^\s\\\",}]{4,}"
)
# A URL's password (`scheme://user:password@host`): the password goes, the rest stays readable.
# The scheme is bounded and starts a word: scanned from every boundary of a long dotted run
# (`example.com.` thousands of times), an unbounded one was quadratic (review: 72 s of a frozen
# event loop for one 66 KB prompt).
_USERINFO = re.compile(rb"(?i)(?<![a-z0-9+.\-])([a-z][a-z0-9+.\-]{0,31}://[^/\s:@\"]{1,256}:)[^/\s@\"]{1,256}@")


def redact(data: bytes, known: tuple[str, ...] = ()) -> str:
    """``data`` cut to CONTENT_MAX, key-like strings and ``known`` secrets masked."""
    return _masked(data[:CONTENT_MAX].decode("utf-8", "replace"), known)


_KEYISH_STR = re.compile(_KEYISH.pattern.decode())
_USERINFO_STR = re.compile(_USERINFO.pattern.decode())
# A member whose name says it holds a secret (a tool call's `{"api_key": "..."}`): its value
# is masked as the pattern above masks `api_key: ...` in text.
_SECRET_NAME = re.compile(r"(?i)api[_-]?key|authorization|secret|password|passwd|token|credential")


def _masked(text: str, known: tuple[str, ...]) -> str:
    for key in known:  # the gateway's own keys, whatever their shape (redaction.py)
        text = redact_text(text, key)
    text = _USERINFO_STR.sub(r"\1[redacted]@", text)
    return _KEYISH_STR.sub("[redacted]", text)


def _scrub(value: Any, cap: int | None = None, known: tuple[str, ...] = ()) -> Any:
    """``value`` with key-like strings masked, each string cut to ``cap`` characters: the
    JSON stays whole (the conventions: "Instrumentation MAY provide a configuration option
    allowing to truncate properties such as individual message contents, preserving JSON
    structure")."""
    if isinstance(value, str):
        text = _masked(value, known)
        return text if cap is None or len(text) <= cap else text[:cap] + "…"
    if isinstance(value, list):
        return [_scrub(v, cap, known) for v in value]
    if isinstance(value, dict):
        return {k: "[redacted]" if isinstance(v, str) and len(v) >= 4 and _SECRET_NAME.search(str(k))
                else _scrub(v, cap, known) for k, v in value.items()}  # fmt: skip
    return value


def _cut(value: Any, cap: int) -> Any:
    """``value`` (masked already) with each string cut to ``cap`` characters."""
    if isinstance(value, str):
        return value if len(value) <= cap else value[:cap] + "…"
    if isinstance(value, list):
        return [_cut(v, cap) for v in value]
    if isinstance(value, dict):
        return {k: _cut(v, cap) for k, v in value.items()}
    return value


def _encoded(value: list[Any], known: tuple[str, ...] = ()) -> str | None:
    """JSON of ``value`` masked and within CONTENT_MAX: the longest strings are cut first
    (the largest cap that fits), then, when the parts alone are too many, the oldest items
    are left out; the order stays."""
    if not value:
        return None
    masked = _scrub(value, None, known)  # once: the search below only cuts (review: ~17 passes)
    out = orjson.dumps(masked)
    if len(out) <= CONTENT_MAX:
        return out.decode()
    lo, hi = 0, CONTENT_MAX
    while lo < hi:  # the largest cap that fits
        mid = (lo + hi + 1) // 2
        if len(orjson.dumps(_cut(masked, mid))) <= CONTENT_MAX:
            lo = mid
        else:
            hi = mid - 1
    items = _cut(masked, max(lo, 64))
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


def input_content(sent: bytes | Mapping[str, Any], api: str, known: tuple[str, ...] = ()) -> dict[str, str]:
    """``gen_ai.system_instructions`` and ``gen_ai.input.messages`` of a request as sent
    upstream in ``api`` (genai_messages has the mapping), key-like strings and the gateway's
    own ``known`` keys masked."""
    system, messages = input_messages(api, _parsed(sent))
    a = {}
    if (text := _encoded(system, known)) is not None:
        a["gen_ai.system_instructions"] = text
    if (text := _encoded(messages, known)) is not None:
        a["gen_ai.input.messages"] = text
    return a


def output_content(body: bytes, api: str, known: tuple[str, ...] = ()) -> dict[str, str]:
    """``gen_ai.output.messages`` of a buffered answer in ``api``, key-like strings masked."""
    text = _encoded(output_messages(api, _parsed(body)), known)
    return {"gen_ai.output.messages": text} if text is not None else {}
