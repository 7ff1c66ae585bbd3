"""Gemini → chat completions (``GeminiToChat``), from real client requests (Gemini CLI 0.61 and
google-genai 3.6, tests/corpus/requests/) and recorded chat answers (tests/corpus/answers/).

Streams are checked against the grammar Gemini's clients read: every event ``data: {…}`` and a
blank line, one whole GenerateContentResponse each, ``role: "model"``, ``finishReason`` and
``usageMetadata`` on the last event only (Gemini CLI retries a stream whose last event has no
finishReason), function calls whole (``args`` an object).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis.base import Ending
from gateway.errors import Classification, ErrorType
from gateway.fake import chat_rules, messages_rules, responses_rules
from gateway.translate import default_translations, root
from gateway.translate.base import Context, Refusal, Target
from gateway.translate.gemini_chat import GeminiToChat
from gateway.translate.gemini_chat.request import json_schema, lowered
from tests import images
from tests.unit.translate.messages_helpers import corpus_answer, wire_stream
from tests.unit.translate.schemas import NO_PROPERTIES
from tests.unit.translate.wrong_types import GEMINI, mutated

CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "requests"
T = GeminiToChat()
TARGET = Target("served-model")
# Gemini → chat → Messages, as the gateway composes it for an Anthropic upstream.
ON_MESSAGES = default_translations().table["gemini", "messages"]
CLAUDE = Target("claude-sonnet-4-5")


def client_request(name: str, stream: bool = False) -> dict[str, Any]:
    """A captured body as the dialect admits it: with the path's model and stream flag."""
    body: dict[str, Any] = json.loads((CORPUS / f"{name}.json").read_text())["body"]
    return {**body, "model": "gemini-2.5-flash", "stream": stream}


def chat(payload: dict[str, Any]) -> dict[str, Any]:
    out = T.request(payload, TARGET)
    assert not isinstance(out, Refusal), out
    return out


def refused(payload: dict[str, Any]) -> Refusal:
    out = T.request(payload, TARGET)
    assert isinstance(out, Refusal), out
    return out


def ctx(request: dict[str, Any] | None = None) -> Context:
    req = request or {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "model": "gemini-2.5-flash"}
    return Context(requested_model="gemini-2.5-flash", request=req, request_id="req1")


def events(raw: bytes) -> list[dict[str, Any]]:
    """Split as the google-genai SDK does (a blank line ends an event), checking the framing."""
    assert raw.endswith(b"\r\n\r\n")
    docs = []
    for event in raw.split(b"\r\n\r\n")[:-1]:
        assert event.startswith(b"data: ") and b"\n" not in event, event
        docs.append(json.loads(event[len(b"data: ") :]))
    return docs


def run_stream(chat_sse: bytes, c: Context) -> list[dict[str, Any]]:
    st = T.stream(c)
    out = b"".join(st.event(e + b"\n\n") for e in chat_sse.split(b"\n\n") if e.strip())
    out += st.close()
    return events(out)


def check_grammar(docs: list[dict[str, Any]]) -> None:
    assert docs
    for d in docs:
        [candidate] = d["candidates"]
        assert candidate["content"]["role"] == "model" and candidate["index"] == 0
        assert d["modelVersion"] == "gemini-2.5-flash" and d["responseId"] == "req1"
    assert all("finishReason" not in d["candidates"][0] and "usageMetadata" not in d for d in docs[:-1])
    assert docs[-1]["candidates"][0]["finishReason"] and "usageMetadata" in docs[-1]


# --- requests, from real clients ---------------------------------------------------------


def test_gemini_cli_first_request() -> None:
    out = chat(client_request("gemini-cli-0.61-first", stream=True))
    system, user = out["messages"]
    assert system["role"] == "system" and system["content"].startswith("You are a non-interactive CLI agent")
    # The CLI's session context and the prompt are two parts of one turn: one user message.
    assert user == {"role": "user", "content": user["content"]} and user["content"].endswith("\n\nsay hi")
    assert out["stream"] is True and out["stream_options"] == {"include_usage": True}
    assert (out["temperature"], out["top_p"], out["reasoning_effort"]) == (1, 0.95, "medium")  # budget 8192
    assert "top_k" not in out and "topK" not in json.dumps(out)
    names = [t["function"]["name"] for t in out["tools"]]
    assert {"list_directory", "read_file", "grep_search"} <= set(names)  # headless: read-only tools only
    ls = next(t["function"] for t in out["tools"] if t["function"]["name"] == "list_directory")
    assert ls["parameters"]["properties"]["dir_path"]["type"] == "string"  # parametersJsonSchema as it came


def test_gemini_cli_tool_result_keeps_its_ids_and_drops_the_thought_signature() -> None:
    out = chat(client_request("gemini-cli-0.61-tool-result", stream=True))
    assistant, tool = out["messages"][-2:]
    call_id = "list_directory_1795829156636_0"
    assert assistant["content"] == "" and assistant["tool_calls"] == [{
        "id": call_id, "type": "function",
        "function": {"name": "list_directory", "arguments": assistant["tool_calls"][0]["function"]["arguments"]},
    }]  # fmt: skip
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"])["dir_path"].startswith("/tmp/")
    assert tool["role"] == "tool" and tool["tool_call_id"] == call_id
    assert tool["content"].startswith("Directory listing for")  # response.output, as text
    assert "thoughtSignature" not in json.dumps(out) and "skip_thought_signature" not in json.dumps(out)


def test_google_genai_knobs_image_and_schema_types() -> None:
    out = chat(client_request("genai-3.6-knobs-image"))
    # google-genai sends the system instruction with role "user".
    assert out["messages"][0] == {"role": "system", "content": "You are terse."}
    text, image = out["messages"][1]["content"]
    assert text == {"type": "text", "text": "What is the weather in Paris? Here is a picture of the sky."}
    url = image["image_url"]["url"]
    assert url.startswith("data:image/png;base64,iVBOR") and "_" not in url and "-" not in url  # url-safe → standard
    assert (out["temperature"], out["top_p"], out["max_tokens"], out["stop"]) == (0.2, 0.9, 256, ["END"])
    assert out["reasoning_effort"] == "low"  # snake_case thinking_budget 1024
    assert out["tool_choice"] == "auto" and "stream" not in out
    assert out["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}]  # fmt: skip


ROUTE_SCHEMA = {"type": "object", "properties": {
    "complexity_reasoning": {"type": "string", "description": "Brief explanation for the score."},
    "complexity_score": {"type": "integer", "description": "Complexity score from 1-100."}},
    "required": ["complexity_reasoning", "complexity_score"]}  # fmt: skip


def test_gemini_cli_routing_call_sends_its_schema_in_json_schemas_type_names() -> None:
    """Every prompt on the stock model starts with this call; its responseJsonSchema spells
    OBJECT / STRING / INTEGER, which Gemini takes and no chat server or Anthropic does."""
    payload = client_request("gemini-cli-0.61-route")
    out = chat(payload)
    assert out["response_format"] == {"type": "json_schema", "json_schema": {"name": "response", "schema": ROUTE_SCHEMA}}
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["output_config"]["format"]["schema"] == {**ROUTE_SCHEMA, "additionalProperties": False}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_gemini_cli_requests_are_sent_as_anthropic_takes_them() -> None:
    for name in ("gemini-cli-0.61-first", "gemini-cli-0.61-tool-result", "gemini-cli-0.61-route"):
        out = ON_MESSAGES.request(client_request(name, stream=True), CLAUDE)
        assert not isinstance(out, Refusal), (name, out)
        assert messages_rules.refusal("/v1/messages", out, {}) is None, name


def test_google_genai_function_response_without_ids_pairs_by_name_and_order() -> None:
    out = chat(client_request("genai-3.6-function-response"))
    assistant, tool = out["messages"][-2:]
    made_up = assistant["tool_calls"][0]["id"]
    assert made_up == tool["tool_call_id"] == "call_1_0"
    assert tool["content"] == '{"result": "sunny, 21C"}'  # not Gemini CLI's {"output"}: the JSON itself


# Gemini CLI's own id for a call the Gemini API sent without one: 45 characters.
GEMINI_CLI_ID = "run_shell_command-1759912345678-3f2a9c8b1d4e7"


def _round(call_id: str) -> dict[str, Any]:
    return {"contents": [
        {"role": "user", "parts": [{"text": "list files"}]},
        {"role": "model", "parts": [{"functionCall": {"id": call_id, "name": "run_shell_command", "args": {"c": "ls"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"id": call_id, "name": "run_shell_command",
                                                         "response": {"output": "a.txt"}}}]},
    ], "generationConfig": {"stopSequences": ["a", "b", "c", "d", "e"]}}  # fmt: skip


def test_gemini_clis_own_ids_past_openais_40_go_as_one_digest_and_stops_as_four() -> None:
    out = chat(_round(GEMINI_CLI_ID))
    sent = out["messages"][1]["tool_calls"][0]["id"]
    assert len(GEMINI_CLI_ID) == 45 and len(sent) <= 40 and sent == out["messages"][2]["tool_call_id"]
    assert out["stop"] == ["a", "b", "c", "d"]  # OpenAI's most; Gemini takes 5
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    assert chat(_round("list_directory_1795829156636_0"))["messages"][1]["tool_calls"][0]["id"] == \
        "list_directory_1795829156636_0"  # fmt: skip
    on_claude = ON_MESSAGES.request(_round(GEMINI_CLI_ID), CLAUDE)  # Anthropic takes it: unchanged
    assert not isinstance(on_claude, Refusal)
    assert on_claude["messages"][1]["content"][0]["id"] == GEMINI_CLI_ID
    assert on_claude["stop_sequences"] == ["a", "b", "c", "d", "e"]


def test_google_genai_response_schema_becomes_json_schema() -> None:
    out = chat(client_request("genai-3.6-stream-json-schema", stream=True))
    assert out["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "response", "schema": {"type": "object", "properties": {"answer": {"type": "string"}}}}}  # fmt: skip


# --- request rules -------------------------------------------------------------------------


def base(**extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "model": "m", "stream": False, **extra}


@pytest.mark.parametrize(("config", "expected"), [
    ({"mode": "ANY"}, "required"),
    ({"mode": "NONE"}, "none"),
    ({"mode": "AUTO"}, "auto"),
    ({"mode": "ANY", "allowedFunctionNames": ["b"]}, {"type": "function", "function": {"name": "b"}}),
    ({"mode": "ANY", "allowed_function_names": ["a", "b"]}, "required"),
    ({"mode": "MODE_UNSPECIFIED"}, "auto"),  # a value of Google's enum: the default
    ({"mode": "ANY", "allowedFunctionNames": ["b", "gone"]}, {"type": "function", "function": {"name": "b"}}),
])  # fmt: skip
def test_function_calling_config(config: dict[str, Any], expected: Any) -> None:
    decls = [{"name": n, "parametersJsonSchema": {"type": "object"}} for n in ("a", "b", "c")]
    out = chat(base(tools=[{"functionDeclarations": decls}], toolConfig={"functionCallingConfig": config}))
    assert out["tool_choice"] == expected
    allowed = config.get("allowedFunctionNames") or config.get("allowed_function_names") or ["a", "b", "c"]
    assert [t["function"]["name"] for t in out["tools"]] == [n for n in allowed if n in "abc"]


def test_allowed_function_names_naming_no_declared_function_is_refused() -> None:
    """Sent without its tools, the model would answer as if it had none."""
    decls = [{"name": "a", "parametersJsonSchema": {"type": "object"}}]
    calling = {"mode": "ANY", "allowedFunctionNames": ["read_file"]}
    says = refused(base(tools=[{"functionDeclarations": decls}], toolConfig={"functionCallingConfig": calling}))
    assert "allowedFunctionNames ['read_file'] names no function in 'tools'" in says.message


@pytest.mark.parametrize(("thinking", "effort"), [
    ({"thinkingBudget": 0}, None), ({"thinkingBudget": -1}, "medium"), ({"thinkingBudget": 1024}, "low"),
    ({"thinkingBudget": 20000}, "high"), ({"thinkingLevel": "HIGH"}, "high"), ({"thinking_level": "minimal"}, "low"),
])  # fmt: skip
def test_thinking_config_to_reasoning_effort(thinking: dict[str, Any], effort: str | None) -> None:
    out = chat(base(generationConfig={"thinkingConfig": thinking}))
    assert out.get("reasoning_effort") == effort


@pytest.mark.parametrize(("budget", "claude"), [
    (500, 1024), (1024, 1024), (1500, 1500), (8192, 8192), (9000, 9000), (24576, 24576), (50000, 30000),
])  # fmt: skip
def test_a_thinking_budget_reaches_claude_at_least_as_asked(budget: int, claude: int) -> None:
    """Anthropic's least budget is 1,024; 500 was sent as 2,048 (low), 3,000 as 2,048. A budget
    that fits goes as asked (it was rounded up to an effort's); one over maxOutputTokens leaves
    the answer its share (``thinking_room``)."""
    payload = base(generationConfig={"thinkingConfig": {"thinkingBudget": budget}, "maxOutputTokens": 40000})
    out = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(out, Refusal), out
    assert out["thinking"] == {"type": "enabled", "budget_tokens": claude}


@pytest.mark.parametrize(("model", "thinking", "effort"), [
    ("claude-sonnet-4-6", {"type": "adaptive"}, "medium"),  # takes adaptive thinking: the model decides
    ("claude-opus-4-7", {"type": "adaptive"}, "medium"),
    ("claude-sonnet-4-5", {"type": "enabled", "budget_tokens": 8192}, None),  # a budget only: a middle one
])  # fmt: skip
def test_dynamic_thinking_reaches_claude_as_the_model_deciding(model: str, thinking: dict[str, Any],
                                                               effort: str | None) -> None:  # fmt: skip
    """thinkingBudget -1 is dynamic thinking, "which allows the model to decide on the thinking
    budget based on the task" (Google's ThinkingConfig reference): it went out with no thinking."""
    payload = base(generationConfig={"thinkingConfig": {"thinkingBudget": -1, "includeThoughts": True},
                                     "maxOutputTokens": 40000})  # fmt: skip
    out = ON_MESSAGES.request(payload, Target(model))
    assert not isinstance(out, Refusal), out
    assert out["thinking"] == thinking and out.get("output_config", {}).get("effort") == effort
    off = ON_MESSAGES.request(base(generationConfig={"thinkingConfig": {"thinkingBudget": 0}}), Target(model))
    assert not isinstance(off, Refusal) and "thinking" not in off  # 0 is still off
    responses = default_translations().table["gemini", "responses"].request(payload, Target("gpt-5"))
    assert not isinstance(responses, Refusal) and responses["reasoning"]["effort"] == "medium"


def test_top_k_reaches_claude_unless_it_thinks() -> None:
    out = ON_MESSAGES.request(base(generationConfig={"topK": 40, "temperature": 0.5}), CLAUDE)
    assert not isinstance(out, Refusal) and out["top_k"] == 40
    thinking = {"topK": 40.0, "thinkingConfig": {"thinkingBudget": 2048}}
    out = ON_MESSAGES.request(base(generationConfig=thinking), CLAUDE)
    assert not isinstance(out, Refusal) and "top_k" not in out and "thinking" in out


def test_google_schema_to_json_schema() -> None:
    schema = {"type": "OBJECT", "propertyOrdering": ["a"], "properties": {
        "a": {"type": "ARRAY", "items": {"type": "STRING", "enum": ["x"]}, "max_items": 3},
        "b": {"type": "INTEGER", "nullable": True, "minimum": 0},
        "c": {"any_of": [{"type": "STRING"}, {"type": "NUMBER"}]}}}  # fmt: skip
    assert json_schema(schema) == {"type": "object", "properties": {
        "a": {"type": "array", "maxItems": 3, "items": {"type": "string", "enum": ["x"]}},
        "b": {"type": ["integer", "null"], "minimum": 0},
        "c": {"anyOf": [{"type": "string"}, {"type": "number"}]}}}  # fmt: skip


def test_google_schema_counts_and_enums_as_json_schema_reads_them() -> None:
    """google-genai JS types counts as strings (int64 in Google's proto); an enum is strings
    whatever the type, so an INTEGER enum of strings would match no integer."""
    schema = {"type": "OBJECT", "minProperties": "1", "properties": {
        "tags": {"type": "ARRAY", "minItems": "1", "maxItems": "5", "items": {"type": "STRING", "maxLength": "20"}},
        "code": {"type": "INTEGER", "format": "enum", "enum": ["101", "201"]},
        "ratio": {"type": "NUMBER", "enum": ["0.5", "1"]},
        "odd": {"type": "INTEGER", "enum": ["one", "2"]},
        "color": {"type": "STRING", "format": "enum", "enum": ["red", "blue"]}}}  # fmt: skip
    assert json_schema(schema) == {"type": "object", "minProperties": 1, "properties": {
        "tags": {"type": "array", "minItems": 1, "maxItems": 5, "items": {"type": "string", "maxLength": 20}},
        "code": {"type": "integer", "enum": [101, 201]},
        "ratio": {"type": "number", "enum": [0.5, 1]},
        "odd": {"enum": ["one", "2"]},
        "color": {"type": "string", "enum": ["red", "blue"]}}}  # fmt: skip


def test_nullable_function_parameters_stay_an_object() -> None:
    """Anthropic refuses any top type but "object" ("input_schema.type: Input should be 'object'")."""
    decl = {"name": "f", "parameters": {"type": "OBJECT", "nullable": True,
                                        "properties": {"n": {"type": "INTEGER", "nullable": True}}}}  # fmt: skip
    payload = base(tools=[{"functionDeclarations": [decl]}])
    assert chat(payload)["tools"][0]["function"]["parameters"] == {
        "type": "object", "properties": {"n": {"type": ["integer", "null"]}}}
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["tools"][0]["input_schema"]["type"] == "object"
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_a_json_schema_without_a_type_reaches_claude_as_an_object() -> None:
    """JSON Schema lets ``parametersJsonSchema`` leave the type unsaid; Anthropic: "tools.0.custom.
    input_schema.type: Field required" (kilocode #12238)."""
    decl = {"name": "search", "parametersJsonSchema": {"properties": {"q": {"type": "string"}}, "required": ["q"]}}
    on_claude = ON_MESSAGES.request(base(tools=[{"functionDeclarations": [decl]}]), CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["tools"][0]["input_schema"] == {"type": "object", **decl["parametersJsonSchema"]}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_json_schema_fields_get_json_schemas_type_names_and_nothing_else_changes() -> None:
    google_spelled = {"type": "OBJECT", "properties": {
        "OBJECT": {"type": "STRING", "enum": ["STRING", "OBJECT"], "default": "OBJECT"},
        "list": {"type": "ARRAY", "items": {"$ref": "#/$defs/Item"}, "prefixItems": [{"type": "BOOLEAN"}]},
        "either": {"anyOf": [{"type": ["NUMBER", "NULL"]}, {"not": {"type": "INTEGER"}}]},
        "map": {"type": "OBJECT", "additionalProperties": {"type": "STRING"}},
        "free": {"type": "TYPE_UNSPECIFIED", "description": "anything"}},
        "$defs": {"Item": {"type": "OBJECT", "properties": {}}}}  # fmt: skip
    assert lowered(google_spelled) == {"type": "object", "properties": {
        "OBJECT": {"type": "string", "enum": ["STRING", "OBJECT"], "default": "OBJECT"},
        "list": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "prefixItems": [{"type": "boolean"}]},
        "either": {"anyOf": [{"type": ["number", "null"]}, {"not": {"type": "integer"}}]},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"description": "anything"}},
        "$defs": {"Item": {"type": "object", "properties": {}}}}  # fmt: skip
    valid = {"type": "object", "properties": {"a": {"type": ["string", "null"], "format": "date"}, "b": True},
             "additionalProperties": False, "required": ["a"]}  # fmt: skip
    assert lowered(valid) == valid


def test_parameters_json_schema_gets_json_schemas_type_names() -> None:
    decl = {"name": "f", "parametersJsonSchema": {"type": "OBJECT", "properties": {"n": {"type": "INTEGER"}}}}
    out = chat(base(tools=[{"functionDeclarations": [decl]}]))
    assert out["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {"n": {"type": "integer"}}}


@pytest.mark.parametrize(("given", "sent"), NO_PROPERTIES)
def test_an_object_schema_without_properties_gets_an_empty_one(given: dict[str, Any], sent: dict[str, Any]) -> None:
    payload = base(tools=[{"functionDeclarations": [{"name": "list_all", "parametersJsonSchema": given}]}])
    out = chat(payload)
    assert out["tools"][0]["function"]["parameters"] == sent
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_responses = default_translations().table["gemini", "responses"].request(payload, TARGET)
    assert isinstance(on_responses, dict) and on_responses["tools"][0]["parameters"] == sent
    assert responses_rules.refusal("/v1/responses", on_responses) is None


def test_googles_object_schema_without_properties_gets_an_empty_one() -> None:
    out = chat(base(tools=[{"functionDeclarations": [{"name": "list_all", "parameters": {"type": "OBJECT"}}]}]))
    assert out["tools"][0]["function"]["parameters"] == {"type": "object", "properties": {}}


def read_file_turns(mime: str, data: str) -> list[dict[str, Any]]:
    """Gemini CLI 0.61 after ``read_file`` on a binary file (as it sends it on gemini-2.5-flash):
    the functionResponse, then the file as an inlineData part of the same turn."""
    return [
        {"role": "user", "parts": [{"text": "Describe it"}]},
        {"role": "model", "parts": [{"functionCall": {"id": "read_file_1", "name": "read_file",
                                                      "args": {"file_path": "/work/photo"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"id": "read_file_1", "name": "read_file",
                                  "response": {"output": "Binary content provided (1 item(s))."}}},
            {"inlineData": {"mimeType": mime, "data": data}}]},
    ]  # fmt: skip


HEIC = "AAAAGGZ0eXBoZWljAAAAAG1pZjFoZWlj"  # the first bytes of a HEIC file: ftyp heic


@pytest.mark.parametrize("mime", ["image/heic", "image/heif"])
def test_an_image_type_no_chat_server_nor_claude_reads_becomes_a_note(mime: str) -> None:
    """Gemini takes HEIC and HEIF; Anthropic refused the whole request, and as the image stays in
    the history, every later turn of the session."""
    payload = base(contents=read_file_turns(mime, HEIC))
    note = f"[image ({mime}) left out: this model cannot read it]"
    out = chat(payload)
    assert out["messages"][-1] == {"role": "user", "content": note}
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["messages"][-1]["content"][-1] == {"type": "text", "text": note}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_jpeg_named_image_jpg_is_sent_as_image_jpeg() -> None:
    payload = base(contents=read_file_turns("image/jpg", "/9j/4AAQ"))
    out = chat(payload)
    assert out["messages"][-1]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}]
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["messages"][-1]["content"][-1] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_thoughts_in_history_are_dropped_and_a_pdf_becomes_a_note() -> None:
    out = chat(base(contents=[
        {"role": "user", "parts": [{"text": "read"}, {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}]},
        {"role": "model", "parts": [{"text": "thinking...", "thought": True}, {"text": "done", "thoughtSignature": "s"}]},
    ]))  # fmt: skip
    user, model = out["messages"]
    assert user["content"] == "read\n\n[inline data (application/pdf) left out: this model cannot read it]"
    assert model == {"role": "assistant", "content": "done"}


PDF = "JVBERi0xLjQKMSAwIG9iajw8L1R5cGUvQ2F0YWxvZz4+ZW5kb2JqCnRyYWlsZXI8PC9Sb290IDEgMCBSPj4KJSVFT0YK"


def test_a_pdf_on_its_way_to_claude_is_a_chat_file_part_and_reaches_claude_as_a_document() -> None:
    """Claude reads PDFs; a chat server reads none (the note above)."""
    payload = base(contents=read_file_turns("application/pdf", PDF))
    out = T.request(payload, Target("claude-sonnet-4-5", onward="messages"))
    assert not isinstance(out, Refusal), out
    assert out["messages"][-1] == {"role": "user", "content": [
        {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{PDF}"}}]}  # fmt: skip
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    call_id = on_claude["messages"][-2]["content"][0]["id"]
    assert on_claude["messages"][-1]["content"] == [
        {"type": "tool_result", "tool_use_id": call_id, "content": "Binary content provided (1 item(s))."},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": PDF}}]
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


def test_a_pdf_a_function_returned_and_its_display_name_go_on_to_claude() -> None:
    response = {"name": "fetch", "response": {"output": "ok"},
                "parts": [{"inlineData": {"mimeType": "application/pdf", "data": "JVBE", "displayName": "a.pdf"}}]}
    payload = base(contents=[{"role": "user", "parts": [{"text": "get it"}]},
                             {"role": "model", "parts": [{"functionCall": {"name": "fetch", "args": {}}}]},
                             {"role": "user", "parts": [{"functionResponse": response}]}])  # fmt: skip
    out = T.request(payload, Target("claude-sonnet-4-5", onward="messages"))
    assert not isinstance(out, Refusal), out
    assert out["messages"][-1]["content"] == [
        {"type": "text", "text": "Files returned by the function calls above:"},
        {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}}]
    assert chat(payload)["messages"][-1]["content"] == ("Files returned by the function calls above:\n\n"
                                                        "[inline data (application/pdf) left out: this model cannot read it]")


@pytest.mark.parametrize("mime", ["text/plain", "text/markdown", "application/json"])
def test_a_text_file_on_its_way_to_claude_is_a_chat_file_part_and_reaches_claude_as_plain_text(mime: str) -> None:
    """Anthropic's document block takes plain text (PlainTextSource); it became "[inline data
    (text/plain) left out: this model cannot read it]". A chat server still gets the note."""
    data = base64.b64encode(b"def main():\n    pass\n").decode()
    payload = base(contents=read_file_turns(mime, data))
    out = T.request(payload, Target("claude-sonnet-4-5", onward="messages"))
    assert not isinstance(out, Refusal), out
    assert out["messages"][-1] == {"role": "user", "content": [
        {"type": "file", "file": {"file_data": f"data:{mime};base64,{data}"}}]}  # fmt: skip
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["messages"][-1]["content"][-1] == {
        "type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "def main():\n    pass\n"}}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None
    assert chat(payload)["messages"][-1]["content"] == f"[inline data ({mime}) left out: this model cannot read it]"


JPEG = base64.b64encode(bytes.fromhex("ffd8ffe000104a464946000101")).decode()


@pytest.mark.parametrize("mime", ["image/png", "image/heic"])
def test_an_image_goes_as_the_type_its_bytes_are(mime: str) -> None:
    """JPEG bytes said to be PNG: "Image does not match the provided media type image/png" from
    Anthropic (claude-code #15746); said to be HEIC, a note where the model could have seen it."""
    payload = base(contents=read_file_turns(mime, JPEG))
    assert chat(payload)["messages"][-1]["content"] == [
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}}]
    on_claude = ON_MESSAGES.request(payload, CLAUDE)
    assert not isinstance(on_claude, Refusal), on_claude
    assert on_claude["messages"][-1]["content"][-1] == {
        "type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": JPEG}}
    assert messages_rules.refusal("/v1/messages", on_claude, {}) is None


@pytest.mark.parametrize(("extra", "says"), [
    ({"tools": [{"googleSearch": {}}]}, "googleSearch"),
    ({"tools": [{"code_execution": {}}]}, "codeExecution"),
    ({"cachedContent": "cachedContents/1"}, "cachedContent"),
    ({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "https://x/files/1"}}]}]}, "fileData"),
    ({"generationConfig": {"candidateCount": 2}}, "candidateCount"),
    ({"generationConfig": {"responseModalities": ["IMAGE"]}}, "responseModalities"),
])  # fmt: skip
def test_what_needs_googles_servers_is_refused(extra: dict[str, Any], says: str) -> None:
    assert says in refused(base(**extra)).message


@pytest.mark.parametrize(("onward", "names"), [
    ("chat", "chat completions"), ("messages", "Anthropic Messages"), ("responses", "OpenAI Responses"),
])  # fmt: skip
def test_a_refused_google_tool_names_the_upstreams_own_api(onward: str, names: str) -> None:
    """Gemini CLI's googleSearch on a Claude or Responses upstream was refused as one for "a chat
    completions upstream", which the operator had not configured (audit); then as one that upstream
    "cannot run", though both have a web search of their own: the gateway does not carry it (review)."""
    out = default_translations().table["gemini", onward].request(base(tools=[{"googleSearch": {}}]), TARGET)
    assert isinstance(out, Refusal), out
    assert out.message == (f"tools[0].googleSearch runs inside Google's API; the gateway does not carry it to "
                           f"{names} (a model routed to a Gemini API upstream can run it)")  # fmt: skip


@pytest.mark.parametrize(("onward", "names"), [
    ("chat", "chat completions"), ("messages", "Anthropic Messages"), ("responses", "OpenAI Responses"),
])  # fmt: skip
@pytest.mark.parametrize(("extra", "says"), [
    ({"cachedContent": "cachedContents/1"}, "'cachedContent' names a cache kept by Google's API; the gateway does "
                                            "not carry it to {}"),
    ({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "https://x/files/1"}}]}]},
     "contents[0].parts[0].fileData names a file kept by Google's API; the gateway does not carry it to {}"),
    ({"generationConfig": {"responseModalities": ["IMAGE"]}},
     "'responseModalities' other than TEXT need a Gemini model; the gateway does not carry them to {}"),
    ({"contents": [{"role": "user", "parts": [{"executableCode": {"code": "1"}}]}]},
     "contents[0].parts[0]: the gateway does not carry a user turn's executableCode part to {}"),
])  # fmt: skip
def test_what_needs_googles_servers_is_refused_naming_the_routes_api(
    onward: str, names: str, extra: dict[str, Any], says: str,
) -> None:
    """A Gemini client on a Claude or Responses route was told "a chat completions upstream cannot
    read it", an upstream the operator had not configured (review)."""
    out = default_translations().table["gemini", onward].request(base(**extra), TARGET)
    assert isinstance(out, Refusal), out
    assert out.message == says.format(names)


@pytest.mark.parametrize("config", [{"responseLogprobs": True}, {"response_logprobs": True, "logprobs": 3},
                                    {"logprobs": 3}])  # fmt: skip
def test_log_probabilities_are_refused_as_chats_own_are(config: dict[str, Any]) -> None:
    """They were dropped silently; chat's logprobs are refused on every translation (no token
    probabilities come back), and so are these now."""
    assert "responseLogprobs" in refused(base(generationConfig=config)).message


def test_safety_settings_and_top_k_are_dropped() -> None:
    out = chat(base(safetySettings=[{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
                    generationConfig={"topK": 40, "responseLogprobs": False}))  # fmt: skip
    assert set(out) == {"model", "messages"}


# --- answers ------------------------------------------------------------------------------


def test_buffered_tool_call_answer_from_a_recorded_chat_completion() -> None:
    body = corpus_answer("deepseek-reasoner-tool-call.json")["body"]
    doc = T.answer(body, ctx())
    [candidate] = doc["candidates"]
    parts = candidate["content"]["parts"]
    assert [list(p) for p in parts] == [["functionCall"]]  # thoughts only when includeThoughts
    call = parts[0]["functionCall"]
    assert call["name"] == "weather" and call["args"] == {"location": "San Francisco"} and call["id"]
    assert candidate["finishReason"] == "STOP"
    usage = doc["usageMetadata"]
    chat_usage = body["usage"]
    assert usage["promptTokenCount"] == chat_usage["prompt_tokens"]
    assert usage["totalTokenCount"] == chat_usage["prompt_tokens"] + chat_usage["completion_tokens"]
    assert usage["cachedContentTokenCount"] == 320
    assert usage["thoughtsTokenCount"] + usage["candidatesTokenCount"] == chat_usage["completion_tokens"]


def test_buffered_answer_shows_thoughts_when_asked() -> None:
    body = corpus_answer("deepseek-reasoner-tool-call.json")["body"]
    request = {**client_request("gemini-cli-0.61-first")}  # includeThoughts: true
    parts = T.answer(body, ctx(request))["candidates"][0]["content"]["parts"]
    assert parts[0]["thought"] is True and parts[0]["text"]


@pytest.mark.parametrize(("finish", "gemini"), [("stop", "STOP"), ("length", "MAX_TOKENS"),
                                                ("tool_calls", "STOP"), ("content_filter", "SAFETY")])  # fmt: skip
def test_finish_reasons(finish: str, gemini: str) -> None:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish}]}
    doc = T.answer(body, ctx())
    assert doc["candidates"][0]["finishReason"] == gemini
    assert doc["usageMetadata"]["promptTokenCount"] > 0  # estimated when the upstream says nothing


@pytest.mark.parametrize("missing", ["prompt_tokens", "completion_tokens"])
def test_only_the_count_the_upstream_left_out_is_estimated(missing: str) -> None:
    reported = {"prompt_tokens": 7, "completion_tokens": 5}
    usage = {k: v for k, v in reported.items() if k != missing}
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "a longer answer " * 8},
                         "finish_reason": "stop"}], "usage": usage}  # fmt: skip
    context = ctx()
    meta = T.answer(body, context)["usageMetadata"]
    if missing == "prompt_tokens":
        assert meta["promptTokenCount"] > 0 and meta["candidatesTokenCount"] == 5
    else:
        assert meta["promptTokenCount"] == 7 and meta["candidatesTokenCount"] > 5  # 128 bytes of text
    assert context.notes["usage_estimated"] is True


# --- streams ------------------------------------------------------------------------------


def test_recorded_text_stream() -> None:
    wire = wire_stream(corpus_answer("openai-gpt-4o-text.stream.json"))
    docs = run_stream(wire, ctx())
    check_grammar(docs)
    text = "".join(p.get("text", "") for d in docs for p in d["candidates"][0]["content"]["parts"])
    assert text and docs[-1]["candidates"][0]["finishReason"] == "STOP"


def test_recorded_parallel_tool_calls_come_whole_in_the_last_event() -> None:
    wire = wire_stream(corpus_answer("openai-gpt-4o-parallel-tools.stream.json"))
    docs = run_stream(wire, ctx())
    check_grammar(docs)
    parts = docs[-1]["candidates"][0]["content"]["parts"]
    assert [(p["functionCall"]["name"], p["functionCall"]["args"]) for p in parts] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"}),
    ]  # fmt: skip
    assert all(p["functionCall"]["id"] for p in parts)
    assert docs[-1]["usageMetadata"]["promptTokenCount"] == 149


def test_a_broken_stream_ends_with_an_error_event_the_sdk_raises() -> None:
    st = T.stream(ctx())
    first = st.event(b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n')
    ending = Ending(Classification.of(ErrorType.PROVIDER_UNAVAILABLE), "the upstream stream ended early", "cut")
    last = st.broken(ending)
    assert st.close() == b""
    docs = events(first + last)
    assert docs[0]["candidates"][0]["content"]["parts"] == [{"text": "Hi"}]
    err = docs[1]["error"]
    assert list(docs[1]) == ["error"]  # google-genai raises on a chunk that starts with {"error":
    assert (err["code"], err["status"], err["message"]) == (503, "UNAVAILABLE", "the upstream stream ended early")


def test_a_function_name_chat_refuses_goes_as_a_valid_one_and_comes_back_as_declared() -> None:
    """Gemini takes dots and colons in a name; OpenAI (^[a-zA-Z0-9_-]{1,64}$) and Anthropic
    ("tools.0.custom.name: String should match pattern", netclaw #1133) refuse them."""
    tools = [{"functionDeclarations": [{"name": "files.read", "parameters": {"type": "OBJECT"}},
                                       {"name": "files_read"}, {"name": "mcp:search"}]}]  # fmt: skip
    request = {"model": "gemini-2.5-flash", "tools": tools, "toolConfig": {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["files.read"]}}, "contents": [
        {"role": "user", "parts": [{"text": "read it"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "mcp:search", "args": {}, "id": "c1"}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "mcp:search", "id": "c1", "response": {"output": "x"}}}]},
    ]}  # fmt: skip
    out = chat(request)
    [tool] = out["tools"]  # only the allowed one
    sent = tool["function"]["name"]
    assert sent.startswith("files_read_") and sent != "files_read"
    assert out["tool_choice"] == {"type": "function", "function": {"name": sent}}
    history = out["messages"][1]["tool_calls"][0]["function"]["name"]
    assert history.startswith("mcp_search_")
    for name in (sent, history):
        assert all(c.isalnum() or c in "_-" for c in name) and len(name) <= 64
    # Unchanged where valid: the common case costs nothing.
    plain = chat({**request, "tools": [{"functionDeclarations": [{"name": "files_read"}]}], "toolConfig": {}})
    assert plain["tools"][0]["function"]["name"] == "files_read"

    held = T.held(Context("gemini-2.5-flash", request, "req1"))
    answer = {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": sent, "arguments": "{}"}},
        {"id": "c3", "type": "function", "function": {"name": "files_read", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}]}  # fmt: skip
    parts = T.answer(answer, held)["candidates"][0]["content"]["parts"]
    assert [p["functionCall"]["name"] for p in parts] == ["files.read", "files_read"]
    delta = {"index": 0, "id": "c2", "type": "function", "function": {"name": history, "arguments": "{}"}}
    wire = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}).encode()
    docs = run_stream(wire + b"\n\ndata: [DONE]\n\n", held)
    assert docs[-1]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "mcp:search"


# Gemini CLI keeps an MCP server's dots in its tools' names; a summary request declares none.
DOTTED_HISTORY = {"model": "claude-sonnet-4-5", "contents": [
    {"role": "user", "parts": [{"text": "read it"}]},
    {"role": "model", "parts": [{"functionCall": {"name": "files.read", "args": {"p": "a"}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "files.read", "response": {"output": "abc"}}}]},
    {"role": "user", "parts": [{"text": "summarize"}]},
]}  # fmt: skip


def test_a_dotted_name_only_the_history_calls_goes_as_a_valid_one() -> None:
    """A call in the history of a function no tool declares kept its raw name: chat_messages
    declared it for Anthropic (which refuses tool blocks without tools) and Anthropic refused
    it: "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"
    (modelcontextprotocol/modelcontextprotocol#1345). OpenAI refuses it in the history too
    ("Invalid 'messages[9].tool_calls[0].function.name': string does not match pattern",
    mcp-use/mcp-use#94)."""
    out = chat(DOTTED_HISTORY)
    [call] = out["messages"][1]["tool_calls"]
    name = call["function"]["name"]
    assert name.startswith("files_read_") and name == chat({**DOTTED_HISTORY, "tools": [
        {"functionDeclarations": [{"name": "files.read"}]}]})["tools"][0]["function"]["name"]  # the same mapping
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    claude = ON_MESSAGES.request(DOTTED_HISTORY, CLAUDE)
    assert not isinstance(claude, Refusal)
    assert claude["tools"][0]["name"] == name and claude["tool_choice"] == {"type": "none"}
    assert messages_rules.refusal("/v1/messages", claude, {"anthropic-version": "2023-06-01"}) is None


def test_a_history_only_name_the_model_calls_comes_back_as_the_client_wrote_it() -> None:
    request = {**DOTTED_HISTORY, "tools": [{"functionDeclarations": [{"name": "grep"}]}],
               "contents": [*DOTTED_HISTORY["contents"], {"role": "user", "parts": [{"text": "x" * 5000}]}]}  # fmt: skip
    sent = chat(request)["messages"][1]["tool_calls"][0]["function"]["name"]
    held = T.held(Context("gemini-2.5-flash", request, "req1", len(json.dumps(request))))
    assert held.request.get("contents") != request["contents"]  # the conversation is not kept whole
    answer = {"choices": [{"message": {"role": "assistant", "tool_calls": [
        {"id": "c2", "type": "function", "function": {"name": sent, "arguments": "{}"}},
        {"id": "c3", "type": "function", "function": {"name": "grep", "arguments": "{}"}}]},
        "finish_reason": "tool_calls"}]}  # fmt: skip
    parts = T.answer(answer, held)["candidates"][0]["content"]["parts"]
    assert [p["functionCall"]["name"] for p in parts] == ["files.read", "grep"]
    delta = {"index": 0, "id": "c2", "type": "function", "function": {"name": sent, "arguments": "{}"}}
    wire = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]}).encode()
    docs = run_stream(wire + b"\n\ndata: [DONE]\n\n", held)
    assert docs[-1]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "files.read"


# The audit fuzz's crash on this direction (a 500 internal_error: the tools' names were read
# before anything checked them) and the other fields it reads: a 400 naming the field as
# Google does. The sweep over every field and type is tests/unit/translate/test_wrong_types.py.
@pytest.mark.parametrize(("field", "value", "says"), [
    ("tools", [{"functionDeclarations": 5}],
     "Invalid value at 'tools[0].functionDeclarations': expected an array, got an integer"),
    ("tools.0.functionDeclarations.0.parameters", "x",
     "Invalid value at 'tools[0].functionDeclarations[0].parameters': expected an object, got a string"),
    ("systemInstruction", 5, "Invalid value at 'systemInstruction': expected an object, got an integer"),
    ("contents.0.parts", {"text": "hi"}, "Invalid value at 'contents[0].parts': expected an array, got an object"),
    ("contents.0.parts.0.text", 5, "Invalid value at 'contents[0].parts[0].text': expected a string, got an integer"),
    ("contents.1.parts.0.functionCall.args", "{}",
     "Invalid value at 'contents[1].parts[0].functionCall.args': expected an object, got a string"),
    ("contents.2.parts.0.functionResponse.parts", 5,
     "Invalid value at 'contents[2].parts[0].functionResponse.parts': expected an array, got an integer"),
    ("toolConfig.functionCallingConfig.allowedFunctionNames", "f",
     "Invalid value at 'toolConfig.functionCallingConfig.allowedFunctionNames': expected an array, got a string"),
    ("generationConfig", [5], "Invalid value at 'generationConfig': expected an object, got an array"),
    ("generationConfig.temperature", "0.5", "Invalid value at 'generationConfig.temperature': expected a number"),
    ("generationConfig.stopSequences", [5], "Invalid value at 'generationConfig.stopSequences[0]': expected a string"),
    ("generationConfig.responseSchema", "x", "Invalid value at 'generationConfig.responseSchema': expected an object"),
    ("generationConfig.thinkingConfig.thinkingBudget", 1.5,
     "Invalid value at 'generationConfig.thinkingConfig.thinkingBudget': expected an integer, got a number"),
])  # fmt: skip
def test_a_field_of_the_wrong_json_type_is_a_400_naming_it_as_google_does(field: str, value: Any, says: str) -> None:
    out = T.request(mutated(GEMINI, field, value), TARGET)
    assert isinstance(out, Refusal) and out.code == "invalid_type" and says in out.message, out


def test_json_mode_without_a_schema_says_json_where_openai_requires_the_word() -> None:
    """Gemini's responseMimeType application/json needs no word in the prompt; OpenAI's JSON
    mode refuses a conversation that never says "json" (mem0ai/mem0#3559)."""
    asked = {"contents": [{"role": "user", "parts": [{"text": "give data"}]}],
             "generationConfig": {"responseMimeType": "application/json"}}  # fmt: skip
    out = chat(asked)
    assert out["response_format"] == {"type": "json_object"}
    assert out["messages"][0] == {"role": "system", "content": "Answer in JSON."}
    said = {**asked, "contents": [{"role": "user", "parts": [{"text": "give data as JSON"}]}]}
    assert chat(said)["messages"][0]["role"] == "user"  # already said: nothing added


def test_an_image_over_5_mb_to_claude_is_refused_at_the_gemini_clients_own_field() -> None:
    """Anthropic refuses an image over 5 MB of base64 ("image exceeds 5 MB maximum", lobehub
    #14711). Sent now, a Gemini client hears so at its own field (``contents[0].parts[1]``, not
    chat's ``messages[0].content[1]``); kept in the history, the model gets a note."""
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR").decode()
    big = {"inlineData": {"mimeType": "image/png", "data": png + "A" * (5 * 1024 * 1024 + 1 - len(png))}}
    now = {"contents": [{"role": "user", "parts": [{"text": "look"}, big]}]}
    out = ON_MESSAGES.request(now, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith("contents[0].parts[1]: the image is 5,242,881 bytes"), out
    later = {"contents": [*now["contents"], {"role": "model", "parts": [{"text": "A login page."}]},
                          {"role": "user", "parts": [{"text": "thanks"}]}]}  # fmt: skip
    sent = ON_MESSAGES.request(later, CLAUDE)
    assert not isinstance(sent, Refusal), sent
    assert "left out: its 5,242,881 bytes of base64 are over the 5 MB" in json.dumps(sent["messages"])
    assert not isinstance(T.request(now, TARGET), Refusal)  # a chat server's own limits are its own


def test_an_image_over_anthropics_pixel_limits_is_refused_at_the_gemini_clients_own_field() -> None:
    """Over 8000 pixels a side, or 2000 in a request of more than 20 images ("At least one of the
    image dimensions exceed max allowed size[ for many-image requests]", claude-code #5147,
    #49537): refused at ``contents[i].parts[j]``, a function's response's images counted; a
    note once in the history."""
    def shot(width: int) -> dict[str, Any]:
        return {"inlineData": {"mimeType": "image/png", "data": images.b64(images.png(width, 2))}}

    now = {"contents": [{"role": "user", "parts": [{"text": "look"}, shot(8001)]}]}
    out = ON_MESSAGES.request(now, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith("contents[0].parts[1]: the image is 8001x2 pixels"), out
    read = {"functionResponse": {"name": "read_file", "response": {"output": "ok"}, "parts": [shot(100)] * 20}}
    many = {"contents": [{"role": "user", "parts": [{"text": "look"}]},
                         {"role": "model", "parts": [{"functionCall": {"name": "read_file", "args": {}}}]},
                         {"role": "user", "parts": [read, shot(2001)]}]}  # fmt: skip
    out = ON_MESSAGES.request(many, CLAUDE)
    assert isinstance(out, Refusal) and out.message.startswith(
        "contents[2].parts[1]: the image is 2001x2 pixels, over the 2,000 pixels a side Anthropic takes in a "
        "request of more than 20 images"), out
    later = {"contents": [*now["contents"], {"role": "model", "parts": [{"text": "A page."}]},
                          {"role": "user", "parts": [{"text": "thanks"}]}]}  # fmt: skip
    sent = ON_MESSAGES.request(later, CLAUDE)
    assert not isinstance(sent, Refusal), sent
    assert "left out: its 8001x2 pixels are over the 8,000 a side" in json.dumps(sent["messages"])
    assert messages_rules.refusal("/v1/messages", sent, {}) is None


def test_a_21st_screenshot_goes_to_claude_with_only_the_oldest_left_out() -> None:
    """21 turns each with a Retina screenshot (2880x1800): the 21st was refused for the 2000
    pixels of a request of more than 20 images, counted with the 20 earlier ones that
    chat_messages then made notes. The oldest is left out, 20 go (review)."""
    shot = {"inlineData": {"mimeType": "image/png", "data": images.b64(images.png(2880, 1800))}}
    contents: list[dict[str, Any]] = []
    for k in range(20):
        contents += [{"role": "user", "parts": [{"text": f"shot {k}"}, shot]},
                     {"role": "model", "parts": [{"text": "Seen."}]}]  # fmt: skip
    contents.append({"role": "user", "parts": [{"text": "and this one"}, shot]})
    sent = ON_MESSAGES.request({"contents": contents}, CLAUDE)
    assert not isinstance(sent, Refusal), sent
    blocks = [b for m in sent["messages"] for b in m["content"] if isinstance(m["content"], list)]
    assert sum(b["type"] == "image" for b in blocks) == 20
    assert sent["messages"][0]["content"][1] == {"type": "text", "text": (
        "[image (image/png) left out: its 2880x1800 pixels are over the 2,000 a side Anthropic takes in a request "
        "of more than 20 images]")}  # fmt: skip
    assert messages_rules.refusal("/v1/messages", sent, {}) is None


def test_the_word_json_is_looked_for_in_the_texts_not_in_an_images_base64() -> None:
    """google-genai's request with an inline PNG (the corpus's), asked for JSON: base64 spells
    "json" about once a megabyte, which says nothing to the model, so the note is still added."""
    asked = client_request("genai-3.6-knobs-image")
    png = base64.b64decode(asked["contents"][0]["parts"][1]["inlineData"]["data"] + "==")
    padded = png + b"\x00" * (-len(png) % 3)  # whole base64 groups: "json" is kept as written
    data = base64.b64encode(padded + base64.b64decode("json")).decode()
    assert "json" in data
    asked["contents"][0]["parts"][1]["inlineData"]["data"] = data
    asked["generationConfig"] = {"responseMimeType": "application/json"}
    out = chat(asked)
    assert out["response_format"] == {"type": "json_object"}
    assert out["messages"][0] == {"role": "system", "content": "Answer in JSON."}


def test_two_responses_for_one_gemini_cli_id_are_one_tool_message_on_chat() -> None:
    """Responses for one call id went to chat as two tool messages, which OpenAI refuses
    ("Duplicate value for 'tool_call_id'"), while on to Messages they were one result (review):
    they are one message, their texts in order. A model turn calling twice under one id still
    gets a message per call, and google-genai's responses without ids keep one each, as they
    pair with their calls by name and order."""
    body = client_request("gemini-cli-0.61-tool-result")
    model, answer = body["contents"][-2:]
    [part] = answer["parts"]
    again = {"functionResponse": {**part["functionResponse"], "response": {"output": "notes.txt changed"}}}
    out = chat({**body, "contents": [*body["contents"][:-1], {**answer, "parts": [part, again]}]})
    [tool] = [m for m in out["messages"] if m["role"] == "tool"]
    said = part["functionResponse"]["response"]["output"]
    assert tool["content"] == said + "\n\nnotes.txt changed"
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    twice = {**model, "parts": model["parts"] * 2}
    out = chat({**body, "contents": [*body["contents"][:-2], twice, {**answer, "parts": [part, again]}]})
    assert [m["content"] for m in out["messages"] if m["role"] == "tool"] == [said, "notes.txt changed"]
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    genai = client_request("genai-3.6-function-response")
    asked, reply = genai["contents"][-2:]
    pair = [*genai["contents"][:-2], {**asked, "parts": asked["parts"] * 2}, {**reply, "parts": reply["parts"] * 2}]
    out = chat({**genai, "contents": pair})
    tools = [m for m in out["messages"] if m["role"] == "tool"]
    assert [t["tool_call_id"] for t in tools] == [c["id"] for c in out["messages"][-3]["tool_calls"]]
    assert chat_rules.refusal("/v1/chat/completions", out) is None


# --- a structured output whose root is not an object ---------------------------------------


def _answered(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}


def _streamed(*pieces: str, finish: str = "stop") -> bytes:
    deltas = [{"role": "assistant", "content": ""}, *({"content": p} for p in pieces)]
    chunks = [{"choices": [{"index": 0, "delta": d}]} for d in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    return b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_google_genais_list_schema_goes_inside_an_object_openai_takes() -> None:
    """google-genai's ``response_schema=list[Recipe]`` (Google's own example): OpenAI refuses an
    array root ("schema must be a JSON Schema of 'type: "object"', got 'type: "array"'",
    podly-pure-podcasts/podly_pure_podcasts#89); the fakes of chat and Responses refuse it so."""
    request = client_request("genai-3.6-list-schema")
    before = {"type": "json_schema", "json_schema": {"name": "response", "schema": json_schema(
        request["generationConfig"]["responseSchema"])}}  # fmt: skip
    assert chat_rules.refusal("/v1/chat/completions", {"model": "gpt-4.1", "messages": [
        {"role": "user", "content": "hi"}], "response_format": before}) is not None  # fmt: skip
    out = chat(request)
    schema = out["response_format"]["json_schema"]["schema"]
    assert schema["type"] == "object" and schema["required"] == ["response"] and schema["additionalProperties"] is False
    assert schema["properties"]["response"] == before["json_schema"]["schema"]
    assert chat_rules.refusal("/v1/chat/completions", out) is None
    on_responses = default_translations().table["gemini", "responses"].request(request, TARGET)
    assert not isinstance(on_responses, Refusal)
    assert on_responses["text"]["format"]["schema"] == schema
    assert responses_rules.refusal("/v1/responses", on_responses) is None


def test_an_object_root_goes_as_it_was() -> None:
    out = chat(client_request("genai-3.6-stream-json-schema"))
    assert out["response_format"]["json_schema"]["schema"] == {"type": "object", "properties": {"answer": {"type": "string"}}}


@pytest.mark.parametrize("schema", [
    {"anyOf": [{"type": "string"}, {"type": "integer"}]},
    {"type": "object", "anyOf": [{"properties": {"a": {"type": "string"}}}]},
    {"type": "string", "enum": ["a", "b"]},
    {"type": ["object", "null"], "properties": {}},
])  # fmt: skip
def test_other_roots_openai_refuses_go_inside_an_object_too(schema: dict[str, Any]) -> None:
    out = chat(base(generationConfig={"responseMimeType": "application/json", "responseJsonSchema": schema}))
    assert out["response_format"]["json_schema"]["schema"]["properties"] == {"response": schema}
    assert chat_rules.refusal("/v1/chat/completions", {**out, "messages": [{"role": "user", "content": "hi"}]}) is None


def test_a_wrapped_schemas_definitions_stay_where_its_references_point() -> None:
    schema = {"type": "array", "items": {"$ref": "#/$defs/Recipe"},
              "$defs": {"Recipe": {"type": "object", "properties": {"name": {"type": "string"}}}}}  # fmt: skip
    out = chat(base(generationConfig={"responseMimeType": "application/json", "responseJsonSchema": schema}))
    sent = out["response_format"]["json_schema"]["schema"]
    assert sent["$defs"] == schema["$defs"] and sent["properties"]["response"] == {"type": "array",
                                                                                  "items": {"$ref": "#/$defs/Recipe"}}


def _resolve(root: dict[str, Any], ref: str) -> Any:
    node: Any = root
    for part in ref.removeprefix("#").split("/")[1:]:
        node = node[part]
    return node


def test_a_reference_to_the_root_still_means_the_schema_asked_for_once_wrapped() -> None:
    """A recursive list (``"$ref": "#"``): wrapped as it was, "#" meant the wrapper object, and
    a child had to be ``{"response": [...]}`` (review). The schema goes into ``$defs`` and its
    references to the root point there."""
    tree = {"type": "array", "items": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"$ref": "#"}, "first": {"$ref": "#/items"}}}}  # fmt: skip
    out = chat(base(generationConfig={"responseMimeType": "application/json", "responseJsonSchema": tree}))
    sent = out["response_format"]["json_schema"]["schema"]
    inner = _resolve(sent, sent["properties"]["response"]["$ref"])
    assert sent["required"] == ["response"] and inner["type"] == "array"
    children = inner["items"]["properties"]["children"]["$ref"]
    assert _resolve(sent, children) is inner
    assert _resolve(sent, inner["items"]["properties"]["first"]["$ref"]) is inner["items"]
    assert chat_rules.refusal("/v1/chat/completions", {**out, "messages": [{"role": "user", "content": "hi"}]}) is None
    named = {**tree, "$defs": {"response": {"type": "string"}, "Leaf": {"$ref": "#"}}}
    sent = root.wrapped(named)
    assert sent["$defs"]["response"] == {"type": "string"}  # the client's own definition stays
    assert _resolve(sent, sent["$defs"]["Leaf"]["$ref"]) == _resolve(sent, sent["properties"]["response"]["$ref"])


def test_the_answer_comes_out_of_the_wrapper_buffered_and_streamed() -> None:
    request = client_request("genai-3.6-list-schema")
    value = [{"recipe_name": "Shortbread", "ingredients": ["butter", "sugar", "flour"]}]
    wrapped = json.dumps({"response": value})
    doc = T.answer(_answered(wrapped), ctx(request))
    assert json.loads(doc["candidates"][0]["content"]["parts"][0]["text"]) == value
    docs = run_stream(_streamed(wrapped[:20], wrapped[20:]), ctx(request))
    check_grammar(docs)
    parts = [p for d in docs for p in d["candidates"][0]["content"]["parts"]]
    assert [json.loads(p["text"]) for p in parts] == [value]  # held to the end, one part
    assert docs[-1]["candidates"][0]["content"]["parts"] == parts


def test_an_enum_answer_comes_back_bare_as_gemini_answers_text_x_enum() -> None:
    request = client_request("genai-3.6-enum-schema")
    out = chat(request)
    assert out["response_format"]["json_schema"]["schema"]["properties"]["response"]["enum"][2] == "Woodwind"
    doc = T.answer(_answered('{"response": "Woodwind"}'), ctx(request))
    assert doc["candidates"][0]["content"]["parts"] == [{"text": "Woodwind"}]
    docs = run_stream(_streamed('{"response": ', '"Woodwind"}'), ctx(request))
    assert [p for d in docs for p in d["candidates"][0]["content"]["parts"]] == [{"text": "Woodwind"}]


def _cut_short(text: str) -> dict[str, Any]:
    return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}]}


def test_an_answer_cut_short_comes_back_as_the_value_as_far_as_it_goes() -> None:
    """finish_reason length: the text parses as nothing, and the client was sent the wrapper's
    opening with it, ``{"response": [{"recipe_name": "a", "ingr…`` (review)."""
    request = client_request("genai-3.6-list-schema")
    cut = '{"response": [{"recipe_name": "a", "ingr'
    doc = T.answer(_cut_short(cut), ctx(request))
    assert doc["candidates"][0]["content"]["parts"] == [{"text": '[{"recipe_name": "a", "ingr'}]
    assert doc["candidates"][0]["finishReason"] == "MAX_TOKENS"
    docs = run_stream(_streamed(cut[:20], cut[20:], finish="length"), ctx(request))
    assert [p for d in docs for p in d["candidates"][0]["content"]["parts"]] == [{"text": '[{"recipe_name": "a", "ingr'}]
    whole = '{"response": [{"recipe_name": "a"}]'  # cut short after the value, before the wrapper's end
    assert T.answer(_cut_short(whole), ctx(request))["candidates"][0]["content"]["parts"] == [
        {"text": '[{"recipe_name": "a"}]'}]  # fmt: skip
    enum = client_request("genai-3.6-enum-schema")
    assert T.answer(_cut_short('{"response": "Woodw'), ctx(enum))["candidates"][0]["content"]["parts"] == [
        {"text": "Woodw"}]  # fmt: skip


@pytest.mark.parametrize("value", ['[1e400, 0.10, 1E+2, -0.0]', '[{"name": "caf\\u00e9 \\ud83c\\udf70"}]',
                                   '[\n  {"a": 1.0}\n]'])  # fmt: skip
def test_the_value_comes_back_as_the_model_wrote_it(value: str) -> None:
    """Encoded again, 1e400 came back as Infinity (no JSON), 0.10 as 0.1, escapes as characters."""
    request = client_request("genai-3.6-list-schema")
    text = '{"response": ' + value + "}"
    assert T.answer(_answered(text), ctx(request))["candidates"][0]["content"]["parts"] == [{"text": value}]
    docs = run_stream(_streamed(text[:9], text[9:]), ctx(request))
    assert [p for d in docs for p in d["candidates"][0]["content"]["parts"]] == [{"text": value}]


def test_a_text_that_is_not_the_wrapper_comes_back_as_it_came() -> None:
    request = client_request("genai-3.6-list-schema")
    for text in ('[{"recipe_name": "x", "ingredients": []}]', "Sorry, I cannot.", '{"response": 1, "extra": 2}'):
        assert T.answer(_answered(text), ctx(request))["candidates"][0]["content"]["parts"] == [{"text": text}]
    plain = client_request("genai-3.6-stream-json-schema")
    assert T.answer(_answered('{"response": "x"}'), ctx(plain))["candidates"][0]["content"]["parts"] == [
        {"text": '{"response": "x"}'}]  # an object root was never wrapped


@pytest.mark.parametrize("text", ['{"response": ["a\tb"]}', '{"response": ["line1\nline2"]}'])
def test_a_raw_tab_or_newline_in_a_string_is_still_the_wrapper(text: str) -> None:
    """Strict JSON refuses a raw control character in a string; read as an answer cut short,
    ``{"response": ["a<TAB>b"]}`` came back as ``["a\tb"]}`` (review)."""
    request = client_request("genai-3.6-list-schema")
    value = text[len('{"response": '):-1]
    assert T.answer(_answered(text), ctx(request))["candidates"][0]["content"]["parts"] == [{"text": value}]
    docs = run_stream(_streamed(text[:9], text[9:]), ctx(request))
    assert [p for d in docs for p in d["candidates"][0]["content"]["parts"]] == [{"text": value}]


@pytest.mark.parametrize("finish", ["stop", "content_filter", "length"])
def test_a_wrapper_that_parses_as_nothing_is_the_value_as_far_as_it_goes(finish: str) -> None:
    """Not only an answer that ended for its length is cut short: a stop sequence (chat says
    ``stop`` for it) and a content filter cut it too, and the client was sent the wrapper's
    opening (review). A closed wrapper round a value that does not parse (a trailing comma)
    gives the value as the model wrote it, the wrapper's brace left out."""
    request = client_request("genai-3.6-list-schema")
    for text, value in (('{"response": [{"recipe_name": "a", "ingr', '[{"recipe_name": "a", "ingr'),
                        ('{"response": [{"recipe_name": "a"}', '[{"recipe_name": "a"}'),  # its own brace kept
                        ('{"response": [1, 2,]}', "[1, 2,]"), ('{"response": ["a}", 2,] }', '["a}", 2,]')):
        answered = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                 "finish_reason": finish}]}  # fmt: skip
        assert T.answer(answered, ctx(request))["candidates"][0]["content"]["parts"] == [{"text": value}]
        docs = run_stream(_streamed(text[:9], text[9:], finish=finish), ctx(request))
        assert [p for d in docs for p in d["candidates"][0]["content"]["parts"]] == [{"text": value}]
