"""How much of an answer's output limit a translated thinking budget may take.

Both providers count thinking against the answer's own limit: Anthropic's ``budget_tokens``
must be below ``max_tokens`` (the extended-thinking guide; its example gives 10,000 of 16,000
to thinking), and Gemini counts thought tokens against ``maxOutputTokens`` (an empty answer
ending ``MAX_TOKENS`` once the thoughts have taken all of it: googleapis/python-genai#811 on
2.5 Pro, #2062 on Gemini 3 Flash, #782). A translation that turns an effort into a budget as
large as the limit leaves the answer nothing: the model may think to the end and say nothing,
or call no tool.

The rule, the same for both: the answer keeps ``max(ANSWER_MIN, limit // 4)`` of the limit,
and thinking gets at most the rest (``room``). A quarter is close to the share Anthropic's own
example leaves the answer (6,000 of 16,000), and 1,024 tokens hold a short answer or a tool
call. A budget that no longer reaches the provider's least is not sent as one: Anthropic's
thinking is left out (below 1,024 it is refused); a Gemini model that can stop thinking is
asked to (``thinkingBudget: 0``), one that cannot gets its least budget, the nearest to none it
takes (left out, Gemini 2.5 and 3 think as long as they like). The client's limit itself is
never raised: it is what a key's spend is reserved on.
"""

from __future__ import annotations

import re
from typing import Any

# The chat field a budget the client named travels in from one hop to the next (Gemini →
# chat → Messages): chat has only effort levels, and a named budget is the client's own split
# of its limit, kept where the target takes budgets. Qwen's chat servers take a field of this
# name and meaning (DashScope's ``thinking_budget`` beside ``enable_thinking``, as Agno's
# DashScope model sends it: https://docs.agno.com/concepts/models/dashscope).
NAMED = "thinking_budget"
ANSWER_MIN = 1024
ANTHROPIC_LEAST = 1024  # "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"

# Gemini's thinking budgets by model (the thinking guide's table,
# https://ai.google.dev/gemini-api/docs/thinking#set-budget): the least a budget may be, and
# whether 0 turns thinking off. 2.5 Flash takes 0 to 24,576, Flash-Lite 512 to 24,576 or 0,
# 2.5 Pro 128 to 32,768 and never 0 ("Budget 0 is invalid. This model only works in thinking
# mode."). Other names (Gemini 3, which only thinks) are held to 512, the least the effort
# table has always sent every model, and are not asked to stop.
_GEMINI = (("gemini-2.5-flash-lite", 512, True), ("gemini-2.5-flash", 1, True),
           ("gemini-2.5-pro", 128, False))  # fmt: skip
_GEMINI_OTHER = (512, False)


def room(limit: int) -> int:
    """The most thinking may take of an output limit of ``limit`` tokens (may be 0 or less)."""
    return limit - max(ANSWER_MIN, limit // 4)


def anthropic_budget(asked: int, max_tokens: int) -> int | None:
    """``budget_tokens`` for a budget of ``asked`` under ``max_tokens``; None: no thinking."""
    budget = min(asked, room(max_tokens))
    return budget if budget >= ANTHROPIC_LEAST else None


def anthropic_named(asked: int, max_tokens: int) -> int | None:
    """``budget_tokens`` for a budget the client named: as asked where Anthropic takes it (at
    least 1,024 and below ``max_tokens``), else raised to that least or held to ``room``."""
    if ANTHROPIC_LEAST <= asked < max_tokens:
        return asked
    return anthropic_budget(max(asked, ANTHROPIC_LEAST), max_tokens)


def gemini_budget(asked: int, limit: int | None, model: str) -> int:
    """``thinkingBudget`` for a budget of ``asked`` under ``maxOutputTokens`` ``limit`` (None:
    none named, and nothing to leave room in); 0 turns thinking off."""
    if limit is None:
        return asked
    name = model.removeprefix("models/")
    found = (rule for prefix, *rule in _GEMINI if name.startswith(prefix))
    least, can_stop = next(found, _GEMINI_OTHER)
    budget = min(asked, room(limit))
    if budget >= least:
        return budget
    return 0 if can_stop else least


# The least thinking a Gemini model can be asked for, for a client that asked for none (chat's
# ``reasoning_effort: "none"``, Messages' ``thinking: {type: "disabled"}``). Leaving
# thinkingConfig out is not none: 2.5 Flash then thinks as it likes and Gemini 3 at its default
# level (HIGH on 3 Pro). 2.5 Flash and Flash-Lite stop at a budget of 0 ("thinkingBudget to 0
# turns thinking off", the thinking guide); 2.5 Pro cannot and takes 128 at least (the table
# above). Gemini 3 cannot be turned off ("You cannot disable thinking for Gemini 3 Pro", the
# thinking guide as enricoros/big-AGI#893 quotes it) and is asked by level, the least it
# takes: ``minimal`` on the Flash models that list it (3 Flash: the Gemini 3 guide's "Gemini 3
# Flash thinking levels", flachesis/gemini-rust#61; 3.1 and 3.5 Flash), ``low`` elsewhere (3
# Pro takes low and high; 3.1 Pro and 3.7 Flash refuse minimal: "'minimal' is not a supported
# thinking level for this model. Allowed values are: medium, low, high.",
# fishjar/kiss-translator#1048). Which level a later Flash takes is unknown until it is
# documented: ``low``, which every Gemini 3 model listed so far takes.
#
# Nothing is asked of a model whose least is not known: a name with no version (the aliases
# gemini-flash-latest, gemini-pro-latest, whose model changes under them; Gemma, which has no
# Gemini thinking controls), a 2.5 name outside the table, an image model ("Thinking is not
# enabled for models/gemini-2.0-flash-preview-image-generation", lobehub/lobehub#7985; the same
# for gemini-2.5-flash-image-preview: policy/refused_param.py). A guess is worse than the
# model's default: 512, the effort table's least, turned thinking on for the aliases' Flash-Lite
# and would be refused where the model does not think (review).
_MINIMAL_LEVEL = ("gemini-3-flash", "gemini-3.1-flash", "gemini-3.5-flash")
_GENERATION = re.compile(r"gemini-(\d+)(?:\.(\d+))?(?:[.-]|$)")
_NO_THINKING_CONTROL = re.compile(r"-image(?:[.-]|$)")


def gemini_least(model: str) -> dict[str, Any] | None:
    """``thinkingConfig`` for the least thinking ``model`` does; None: nothing to ask, the
    model does not think (Gemini 1.x and 2.0, Gemma, image models) or its least is unknown."""
    name = model.removeprefix("models/")
    found = _GENERATION.match(name)
    if found is None or _NO_THINKING_CONTROL.search(name):
        return None
    version = (int(found.group(1)), int(found.group(2) or 0))
    if version >= (3, 0):
        return {"thinkingLevel": "minimal" if name.startswith(_MINIMAL_LEVEL) else "low"}
    rule = next((rule for prefix, *rule in _GEMINI if name.startswith(prefix)), None)
    if version < (2, 5) or rule is None:
        return None
    least, can_stop = rule
    return {"thinkingBudget": 0 if can_stop else least}
