"""Which thinking request a Claude model takes, read from its name.

Anthropic's models differ in how thinking is asked for (AWS Bedrock user guide, "Adaptive
thinking"; platform.claude.com, "Building with extended thinking" and "Effort"):

* up to the 4.5 generation (``claude-3-*``, Opus/Sonnet 4.0–4.5, Haiku 4.5): only
  ``thinking: {type: enabled, budget_tokens}``; ``type: adaptive`` is not known to them;
* Opus 4.6 and Sonnet 4.6: both, ``enabled`` deprecated; adaptive with
  ``output_config.effort`` low, medium, high or max;
* Opus 4.7 and later, the 5 generation, Mythos and Fable: adaptive only; ``type: enabled`` is a
  400 ("\"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\"
  and \"output_config.effort\" to control thinking behavior."); effort adds xhigh.

A name is matched anywhere, so Bedrock (``us.anthropic.claude-opus-4-7``), Vertex
(``claude-opus-4-7@20260101``) and relay (``anthropic/claude-opus-4.7``) ids read the same. A name
that is not a Claude one (a local model behind a Messages-compatible server) keeps the budget
form, which every Messages implementation knew first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "claude-opus-4-7", "claude-sonnet-4-20250514" (4.0: a date is not a minor version), "claude-fable-5".
_NAMED = re.compile(r"claude-(?:(?P<tier>opus|sonnet|haiku)-(?P<major>\d+)(?:[-.](?P<minor>\d{1,2})(?!\d))?"
                    r"|(?P<line>mythos|fable))")


@dataclass(frozen=True, slots=True)
class Thinking:
    adaptive: bool  # thinking asked as {type: adaptive} with output_config.effort, not a budget
    efforts: frozenset[str]  # the output_config.effort values the model takes (adaptive only)


BUDGET = Thinking(adaptive=False, efforts=frozenset())
_ADAPTIVE_46 = Thinking(adaptive=True, efforts=frozenset({"low", "medium", "high", "max"}))
_ADAPTIVE = Thinking(adaptive=True, efforts=frozenset({"low", "medium", "high", "xhigh", "max"}))


def takes_prefill(model: str) -> bool:
    """Whether the model continues a conversation that ends on the assistant (a prefill).
    From the 4.6 generation on it refuses it: "This model does not support assistant message
    prefill. The conversation must end with a user message." (Claude 4.6 "What's new",
    breaking changes; quoted with request ids in opencode-dynamic-context-pruning #520)."""
    return not thinking_for(model).adaptive


def thinking_for(model: str) -> Thinking:
    found = _NAMED.search(model.lower())
    if found is None:
        return BUDGET
    if found["line"]:
        return _ADAPTIVE
    version = (int(found["major"]), int(found["minor"] or 0))
    if version >= (4, 7):
        return _ADAPTIVE
    if version == (4, 6):
        return _ADAPTIVE_46
    return BUDGET
