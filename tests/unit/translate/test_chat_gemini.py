"""Chat completions → Gemini (``translate/chat_gemini``): the request from tables, answers and
streams from the Gemini API's own bodies (tests/corpus/answers/gemini-*.json, printed by
Google's cookbook against the live API), the thoughtSignature round trip, the refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis import GEMINI
from gateway.apis.base import Ending, EventKind
from gateway.errors import Classification, ErrorType
from gateway.fake import gemini_rules, responses_rules
from gateway.policy.refused_param import refusal_fix
from gateway.sse import EventSplitter
from gateway.translate import default_translations
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.chat_gemini import ChatToGemini, signature
from gateway.translate.chat_gemini.answer import failed_call_text
from tests.unit.translate.messages_helpers import sdk_request
from tests.unit.translate.wrong_types import CHAT, mutated

ANSWERS = Path(__file__).resolve().parents[2] / "corpus" / "answers"
T = ChatToGemini(clock=lambda: 1700000000)
USER = {"role": "user", "content": "hi"}


def answer_file(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((ANSWERS / name).read_text())
    return doc


def req(**fields: Any) -> dict[str, Any]:
    out = T.request({"model": "gemini-2.5-flash", "messages": [USER], **fields}, Target("gemini-2.5-flash"))
    assert not isinstance(out, Refusal), out
    return out


def ctx(request: dict[str, Any] | None = None) -> Context:
    return Context("gpt-4o", request or {"model": "gpt-4o", "messages": [USER]}, "req1")


def test_a_plain_request_and_the_fields_the_url_takes() -> None:
    out = req()
    assert out == {"model": "gemini-2.5-flash", "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    streamed = req(stream=True, stream_options={"include_usage": True})
    assert streamed["stream"] is True and "stream_options" not in streamed
    address = GEMINI.address(streamed)
    assert address is not None and address.path == "/v1/models/gemini-2.5-flash:streamGenerateContent"
    assert "model" not in address.payload and "stream" not in address.payload


@pytest.mark.parametrize(("fields", "config"), [
    ({"temperature": 0.2, "top_p": 0.9, "max_tokens": 100}, {"temperature": 0.2, "topP": 0.9, "maxOutputTokens": 100}),
    ({"max_completion_tokens": 50, "max_tokens": 100}, {"maxOutputTokens": 50}),
    ({"stop": "END"}, {"stopSequences": ["END"]}),
    ({"stop": ["a", "b"], "seed": 7, "top_k": 40}, {"stopSequences": ["a", "b"], "seed": 7, "topK": 40}),
    ({"presence_penalty": 0.5, "frequency_penalty": 0.1}, {"presencePenalty": 0.5, "frequencyPenalty": 0.1}),
    # OpenAI's default 0 left out: Gemini 2.5 refuses any penalty ("Penalty is not enabled for models/...").
    ({"presence_penalty": 0, "frequency_penalty": 0.0, "temperature": 1}, {"temperature": 1}),
    ({"response_format": {"type": "json_object"}}, {"responseMimeType": "application/json"}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}},
     {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}}),
    ({"response_format": {"type": "text"}}, None),
    ({"reasoning_effort": "low"}, {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}),
    ({"reasoning_effort": "high"}, {"thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": True}}),
    # 2.5 Flash can stop: asked to (left out, it thought as it liked; audit s68, opencode).
    ({"reasoning_effort": "none"}, {"thinkingConfig": {"thinkingBudget": 0}}),
    # OpenRouter's include_reasoning: false (and Messages → chat → Gemini for a client that did
    # not ask for thinking): the budget, no thoughts shown.
    ({"reasoning_effort": "medium", "include_reasoning": False}, {"thinkingConfig": {"thinkingBudget": 8192}}),
    ({"reasoning_effort": "low", "include_reasoning": True},
     {"thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True}}),
    ({"user": "u1", "parallel_tool_calls": False, "store": True}, None),  # dropped
])  # fmt: skip
def test_generation_config_from_chat_knobs(fields: dict[str, Any], config: dict[str, Any] | None) -> None:
    assert req(**fields).get("generationConfig") == config


def test_system_messages_become_the_instruction_wherever_they_stand() -> None:
    out = req(messages=[{"role": "system", "content": "Be terse."}, USER,
                        {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]}])  # fmt: skip
    assert out["systemInstruction"] == {"parts": [{"text": "Be terse."}, {"text": "Use tools."}]}
    assert out["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_images_audio_and_pdfs_go_inline() -> None:
    content = [{"type": "text", "text": "what is this"},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
               {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
               {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}]  # fmt: skip
    parts = req(messages=[{"role": "user", "content": content}])["contents"][0]["parts"]
    assert parts == [{"text": "what is this"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                     {"inlineData": {"mimeType": "audio/wav", "data": "UklGRg=="}},
                     {"inlineData": {"mimeType": "application/pdf", "data": "JVBERi0="}}]  # fmt: skip


def test_tools_and_tool_choice() -> None:
    tool = {"type": "function", "function": {"name": "ls", "description": "list", "parameters": {"type": "object"}}}
    out = req(tools=[tool], tool_choice="required")
    assert out["tools"] == [{"functionDeclarations": [
        {"name": "ls", "description": "list", "parametersJsonSchema": {"type": "object"}}]}]  # fmt: skip
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}
    forced = req(tools=[tool], tool_choice={"type": "function", "function": {"name": "ls"}})
    assert forced["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}}
    for choice, mode in (("auto", "AUTO"), ("none", "NONE")):
        assert req(tools=[tool], tool_choice=choice)["toolConfig"]["functionCallingConfig"] == {"mode": mode}
    assert "toolConfig" not in req(tools=[tool]) and "tools" not in req(tool_choice="auto")


def test_a_tool_loop_pairs_calls_and_answers_by_id_and_name() -> None:
    messages = [
        USER,
        {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": '{"dir": "/"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "cat", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "file body"},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "a b"}]},
        {"role": "user", "content": "and?"},
    ]  # fmt: skip
    contents = req(messages=messages)["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    model = contents[1]["parts"]
    assert model[0] == {"text": "Looking."}
    assert model[1] == {"functionCall": {"name": "ls", "args": {"dir": "/"}, "id": "call_1"},
                        "thoughtSignature": signature.SKIP}  # unsigned history: Google's stand-in, first call only
    assert model[2] == {"functionCall": {"name": "cat", "args": {}, "id": "call_2"}}
    assert contents[2]["parts"] == [
        {"functionResponse": {"name": "cat", "response": {"output": "file body"}, "id": "call_2"}},
        {"functionResponse": {"name": "ls", "response": {"output": "a b"}, "id": "call_1"}},
        {"text": "and?"},
    ]


def test_a_thought_signature_survives_the_round_trip_through_a_chat_client() -> None:
    signed = "CiQBjz1rX+/signed==" * 3
    doc = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "ls", "args": {"dir": "/tmp"}, "id": "fc_1"}, "thoughtSignature": signed},
        {"functionCall": {"name": "ls", "args": {"dir": "/var"}, "id": "fc_2"}}]},
        "finishReason": "STOP", "index": 0}]}  # fmt: skip
    message = T.answer(doc, ctx())["choices"][0]["message"]
    first, second = message["tool_calls"]
    assert first["extra_content"] == {"google": {"thought_signature": signed}}
    assert all(c.isalnum() or c in "_-" for c in first["id"])  # an id every API's alphabet takes
    assert second["id"] == "fc_2" and "extra_content" not in second
    # A client that keeps only ids (most rebuild the call): the id alone brings it back.
    bare = [{"id": c["id"], "type": "function", "function": c["function"]} for c in message["tool_calls"]]
    history = [USER, {"role": "assistant", "content": None, "tool_calls": bare},
               {"role": "tool", "tool_call_id": first["id"], "content": "x"},
               {"role": "tool", "tool_call_id": "fc_2", "content": "y"}]  # fmt: skip
    contents = req(messages=history)["contents"]
    assert contents[1]["parts"] == [
        {"functionCall": {"name": "ls", "args": {"dir": "/tmp"}, "id": "fc_1"}, "thoughtSignature": signed},
        {"functionCall": {"name": "ls", "args": {"dir": "/var"}, "id": "fc_2"}},
    ]
    assert [p["functionResponse"]["id"] for p in contents[2]["parts"]] == ["fc_1", "fc_2"]


# Two parallel calls as the thought-signatures guide shows them: the signature on the first only.
PARALLEL = {"candidates": [{"content": {"role": "model", "parts": [
    {"functionCall": {"name": "ls", "args": {"dir": "/tmp"}, "id": "fc_1"}, "thoughtSignature": "c2lnbmVk"},
    {"functionCall": {"name": "ls", "args": {"dir": "/var"}, "id": "fc_2"}}]}, "finishReason": "STOP", "index": 0}]}  # fmt: skip
LS = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}


def test_parallel_tool_calls_false_keeps_the_first_call_buffered_and_streamed() -> None:
    """Gemini has no knob for one call at a time: two calls reached a client that asked for at
    most one (audit s68, the AI SDK's parallelToolCalls: false). The first is kept."""
    one = {"model": "gpt-4o", "messages": [USER], "tools": [LS], "parallel_tool_calls": False}
    message = T.answer(PARALLEL, ctx(one))["choices"][0]
    assert [c["function"]["arguments"] for c in message["message"]["tool_calls"]] == ['{"dir": "/tmp"}']
    assert message["finish_reason"] == "tool_calls"
    out = run_stream(f"data: {json.dumps(PARALLEL)}\r\n\r\n".encode(), {**one, "stream": True})
    calls = [t for c in out[:-1] if c["choices"] for t in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [(t["index"], t["function"]["arguments"]) for t in calls] == [(0, '{"dir": "/tmp"}')]
    assert out[-2]["choices"][0]["finish_reason"] == "tool_calls"
    # Not asked: both, as before.
    assert len(T.answer(PARALLEL, ctx({**one, "parallel_tool_calls": True}))["choices"][0]["message"]["tool_calls"]) == 2


def test_a_messages_client_that_disables_parallel_tool_use_gets_one_call_from_gemini() -> None:
    """Messages' ``disable_parallel_tool_use`` goes through chat as ``parallel_tool_calls: false``."""
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "ls"}],
            "tools": [{"name": "ls", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto", "disable_parallel_tool_use": True}}  # fmt: skip
    through = default_translations().table["messages", "gemini"]
    out = through.answer(PARALLEL, Context("claude-sonnet-4-5", body, "req1"))
    assert [b["input"] for b in out["content"] if b["type"] == "tool_use"] == [{"dir": "/tmp"}]


def test_the_turn_after_one_kept_call_is_one_gemini_takes() -> None:
    """The client answers the one call it got: the model turn goes back with that call and its
    signature, one response for one call. Had both reached it and it answered the first only
    (a client that runs one call a time), Gemini refuses the turn."""
    one = {"model": "gpt-4o", "messages": [USER], "tools": [LS], "parallel_tool_calls": False}
    call = T.answer(PARALLEL, ctx(one))["choices"][0]["message"]["tool_calls"][0]
    history = [USER, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": "a b"}]  # fmt: skip
    sent = req(messages=history, tools=[LS], parallel_tool_calls=False)
    assert sent["contents"][1]["parts"] == [
        {"functionCall": {"name": "ls", "args": {"dir": "/tmp"}, "id": "fc_1"}, "thoughtSignature": "c2lnbmVk"}]
    wire = {k: v for k, v in sent.items() if k not in ("model", "stream")}
    assert gemini_rules.refusal(wire, model="gemini-2.5-flash") is None
    both = T.answer(PARALLEL, ctx({**one, "parallel_tool_calls": True}))["choices"][0]["message"]["tool_calls"]
    half = [USER, {"role": "assistant", "content": None, "tool_calls": both},
            {"role": "tool", "tool_call_id": both[0]["id"], "content": "a b"}, {"role": "user", "content": "go on"}]  # fmt: skip
    refused = req(messages=half, tools=[LS])
    assert gemini_rules.refusal({k: v for k, v in refused.items() if k != "model"}, model="gemini-2.5-flash")


@pytest.mark.parametrize(("fields", "words"), [
    ({"n": 2}, "'n' > 1"),
    ({"logprobs": True}, "logprobs"),
    ({"modalities": ["text", "audio"]}, "audio"),
    ({"functions": [{"name": "f"}]}, "legacy"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "only function tools"),
    ({"response_format": {"type": "grammar"}}, "response_format"),
    ({"reasoning_effort": "max"}, "reasoning_effort"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]},
     "base64 data URL"),
    ({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}, "answers no tool call"),
])  # fmt: skip
def test_what_cannot_be_carried_is_refused(fields: dict[str, Any], words: str) -> None:
    out = T.request({"model": "g", "messages": [USER], **fields}, Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal) and words in out.message, out
    assert isinstance(T.request({"messages": [USER]}, Target("tunedModels/x")), Refusal)


@pytest.mark.parametrize("arguments", ['{"command": "echo hi", ', "{not json", "[1, 2]", '"text"'])
def test_a_call_whose_arguments_are_no_json_object_goes_with_its_text(arguments: str) -> None:
    """A call cut short by max_tokens is replayed by the agent every turn: refused, its session
    could never go on (openai-agents-python #2061). Gemini does not hold a past call's args to
    its tool's schema."""
    messages = [USER, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "c", "content": "the arguments are not valid JSON"}]  # fmt: skip
    call = req(messages=messages)["contents"][1]["parts"][0]["functionCall"]
    assert call["args"] == {"unparsed_arguments": arguments}


def test_a_buffered_function_call_answer_from_the_live_api() -> None:
    doc = answer_file("gemini-pro-function-call.json")["body"]
    out = T.answer(doc, ctx())
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"  # Gemini ends a calling turn with STOP
    [call] = choice["message"]["tool_calls"]
    assert call["id"] == "call_req1_0" and call["type"] == "function"  # this model gives no call id
    assert call["function"]["name"] == "find_theaters"
    assert json.loads(call["function"]["arguments"]) == {"movie": "Barbie", "location": "Mountain View, CA"}
    assert choice["message"]["content"] is None
    assert out["object"] == "chat.completion" and out["model"] == "gpt-4o" and out["created"] == 1700000000


def test_a_buffered_text_answer_and_its_usage_from_the_live_api() -> None:
    doc = answer_file("gemini-text-usage.json")["body"]
    out = T.answer(doc, ctx())
    assert out["choices"][0]["message"]["content"].startswith("```python")
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["prompt_tokens"] == 9 and out["usage"]["completion_tokens"] == 87
    assert out["usage"]["total_tokens"] == 96


@pytest.mark.parametrize(("usage", "chat"), [
    # UsageMetadata (Gemini API reference): the prompt includes the cached part; thoughts apart.
    ({"promptTokenCount": 900, "cachedContentTokenCount": 512, "candidatesTokenCount": 12,
      "thoughtsTokenCount": 30, "totalTokenCount": 942},
     {"prompt_tokens": 900, "completion_tokens": 42, "total_tokens": 942,
      "prompt_tokens_details": {"cached_tokens": 512}, "completion_tokens_details": {"reasoning_tokens": 30}}),
    (None, {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0,
            "prompt_tokens_details": {"cached_tokens": 0}, "completion_tokens_details": {"reasoning_tokens": 0}}),
])  # fmt: skip
def test_usage_metadata_as_chat_usage(usage: Any, chat: dict[str, Any]) -> None:
    doc = {"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": "STOP"}]}
    if usage is not None:
        doc["usageMetadata"] = usage
    assert T.answer(doc, ctx())["usage"] == chat


@pytest.mark.parametrize(("reason", "finish"), [
    ("STOP", "stop"), ("MAX_TOKENS", "length"), ("SAFETY", "content_filter"), ("RECITATION", "content_filter"),
    ("PROHIBITED_CONTENT", "content_filter"), ("MALFORMED_FUNCTION_CALL", "stop"), ("OTHER", "stop"),
])  # fmt: skip
def test_finish_reasons(reason: str, finish: str) -> None:
    doc = {"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}]}
    assert T.answer(doc, ctx())["choices"][0]["finish_reason"] == finish


def test_thoughts_are_reasoning_content() -> None:
    doc = {"candidates": [{"content": {"role": "model", "parts": [
        {"text": "Let me think.", "thought": True}, {"text": "Four."}]}, "finishReason": "STOP"}]}  # fmt: skip
    message = T.answer(doc, ctx())["choices"][0]["message"]
    assert message["reasoning_content"] == "Let me think." and message["content"] == "Four."


def chunks(body: bytes) -> list[Any]:
    out = []
    for line in body.decode().split("\n"):
        if line.startswith("data: "):
            out.append(line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]))
    return out


def run_stream(raw: bytes, request: dict[str, Any]) -> list[Any]:
    stream = T.stream(ctx(request))
    body = b"".join(stream.event(e) for e in EventSplitter().feed(raw)) + stream.close()
    return chunks(body)


def test_the_live_apis_stream_as_chat_chunks() -> None:
    raw = answer_file("gemini-pro-text.stream.json")["body"].encode()
    request = {"model": "gpt-4o", "messages": [USER], "stream": True, "stream_options": {"include_usage": True}}
    out = run_stream(raw, request)
    assert out[-1] == "[DONE]"
    assert out[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in out[:-1] if c["choices"])
    assert text.startswith("In the quaint, sunlit cottage") and text.endswith("stronger than ever.")
    finishes = [c["choices"][0]["finish_reason"] for c in out[:-1] if c["choices"]]
    assert finishes[-1] == "stop" and not any(finishes[:-1])  # one finish, though every event said STOP
    assert out[-2]["choices"] == [] and "usage" in out[-2]
    assert len({c["id"] for c in out[:-1]}) == 1


def test_a_streamed_call_is_one_whole_tool_call_delta_with_its_signature() -> None:
    events = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Sure.", "thought": True}]}}],
         "responseId": "r1"},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "ls", "args": {"dir": "/"}, "id": "fc_1"}, "thoughtSignature": "c2ln"}]},
            "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "thoughtsTokenCount": 3}},
    ]  # fmt: skip
    raw = b"".join(b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events)
    out = run_stream(raw, {"model": "gpt-4o", "messages": [USER], "stream": True})
    deltas = [c["choices"][0]["delta"] for c in out[:-1]]
    assert deltas[1] == {"reasoning_content": "Sure."}
    [call] = deltas[2]["tool_calls"]
    assert call["index"] == 0 and call["function"] == {"name": "ls", "arguments": '{"dir": "/"}'}
    assert signature.split(call["id"]) == ("fc_1", "c2ln")
    assert out[-2]["choices"][0]["finish_reason"] == "tool_calls" and out[0]["id"] == "chatcmpl-r1"
    assert not any("usage" in c for c in out[:-1])  # the client did not ask for the usage chunk


def test_a_broken_stream_ends_with_the_chat_error_chunk_never_done() -> None:
    stream = T.stream(ctx({"model": "gpt-4o", "messages": [USER], "stream": True}))
    stream.event(b'data: {"candidates": [{"content": {"parts": [{"text": "Hel"}], "role": "model"}}]}\r\n\r\n')
    end = stream.broken(Ending(Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "cut", "stream_broken"))
    assert b"[DONE]" not in end and b'"finish_reason":"error"' in end.replace(b" ", b"")
    assert stream.close() == b""


@pytest.mark.parametrize("client", ["messages", "responses"])
def test_messages_and_responses_clients_reach_gemini_through_chat(client: str) -> None:
    table = default_translations().table
    composed = table[client, "gemini"]
    assert composed.client == client and composed.upstream == "gemini"


def test_function_names_gemini_refuses_go_as_valid_ones_and_come_back_as_declared() -> None:
    """Gemini: "Invalid function name. Must start with a letter or an underscore. Must be
    alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a
    maximum length of 64" (gemini-cli #7869); Claude Code's MCP tools run past 64."""
    long = "mcp__" + "x" * 100
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
             for n in (long, "1st-tool", "ls", "files.read")]  # fmt: skip
    call = {"id": "call_1", "type": "function", "function": {"name": long, "arguments": "{}"}}
    out = req(tools=tools, tool_choice={"type": "function", "function": {"name": "1st-tool"}}, messages=[
        USER, {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "done"}])  # fmt: skip
    sent = [d["name"] for d in out["tools"][0]["functionDeclarations"]]
    assert sent[2:] == ["ls", "files.read"]  # valid on Gemini: as they are
    for name in sent[:2]:
        assert len(name) <= 64 and (name[0].isalpha() or name[0] == "_") and name not in (long, "1st-tool")
    assert out["toolConfig"]["functionCallingConfig"] == {"mode": "ANY", "allowedFunctionNames": [sent[1]]}
    parts = [p for c in out["contents"] for p in c["parts"]]
    assert parts[1]["functionCall"]["name"] == sent[0] and parts[2]["functionResponse"]["name"] == sent[0]
    request = {"model": "gpt-4o", "messages": [USER], "tools": tools}
    held = T.held(ctx(request))
    answer = {"candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": sent[0], "args": {}}}, {"functionCall": {"name": "ls", "args": {}}}]},
        "finishReason": "STOP"}]}  # fmt: skip
    calls = T.answer(answer, held)["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["name"] for c in calls] == [long, "ls"]
    raw = b"data: " + json.dumps(answer).encode() + b"\r\n\r\n"
    streamed = run_stream(raw, {**request, "stream": True})
    assert streamed[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == long


def test_allowed_tools_on_auto_show_the_model_only_those_as_google_takes_names_only_with_any() -> None:
    tools = [{"type": "function", "function": {"name": n}} for n in ("a", "b", "c")]
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": [
        {"type": "function", "function": {"name": "b"}}]}}  # fmt: skip
    out = req(tools=tools, tool_choice=choice)
    assert [d["name"] for d in out["tools"][0]["functionDeclarations"]] == ["b"]
    assert out["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    required = {"type": "allowed_tools", "allowed_tools": {**choice["allowed_tools"], "mode": "required"}}
    assert req(tools=tools, tool_choice=required)["toolConfig"] == {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["b"]}}  # fmt: skip


def test_an_empty_conversation_is_refused_before_any_call() -> None:
    # Google: "GenerateContentRequest.contents: contents is not specified".
    for messages in ([{"role": "system", "content": "Say hi"}], [{"role": "user", "content": ""}]):
        out = T.request({"model": "m", "messages": messages}, Target("gemini-2.5-flash"))
        assert isinstance(out, Refusal) and "no content" in out.message


def test_images_google_refuses_by_type_are_named_not_sent_and_jpg_is_jpeg() -> None:
    def image(mime: str) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:{mime};base64,AAAA"}}]}

    assert req(messages=[image("image/jpg")])["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}]  # fmt: skip
    [part] = req(messages=[image("image/gif")])["contents"][0]["parts"]
    assert "inlineData" not in part and "image/gif" in part["text"]


def test_at_most_five_stop_sequences_as_google_takes() -> None:
    # "the number of stop_sequences must not exceed 5"
    assert req(stop=list("abcdef"))["generationConfig"]["stopSequences"] == list("abcde")


def test_a_blocked_prompt_streamed_ends_the_stream_as_a_content_filter() -> None:
    """Google streams a blocked prompt as one event without a candidate; it ended nothing, so
    the stream read as broken: retried six times, then a retryable 502."""
    event = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
             "usageMetadata": {"promptTokenCount": 8, "totalTokenCount": 8}}  # fmt: skip
    raw = b"data: " + json.dumps(event).encode() + b"\r\n\r\n"
    assert GEMINI.reader(False).kind(raw, committed=False) is EventKind.FINAL
    out = run_stream(raw, {"model": "gpt-4o", "messages": [USER], "stream": True})
    assert out[-2]["choices"][0]["finish_reason"] == "content_filter" and out[-1] == "[DONE]"
    # A first event with feedback but no block (and no candidate yet) ends nothing.
    calm = b"data: " + json.dumps({"promptFeedback": {"safetyRatings": []}}).encode() + b"\r\n\r\n"
    assert GEMINI.reader(False).kind(calm, committed=False) is not EventKind.FINAL


@pytest.mark.parametrize("reason", ["MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"])
def test_a_turn_that_failed_to_call_a_function_says_so_instead_of_ending_empty(reason: str) -> None:
    """Gemini ends such a turn with no content (pydantic-ai #631 shows the candidate); an empty
    "stop" ended Claude Code's and Codex's turns in silence."""
    doc = {"candidates": [{"finishReason": reason, "index": 0}], "usageMetadata": {"promptTokenCount": 9}}
    message = T.answer(doc, ctx())["choices"][0]["message"]
    assert reason in message["content"] and "ask again" in message["content"]
    raw = b"data: " + json.dumps(doc).encode() + b"\r\n\r\n"
    out = run_stream(raw, {"model": "gpt-4o", "messages": [USER], "stream": True})
    assert reason in "".join(c["choices"][0]["delta"].get("content", "") for c in out[:-1] if c["choices"])


@pytest.mark.parametrize(("parts", "before"), [
    # Gemini 3's empty text part carrying a thoughtSignature (BerriAI/litellm#17403), on the
    # candidate of pydantic-ai #631: the note was "\n\n[the model's…", which .parse() of a
    # response_format refused; the stream had no separator.
    ([{"text": "", "thoughtSignature": "c2lnbmF0dXJl"}], ""),
    ([{"text": "Let me check."}], "Let me check.\n\n"),
])
def test_the_failed_call_note_is_set_apart_only_from_text_and_alike_buffered_and_streamed(
        parts: list[dict[str, Any]], before: str) -> None:  # fmt: skip
    doc = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "MALFORMED_FUNCTION_CALL",
                           "index": 0}], "usageMetadata": {"promptTokenCount": 9}}  # fmt: skip
    said = T.answer(doc, ctx())["choices"][0]["message"]["content"]
    assert said == before + failed_call_text("MALFORMED_FUNCTION_CALL")
    raw = b"data: " + json.dumps(doc).encode() + b"\r\n\r\n"
    out = run_stream(raw, {"model": "gpt-4o", "messages": [USER], "stream": True})
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in out[:-1] if c["choices"]) == said


# The audit fuzz's crashes on this direction (each a 500 internal_error), one per site, and the
# other fields it reads: a 400 naming the field as OpenAI does. The sweep over every field and
# type is tests/unit/translate/test_wrong_types.py.
@pytest.mark.parametrize(("field", "value", "says"), [
    ("messages.0.content", 5, "Invalid type for 'messages[0].content': expected one of a string or an array, "
                              "but got an integer instead."),
    ("messages.1.content", True, "'messages[1].content': expected one of a string or an array, but got a boolean"),
    ("messages.1.content.0", "hi", "'messages[1].content[0]': expected an object, but got a string"),
    ("messages.1.content.0.text", 5, "'messages[1].content[0].text': expected a string, but got an integer"),
    ("messages.2.tool_calls", 5, "'messages[2].tool_calls': expected an array, but got an integer"),
    ("messages.2.tool_calls.0.function", [5], "'messages[2].tool_calls[0].function': expected an object"),
    ("messages.3.content", 1.5, "'messages[3].content': expected one of a string or an array, but got a number"),
    ("tools", 5, "'tools': expected an array, but got an integer"),
    ("tools.0.function.parameters", "x", "'tools[0].function.parameters': expected an object, but got a string"),
    ("tool_choice", 5, "'tool_choice': expected one of a string or an object, but got an integer"),
    ("tool_choice.function", "f", "'tool_choice.function': expected an object, but got a string"),
    ("reasoning_effort", [5], "'reasoning_effort': expected a string, but got an array"),
    ("response_format", {"type": "json_schema", "json_schema": "x"},
     "'response_format.json_schema': expected an object, but got a string"),
    ("response_format.json_schema.schema", "x", "'response_format.json_schema.schema': expected an object"),
    ("modalities", 5, "'modalities': expected an array, but got an integer"),
    ("stop", [5], "'stop[0]': expected a string, but got an integer"),
    ("temperature", "0.5", "'temperature': expected a number, but got a string"),
    ("max_tokens", True, "'max_tokens': expected an integer, but got a boolean"),
    ("n", 2.0, "'n': expected an integer, but got a number"),
    ("logprobs", "yes", "'logprobs': expected a boolean, but got a string"),
])  # fmt: skip
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it_as_openai_does(field: str, value: Any, says: str) -> None:
    out = T.request(mutated(CHAT, field, value), Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal) and out.code == "invalid_type" and says in out.message, out


def test_the_audits_request_is_refused_without_quoting_the_prompt() -> None:
    out = T.request({"model": "gemini-2.5-flash", "messages": [{"role": "user", "content": 5}]},
                    Target("gemini-2.5-flash"))  # fmt: skip
    assert isinstance(out, Refusal) and out.message == (
        "Invalid type for 'messages[0].content': expected one of a string or an array, but got an integer instead.")
    secret = {"role": "user", "content": {"text": "my card is 4111 1111"}}
    out = T.request({"model": "g", "messages": [secret]}, Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal) and "4111" not in out.message and "'messages[0].content'" in out.message


LS = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}
ANSWER_SCHEMA = {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}
STRUCTURED = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER_SCHEMA}}


def sent_to(model: str, **fields: Any) -> dict[str, Any]:
    """The translated body as Google gets it, held to the fake's rules for ``model``."""
    out = T.request({"model": "m", "messages": [{"role": "system", "content": "Be terse."}, USER], **fields},
                    Target(model))  # fmt: skip
    assert not isinstance(out, Refusal), out
    body = {k: v for k, v in out.items() if k not in ("model", "stream")}
    refused = gemini_rules.refusal(body, model=model.removeprefix("models/"))
    assert refused is None, refused.body
    return out


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite", "gemini-2.0-flash",
                                   "models/gemini-2.5-flash", "my-tuned-model"])
def test_a_schema_beside_tools_goes_as_an_instruction_where_the_model_refuses_both(model: str) -> None:
    """Gemini 2.x refuses JSON mode beside function declarations ("Function calling with a
    response mime type: 'application/json' is unsupported", symfony/ai#1777): Codex's
    --output-schema, the Agents SDK's output_type with tools. The tools stay; the schema is
    asked for in words. A model not known to take both is asked so too."""
    out = sent_to(model, tools=[LS], response_format=STRUCTURED)
    assert out["tools"] == [{"functionDeclarations": [{"name": "ls", "parametersJsonSchema": {"type": "object"}}]}]
    assert "generationConfig" not in out
    first, said = out["systemInstruction"]["parts"]
    assert first == {"text": "Be terse."}
    assert said["text"].startswith("Answer in JSON that matches this JSON Schema: ")
    assert json.loads(said["text"].removeprefix("Answer in JSON that matches this JSON Schema: ")) == ANSWER_SCHEMA
    plain = sent_to(model, tools=[LS], tool_choice="auto", response_format={"type": "json_object"}, temperature=0.2)
    assert plain["systemInstruction"]["parts"][-1] == {"text": "Answer in JSON."}
    assert plain["generationConfig"] == {"temperature": 0.2}


@pytest.mark.parametrize(("model", "fields"), [
    ("gemini-3.1-pro-preview", {"tools": [LS]}),  # Gemini 3 takes both
    ("gemini-3-flash-preview", {"tools": [LS], "tool_choice": "required"}),
    ("gemini-2.5-flash", {}),  # no tools
    ("gemini-2.5-flash", {"tools": [LS], "tool_choice": "none"}),  # function calling off (google/adk-python#5735)
])  # fmt: skip
def test_a_schema_goes_as_gemini_json_mode_where_the_model_takes_it(model: str, fields: dict[str, Any]) -> None:
    out = sent_to(model, response_format=STRUCTURED, **fields)
    assert out["generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": ANSWER_SCHEMA}
    assert out["systemInstruction"] == {"parts": [{"text": "Be terse."}]}


REQUESTS = Path(__file__).resolve().parents[2] / "corpus" / "requests"
AGENTS = {p.name: json.loads(p.read_text()) for p in sorted(REQUESTS.glob("*.json")) if not p.name.startswith("gemini")
          and not p.name.startswith("genai")}  # fmt: skip
_API = {"/v1/chat/completions": "chat", "/v1/messages": "messages", "/v1/responses": "responses"}


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-3.1-pro-preview"])
@pytest.mark.parametrize("name", list(AGENTS))
def test_the_agents_real_requests_reach_gemini_in_a_shape_google_takes(name: str, model: str) -> None:
    """Claude Code's, Codex's, the Agents SDK's, opencode's and the SDKs' own requests (their
    real tool schemas included), translated: held to the fake's rules for the model, after the
    fixes the gateway learns from a refusal (``policy/refused_param.py``)."""
    case = AGENTS[name]
    api = _API[case["path"].split("?")[0]]
    out = default_translations().table[api, "gemini"].request(case["body"], Target(model))
    if isinstance(out, Refusal):
        # n: 2 and logprobs; an image by http URL: refused before any call.
        assert name in ("chat-openai-python-uncarried.json", "chat-openai-python-tools-images.json"), out
        return
    body: dict[str, Any] = {k: v for k, v in out.items() if k not in ("model", "stream")}
    for _ in range(3):  # the gateway's MAX_FIXES
        refused = gemini_rules.refusal(body, model=model)
        if refused is None:
            return
        fix = refusal_fix(refused.body["error"]["message"], json.dumps(refused.body).encode())
        fixed = fix.apply(body) if fix is not None else None
        assert fixed is not None, refused.body
        body = fixed
    raise AssertionError(body)


# An MCP tool's input schema as pydantic writes it: a nested model is a $ref, with the
# field's title, examples and description beside it.
PYDANTIC = {"type": "object", "title": "move_args", "required": ["target"], "$defs": {
    "Target": {"type": "object", "title": "Target", "properties": {"x": {"type": "integer", "title": "X"}}}},
    "properties": {
        "target": {"$ref": "#/$defs/Target", "title": "Target object", "examples": [{"x": 1}]},
        "backup": {"anyOf": [{"$ref": "#/$defs/Target", "description": "Where to go back", "title": "B",
                              "default": None, "$comment": "kept"}, {"type": "null"}]},
        "many": {"type": "array", "items": {"$ref": "#/$defs/Target", "type": "object"}},
        "by_name": {"type": "object", "additionalProperties": {"$ref": "#/$defs/Target", "title": 7}},
        "$ref": {"type": "string", "title": "a property named $ref"}}}  # fmt: skip
CLEAN = {**PYDANTIC, "properties": {
    "target": {"$ref": "#/$defs/Target", "description": "Target object"},
    "backup": {"anyOf": [{"$ref": "#/$defs/Target", "description": "Where to go back", "default": None,
                          "$comment": "kept"}, {"type": "null"}]},
    "many": {"type": "array", "items": {"$ref": "#/$defs/Target"}},
    "by_name": {"type": "object", "additionalProperties": {"$ref": "#/$defs/Target"}},
    "$ref": {"type": "string", "title": "a property named $ref"}}}  # fmt: skip


@pytest.mark.parametrize("model", ["gemini-2.5-flash", "gemini-3.1-pro-preview"])
def test_a_ref_keeps_only_what_google_takes_beside_it_in_tool_and_response_schemas(model: str) -> None:
    """Gemini refuses a $ref beside other fields ("$ref 'QuestionOption' was set alongside
    unsupported fields. If a schema node has $ref set, then only description and default can be
    set alongside it", anomalyco/opencode#12295): the node keeps $ref, "$" fields, description
    and default; a title goes into a missing description. What has no $ref is left as it is."""
    tool = {"type": "function", "function": {"name": "move", "parameters": PYDANTIC}}
    out = sent_to(model, tools=[tool])
    assert out["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == CLEAN
    fmt = {"type": "json_schema", "json_schema": {"name": "move", "schema": PYDANTIC}}
    assert sent_to(model, response_format=fmt)["generationConfig"]["responseJsonSchema"] == CLEAN
    assert PYDANTIC["properties"]["target"]["title"] == "Target object"  # the client's request is not changed
    plain = {"type": "function", "function": {"name": "ls", "parameters": CLEAN["$defs"]["Target"]}}
    assert sent_to(model, tools=[plain])["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] is (
        CLEAN["$defs"]["Target"])  # nothing to change: not copied


PDF = "JVBERi0xLjQK"


def test_a_claude_clients_pdf_reaches_gemini_inline_and_a_chat_upstream_still_gets_the_note() -> None:
    """Gemini reads PDFs as inlineData; it got "[document (application/pdf) left out: this
    model cannot read it]" on the way through chat, as a chat server does."""
    doc = {"type": "document", "title": "report", "source": {"type": "base64", "media_type": "application/pdf",
                                                            "data": PDF}}  # fmt: skip
    asked = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": [
        doc, {"type": "text", "text": "Summarise."}]}]}  # fmt: skip
    out = default_translations().table["messages", "gemini"].request(asked, Target("gemini-2.5-flash"))
    assert not isinstance(out, Refusal), out
    assert out["contents"] == [{"role": "user", "parts": [{"inlineData": {"mimeType": "application/pdf", "data": PDF}},
                                                          {"text": "Summarise."}]}]  # fmt: skip
    chat = default_translations().table["messages", "chat"].request(asked, Target("m"))
    assert not isinstance(chat, Refusal) and "[document 'report' (application/pdf) left out" in json.dumps(chat)


def test_a_claude_clients_image_by_url_is_refused_for_gemini_where_the_client_put_it() -> None:
    """The anthropic SDK's request with a system prompt: chat's messages[0] is that prompt, so the
    refusal named messages[1] for the client's messages[0], and an image in a tool result was
    named by the user message it is moved to."""
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}
    asked = sdk_request(system="Be brief.", messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is it?"}, image]}])  # fmt: skip
    out = default_translations().table["messages", "gemini"].request(asked, Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal)
    assert out.message == ("messages[0].content[1]: an image given by URL cannot be sent to a Gemini API upstream, "
                           "which does not fetch it: send it as base64 data")  # fmt: skip
    call = {"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}
    asked = sdk_request(system="Be brief.", messages=[{"role": "user", "content": "Look."},
                                                      {"role": "assistant", "content": [call]},
                                                      {"role": "user", "content": [result]}])  # fmt: skip
    out = default_translations().table["messages", "gemini"].request(asked, Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal) and out.message.startswith("messages[2].content[0].content[0]: an image given")
    on_responses = default_translations().table["messages", "responses"].request(asked, Target("gpt-5"))
    assert not isinstance(on_responses, Refusal)  # Responses fetches it
    chat = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}  # fmt: skip
    out = default_translations().table["chat", "gemini"].request(chat, Target("gemini-2.5-flash"))
    assert isinstance(out, Refusal) and out.message.startswith("messages[0].content[0]: an image_url part must be")


def test_a_claude_clients_top_k_reaches_gemini_and_not_a_chat_upstream() -> None:
    # Anthropic's own knob (the Messages API reference's ``top_k``); the SDK in use here no
    # longer names it, so the body is written as the reference gives it.
    asked = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "top_k": 40,
             "temperature": 0.5}  # fmt: skip
    out = default_translations().table["messages", "gemini"].request(asked, Target("gemini-2.5-flash"))
    assert not isinstance(out, Refusal) and out["generationConfig"]["topK"] == 40
    chat = default_translations().table["messages", "chat"].request(asked, Target("m"))
    assert not isinstance(chat, Refusal) and "top_k" not in chat and chat["temperature"] == 0.5


@pytest.mark.parametrize(("upstream", "named"), [("chat", "chat completions"), ("responses", "OpenAI Responses"),
                                                 ("gemini", "the Gemini API")])  # fmt: skip
def test_a_claude_clients_refusal_names_the_upstream_its_route_has(upstream: str, named: str) -> None:
    """It said "an OpenAI Responses upstream has no such tool", false of an API with a web fetch
    of its own (review): it is the gateway that does not carry Anthropic's server tool there."""
    server_tool = {"type": "web_fetch_20250910", "name": "web_fetch"}
    asked = sdk_request(messages=[{"role": "user", "content": "Fetch it."}], tools=[server_tool])
    out = default_translations().table["messages", upstream].request(asked, Target("m"))
    assert isinstance(out, Refusal), out
    assert out.message == ("tool 'web_fetch' is Anthropic's 'web_fetch_20250910' tool, run or defined by Anthropic's "
                           f"API; the gateway does not carry it to {named} (give it as a custom tool with an "
                           "input_schema)")  # fmt: skip


def test_a_claude_clients_pdf_by_url_reaches_responses_as_a_file_url() -> None:
    """Anthropic's URL document source (``{type: url, url}``, the PDF support guide) was left out
    with a note on a Responses route, though ``input_file`` takes ``file_url``; a chat or Gemini
    upstream still gets the note (neither fetches it)."""
    url = "https://example.com/report.pdf"
    doc = {"type": "document", "source": {"type": "url", "url": url}}
    asked = sdk_request(messages=[{"role": "user", "content": [doc, {"type": "text", "text": "Summarise."}]}])
    out = default_translations().table["messages", "responses"].request(asked, Target("gpt-5"))
    assert not isinstance(out, Refusal), out
    assert out["input"][0]["content"][0] == {"type": "input_file", "file_url": url}
    assert responses_rules.refusal("/v1/responses", out) is None
    for upstream in ("chat", "gemini"):
        other = default_translations().table["messages", upstream].request(asked, Target("m"))
        assert not isinstance(other, Refusal) and url not in json.dumps(other) and "left out" in json.dumps(other)


def test_a_responses_clients_input_file_reaches_gemini_inline_and_a_chat_upstream_still_refuses_it() -> None:
    part = {"type": "input_file", "filename": "a.pdf", "file_data": f"data:application/pdf;base64,{PDF}"}
    asked = {"model": "m", "input": [{"role": "user", "content": [part, {"type": "input_text", "text": "Summarise."}]}]}
    out = default_translations().table["responses", "gemini"].request(asked, Target("gemini-2.5-flash"))
    assert not isinstance(out, Refusal), out
    assert out["contents"] == [{"role": "user", "parts": [{"inlineData": {"mimeType": "application/pdf", "data": PDF}},
                                                          {"text": "Summarise."}]}]  # fmt: skip
    chat = default_translations().table["responses", "chat"].request(asked, Target("m"))
    assert isinstance(chat, Refusal) and "the gateway does not carry input_file (a document)" in chat.message
    # Only its data can go: Google's fileData takes files of its own Files API only.
    for by in ({"file_id": "file-1"}, {"file_url": "https://example.com/a.pdf"}):
        asked = {"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", **by}]}]}
        out = default_translations().table["responses", "gemini"].request(asked, Target("gemini-2.5-flash"))
        assert isinstance(out, Refusal) and "file_data" in out.message, out
