"""Anthropic Messages clients on a chat completions upstream (gateway/translate/messages_chat).

Requests are Claude Code 2.1.197's and 2.1.332's own (tests/corpus/requests, captured here) and bodies the
real anthropic SDK builds; answers and streams are real provider recordings
(tests/corpus/answers). Every translated stream is checked against the Messages grammar and
read back through the anthropic SDK's own stream accumulator."""

from __future__ import annotations

import copy
import hashlib
import json
import re
from typing import Any

import anthropic
import orjson
import pytest

from gateway.apis.base import Ending
from gateway.errors import Classification, ErrorType
from gateway.fake import chat_rules, gemini_rules, messages_rules, responses_rules
from gateway.sse import EventSplitter
from gateway.translate import default_translations
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.messages_chat import MessagesToChat
from gateway.translate.messages_chat.answer import INVALID_ARGUMENTS, estimate_input_tokens, message_id
from gateway.translate.strict import strict_ok
from tests.unit.translate.messages_helpers import (
    check_grammar,
    corpus_answer,
    corpus_request,
    ctx_for,
    events,
    run,
    sdk_final_message,
    sdk_message,
    sdk_request,
    wire_stream,
)
from tests.unit.translate.schemas import NO_PROPERTIES
from tests.unit.translate.wrong_types import MESSAGES, mutated

T = MessagesToChat()
TARGET = Target(model="qwen3-coder")
FIRST = "claude-code-2.1.197-first.json"
BASH = "claude-code-2.1.197-bash-result.json"
IMAGE = "claude-code-2.1.197-image-result.json"
NO_THINKING = "claude-code-2.1.197-thinking-off.json"


def chat(payload: dict[str, Any], target: Target = TARGET) -> dict[str, Any]:
    out = T.request(payload, target)
    assert not isinstance(out, Refusal), out
    return out


# --- Claude Code's real requests ---------------------------------------------------------


@pytest.mark.parametrize("name", [FIRST, "claude-code-2.1.332-first.json"])
def test_claude_code_tools_are_read_the_quick_way_with_the_full_reading_s_result(name: str) -> None:
    # Issue #38: a plain tool (name, description, schema) skips the typed readers; what it
    # becomes must be what they make of it. Claude Code's tools, and the MCP Go SDK's schema
    # without properties (the one rewrite a plain tool gets).
    from gateway.translate.messages_chat import request as walk

    tools = [*corpus_request(name)["tools"], *({"name": f"t{k}", "description": "d", "input_schema": schema}
                                               for k, (schema, _) in enumerate(NO_PROPERTIES))]
    functions = walk.function_names(tools)
    read = [walk._tool_read(tool, k, functions) for k, tool in enumerate(tools)]
    assert [walk._tool(tool, k, functions) for k, tool in enumerate(tools)] == read
    assert [t["function"]["parameters"] for t in read[-len(NO_PROPERTIES):]] == [out for _, out in NO_PROPERTIES]


@pytest.mark.parametrize("name", [FIRST, BASH, IMAGE, NO_THINKING, *(f"claude-code-2.1.332-{n}.json" for n in (
    "first", "bash-result", "image-result", "thinking-off", "thinking-off-max-thinking-tokens-0", "tool-reference"))])
def test_claude_code_request_becomes_a_plain_chat_request(name: str) -> None:
    body = corpus_request(name)
    out = chat(body)
    text = json.dumps(out)
    assert out["model"] == "qwen3-coder" and out["max_tokens"] == body["max_tokens"]
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    # Claude Code's user_id is ~120 characters of JSON; OpenAI refuses a `user` over 64
    # (LiteLLM #37623): its SHA-256 goes instead, the same for every request of the session.
    assert len(body["metadata"]["user_id"]) > 64
    assert out["user"] == hashlib.sha256(body["metadata"]["user_id"].encode()).hexdigest()
    # Dropped by rule: nothing Anthropic-only reaches the chat server.
    assert set(out) == {"model", "messages", "max_tokens", "user", "tools", "stream", "stream_options"} | (
        {"reasoning_effort"} if name != NO_THINKING else set())
    for gone in ('"cache_control"', '"input_schema"', "x-anthropic-billing-header"):
        assert gone not in text, gone
    roles = [m["role"] for m in out["messages"]]
    assert roles[0] == "system" and "system" not in roles[1:]  # only one system message, first
    assert isinstance(out["messages"][0]["content"], str)
    assert [t["function"]["name"] for t in out["tools"]] == [t["name"] for t in body["tools"]]
    assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in out["tools"])
    # The mid-conversation system message went into the user turn next to it.
    mid = next(m["content"] for m in body["messages"] if m["role"] == "system")
    mid = mid if isinstance(mid, str) else "\n\n".join(b["text"] for b in mid)  # 2.1.332: text blocks
    assert f"<system-reminder>\n{mid}\n</system-reminder>" in out["messages"][1]["content"]


def test_claude_code_effort_becomes_reasoning_effort_and_thinking_off_sends_none() -> None:
    assert chat(corpus_request(FIRST))["reasoning_effort"] == "high"  # adaptive + effort high
    assert "reasoning_effort" not in chat(corpus_request(NO_THINKING))  # disabled, not "none"


def test_claude_code_prompt_prefix_stays_the_same_across_turns() -> None:
    """The second request starts with the first one's messages, byte for byte: a chat server's
    prefix cache (llama.cpp, vLLM) keeps the ~20k-token prompt instead of reprocessing it."""
    first, second = chat(corpus_request(FIRST)), chat(corpus_request(BASH))
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["tools"] == first["tools"]


def test_claude_code_tool_round_becomes_tool_calls_and_a_tool_message() -> None:
    body = corpus_request(BASH)
    tool_use = body["messages"][2]["content"][0]
    out = chat(body)["messages"]
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool"]
    assert out[2] == {"role": "assistant", "content": "", "tool_calls": [{
        "id": tool_use["id"], "type": "function",
        "function": {"name": "Bash", "arguments": json.dumps(tool_use["input"])}}]}  # fmt: skip
    assert out[3] == {"role": "tool", "tool_call_id": tool_use["id"], "content": "hi"}


def test_claude_code_image_tool_result_follows_as_a_user_image() -> None:
    body = corpus_request(IMAGE)
    result = body["messages"][-1]["content"][0]
    source = result["content"][0]["source"]
    out = chat(body)["messages"]
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "user"]
    assert out[3]["tool_call_id"] == result["tool_use_id"] and "image" in out[3]["content"]
    image = out[4]["content"][-1]
    assert image == {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{source['data']}"}}


def _long_id_round(call_id: str) -> dict[str, Any]:
    return {"model": "gemini-3-pro", "max_tokens": 100, "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "run ls"},
                         {"role": "assistant", "content": [{"type": "tool_use", "id": call_id, "name": "Bash",
                                                            "input": {"command": "ls"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                                       "content": "a.txt"}]}]}  # fmt: skip


# The gateway's own id for a Gemini call, carrying its thought signature (chat_gemini/signature.py):
# a Claude Code conversation begun on a Gemini upstream that falls back to a chat one.
GEMINI_CARRIED = "call_9f3a__gsig_" + "Q2lSQ0FRUUJRRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVF"


def test_a_tool_id_longer_than_openais_40_goes_as_one_digest_on_the_call_and_its_result() -> None:
    out = chat(_long_id_round(GEMINI_CARRIED))["messages"]
    sent = out[1]["tool_calls"][0]["id"]
    assert len(sent) <= 40 and sent == out[2]["tool_call_id"] and sent.startswith("call_")
    assert chat(_long_id_round(GEMINI_CARRIED))["messages"][1]["tool_calls"][0]["id"] == sent  # every turn alike
    assert chat_rules.refusal("/v1/chat/completions", chat(_long_id_round(GEMINI_CARRIED))) is None
    # An id within 40 (Anthropic's own toolu_ + 24) goes as it is.
    assert chat(_long_id_round("toolu_01ABCDEFGHJKLMNPQRSTUVWX"))["messages"][1]["tool_calls"][0]["id"] == \
        "toolu_01ABCDEFGHJKLMNPQRSTUVWX"  # fmt: skip


def test_a_long_id_bound_for_gemini_through_chat_keeps_the_signature_it_carries() -> None:
    out = chat(_long_id_round(GEMINI_CARRIED), Target("gemini-3-pro", onward="gemini"))
    assert out["messages"][1]["tool_calls"][0]["id"] == GEMINI_CARRIED == out["messages"][2]["tool_call_id"]


def test_an_image_result_bound_for_gemini_names_its_call_without_the_signature() -> None:
    """Messages → Gemini: the text before a tool result's images named the call by the id the
    gateway carries, `<id>__gsig_<signature>` (audit): a real thought signature is a long base64
    blob, prompt tokens on every image result. The text names the call as its functionResponse
    does; on a chat upstream, as the digest its tool message carries."""
    body = corpus_request(IMAGE)
    given = body["messages"][-1]["content"][0]["tool_use_id"]
    body = json.loads(json.dumps(body).replace(given, GEMINI_CARRIED))
    out = _through("gemini", body)
    texts = [part["text"] for c in out["contents"] for part in c["parts"] if "text" in part]
    assert "Images returned by tool call call_9f3a:" in texts and not any(GEMINI_CARRIED[8:] in t for t in texts)
    answered = [part["functionResponse"] for c in out["contents"] for part in c["parts"] if "functionResponse" in part]
    assert [r.get("id") for r in answered] == ["call_9f3a"]
    # In the same turn, after the result (it said "in the next user message", true on chat alone).
    assert answered[0]["response"] == {"output": "[1 image(s): attached after this result]"}
    on_chat = _through("chat", body)["messages"]
    assert f"Images returned by tool call {on_chat[-2]['tool_call_id']}:" in json.dumps(on_chat[-1])


def test_stop_sequences_past_openais_four_keep_the_first_four() -> None:
    payload = {"model": "m", "max_tokens": 10, "messages": HI, "stop_sequences": ["a", "b", "c", "d", "e"]}
    assert chat(payload)["stop"] == ["a", "b", "c", "d"]
    assert chat(payload, Target("gemini-2.5-pro", onward="gemini"))["stop"] == ["a", "b", "c", "d", "e"]


# --- what the anthropic SDK sends --------------------------------------------------------

WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip
HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(("name", "kwargs", "expected"), [
    # Bifrost #3596 / #6887: "any" must become "required", never the bare string "any".
    ("tool_choice any is required", {"tools": [WEATHER], "tool_choice": {"type": "any"}}, {"tool_choice": "required"}),
    ("tool_choice auto", {"tools": [WEATHER], "tool_choice": {"type": "auto"}}, {"tool_choice": "auto"}),
    ("tool_choice none", {"tools": [WEATHER], "tool_choice": {"type": "none"}}, {"tool_choice": "none"}),
    ("tool_choice tool", {"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "get_weather"}},
     {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}}),
    ("disable_parallel_tool_use", {"tools": [WEATHER], "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}},
     {"tool_choice": "auto", "parallel_tool_calls": False}),
    ("tool_choice without tools is left out", {"tool_choice": {"type": "auto"}}, {"tool_choice": None}),
    # Bifrost #1479: a budget under Anthropic's own 1,024 floor is not refused on a chat upstream.
    ("thinking budget under 1024", {"thinking": {"type": "enabled", "budget_tokens": 500}}, {"reasoning_effort": "low"}),
    ("thinking budget 10k", {"thinking": {"type": "enabled", "budget_tokens": 10000}}, {"reasoning_effort": "medium"}),
    ("thinking budget 32k", {"thinking": {"type": "enabled", "budget_tokens": 32000}}, {"reasoning_effort": "high"}),
    ("thinking disabled", {"thinking": {"type": "disabled"}}, {"reasoning_effort": None}),
    # anthropic SDK 2.14 takes the sampling knobs only through extra_body (AGENT-REQUESTS.md).
    ("stop sequences and sampling", {"stop_sequences": ["END"], "extra_body": {"temperature": 0.2, "top_p": 0.9, "top_k": 5}},
     {"stop": ["END"], "temperature": 0.2, "top_p": 0.9, "top_k": None}),
    ("system string", {"system": "Be brief."}, {"messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "hi"}]}),
    ("user id", {"metadata": {"user_id": "u-42"}}, {"user": "u-42"}),
    ("user id of 64", {"metadata": {"user_id": "u" * 64}}, {"user": "u" * 64}),
    ("effort xhigh", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "xhigh"}}, {"reasoning_effort": "high"}),
    ("effort max", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "max"}}, {"reasoning_effort": "high"}),
    ("not streaming", {}, {"stream": None, "stream_options": None, "max_tokens": 256}),
])  # fmt: skip
def test_sdk_request_fields(name: str, kwargs: dict[str, Any], expected: dict[str, Any]) -> None:
    out = chat(sdk_request(messages=HI, **kwargs))
    for key, value in expected.items():
        assert out.get(key) == value, (name, key, out.get(key))
    if "tools" in kwargs:
        assert out["tools"] == [{"type": "function", "function": {
            "name": "get_weather", "description": "Weather of a city", "parameters": WEATHER["input_schema"]}}]  # fmt: skip


def test_bifrost_3596_tool_choice_any_is_required_never_the_string_any() -> None:
    out = chat(sdk_request(messages=HI, tools=[WEATHER], tool_choice={"type": "any"}))
    assert out["tool_choice"] == "required"


def test_bifrost_1479_a_thinking_budget_under_1024_is_carried_not_refused() -> None:
    out = T.request(sdk_request(messages=HI, thinking={"type": "enabled", "budget_tokens": 512}, max_tokens=600), TARGET)
    assert not isinstance(out, Refusal) and out["reasoning_effort"] == "low" and out["max_tokens"] == 600


def test_images_base64_and_url_become_image_url_parts() -> None:
    body = sdk_request(messages=[{"role": "user", "content": [
        {"type": "text", "text": "compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "QUJD"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
    ]}])  # fmt: skip
    assert chat(body)["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]}]  # fmt: skip


def test_parallel_tool_calls_and_results_keep_their_ids_and_is_error_is_said() -> None:
    body = sdk_request(tools=[WEATHER], messages=[
        {"role": "user", "content": "weather in Oslo and Rome?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "two calls", "signature": "EqQBCkYIARgCKkA"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "Rome"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01A", "content": [{"type": "text", "text": "4 C"}]},
            {"type": "tool_result", "tool_use_id": "toolu_01B", "is_error": True, "content": "timeout"},
            {"type": "text", "text": "and?"},
        ]},
    ])  # fmt: skip
    out = chat(body)["messages"]
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user"]
    assert out[1]["content"] == "Checking."  # the signed thinking block is dropped
    assert [c["id"] for c in out[1]["tool_calls"]] == ["toolu_01A", "toolu_01B"]
    assert [json.loads(c["function"]["arguments"]) for c in out[1]["tool_calls"]] == [{"city": "Oslo"}, {"city": "Rome"}]
    assert out[2] == {"role": "tool", "tool_call_id": "toolu_01A", "content": "4 C"}
    assert out[3] == {"role": "tool", "tool_call_id": "toolu_01B", "content": "Error: timeout"}
    assert out[4] == {"role": "user", "content": "and?"}


def test_documents_text_is_carried_and_a_pdf_is_replaced_by_a_note() -> None:
    body = sdk_request(messages=[{"role": "user", "content": [
        {"type": "document", "title": "notes", "source": {"type": "text", "media_type": "text/plain", "data": "alpha"}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}},
        {"type": "text", "text": "summarise"},
    ]}])  # fmt: skip
    content = chat(body)["messages"][0]["content"]
    assert "Document: notes\nalpha" in content and "JVBERi0x" not in content
    assert "application/pdf) left out" in content and content.endswith("summarise")


def test_search_results_are_carried_as_text() -> None:
    body = sdk_request(messages=[{"role": "user", "content": [
        {"type": "search_result", "source": "https://docs.example/a", "title": "A",
         "content": [{"type": "text", "text": "alpha is first"}]},
        {"type": "text", "text": "what is first?"},
    ]}])  # fmt: skip
    assert chat(body)["messages"] == [{"role": "user", "content": "A\nhttps://docs.example/a\n\nalpha is first\n\nwhat is first?"}]


@pytest.mark.parametrize(("name", "kwargs", "says"), [
    ("hosted web search", {"tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]}, "web_search"),
    ("mcp servers", {"extra_body": {"mcp_servers": [{"type": "url", "url": "https://mcp.example", "name": "x"}]}},
     "mcp_servers"),
    ("file image", {"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "file", "file_id": "file_011"}}]}]}, "Files API"),
])  # fmt: skip
def test_what_a_chat_upstream_cannot_do_is_refused(name: str, kwargs: dict[str, Any], says: str) -> None:
    kwargs.setdefault("messages", HI)
    out = T.request(sdk_request(**kwargs), TARGET)
    assert isinstance(out, Refusal) and says in out.message, out


def test_mid_conversation_system_after_an_assistant_waits_for_the_next_user_turn() -> None:
    out = chat({"model": "m", "max_tokens": 5, "messages": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
        {"role": "system", "content": "note"},
    ]})["messages"]  # fmt: skip
    assert out == [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                   {"role": "user", "content": "<system-reminder>\nnote\n</system-reminder>"}]  # fmt: skip


# --- buffered answers --------------------------------------------------------------------


def test_deepseek_tool_call_answer() -> None:
    doc = corpus_answer("deepseek-reasoner-tool-call.json")["body"]
    ctx = ctx_for(sdk_request(messages=HI, tools=[WEATHER]))
    out = T.answer(doc, ctx)
    message = sdk_message(out)  # the SDK parses it as a Message
    assert message.id.startswith("msg_") and message.model == "claude-opus-4-8"  # what the client asked for
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[0].thinking == doc["choices"][0]["message"]["reasoning_content"]
    call = doc["choices"][0]["message"]["tool_calls"][0]
    assert (message.content[1].id, message.content[1].name) == (call["id"], "weather")
    assert message.content[1].input == {"location": "San Francisco"}
    assert message.stop_reason == "tool_use" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens, message.usage.output_tokens) == (19, 320, 92)
    assert not ctx.notes


@pytest.mark.parametrize("name", ["deepseek-reasoner-reasoning.json", "groq-qwen3-reasoning.json"])
def test_reasoning_answers_become_a_thinking_block_before_the_text(name: str) -> None:
    doc = corpus_answer(name)["body"]
    message = doc["choices"][0]["message"]
    out = sdk_message(T.answer(doc, ctx_for(sdk_request(messages=HI))))
    assert [b.type for b in out.content] == ["thinking", "text"]
    assert out.content[0].thinking == (message.get("reasoning_content") or message["reasoning"])
    assert out.content[1].text == message["content"] and out.stop_reason == "end_turn"
    assert out.usage.output_tokens == doc["usage"]["completion_tokens"]


def _completion(message: dict[str, Any], finish: str | None, **choice: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "qwen",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish, **choice}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}  # fmt: skip


CALL = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}


@pytest.mark.parametrize(("name", "message", "finish", "choice", "stop", "sequence"), [
    ("stop", {"content": "hi"}, "stop", {}, "end_turn", None),
    ("length", {"content": "hi"}, "length", {}, "max_tokens", None),
    ("tool_calls", {"content": None, "tool_calls": [CALL]}, "tool_calls", {}, "tool_use", None),
    ("tool call with finish stop (llama.cpp)", {"content": "", "tool_calls": [CALL]}, "stop", {}, "tool_use", None),
    # A parser that gave up says tool_calls with no call: tool_use would leave an agent nothing to run.
    ("tool_calls without a call", {"content": "Let me look."}, "tool_calls", {}, "end_turn", None),
    ("content_filter", {"content": ""}, "content_filter", {}, "refusal", None),
    ("vLLM names the stop string", {"content": "a"}, "stop", {"stop_reason": "END"}, "stop_sequence", "END"),
    ("a stop string not asked for", {"content": "a"}, "stop", {"stop_reason": "XYZ"}, "end_turn", None),
    ("no finish reason", {"content": "a"}, None, {}, "end_turn", None),
])  # fmt: skip
def test_stop_reasons(name: str, message: dict[str, Any], finish: str | None, choice: dict[str, Any],
                      stop: str, sequence: str | None) -> None:  # fmt: skip
    out = T.answer(_completion(message, finish, **choice), ctx_for(sdk_request(messages=HI, stop_sequences=["END"])))
    assert (out["stop_reason"], out["stop_sequence"]) == (stop, sequence), name


def test_invalid_tool_arguments_reach_the_client_instead_of_vanishing() -> None:
    bad = {**CALL, "function": {"name": "get_weather", "arguments": '{"city": "Os'}}
    empty = {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": ""}}
    out = T.answer(_completion({"content": None, "tool_calls": [bad, empty]}, "tool_calls"), ctx_for({"messages": []}))
    assert out["content"][0]["input"] == {INVALID_ARGUMENTS: '{"city": "Os'}
    assert out["content"][1]["input"] == {}


def test_missing_usage_is_estimated_and_said() -> None:
    doc = _completion({"content": "hello there"}, "stop")
    del doc["usage"]
    ctx = ctx_for(corpus_request(FIRST))
    out = T.answer(doc, ctx)
    assert out["usage"]["input_tokens"] > 10_000 and out["usage"]["output_tokens"] > 0
    assert ctx.notes["usage_estimated"] is True


@pytest.mark.parametrize("missing", ["prompt_tokens", "completion_tokens"])
def test_only_the_count_the_upstream_left_out_is_estimated(missing: str) -> None:
    doc = _completion({"content": "hello there"}, "stop")
    reported = dict(doc["usage"])
    del doc["usage"][missing]
    ctx = ctx_for(corpus_request(FIRST))
    usage = T.answer(doc, ctx)["usage"]
    if missing == "prompt_tokens":
        assert usage["input_tokens"] > 10_000 and usage["output_tokens"] == reported["completion_tokens"]
    else:
        assert usage["input_tokens"] == reported["prompt_tokens"] and usage["output_tokens"] > 0
    assert ctx.notes["usage_estimated"] is True


# --- streams -----------------------------------------------------------------------------

STREAMS = ["openai-gpt-4o-text.stream.json", "openai-gpt-4o-parallel-tools.stream.json",
           "openai-gpt-4o-length.stream.json", "deepseek-reasoner-tool-call.stream.json"]  # fmt: skip


def _chunks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    wire = wire_stream(doc).decode()
    return [json.loads(line[6:]) for line in wire.split("\n\n") if line.startswith("data: {")]


def _expected(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """What the chunks add up to, the way a chat client would accumulate them."""
    text = thinking = ""
    calls: dict[int, dict[str, str]] = {}
    finish = usage = None
    for c in chunks:
        usage = c.get("usage") or usage
        for choice in c.get("choices") or []:
            d = choice.get("delta") or {}
            text += d.get("content") or ""
            thinking += d.get("reasoning_content") or ""
            for tc in d.get("tool_calls") or []:
                call = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
                call["id"] = tc.get("id") or call["id"]
                call["name"] = (tc.get("function") or {}).get("name") or call["name"]
                call["arguments"] += (tc.get("function") or {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {"text": text, "thinking": thinking, "calls": [calls[i] for i in sorted(calls)], "finish": finish,
            "usage": usage}  # fmt: skip


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("chunk", [0, 7])  # whole, and cut into 7-byte pieces
def test_real_streams_read_back_through_the_sdk(name: str, chunk: int) -> None:
    doc = corpus_answer(name)
    want = _expected(_chunks(doc))
    ctx = ctx_for(corpus_request(FIRST))
    out = run(T.stream(ctx), wire_stream(doc), chunk=chunk)
    check_grammar(out)
    message = sdk_final_message(out)
    assert message.model == "claude-opus-4-8" and message.id == "msg_0123456789abcdef"
    got_text = "".join(b.text for b in message.content if b.type == "text")
    got_thinking = "".join(b.thinking for b in message.content if b.type == "thinking")
    calls = [b for b in message.content if b.type == "tool_use"]
    assert (got_text, got_thinking) == (want["text"], want["thinking"])
    assert [(c.id, c.name, c.input) for c in calls] == [
        (w["id"], w["name"], json.loads(w["arguments"])) for w in want["calls"]]  # fmt: skip
    assert message.stop_reason == {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}[want["finish"]]
    cached = (want["usage"].get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    assert message.usage.input_tokens == want["usage"]["prompt_tokens"] - cached
    assert message.usage.cache_read_input_tokens == cached
    assert message.usage.output_tokens == want["usage"]["completion_tokens"]
    assert not ctx.notes


def test_litellm_24176_vercel_17326_message_start_usage_is_the_estimate_never_zero() -> None:
    """LiteLLM #24176 / vercel/ai #17326: Claude Code reads message_start's usage; chat has
    none until the end, so it carries the request's estimate, and the real count follows."""
    ctx = ctx_for(corpus_request(FIRST))
    out = events(run(T.stream(ctx), wire_stream(corpus_answer("openai-gpt-4o-text.stream.json"))))
    start = out[0][1]["message"]
    assert 15_000 < start["usage"]["input_tokens"] < 30_000  # Claude Code's first request is ~21k tokens
    assert start["content"] == [] and start["stop_reason"] is None and "stop_sequence" in start
    assert out[-2][1]["usage"]["input_tokens"] == 14  # the upstream's own count replaces it


def test_litellm_33224_reasoning_then_text_are_two_blocks_never_a_thinking_delta_in_text() -> None:
    """LiteLLM #33224: reasoning after text opens a new thinking block."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        doc = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(doc).encode() + b"\n\n"

    wire = b"".join([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "think"}),
                     chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({"reasoning": "more"}),
                     chunk({"content": "!"}), chunk({}, "stop"), b"data: [DONE]\n\n"])  # fmt: skip
    ctx = ctx_for({"messages": HI})
    out = check_grammar(run(T.stream(ctx), wire))
    starts = [d["content_block"]["type"] for n, d in out if n == "content_block_start"]
    assert starts == ["thinking", "text", "thinking", "text"]
    message = sdk_final_message(run(T.stream(ctx_for({"messages": HI})), wire))
    assert [b.type for b in message.content] == starts
    assert ctx.notes["usage_estimated"] is True  # no usage chunk came: estimated, and said


def _interleaved(doc: dict[str, Any]) -> bytes:
    """The real parallel-tools stream with the two calls' argument chunks interleaved, as
    some servers send them (each call's own order kept)."""
    chunks = _chunks(doc)
    head, tail = chunks[:1], chunks[-2:]
    first = [c for c in chunks[1:-2] if c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0]
    second = [c for c in chunks[1:-2] if c["choices"][0]["delta"]["tool_calls"][0]["index"] == 1]
    mixed = [first[0], second[0]] + [c for pair in zip(first[1:], second[1:], strict=False) for c in pair]
    mixed += first[len(second):] + second[len(first):]  # fmt: skip
    body = head + mixed + tail
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in body) + b"data: [DONE]\n\n"


def test_litellm_13373_interleaved_parallel_tool_calls_never_address_a_missing_block() -> None:
    """LiteLLM #13373 ("Content block not found"): chat may interleave two calls' arguments;
    each tool_use block still gets all and only its own, and no delta names a closed block."""
    doc = corpus_answer("openai-gpt-4o-parallel-tools.stream.json")
    out = run(T.stream(ctx_for({"messages": HI})), _interleaved(doc))
    check_grammar(out)
    message = sdk_final_message(out)
    assert [(b.name, b.input) for b in message.content] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]  # fmt: skip
    assert message.stop_reason == "tool_use"


def test_keepalive_comments_become_pings_and_close_completes_a_stream_without_done() -> None:
    doc = corpus_answer("deepseek-reasoner-tool-call.stream.json")  # vercel/ai kept no [DONE]
    wire = wire_stream(doc)
    wire = wire[: wire.index(b"\n\n") + 2] + b": keep-alive\n\n" + wire[wire.index(b"\n\n") + 2 :]
    out = run(T.stream(ctx_for({"messages": HI})), wire)
    assert [n for n, _ in check_grammar(out)].count("ping") == 1
    assert sdk_final_message(out).stop_reason == "tool_use"


def test_a_broken_stream_ends_in_one_anthropic_error_event() -> None:
    doc = corpus_answer("openai-gpt-4o-text.stream.json")
    wire = wire_stream(doc)
    stream = T.stream(ctx_for({"messages": HI}))
    shown = run(stream, wire[: len(wire) // 2], close=False)
    ending = Ending(Classification(ErrorType.PROVIDER_UNAVAILABLE, True, None, None), "upstream reset", "upstream_reset")
    tail = stream.broken(ending)
    (name, doc_), = events(tail)
    assert name == "error" and doc_["error"]["type"] == "api_error" and doc_["request_id"] == "0123456789abcdef"
    assert stream.close() == b"" and stream.event(b"data: [DONE]\n\n") == b""  # nothing after the error
    with pytest.raises(anthropic.APIStatusError):
        sdk_final_message(shown + tail)


def test_stream_usage_not_asked_when_the_target_says_so() -> None:
    body = copy.deepcopy(corpus_request(FIRST))
    out = chat(body, Target(model="m", stream_usage=False))
    assert "stream_options" not in out


# --- llama-cpp-python, captured here -----------------------------------------------------


def test_llama_cpp_python_stream_without_a_usage_chunk_is_estimated_and_said() -> None:
    """llama-cpp-python 0.3.36 sends no usage chunk even when asked: the final usage is the
    estimate, flagged for the log line, and the stream still reads back whole."""
    doc = corpus_answer("llama-cpp-python-0.3.36-text.stream.json")
    assert doc["request"]["stream_options"] == {"include_usage": True}
    ctx = ctx_for({"system": "You are brief.", "messages": [{"role": "user", "content": "Name three colours."}]})
    out = run(T.stream(ctx), wire_stream(doc))
    check_grammar(out)
    message = sdk_final_message(out)
    want = _expected(_chunks(doc))
    assert [b.text for b in message.content] == [want["text"]] and message.stop_reason == "max_tokens"
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
    assert ctx.notes["usage_estimated"] is True


def test_llama_cpp_python_buffered_answer() -> None:
    doc = corpus_answer("llama-cpp-python-0.3.36-text.json")
    ctx = ctx_for({"messages": [{"role": "user", "content": "Name three colours."}]})
    message = sdk_message(T.answer(doc["body"], ctx))
    assert message.content[0].text == doc["body"]["choices"][0]["message"]["content"]
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == ("max_tokens", 22, 24)
    assert not ctx.notes


@pytest.mark.parametrize(("schema", "strict"), [
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}, True),
    # Optional properties: Anthropic takes them, OpenAI's strict mode refuses them.
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a"],
      "additionalProperties": False}, False),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {"c": {"type": "integer"}},
      "required": ["c"]}}, "required": ["a"], "additionalProperties": False}, False),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {
      "c": {"type": "integer"}}, "required": ["c"], "additionalProperties": False}}}, "required": ["a"],
      "additionalProperties": False}, True),
    # Composition OpenAI's strict mode does not support (its Structured Outputs guide), which
    # Anthropic takes: allOf of references, as the anthropic SDK's transform_schema passes on.
    ({"type": "object", "properties": {"p": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A"}]}}, "required": ["p"],
      "additionalProperties": False, "$defs": {"A": {"type": "object", "properties": {"x": {"type": "string"}},
      "required": ["x"], "additionalProperties": False}}}, False),
    ({"type": "object", "properties": {"p": {"type": "string", "not": {"const": ""}}}, "required": ["p"],
      "additionalProperties": False}, False),
    ({"type": "object", "properties": {"p": {"type": "string"}, "q": {"type": "string"}}, "required": ["p", "q"],
      "additionalProperties": False, "if": {"properties": {"p": {"const": "a"}}}, "then": {"required": ["q"]}},
     False),
    ({"type": "object", "properties": {"p": {"type": "string"}, "q": {"type": "string"}}, "required": ["p", "q"],
      "additionalProperties": False, "dependentRequired": {"p": ["q"]}}, False),
    # A property named like a keyword is a property.
    ({"type": "object", "properties": {"not": {"type": "string"}, "if": {"type": "string"}}, "required": ["not", "if"],
      "additionalProperties": False}, True),
])  # fmt: skip
def test_structured_output_is_strict_only_where_openai_takes_it_strict(schema: dict[str, Any], strict: bool) -> None:
    """Anthropic's structured outputs take optional properties; OpenAI's strict mode answers
    400 to them ("'required' is required to be supplied and to be an array including every key
    in properties"): such a schema is sent without strict, not refused."""
    out = chat(sdk_request(messages=HI, output_config={"format": {"type": "json_schema", "schema": schema}}))
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "output", "schema": schema, "strict": strict}}  # fmt: skip
    tool = {"name": "t", "input_schema": schema, "strict": True}
    assert chat(sdk_request(messages=HI, tools=[tool]))["tools"][0]["function"].get("strict", False) is strict


_P = {"type": "object", "properties": {"q": {"type": "integer"}}, "required": ["q"], "additionalProperties": False}


@pytest.mark.parametrize(("given", "sent"), [
    # pydantic v2's nested model field with a description: strict mode refuses a $ref with any
    # sibling ("$ref cannot have keywords {'description'}", vectorize-io/hindsight#3944).
    ({"p": {"$ref": "#/$defs/P", "description": "x", "title": "P"}}, {"p": {"$ref": "#/$defs/P"}}),
    # pydantic v1's: a one-member allOf is its member.
    ({"p": {"allOf": [{"$ref": "#/$defs/P"}], "description": "x"}}, {"p": {"$ref": "#/$defs/P"}}),
    ({"p": {"allOf": [{"type": "string"}], "description": "x"}}, {"p": {"type": "string", "description": "x"}}),
])  # fmt: skip
def test_a_described_reference_goes_strict_without_its_annotations(given: dict[str, Any], sent: dict[str, Any]) -> None:
    def schema(props: dict[str, Any], **defs: Any) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False,
                **({"$defs": defs} if defs else {})}  # fmt: skip

    uses_p = "$ref" in json.dumps(given)
    request = sdk_request(messages=HI, output_config={"format": {"type": "json_schema", "schema": schema(given, P=_P)}})
    assert chat(request)["response_format"]["json_schema"] == {
        "name": "output", "schema": schema(sent, **({"P": _P} if uses_p else {})), "strict": True}  # fmt: skip
    tool = {"name": "t", "input_schema": schema(given, P=_P), "strict": True}
    function = chat(sdk_request(messages=HI, tools=[tool]))["tools"][0]["function"]
    assert (function["parameters"], function["strict"]) == (schema(sent, **({"P": _P} if uses_p else {})), True)


def test_definitions_nothing_refers_to_do_not_keep_a_schema_from_strict_mode() -> None:
    unused = {"U": {"allOf": [_P, _P]}}  # a model's leftover, which strict mode would refuse
    given = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"],
             "additionalProperties": False}  # fmt: skip
    request = sdk_request(messages=HI, output_config={"format": {"type": "json_schema",
                                                                 "schema": {**given, "$defs": unused}}})  # fmt: skip
    assert chat(request)["response_format"]["json_schema"] == {"name": "output", "schema": given, "strict": True}
    # Still sent, and not strict, where referred to (through another definition too).
    used = {**given, "properties": {"a": {"$ref": "#/$defs/V"}}, "$defs": {"V": {"$ref": "#/$defs/U"}, **unused}}
    request = sdk_request(messages=HI, output_config={"format": {"type": "json_schema", "schema": used}})
    assert chat(request)["response_format"]["json_schema"] == {"name": "output", "schema": used, "strict": False}
    # A $ref keeping another sibling than an annotation is not strict.
    other = {**given, "properties": {"a": {"$ref": "#/$defs/P", "nullable": True}}, "$defs": {"P": _P}}
    request = sdk_request(messages=HI, output_config={"format": {"type": "json_schema", "schema": other}})
    assert chat(request)["response_format"]["json_schema"]["strict"] is False


# A structured output whose root is not an object: Anthropic's structured-outputs guide lists
# "All basic types: object, array, string, …" and states no rule for the root; OpenAI's takes
# only an object ("schema must be a JSON Schema of 'type: "object"', got 'type: "array"'").
RECIPES = {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/Recipe"}, "$defs": {"Recipe": {
    "type": "object", "properties": {"recipe_name": {"type": "string"}, "ingredients": {
        "type": "array", "items": {"type": "string"}}},
    "required": ["recipe_name", "ingredients"], "additionalProperties": False}}}  # fmt: skip
LIST_ASKED = {"format": {"type": "json_schema", "schema": RECIPES}}


def _chat_answer(text: str, finish: str = "stop") -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}]}


def _chat_stream(*pieces: str, finish: str = "stop") -> bytes:
    deltas = [{"role": "assistant", "content": ""}, *({"content": p} for p in pieces)]
    chunks = [{"choices": [{"index": 0, "delta": d}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("asked", [{"output_config": LIST_ASKED}, {"extra_body": {"output_format": LIST_ASKED["format"]}}])
def test_a_list_schema_goes_inside_an_object_openai_takes(asked: dict[str, Any]) -> None:
    """``output_config.format`` and the beta's ``output_format`` alike; sent as it was, OpenAI
    (and the fake's chat and Responses APIs) refused it."""
    request = sdk_request(messages=HI, **asked)
    as_it_was = {"model": "gpt-4.1", "messages": [{"role": "user", "content": "hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "output", "schema": RECIPES}}}  # fmt: skip
    assert chat_rules.refusal("/v1/chat/completions", as_it_was) is not None
    out = chat(request)
    sent = out["response_format"]["json_schema"]
    assert sent["schema"]["properties"] == {"response": {k: v for k, v in RECIPES.items() if k != "$defs"}}
    assert sent["schema"]["$defs"] == RECIPES["$defs"] and sent["schema"]["required"] == ["response"]
    assert sent["strict"] is True  # the wrapper is closed and requires its one property
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_responses = default_translations().table["messages", "responses"].request(request, TARGET)
    assert isinstance(on_responses, dict) and responses_rules.refusal("/v1/responses", on_responses) is None


def test_a_list_schemas_answer_is_the_list_buffered_and_streamed() -> None:
    """The client asked for a bare array and parses the text as one; the wrapper is ours."""
    ctx = T.held(ctx_for(sdk_request(messages=HI, output_config=LIST_ASKED)))  # as the pipeline keeps it
    value = '[{"recipe_name": "Shortbread", "ingredients": ["butter", "sugar", "flour"]}]'
    wrapped = '{"response": ' + value + "}"
    message = sdk_message(T.answer(_chat_answer(wrapped), ctx))
    assert [b.text for b in message.content] == [value]
    out = run(T.stream(ctx), _chat_stream(wrapped[:7], wrapped[7:30], wrapped[30:]))
    check_grammar(out)
    texts = [d["delta"]["text"] for n, d in events(out) if n == "content_block_delta"]
    assert texts == [value]  # held to the end, one delta
    assert [b.text for b in sdk_final_message(out).content] == [value]
    cut = wrapped[:40]  # max_tokens: the value as far as it goes, not our wrapper's opening
    assert sdk_message(T.answer(_chat_answer(cut, "length"), ctx)).content[0].text == value[:27]
    final = sdk_final_message(run(T.stream(ctx), _chat_stream(cut, finish="length")))
    assert (final.content[0].text, final.stop_reason) == (value[:27], "max_tokens")


@pytest.mark.parametrize(("finish", "stop_reason"), [("stop", "end_turn"), ("content_filter", "refusal"),
                                                    ("length", "max_tokens")])  # fmt: skip
def test_a_list_schemas_answer_cut_short_by_anything_is_the_value_as_far_as_it_goes(
    finish: str, stop_reason: str
) -> None:
    """A stop sequence (chat's ``stop``) or a content filter cuts the answer too; only ``length``
    was read as cut, and the client got our wrapper's opening (review)."""
    ctx = T.held(ctx_for(sdk_request(messages=HI, output_config=LIST_ASKED, stop_sequences=["ingr"])))
    cut = '{"response": [{"recipe_name": "Shortbread", "'
    value = cut[len('{"response": '):]
    message = sdk_message(T.answer(_chat_answer(cut, finish), ctx))
    assert (message.content[0].text, message.stop_reason) == (value, stop_reason)
    final = sdk_final_message(run(T.stream(ctx), _chat_stream(cut[:9], cut[9:], finish=finish)))
    assert (final.content[0].text, final.stop_reason) == (value, stop_reason)


def test_a_list_schemas_answer_beside_a_tool_call_keeps_its_place_streamed() -> None:
    """The text before a call comes before it, streamed as buffered: the held text went out only
    at the end, after the call's block (``[tool_use, text]`` against ``[text, tool_use]``, review)."""
    tool = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    ctx = T.held(ctx_for(sdk_request(messages=HI, output_config=LIST_ASKED, tools=[tool])))
    value = '[{"recipe_name": "Shortbread", "ingredients": ["butter"]}]'
    wrapped = '{"response": ' + value + "}"
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": wrapped, "tool_calls": [call]},
                           "finish_reason": "tool_calls"}]}  # fmt: skip
    buffered = sdk_message(T.answer(answer, ctx)).content
    chunks = [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": wrapped[:9]}}]},
              {"choices": [{"index": 0, "delta": {"content": wrapped[9:]}}]},
              {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **call}]}}]},
              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]  # fmt: skip
    out = run(T.stream(ctx), b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n")
    check_grammar(out)
    streamed = sdk_final_message(out).content
    assert [b.type for b in streamed] == [b.type for b in buffered] == ["text", "tool_use"]
    assert streamed[0].text == buffered[0].text == value
    assert streamed[1].input == buffered[1].input == {"city": "Oslo"}


def test_an_object_schemas_answer_is_not_unwrapped() -> None:
    schema = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
              "additionalProperties": False}  # fmt: skip
    request = sdk_request(messages=HI, output_config={"format": {"type": "json_schema", "schema": schema}})
    assert chat(request)["response_format"]["json_schema"]["schema"] == schema
    text = '{"response": "x"}'
    assert sdk_message(T.answer(_chat_answer(text), ctx_for(request))).content[0].text == text
    assert sdk_final_message(run(T.stream(ctx_for(request)), _chat_stream(text))).content[0].text == text


def test_strict_mode_wants_an_object_at_the_root_without_any_of() -> None:
    """OpenAI: "the root level object of a schema must be an object, and not use anyOf"; deeper
    down ``anyOf`` is taken."""
    closed = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"], "additionalProperties": False}
    assert strict_ok(closed) and strict_ok({**closed, "properties": {"x": {"anyOf": [{"type": "string"}, closed]}}})
    assert not strict_ok({"anyOf": [closed, {**closed, "properties": {"y": {"type": "string"}}, "required": ["y"]}]})
    assert not strict_ok({**closed, "anyOf": [closed]})
    assert not strict_ok({"type": "array", "items": closed}) and not strict_ok({"type": "string"})


@pytest.mark.parametrize(("given", "sent"), NO_PROPERTIES)
def test_an_object_schema_without_properties_gets_an_empty_one(given: dict[str, Any], sent: dict[str, Any]) -> None:
    """Claude Code passes an MCP server's input schema on as it came; OpenAI refuses every
    prompt while a tool's is ``{"type": "object"}``."""
    out = chat(sdk_request(messages=HI, tools=[{"name": "mcp__probe__list_things", "input_schema": given}]))
    assert out["tools"][0]["function"]["parameters"] == sent
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_responses = default_translations().table["messages", "responses"].request(
        sdk_request(messages=HI, tools=[{"name": "list_things", "input_schema": given}]), TARGET)
    assert isinstance(on_responses, dict) and on_responses["tools"][0]["parameters"] == sent
    assert responses_rules.refusal("/v1/responses", on_responses) is None


def test_a_strict_tool_without_arguments_stays_strict_once_it_names_its_properties() -> None:
    tool = {"name": "now", "input_schema": {"type": "object", "additionalProperties": False}, "strict": True}
    function = chat(sdk_request(messages=HI, tools=[tool]))["tools"][0]["function"]
    assert function == {"name": "now", "parameters": {"type": "object", "additionalProperties": False,
                                                       "properties": {}}, "strict": True}  # fmt: skip


def test_claude_codes_long_mcp_tool_names_go_within_openais_64_and_come_back_as_declared() -> None:
    """OpenAI takes function names of at most 64 characters; Anthropic 128, and Claude Code
    names MCP tools mcp__<server>__<tool>. A longer one is sent shortened (a digest keeps it
    apart) and every call under it comes back under the declared name."""
    long = "mcp__github-enterprise-internal__create_pull_request_review_comment_reply"
    assert len(long) > 64
    tools = [{"name": long, "input_schema": {"type": "object"}}, WEATHER]
    history = [{"role": "user", "content": "review"}, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": long, "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]}]  # fmt: skip
    request = sdk_request(messages=history, tools=tools, tool_choice={"type": "tool", "name": long})
    out = chat(request)
    sent = out["tools"][0]["function"]["name"]
    assert len(sent) <= 64 and sent != long and out["tools"][1]["function"]["name"] == "get_weather"
    assert out["tool_choice"] == {"type": "function", "function": {"name": sent}}
    assert out["messages"][1]["tool_calls"][0]["function"]["name"] == sent
    ctx = T.held(ctx_for(request))
    call = {"id": "call_9", "type": "function", "function": {"name": sent, "arguments": "{}"}}
    buffered = T.answer(_completion({"content": None, "tool_calls": [call]}, "tool_calls"), ctx)
    assert [b["name"] for b in buffered["content"] if b["type"] == "tool_use"] == [long]
    wire = b"".join(b"data: " + json.dumps(d).encode() + b"\n\n" for d in (
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant",
         "tool_calls": [{"index": 0, **call}]}, "finish_reason": None}]},
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {},
         "finish_reason": "tool_calls"}]})) + b"data: [DONE]\n\n"  # fmt: skip
    streamed = sdk_final_message(run(T.stream(T.held(ctx_for(request))), wire))
    assert [b.name for b in streamed.content if b.type == "tool_use"] == [long]


# The audit fuzz's crash on this direction (a 500 internal_error) and the other fields it reads:
# a 400 naming the field as Anthropic's validation does. The sweep over every field and type is
# tests/unit/translate/test_wrong_types.py.
@pytest.mark.parametrize(("field", "value", "says"), [
    ("tool_choice", {"type": [5]}, "tool_choice.type: Input should be a valid string"),
    ("tool_choice", "auto", "tool_choice: Input should be a valid dictionary"),
    ("tool_choice.name", 5, "tool_choice.name: Input should be a valid string"),
    ("system", 5, "system: Input should be a valid string or list"),
    ("system.0.text", None, "system.0.text: Input should be a valid string"),
    ("messages.0.content", 5, "messages.0.content: Input should be a valid string or list"),
    ("messages.0.content.0", "hi", "messages.0.content.0: Input should be a valid dictionary"),
    ("messages.0.content.0.text", [5], "messages.0.content.0.text: Input should be a valid string"),
    ("messages.1.content.0.input", "x", "messages.1.content.0.input: Input should be a valid dictionary"),
    ("messages.2.content.0.content", 5, "messages.2.content.0.content: Input should be a valid string or list"),
    ("tools", {"a": 1}, "tools: Input should be a valid list"),
    ("tools.0.input_schema", "x", "tools.0.input_schema: Input should be a valid dictionary"),
    ("stop_sequences", "x", "stop_sequences: Input should be a valid list"),
    ("temperature", "0.5", "temperature: Input should be a valid number"),
    ("max_tokens", 1.5, "max_tokens: Input should be a valid integer"),
    ("metadata", "u", "metadata: Input should be a valid dictionary"),
    ("thinking.budget_tokens", "1024", "thinking.budget_tokens: Input should be a valid integer"),
    ("output_config.format.schema", "x", "output_config.format.schema: Input should be a valid dictionary"),
])  # fmt: skip
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it_as_anthropic_does(
    field: str, value: Any, says: str
) -> None:
    out = T.request(mutated(MESSAGES, field, value), TARGET)
    assert isinstance(out, Refusal) and out.code == "invalid_type" and out.message == says, out


# --- Claude Code 2.1.332 (tool search, thinking off) through every translated upstream ------

TOOL_REFERENCE = "claude-code-2.1.332-tool-reference.json"
THROUGH = {"chat": Target(model="qwen3-coder"), "responses": Target(model="gpt-5.5"),
           "gemini": Target(model="gemini-2.5-flash")}  # fmt: skip


def _through(upstream: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as the translator a Messages client reaches ``upstream`` through sends it,
    checked against the fake's rules for that API (what the real one refuses)."""
    out = default_translations().table["messages", upstream].request(body, THROUGH[upstream])
    assert not isinstance(out, Refusal), out
    if upstream == "chat":
        assert chat_rules.refusal("/v1/chat/completions", out) is None
    elif upstream == "responses":
        assert responses_rules.refusal("/v1/responses", out) is None
    else:
        # The model and the method go in the URL (GeminiGenerate.address).
        sent = {k: v for k, v in out.items() if k not in ("model", "stream")}
        assert gemini_rules.refusal(sent, model=THROUGH[upstream].model) is None
    return out


def _tool_result_text(upstream: str, out: dict[str, Any], call_id: str) -> str:
    if upstream == "chat":
        return next(m["content"] for m in out["messages"] if m.get("tool_call_id") == call_id)
    if upstream == "responses":
        return next(i["output"] for i in out["input"] if i.get("type") == "function_call_output")
    parts = [p["functionResponse"] for c in out["contents"] for p in c["parts"] if "functionResponse" in p]
    return json.dumps(parts[0]["response"])


PDF_RESULT = "claude-code-2.1.332-pdf-result.json"


def test_claude_codes_pdf_read_reaches_the_upstreams_that_read_pdfs() -> None:
    """2.1.332's Read on a .pdf answers with a ``document`` block inside its tool_result
    (captured). Responses and Gemini read PDFs, as the translation's table says they get a
    user's: the file goes after the result, as an image would, and the result says it follows.
    A chat server still gets the note (it reads images only)."""
    body = corpus_request(PDF_RESULT)
    data = body["messages"][-1]["content"][0]["content"][1]["source"]["data"]
    responses = _through("responses", body)
    assert _tool_result_text("responses", responses, "toolu_capture01").endswith(
        "[1 file(s): attached after this result]")
    attached = responses["input"][-1]
    assert attached["role"] == "user" and attached["content"][-1] == {
        "type": "input_file", "file_data": f"data:application/pdf;base64,{data}", "filename": "document.pdf"}
    gemini = _through("gemini", body)
    inline = [p["inlineData"] for c in gemini["contents"] for p in c["parts"] if "inlineData" in p]
    assert inline == [{"mimeType": "application/pdf", "data": data}]
    on_chat = _through("chat", body)
    result = _tool_result_text("chat", on_chat, "toolu_capture01")
    assert "application/pdf) left out" in result and data not in json.dumps(on_chat)


@pytest.mark.parametrize("upstream", ["chat", "responses", "gemini"])
def test_claude_codes_tool_search_result_says_the_loaded_tool_is_available(upstream: str) -> None:
    """2.1.332 defers tools (CronList among them) and loads one with ToolSearch, whose result
    is ``[{"type": "tool_reference", "tool_name": "CronList"}]``: Anthropic's API makes the
    referenced tool's definition available to the model there (tool search tool guide, "Custom
    tool search implementation"). A translated upstream has every tool, deferred ones too, up
    front: the result says, in text, that the tool is loaded."""
    body = corpus_request(TOOL_REFERENCE)
    result = body["messages"][3]["content"][0]
    assert result["content"] == [{"type": "tool_reference", "tool_name": "CronList"}]
    assert {t["name"]: t.get("defer_loading") for t in body["tools"]}["CronList"] is True
    out = _through(upstream, body)
    text = _tool_result_text(upstream, out, result["tool_use_id"])
    assert "CronList" in text and "loaded" in text
    declared = ([t["function"]["name"] for t in out["tools"]] if upstream == "chat" else
                [t["name"] for t in out["tools"]] if upstream == "responses" else
                [d["name"] for d in out["tools"][0]["functionDeclarations"]])  # fmt: skip
    assert "CronList" in declared  # deferred tools go as ordinary functions


def test_a_tool_reference_names_the_tool_as_the_upstream_knows_it() -> None:
    long = "mcp__github-enterprise-internal__create_pull_request_review_comment_reply"
    body = sdk_request(tools=[{"name": long, "input_schema": {"type": "object"}, "defer_loading": True},
                              {"name": "ToolSearch", "input_schema": {"type": "object"}}], messages=[
        {"role": "user", "content": "review"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "tool_reference", "tool_name": long}]}]}])  # fmt: skip
    out = chat(body)
    sent = out["tools"][0]["function"]["name"]
    assert sent != long and sent in out["messages"][-1]["content"] and long not in out["messages"][-1]["content"]


THINKING_OFF = "claude-code-2.1.332-thinking-off.json"


def test_claude_code_2_1_332_with_thinking_off_asks_no_upstream_for_visible_thinking() -> None:
    """CLAUDE_CODE_DISABLE_THINKING=1: 2.1.332 sends no ``thinking`` but keeps
    ``output_config.effort``. Anthropic: no extended thinking was asked for, and effort still
    shapes the whole answer ("The effort parameter affects all tokens in the response [...]
    It doesn't require thinking to be enabled"). Each upstream keeps the effort where it has a
    knob that turns no visible thinking on: chat's reasoning_effort and Responses' reasoning
    effort show none; Gemini gets the budget without includeThoughts."""
    body = corpus_request(THINKING_OFF)
    assert "thinking" not in body and body["output_config"] == {"effort": "medium"}
    assert _through("chat", body)["reasoning_effort"] == "medium"
    responses = _through("responses", body)
    assert responses["reasoning"] == {"effort": "medium"}
    gemini = _through("gemini", body)
    assert gemini["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 8192}
    # With thinking asked for, as 2.1.332 sends it by default, Gemini's thoughts are shown.
    asked = _through("gemini", corpus_request("claude-code-2.1.332-first.json"))
    assert asked["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 8192, "includeThoughts": True}


def test_thinking_disabled_reaches_gemini_as_the_least_thinking_and_no_other_upstream() -> None:
    """Claude Code 2.1.197 with MAX_THINKING_TOKENS=0 sends ``thinking: {type: disabled}``. No
    reasoning_effort left Gemini 2.5 Flash thinking as it liked: chat_gemini's "none" turns it
    off. A chat upstream still gets no field (vLLM and older OpenAI models refuse "none")."""
    body = corpus_request("claude-code-2.1.197-thinking-off.json")
    assert body["thinking"] == {"type": "disabled"}
    assert _through("gemini", body)["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 0}
    assert "reasoning_effort" not in _through("chat", body)


def _tool_changes(*blocks: dict[str, Any]) -> dict[str, Any]:
    """2.1.332's Bash round with a system message of tool changes after it (beta
    mid-conversation-tool-changes-2026-07-01, which 2.1.332 names on every request)."""
    body = corpus_request("claude-code-2.1.332-bash-result.json")
    return {**body, "messages": [*body["messages"], {"role": "system", "content": list(blocks)}]}


CRON_LIST = {"name": "CronList", "description": "List all cron jobs",
             "input_schema": {"type": "object", "properties": {}, "additionalProperties": False}}  # fmt: skip


@pytest.mark.parametrize("upstream", ["chat", "responses", "gemini"])
def test_mid_conversation_tool_changes_reach_every_translated_upstream(upstream: str) -> None:
    """A system message's ``tool_addition`` offers the tool "from this point in the conversation
    onward", a ``tool_removal`` withdraws one (Anthropic's "Mid-conversation system messages and
    tool changes"; the SDKs' BetaRequestToolAdditionBlock / BetaRequestToolRemovalBlock). An
    added definition joins the upstream's tools; each change is said where it happened."""
    body = _tool_changes({"type": "tool_addition", "tool": {"type": "tool_definition", "definition": CRON_LIST}},
                         {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Skill"}},
                         {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "Workflow"}})  # fmt: skip
    assert "CronList" not in [t["name"] for t in body["tools"]]
    out = _through(upstream, body)
    declared = ([t["function"]["name"] for t in out["tools"]] if upstream == "chat" else
                [t["name"] for t in out["tools"]] if upstream == "responses" else
                [d["name"] for d in out["tools"][0]["functionDeclarations"]])  # fmt: skip
    assert declared == [t["name"] for t in body["tools"]] + ["CronList"]
    said = json.dumps(out["messages"][-1] if upstream == "chat" else out["input"][-1] if upstream == "responses"
                      else out["contents"][-1])  # fmt: skip
    assert "Tool CronList is available from here on." in said and "Tool Skill is available from here on." in said
    assert "Tool Workflow is no longer available" in said


def test_an_added_tool_with_a_long_name_is_called_under_its_short_one_and_comes_back_as_added() -> None:
    long = "mcp__github-enterprise-internal__create_pull_request_review_comment_reply"
    request = _tool_changes({"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {
        "name": long, "input_schema": {"type": "object"}}}})  # fmt: skip
    out = chat(request)
    sent = out["tools"][-1]["function"]["name"]
    assert len(sent) <= 64 and sent != long and f"Tool {sent} is available" in out["messages"][-1]["content"]
    call = {"id": "call_9", "type": "function", "function": {"name": sent, "arguments": "{}"}}
    for ctx in (ctx_for(request), T.held(ctx_for(request))):
        buffered = T.answer(_completion({"content": None, "tool_calls": [call]}, "tool_calls"), ctx)
        assert [b["name"] for b in buffered["content"] if b["type"] == "tool_use"] == [long]


def test_a_definition_added_again_replaces_the_declared_one() -> None:
    newer = {**CRON_LIST, "name": "Bash", "description": "Run bash, v2"}
    out = chat(_tool_changes({"type": "tool_addition", "tool": {"type": "tool_definition", "definition": newer}}))
    bash = [t["function"] for t in out["tools"] if t["function"]["name"] == "Bash"]
    assert [b["description"] for b in bash] == ["Run bash, v2"]


@pytest.mark.parametrize(("block", "says"), [
    ({"type": "tool_addition", "tool": {"type": "mcp_toolset_reference", "server_name": "gh"}}, "MCP"),
    ({"type": "tool_removal", "tool": {"type": "mcp_tool_reference", "server_name": "gh", "name": "x"}}, "MCP"),
    ({"type": "tool_addition", "tool": {"type": "tool_reference"}}, "'name'"),
    ({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}, "(system) may hold only"),
])  # fmt: skip
def test_tool_changes_a_chat_upstream_cannot_carry_are_refused(block: dict[str, Any], says: str) -> None:
    out = T.request(_tool_changes(block), TARGET)
    assert isinstance(out, Refusal) and says in out.message, out


# --- tool call ids outside Anthropic's alphabet ----------------------------------------------

KIMI_ID = "functions.Read:1"  # Kimi K2 on vLLM / SGLang (vllm-project/vllm#46344, sgl-project/sglang#9606)
READ = {"name": "Read", "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}}}


def _kimi_turn(message: Any) -> dict[str, Any]:
    """Claude Code's next request: the answer's tool_use as it got it, then the tool's result."""
    [call] = [b for b in message.content if b.type == "tool_use"]
    return {"model": "claude-opus-4-8", "max_tokens": 256, "tools": [READ], "messages": [
        *HI, {"role": "assistant", "content": [{"type": "tool_use", "id": call.id, "name": call.name, "input": call.input}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "1\t# SPDX"}]}]}  # fmt: skip


def _sent_ids(body: dict[str, Any]) -> list[str]:
    out = chat(body)
    return [c["id"] for m in out["messages"] for c in m.get("tool_calls") or ()] + [
        m["tool_call_id"] for m in out["messages"] if m["role"] == "tool"]  # fmt: skip


@pytest.mark.parametrize("streamed", [False, True])
def test_kimis_tool_call_id_reaches_claude_code_in_anthropics_alphabet_and_goes_back_as_kimi_sent_it(
    streamed: bool,
) -> None:
    """The id went to Claude Code as sent; on a later turn to Anthropic (a fallback chain, a model
    switch) Anthropic refused the whole conversation: "tool_use.id: String should match pattern
    '^[a-zA-Z0-9_-]+$'", every turn after it too. Kimi wants its own id back exactly."""
    ctx = ctx_for({"messages": HI, "tools": [READ]})
    if streamed:
        stream = run(T.stream(ctx), wire_stream(corpus_answer("chat-kimi-k2-tool-call.stream.json")))
        check_grammar(stream)
        message = sdk_final_message(stream)
    else:
        message = sdk_message(T.answer(corpus_answer("chat-kimi-k2-tool-call.json")["body"], ctx))
    [call] = message.content
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", call.id) and call.id != KIMI_ID
    assert (call.name, call.input) == ("Read", {"file_path": "/mnt/data4/jxy/vllm/vllm/model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py"})
    next_turn = sdk_request(**_kimi_turn(message))
    assert messages_rules.refusal("/v1/messages", next_turn, {}) is None  # what Anthropic takes
    assert _sent_ids(next_turn) == [KIMI_ID, KIMI_ID]


def test_ids_already_in_anthropics_alphabet_go_out_and_back_unchanged() -> None:
    doc = corpus_answer("chat-openai-gpt-4.1-tool-call.json")["body"]
    [sent] = [c["id"] for c in doc["choices"][0]["message"]["tool_calls"]]
    message = sdk_message(T.answer(doc, ctx_for({"messages": HI})))
    assert [b.id for b in message.content if b.type == "tool_use"] == [sent]
    assert _sent_ids(sdk_request(**_kimi_turn(message))) == [sent, sent]


@pytest.mark.parametrize(("model", "request_id", "usage"), [
    ("claude-opus-4-8", "0123456789abcdef", None),  # the gateway's own id, the prompt estimated
    ('my "model" \u2028 ü', "req/ü 1", {"prompt_tokens": 9, "completion_tokens": 1, "total_tokens": 10}),
    ("m", "", {"prompt_tokens": 0}),  # no usable count: the estimate
])  # fmt: skip
def test_message_start_is_written_as_its_document_would_be(model: str, request_id: str, usage: Any) -> None:
    """The stream's first event comes from a byte template (issue #38): byte for byte what the
    document it stands for is written as, whatever the model's and the id's characters."""
    ctx = Context(requested_model=model, request={"messages": HI}, request_id=request_id)
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
    if usage is not None:
        chunk["usage"] = usage
    first = EventSplitter().feed(T.stream(ctx).event(b"data: " + json.dumps(chunk).encode() + b"\n\n"))[0]
    prompt = usage["prompt_tokens"] if usage and usage["prompt_tokens"] > 0 else estimate_input_tokens({"messages": HI})
    message = {
        "id": message_id(ctx), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": prompt, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 1},
    }  # fmt: skip
    assert first == b"event: message_start\ndata: " + orjson.dumps({"type": "message_start", "message": message}) + b"\n\n"
