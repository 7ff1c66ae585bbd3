"""The most output tokens a model takes in one answer, as a provider states it when it refuses more.

Agents ask for the output budget their own provider's models allow: Claude Code 2.1 asks
``max_tokens: 64000`` (32000 on older models). On another model (a translated route, a
``model_map``) the provider refuses the request outright: OpenAI's gpt-4o "supports at most
16384 completion tokens", an older Claude model 8192. The refusal names the limit, so the
gateway lowers the budget to it and sends once more (``pipeline/output_cap.py``). Each
pattern below is a provider's own wording (the ``output_limit`` cases in ``tests/corpus/``).

A window-sized refusal ("maximum context length is ... tokens") is not one of these: the
budget fits the model but not beside the prompt, and compression (``compress.py``) handles it.
"""

from __future__ import annotations

import re

from gateway.config import UpstreamConfig
from gateway.policy.learned import Learned

_N = r"(\d[\d,]*)"

# (pattern, what to add to the number it holds in its first group: -1 where the provider
# states an exclusive bound).
_STATED: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(p, re.IGNORECASE), offset)
    for p, offset in (
        # OpenAI, Azure OpenAI: "max_tokens is too large: 20480. This model supports at most
        # 16384 completion tokens, whereas you provided 20480."
        (rf"supports at most {_N} completion tokens", 0),
        # Anthropic (also on Vertex): "max_tokens: 10000 > 4096, which is the maximum allowed
        # number of output tokens for claude-3-5-sonnet-20240620"
        (rf"max_tokens: \d[\d,]* > {_N}, which is the maximum allowed number of output tokens", 0),
        # AWS Bedrock: "The maximum tokens you requested exceeds the model limit of 32768"
        (rf"maximum tokens you requested exceeds the model limit of {_N}", 0),
        # DeepSeek: "Invalid max_tokens value, the valid range of max_tokens is [1, 8192]";
        # DashScope: "Range of max_tokens should be [1, 8192]"
        (rf"(?:valid range of|range of) max_tokens (?:is|should be) \[1,\s*{_N}\]", 0),
        # Gemini on Vertex: "... a maxOutputTokens value of 65536 but the supported range is
        # from 1 (inclusive) to 65536 (exclusive)"
        (rf"maxOutputTokens value of \d+ but the supported range is from 1 \(inclusive\) "
         rf"to {_N} \(exclusive\)", -1),
        # Groq: "`max_completion_tokens` must be less than or equal to `16384`", "max_tokens for
        # `llama-3.1-8b-instant` must be less than or equal to 8000"
        (rf"max_(?:completion_)?tokens`?(?: for `[^`]{{1,200}}`)? must be less than or equal to `?{_N}", 0),
        # Volcengine Ark: "The parameter max_tokens specified in the request is not valid: integer
        # above maximum value, expected a value <= 32768, but got 64000 instead."
        (rf"max_(?:completion_)?tokens`? specified in the request (?:is|are) not valid: "
         rf"integer above maximum value, expected a value <= {_N}", 0),
    )
)


def stated_output_limit(message: str | None) -> int | None:
    """The output limit an error message states, or None when it states none."""
    if not message:
        return None
    for pattern, offset in _STATED:
        m = pattern.search(message)
        if m is not None:
            limit = int(m.group(1).replace(",", "")) + offset
            return limit if limit > 0 else None
    return None


class OutputLimits(Learned[int]):
    """Each (upstream, model)'s output limit: configured, or stated by its provider."""

    __slots__ = ()

    def of(self, up: UpstreamConfig, model: str | None) -> tuple[int, str] | None:
        """The limit and where it comes from (``config``, or ``learned`` from a refusal), or None."""
        configured = up.max_output_tokens
        learned = self._get(up.name, model)
        if learned is not None and (configured is None or learned < configured):
            return learned, "learned"
        return (configured, "config") if configured is not None else None

    def learn(self, upstream: str, model: str | None, limit: int) -> None:
        self._put(upstream, model, limit)
