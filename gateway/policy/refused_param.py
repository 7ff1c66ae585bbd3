"""A request parameter the model refuses, as the provider names it, and whether the gateway may
leave it out.

Agents send what their own provider's models take: Claude Code's effort becomes chat's
``reasoning_effort``, which gpt-4o refuses ("Unrecognized request argument supplied:
reasoning_effort"); a chat client's ``max_tokens`` is refused by OpenAI's reasoning models
("Use 'max_completion_tokens' instead"); newer Claude models refuse ``temperature`` with
``top_p``. Each wording below is a provider's own (the ``refused_param`` cases in
``tests/corpus/``). The gateway drops the field, or carries its value under the name the
provider gives, only where the request then means the same: sampling knobs and effort
(the model's default applies), storage and routing hints, ``n`` while it is 1. A field that
carries the request's meaning (``tools``, ``response_format``, ``n`` above 1, ``logprobs``) is
never touched: its refusal reaches the client as it came. ``stop`` is the one field left out
that bears on the answer: a reasoning model refuses it outright ("Unsupported parameter: 'stop'
is not supported with this model."), and the answer then runs past where it would have stopped,
as it does on every Responses upstream (chat → Responses drops ``stop``: that API has none).

One refusal of a field that carries meaning has a way out the provider documents: Claude Fable
and Mythos 5.1, Opus and Sonnet 5.5 refuse a forced ``tool_choice`` on every request
("tool_choice: type "tool" and "any" are not supported for this model.", inspect_ai #5176),
``auto`` being what they take. A model the gateway does not know to be one of them
(``apis/messages/claude_models.py``, where translated requests get ``auto`` up front) gets it
from then on: the forced call is lost, the request is answered.

OpenAI's gpt-5.4 and later refuse effort beside function tools on chat completions ("Function
tools with reasoning_effort are not supported for gpt-5.4 in /v1/chat/completions"); the newer
models refuse their own default effort there too, and OpenAI's newer wording names the way out
("set reasoning_effort to 'none'"). That request is sent with ``reasoning_effort: "none"``,
and only where it declares tools: the same model takes effort on a turn without them.

An effort refused for its value with the values the model takes listed (gpt-5-pro takes only
'high', a ``-chat`` model only 'medium') is sent as the nearest of them, or left out when none
is on OpenAI's scale (``unsupported_effort``): asked for a bit more or less thought, the request
still means the same. Gemini's topK above the model's range ("... the supported range is from 1
(inclusive) to 41 (exclusive)") goes as the highest the range takes, the same way.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import jsonbody
from gateway.apis.gemini.fields import snake
from gateway.apis.messages.claude_models import FORCED, unforced
from gateway.policy.error_fields import parse
from gateway.policy.learned import Learned

# Fields whose absence leaves the answer's meaning: the model's own default applies.
# ``stream_options`` only asks for a stream's usage chunk (the gateway adds it for accounting,
# ``upstreams[].stream_usage``); a server with a strict schema refuses it as an unknown input
# (vLLM behind GPUStack, gpustack/gpustack#429; Fireworks, FlowiseAI/Flowise#2866): the
# stream then comes without that chunk rather than not at all.
DROPPABLE = frozenset({
    "temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty", "seed",
    "reasoning_effort", "reasoning", "thinking", "verbosity",
    "store", "service_tier", "parallel_tool_calls", "prompt_cache_key", "safety_identifier",
    "stream_options", "stop",
})  # fmt: skip
# Fields left out only while they hold the API's own default: the request then means the same
# (LangChain's ChatOpenAI sends ``n: 1``, which Mistral refuses as an unknown input).
AT_DEFAULT: dict[str, object] = {"n": 1}
# A nested field refused on its own: what is dropped for it (its parent's other members kept).
NESTED = {"reasoning.effort": ("reasoning", "effort"), "output_config.effort": ("output_config", "effort"),
          # A Gemini request's thinking (in either spelling the API takes, see ``apply``).
          "thinking_config": ("generationConfig", "thinkingConfig")}  # fmt: skip
# A refusal naming no field for several the gateway may leave out: each goes where the body has
# it, at the top (chat) or in its parent (a Gemini request's generationConfig, either spelling).
SEVERAL: dict[str, tuple[tuple[str, ...], tuple[str, tuple[str, ...]]]] = {
    "penalty": (("presence_penalty", "frequency_penalty"),
                ("generationConfig", ("presencePenalty", "frequencyPenalty"))),
}  # fmt: skip
# The two names of chat's output budget: one refused is carried under the other, never dropped.
BUDGETS = {"max_tokens": "max_completion_tokens", "max_completion_tokens": "max_tokens"}

_F = r"[`'\"]?([A-Za-z_][A-Za-z0-9_.]{0,63})[`'\"]?"

# Each pattern's first group names the field; a second, where there is one, names its replacement.
_REFUSED: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # OpenAI, Azure: "Unsupported parameter: 'max_tokens' is not supported with this model.
        # Use 'max_completion_tokens' instead."; Responses: "... 'reasoning.effort' ..."
        rf"Unsupported parameter: {_F} is not supported with this model\.(?: Use {_F} instead)?",
        # OpenAI: "Unsupported value: 'temperature' does not support 0.2 with this model. Only
        # the default (1) value is supported."
        rf"Unsupported value: {_F} does not support .{{1,40}}? with this model\. Only the default",
        # OpenAI (gpt-4o, gpt-4o-mini): "Unrecognized request argument supplied: reasoning_effort"
        rf"Unrecognized request argument supplied: {_F}",
        # Azure (o1-mini): "Unknown parameter: 'reasoning_effort'."
        rf"Unknown parameter: {_F}\.",
        # Anthropic (Opus 4.7 and later): "`temperature` is deprecated for this model."
        rf"{_F} is deprecated for this model",
        # DeepSeek: "deepseek-reasoner does not support the parameter `presence_penalty`"
        rf"does not support the parameter {_F}",
        # xAI: "Model grok-4-latest does not support parameter reasoningEffort."
        rf"does not support parameter {_F}",
        # xAI: "Argument not supported on this model: presencePenalty"
        rf"Argument not supported on this model: {_F}",
        # Gemini's OpenAI-compatible endpoint: 'Unknown name "reasoning_effort": Cannot find field.'
        rf"Unknown name {_F}: Cannot find field",
        # Groq: "property 'reasoning_effort' is unsupported, did you mean 'reasoning_format'?" (its
        # guess is not taken). Anchored: a message's own field is refused as "'messages.0' : for
        # 'role:user' the following must be satisfied[('messages.0' : property 'id' is unsupported)]".
        rf"^property {_F} is unsupported",
    )
)
# Anthropic (Claude 4.5 and later): "`temperature` and `top_p` cannot both be specified for this
# model. Please use only one." The second is left out (the client's temperature is kept).
_EITHER = re.compile(rf"{_F} and {_F} cannot both be specified", re.IGNORECASE)
# Anthropic: "'claude-3-5-sonnet-20241022' does not support thinking."; "This model does not
# support the effort parameter."
_NO_THINKING = re.compile(r"does not support thinking\.", re.IGNORECASE)
# Gemini 2.0 (the Gemini API): "thinking_config is not supported."; an image model: "Thinking is
# not enabled for models/gemini-2.5-flash-image-preview" (Claude Code's thinking, translated).
_NO_GEMINI_THINKING = re.compile(r"^thinking_config is not supported\.|^Thinking is not enabled for models/",
                                 re.IGNORECASE)  # fmt: skip
_NO_EFFORT = re.compile(r"does not support the effort parameter", re.IGNORECASE)
# OpenAI (gpt-5.4 and gpt-5.5, chat completions): "Function tools with reasoning_effort are not
# supported for gpt-5.4 in /v1/chat/completions. Please use /v1/responses instead."
# (pipecat-ai/pipecat#4043, openai/openai-openapi#541); gpt-5.6: "... To use function tools, use
# /v1/responses or set reasoning_effort to 'none'." (GEMISIS/leviath#333). Leaving the field
# out is not enough from gpt-5.5 on: the model's default effort is refused as well ("tools only
# => 400 ...; tools + reasoning_effort=none => 200", BerriAI/litellm#34569 for gpt-5.6;
# jeffdafoe/llm-memory-api#178 for gpt-5.5). On gpt-5.4 leaving it out is enough
# (openai/openai-openapi#541), and "none" has been that line's default effort since gpt-5.2
# (gwdg/chat-ai#113): sending it asks for the same.
_TOOLS_EFFORT = re.compile(r"Function tools with reasoning_effort are not supported for \S+ in "
                           r"/v1/chat/completions", re.IGNORECASE)  # fmt: skip
EFFORT_BESIDE_TOOLS = "none"
# Anthropic (Claude Fable and Mythos 5.1, Opus and Sonnet 5.5): 'tool_choice: type "tool" and "any"
# are not supported for this model.' (UKGovernmentBEIS/inspect_ai #5176; the Fable 5.1 migration
# guide: "Forcing a tool call with {type: "any"} or {type: "tool", name: "..."} returns a 400 error").
_NOT_FORCED = re.compile(r"tool_choice: type .tool. and .any. are not supported for this model",
                         re.IGNORECASE)  # fmt: skip
# What a forced Messages tool_choice is sent as once refused (``ParamFix.apply``).
UNFORCED_CHOICE = "auto"
# OpenAI's reasoning models (o1, o3, o4-mini, gpt-5 but its ``-chat`` models) refuse a whole set
# of chat's settings, one per answer, each in one of two wordings: "Unsupported parameter:
# 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead." (gpt-5.1 in
# fish2018/YPrompt#26), "Unsupported value: 'temperature' does not support 0.1 with this model.
# Only the default (1) value is supported." (o3 in microsoft/vscode#255504), "Unsupported
# parameter: 'top_p' is not supported with this model." (gpt-5 in lfnovo/open-notebook#107 and
# HIllya51/LunaTranslator#1842, o1-preview in aandrew-me/tgpt#333, gpt-5.1-codex-max in
# microsoft/vscode#282170, chatboxai/chatbox#2627), the same words for 'presence_penalty'
# (gpt-5-mini, nextai-translator/nextai-translator#1781) and 'frequency_penalty' (o1-preview,
# lobehub/lobehub#5053), and 'stop' (above). A request with several (a Gemini client's ordinary
# generationConfig, translated) would be refused once for each: any one of them shows what the
# model is, so the whole set is left out at once (``reasoning_set``), one call instead of five.
# ``logprobs`` and ``logit_bias`` are refused too, and kept: they carry the request's meaning.
_REASONING_REFUSAL = re.compile(r"Unsupported (?:parameter|value): '([a-z_]+)'", re.IGNORECASE)
# Of them, ``stop`` is left out unasked only for the models known to refuse it: o3-mini, a
# reasoning model, takes it (huggingface/smolagents#1211), and an answer stops where it asked.
# Another name (an Azure deployment's) loses it on its own refusal, one call more.
_REFUSES_STOP = re.compile(r"(?:^|/)(?:(?:o1|o3(?!-mini)|o4-mini)(?:-|$)|gpt-5(?!.*-chat))")
# The whole set is learnt only for a model named as one of OpenAI's reasoning families (a relay's
# ``provider/`` prefix allowed): relays copy OpenAI's words, and one refusing only ``top_p`` for
# another model lost the client's temperature and penalties and had ``max_tokens`` renamed, which
# Mistral-style servers refuse (review). Another name loses each field on its own refusal.
_REASONING_MODEL = re.compile(r"(?:^|/)(?:o[1-9](?:-|$)|gpt-5(?!.*-chat))")
# Gemini 2.5 (the Gemini API): "Penalty is not enabled for models/gemini-2.5-flash" (vercel/ai
# #8943); google-genai's later wording: "Penalty is not enabled for this model"
# (google-gemini/cookbook#1290). Both penalties: the message names neither.
_NO_PENALTY = re.compile(r"^Penalty is not enabled for (?:models/|this model)", re.IGNORECASE)
# Gemini refuses a topK above what the model takes, stating the range: "Unable to submit request
# because it has a topK value of 50 but the supported range is from 1 (inclusive) to 41
# (exclusive). Update the value and try again." (gemini-1.5-flash, genkit-ai/genkit#1397;
# gemini-2.0-flash-exp, "... has topK value of 100", Robitx/gp.nvim#241). Sent as the highest it
# takes, the range's end less one (still the fewest candidates the client allowed, near enough),
# or left out where no end is stated (the model's default applies).
_TOP_K_RANGE = re.compile(r"^Unable to submit request because it has (?:a )?topK value of \d+(?: but the "
                          r"supported range is from \d+ \(inclusive\) to (\d{1,9}) \(exclusive\))?",
                          re.IGNORECASE)  # fmt: skip
# Where a top_k sits: chat's and Messages' own field, a Gemini request's (either spelling).
_TOP_K = (("top_k",), ("generationConfig", "topK"), ("generation_config", "top_k"))
# OpenAI refuses an effort the model does not take, listing those it does. Responses names the
# value and the model, the field only in the body's ``param``: "Unsupported value: 'none' is not
# supported with the 'gpt-5.1-codex' model. Supported values are: 'low', 'medium', and 'high'."
# (param ``reasoning.effort``, code ``unsupported_value``: openai/codex#6647); gpt-5-pro takes
# only 'high' (anomalyco/models.dev#331, and OpenAI's model page as anomalyco/opencode#3474
# cites it). Chat names the field: "Unsupported value: 'reasoning_effort' does not support 'high'
# with this model. Supported values are: 'medium'." (gpt-5.2-chat, egoist/chatwise-releases#1257).
_VALUE_FOR_MODEL = re.compile(r"^Unsupported value: '[^']{0,40}' is not supported with the '[^']{1,100}' "
                              r"model\. Supported values are: (.{1,200})", re.IGNORECASE)  # fmt: skip
_FIELD_VALUE = re.compile(r"^Unsupported value: '(reasoning_effort)' does not support .{1,40}? with this "
                          r"model\. Supported values are: (.{1,200})", re.IGNORECASE)  # fmt: skip
# The fields whose refused value is adapted, where they sit in the body.
EFFORTS = {"reasoning.effort": ("reasoning", "effort"), "reasoning_effort": (None, "reasoning_effort")}
# OpenAI's effort levels, least to most (``max`` from gpt-5.6, anomalyco/opencode#36135).
EFFORT_SCALE = ("none", "minimal", "low", "medium", "high", "xhigh", "max")


@dataclass(frozen=True, slots=True)
class ParamFix:
    field: str  # as the provider named it, snake_case (xAI names them in camelCase)
    rename: str | None = None  # carry the value under this name instead
    # Send this value instead (sent or not), on a request that declares tools only: the
    # refusals whose way out is a value, OpenAI's effort beside function tools (``_TOOLS_EFFORT``),
    # and Anthropic's forced tool_choice, sent as ``auto`` (``_NOT_FORCED``).
    with_tools: str | None = None
    # Left in while it holds this value, which the model takes (a reasoning model's temperature 1).
    kept_at: float | None = None
    # The values the model takes, as its refusal lists them: one outside them is sent as the
    # nearest of them (``nearest``), or left out when it has none.
    supported: tuple[str, ...] = ()
    # The highest value the model takes (Gemini's topK, ``_TOP_K_RANGE``): one above it is sent as it.
    at_most: int | None = None

    @property
    def label(self) -> str:
        """The fix itself, whatever a body holds: the same fix is learned and rescued once."""
        if self.with_tools is not None:
            return f"{self.field}={self.with_tools}"
        if self.supported:
            return f"{self.field}={'|'.join(self.supported)}"
        if self.at_most is not None:
            return f"{self.field}<={self.at_most}"
        return self.field if self.rename is None else f"{self.field}->{self.rename}"

    def shown(self, doc: Mapping[str, Any]) -> str:
        """What the fix did to ``doc`` (before it), as ``x-llm-params-dropped`` tells the client: an
        adapted value as sent and what it was sent as (``reasoning.effort=none->low``), the
        field alone where it was left out; else ``label``."""
        if self.supported:
            parent, name = EFFORTS[self.field]
            inner = doc.get(parent) if parent is not None else doc
            was = inner.get(name) if isinstance(inner, Mapping) else None
            sent = nearest(was, self.supported)  # None unless ``was`` is on OpenAI's scale: no client text
            return self.field if sent is None else f"{self.field}={was}->{sent}"
        if self.field == "top_k":
            was = _top_k(doc)
            return self.field if self.at_most is None else f"{self.field}={was}->{self.at_most}"
        return self.label

    def apply(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """``doc`` without the field (or with it renamed, or set); None when the fix does not
        apply: the field is absent, or leaving it out would change what the request means."""
        if self.field == "tool_choice":
            return _unforced(doc)
        if self.supported:
            return _adapted(doc, self.field, self.supported)
        if self.field == "top_k":
            return _lowered_top_k(doc, self.at_most)
        if self.with_tools is not None:
            if not doc.get("tools") or doc.get(self.field) == self.with_tools:
                return None
            return {**doc, self.field: self.with_tools}
        nested = NESTED.get(self.field)
        if nested is not None:
            return _without(doc, nested[0], (nested[1],))
        several = SEVERAL.get(self.field)
        if several is not None:
            top, (parent, members) = several
            out = {k: v for k, v in doc.items() if k not in top}
            fixed = _without(out, parent, members)
            if fixed is None and len(out) == len(doc):
                return None
            return out if fixed is None else fixed
        if self.field not in doc or (self.kept_at is not None and _same(doc[self.field], self.kept_at)):
            return None
        if self.field in BUDGETS:  # carried under its other name (kept if the client sent both)
            out = {k: v for k, v in doc.items() if k != self.field}
            out.setdefault(BUDGETS[self.field], doc[self.field])
            return out
        if self.field in AT_DEFAULT:
            value = doc[self.field]  # the same type too: True == 1 in Python, not in JSON
            if type(value) is not type(AT_DEFAULT[self.field]) or value != AT_DEFAULT[self.field]:
                return None
        elif self.field not in DROPPABLE:
            return None
        return {k: v for k, v in doc.items() if k != self.field}


def _top_k(doc: Mapping[str, Any]) -> Any:
    """The body's top_k, wherever it sits (``_TOP_K``); None without one."""
    for *parents, name in _TOP_K:
        inner = doc.get(parents[0]) if parents else doc
        if isinstance(inner, Mapping) and name in inner:
            return inner[name]
    return None


def _lowered_top_k(doc: Mapping[str, Any], at_most: int | None) -> dict[str, Any] | None:
    """``doc`` with its top_k ``at_most`` (left out without a bound); None when it has none
    above it (a value not a number is left to the refusal)."""
    for *parents, name in _TOP_K:
        inner = doc.get(parents[0]) if parents else doc
        if not isinstance(inner, Mapping) or name not in inner:
            continue
        value = inner[name]
        if at_most is not None and not (_number(value) and value > at_most):
            return None
        fixed = {k: v for k, v in inner.items() if k != name}
        if at_most is not None:
            fixed[name] = at_most
        if not parents:
            return fixed
        out = {k: v for k, v in doc.items() if k != parents[0]}
        if fixed:
            out[parents[0]] = fixed
        return out
    return None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _same(value: Any, default: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == default


def _adapted(doc: Mapping[str, Any], field: str, supported: tuple[str, ...]) -> dict[str, Any] | None:
    """``doc`` with its effort one the model takes: the nearest on the scale, else left out (the
    model's default applies); None when it has none or one the model takes."""
    parent, name = EFFORTS[field]
    inner = doc.get(parent) if parent is not None else doc
    if not isinstance(inner, Mapping) or name not in inner or inner[name] in supported:
        return None
    value = nearest(inner[name], supported)
    fixed = {k: v for k, v in inner.items() if k != name}
    if value is not None:
        fixed[name] = value
    if parent is None:
        return fixed
    out = {k: v for k, v in doc.items() if k != parent}
    if fixed:
        out[parent] = fixed
    return out


def nearest(value: Any, supported: tuple[str, ...]) -> str | None:
    """The supported effort nearest ``value`` on OpenAI's scale, the higher of two as near (an
    answer reasoned at least as far as asked); None when either is off the scale."""
    ranked = [s for s in supported if s in EFFORT_SCALE]
    if value not in EFFORT_SCALE or not ranked:
        return None
    at = EFFORT_SCALE.index(value)
    return min(ranked, key=lambda s: (abs(EFFORT_SCALE.index(s) - at), -EFFORT_SCALE.index(s)))


def _unforced(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """A Messages body's forced ``tool_choice`` as ``auto``, the tools narrowed to the one it
    named (``claude_models.unforced``); None when nothing is forced."""
    choice = doc.get("tool_choice")
    if not isinstance(choice, dict) or choice.get("type") not in FORCED:
        return None
    tools = doc.get("tools")
    narrowed, relaxed = unforced(tools if isinstance(tools, list) else [], choice)
    out = {**doc, "tool_choice": relaxed}
    if isinstance(tools, list):
        out["tools"] = narrowed
    return out


def _without(doc: Mapping[str, Any], parent: str, members: tuple[str, ...]) -> dict[str, Any] | None:
    """``doc`` without ``parent``'s ``members`` (and without ``parent`` if nothing is left in
    it); None when it has none of them."""
    if parent not in doc and snake(parent) in doc:  # Gemini's fields come in both spellings
        parent = snake(parent)
    inner = doc.get(parent)
    if not isinstance(inner, dict):
        return None
    gone = {name for m in members for name in (m, snake(m)) if name in inner}
    if not gone:
        return None
    rest = {k: v for k, v in inner.items() if k not in gone}
    out = {k: v for k, v in doc.items() if k != parent}
    if rest:
        out[parent] = rest
    return out


def refusal_fix(message: str | None, body: bytes) -> ParamFix | None:
    """What to leave out after a refusal: the field its message names (``refused_param``), or
    one its validation details name (``extra_input``), or an effort the model takes only some
    values of (``unsupported_effort``)."""
    return unsupported_effort(message, body) or refused_param(message) or extra_input(body)


def unsupported_effort(message: str | None, body: bytes) -> ParamFix | None:
    """An effort refused for its value, with the values the model takes (``_VALUE_FOR_MODEL``,
    ``_FIELD_VALUE``); the field is the message's, or the body's ``param`` where it names none."""
    if not message or not message.startswith("Unsupported value"):
        return None
    m = _FIELD_VALUE.search(message)
    if m is not None:
        field, listed = m.group(1).lower(), m.group(2)
    else:
        m = _VALUE_FOR_MODEL.search(message)
        if m is None:
            return None
        field, listed = _param(parse(body)), m.group(1)
    if field not in EFFORTS:
        return None
    supported = tuple(re.findall(r"'([a-z]{1,20})'", listed))
    return ParamFix(field, supported=supported) if supported else ParamFix(field)  # none listed: left out


def _param(doc: Any) -> str | None:
    err = doc.get("error") if isinstance(doc, dict) else None
    param = err.get("param") if isinstance(err, dict) else None
    return param if isinstance(param, str) else None


# What an OpenAI reasoning model refuses of chat's settings (``_REASONING_REFUSAL``), as fixes.
_REASONING_SET = (ParamFix("max_tokens", BUDGETS["max_tokens"]), ParamFix("temperature", kept_at=1),
                  ParamFix("top_p"), ParamFix("presence_penalty"), ParamFix("frequency_penalty"))


def reasoning_set(message: str | None, fix: ParamFix, model: str | None) -> tuple[ParamFix, ...]:
    """``fix`` and, when its refusal is one of an OpenAI reasoning model's (``_REASONING_REFUSAL``),
    the other fixes that model's settings need: all of them, ``fix`` first."""
    m = _REASONING_REFUSAL.search(message or "")
    if m is None or m.group(1) != fix.field or not _REASONING_MODEL.search(model or ""):
        return (fix,)
    members = [*_REASONING_SET, *([ParamFix("stop")] if _REFUSES_STOP.search(model or "") else [])]
    fields = {f.field for f in members}
    if fix.field not in fields | {"stop"}:
        return (fix,)
    # The refused field as its refusal says: "Unsupported value" (only the default, 1, taken)
    # keeps a temperature of 1; refused outright ("Unsupported parameter") it goes, 1 included:
    # kept at 1, it was sent again and refused again until the rescues ran out (review).
    by_value = m.group(0).lower().startswith("unsupported value") and fix.field in fields
    first = next(f for f in members if f.field == fix.field) if by_value else fix
    return (first, *(f for f in members if f.field != fix.field))


def refused_param(message: str | None) -> ParamFix | None:
    """The field a refusal names, when it names one the gateway knows how to leave out."""
    if not message:
        return None
    m = _EITHER.search(message)
    if m is not None:
        return _fix(m.group(2), None)
    if _NO_THINKING.search(message):
        return ParamFix("thinking")
    if _NO_GEMINI_THINKING.search(message):
        return ParamFix("thinking_config")
    if _NO_EFFORT.search(message):
        return ParamFix("output_config.effort")
    if _TOOLS_EFFORT.search(message):
        return ParamFix("reasoning_effort", with_tools=EFFORT_BESIDE_TOOLS)
    if _NOT_FORCED.search(message):
        return ParamFix("tool_choice", with_tools=UNFORCED_CHOICE)
    if _NO_PENALTY.search(message):
        return ParamFix("penalty")
    m = _TOP_K_RANGE.search(message)
    if m is not None:
        end = int(m.group(1)) if m.group(1) else 0
        return ParamFix("top_k", at_most=end - 1) if end > 1 else ParamFix("top_k")
    for pattern in _REFUSED:
        m = pattern.search(message)
        if m is not None:
            groups = m.groups()
            return _fix(groups[0], groups[1] if len(groups) > 1 else None)
    return None


def extra_input(body: bytes) -> ParamFix | None:
    """The field a validation error refuses as an unknown input, when every error it lists is
    such a field the gateway may leave out (else the request fails however many are left out).

    Mistral answers a field it does not take with pydantic's error, not a sentence:
    ``{"detail": [{"type": "extra_forbidden", "loc": ["body", "max_completion_tokens"], "msg":
    "Extra inputs are not permitted", ...}]}``, under ``message``, as that document in a string,
    or as the body's own ``detail``; one error per unknown field."""
    if b"extra_forbidden" not in body:  # most refusals: no second parse
        return None
    errors = _validation_errors(parse(body), 3)
    fixes = [_extra_field(e) for e in errors]
    if not fixes or any(f is None for f in fixes):
        return None
    return fixes[0]


def _validation_errors(doc: Any, depth: int) -> list[dict[str, Any]]:
    if depth == 0 or not isinstance(doc, dict):
        return []
    out: list[dict[str, Any]] = []
    for key in ("detail", "message"):
        value = doc.get(key)
        if isinstance(value, str) and value.startswith("{"):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                continue
        if isinstance(value, list):
            out += [e for e in value if isinstance(e, dict) and "loc" in e]
        elif isinstance(value, dict):
            out += _validation_errors(value, depth - 1)
        if out:
            return out  # Mistral repeats the list under both keys
    return out


def _extra_field(error: dict[str, Any]) -> ParamFix | None:
    loc = error.get("loc")
    if error.get("type") != "extra_forbidden" or not isinstance(loc, list) or len(loc) != 2:
        return None  # another kind of error, or a field inside a message or a tool
    where, field = loc
    return _fix(field, None) if where == "body" and isinstance(field, str) else None


def _fix(field: str, rename: str | None) -> ParamFix | None:
    field = field.rstrip(".")  # a sentence's full stop after an unquoted name
    field = snake(field) if "." not in field else field
    rename = snake(rename.rstrip(".")) if rename else None
    if field in NESTED or field in DROPPABLE or field in AT_DEFAULT:
        return ParamFix(field)
    if field in BUDGETS and (rename is None or rename == BUDGETS[field]):
        return ParamFix(field, BUDGETS[field])
    return None


class ParamFixes(Learned[tuple[ParamFix, ...]]):
    """The fixes each (upstream, model) needed, learned from its refusals, applied to every
    request sent to it afterwards."""

    __slots__ = ()

    def learn(self, upstream: str, model: str | None, fix: ParamFix) -> None:
        known = self._get(upstream, model) or ()
        if fix not in known:
            self._put(upstream, model, (*known, fix))

    def applied(self, upstream: str, model: str | None, body: bytes) -> tuple[bytes, list[tuple[str, str]]]:
        """``body`` with the (upstream, model)'s learned fixes, and each applied fix's label and
        what it did (``shown``; none: the body unchanged). The two differ for an adapted value
        (``top_k<=40``, ``top_k=64->40``): the label is what a rescue is guarded by, whatever
        the body held, the shown text is what the client is told."""
        fixes = self._get(upstream, model)
        if not fixes:
            return body, []
        try:
            doc, lenient = jsonbody.loads(body)
        except ValueError:
            return body, []
        if not isinstance(doc, dict):
            return body, []
        done: list[tuple[str, str]] = []
        for fix in fixes:
            fixed = fix.apply(doc)
            if fixed is not None:
                done.append((fix.label, fix.shown(doc)))
                doc = fixed
        return (jsonbody.dumps(doc, lenient=lenient), done) if done else (body, [])
