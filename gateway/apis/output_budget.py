"""An answer's output budget in each wire API, held to a limit.

Each function returns the request with every output budget it names at most ``limit``, or
None when none was above it. With ``name_if_absent`` a request that names no budget gets
one of ``limit``: the operator's cap (``upstreams[].max_output_tokens``) bounds those too, and a
provider that refused a budget the client never named refused the one a translation added,
which the translation takes from the client's request when there is one.

A budget that is not a positive integer is left as it is: the provider judges it as the
client sent it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gateway.apis.gemini.fields import has

# Anthropic: thinking needs ``budget_tokens`` of at least 1024 and below ``max_tokens``
# (docs.anthropic.com, "Extended thinking"), or the request is refused.
THINKING_MIN = 1024
# OpenAI Responses refuses a ``max_output_tokens`` below 16 ("integer below minimum value.
# Expected a value >= 16", as gateway/fake/responses_rules.py cites): a lower limit (a
# continuation with little of its budget left) is sent as 16.
RESPONSES_MIN_OUTPUT = 16


def _over(value: Any, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > limit


def chat(payload: Mapping[str, Any], limit: int, name_if_absent: bool = False) -> dict[str, Any] | None:
    keys = [k for k in ("max_completion_tokens", "max_tokens") if k in payload]
    if not keys:
        # max_tokens, the name every chat server knows (llama.cpp, vLLM and TGI as well).
        return {**payload, "max_tokens": limit} if name_if_absent else None
    over = [k for k in keys if _over(payload[k], limit)]
    if not over:
        return None
    return {**payload, **dict.fromkeys(over, limit)}


def messages(payload: Mapping[str, Any], limit: int, name_if_absent: bool = False) -> dict[str, Any] | None:
    asked = payload.get("max_tokens")
    if not (_over(asked, limit) or (asked is None and name_if_absent)):
        return None
    out = {**payload, "max_tokens": limit}
    thinking = payload.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int) and budget >= limit:
            if limit - 1 >= THINKING_MIN:
                out["thinking"] = {**thinking, "budget_tokens": limit - 1}
            else:  # no room left for the least thinking Anthropic takes: answer without it
                del out["thinking"]
    return out


def responses(payload: Mapping[str, Any], limit: int, name_if_absent: bool = False) -> dict[str, Any] | None:
    asked = payload.get("max_output_tokens")
    limit = max(limit, RESPONSES_MIN_OUTPUT)
    if _over(asked, limit) or (asked is None and name_if_absent):
        return {**payload, "max_output_tokens": limit}
    return None


def gemini(payload: Mapping[str, Any], limit: int, name_if_absent: bool = False) -> dict[str, Any] | None:
    configs = "generation_config" if "generation_config" in payload and "generationConfig" not in payload \
        else "generationConfig"  # fmt: skip
    config = payload.get(configs)
    if config is not None and not isinstance(config, dict):
        return None
    config = config or {}
    key = "max_output_tokens" if "max_output_tokens" in config and "maxOutputTokens" not in config \
        else "maxOutputTokens"  # fmt: skip
    asked = config.get(key)
    if _over(asked, limit) or (not has(config, "maxOutputTokens") and name_if_absent):
        return {**payload, configs: {**config, key: limit}}
    return None


def count(value: Any) -> int | None:
    """A number of tokens or answers as the laxest server reads it, for what a key reserves
    (the request is sent as it came: its upstream decides). vLLM's pydantic models take an
    integral float or a numeric string as the integer it names
    (https://docs.pydantic.dev/latest/concepts/conversion_table/), and llama.cpp's nlohmann
    json truncates any float to an int: ``max_tokens: 100000.0`` or ``"100000"`` was reserved
    as naming none (4,096 tokens) and answered with up to 100,000. Rounded up, so that no
    reading of it is above what is reserved; None for what names no number (a bool, though
    Python's ``True`` is an int)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                return None
    if isinstance(value, float) and math.isfinite(value):
        return math.ceil(value)
    return None


def named_loosely(payload: Mapping[str, Any]) -> bool:
    """Whether a budget field holds something other than a JSON integer: a server that does
    not read a number there uses its own default (llama.cpp: "Wrong type supplied for
    parameter ... using default value"), so such a request reserves at least what one naming
    none does."""
    return any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in _budgets(payload))


def _budgets(payload: Mapping[str, Any]) -> list[Any]:
    found = [payload.get(key) for key in ("max_completion_tokens", "max_tokens", "max_output_tokens")]
    for name in ("generationConfig", "generation_config"):
        config = payload.get(name)
        if isinstance(config, dict):
            found += [config.get("maxOutputTokens"), config.get("max_output_tokens")]
    return found


def ceiling(payload: Mapping[str, Any]) -> int | None:
    """The most output a request can be given, whichever of its budgets the upstream reads: the
    largest positive integer among every field of the four APIs (None: it names none). What a
    key's reservation holds (pipeline/accounting.py), so it must never be below what is sent.

    The first of them was not: chat names two budgets, and the translations to Messages,
    Responses and Gemini send ``max_completion_tokens`` over ``max_tokens`` (as vLLM reads
    them), another server may read ``max_tokens`` alone, and OpenAI refuses the pair ("Setting
    'max_tokens' and 'max_completion_tokens' at the same time is not supported."): reserving
    ``max_tokens: 1`` while Anthropic was sent ``max_tokens: 5000`` let 50 requests at once
    spend $1.25 of a $0.05 budget (audit). The largest is right whichever the upstream takes; a
    stray field another API does not read (a Responses request's ``max_tokens``) only reserves
    more than is used, and the settle gives it back. Each read as ``count`` reads it."""
    limits = [n for n in map(count, _budgets(payload)) if n is not None and n > 0]
    return max(limits) if limits else None


def asked(payload: Mapping[str, Any]) -> int | None:
    """The budget a request names in any of the four APIs, for the log (None: it names none)."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = payload.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    config = payload.get("generationConfig") or payload.get("generation_config")
    if isinstance(config, dict):
        value = config.get("maxOutputTokens", config.get("max_output_tokens"))
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None
