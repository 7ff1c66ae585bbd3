"""How much rate limit a deployment has left, as its own answers state it.

A pool reads this from every answer of every deployment, so that a key close to its limit
is routed around *before* it answers 429. Three header families say it:

- OpenAI ``x-ratelimit-{limit,remaining,reset}-{requests,tokens}``, resets as Go durations
  ("1s", "6m0s"); OpenAI-compatible hosts reuse the names. Source: OpenAI's rate-limits
  guide, https://platform.openai.com/docs/guides/rate-limits ("Rate limits in headers").
- Anthropic ``anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
  remaining,reset}``, resets as RFC 3339 instants. Source: Anthropic's rate-limits page,
  https://docs.anthropic.com/de/api/rate-limits (the response-header table).
- Mistral ``x-ratelimitbysize-{limit,remaining}-{minute,month}`` (tokens), and
  ``ratelimitbysize-reset``. No Mistral page describing them was found; they are read from a
  real api.mistral.ai answer kept at https://github.com/julienba/clj-sac/blob/37732bc7f345206e
  06f06891fdedfab9d037e93a/src/clj_sac/llm/mistral.clj. Its reset, "40" beside a per-minute
  limit, reads as seconds to the minute window's reset: it is given to that window only.

Several windows of one kind (Anthropic's input/output/total tokens, Mistral's minute/month,
two families passed on by one relay) collapse to the one closest to exhaustion, so a
consumer compares one number per kind, not a provider's scheme.

Pure: the clock is passed in; garbage in a field drops that field and never raises.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from gateway.policy.retry_after import go_duration_s, reset_at_ms, rfc3339_wait_s

# Header names are looked up in lower case: a CIMultiDictProxy finds them in any case, and a
# plain dict built from aiohttp's lower-cased names finds them too.

# The no-header path: one lookup per family's "remaining" header. A family that states no
# remaining count says nothing about headroom, so its limit or reset alone is not looked for.
_ANY_REMAINING = (
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-remaining",
    "x-ratelimitbysize-remaining-minute",
    "x-ratelimitbysize-remaining-month",
)

# Anthropic's kinds, the token ones in the order that wins a tie.
_ANTHROPIC_KINDS = ("requests", "tokens", "input-tokens", "output-tokens")

# Real limits reach 10**9 (Mistral's monthly tokens); anything past 10**15 is a parsing
# accident, as is a reset further off than a monthly window.
_MAX_COUNT = 10**15
_MAX_RESET_S = 31 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Headroom:
    """What one answer says about its deployment's rate limits (None: not said)."""

    requests_remaining: int | None = None
    requests_limit: int | None = None
    requests_reset_at_ms: int | None = None  # epoch ms
    tokens_remaining: int | None = None
    tokens_limit: int | None = None
    tokens_reset_at_ms: int | None = None  # epoch ms
    # What the tokens window meters (``TOKENS_ALL``, ``TOKENS_SETTLED``): what a request's
    # estimate is held against.
    tokens_meter: int = 0


# How long a reading that states no limit (nor reset) says anything: Azure OpenAI's answers
# carry only ``x-ratelimit-remaining-requests`` and ``-tokens`` (Azure/azure-rest-api-specs#26884:
# "the only headers that are available"; a real answer's headers in EvolvingPrograms/oaib#11),
# and its quota is per minute: each request's estimated tokens are "added to a running token
# count of all requests, which resets every minute" (Microsoft's "Manage Azure OpenAI Service
# quota", learn.microsoft.com/azure/ai-services/openai/how-to/quota). A minute after it was
# read, what such a reading said is gone.
UNSTATED_WINDOW_MS = 60_000

# What a tokens window meters (Headroom.tokens_meter): OpenAI's the prompt and the output asked,
# at once; Anthropic's what is settled after the answer: "OTPM rate limits are estimated based on
# max_tokens at the beginning of each request, and the estimate is adjusted at the end", and cache
# reads do not count toward ITPM (its rate-limits page), so a reading taken at an answer's start
# holds what was given back since, and a request's size is no measure of what it will take: held
# to its max_tokens, Claude Code's sequential turns (32,000) on 40k-OTPM keys were refused 429
# without a call from the third on (review). Held to one token there, as before.
TOKENS_ALL, TOKENS_SETTLED = 0, 3

# One window as a header family states it: (remaining, limit, reset_at_ms).
_Window = tuple[int | None, int | None, int | None]


def _window(remaining: str | None, limit: str | None, reset_at_ms: int | None) -> _Window:
    return (_count(remaining), _count(limit), reset_at_ms)


def _count(raw: str | None) -> int | None:
    if raw is None:
        return None
    text = raw.strip()
    # isascii + isdigit: int() would also take "+5", "1_000" and non-ASCII digits.
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if value <= _MAX_COUNT else None


def _reset_ms(wait_s: float | None, now_s: float) -> int | None:
    if wait_s is None or math.isnan(wait_s) or not 0 <= wait_s <= _MAX_RESET_S:
        return None
    return reset_at_ms(wait_s, now_s)


def _go_reset(raw: str | None, now_s: float) -> int | None:
    return _reset_ms(go_duration_s(raw), now_s) if raw else None


def _rfc3339_reset(raw: str | None, now_s: float) -> int | None:
    return _reset_ms(rfc3339_wait_s(raw, now_s), now_s) if raw else None


def _seconds_reset(raw: str | None, now_s: float) -> int | None:
    count = _count(raw)
    return _reset_ms(float(count), now_s) if count is not None else None


def _share_left(window: _Window) -> float:
    """Share of the window left; an unknown limit ranks as full unless nothing is left."""
    remaining, limit, _ = window
    if remaining is None:
        return math.inf
    if limit:
        return remaining / limit
    return 0.0 if remaining == 0 else 1.0


def _tightest(windows: list[_Window]) -> _Window:
    """The window closest to exhaustion; ties keep the first listed."""
    stated = [w for w in windows if w != (None, None, None)]
    if not stated:
        return (None, None, None)
    return min(stated, key=_share_left)


def headroom_of(headers: Mapping[str, str], now_s: float) -> Headroom | None:
    """The deployment's rate-limit state from one answer's headers, or None when the answer
    says nothing usable about it (no family's remaining header, or only garbage)."""
    get = headers.get
    for name in _ANY_REMAINING:
        if get(name) is not None:
            break
    else:
        return None

    requests: list[_Window] = []
    tokens: list[_Window] = []
    meters: list[int] = []  # of each of ``tokens``
    if get("x-ratelimit-remaining-requests") is not None or get("x-ratelimit-remaining-tokens") is not None:
        for kind, into in (("requests", requests), ("tokens", tokens)):
            reset = _go_reset(get(f"x-ratelimit-reset-{kind}"), now_s)
            into.append(
                _window(get(f"x-ratelimit-remaining-{kind}"), get(f"x-ratelimit-limit-{kind}"), reset)
            )
        meters.append(TOKENS_ALL)
    for kind in _ANTHROPIC_KINDS:
        if (remaining := get(f"anthropic-ratelimit-{kind}-remaining")) is not None:
            reset = _rfc3339_reset(get(f"anthropic-ratelimit-{kind}-reset"), now_s)
            (requests if kind == "requests" else tokens).append(
                _window(remaining, get(f"anthropic-ratelimit-{kind}-limit"), reset)
            )
            if kind != "requests":
                meters.append(TOKENS_SETTLED)
    for period in ("minute", "month"):
        if (remaining := get(f"x-ratelimitbysize-remaining-{period}")) is not None:
            reset = _seconds_reset(get("ratelimitbysize-reset"), now_s) if period == "minute" else None
            tokens.append(_window(remaining, get(f"x-ratelimitbysize-limit-{period}"), reset))
            meters.append(TOKENS_ALL)

    req, tok = _tightest(requests), _tightest(tokens)
    meter = meters[tokens.index(tok)] if tok in tokens else TOKENS_ALL
    if req == (None, None, None) and tok == (None, None, None):
        return None
    return Headroom(
        requests_remaining=req[0], requests_limit=req[1], requests_reset_at_ms=req[2],
        tokens_remaining=tok[0], tokens_limit=tok[1], tokens_reset_at_ms=tok[2], tokens_meter=meter,
    )  # fmt: skip


def refilled_share(remaining: int, limit: int, reset_at_ms: int | None, at_ms: float, now_ms: float) -> float:
    """The share of a window left at ``now_ms`` by a reading taken at ``at_ms``, nothing sent
    since: both providers refill their buckets continuously and state as the reset when the
    bucket is full again (state/pools.py's ``_refilled``, which also counts the sends), so the
    rest comes back at the rate that fills it by the reset, and past the reset it is full."""
    if reset_at_ms is None or reset_at_ms <= at_ms or remaining >= limit:
        return max(0.0, min(1.0, remaining / limit))
    if now_ms >= reset_at_ms:
        return 1.0
    refilled = (limit - remaining) * max(0.0, now_ms - at_ms) / (reset_at_ms - at_ms)
    return max(0.0, min(1.0, (remaining + refilled) / limit))
