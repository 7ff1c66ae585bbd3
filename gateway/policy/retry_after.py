"""How long a server asked us to wait, from every header and body dialect that says so.

Sources, first match wins:

1. ``retry-after-ms``: milliseconds (OpenAI and Azure send it beside ``retry-after``).
2. ``retry-after``: delta-seconds or an HTTP-date (RFC 9110 §10.2.3).
3. OpenAI ``x-ratelimit-reset-requests`` / ``-tokens``: Go durations such as ``6m0s``,
   ``1.5s``, ``20ms``; the one whose ``x-ratelimit-remaining-*`` is 0, else the later.
4. Anthropic ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset``:
   RFC 3339 instants; the one whose ``-remaining`` is 0, else the later.
5. Google ``google.rpc.RetryInfo`` in the body's ``error.details``: ``retryDelay`` as a
   protobuf Duration string (``"37s"``, ``"1.5s"``).
6. Hugging Face TGI / Inference API ``estimated_time`` (seconds) while a model loads.

The reset headers (3, 4) say when a window is *full* again, not when a request fits:
``refill_wait_s`` reads that from them for a rate limit that names no wait of its own.

Pure: the current time is passed in; garbage never raises, it is ignored.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_WAIT_S = 7 * 24 * 3600.0  # anything longer is a parsing accident, not a real request


def reset_at_ms(wait_s: float, now_s: float) -> int:
    return round((now_s + wait_s) * 1000)


def restamped(headers: Sequence[tuple[str, str]], wait_s: float) -> list[tuple[str, str]]:
    """The headers of a provider's rate-limit answer relayed with another wait than its own (a
    pool's earliest reset, another key's): ``retry-after`` and ``retry-after-ms`` say that
    wait, and the reset headers of the one key that answered (OpenAI's, Anthropic's,
    Mistral's) are left out, its limits and what it has left kept. Relayed as they were, a
    pool's 429 said ``retry-after: 40`` beside that key's ``retry-after-ms: 50000``, which the
    openai SDKs read first (measured)."""
    out = []
    for name, value in headers:
        low = name.lower()
        if low == "retry-after":
            value = str(max(0, math.ceil(wait_s)))
        elif low == "retry-after-ms":
            value = str(max(0, math.ceil(wait_s * 1000 - 1e-6)))  # not a millisecond more from float error
        elif "ratelimit" in low and "reset" in low:
            continue
        out.append((name, value))
    return out


def restamped_body(body: bytes, wait_s: float) -> bytes:
    """A relayed error body with ``wait_s`` in every Google ``RetryInfo.retryDelay`` (whole
    seconds, as Google writes it and as ``restamped``'s ``retry-after`` says it): Gemini CLI
    waits what the body says (``parseDurationInSeconds(retryInfo.retryDelay)``), so a pool's
    429 stated retry-after 40 and a retryDelay of the key's own 50 s. A provider's prose ("Please
    try again in 50s.") is its words and left as written; no client we relay to reads it.
    Anything else, the very bytes."""
    if b"RetryInfo" not in body:
        return body
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return body
    changed = False
    for d in _details(doc):
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            d["retryDelay"] = f"{max(0, math.ceil(wait_s))}s"
            changed = True
    return json.dumps(doc).encode() if changed else body


def _details(body: Any) -> list[Any]:
    """The ``error.details`` of Google's envelope (in a list too: its OpenAI-compatible endpoint's)."""
    if isinstance(body, list) and body:
        body = body[0]
    err = body.get("error") if isinstance(body, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    return details if isinstance(details, list) else []


def _sane(wait: float | None) -> float | None:
    if wait is None or math.isnan(wait) or wait < 0 or wait > _MAX_WAIT_S:
        return None
    return wait


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def go_duration_s(text: str) -> float | None:
    """``1h2m3.5s`` → 3723.5; the whole string must be made of duration parts."""
    text = text.strip()
    if not text:
        return None
    plain = _float(text)
    if plain is not None:
        return plain  # some proxies send bare seconds here
    total, pos = 0.0, 0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total if pos == len(text) else None


def http_retry_after_s(value: str, now_s: float) -> float | None:
    seconds = _float(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)  # "-0000" parses naive; HTTP dates are always UTC
    return max(0.0, when.timestamp() - now_s)


def rfc3339_wait_s(value: str, now_s: float) -> float | None:
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now_s)


def _pick(waits: list[tuple[float, bool]]) -> float | None:
    """The wait of an exhausted limit if one is exhausted, else the longest."""
    if not waits:
        return None
    exhausted = [w for w, is_exhausted in waits if is_exhausted]
    return max(exhausted) if exhausted else max(w for w, _ in waits)


def _openai_reset(headers: Mapping[str, str]) -> float | None:
    waits = []
    for kind in ("requests", "tokens"):
        raw = headers.get(f"x-ratelimit-reset-{kind}")
        wait = go_duration_s(raw) if raw else None
        if wait is not None:
            waits.append((wait, headers.get(f"x-ratelimit-remaining-{kind}", "").strip() == "0"))
    return _pick(waits)


def refill_wait_s(headers: Mapping[str, str], now_s: float, input_tokens: int = 0,
                  output_tokens: int = 0) -> float | None:  # fmt: skip
    """Seconds until a refused request fits again, by the rate-limit headers of its 429, for one
    that says no wait of its own (no ``retry-after``, no "try again in"). Both providers meter
    with buckets refilled continuously, and their reset is when the bucket is *full* again:
    OpenAI's is the time until the limit "resets to its initial state" (its rate-limits guide,
    "Rate limits in headers"), Anthropic's "the time when the rate limit will be fully
    replenished" (its rate-limits page, the response-header table); a real OpenAI 429 said
    ``x-ratelimit-reset-tokens: 1m0.052s`` beside "Please try again in 494ms"
    (tests/corpus/wild.json). So the wait is until what the request needs has come back in each
    window it is short in (one request; its tokens: OpenAI counts the prompt and ``max_tokens``
    in one window, Anthropic the input and the output in windows of their own and in their
    total), at the rate that fills the rest by the reset. Taken whole, a 429 with 311 tokens
    left sat its key out 56.9 s, the bucket's full refill, where a request fitted 8 s later
    (audit). None when no window is short by these counts (the estimate is not the provider's
    tokenizer)."""
    tokens = input_tokens + output_tokens
    openai = (("requests", 1), ("tokens", tokens))
    anthropic = (("requests", 1), ("tokens", tokens), ("input-tokens", input_tokens),
                 ("output-tokens", output_tokens))  # fmt: skip
    waits = []
    for kind, need in openai:
        raw = headers.get(f"x-ratelimit-reset-{kind}")
        reset = go_duration_s(raw) if raw else None
        left = _refill_wait(headers.get(f"x-ratelimit-remaining-{kind}"),
                            headers.get(f"x-ratelimit-limit-{kind}"), reset, need)  # fmt: skip
        if left is not None:
            waits.append(left)
    for kind, need in anthropic:
        raw = headers.get(f"anthropic-ratelimit-{kind}-reset")
        reset = rfc3339_wait_s(raw, now_s) if raw else None
        left = _refill_wait(headers.get(f"anthropic-ratelimit-{kind}-remaining"),
                            headers.get(f"anthropic-ratelimit-{kind}-limit"), reset, need)  # fmt: skip
        if left is not None:
            waits.append(left)
    return _sane(max(waits)) if waits else None


def _refill_wait(remaining: str | None, limit: str | None, reset_s: float | None, need: int) -> float | None:
    """One window's wait for ``need`` more (at least one); None when it has that already."""
    left, cap = _whole(remaining), _whole(limit)
    need = max(1, need)
    if left is None or reset_s is None or left >= need:
        return None
    if cap is None or cap <= left or need > cap:
        return reset_s  # no rate to refill at, or a request no full bucket holds: the reset
    return (need - left) * reset_s / (cap - left)


def _whole(text: str | None) -> int | None:
    value = _float(text) if text else None
    return int(value) if value is not None and value >= 0 and not math.isinf(value) else None


def _anthropic_reset(headers: Mapping[str, str], now_s: float) -> float | None:
    waits = []
    for kind in ("requests", "tokens", "input-tokens", "output-tokens"):
        raw = headers.get(f"anthropic-ratelimit-{kind}-reset")
        wait = rfc3339_wait_s(raw, now_s) if raw else None
        if wait is not None:
            remaining = headers.get(f"anthropic-ratelimit-{kind}-remaining", "").strip()
            waits.append((wait, remaining == "0"))
    return _pick(waits)


def _body_wait(body: Any) -> float | None:
    for d in _details(body):  # Gemini's OpenAI-compatible endpoint wraps errors in a list
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("google.rpc.RetryInfo"):
            delay = d.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                return _float(delay[:-1])
    if isinstance(body, list) and body:
        body = body[0]
    if not isinstance(body, dict):
        return None
    estimated = body.get("estimated_time")
    if isinstance(estimated, (int, float)) and not isinstance(estimated, bool):
        return float(estimated)
    return None


def server_wait_s(
    headers: Mapping[str, str], body: Any, now_s: float, *, rate_limit_resets: bool = True
) -> float | None:
    """Seconds the server asked us to wait, or None when it did not say. Keys are lowercase.

    OpenAI and Anthropic send their rate-limit reset headers on *every* response, so they
    mean "wait" only on a rate-limit or quota error: pass ``rate_limit_resets=False`` for
    any other class, or a 503 would inherit a 6-minute token-window reset.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        ms = _float(raw_ms)
        if (wait := _sane(ms / 1000 if ms is not None else None)) is not None:
            return wait
    raw = headers.get("retry-after")
    if raw and (wait := _sane(http_retry_after_s(raw, now_s))) is not None:
        return wait
    if rate_limit_resets:
        for candidate in (_openai_reset(headers), _anthropic_reset(headers, now_s)):
            if (wait := _sane(candidate)) is not None:
                return wait
    return _sane(_body_wait(body))
