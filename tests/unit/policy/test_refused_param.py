"""The parameter a refusal names, read from the corpus's real bodies (the message the classifier
keeps, or the body's validation errors), applied only where leaving it out keeps the request's
meaning; no other body names one."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.policy.learned import LEARNED_MAX
from gateway.policy.refused_param import (
    ParamFix,
    ParamFixes,
    extra_input,
    reasoning_set,
    refusal_fix,
    refused_param,
)
from tests.corpus_cases import HELD_OUT, IN_SAMPLE, body_bytes, classify_case

NAMING = [c for c in IN_SAMPLE if "refused_param" in c["expected"]]


def test_the_corpus_has_refusals_from_the_providers_agents_meet() -> None:
    providers = {c["provider"] for c in NAMING}
    assert {"OpenAI", "Azure OpenAI", "Anthropic", "DeepSeek", "xAI", "Google Gemini (OpenAI-compatible)", "Groq",
            "Mistral"} <= providers


@pytest.mark.parametrize("case", NAMING, ids=[c["name"] for c in NAMING])
def test_the_refused_parameter_is_read_as_the_pipeline_reads_it(case: dict[str, Any]) -> None:
    fix = refusal_fix(classify_case(case).message, body_bytes(case["body"]))
    assert fix is not None and fix.label == case["expected"]["refused_param"]


def test_no_other_body_in_the_corpus_names_one() -> None:
    named = [c["name"] for c in IN_SAMPLE + HELD_OUT if "refused_param" not in c["expected"]
             and refusal_fix(classify_case(c).message, body_bytes(c["body"])) is not None]
    assert named == []


@pytest.mark.parametrize("message", [
    None, "",
    "Unsupported parameter: 'tools' is not supported with this model.",  # meaning: never left out
    "Unrecognized request argument supplied: response_format",
    "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'foo' instead.",
    # Groq refusing a field of a message (SimonSchubert/Kai#265): the request's own fields only.
    "'messages.2' : for 'role: assistant' the following must be satisfied[('messages.2' : property "
    "'reasoning_content' is unsupported)]",
])  # fmt: skip
def test_refusals_left_to_the_client(message: str | None) -> None:
    assert refused_param(message) is None


def test_groq_names_the_field_but_its_guess_at_another_is_not_taken() -> None:
    # The message as CherryHQ/cherry-studio#1099 quotes it (Claude Code's effort, translated).
    fix = refused_param("property 'reasoning_effort' is unsupported, did you mean 'reasoning_format'?")
    assert fix == ParamFix("reasoning_effort")


EFFORT_WITH_TOOLS = ParamFix("reasoning_effort", with_tools="none")


@pytest.mark.parametrize("message", [
    "Function tools with reasoning_effort are not supported for gpt-5.4 in /v1/chat/completions. Please use "
    "/v1/responses instead.",
    "Function tools with reasoning_effort are not supported for gpt-5.6-terra in /v1/chat/completions. To use "
    "function tools, use /v1/responses or set reasoning_effort to 'none'.",
])  # fmt: skip
def test_openais_effort_beside_function_tools_is_sent_as_none(message: str) -> None:
    fix = refused_param(message)
    assert fix == EFFORT_WITH_TOOLS and fix.label == "reasoning_effort=none"


UNFORCED = ParamFix("tool_choice", with_tools="auto")
WEATHER = {"name": "weather", "input_schema": {"type": "object"}}
SEARCH = {"type": "web_search_20250305", "name": "web_search"}


def test_a_forced_tool_choice_the_model_refuses_is_sent_as_auto_inspect_ai_5176() -> None:
    """Fable and Mythos 5.1, Opus and Sonnet 5.5 refuse forcing on every request; a model the
    gateway does not know to be one of them is asked once, then with `auto`."""
    fix = refused_param('tool_choice: type "tool" and "any" are not supported for this model.')
    assert fix == UNFORCED and fix.label == "tool_choice=auto"


@pytest.mark.parametrize(("doc", "fixed"), [
    ({"tools": [WEATHER, SEARCH], "tool_choice": {"type": "any"}}, {"tools": [WEATHER, SEARCH], "tool_choice": {"type": "auto"}}),
    ({"tools": [WEATHER, SEARCH], "tool_choice": {"type": "tool", "name": "weather", "disable_parallel_tool_use": True}},
     {"tools": [WEATHER], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}),
    ({"tools": [WEATHER], "tool_choice": {"type": "auto"}}, None),  # nothing forced: the refusal stands
    ({"tools": [WEATHER], "tool_choice": {"type": "none"}}, None),
    ({"tools": [WEATHER]}, None),
    ({"tools": [WEATHER], "tool_choice": "required"}, None),  # no Messages body
])  # fmt: skip
def test_unforcing_a_messages_body(doc: dict[str, Any], fixed: dict[str, Any] | None) -> None:
    before = repr(doc)
    assert UNFORCED.apply(doc) == fixed
    assert repr(doc) == before


def _detail(*errors: dict[str, Any]) -> bytes:
    return json.dumps({"detail": list(errors)}).encode()


EXTRA = {"type": "extra_forbidden", "msg": "Extra inputs are not permitted"}


@pytest.mark.parametrize(("body", "label"), [
    (_detail({**EXTRA, "loc": ["body", "seed"]}), "seed"),
    # The usage chunk the gateway asks a stream for, refused by a strict schema (gpustack#429).
    (_detail({**EXTRA, "loc": ["body", "stream_options"], "input": {"include_usage": True}}), "stream_options"),
    # Every unknown field one the gateway may leave out: the first goes now, the next on its refusal.
    (_detail({**EXTRA, "loc": ["body", "seed"]}, {**EXTRA, "loc": ["body", "top_p"]}), "seed"),
    # One it may not leave out, or another error beside it: the request fails whatever is left out.
    (_detail({**EXTRA, "loc": ["body", "seed"]}, {**EXTRA, "loc": ["body", "tools"]}), None),
    (_detail({**EXTRA, "loc": ["body", "seed"]}, {"type": "missing", "loc": ["body", "model"]}), None),
    (_detail({**EXTRA, "loc": ["body", "messages", 0, "user", "name"]}), None),
    (_detail({**EXTRA, "loc": ["query", "seed"]}), None),
    (b'{"detail": "extra_forbidden"}', None),
    (b"extra_forbidden but not JSON", None),
    (b'{"message": "not this one"}', None),
])  # fmt: skip
def test_validation_errors_name_a_field_only_when_leaving_out_fixes_the_request(body: bytes, label: str | None) -> None:
    fix = extra_input(body)
    assert (fix.label if fix is not None else None) == label


@pytest.mark.parametrize(("fix", "doc", "fixed"), [
    (ParamFix("reasoning_effort"), {"model": "m", "reasoning_effort": "high"}, {"model": "m"}),
    (ParamFix("reasoning_effort"), {"model": "m"}, None),  # not sent: nothing to fix
    (ParamFix("max_tokens", "max_completion_tokens"), {"max_tokens": 9}, {"max_completion_tokens": 9}),
    # Both sent: the one the model takes is kept as the client set it.
    (ParamFix("max_tokens", "max_completion_tokens"), {"max_tokens": 9, "max_completion_tokens": 5},
     {"max_completion_tokens": 5}),
    (ParamFix("reasoning.effort"), {"reasoning": {"effort": "high", "summary": "auto"}},
     {"reasoning": {"summary": "auto"}}),
    (ParamFix("reasoning.effort"), {"reasoning": {"effort": "high"}, "input": "x"}, {"input": "x"}),
    (ParamFix("output_config.effort"), {"output_config": {"effort": "high", "format": {"type": "json_schema"}}},
     {"output_config": {"format": {"type": "json_schema"}}}),
    (ParamFix("tools"), {"tools": []}, None),  # meaning: never left out
    (ParamFix("n"), {"n": 1, "model": "m"}, {"model": "m"}),  # the default: the same request without it
    (ParamFix("n"), {"n": 2}, None),  # two answers asked for: never left out
    (ParamFix("n"), {"n": True}, None),
    # A reasoning model's refusal of stop sequences: the answer runs on, as on a Responses upstream.
    (ParamFix("stop"), {"stop": ["\n\nHuman:"], "model": "o3"}, {"model": "o3"}),
    # gpt-5.4 and later on chat: effort beside function tools goes as "none", sent or not (the
    # newer models refuse their own default effort there too); a turn without tools keeps its own.
    (EFFORT_WITH_TOOLS, {"reasoning_effort": "high", "tools": [{}]}, {"reasoning_effort": "none", "tools": [{}]}),
    (EFFORT_WITH_TOOLS, {"tools": [{}]}, {"tools": [{}], "reasoning_effort": "none"}),
    (EFFORT_WITH_TOOLS, {"reasoning_effort": "high"}, None),
    (EFFORT_WITH_TOOLS, {"reasoning_effort": "high", "tools": []}, None),
    (EFFORT_WITH_TOOLS, {"reasoning_effort": "none", "tools": [{}]}, None),  # already so: the refusal stands
    # Gemini 2.5's "Penalty is not enabled for models/…" names neither: both go, from a Gemini
    # body's generationConfig (either spelling) or a chat body's top.
    (ParamFix("penalty"), {"contents": [], "generationConfig": {"presencePenalty": 0.5, "frequencyPenalty": 0.2,
                                                                "temperature": 1}},
     {"contents": [], "generationConfig": {"temperature": 1}}),
    (ParamFix("penalty"), {"generation_config": {"frequency_penalty": 0.2}}, {}),
    (ParamFix("penalty"), {"model": "m", "presence_penalty": 0.5, "frequency_penalty": 0.2}, {"model": "m"}),
    (ParamFix("penalty"), {"generationConfig": {"temperature": 1}}, None),  # none sent: nothing to fix
])  # fmt: skip
def test_a_fix_leaves_out_only_what_it_names(fix: ParamFix, doc: dict[str, Any], fixed: dict[str, Any] | None) -> None:
    before = repr(doc)
    assert fix.apply(doc) == fixed
    assert repr(doc) == before  # the document itself is not changed


def test_learned_fixes_apply_per_upstream_and_model_to_the_bytes_sent() -> None:
    fixes = ParamFixes()
    body = b'{"model":"gpt-4o","reasoning_effort":"high","temperature":0.2}'
    assert fixes.applied("u", "gpt-4o", body) == (body, []) and not fixes.learned
    fixes.learn("u", "gpt-4o", ParamFix("reasoning_effort"))
    fixes.learn("u", "gpt-4o", ParamFix("temperature"))
    fixes.learn("u", "gpt-4o", ParamFix("temperature"))  # once
    out, done = fixes.applied("u", "gpt-4o", body)
    assert out == b'{"model":"gpt-4o"}' and done == [("reasoning_effort",) * 2, ("temperature",) * 2]
    assert fixes.applied("u", "gpt-4.1", body) == (body, []) and fixes.applied("v", "gpt-4o", body) == (body, [])
    assert fixes.applied("u", "gpt-4o", b"not json") == (b"not json", [])


def test_effort_learned_beside_tools_leaves_a_turn_without_tools_as_it_came() -> None:
    fixes = ParamFixes()
    fixes.learn("u", "gpt-5.4", EFFORT_WITH_TOOLS)
    with_tools = b'{"model":"gpt-5.4","reasoning_effort":"high","tools":[{"type":"function"}]}'
    out, done = fixes.applied("u", "gpt-5.4", with_tools)
    assert json.loads(out)["reasoning_effort"] == "none" and done == [("reasoning_effort=none",) * 2]
    without = b'{"model":"gpt-5.4","reasoning_effort":"high"}'
    assert fixes.applied("u", "gpt-5.4", without) == (without, [])


def test_the_learned_table_is_bounded() -> None:
    fixes = ParamFixes()
    for i in range(LEARNED_MAX + 5):
        fixes.learn("u", f"m{i}", ParamFix("seed"))
    assert fixes.applied("u", f"m{LEARNED_MAX + 1}", b'{"seed":1}') == (b'{"seed":1}', [])
    fixes.learn("u", "m0", ParamFix("top_p"))  # a known entry still grows
    assert fixes.applied("u", "m0", b'{"seed":1,"top_p":1}') == (b"{}", [("seed", "seed"), ("top_p", "top_p")])


TOP_P = "Unsupported parameter: 'top_p' is not supported with this model."  # lfnovo/open-notebook#107


# LiteLLM's relay of it (chatboxai/chatbox#2627): the same refusal behind a prefix.
RELAYED = ("litellm.BadRequestError: OpenAIException - Unsupported parameter: 'top_p' is not supported with this "
           "model.. Received Model Group=gpt-5")  # fmt: skip


@pytest.mark.parametrize("message", [TOP_P, RELAYED])
def test_one_reasoning_model_refusal_leaves_out_every_setting_such_a_model_refuses(message: str) -> None:
    assert refused_param(message) == ParamFix("top_p")
    fixes = reasoning_set(message, ParamFix("top_p"), "gpt-5-mini")
    assert [f.label for f in fixes] == ["top_p", "max_tokens->max_completion_tokens", "temperature",
                                        "presence_penalty", "frequency_penalty", "stop"]  # fmt: skip
    doc = {"model": "gpt-5-mini", "temperature": 0.2, "top_p": 0.9, "max_tokens": 256, "stop": ["END"],
           "logprobs": True, "messages": []}  # fmt: skip
    for fix in fixes:
        doc = fix.apply(doc) or doc
    assert doc == {"model": "gpt-5-mini", "max_completion_tokens": 256, "logprobs": True, "messages": []}


def test_a_reasoning_models_temperature_1_and_o3_minis_stop_are_kept() -> None:
    message = ("Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) "
               "value is supported.")  # microsoft/vscode#255504  # fmt: skip
    fixes = reasoning_set(message, ParamFix("temperature"), "o3-mini")
    assert "stop" not in [f.label for f in fixes]
    doc = {"temperature": 1, "stop": ["END"]}
    assert all(f.apply(doc) is None for f in fixes)


@pytest.mark.parametrize("message", [
    "Unrecognized request argument supplied: temperature",  # not OpenAI's reasoning models' words
    "Unsupported parameter: 'reasoning_effort' is not supported with this model.",  # not their set
])  # fmt: skip
def test_other_refusals_fix_their_own_field_only(message: str) -> None:
    fix = refused_param(message)
    assert fix is not None and reasoning_set(message, fix, "gpt-5") == (fix,)


def test_a_temperature_refused_outright_goes_even_at_1() -> None:
    """o3-mini's and gpt-5.x-codex's words name no value (pal-mcp-server#78): kept at 1, the
    temperature was sent again and refused again until the rescues ran out (review)."""
    message = "Unsupported parameter: 'temperature' is not supported with this model."
    fix = refused_param(message)
    assert fix is not None
    fixes = reasoning_set(message, fix, "o3-mini")
    assert fixes[0].apply({"temperature": 1}) == {}


@pytest.mark.parametrize("model", ["gpt-4o-search-relay", "my-azure-deploy", "mistral-large"])
def test_a_model_not_named_as_a_reasoning_family_loses_only_the_field_refused(model: str) -> None:
    """Relays copy OpenAI's words: one refusing ``top_p`` for another model lost the client's
    temperature and penalties and had ``max_tokens`` renamed (review)."""
    assert reasoning_set(TOP_P, ParamFix("top_p"), model) == (ParamFix("top_p"),)
    assert len(reasoning_set(TOP_P, ParamFix("top_p"), "openai/gpt-5-mini")) > 1  # a relay's prefix


@pytest.mark.parametrize(("asked", "supported", "sent"), [
    ("medium", ("high",), "high"),  # gpt-5-pro
    ("none", ("low", "medium", "high"), "low"),  # gpt-5.1-codex
    ("xhigh", ("minimal", "low", "medium", "high"), "high"),  # gpt-5-mini
    ("medium", ("low", "high"), "high"),  # as near either way: the one that reasons more
    ("max", ("high", "xhigh"), "xhigh"),
])  # fmt: skip
def test_a_refused_effort_goes_as_the_nearest_value_the_model_takes(asked: str, supported: tuple[str, ...],
                                                                    sent: str) -> None:  # fmt: skip
    fix = ParamFix("reasoning.effort", supported=supported)
    doc = {"model": "m", "reasoning": {"effort": asked, "summary": "auto"}}
    assert fix.apply(doc) == {"model": "m", "reasoning": {"summary": "auto", "effort": sent}}
    assert ParamFix("reasoning_effort", supported=supported).apply({"reasoning_effort": asked}) == {
        "reasoning_effort": sent}


def test_an_effort_the_model_takes_or_none_at_all_is_left_as_it_is() -> None:
    fix = ParamFix("reasoning.effort", supported=("high",))
    assert fix.apply({"reasoning": {"effort": "high"}}) is None
    assert fix.apply({"reasoning": {"summary": "auto"}}) is None and fix.apply({"model": "m"}) is None


def test_an_effort_off_the_scale_is_left_out() -> None:
    fix = ParamFix("reasoning.effort", supported=("high",))
    assert fix.apply({"model": "m", "reasoning": {"effort": "turbo"}}) == {"model": "m"}
    assert ParamFix("reasoning_effort", supported=("medium",)).apply({"reasoning_effort": None}) == {}


def test_a_value_refusal_of_another_field_or_without_a_list_is_not_adapted() -> None:
    message = "Unsupported value: 'low' is not supported with the 'gpt-5-chat-latest' model. Supported values are: 'medium'."
    body = json.dumps({"error": {"message": message, "param": "text.verbosity", "code": "unsupported_value"}})
    assert refusal_fix(message, body.encode()) is None
    effort = json.dumps({"error": {"message": message, "param": "reasoning.effort"}}).encode()
    assert refusal_fix(message, effort) == ParamFix("reasoning.effort", supported=("medium",))
    bare = "Unsupported value: 'low' is not supported with the 'm' model. Supported values are: none."
    assert refusal_fix(bare, effort) == ParamFix("reasoning.effort")


def test_an_adapted_effort_is_told_as_what_was_sent_not_the_list_taken() -> None:
    """gpt-5.1-codex takes 'low', 'medium' and 'high' (openai/codex#6647): Codex's 'none' goes as
    'low', and the header says so, as it says ``reasoning_effort=none`` for an effort set."""
    fixes = ParamFixes()
    fixes.learn("u", "gpt-5.1-codex", ParamFix("reasoning.effort", supported=("low", "medium", "high")))
    out, done = fixes.applied("u", "gpt-5.1-codex", b'{"reasoning":{"effort":"none"}}')
    # The label, what a rescue is guarded by, is the fix; the shown text is what it did to this body.
    assert (json.loads(out), done) == ({"reasoning": {"effort": "low"}},
                                       [("reasoning.effort=low|medium|high", "reasoning.effort=none->low")])
    fixes.learn("u", "m", ParamFix("reasoning_effort", supported=("medium",)))
    out, done = fixes.applied("u", "m", b'{"reasoning_effort":"turbo"}')  # off the scale: left out
    assert (json.loads(out), done) == ({}, [("reasoning_effort=medium", "reasoning_effort")])


@pytest.mark.parametrize(("fix", "doc", "fixed"), [
    (ParamFix("top_k", at_most=40), {"generationConfig": {"topK": 64, "topP": 0.95}},
     {"generationConfig": {"topK": 40, "topP": 0.95}}),
    (ParamFix("top_k", at_most=40), {"generation_config": {"top_k": 50.0}}, {"generation_config": {"top_k": 40}}),
    (ParamFix("top_k", at_most=40), {"model": "m", "top_k": 41}, {"model": "m", "top_k": 40}),
    (ParamFix("top_k", at_most=40), {"generationConfig": {"topK": 40}}, None),  # taken: as it is
    (ParamFix("top_k", at_most=40), {"generationConfig": {"topK": "64"}}, None),  # not a number: refused
    (ParamFix("top_k"), {"generationConfig": {"topK": 64}}, {}),  # no range stated: left out
])  # fmt: skip
def test_a_top_k_over_the_range_gemini_states_goes_as_its_highest(fix: ParamFix, doc: dict[str, Any],
                                                                  fixed: dict[str, Any] | None) -> None:  # fmt: skip
    assert fix.apply(doc) == fixed


def test_gemini_states_the_top_k_range_or_only_the_value() -> None:
    stated = ("Unable to submit request because it has a topK value of 50 but the supported range is from 1 "
              "(inclusive) to 41 (exclusive). Update the value and try again.")  # genkit-ai/genkit#1397
    assert refused_param(stated) == ParamFix("top_k", at_most=40)
    # Robitx/gp.nvim#241 quotes it so in its title, without the range: left out.
    assert refused_param("Unable to submit request because it has topK value of 100") == ParamFix("top_k")
