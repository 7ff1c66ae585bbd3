"""Reasoning another account signed: the refusal read from the corpus's real bodies (and no
other body read as one), and each API's request written again without that reasoning."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gateway.fake.messages_rules import refusal
from gateway.policy.foreign_reasoning import (
    GATEWAY_THINKING_MARK,
    GEMINI_SKIP,
    loop_calls,
    loop_unthought,
    refused_reasoning,
    refused_unthought,
    strip,
    without_gateway_thinking,
)
from gateway.policy.thinking_signers import (
    Signers,
    item_mark,
    sealed_in,
    sealed_of,
    thought_signature_of,
    thought_signatures_in,
)
from tests.corpus_cases import HELD_OUT, IN_SAMPLE, body_bytes, classify_case

FOREIGN = [c for c in IN_SAMPLE if c["expected"].get("foreign_reasoning")]


def test_the_corpus_has_the_refusals_of_each_provider_that_signs_reasoning() -> None:
    assert {c["provider"] for c in FOREIGN} >= {"Anthropic", "OpenAI", "Google Gemini"}


@pytest.mark.parametrize("case", FOREIGN, ids=[c["name"] for c in FOREIGN])
def test_the_refusal_is_read_as_the_pipeline_reads_it(case: dict[str, Any]) -> None:
    assert refused_reasoning(classify_case(case).message, body_bytes(case["body"]))


def test_no_other_body_in_the_corpus_reads_as_one() -> None:
    read = [c["name"] for c in IN_SAMPLE + HELD_OUT if not c["expected"].get("foreign_reasoning")
            and refused_reasoning(classify_case(c).message, body_bytes(c["body"]))]  # fmt: skip
    assert read == []


@pytest.mark.parametrize("message", [
    # Bedrock's wording, as cc-connect #897 quotes it; Vertex's and Google's later ones for Gemini.
    "messages.1.content.0: Invalid signature in thinking block (Service: BedrockRuntime, Status Code: 400",
    "Unable to submit request because Thought signature is not valid.. Learn more: https://cloud.google.com/x",
    "Invalid thought signature.",
])
def test_the_other_wordings_seen_are_read_too(message: str) -> None:
    assert refused_reasoning(message)


def test_a_missing_thought_signature_is_not_this_refusal() -> None:
    """Gemini 3's refusal of a call sent without its signature asks for one, not for less."""
    assert not refused_reasoning(
        "Function call is missing a thought_signature in functionCall parts. This is required for tools to work "
        "correctly, and missing thought_signature may lead to degraded model performance.")


def thought(text: str = "plan", sig: str = "sig-a") -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": sig}


CALL = {"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]}


def claude_code_like(*messages: Any) -> dict[str, Any]:
    return {"model": "claude-opus-4-6", "max_tokens": 32000, "messages": list(messages),
            "thinking": {"type": "adaptive"}, "output_config": {"effort": "high"},
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}}  # fmt: skip


def test_mid_tool_loop_the_thinking_goes_and_thinking_with_it() -> None:
    doc = claude_code_like(
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": [thought(), {"type": "redacted_thinking", "data": "xyz"}, CALL]},
        RESULT,
    )
    before = copy.deepcopy(doc)
    out = strip("messages", doc)
    assert out is not None and doc == before  # the original is left as it was
    assert out["messages"][1] == {"role": "assistant", "content": [CALL]}
    assert "thinking" not in out and "context_management" not in out  # its edits need thinking on
    assert out["output_config"] == {"effort": "high"} and out["messages"][2] == RESULT


def test_a_model_that_thinks_unasked_is_told_not_to_and_one_that_always_thinks_reads_the_loop_in_words() -> None:
    """Left out, ``thinking`` on Opus and Sonnet 5 is still adaptive thinking, and on Opus 5.5
    (Claude Code 2.1.332's model) every request thinks, so the loop's turn without its block was
    refused again ("Expected `thinking` or `redacted_thinking`, but found `tool_use`"): the first
    is told "disabled" (at effort high at most), the second gets the loop's last turn and its
    results as text, which the fake, holding Anthropic's rules, takes."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                           "content": [{"type": "text", "text": "a.txt"}, image]}]}  # fmt: skip
    loop = [{"role": "user", "content": "list files"}, {"role": "assistant", "content": [thought(), CALL]}, result]
    tools = [{"name": "ls", "input_schema": {"type": "object", "properties": {}}}]
    on_5 = strip("messages", {**claude_code_like(*loop), "model": "claude-opus-5", "output_config": {"effort": "max"},
                              "tools": tools})  # fmt: skip
    assert on_5 is not None and on_5["thinking"] == {"type": "disabled"} and on_5["output_config"] == {"effort": "high"}
    assert on_5["messages"][1] == {"role": "assistant", "content": [CALL]}
    always = {**claude_code_like(*loop), "model": "claude-opus-5-5", "tools": tools}
    out = strip("messages", always)
    assert out is not None and out["thinking"] == {"type": "adaptive"} and "context_management" in out
    said, answered = out["messages"][1]["content"], out["messages"][2]["content"]
    assert said == [{"type": "text", "text": '[called the tool ls (id toolu_1) with {}]'}]
    assert answered == [{"type": "text", "text": "[the tool ls (id toolu_1) returned:]\na.txt"}, image]
    version = {"anthropic-version": "2023-06-01"}
    for doc in (on_5, out):  # the call came with thinking (``thought``), as it did
        assert refusal("/v1/messages", doc, version, thought={"toolu_1"}) is None
    before = {**always, "messages": [loop[0], {"role": "assistant", "content": [CALL]}, result]}
    assert refusal("/v1/messages", before, version, thought={"toolu_1"}) is not None  # the turn as it went
    # The same loop asked with thinking off by the client: nothing to do on the older models.
    assert loop_unthought({**claude_code_like(*loop[:1], {"role": "assistant", "content": [CALL]}, result),
                           "thinking": {"type": "disabled"}}) is None  # fmt: skip


def test_earlier_turns_lose_their_thinking_and_thinking_stays_on() -> None:
    doc = claude_code_like(
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [thought(), {"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "list files"},
    )
    out = strip("messages", doc)
    assert out is not None
    assert out["messages"][1]["content"] == [{"type": "text", "text": "Hello."}]
    assert out["thinking"] == {"type": "adaptive"} and out["context_management"] == doc["context_management"]


def test_a_turn_that_was_thinking_alone_is_left_out() -> None:
    doc = claude_code_like({"role": "user", "content": "hi"}, {"role": "assistant", "content": [thought()]},
                           {"role": "user", "content": "go on"})  # fmt: skip
    out = strip("messages", doc)
    assert out is not None and [m["role"] for m in out["messages"]] == ["user", "user"]


def test_other_context_edits_stay_when_thinking_goes() -> None:
    doc = claude_code_like({"role": "user", "content": "ls"}, {"role": "assistant", "content": [thought(), CALL]},
                           RESULT)  # fmt: skip
    doc["context_management"]["edits"].append({"type": "clear_tool_uses_20250919"})
    out = strip("messages", doc)
    assert out is not None and out["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}


def test_a_request_without_thinking_blocks_is_not_rewritten() -> None:
    assert strip("messages", claude_code_like({"role": "user", "content": "hi"})) is None
    assert strip("chat", {"messages": [{"role": "user", "content": "hi"}]}) is None


def test_the_tool_loop_rule_is_told_from_a_signature_refusal() -> None:
    [loop] = [c for c in FOREIGN if c["name"] == "anthropic-tool-loop-turn-without-its-thinking"]
    assert refused_unthought(classify_case(loop).message)
    assert not any(refused_unthought(classify_case(c).message) for c in FOREIGN if c is not loop)


def test_a_tool_loop_whose_turn_has_no_thinking_goes_on_without_thinking() -> None:
    """A loop's turn answered with thinking off (a rescue on another key) or by a chat relay:
    Anthropic refuses the next step while thinking is on, so it is asked without, edits too."""
    doc = claude_code_like({"role": "user", "content": "list files"}, {"role": "assistant", "content": [CALL]},
                           RESULT)  # fmt: skip
    before = copy.deepcopy(doc)
    out = loop_unthought(doc)
    assert out is not None and doc == before
    assert "thinking" not in out and "context_management" not in out
    assert out["messages"] == doc["messages"] and out["output_config"] == {"effort": "high"}


def test_up_front_only_a_loop_the_gateway_asked_without_thinking_goes_on_without() -> None:
    """A turn without thinking is also what an adaptive model that chose not to think answers,
    which Anthropic takes back: thinking stays as asked unless the gateway turned it off for an
    earlier step of this loop."""
    second = {"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}}
    doc = claude_code_like(
        {"role": "user", "content": "list files"}, {"role": "assistant", "content": [thought(), CALL]}, RESULT,
        {"role": "assistant", "content": [second]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "b.txt"}]},
    )  # fmt: skip
    assert loop_calls(doc["messages"]) == ["toolu_2", "toolu_1"]
    assert loop_calls(doc["messages"][:-2]) == ["toolu_1"]
    assert loop_unthought(doc, asked_off=lambda call: False) is None
    assert loop_unthought(doc, asked_off=lambda call: call == "toolu_2") is None  # its own turn's: not yet sent
    out = loop_unthought(doc, asked_off=lambda call: call == "toolu_1")
    assert out is not None and "thinking" not in out


def test_a_loop_ends_at_the_users_own_words() -> None:
    messages = [{"role": "user", "content": "ls"}, {"role": "assistant", "content": [CALL]}, RESULT,
                {"role": "assistant", "content": [{"type": "text", "text": "a.txt"}]}, {"role": "user", "content": "more"}]  # fmt: skip
    assert loop_calls(messages) == [] and loop_calls(messages[:3]) == ["toolu_1"]


@pytest.mark.parametrize("messages", [
    # the loop's turn starts with its thinking (or a redacted block)
    [{"role": "user", "content": "ls"}, {"role": "assistant", "content": [thought(), CALL]}, RESULT],
    [{"role": "user", "content": "ls"}, {"role": "assistant", "content": [{"type": "redacted_thinking",
                                                                           "data": "x"}, CALL]}, RESULT],
    # the loop ended: the user's next turn, thinking as the client asks
    [{"role": "user", "content": "ls"}, {"role": "assistant", "content": [CALL]}, RESULT,
     {"role": "assistant", "content": [{"type": "text", "text": "a.txt"}]}, {"role": "user", "content": "more"}],
    [{"role": "user", "content": "hi"}],
])  # fmt: skip
def test_thinking_stays_on_outside_a_loop_begun_without_it(messages: list[Any]) -> None:
    assert loop_unthought(claude_code_like(*messages)) is None


def test_with_thinking_off_no_loop_is_judged() -> None:
    doc = claude_code_like({"role": "user", "content": "ls"}, {"role": "assistant", "content": [CALL]}, RESULT)
    del doc["thinking"]
    assert loop_unthought(doc) is None


def test_only_the_blocks_said_foreign_are_left_out_and_the_loop_keeps_its_own() -> None:
    mine, theirs = thought("mine", "sig-b"), thought("theirs", "sig-a")
    doc = claude_code_like(
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": [theirs, {"type": "text", "text": "Hi."}]},
        {"role": "user", "content": "list files"}, {"role": "assistant", "content": [mine, CALL]}, RESULT,
    )  # fmt: skip
    out = strip("messages", doc, foreign=lambda b: b.get("signature") == "sig-a")
    assert out is not None
    assert out["messages"][1]["content"] == [{"type": "text", "text": "Hi."}]
    assert out["messages"][3]["content"] == [mine, CALL] and out["thinking"] == {"type": "adaptive"}


def test_a_deployment_that_refused_an_issuer_refuses_its_blocks_and_no_one_elses() -> None:
    signers = Signers(size=2)
    signers.issued("sig-a", "a")
    signers.issued("sig-b", "b")
    assert not signers.refuses_any("b")
    signers.refused("b", ["a", "b"])  # never itself
    assert signers.refuses_any("b") and not signers.refuses_any("a")
    assert signers.refuses("b", thought(sig="sig-a")) and not signers.refuses("b", thought(sig="sig-b"))
    # For a rescue: all but its own, the unknown and the unsigned (a chat relay's) included.
    assert [signers.foreign_to("b", thought(sig=s)) for s in ("sig-a", "sig-b", "sig-z", "")] == [
        True, False, True, True]
    signers.issued("sig-c", "c")  # bounded: the oldest goes
    assert signers.issuer("sig-a") is None and signers.issuer("sig-c") == "c"


def test_responses_loses_its_reasoning_items_sealed_or_recorded() -> None:
    sealed = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAB=="}
    recorded = {"type": "reasoning", "id": "rs_2", "summary": []}
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "ls", "arguments": "{}"}
    doc = {"model": "gpt-5", "input": [{"role": "user", "content": "hi"}, sealed, recorded, call], "store": False}
    out = strip("responses", doc)
    assert out is not None and out["input"] == [{"role": "user", "content": "hi"}, call]
    assert strip("responses", {"input": "hi"}) is None


def test_gemini_signatures_become_the_value_google_gives_for_history_from_elsewhere() -> None:
    call = {"functionCall": {"name": "ls", "args": {}}, "thoughtSignature": "CiQBjz1rX5"}
    doc = {"contents": [{"role": "user", "parts": [{"text": "ls"}]}, {"role": "model", "parts": [call]}]}
    out = strip("gemini", doc)
    assert out is not None and out["contents"][1]["parts"][0]["thoughtSignature"] == GEMINI_SKIP
    assert doc["contents"][1]["parts"][0]["thoughtSignature"] == "CiQBjz1rX5"
    assert strip("gemini", out) is None  # nothing left to change


def test_only_the_reasoning_items_said_foreign_are_left_out() -> None:
    mine = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAmine=="}
    theirs = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAtheirs=="}
    doc = {"input": [{"role": "user", "content": "hi"}, theirs, {"role": "user", "content": "and?"}, mine]}
    out = strip("responses", doc, foreign=lambda i: sealed_of(i) == "gAAAAtheirs==")
    assert out is not None and out["input"] == [doc["input"][0], doc["input"][2], mine]
    assert strip("responses", doc, foreign=lambda i: False) is None


def test_only_the_gemini_signatures_said_foreign_are_stood_in_for() -> None:
    mine = {"text": "Fine.", "thoughtSignature": "sig-b"}
    theirs = {"functionCall": {"name": "ls", "args": {}}, "thought_signature": "sig-a"}
    doc = {"contents": [{"role": "model", "parts": [theirs]}, {"role": "model", "parts": [mine]}]}
    out = strip("gemini", doc, foreign=lambda p: thought_signature_of(p) == "sig-a")
    assert out is not None
    assert out["contents"][0]["parts"][0]["thought_signature"] == GEMINI_SKIP and out["contents"][1]["parts"] == [mine]


def test_what_binds_a_responses_item_or_a_gemini_part_to_its_account() -> None:
    item = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAAA1"}
    done = {"type": "response.completed", "response": {"output": [item, {"type": "message", "content": []}]}}
    marks = ["gAAAA1", item_mark("rs_1")]  # its id too: the refusal names the item by it
    assert sealed_in({"type": "response.output_item.done", "item": item}) == marks
    assert sealed_in(done) == marks and sealed_in(done["response"]) == marks
    assert sealed_in({"type": "response.output_item.added", "item": {**item, "encrypted_content": None}}) == []
    parts = [{"text": "a"}, {"text": "b", "thoughtSignature": "s1"}, {"functionCall": {}, "thought_signature": "s2"},
             {"text": "c", "thoughtSignature": GEMINI_SKIP}]  # fmt: skip
    assert thought_signatures_in(parts) == ["s1", "s2"]  # Google's stand-in is nobody's


def test_a_deployments_refusals_are_read_by_signature_whatever_the_api() -> None:
    signers = Signers()
    signers.issued("gAAAAtheirs==", "a")
    signers.issued("gAAAAmine==", "b")
    signers.refused("b", ["a"])
    assert signers.refuses_mark("b", "gAAAAtheirs==") and not signers.refuses_mark("b", "gAAAAmine==")
    assert not signers.refuses_mark("b", None) and not signers.refuses_mark("b", "gAAAAunknown==")
    assert [signers.foreign_mark("b", m) for m in ("gAAAAtheirs==", "gAAAAmine==", "gAAAAunknown==", None)] == [
        True, False, True, True]


def test_only_the_gateways_own_carriage_is_left_out_before_an_openai_send() -> None:
    ours = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": GATEWAY_THINKING_MARK + "W10"}
    openai_own = {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAAB=="}
    out = without_gateway_thinking({"input": [ours, openai_own]})
    assert out == {"input": [openai_own]}
    assert without_gateway_thinking({"input": [openai_own]}) is None
