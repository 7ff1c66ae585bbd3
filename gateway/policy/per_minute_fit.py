"""The output budget that fits a tokens-per-minute window a request overflowed, when the numbers say.

A request larger than a per-minute window (``Classification.per_minute``) is counted by the
provider as its prompt plus the ``max_tokens`` it asks: Azure estimates each request's tokens
from its prompt, its ``max_tokens`` and its ``best_of`` against a deployment's TPM
(learn.microsoft.com/en-us/azure/ai-services/openai/how-to/quota, "Understanding rate limits");
OpenAI refuses a lone request whose ``max_tokens`` takes it over ("The input or output tokens
must be reduced", tests/corpus/openai.json; community.openai.com/t/360359: a request denied for
its ``max_tokens`` alone) and states both sides ("Limit 30000, Requested 36278"). So the one
rescue lowers the output budget by the excess and drops no turn: the conversation fits whatever
window the model has, and a dropped turn would be context lost for a limit that the budget alone
broke.

Azure's refusal names no numbers ("exceeded token rate limit ... retry after 86400 seconds"):
then nothing says how far to lower, and there is no rescue. Where the numbers leave under
``MIN_OUTPUT_TOKENS`` (the prompt alone, or nearly, exceeds the window; or the request names no
budget at all), no output budget fits: the window is then a prompt too long like any other
(``Fit.prompt_over``), rescued by dropping turns against the stated limit and told in the
client API's overflow sentence, which makes an agent compact (told "a smaller max_tokens may
fit" for 37,765 prompt tokens against a 30,000 TPM, Claude Code never compacted and every later
turn failed: review). Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.policy.error_numbers import sizes

MIN_OUTPUT_TOKENS = 256  # as compression's floor: an answer cut shorter is hardly one
MARGIN = 0.01  # of the window: the retry's own count may differ by the digits it changed


@dataclass(frozen=True, slots=True)
class Fit:
    max_tokens: int | None  # the budget to send again; None: none fits, or nothing says
    report: dict[str, object]  # counts, never content: what was read and decided
    prompt_over: bool = False  # the numbers leave no budget: the prompt must shrink
    # With ``prompt_over``: the provider's count less the budget sent, the prompt alone, which
    # compression calibrates its estimate by (the whole count made it cut too deep).
    prompt_tokens: int | None = None


def fitted_output(message: str | None, sent_max_tokens: int | None) -> Fit:
    """The ``max_tokens`` under which the request fits the window its refusal states."""
    stated = sizes(message[:8192]) if message else None
    if stated is None or not stated.per_minute or stated.requested <= stated.limit:
        return Fit(None, {"reason": "the refusal states no tokens-per-minute numbers"})
    excess = stated.requested - stated.limit + math.ceil(stated.limit * MARGIN)
    facts: dict[str, object] = {"limit_source": "provider_per_minute", "target_tokens": stated.limit,
                                "requested_tokens": stated.requested}  # fmt: skip
    lowered = (sent_max_tokens or 0) - excess
    if lowered < MIN_OUTPUT_TOKENS:
        why = "the prompt alone does not fit the tokens-per-minute window"
        prompt = stated.requested - (sent_max_tokens or 0)
        alone = prompt if prompt > 0 else None
        return Fit(None, {**facts, "reason": why}, prompt_over=True, prompt_tokens=alone)
    report = {**facts, "max_tokens_lowered_to": lowered, "messages_removed": 0, "turns_removed": 0}
    return Fit(lowered, report)
