"""Responses → chat completions (``ResponsesToChat``), from real client requests (Codex 0.169,
tests/corpus/requests/) and recorded chat answers (tests/corpus/answers/), plus the translation
bugs users filed against other gateways that apply to this direction, each by name.

Streams are checked three ways: the event grammar itself, the openai SDK's own stream helper
(``client.responses.stream(...).get_final_response()`` over an httpx2 MockTransport (the SDK's own HTTP client) serving the
translated bytes) and what Codex's SSE reader needs (codex-rs/codex-api/src/sse/responses.rs:
``response.created`` with a response, ``output_item.done`` items it can parse, and
``response.completed`` with an ``id`` and, if any, a complete usage object).
"""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import httpx2 as httpx
import openai
import pytest
from openai.types.responses import Response, ResponseFailedEvent

from gateway.apis.base import Ending
from gateway.errors import Classification, ErrorType
from gateway.fake import chat_rules, messages_rules
from gateway.sse import EventSplitter
from gateway.translate import default_translations
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.responses_chat import ResponsesToChat
from gateway.translate.responses_chat.answer import text_part
from tests import images
from tests.fakeupstream import named_events
from tests.unit.translate.schemas import NO_PROPERTIES
from tests.unit.translate.wrong_types import RESPONSES, mutated

CORPUS = Path(__file__).resolve().parents[2] / "corpus"
T = ResponsesToChat()
TARGET = Target("served-model")


def codex_request(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((CORPUS / "requests" / f"{name}.json").read_text())["body"]
    return body


def answer_case(name: str) -> dict[str, Any]:
    case: dict[str, Any] = json.loads((CORPUS / "answers" / f"{name}.json").read_text())
    return case


def ctx(request: dict[str, Any] | None = None, model: str = "gpt-5-codex") -> Context:
    return Context(
        requested_model=model, request=request or {"model": model, "input": "hi"}, request_id="req1"
    )


def chat(payload: dict[str, Any]) -> dict[str, Any]:
    out = T.request(payload, TARGET)
    assert not isinstance(out, Refusal), out
    return out


def refused(payload: dict[str, Any]) -> Refusal:
    out = T.request(payload, TARGET)
    assert isinstance(out, Refusal), out
    return out


def raw_events(sse: str) -> list[bytes]:
    splitter = EventSplitter()
    return splitter.feed(sse.encode())


def run_stream(raws: list[bytes], c: Context) -> bytes:
    st = T.stream(c)
    out = b"".join(st.event(raw) for raw in raws)
    return out + st.close()


def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None) -> bytes:
    doc: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        doc["usage"] = usage
    return b"data: " + json.dumps(doc).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
WEATHER_TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


# ---- request: real Codex requests --------------------------------------------------------


def test_codex_first_request() -> None:
    body = codex_request("codex-0.169-first")
    out = chat(body)
    roles = [m["role"] for m in out["messages"]]
    assert roles == ["system", "user", "user"]  # two developer messages → one leading system
    developer = [
        p["text"] for item in body["input"] if item.get("role") == "developer" for p in item["content"]
    ]
    assert out["messages"][0]["content"] == "\n\n".join(developer)
    assert out["messages"][-1] == {
        "role": "user",
        "content": "Run echo hi in the shell and tell me what it printed",
    }
    assert out["model"] == "served-model" and out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}
    names = [t["function"]["name"] for t in out["tools"]]
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names
    assert len(names) == 7 + 5  # seven flat functions, five in the namespace; web_search dropped
    assert all(t["type"] == "function" and set(t) == {"type", "function"} for t in out["tools"])
    assert out["tool_choice"] == "auto" and out["parallel_tool_calls"] is True
    # Ignored by rule: nothing of these reaches a chat server.
    for key in (
        "store",
        "include",
        "prompt_cache_key",
        "client_metadata",
        "reasoning",
        "input",
        "instructions",
    ):
        assert key not in out
    assert "reasoning_effort" not in out  # Codex asked for a summary only, no effort


def test_codex_function_call_round_trip() -> None:
    out = chat(codex_request("codex-0.169-exec-result"))
    assistant, tool = out["messages"][-2:]
    assert assistant == {"role": "assistant", "content": "", "tool_calls": [{
        "id": "call_capture1", "type": "function",
        "function": {"name": "exec_command", "arguments": '{"cmd": "echo hi"}'}}]}  # fmt: skip
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_capture1"
    assert tool["content"].startswith("Chunk ID:") and tool["content"].endswith("Output:\nhi\n")


def test_codex_namespaced_call_is_flattened_the_same_way_as_its_tool() -> None:
    out = chat(codex_request("codex-0.169-namespace-result"))
    call = out["messages"][-2]["tool_calls"][0]["function"]
    assert call["name"] == "multi_agent_v1__close_agent"
    assert call["name"] in [t["function"]["name"] for t in out["tools"]]


def test_codex_client_tool_search_is_a_function_and_what_it_loaded_becomes_callable() -> None:
    """Codex 0.169 on a model slug it knows (gpt-5.5) offers a client-executed ``tool_search``
    and keeps its MCP tools out of ``tools``: the search is a chat function, the call and its
    output one tool round, and the loaded namespace's tools join the chat tools under the
    names the output tells the model."""
    body = codex_request("codex-0.169-tool-search-result")
    out = chat(body)
    tools = {t["function"]["name"]: t["function"] for t in out["tools"]}
    [search] = [t for t in body["tools"] if t["type"] == "tool_search"]
    assert tools["tool_search"] == {"name": "tool_search", "description": search["description"],
                                    "parameters": search["parameters"]}  # fmt: skip
    assert tools["mcp__demo__lookup_ticket"]["parameters"]["required"] == ["id"]
    assert "Look up a support ticket by id" in tools["mcp__demo__lookup_ticket"]["description"]
    assistant, tool = out["messages"][-2:]
    assert assistant["tool_calls"] == [{"id": "call_capture1", "type": "function", "function": {
        "name": "tool_search", "arguments": '{"query": "support ticket"}'}}]  # fmt: skip
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_capture1"
    assert json.loads(tool["content"]) == {"loaded_tools": [{
        "name": "mcp__demo__lookup_ticket",
        "description": "Tools in the mcp__demo namespace.\n\nLook up a support ticket by id"}]}  # fmt: skip


def test_the_models_tool_search_comes_back_as_the_item_codex_runs_and_a_loaded_tool_by_its_namespace() -> None:
    request = codex_request("codex-0.169-tool-search-result")
    searched = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_s2", "type": "function",
                "function": {"name": "tool_search", "arguments": '{"query": "tickets", "limit": 3}'}}]}  # fmt: skip
    called = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_l1", "type": "function",
              "function": {"name": "mcp__demo__lookup_ticket", "arguments": '{"id": "42"}'}}]}  # fmt: skip
    for message, item in [
        (searched, {"type": "tool_search_call", "status": "completed", "execution": "client", "call_id": "call_s2",
                    "arguments": {"query": "tickets", "limit": 3}}),
        (called, {"type": "function_call", "status": "completed", "call_id": "call_l1", "name": "lookup_ticket",
                  "namespace": "mcp__demo", "arguments": '{"id": "42"}'}),
    ]:  # fmt: skip
        doc = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
        for c in (ctx(request), T.held(ctx(request))):  # the answer reads no more than it keeps
            [out] = T.answer(doc, c)["output"]
            assert {k: v for k, v in out.items() if k != "id"} == item
        # Streamed: added with empty arguments, done whole; no argument events for a search.
        fn = message["tool_calls"][0]["function"]
        raws = [chunk({"role": "assistant", "tool_calls": [{**message["tool_calls"][0], "index": 0,
                                                            "function": {"name": fn["name"], "arguments": ""}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": fn["arguments"]}}]}),
                chunk({}, "tool_calls"), DONE]  # fmt: skip
        events = check_grammar(run_stream(raws, T.held(ctx(request))))
        [done] = [d["item"] for n, d in events if n == "response.output_item.done"]
        assert {k: v for k, v in done.items() if k != "id"} == item
        if item["type"] == "tool_search_call":
            [added] = [d["item"] for n, d in events if n == "response.output_item.added"]
            assert added["arguments"] == {} and added["status"] == "in_progress"
            assert not [n for n, _ in events if "arguments" in n]


def test_codex_responses_lite_tools_in_an_input_item_are_the_requests_tools() -> None:
    """Codex 0.171 on its default model (gpt-6.2-sol) declares its tools in an
    ``additional_tools`` input item and sends no ``tools``: each was refused as an unknown
    item type. They are the chat tools, flattened like any namespace; the item is no message."""
    body = codex_request("codex-0.171-lite-first")
    assert "tools" not in body and body["input"][0]["type"] == "additional_tools"
    out = chat(body)
    tools = {t["function"]["name"]: t["function"] for t in out["tools"]}
    assert list(tools)[:2] == ["functions__exec", "functions__wait"]
    assert {"clock__sleep", "collaboration__spawn_agent", "collaboration__wait_agent"} <= set(tools)
    assert tools["functions__exec"]["parameters"]["required"] == ["input"]  # the custom JS tool
    assert [m["role"] for m in out["messages"]] == ["system", "user", "user"]
    assert "additional_tools" not in json.dumps(out["messages"])
    assert out["tool_choice"] == "auto" and out["parallel_tool_calls"] is False


def test_codex_responses_lite_exec_round_trips_in_its_namespace() -> None:
    """The model's call of ``functions__exec`` reaches Codex as the custom ``exec`` in
    namespace ``functions``, buffered and streamed, also from a held (large) request; Codex's
    replay of it (corpus codex-0.171-lite-exec-result) goes back under the same chat name."""
    request = codex_request("codex-0.171-lite-exec-result")
    replayed = chat(request)["messages"][-2]["tool_calls"][0]
    assert replayed["function"]["name"] == "functions__exec"
    assert json.loads(replayed["function"]["arguments"])["input"].startswith("const r = await tools.exec_command")
    js = 'text("hi")'
    message = {"role": "assistant", "content": None, "tool_calls": [{"id": "call_x", "type": "function",
               "function": {"name": "functions__exec", "arguments": json.dumps({"input": js})}}]}  # fmt: skip
    item = {"type": "custom_tool_call", "status": "completed", "call_id": "call_x", "name": "exec",
            "input": js, "namespace": "functions"}  # fmt: skip
    doc = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
    for c in (ctx(request), T.held(ctx(request))):  # the answer reads no more than it keeps
        [out] = T.answer(doc, c)["output"]
        assert {k: v for k, v in out.items() if k != "id"} == item
    raws = [chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_x", "type": "function",
                                                        "function": {"name": "functions__exec", "arguments": ""}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps({"input": js})}}]}),
            chunk({}, "tool_calls"), DONE]  # fmt: skip
    events = check_grammar(run_stream(raws, T.held(ctx(request))))
    [done] = [d["item"] for n, d in events if n == "response.output_item.done"]
    assert {k: v for k, v in done.items() if k != "id"} == item


def test_tools_declared_twice_across_tools_and_input_items_are_offered_once() -> None:
    lite = codex_request("codex-0.171-lite-first")
    [carrier] = [i for i in lite["input"] if i["type"] == "additional_tools"]
    later = {"type": "additional_tools", "role": "developer", "tools": [
        {"type": "namespace", "name": "clock", "description": "", "tools": [
            {"type": "function", "name": "sleep", "description": "again", "parameters": {"type": "object"}},
            {"type": "function", "name": "now", "description": "time", "parameters": {"type": "object"}}]},
        *WEATHER_TOOLS]}  # fmt: skip
    body = {**lite, "tools": WEATHER_TOOLS, "input": [carrier, *lite["input"][1:], later]}
    names = [t["function"]["name"] for t in chat(body)["tools"]]
    assert names.count("get_weather") == 1 and names.count("clock__sleep") == 1 and "clock__now" in names
    sleep = next(t for t in chat(body)["tools"] if t["function"]["name"] == "clock__sleep")
    assert "again" not in sleep["function"]["description"]  # the first declaration stands
    # A malformed carrier is the client's to hear about, not a 500.
    bad = refused({**lite, "input": [{"type": "additional_tools", "tools": [{"type": "namespace", "name": "x",
                                                                            "tools": True}]}, *lite["input"][1:]]})
    assert "tools" in bad.message


def test_an_item_refusal_names_the_api_the_upstream_speaks() -> None:
    """Responses → Messages and → Gemini go through chat; the client reads of its upstream."""
    body = {"model": "m", "input": [{"type": "weird_item"}]}
    for onward, api in [("", "chat completions"), ("messages", "Anthropic Messages"), ("gemini", "the Gemini API")]:
        out = T.request(body, Target("m", onward=onward))
        assert isinstance(out, Refusal), out
        assert out.message == f"the gateway does not carry input item type 'weird_item' to {api}"


def test_tool_search_without_the_search_tool_loads_nothing_and_a_server_search_stays_hosted() -> None:
    body = codex_request("codex-0.169-tool-search-result")
    # Codex's compaction: the same history, tools: [] (nothing may be called).
    out = chat({**body, "tools": []})
    assert "tools" not in out
    assert out["messages"][-2]["tool_calls"][0]["function"]["name"] == "tool_search"
    hosted = [{**i, "execution": "server"} if i["type"].startswith("tool_search") else i for i in body["input"]]
    server = chat({**body, "input": hosted, "tools": [{"type": "tool_search"}, *WEATHER_TOOLS]})
    assert [t["function"]["name"] for t in server["tools"]] == ["get_weather"]
    assert all(m["role"] != "tool" for m in server["messages"])
    # A namespace loaded twice is declared once, and a tool the request declares is not again.
    again = [*body["input"], body["input"][-2], {**body["input"][-1], "call_id": "call_capture1"}]
    tools = [t["function"]["name"] for t in chat({**body, "input": again})["tools"]]
    assert tools.count("mcp__demo__lookup_ticket") == 1 and tools.count("tool_search") == 1
    clash = refused({**body, "tools": [*body["tools"], {"type": "function", "name": "tool_search"}]})
    assert "tool_search" in clash.message


def test_codex_images_user_data_url_and_tool_output() -> None:
    body = codex_request("codex-0.169-image-result")
    out = chat(body)
    user = out["messages"][2]
    image = next(p for p in user["content"] if p["type"] == "image_url")
    assert (
        image["image_url"]["url"].startswith("data:image/png;base64,")
        and image["image_url"]["detail"] == "high"
    )
    tool, follow = out["messages"][-2:]
    assert tool["role"] == "tool" and "1 image" in tool["content"]
    assert follow["role"] == "user" and follow["content"][0]["type"] == "image_url"


@pytest.mark.parametrize("upstream", ["chat", "messages", "gemini"])
def test_codexs_image_result_says_where_the_image_is_on_every_upstream(upstream: str) -> None:
    """Codex's ``view_image`` output (an image, no text) becomes a text result and the image
    after it: in the next user message on chat, but in the same user turn, right after the
    result, on Messages and Gemini, where "attached in the next message" was untrue (audit)."""
    body = codex_request("codex-0.169-image-result")
    target = {"chat": Target("qwen3-coder"), "messages": CLAUDE, "gemini": Target("gemini-2.5-flash")}[upstream]
    out = default_translations().table["responses", upstream].request(body, target)
    assert not isinstance(out, Refusal), out
    said = "(the tool returned 1 image(s): attached after this result)"
    if upstream == "chat":
        tool, follow = out["messages"][-2:]
        assert tool["content"] == said and follow["content"][-1]["type"] == "image_url"
    elif upstream == "messages":
        turn = out["messages"][-1]["content"]
        assert [b["type"] for b in turn] == ["tool_result", "image"] and turn[0]["content"] == said
    else:
        parts = out["contents"][-1]["parts"]
        assert [next(iter(p)) for p in parts] == ["functionResponse", "inlineData"]
        assert parts[0]["functionResponse"]["response"] == {"output": said}


def test_agents_sdk_requests() -> None:
    """The OpenAI Agents SDK 0.24: instructions, a strict function tool, reasoning effort and
    text verbosity, buffered; then the call and its output."""
    first = chat(codex_request("agents-sdk-0.24-first"))
    assert first == {
        "model": "served-model",
        "messages": [{"role": "system", "content": "Answer weather questions with the tool."},
                     {"role": "user", "content": "What's the weather in Paris?"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Current weather in a city.", "strict": True,
            "parameters": codex_request("agents-sdk-0.24-first")["tools"][0]["parameters"]}}],
        "reasoning_effort": "low",
    }  # fmt: skip
    second = chat(codex_request("agents-sdk-0.24-tool-result"))
    assert second["messages"][2:] == [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_capture1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_capture1", "content": "18C and sunny in Paris"},
    ]  # fmt: skip


# ---- request: each rule ------------------------------------------------------------------


def test_input_string_and_instructions() -> None:
    out = chat({"model": "m", "instructions": "Be brief.", "input": "hello"})
    assert out["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]


def test_late_developer_messages_are_hoisted_into_the_one_leading_system_message() -> None:
    out = chat({"model": "m", "instructions": "A", "input": [
        {"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"},
        {"role": "developer", "content": [{"type": "input_text", "text": "B"}]},
        {"role": "system", "content": "C"}, {"role": "user", "content": "q2"}]})  # fmt: skip
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "user"]
    assert out["messages"][0]["content"] == "A\n\nB\n\nC"


def test_text_then_parallel_calls_is_one_assistant_message_and_reasoning_is_dropped() -> None:
    out = chat({"model": "m", "tools": WEATHER_TOOLS, "input": [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA..."},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking both.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city":"Paris"}', "status": "completed"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "get_weather",
         "arguments": '{"city":"Rome"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "rain"}]},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search"}},
    ]})  # fmt: skip
    user, assistant, t1, t2 = out["messages"]
    assert assistant["content"] == "Checking both."
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert (t1["tool_call_id"], t1["content"], t2["tool_call_id"], t2["content"]) == (
        "c1",
        "sunny",
        "c2",
        "rain",
    )


def test_reasoning_text_in_a_reasoning_item_goes_back_as_the_turns_reasoning_content() -> None:
    """The Responses spec lets a reasoning item carry the raw reasoning as ``content``
    ``reasoning_text`` parts (what this translator, vLLM and Ollama answer open models'
    reasoning with), and clients replay the items they got. Chat's form is the assistant
    message's ``reasoning_content``, which DeepSeek's thinking mode requires back on a turn
    that called tools (api-docs.deepseek.com/guides/thinking_mode: else a 400)."""
    out = chat({"model": "m", "tools": WEATHER_TOOLS, "input": [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Need a tool."}],
         "content": [{"type": "reasoning_text", "text": "The user wants "},
                     {"type": "reasoning_text", "text": "the weather."}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA...",
         "content": [{"type": "reasoning_text", "text": "Sunny: say so."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
        # Reasoning with no output after it in its turn has no assistant message to ride on.
        {"type": "reasoning", "id": "rs_3", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]},
        {"role": "user", "content": "thanks"},
    ]})  # fmt: skip
    user, called, tool, answered, thanks = out["messages"]
    assert called["reasoning_content"] == "The user wants the weather." and called["tool_calls"]
    assert answered == {"role": "assistant", "content": "Sunny.", "reasoning_content": "Sunny: say so."}
    assert thanks == {"role": "user", "content": "thanks"}


def test_an_answers_reasoning_replayed_by_the_client_round_trips() -> None:
    body = answer_case("chat-deepseek-reasoner")["body"]
    output = T.answer(body, ctx())["output"]
    out = chat({"model": "m", "input": [{"role": "user", "content": "hi"}, *output,
                                        {"role": "user", "content": "and?"}]})  # fmt: skip
    sent = body["choices"][0]["message"]
    assert out["messages"][1] == {"role": "assistant", "content": sent["content"],
                                  "reasoning_content": sent["reasoning_content"]}  # fmt: skip


def test_a_call_id_past_openais_40_goes_as_one_digest_on_the_call_and_its_output() -> None:
    long_id = "call_9f3a__gsig_" + "Q" * 48  # 64: the Responses API takes it, chat does not
    out = chat({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "ls"},
        {"type": "function_call", "call_id": long_id, "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": long_id, "output": "a.txt"}]})["messages"]  # fmt: skip
    sent = out[1]["tool_calls"][0]["id"]
    assert len(sent) <= 40 and sent == out[2]["tool_call_id"]


def test_assistant_tool_call_content_is_an_empty_string_never_null() -> None:
    """llama-cpp-python answers 500 "7 validation errors" to content: null (tests/real/NOTES.md)."""
    out = chat({"model": "m", "tools": WEATHER_TOOLS, "input": [
        {"role": "user", "content": "x"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"}]})  # fmt: skip
    assert out["messages"][1]["content"] == ""


@pytest.mark.parametrize(("part", "expected"), [
    ({"type": "input_image", "image_url": "https://example.com/a.png"},
     {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}),
    ({"type": "input_image", "image_url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "low"},
     {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "low"}}),
])  # fmt: skip
def test_images_url_and_base64(part: dict[str, Any], expected: dict[str, Any]) -> None:
    out = chat(
        {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, part]}]}
    )
    assert out["messages"][0]["content"] == [{"type": "text", "text": "see"}, expected]


@pytest.mark.parametrize(("payload", "says"), [
    ({"previous_response_id": "resp_1", "input": "go on"}, "previous_response_id"),
    ({"conversation": "conv_1", "input": "go on"}, "conversation"),
    ({"prompt": {"id": "pmpt_1"}, "input": "x"}, "prompt"),
    ({"background": True, "input": "x"}, "background"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "item_reference"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]}, "input_file"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,JVBE",
                                              "filename": "a.pdf"}]}]}, "input_file"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]}, "file_id"),
    ({"input": [{"type": "computer_call", "call_id": "c", "action": {}}]}, "computer_call"),
    ({"input": [{"type": "compaction", "encrypted_content": "gAAAA"}, {"role": "user", "content": "go"}]},
     "compaction"),
    ({"input": "x", "text": {"format": {"type": "grammar"}}}, "text.format"),
    # As chat's own logprobs are on every translation: no token probabilities come back.
    ({"input": "x", "top_logprobs": 2}, "top_logprobs"),
    ({"input": "x", "include": ["message.output_text.logprobs"]}, "logprobs"),
])  # fmt: skip
def test_refused_with_a_clear_message(payload: dict[str, Any], says: str) -> None:
    r = refused({"model": "m", **payload})
    assert says in r.message and r.code == "untranslatable_request"


def test_knobs() -> None:
    out = chat({"model": "m", "input": "x", "max_output_tokens": 300, "temperature": 0.2, "top_p": 0.9,
                "safety_identifier": "u-1", "reasoning": {"effort": "low", "summary": "auto"},
                "truncation": "auto", "metadata": {"a": "b"}, "store": True, "top_logprobs": 0,
                "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}, "strict": True},
                         "verbosity": "low"}})  # fmt: skip
    assert out == {"model": "served-model", "messages": [{"role": "user", "content": "x"}], "max_tokens": 300,
                   "temperature": 0.2, "top_p": 0.9, "user": "u-1", "reasoning_effort": "low",
                   "response_format": {"type": "json_schema",
                                       "json_schema": {"name": "r", "schema": {"type": "object"}, "strict": True}}}  # fmt: skip
    assert chat({"model": "m", "input": "x", "user": "a", "safety_identifier": "b"})["user"] == "a"
    assert chat({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}})["response_format"] == {
        "type": "json_object"}  # fmt: skip


def test_function_tools_strict_and_defaults() -> None:
    out = chat({"model": "m", "input": "x", "parallel_tool_calls": False, "tools": [
        {"type": "function", "name": "a", "description": "A", "parameters": {"type": "object"}, "strict": True},
        {"type": "function", "name": "b", "strict": False, "parameters": None}]})  # fmt: skip
    assert out["tools"] == [
        {"type": "function", "function": {"name": "a", "description": "A",
                                          "parameters": {"type": "object", "properties": {}}, "strict": True}},
        {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "properties": {}}}}]  # fmt: skip
    assert out["parallel_tool_calls"] is False and "tool_choice" not in out


@pytest.mark.parametrize(("given", "sent"), NO_PROPERTIES)
def test_an_object_schema_without_properties_gets_an_empty_one(given: dict[str, Any], sent: dict[str, Any]) -> None:
    out = chat({"model": "m", "input": "x", "tools": [
        {"type": "function", "name": "list_things", "parameters": given, "strict": False},
        {"type": "namespace", "name": "mcp", "tools": [{"type": "function", "name": "now", "parameters": given}]}]})  # fmt: skip
    assert [t["function"]["parameters"] for t in out["tools"]] == [sent, sent]
    assert chat_rules.refusal("/v1/chat/completions", out) is None


HOSTED = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["vs_1"]},
          {"type": "code_interpreter", "container": {"type": "auto"}},
          {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"}]  # fmt: skip


def test_hosted_tools_left_out_are_named_and_not_echoed() -> None:
    """Codex always sends web_search; a chat server cannot run it, so it is dropped (as
    documented) but was dropped silently: named now for x-llm-params-dropped, and the answer's
    echo of the request's tools lists only those the model was offered."""
    request = {"model": "m", "input": "x", "tools": [*HOSTED, *WEATHER_TOOLS, {"type": "web_search"}]}
    assert [t["function"]["name"] for t in chat(request)["tools"]] == ["get_weather"]
    dropped = ("tools.web_search", "tools.file_search", "tools.code_interpreter", "tools.computer_use_preview")
    assert T.dropped(request) == dropped
    assert default_translations().table["responses", "messages"].dropped(request) == dropped
    assert T.dropped({"model": "m", "input": "x", "tools": WEATHER_TOOLS}) == ()
    doc = {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}]}
    assert T.answer(doc, ctx(request))["tools"] == WEATHER_TOOLS


def test_parallel_tool_calls_and_tool_choice_are_left_out_without_tools() -> None:
    """OpenAI answers 400 to parallel_tool_calls without tools; Codex's web_search alone is dropped."""
    out = chat({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": "auto",
                "parallel_tool_calls": True})  # fmt: skip
    assert "tools" not in out and "parallel_tool_calls" not in out and "tool_choice" not in out


TOOLS = [*WEATHER_TOOLS, {"type": "namespace", "name": "ns", "description": "Group.", "tools": [
    {"type": "function", "name": "f", "description": "F", "parameters": {"type": "object"}}]},
    {"type": "web_search"}]  # fmt: skip


@pytest.mark.parametrize(("choice", "expected"), [
    ("auto", "auto"), ("none", "none"), ("required", "required"),
    ({"type": "function", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
    ({"type": "function", "name": "f", "namespace": "ns"}, {"type": "function", "function": {"name": "ns__f"}}),
])  # fmt: skip
def test_bifrost_3596_tool_choice_is_translated_not_copied(choice: Any, expected: Any) -> None:
    """Bifrost #3596 (and #6887): a tool_choice copied across APIs unchanged is a 400 or a
    silently different choice. Responses' flat {type, name} is chat's nested {type, function}."""
    assert (
        chat({"model": "m", "input": "x", "tools": TOOLS, "tool_choice": choice})["tool_choice"] == expected
    )


def test_tool_choice_allowed_tools_narrows_the_tools() -> None:
    out = chat({"model": "m", "input": "x", "tools": TOOLS, "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}})  # fmt: skip
    assert out["tool_choice"] == "required" and [t["function"]["name"] for t in out["tools"]] == [
        "get_weather"
    ]


@pytest.mark.parametrize("payload", [
    {"tools": TOOLS, "tool_choice": {"type": "web_search"}},
    {"tools": [{"type": "web_search"}], "tool_choice": "required"},
    {"tools": TOOLS, "tool_choice": {"type": "mcp", "server_label": "x"}},
])  # fmt: skip
def test_tool_choice_forcing_a_hosted_tool_is_refused(payload: dict[str, Any]) -> None:
    assert "tool_choice" in refused({"model": "m", "input": "x", **payload}).message


def test_namespace_description_and_name_clash_stay_reversible() -> None:
    tools = [{"type": "function", "name": "ns__f"}, *TOOLS]
    out = chat({"model": "m", "input": "x", "tools": tools})
    names = [t["function"]["name"] for t in out["tools"]]
    assert names[0] == "ns__f" and names[2] != "ns__f" and names[2].startswith("ns__f_")
    assert out["tools"][2]["function"]["description"] == "Group.\n\nF"
    # And the answer gives each back under its own name.
    c = ctx({"model": "m", "input": "x", "tools": tools})
    doc = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": names[0], "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": names[2], "arguments": "{}"}}]}}]}  # fmt: skip
    calls = T.answer(doc, c)["output"]
    assert [(i["name"], i.get("namespace")) for i in calls] == [("ns__f", None), ("f", "ns")]


CUSTOM = {"type": "custom", "name": "apply_patch", "description": "Patch files.",
          "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}}  # fmt: skip


def test_custom_tool_is_a_function_with_one_string_input() -> None:
    out = chat({"model": "m", "tools": [CUSTOM], "input": [
        {"role": "user", "content": "patch it"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}]})  # fmt: skip
    fn = out["tools"][0]["function"]
    assert fn["name"] == "apply_patch" and fn["parameters"]["required"] == ["input"]
    assert "lark grammar" in fn["description"] and "start: /.+/" in fn["description"]
    assert out["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"input": "*** Begin Patch"}'
    assert out["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "Done"}


def test_the_request_is_not_modified() -> None:
    body = codex_request("codex-0.169-image-result")
    before = copy.deepcopy(body)
    chat(body)
    assert body == before


# ---- buffered answers ----------------------------------------------------------------------


def test_answer_text_openai() -> None:
    case = answer_case("chat-openai-gpt-4.1-text")
    out = T.answer(case["body"], ctx({"model": "gpt-5", "input": "q", "instructions": "I"}, "gpt-5"))
    Response.model_validate(out)
    assert out["id"] == "resp_req1" and out["object"] == "response" and out["model"] == "gpt-5"
    assert out["status"] == "completed" and out["instructions"] == "I"
    [msg] = out["output"]
    assert (
        msg["type"] == "message"
        and msg["content"][0]["text"] == case["body"]["choices"][0]["message"]["content"]
    )
    u = case["body"]["usage"]
    assert out["usage"] == {"input_tokens": u["prompt_tokens"], "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                            "output_tokens": u["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                            "total_tokens": u["total_tokens"]}  # fmt: skip


def test_answer_tool_call_openai() -> None:
    case = answer_case("chat-openai-gpt-4.1-tool-call")
    out = T.answer(
        case["body"],
        ctx({"model": "gpt-5", "input": "q", "tools": [{"type": "function", "name": "read_file"}]}),
    )
    Response.model_validate(out)
    [call] = out["output"]
    assert call == {"id": "fc_req1_0", "type": "function_call", "status": "completed",
                    "call_id": "call_KjzAbhiZC6nk81tQzL7pwlpc", "name": "read_file",
                    "arguments": '{"path":"README.md"}'}  # fmt: skip


def test_answer_reasoning_deepseek() -> None:
    body = answer_case("chat-deepseek-reasoner")["body"]
    out = T.answer(body, ctx())
    Response.model_validate(out)
    rs, msg = out["output"]
    assert rs["type"] == "reasoning" and rs["summary"] == []
    assert rs["content"] == [
        {"type": "reasoning_text", "text": body["choices"][0]["message"]["reasoning_content"]}
    ]
    assert msg["content"][0]["text"] == "Hello! How can I help you today?"


def test_answer_text_then_tool_deepseek_with_cached_tokens() -> None:
    body = answer_case("chat-deepseek-chat-text-then-tool")["body"]
    out = T.answer(
        body, ctx({"model": "m", "input": "x", "tools": [{"type": "function", "name": "get_weather"}]})
    )
    msg, call = out["output"]
    assert (
        msg["content"][0]["text"].startswith("I'll check")
        and call["call_id"] == "call_00_wVp0FIPEgzSN4qfP502y9zG8"
    )
    assert json.loads(call["arguments"]) == {"location": "Tokyo"}


def test_answer_length_is_incomplete_max_output_tokens() -> None:
    out = T.answer(answer_case("chat-openrouter-gpt-4o-length")["body"], ctx())
    Response.model_validate(out)
    assert out["status"] == "incomplete" and out["incomplete_details"] == {"reason": "max_output_tokens"}
    assert out["output"][-1]["status"] == "incomplete"


def test_answer_custom_tool_call_and_deepseek_cache_hits() -> None:
    c = ctx({"model": "m", "input": "x", "tools": [CUSTOM]})
    doc = {"created": 5, "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [{"id": "c9", "type": "function", "function": {
            "name": "apply_patch", "arguments": '{"input": "*** Begin Patch\\n"}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "prompt_cache_hit_tokens": 8}}  # fmt: skip
    out = T.answer(doc, c)
    Response.model_validate(out)
    assert out["output"] == [{"id": "ctc_req1_0", "type": "custom_tool_call", "status": "completed", "call_id": "c9",
                              "name": "apply_patch", "input": "*** Begin Patch\n"}]  # fmt: skip
    assert (
        out["usage"]["input_tokens_details"] == {"cached_tokens": 8, "cache_write_tokens": 0}
        and out["usage"]["total_tokens"] == 12
    )
    assert out["created_at"] == 5


# ---- streams -------------------------------------------------------------------------------


def check_grammar(body: bytes, response_id: str = "resp_req1") -> list[tuple[str, dict[str, Any]]]:
    """The Responses grammar this translator promises, event by event."""
    events = named_events(body)
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert all(name == d["type"] for name, d in events)
    assert [n for n, _ in events[:2]] == ["response.created", "response.in_progress"]
    final = events[-1]
    assert final[0] in ("response.completed", "response.incomplete", "response.failed")
    assert sum(n in ("response.completed", "response.incomplete", "response.failed") for n, _ in events) == 1
    ids = {d["response"]["id"] for n, d in events if "response" in d}
    assert ids == {response_id}
    added = {d["output_index"]: d["item"] for n, d in events if n == "response.output_item.added"}
    done = {d["output_index"]: d["item"] for n, d in events if n == "response.output_item.done"}
    assert sorted(added) == list(range(len(added))) and set(done) <= set(added)
    if final[0] != "response.failed":  # a broken stream may leave its last item open
        assert set(done) == set(added)
    for i, item in done.items():
        assert added[i]["id"] == item["id"] and added[i]["type"] == item["type"]
        before = [n for n, d in events if d.get("output_index") == i]
        assert before[0] == "response.output_item.added" and before[-1] == "response.output_item.done"
    if final[0] != "response.failed":
        assert final[1]["response"]["output"] == [done[i] for i in sorted(done)]
    return events


def sdk_final(body: bytes, request: dict[str, Any]) -> Any:
    """The openai SDK's own stream helper reading the translated bytes."""

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    client = openai.OpenAI(api_key="k", base_url="http://gw.test/v1", http_client=httpx.Client(
        transport=httpx.MockTransport(handler)))  # fmt: skip
    args = {k: v for k, v in request.items() if k in ("model", "input", "tools", "instructions")}
    with client.responses.stream(**args) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text
    return final


def codex_reads(body: bytes) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """What Codex 0.169's SSE reader takes from the stream: the text deltas, the items of
    ``output_item.done`` (a function call needs name, string arguments and call_id) and the
    completed response (an ``id``; usage either null or with every count it requires)."""
    text, items, completed = "", [], None
    for name, d in named_events(body):
        if name == "response.created":
            assert isinstance(d.get("response"), dict)
        elif name == "response.output_text.delta":
            text += d["delta"]
        elif name == "response.output_item.done":
            item = d["item"]
            if item["type"] == "function_call":
                assert isinstance(item["name"], str) and isinstance(item["arguments"], str)
                assert isinstance(item["call_id"], str)
            items.append(item)
        elif name == "response.completed":
            completed = d["response"]
    assert completed is not None and isinstance(completed["id"], str) and completed["id"]
    u = completed.get("usage")
    if u is not None:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert isinstance(u[key], int)
        assert isinstance(u["input_tokens_details"]["cached_tokens"], int)
        assert isinstance(u["output_tokens_details"]["reasoning_tokens"], int)
    return text, items, completed


STREAM_CASES = ["chat-openai-gpt-4.1-text", "chat-openai-gpt-4.1-tool-call", "chat-deepseek-reasoner",
                "chat-deepseek-chat-text-then-tool", "chat-openrouter-gpt-4o-text-then-tool"]  # fmt: skip
TOOLS_OF = {"chat-openai-gpt-4.1-tool-call": "read_file", "chat-deepseek-chat-text-then-tool": "get_weather",
            "chat-openrouter-gpt-4o-text-then-tool": "get_weather"}  # fmt: skip


def expected_of(sse: str) -> tuple[str, dict[int, str], Any]:
    """Text, tool arguments and usage accumulated straight from the chat chunks."""
    text, args, usage = "", {}, None
    for raw in raw_events(sse):
        line = raw.decode().strip()[6:]
        if line == "[DONE]":
            continue
        doc = json.loads(line)
        usage = doc.get("usage") or usage
        for ch in doc["choices"]:
            text += ch["delta"].get("content") or ""
            for tc in ch["delta"].get("tool_calls") or []:
                args[tc["index"]] = args.get(tc["index"], "") + (tc["function"].get("arguments") or "")
    return text, args, usage


@pytest.mark.parametrize("name", STREAM_CASES)
def test_recorded_streams(name: str) -> None:
    case = answer_case(name)
    tool = TOOLS_OF.get(name)
    request = {"model": "gpt-5-codex", "input": "q", "stream": True,
               "tools": [{"type": "function", "name": tool, "parameters": {"type": "object"}}] if tool else []}  # fmt: skip
    body = run_stream(raw_events(case["sse"]), ctx(request))
    events = check_grammar(body)
    text, args, usage = expected_of(case["sse"])
    codex_text, items, completed = codex_reads(body)
    assert codex_text == text
    calls = [i for i in items if i["type"] == "function_call"]
    assert [c["arguments"] for c in calls] == [args[i] for i in sorted(args)]
    assert all(c["name"] == tool for c in calls)
    assert completed["usage"]["input_tokens"] == usage["prompt_tokens"]
    assert completed["usage"]["output_tokens"] == usage["completion_tokens"]
    final = sdk_final(body, request)
    assert final.output_text == text and final.id == "resp_req1" and final.model == "gpt-5-codex"
    assert [c.arguments for c in final.output if c.type == "function_call"] == [args[i] for i in sorted(args)]
    # function_call_arguments.done carries the whole arguments (LiteLLM #27144)
    done_args = [d["arguments"] for n, d in events if n == "response.function_call_arguments.done"]
    assert done_args == [args[i] for i in sorted(args)]


def test_reasoning_stream_deepseek_carries_reasoning_text_then_the_answer() -> None:
    case = answer_case("chat-deepseek-reasoner")
    body = run_stream(raw_events(case["sse"]), ctx())
    events = check_grammar(body)
    kinds = [d["item"]["type"] for n, d in events if n == "response.output_item.added"]
    assert kinds == ["reasoning", "message"]
    reasoning = "".join(d["delta"] for n, d in events if n == "response.reasoning_text.delta")
    assert reasoning.startswith("Hmm, the user just said") and reasoning.endswith("welcoming reply.")
    final = events[-1][1]["response"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 117
    assert final["output"][0]["content"][0]["text"] == reasoning
    sdk_final(body, {"model": "m", "input": "q"})


def test_litellm_27144_arguments_in_many_pieces_are_whole_when_done() -> None:
    """LiteLLM #27144: clients reading only the .done events lost the arguments when the
    translator put them in deltas alone. Here they arrive one character at a time, the name in
    the first chunk without arguments (OpenAI's way) or in a chunk of its own."""
    args = '{"location": "Paris, FR", "unit": "celsius"}'
    first = {
        "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}]
    }
    pieces = [chunk({"tool_calls": [{"index": 0, "function": {"arguments": ch}}]}) for ch in args]
    raws = [
        chunk({"role": "assistant", "content": None}),
        chunk(first),
        *pieces,
        chunk({}, "tool_calls"),
        DONE,
    ]
    body = run_stream(raws, ctx({"model": "m", "input": "x", "tools": WEATHER_TOOLS}))
    events = check_grammar(body)
    done = [d for n, d in events if n == "response.function_call_arguments.done"]
    assert [d["arguments"] for d in done] == [args]
    assert [d["item"]["arguments"] for n, d in events if n == "response.output_item.done"] == [args]
    assert "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta") == args


def test_llm_rosetta_56_completed_has_id_and_every_item_was_added() -> None:
    """llm-rosetta #56: a response.completed without id, or items without output_item.added,
    made Codex fail the turn. A tool call that arrives whole in one chunk (vLLM's way) too."""
    call = {
        "index": 0,
        "id": "call_9",
        "type": "function",
        "function": {"name": "get_weather", "arguments": "{}"},
    }
    raws = [chunk({"role": "assistant", "tool_calls": [call]}, "tool_calls"), DONE]
    body = run_stream(raws, ctx({"model": "m", "input": "x", "tools": WEATHER_TOOLS}))
    events = check_grammar(body)
    names = [n for n, _ in events]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]  # fmt: skip
    _, items, completed = codex_reads(body)
    assert completed["id"] == "resp_req1" and items[0]["call_id"] == "call_9"


NOARGS_TOOLS = [{"type": "function", "name": "noargs", "strict": True,
                 "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}]  # fmt: skip


@pytest.mark.parametrize("args", [[""], [], ["", ""]])
def test_a_call_that_got_no_argument_text_ends_as_an_empty_object(args: list[str]) -> None:
    """A call to a tool without parameters, its arguments never given or given as "" (as the
    chat → Messages stream did for Claude's no-argument calls): ``{}`` as the buffered answer
    gives it, and no empty delta. The openai SDK's ``responses.stream()`` parses a strict
    tool's arguments and raised JSONDecodeError on ""."""
    named = {"index": 0, "id": "call_n", "type": "function", "function": {"name": "noargs"}}
    if args:
        named["function"]["arguments"] = args[0]
    raws = [chunk({"role": "assistant", "tool_calls": [named]}),
            *[chunk({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in args[1:]],
            chunk({}, "tool_calls"), DONE]  # fmt: skip
    request = {"model": "m", "input": "x", "tools": NOARGS_TOOLS}
    body = run_stream(raws, ctx(request))
    events = check_grammar(body)
    deltas = [d["delta"] for n, d in events if n == "response.function_call_arguments.delta"]
    assert deltas == ["{}"]
    assert [d["arguments"] for n, d in events if n == "response.function_call_arguments.done"] == ["{}"]
    [call] = [i for i in codex_reads(body)[1] if i["type"] == "function_call"]
    assert call["arguments"] == "{}"
    final = sdk_final(body, request)
    assert [(o.name, o.arguments, o.parsed_arguments) for o in final.output] == [("noargs", "{}", {})]
    buffered = T.answer({"choices": [{"message": {"role": "assistant", "tool_calls": [named]},
                                      "finish_reason": "tool_calls"}]}, ctx(request))  # fmt: skip
    assert buffered["output"][0]["arguments"] == "{}"


def test_parallel_calls_namespace_and_custom_tool_in_one_stream() -> None:
    request = {"model": "m", "input": "x", "tools": [*TOOLS, CUSTOM]}
    calls = [("call_a", "get_weather", '{"city":"Paris"}'), ("call_b", "ns__f", "{}"),
             ("call_c", "apply_patch", '{"input":"*** Begin Patch\\n*** End Patch"}')]  # fmt: skip
    raws = [chunk({"role": "assistant", "content": "Doing three things."})]
    for i, (cid, name, args) in enumerate(calls):
        raws.append(chunk({"tool_calls": [{"index": i, "id": cid, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}))  # fmt: skip
        raws += [chunk({"tool_calls": [{"index": i, "function": {"arguments": args[:5]}}]}),
                 chunk({"tool_calls": [{"index": i, "function": {"arguments": args[5:]}}]})]  # fmt: skip
    raws += [
        chunk({}, "tool_calls"),
        chunk({}, None, {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
    ]
    body = run_stream([*raws, DONE], ctx(request))
    events = check_grammar(body)
    output = events[-1][1]["response"]["output"]
    assert [i["type"] for i in output] == ["message", "function_call", "function_call", "custom_tool_call"]
    assert (output[2]["name"], output[2]["namespace"]) == ("f", "ns")
    assert output[3]["input"] == "*** Begin Patch\n*** End Patch"
    assert [d["input"] for n, d in events if n == "response.custom_tool_call_input.done"] == [
        output[3]["input"]
    ]
    final = sdk_final(body, {k: v for k, v in request.items() if k != "tools"})
    assert final.output_text == "Doing three things." and final.usage.total_tokens == 13


def test_openrouter_duplicate_finish_chunk_closes_items_once() -> None:
    case = answer_case("chat-openrouter-gpt-4o-text-then-tool")
    body = run_stream(raw_events(case["sse"]), ctx({"model": "m", "input": "x", "tools": WEATHER_TOOLS}))
    events = check_grammar(body)
    assert sum(n == "response.output_item.done" for n, _ in events) == 2


def test_length_finish_ends_in_response_incomplete() -> None:
    raws = [chunk({"role": "assistant", "content": "A long"}), chunk({"content": " story"}, "length"),
            chunk({}, None, {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}), DONE]  # fmt: skip
    body = run_stream(raws, ctx())
    events = check_grammar(body)
    name, final = events[-1]
    assert name == "response.incomplete" and final["response"]["status"] == "incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"


def test_close_without_done_and_keepalives() -> None:
    st = T.stream(ctx())
    assert st.event(b": keep-alive\n\n") == b""
    out = st.event(chunk({"role": "assistant", "content": "Hi"}))
    out += st.event(chunk({}, "stop"))
    out += st.close()
    assert st.close() == b""  # once
    events = check_grammar(out)
    assert events[-1][0] == "response.completed"
    assert events[-1][1]["response"]["usage"]["output_tokens"] == 1  # no usage chunk: estimated ("Hi")


def broken_ending() -> Ending:
    return Ending(Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "upstream stream broke", None)


def test_broken_is_one_response_failed_continuing_the_sequence() -> None:
    st = T.stream(ctx())
    out = st.event(chunk({"role": "assistant", "content": "Hel"}))
    last = named_events(out)[-1][1]["sequence_number"]
    failed = st.broken(broken_ending())
    [(name, doc)] = named_events(failed)
    assert name == "response.failed" and doc["sequence_number"] == last + 1
    assert doc["response"]["id"] == "resp_req1" and doc["response"]["status"] == "failed"
    assert doc["response"]["error"]["code"] == "server_error"
    assert doc["response"]["error"]["x_llm_code"] == "provider_unavailable"
    assert doc["response"]["error"]["message"] == "upstream stream broke"
    ResponseFailedEvent.model_validate(doc)
    check_grammar(out + failed)
    assert st.close() == b"" and st.event(DONE) == b""


def test_broken_before_anything_still_opens_the_response() -> None:
    events = named_events(T.stream(ctx()).broken(broken_ending()))
    assert [n for n, _ in events] == ["response.created", "response.in_progress", "response.failed"]


def test_events_are_split_anywhere_the_gateway_splits_them() -> None:
    """The gateway hands over whole events; held-back leading ones may come together."""
    case = answer_case("chat-openai-gpt-4.1-tool-call")
    raws = raw_events(case["sse"])
    request = {"model": "m", "input": "q", "tools": [{"type": "function", "name": "read_file"}]}
    one_by_one = run_stream(raws, ctx(request))
    st = T.stream(ctx(request))
    together = st.event(b"".join(raws[:3])) + b"".join(st.event(r) for r in raws[3:]) + st.close()
    assert together == one_by_one
    check_grammar(together)


def test_a_stream_without_a_usage_chunk_still_completes_with_estimated_usage() -> None:
    """llama-cpp-python 0.3.36 sends no usage chunk although asked (captured): the completed
    response still carries usage, estimated from sizes and said so in the notes."""
    doc = json.loads((Path(__file__).parents[2] / "corpus" / "answers" / "llama-cpp-python-0.3.36-text.stream.json").read_text())
    c = ctx({"model": "gpt-5-codex", "input": "Name three colours.", "stream": True})
    out = run_stream(raw_events(doc["stream"]), c)
    final = [json.loads(e.split(b"data: ", 1)[1]) for e in EventSplitter().feed(out) if b"response.incomplete" in e
             or b"response.completed" in e][-1]["response"]
    usage = final["usage"]
    assert usage["input_tokens"] > 0 and usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert c.notes["usage_estimated"] is True


def test_tool_names_are_built_once_per_tool_list_and_no_later_step_can_change_them() -> None:
    from gateway.translate.responses_chat.tools import _names_for, tool_names

    first = codex_request("codex-0.169-first")
    again = copy.deepcopy(first)  # the next turn: the same tools, parsed anew
    names = tool_names(first["tools"])
    assert tool_names(again["tools"]) is names  # one entry for equal tool lists
    assert _names_for.cache_info().maxsize == 256
    before = dict(names.to_chat), dict(names.origin)
    # A later step that edits what the translation produced (the chat tools, the request)
    # or tries to edit the mapping itself cannot reach the cached entry.
    out = chat(first)
    out["tools"][0]["function"]["name"] = "changed"
    out["tools"].clear()
    with pytest.raises(TypeError):
        names.to_chat[(None, "shell")] = "changed"  # type: ignore[index]
    with pytest.raises(AttributeError):
        names.origin = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        del names.origin[next(iter(names.origin))]  # type: ignore[attr-defined]
    assert (dict(names.to_chat), dict(names.origin)) == before
    assert chat(again)["tools"] == chat(codex_request("codex-0.169-first"))["tools"] != []


def test_tool_lists_declaring_other_names_get_their_own_mapping() -> None:
    from gateway.translate.responses_chat.tools import tool_names

    a = tool_names([{"type": "function", "name": "f"}, {"type": "custom", "name": "g"}])
    b = tool_names([{"type": "function", "name": "f"}, {"type": "function", "name": "g"}])
    assert a is not b and a.lookup("g").custom and not b.lookup("g").custom
    # Descriptions are not part of the key: each request's chat tools carry its own.
    one = chat({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "description": "one"}]})
    two = chat({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f", "description": "two"}]})
    assert [t["function"]["description"] for t in (*one["tools"], *two["tools"])] == ["one", "two"]


def test_a_streamed_refusal_is_a_refusal_part_as_the_buffered_one_is() -> None:
    """A chat stream's delta.refusal is Responses' refusal part (``response.refusal.delta`` /
    ``.done``), in its own message item, as the buffered translation gives it; not output text."""
    raws = [chunk({"role": "assistant", "content": "Well,"}), chunk({"refusal": "I can't"}),
            chunk({"refusal": " help with that."}, "stop"),
            chunk({}, None, {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}), DONE]  # fmt: skip
    body = run_stream(raws, ctx())
    events = check_grammar(body)
    names = [n for n, _ in events]
    assert [d["delta"] for n, d in events if n == "response.refusal.delta"] == ["I can't", " help with that."]
    assert [d["refusal"] for n, d in events if n == "response.refusal.done"] == ["I can't help with that."]
    assert "".join(d["delta"] for n, d in events if n == "response.output_text.delta") == "Well,"
    added = [d["part"] for n, d in events if n == "response.content_part.added"]
    assert added == [text_part(""), {"type": "refusal", "refusal": ""}]
    assert names.index("response.refusal.delta") > names.index("response.output_text.done")
    buffered = T.answer({"choices": [{"message": {"role": "assistant", "content": "Well,",
                         "refusal": "I can't help with that."}, "finish_reason": "stop"}]}, ctx())  # fmt: skip
    streamed = events[-1][1]["response"]["output"]
    assert [i["content"] for i in streamed] == [i["content"] for i in buffered["output"]]
    final = sdk_final(body, {"model": "gpt-5-codex", "input": "x"})
    assert final.output[1].content[0].type == "refusal" and final.output[1].content[0].refusal == "I can't help with that."


# The audit fuzz found no crash here through the app (admission checks 'input'), but the walk
# raised on an item type it could not hash and took a wrong type for no text: a 400 naming the
# field as OpenAI does. The sweep over every field and type is tests/unit/translate/test_wrong_types.py.
@pytest.mark.parametrize(("field", "value", "says"), [
    ("input.1.type", [5], "'input[1].type': expected a string, but got an array"),
    ("input.0.content", 5, "'input[0].content': expected one of a string or an array, but got an integer"),
    ("input.0.content.0.text", 5, "'input[0].content[0].text': expected a string, but got an integer"),
    ("input.2.output", {"a": 1}, "'input[2].output': expected one of a string or an array, but got an object"),
    ("instructions", 5, "'instructions': expected one of a string or an array, but got an integer"),
    ("tools.0.parameters", "x", "'tools[0].parameters': expected an object, but got a string"),
    ("tool_choice", 5, "'tool_choice': expected one of a string or an object, but got an integer"),
    ("text.format.schema", "x", "'text.format.schema': expected an object, but got a string"),
    ("reasoning.effort", 5, "'reasoning.effort': expected a string, but got an integer"),
    ("temperature", "0.5", "'temperature': expected a number, but got a string"),
    ("max_output_tokens", 1.5, "'max_output_tokens': expected an integer, but got a number"),
])  # fmt: skip
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it_as_openai_does(field: str, value: Any, says: str) -> None:
    out = T.request(mutated(RESPONSES, field, value), TARGET)
    assert isinstance(out, Refusal) and out.code == "invalid_type" and says in out.message, out


# -- Anthropic's signed thinking through a Responses client (thinking.py) ---------------------

SIGNED = {"type": "thinking", "thinking": "Paris first.", "signature": "EqQBCkYIBxgCKkA"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgB"}
ONWARD = Target("claude-sonnet-4-5", onward="messages")


def signed_answer() -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": None, "reasoning_content": "Paris first.",
            "thinking_blocks": [SIGNED, REDACTED],
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}}]}  # fmt: skip


def replayed(output: list[dict[str, Any]], target: Target = ONWARD) -> dict[str, Any]:
    payload = {"model": "m", "tools": WEATHER_TOOLS, "reasoning": {"effort": "high"}, "input": [
        {"role": "user", "content": "Weather in Paris?"}, *output,
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"}]}  # fmt: skip
    out = T.request(payload, target)
    assert not isinstance(out, Refusal), out
    return out


def test_signed_thinking_is_sealed_in_encrypted_content_and_comes_back_as_thinking_blocks() -> None:
    output = T.answer(signed_answer(), ctx())["output"]
    reasoning = output[0]
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"].startswith("llm-gateway.thinking.v1:")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Paris first."}]
    Response.model_validate({**T.answer(signed_answer(), ctx())})  # the openai SDK's own type takes it
    sent = replayed(output)["messages"][1]
    assert sent["thinking_blocks"] == [SIGNED, REDACTED] and sent["tool_calls"][0]["id"] == "call_1"


def test_a_seal_names_the_claude_model_that_made_it_and_goes_back_to_that_model_only() -> None:
    """Codex switching models (``/model``) on a route mapping each to another Claude model: the
    thinking of one went to the other, which Anthropic refuses ("blocks generated by a different
    model", anthropic-sdk-python#1598), a refused call and a resend on every switch."""
    made = ctx()
    made.upstream_model = "claude-opus-4-5"
    output = T.answer(signed_answer(), made)["output"]
    on_opus = replayed(output, Target("claude-opus-4-5", onward="messages"))["messages"][1]
    assert on_opus["thinking_blocks"] == [SIGNED, REDACTED]
    on_sonnet = replayed(output, Target("claude-sonnet-4-5", onward="messages"))["messages"][1]
    assert "thinking_blocks" not in on_sonnet and on_sonnet["tool_calls"][0]["id"] == "call_1"
    streamed = ctx({"model": "m", "input": "hi", "tools": WEATHER_TOOLS})
    streamed.upstream_model = "claude-opus-4-5"
    body = run_stream([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "Paris first."}),
                       chunk({"thinking_blocks": [{"index": 0, **SIGNED}]}),
                       chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {
                           "name": "get_weather", "arguments": "{}"}}]}), chunk({}, "tool_calls"), DONE], streamed)  # fmt: skip
    output = named_events(body)[-1][1]["response"]["output"]
    assert "thinking_blocks" not in replayed(output, Target("claude-sonnet-4-5", onward="messages"))["messages"][1]
    assert replayed(output, Target("claude-opus-4-5", onward="messages"))["messages"][1]["thinking_blocks"] == [SIGNED]


def test_sealed_thinking_goes_only_to_a_request_bound_for_messages() -> None:
    output = T.answer(signed_answer(), ctx())["output"]
    assert "thinking_blocks" not in replayed(output, TARGET)["messages"][1]  # a chat server: dropped


def test_openai_encrypted_content_is_never_read_as_the_gateways() -> None:
    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAAABo-openai-fernet=="}
    call = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
    assert "thinking_blocks" not in replayed([item, call])["messages"][1]
    bad = {**item, "encrypted_content": "llm-gateway.thinking.v1:!!not base64"}
    assert "thinking_blocks" not in replayed([bad, call])["messages"][1]


def test_streamed_signed_thinking_is_sealed_in_the_reasoning_item() -> None:
    raws = [
        chunk({"role": "assistant", "content": ""}),
        chunk({"reasoning_content": "Paris "}),
        chunk({"reasoning_content": "first."}),
        chunk({"thinking_blocks": [{"index": 0, **SIGNED}]}),
        chunk({"thinking_blocks": [{"index": 1, **REDACTED}]}),
        chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                               "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]}),
        chunk({}, "tool_calls"),
        DONE,
    ]
    body = run_stream(raws, ctx({"model": "m", "input": "hi", "tools": WEATHER_TOOLS}))
    events = named_events(body)
    done = [e["item"] for n, e in events if n == "response.output_item.done"]
    assert [i["type"] for i in done] == ["reasoning", "function_call"]
    output = events[-1][1]["response"]["output"]
    assert output[0] == done[0] and replayed(output)["messages"][1]["thinking_blocks"] == [SIGNED, REDACTED]


@pytest.mark.parametrize(("onward", "api"), [("", "chat completions"), ("messages", "Anthropic Messages"),
                                             ("gemini", "the Gemini API")])  # fmt: skip
def test_a_stored_conversation_is_refused_naming_the_api_the_upstream_speaks(onward: str, api: str) -> None:
    for payload in ({"previous_response_id": "resp_1", "input": "go on"}, {"background": True, "input": "x"}):
        out = T.request({"model": "m", **payload}, Target("served-model", onward=onward))
        assert isinstance(out, Refusal) and f"this upstream speaks {api}," in out.message


def test_an_image_anthropic_cannot_read_is_refused_at_its_place_in_the_input() -> None:
    """Anthropic reads jpeg, png, gif and webp; the refusal names the Responses item, not the
    chat message it would have become."""
    heic = {"type": "input_image", "image_url": "data:image/heic;base64,AAAAGGZ0eXBoZWlj"}
    onward = Target("served-model", onward="messages")
    payload = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "see"}, heic]}]}
    out = T.request(payload, onward)
    assert isinstance(out, Refusal) and out.message.startswith("input[0].content[1]: image type image/heic ")
    tool = {"model": "m", "input": [{"role": "user", "content": "look"},
                                    {"type": "function_call", "call_id": "c", "name": "view", "arguments": "{}"},
                                    {"type": "function_call_output", "call_id": "c", "output": [heic]}]}  # fmt: skip
    out = T.request(tool, onward)
    assert isinstance(out, Refusal) and out.message.startswith("input[2].output[0]: image type image/heic ")
    assert not isinstance(T.request(payload, TARGET), Refusal)  # a chat server may read it
    jpg = {**heic, "image_url": "data:image/jpg;base64,/9j/4AAQ"}
    assert not isinstance(T.request({"model": "m", "input": [{"role": "user", "content": [jpg]}]}, onward), Refusal)


ON_MESSAGES = default_translations().table["responses", "messages"]
CLAUDE = Target("claude-sonnet-4-5")


def asked(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "read"}, *parts]}]}


def on_claude(payload: dict[str, Any]) -> dict[str, Any]:
    out = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(out, Refusal), out
    assert messages_rules.refusal("/v1/messages", out, {}) is None
    return out


def test_a_text_input_file_reaches_claude_as_a_plain_text_document() -> None:
    """Anthropic's document block takes plain text (the SDK's PlainTextSource); it was refused
    naming chat's ``messages[0]`` ("only a PDF as file_data ... not a file id")."""
    data = base64.b64encode(b"line one\nline two").decode()
    out = on_claude(asked({"type": "input_file", "filename": "notes.txt", "file_data": f"data:text/plain;base64,{data}"}))
    assert out["messages"][0]["content"][1] == {
        "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "line one\nline two"}}


def test_an_input_file_by_url_reaches_claude_as_a_url_document() -> None:
    """Anthropic fetches a PDF by its URL (URLPDFSource); it was refused ("cannot be fetched for
    this upstream"). A Gemini upstream still cannot fetch it (``test_chat_gemini``)."""
    out = on_claude(asked({"type": "input_file", "file_url": "https://example.com/report.pdf"}))
    assert out["messages"][0]["content"][1] == {
        "type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}}


@pytest.mark.parametrize(("part", "says"), [
    ({"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEsDBA=="}, "application/zip"),
    ({"type": "input_file", "file_id": "file-abc"}, "file_id"),
])  # fmt: skip
def test_an_input_file_claude_cannot_read_is_refused_at_its_place_in_the_input(part: dict[str, Any], says: str) -> None:
    out = ON_MESSAGES.request(asked(part), CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith("input[0].content[1]: "), out
    assert says in out.message and "messages[" not in out.message


def png_of(size: int) -> str:
    head = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").decode()
    return "data:image/png;base64," + head + "A" * (size - len(head))


def test_an_image_over_5_mb_is_refused_at_its_place_when_asked_about_now_and_a_note_in_history() -> None:
    """Anthropic refuses an image over 5 MB of base64 ("image exceeds 5 MB maximum", lobehub
    #14711). Sent now, the client hears so, naming its own field; kept in the history (a
    screenshot a tool returned earlier), it would fail every later turn: the model gets a note."""
    big = {"type": "input_image", "image_url": png_of(5 * 1024 * 1024 + 1)}
    look = {"type": "function_call", "call_id": "c1", "name": "view", "arguments": "{}"}
    now = {"model": "m", "input": [{"role": "user", "content": "look"}, look,
                                   {"type": "function_call_output", "call_id": "c1", "output": [big]}]}  # fmt: skip
    out = ON_MESSAGES.request(now, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith("input[2].output[0]: the image is 5,242,881 bytes"), out
    later = {**now, "input": [*now["input"], {"role": "assistant", "content": "A login page."},
                              {"role": "user", "content": "thanks"}]}  # fmt: skip
    sent = json.dumps(on_claude(later)["messages"])
    assert "left out: its 5,242,881 bytes of base64 are over the 5 MB" in sent and '"type": "image"' not in sent


def test_an_image_over_anthropics_pixel_limits_is_refused_at_its_place_and_a_note_in_history() -> None:
    """Over 8000 pixels a side, or 2000 in a request of more than 20 images, Anthropic refuses an
    image ("At least one of the image dimensions exceed max allowed size[ for many-image
    requests]: 8000 [2000] pixels", claude-code #5147, #49537). Codex's ``view_image`` output
    named at its own field; a screenshot kept in the history becomes a note."""
    def shot(width: int) -> dict[str, Any]:
        return {"type": "input_image", "image_url": images.data_url("image/png", images.png(width, 2))}

    look = {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"}
    now = {"model": "m", "input": [{"role": "user", "content": "look"}, look,
                                   {"type": "function_call_output", "call_id": "c1", "output": [shot(8001)]}]}  # fmt: skip
    out = ON_MESSAGES.request(now, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith("input[2].output[0]: the image is 8001x2 pixels, "
                                                               "over the 8,000 pixels a side Anthropic takes,"), out
    many = {"model": "m", "input": [{"role": "user", "content": [shot(100)] * 20 + [shot(2001)]}]}
    out = ON_MESSAGES.request(many, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith(
        "input[0].content[20]: the image is 2001x2 pixels, over the 2,000 pixels a side Anthropic takes in a "
        "request of more than 20 images"), out
    later = {**now, "input": [*now["input"], {"role": "assistant", "content": "A page."},
                              {"role": "user", "content": "thanks"}]}  # fmt: skip
    sent = on_claude(later)
    assert "left out: its 8001x2 pixels are over the 8,000 a side" in json.dumps(sent["messages"])
    assert messages_rules.refusal("/v1/messages", sent, {}) is None


def test_codexs_21st_screenshot_goes_to_claude_with_only_the_oldest_left_out() -> None:
    """Codex's ``view_image`` of a Retina screen (2880x1800), 21 times in a session: the 21st
    was refused for the 2000 pixels of a request of more than 20 images, counted with the 20
    earlier ones that chat_messages then made notes. The oldest is left out, 20 go (review)."""
    shot = {"type": "input_image", "image_url": images.data_url("image/png", images.png(2880, 1800))}
    session: list[dict[str, Any]] = [{"role": "user", "content": "check the page after each change"}]
    for k in range(21):
        session += [{"type": "function_call", "call_id": f"c{k}", "name": "view_image", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": f"c{k}", "output": [shot]}]  # fmt: skip
    sent = on_claude({"model": "m", "input": session})
    blocks = [b for m in sent["messages"] for b in m["content"] if isinstance(m["content"], list)]
    assert sum(b["type"] == "image" for b in blocks) == 20
    notes = [b["text"] for b in blocks if b["type"] == "text" and b["text"].startswith("[image")]
    assert notes == ["[image (image/png) left out: its 2880x1800 pixels are over the 2,000 a side Anthropic takes "
                     "in a request of more than 20 images]"]
    assert '"text": "[image' in json.dumps(sent["messages"][2])  # the oldest, after the first call


def test_an_image_goes_to_claude_as_the_type_its_bytes_are() -> None:
    """JPEG bytes sent as ``image/png``: "Image does not match the provided media type image/png"
    (claude-code #15746)."""
    jpeg = base64.b64encode(bytes.fromhex("ffd8ffe000104a464946")).decode()
    out = on_claude(asked({"type": "input_image", "image_url": f"data:image/png;base64,{jpeg}"}))
    assert out["messages"][0]["content"][1]["source"] == {"type": "base64", "media_type": "image/jpeg", "data": jpeg}


NOTIFY = ["Script completed\nWall time 0.2 seconds\nOutput:\n{\"chunk_id\":\"07fb5c\",\"wall_time_seconds\":0.000005278,"
          "\"exit_code\":0,\"original_token_count\":1,\"output\":\"hi\\n\"}", "step two done", "step one done"]


def test_codexs_notify_outputs_of_one_call_are_one_result_on_claude_and_on_chat() -> None:
    """Codex 0.171's code mode sends a script's output and each ``notify()`` it made as
    ``custom_tool_call_output`` items of one call_id (corpus codex-0.171-lite-notify-result,
    captured). Carried apart they were three results for one call, which Anthropic refuses
    ("each tool_use must have a single result"), and Codex resent them every turn (audit). On
    to Claude they are one result's blocks, in Codex's order; on to chat one tool message,
    as OpenAI refuses a tool_call_id twice."""
    request = codex_request("codex-0.171-lite-notify-result")
    outputs = [i for i in request["input"] if i["type"] == "custom_tool_call_output"]
    assert len(outputs) == 3 and len({o["call_id"] for o in outputs}) == 1
    sent = on_claude(request)
    [result] = [b for m in sent["messages"] if m["role"] == "user" for b in m["content"]
                if b["type"] == "tool_result"]  # fmt: skip
    assert result["content"] == [{"type": "text", "text": t} for t in NOTIFY]
    out = chat(request)
    [tool] = [m for m in out["messages"] if m["role"] == "tool"]
    assert tool["content"] == "\n\n".join(NOTIFY)
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    # An output after an image-bearing one still joins its call's message, the images after the run.
    shot = {"type": "input_image", "image_url": images.data_url("image/png", images.png(2, 2))}
    seen = {**request, "input": [*request["input"][:-2],
                                 {**outputs[0], "output": [shot]}, outputs[1]]}  # fmt: skip
    out = chat(seen)
    tools = [m for m in out["messages"] if m["role"] == "tool"]
    assert len(tools) == 1 and tools[0]["content"].endswith("\n\nstep two done")
    assert out["messages"][-1]["role"] == "user" and out["messages"][-1]["content"][0]["type"] == "image_url"


def test_two_calls_under_one_call_id_get_a_tool_message_each_before_any_folding() -> None:
    """A chat upstream that repeats an id in one turn gives two calls one ``call_id``, and Codex
    sends both back with an output each (here Codex's notify request, its call made twice). Folded
    into one tool message, the chat upstream refused the turn ("...tool_call_ids did not have
    response messages: call_capture1", review): each call keeps its own message, in order, and
    only an output past them is folded, into the last one."""
    request = codex_request("codex-0.171-lite-notify-result")
    call = next(i for i in request["input"] if i["type"] == "custom_tool_call")
    outputs = [i for i in request["input"] if i["type"] == "custom_tool_call_output"]
    head = request["input"][: request["input"].index(call)]
    twice = {**request, "input": [*head, call, call, *outputs[:2]]}
    out = chat(twice)
    assert [m["content"] for m in out["messages"] if m["role"] == "tool"] == NOTIFY[:2]
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    out = chat({**twice, "input": [*head, call, call, *outputs]})
    assert [m["content"] for m in out["messages"] if m["role"] == "tool"] == [NOTIFY[0], "\n\n".join(NOTIFY[1:])]
    assert chat_rules.refusal("/v1/chat/completions", out) is None
