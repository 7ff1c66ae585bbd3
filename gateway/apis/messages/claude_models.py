"""What a Claude model takes, read from its name: which thinking request, whether a prefill,
sampling parameters and a forced tool choice.

Anthropic's models differ in how thinking is asked for (AWS Bedrock user guide, "Adaptive
thinking"; platform.claude.com, "Building with extended thinking" and "Effort"):

* Claude 3 and 3.5 (``claude-3-opus``, ``claude-3-5-sonnet``...): no thinking at all
  ("'claude-3-5-sonnet-20241022' does not support thinking.", claude-code #2245, the corpus's
  anthropic-400-model-does-not-support-thinking): it came with Claude 3.7 Sonnet;
* from 3.7 Sonnet up to the 4.5 generation (Opus/Sonnet 4.0–4.5, Haiku 4.5): only
  ``thinking: {type: enabled, budget_tokens}``; ``type: adaptive`` is not known to them;
* Opus 4.6 and Sonnet 4.6: both, ``enabled`` deprecated; adaptive with
  ``output_config.effort`` low, medium, high or max;
* Opus 4.7 and later, the 5 generation, Mythos and Fable: adaptive only; ``type: enabled`` is a
  400 ("\"thinking.type.enabled\" is not supported for this model. Use \"thinking.type.adaptive\"
  and \"output_config.effort\" to control thinking behavior."); effort adds xhigh.

Effort came before adaptive thinking: Claude Opus 4.5 takes ``output_config.effort`` low, medium
or high beside a budget or without thinking, behind the beta ``effort-2025-11-24`` ("Requires
beta flag `effort-2025-11-24` in API calls", anthropics/claude-code's
plugins/claude-opus-4-5-migration/skills/claude-opus-4-5-migration/references/effort.md; "Claude
Opus 4.5 is the only model that supports the effort parameter", Claude 4.5 "What's new"). The
beta went with Opus 4.6 ("The effort parameter is now generally available (no beta header
required)", the API release notes); Opus 4.5 still gets it, as its own docs ask.

How a client's "no thinking" is asked differs too. Up to Opus 4.8 and Sonnet 4.6 a request
without ``thinking`` does not think. Claude Opus 5 and Sonnet 5 think by default: "On Claude Opus 4.8,
requests without a thinking field run without thinking; on Claude Opus 5, the same requests run
with adaptive thinking [...] To preserve the old behavior, pass thinking: {type: "disabled"}",
allowed at effort high or lower (https://platform.claude.com/docs/en/models/opus-5/migration-guide;
Sonnet 5: "adaptive thinking is on by default", its migration guide; Sonnet 5.5's likens its
``between_tools`` to ``disabled`` on Sonnet 5). Opus 5.5, Sonnet 5.5 and Fable and
Mythos 5 on think on every request and refuse ``disabled`` ("Turning thinking off or setting a
thinking budget is rejected, and `effort` is the control", the Opus 5.5 migration guide; Sonnet
5.5's lists ``thinking: {"type": "disabled"}`` among the five settings that return a 400; "Both
thinking: {type: "disabled"} and manual extended thinking [...] return a 400 error", the Fable 5
migration guide, for Fable 5 and Mythos 5): the
least effort is the nearest to none they take. (Sonnet 5.5's ``between_tools`` still thinks
between calls, and its effort may not change mid-conversation: not used.)

A name is matched anywhere, so Bedrock (``us.anthropic.claude-opus-4-7``), Vertex
(``claude-opus-4-7@20260101``) and relay (``anthropic/claude-opus-4.7``) ids read the same. A name
that is not a Claude one (a local model behind a Messages-compatible server) keeps the budget
form, which every Messages implementation knew first, and is taken to accept what the older
models accept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.memo import by_name

# "claude-opus-4-7", "claude-sonnet-4-20250514" (4.0: a date is not a minor version), "claude-fable-5-1",
# "claude-mythos-preview" (a line without a version).
_NAMED = re.compile(r"claude-(?:(?P<tier>opus|sonnet|haiku)-(?P<major>\d+)(?:[-.](?P<minor>\d{1,2})(?!\d))?"
                    r"|(?P<line>mythos|fable)(?:-(?P<lmajor>\d+)(?:[-.](?P<lminor>\d{1,2})(?!\d))?)?)")
# The older order, "claude-3-5-sonnet-20241022", "anthropic/claude-3.5-haiku".
_NUMBERED = re.compile(r"claude-(?P<major>\d+)(?:[-.](?P<minor>\d))?-(?:opus|sonnet|haiku)")


@by_name
def _read(model: str) -> tuple[re.Match[str] | None, bool]:
    """The name as ``_NAMED`` reads it, and whether ``_NUMBERED`` (a Claude 3-style id) matches:
    read once per name (``memo``), where each question below searched it again."""
    lower = model.lower()
    found = _NAMED.search(lower)
    return found, found is None and _NUMBERED.search(lower) is not None


FORCED = ("any", "tool")  # the tool_choice types that force a call


# eq=False: the instances are this module's constants, one per way of thinking, told apart by
# identity; the generated __eq__ ran field by field for each member an ``in`` passed (~90
# bytecodes a request translated to Messages, issue #38).
@dataclass(frozen=True, slots=True, eq=False)
class Thinking:
    adaptive: bool  # thinking asked as {type: adaptive} with output_config.effort, not a budget
    efforts: frozenset[str]  # the output_config.effort values the model takes (adaptive only)
    thinks: bool = True  # False: the model takes no thinking at all (Claude 3 and 3.5)
    # How a request asks for no thinking: "" leave ``thinking`` out (the model thinks only when
    # asked), DISABLED send ``{type: disabled}`` (it thinks by default), LEAST send the least
    # effort (it thinks on every request and refuses ``disabled``).
    off: str = ""
    beta: str = ""  # the anthropic-beta its effort needs


DISABLED, LEAST = "disabled", "low"
EFFORT_BETA = "effort-2025-11-24"
BUDGET = Thinking(adaptive=False, efforts=frozenset())
NO_THINKING = Thinking(adaptive=False, efforts=frozenset(), thinks=False)
_BUDGET_EFFORT = Thinking(adaptive=False, efforts=frozenset({"low", "medium", "high"}), beta=EFFORT_BETA)
_ADAPTIVE_46 = Thinking(adaptive=True, efforts=frozenset({"low", "medium", "high", "max"}))
_ADAPTIVE = Thinking(adaptive=True, efforts=frozenset({"low", "medium", "high", "xhigh", "max"}))
_ADAPTIVE_ON = Thinking(adaptive=True, efforts=_ADAPTIVE.efforts, off=DISABLED)
_ADAPTIVE_ALWAYS = Thinking(adaptive=True, efforts=_ADAPTIVE.efforts, off=LEAST)
_ADAPTIVE_ONLY = (_ADAPTIVE, _ADAPTIVE_ON, _ADAPTIVE_ALWAYS)
# Context windows of more than 200k tokens (each model's overview page on platform.claude.com,
# "Context window: 1M tokens": Opus 4.6, 4.8 and 5.5, Sonnet 4.6, Haiku 5.5, Fable 5; Opus 4.7 on
# Bedrock's model card; Opus and Sonnet 5 in their migration guides, "the 1M token context
# window (the default, with no beta header)"). Opus, Sonnet and Haiku 4.5 and older: 200K.
LONG_WINDOW = 1_000_000
SHORT_WINDOW = 200_000


def takes_prefill(model: str) -> bool:
    """Whether the model continues a conversation that ends on the assistant (a prefill).
    From the 4.6 generation on it refuses it: "This model does not support assistant message
    prefill. The conversation must end with a user message." (Claude 4.6 "What's new",
    breaking changes; quoted with request ids in opencode-dynamic-context-pruning #520)."""
    return not thinking_for(model).adaptive


def thinking_for(model: str) -> Thinking:
    found, numbered = _read(model)
    if found is None:
        older = _NUMBERED.search(model.lower()) if numbered else None
        if older is not None and (int(older["major"]), int(older["minor"] or 0)) < (3, 7):
            return NO_THINKING
        return BUDGET
    version = _version(found)
    if found["line"]:
        return _ADAPTIVE_ALWAYS if version is not None and version >= (5, 0) else _ADAPTIVE
    assert version is not None  # a tier always has its major version
    if found["tier"] in ("opus", "sonnet") and version >= (5, 5):
        return _ADAPTIVE_ALWAYS
    if found["tier"] in ("opus", "sonnet") and version >= (5, 0):
        return _ADAPTIVE_ON
    if version >= (4, 7):
        return _ADAPTIVE
    if version == (4, 6):
        return _ADAPTIVE_46
    if found["tier"] == "opus" and version == (4, 5):
        return _BUDGET_EFFORT
    return BUDGET


def context_window(model: str) -> int | None:
    """The model's context window in tokens as Anthropic documents it (``LONG_WINDOW`` above),
    or None for a name not read here (Mythos Preview, a model behind a compatible server)."""
    found, numbered = _read(model)
    if found is None:
        return SHORT_WINDOW if numbered else None
    version = _version(found)
    if version is None:
        return None
    if found["line"]:
        return LONG_WINDOW if version >= (5, 0) else None
    least = (5, 5) if found["tier"] == "haiku" else (4, 6)
    return LONG_WINDOW if version >= least else SHORT_WINDOW


def takes_sampling(model: str) -> bool:
    """Whether the model takes ``temperature``, ``top_p`` and ``top_k``: not the adaptive-only
    ones, for which Anthropic removed them together with the thinking budget. Opus 4.7: "The
    `temperature`, `top_p`, and `top_k` parameters are no longer accepted on Claude Opus 4.7.
    Requests that include them return a 400 error." (Anthropic's model-migration guide, the
    claude-api skill's ``shared/model-migration.md``); Opus 4.8 and Opus 5 inherit it (the same
    guide); Claude Sonnet 5: "Sampling parameters rejected" (the same guide); Claude Fable 5 and
    Mythos 5 have "Same Messages API [...] as Opus-tier" (the same guide; pydantic-ai #5849,
    "verified live against the Anthropic API": "no sampling settings"). The answer is "`temperature`
    is deprecated for this model." (RooCode #12162; testplanit #220 on Opus 4.7), "`top_p` is
    deprecated for this model." and "`top_k` is deprecated for this model." (claude-sonnet-5,
    quoted with request ids ``req_011Ce9LTti8KXAoFmn7SW8xU`` and ``req_011Ce9LTvBRxmGvwNhJ8xESc``
    in a probe record; the same for Haiku and Sonnet 5.5 in another)."""
    return thinking_for(model) not in _ADAPTIVE_ONLY


def takes_forced_tool(model: str) -> bool:
    """Whether the model takes a ``tool_choice`` that forces a call (``any``, or ``tool`` with a
    name). Claude Fable 5.1 and Mythos 5.1 do not: "Forcing a tool call with {type: "any"} or
    {type: "tool", name: "..."} returns a 400 error." ({type: "auto"} and {type: "none"} are
    supported; https://platform.claude.com/docs/en/models/fable-5-1/migration-guide), nor Claude
    Opus 5.5 and Sonnet 5.5 ("Forced tool use returns an error", their "What's new" pages,
    https://platform.claude.com/docs/en/models/opus-5-5/whats-new-opus-5-5 and
    .../sonnet-5-5/whats-new-sonnet-5-5), nor Fable and Mythos 5.2, whose "What's new" lists what
    changed from 5.1 and takes nothing of it back. Fable 5 and Mythos 5 take it (Anthropic
    documents ``auto``, ``none``, ``any`` and ``tool`` for Fable 5: withceleste/celeste-python
    #393), as do Opus 5 and Sonnet 5 (the 5.5 pages name it a change from them). The answer is
    "tool_choice: type "tool" and "any" are not supported for this model."
    (UKGovernmentBEIS/inspect_ai #5176). These models think on every request (Fable and Mythos
    5.1 and Opus 5.5: "Adaptive thinking is always on") or by default (Sonnet 5.5), and a forced
    call leaves no room for thinking; what they take instead is ``auto`` (``unforced``). A
    Mythos without a version (``claude-mythos-preview``) is not named by the sources and is
    taken to accept it; a refusal teaches the gateway otherwise (``policy/refused_param.py``)."""
    found = _read(model)[0]
    if found is None:
        return True
    version = _version(found)
    if found["line"]:
        return version is None or version < (5, 1)
    if found["tier"] in ("opus", "sonnet"):
        return version is not None and version < (5, 5)
    return True


def binds_thinking(model: str) -> bool:
    """Whether the model takes a replayed thinking block only behind the conversation it was
    written in (its ``system``, ``tools`` and every message before it unchanged), refusing it
    otherwise: "messages.N.content.M: Invalid `signature` in `thinking` block. The block is bound
    to a different conversation." Claude Fable 5.1 and later, Opus, Sonnet and Haiku 5.5 and
    later (the model lists of platform.claude.com's "Preserved thinking" pages,
    https://platform.claude.com/docs/en/build-with-claude/preserved-thinking); Mythos 5.1 records
    the binding but does not check it (Bedrock's "Preserved thinking" page). The older models
    take thinking replayed after earlier turns were dropped, as compaction always did."""
    found = _read(model)[0]
    version = None if found is None else _version(found)
    if found is None or version is None:
        return False
    if found["line"]:
        return found["line"] == "fable" and version >= (5, 1)
    return version >= (5, 5)


def is_claude(model: str) -> bool:
    """Whether the name is a Claude model's (else a model behind a Messages-compatible server,
    which Anthropic's documented rules need not bind): every Claude id holds the word, older
    ones as ``claude-3-7-sonnet-latest``, Bedrock's as ``anthropic.claude-…``."""
    return "claude" in model.lower()


def _version(found: re.Match[str]) -> tuple[int, int] | None:
    """(major, minor) of a matched name; None for a line without a version (Mythos Preview)."""
    major = found["major"] or found["lmajor"]
    if major is None:
        return None
    return int(major), int(found["minor"] or found["lminor"] or 0)


def unforced(tools: list[Any], choice: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """A forced ``tool_choice`` as a model that takes none gets it: ``auto``, with the tools
    narrowed to the one named (as ``allowed_tools`` narrows them, and as the Gemini client's
    ``allowedFunctionNames`` does), so the model may call only what the client forced, though
    it may now answer in text instead. Anything else in the choice
    (``disable_parallel_tool_use``) is kept. A name no tool has leaves the tools as they were."""
    rest = {k: v for k, v in choice.items() if k not in ("type", "name")}
    if choice.get("type") == "tool":
        named = [t for t in tools if isinstance(t, dict) and t.get("name") == choice.get("name")]
        tools = named or tools
    return tools, {"type": "auto", **rest}
