"""Captured content as the OpenTelemetry GenAI conventions' message schemas have it
(open-telemetry/semantic-conventions-genai docs/gen-ai/gen-ai-input-messages.json,
gen-ai-output-messages.json, gen-ai-system-instructions.json), from real bodies of the corpus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.tracing.attrs import CONTENT_MAX, input_content, output_content
from gateway.tracing.genai_messages import input_messages, output_messages

CORPUS = Path(__file__).parents[1] / "corpus"

# What each part type must carry (the schemas' "required").
_REQUIRED = {
    "text": ("content",), "reasoning": ("content",), "tool_call": ("name",),
    "tool_call_response": ("response",), "server_tool_call": ("name", "server_tool_call"),
    "server_tool_call_response": ("server_tool_call_response",), "blob": ("modality", "content"),
    "file": ("modality", "file_id"), "uri": ("modality", "uri"),
}  # fmt: skip
_FINISH = {"stop", "length", "content_filter", "tool_call", "error"}


def _check_part(p: Any) -> None:
    assert isinstance(p, dict) and isinstance(p.get("type"), str), p
    for key in _REQUIRED.get(p["type"], ()):
        assert key in p, (p["type"], key)
    if p["type"] in ("text", "reasoning"):
        assert isinstance(p["content"], str)
    if p["type"] in ("server_tool_call", "server_tool_call_response"):
        assert isinstance(p[p["type"]].get("type"), str)


def conforms(messages: Any, output: bool = False) -> None:
    assert isinstance(messages, list)
    for m in messages:
        assert isinstance(m.get("role"), str) and isinstance(m.get("parts"), list), m
        for p in m["parts"]:
            _check_part(p)
        if output:
            assert isinstance(m["finish_reason"], str)


def shape(messages: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    return [(m["role"], [p["type"] for p in m["parts"]]) for m in messages]


def request(name: str) -> dict[str, Any]:
    return json.loads((CORPUS / "requests" / f"{name}.json").read_text())["body"]


def answer(name: str) -> dict[str, Any]:
    return json.loads((CORPUS / "answers" / f"{name}.json").read_text())["body"]


# (corpus request, API, system instruction parts, the messages' roles and part types)
INPUTS = [
    ("chat-opencode-agent-step2", "chat", 0,
     [("system", ["text"]), ("user", ["text"]), ("assistant", ["tool_call"]), ("tool", ["tool_call_response"])]),
    ("chat-openai-python-tools-images", "chat", 0,
     [("developer", ["text"]), ("user", ["text", "blob", "uri"]), ("assistant", ["tool_call", "tool_call"]),
      ("tool", ["tool_call_response"]), ("tool", ["tool_call_response"]), ("system", ["text"]), ("user", ["text"])]),
    ("claude-code-2.1.332-bash-result", "messages", 3,
     [("user", ["text", "text"]), ("system", ["text"]), ("assistant", ["tool_call"]), ("user", ["tool_call_response"])]),
    ("agents-sdk-0.24-tool-result", "responses", 1,
     [("user", ["text"]), ("assistant", ["tool_call"]), ("tool", ["tool_call_response"])]),
    ("codex-0.169-image-result", "responses", 0,
     [("developer", ["text"]), ("developer", ["text", "text"]), ("user", ["text"]),
      ("user", ["text", "blob", "text", "text"]), ("assistant", ["tool_call"]), ("tool", ["tool_call_response"])]),
    ("gemini-cli-0.61-tool-result", "gemini", 1,
     [("user", ["text", "text"]), ("assistant", ["tool_call"]), ("user", ["tool_call_response"])]),
    ("genai-3.6-function-response", "gemini", 1,
     [("user", ["text", "blob"]), ("assistant", ["tool_call"]), ("user", ["tool_call_response"])]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "api", "n_system", "expected"), INPUTS, ids=[c[0] for c in INPUTS])
def test_a_request_is_system_instructions_and_input_messages(name, api, n_system, expected) -> None:
    system, messages = input_messages(api, request(name))
    assert len(system) == n_system and all(p["type"] == "text" for p in system)
    conforms(messages)
    assert shape(messages) == expected


def test_a_tool_round_keeps_its_ids_arguments_and_result() -> None:
    _, chat = input_messages("chat", request("chat-opencode-agent-step2"))
    call, result = chat[2]["parts"][0], chat[3]["parts"][0]
    assert call["id"] == result["id"] and isinstance(call["arguments"], dict)  # a JSON string, parsed
    _, msgs = input_messages("messages", request("claude-code-2.1.332-bash-result"))
    assert msgs[2]["parts"][0] == {"type": "tool_call", "id": "toolu_capture01", "name": "Bash",
                                   "arguments": {"command": "echo hi", "description": "Print hi"}}  # fmt: skip
    assert msgs[3]["parts"][0] == {"type": "tool_call_response", "id": "toolu_capture01", "response": "hi"}
    _, gem = input_messages("gemini", request("gemini-cli-0.61-tool-result"))
    contents = request("gemini-cli-0.61-tool-result")["contents"]
    assert gem[1]["parts"][0]["name"] == contents[1]["parts"][0]["functionCall"]["name"]
    assert gem[2]["parts"][0]["response"] == contents[2]["parts"][0]["functionResponse"]["response"]


def test_an_inline_image_is_a_blob_and_a_link_a_uri() -> None:
    _, msgs = input_messages("chat", request("chat-openai-python-tools-images"))
    blob, uri = msgs[1]["parts"][1], msgs[1]["parts"][2]
    assert blob["modality"] == "image" and blob["mime_type"].startswith("image/")
    assert not blob["content"].startswith("data:")
    assert uri["uri"].startswith("http")


def test_a_responses_string_input_is_one_user_message() -> None:
    system, msgs = input_messages("responses", {"model": "m", "instructions": "be brief", "input": "hi"})
    assert system == [{"type": "text", "content": "be brief"}]
    assert msgs == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]


# (corpus answer, API, the output messages' roles and part types, their finish reasons)
OUTPUTS = [
    ("chat-openai-gpt-4.1-text", "chat", [("assistant", ["text"])], ["stop"]),
    ("chat-openai-gpt-4.1-tool-call", "chat", [("assistant", ["tool_call"])], ["tool_call"]),
    ("chat-openrouter-gpt-4o-length", "chat", [("assistant", ["text"])], ["length"]),
    ("deepseek-reasoner-reasoning", "chat", [("assistant", ["reasoning", "text"])], ["stop"]),
    ("messages-api-reference-example", "messages", [("assistant", ["text"])], ["stop"]),
    ("messages-thinking-then-tool-use", "messages", [("assistant", ["reasoning", "tool_call"])], ["tool_call"]),
    ("gemini-pro-function-call", "gemini", [("assistant", ["tool_call"])], ["tool_call"]),
    ("gemini-text-usage", "gemini", [("assistant", ["text"])], ["stop"]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "api", "expected", "reasons"), OUTPUTS, ids=[c[0] for c in OUTPUTS])
def test_a_buffered_answer_is_output_messages_with_semconv_finish_reasons(name, api, expected, reasons) -> None:
    out = output_messages(api, answer(name))
    conforms(out, output=True)
    assert shape(out) == expected
    assert [m["finish_reason"] for m in out] == reasons


# A Responses answer shaped as the API reference's example of a function call (no buffered
# Responses answer is in the corpus yet).
RESPONSES_ANSWER = {
    "id": "resp_1", "object": "response", "status": "completed", "model": "gpt-4.1",
    "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "need weather"}]},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
    ],
}  # fmt: skip


def test_a_responses_answer_is_one_output_message() -> None:
    (out,) = output_messages("responses", RESPONSES_ANSWER)
    assert out["parts"] == [{"type": "reasoning", "content": "need weather"}, {"type": "text", "content": "Checking."},
                            {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}]
    assert out["finish_reason"] == "tool_call"
    cut = {**RESPONSES_ANSWER, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    assert output_messages("responses", cut)[0]["finish_reason"] == "length"


@pytest.mark.parametrize(("api", "doc", "reason"), [
    ("messages", {"type": "message", "role": "assistant", "content": [], "stop_reason": "max_tokens"}, "length"),
    ("messages", {"type": "message", "role": "assistant", "content": [], "stop_reason": "refusal"}, "content_filter"),
    ("messages", {"type": "message", "role": "assistant", "content": [], "stop_reason": "pause_turn"}, "pause_turn"),
    ("gemini", {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "SAFETY"}]}, "content_filter"),
    ("gemini", {"candidates": [{"content": {"role": "model", "parts": []}, "finishReason": "OTHER"}]}, "OTHER"),
    ("chat", {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": None}]},
     "error"),
])  # fmt: skip
def test_finish_reasons_map_to_the_schema_values(api, doc, reason) -> None:
    assert output_messages(api, doc)[0]["finish_reason"] == reason


def test_the_attributes_are_json_of_the_schema_with_keys_masked() -> None:
    body = {"model": "m", "system": "use sk-ant-api03-abcdefghijkl", "messages": [
        {"role": "user", "content": "my key is sk-test-SECRETSECRETSECRET0123456789"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "login",
                                           "input": {"user": "me", "password": "hunter22"}}]},
    ]}  # fmt: skip
    a = input_content(orjson.dumps(body), "messages")
    assert json.loads(a["gen_ai.system_instructions"]) == [{"type": "text", "content": "use [redacted]"}]
    messages = json.loads(a["gen_ai.input.messages"])  # still JSON: masking keeps the structure
    assert messages[0]["parts"][0]["content"] == "my key is [redacted]"
    assert messages[1]["parts"][0]["arguments"] == {"user": "me", "password": "[redacted]"}
    text = json.dumps(a)
    assert "SECRET" not in text and "hunter22" not in text and "abcdefghijkl" not in text


def test_a_large_conversation_is_cut_to_the_limit_and_stays_json() -> None:
    body = request("claude-code-2.1.332-image-result")  # a base64 screenshot among long prompts
    a = input_content(orjson.dumps(body), "messages")
    for value in a.values():
        assert len(value.encode()) <= CONTENT_MAX
    messages = json.loads(a["gen_ai.input.messages"])
    conforms(messages)
    assert shape(messages)[-1] == ("user", ["tool_call_response"])  # the newest turn is kept


def test_nothing_for_a_body_that_is_not_a_generation() -> None:
    assert input_content(b'{"input": ["a"], "model": "e"}', "chat") == {}  # an embeddings pass-through
    assert output_content(b'{"object": "list", "data": []}', "chat") == {}
    assert output_content(b"not json", "messages") == {}
