"""The fake's chat endpoint refuses what OpenAI refuses in a conversation's shape, in OpenAI's
words (gateway/fake/chat_rules.py), and takes what OpenAI takes; and the translations to chat
(Messages, Responses and Gemini clients on a chat-only server) never send what it refuses."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gateway.fake import chat_rules, messages_rules
from gateway.translate import default_translations
from gateway.translate.base import Refusal, Target

PATH = "/v1/chat/completions"


def calls(*ids: str) -> dict[str, Any]:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids]}


def tool(i: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": i, "content": "ok"}


USER = {"role": "user", "content": "hi"}
BOTH_BUDGETS = "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported."


def refused(messages: list[dict[str, Any]]) -> tuple[str, str | None] | None:
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": messages})
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
    return reply.body["error"]["message"], reply.body["error"]["param"]


UNANSWERED = ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
              "'tool_call_id'. The following tool_call_ids did not have response messages: ")  # fmt: skip
ORPHAN = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."


@pytest.mark.parametrize(("messages", "expected"), [
    ([], ("[] is too short - 'messages'", None)),
    ([USER, calls("call_1")], (UNANSWERED + "call_1", "messages")),
    ([USER, calls("call_1", "call_2"), tool("call_2"), USER], (UNANSWERED + "call_1", "messages")),
    ([USER, tool("call_9")], (ORPHAN, "messages.[1].role")),
    ([USER, calls("call_1"), tool("call_1"), USER, tool("call_1")], (ORPHAN, "messages.[4].role")),
    # agno-agi/agno #5116: OpenAI's own error object for one call answered twice.
    ([USER, calls("call_1", "call_2"), tool("call_1"), tool("call_2"), tool("call_1")],
     ("Invalid parameter: Duplicate value for 'tool_call_id' of 'call_1', in messages[2] and messages[4].",
      "messages.[4].tool_call_id")),
])  # fmt: skip
def test_what_openai_refuses(messages: list[dict[str, Any]], expected: tuple[str, str | None]) -> None:
    assert refused(messages) == expected


@pytest.mark.parametrize("messages", [
    [USER],
    [USER, calls("call_1", "call_2"), tool("call_2"), tool("call_1"), {"role": "assistant", "content": "done"}],
    [USER, calls("call_1"), tool("call_1"), calls("call_1"), tool("call_1")],  # one id again in a later round
    [USER, calls("", ""), tool(""), tool("")],  # a turn calling twice with one id, answered by order
    [{"role": "system", "content": "s"}, USER, USER, {"role": "assistant", "content": "a"}],
])  # fmt: skip
def test_what_openai_takes(messages: list[dict[str, Any]]) -> None:
    assert refused(messages) is None


NULL = "Invalid value for 'content': expected a string, got null."
EMPTY = "empty array. Expected an array with minimum length 1, but got an empty array instead."


@pytest.mark.parametrize(("messages", "expected"), [
    ([{"role": "user", "content": None}], (NULL, "messages.[0].content", "")),
    ([USER, {"role": "assistant", "content": None}], (NULL, "messages.[1].content", "")),
    ([USER, calls("call_1"), {"role": "tool", "tool_call_id": "call_1", "content": None}],
     (NULL, "messages.[2].content", "")),
    ([{"role": "system", "content": None}, USER], (NULL, "messages.[0].content", "")),
    ([USER, {"role": "assistant", "content": None, "tool_calls": []}],
     (f"Invalid 'messages[1].tool_calls': {EMPTY}", "messages[1].tool_calls", "empty_array")),
    ([USER, {"role": "assistant", "content": "a", "tool_calls": []}],
     (f"Invalid 'messages[1].tool_calls': {EMPTY}", "messages[1].tool_calls", "empty_array")),
])  # fmt: skip
def test_null_content_and_empty_tool_calls(messages: list[dict[str, Any]], expected: tuple[str, str, str]) -> None:
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": messages})
    assert reply is not None and reply.status == 400
    error = reply.body["error"]
    assert (error["message"], error["param"], error["code"] or "") == expected


@pytest.mark.parametrize("messages", [
    [USER, calls("call_1"), tool("call_1")],  # content null beside tool_calls
    [USER, {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}],
    [USER, {"role": "assistant", "content": ""}],
    [USER, {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                 "function": {"name": "f", "arguments": "{}"}}]}, tool("c")],
])  # fmt: skip
def test_content_openai_takes(messages: list[dict[str, Any]]) -> None:
    assert refused(messages) is None


def test_an_empty_tools_list_is_refused() -> None:
    assert refused_with(tools=[]) == (f"Invalid 'tools': {EMPTY}", "tools", "empty_array")


def test_other_paths_are_not_judged_here() -> None:
    assert chat_rules.refusal("/v1/messages", {"messages": []}) is None


def refused_with(**payload: Any) -> tuple[str, str | None, str | None] | None:
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": [USER], **payload})
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["type"] == "invalid_request_error"
    return reply.body["error"]["message"], reply.body["error"]["param"], reply.body["error"]["code"]


# Claude Code's metadata.user_id, as a translation to chat might pass it on.
CLAUDE_CODE_USER = '{"device_id":"' + "d" * 64 + '","account_uuid":"","session_id":"' + "s" * 36 + '"}'


def test_user_is_at_most_64_characters() -> None:
    assert refused_with(user="u" * 64) is None
    assert refused_with(user=CLAUDE_CODE_USER) == (
        f"Invalid 'user': string too long. Expected a string with maximum length 64, but got a string with length "
        f"{len(CLAUDE_CODE_USER)} instead.", "user", "string_above_max_length")


def function(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}


PATTERN = ("Invalid 'tools[1].function.name': string does not match pattern. Expected a string that matches the "
           "pattern '^[a-zA-Z0-9_-]+$'.", "tools[1].function.name", "invalid_value")  # fmt: skip


@pytest.mark.parametrize(("name", "expected"), [
    ("todoist/find-tasks", PATTERN),
    ("mcp.search", PATTERN),
    ("get weather", PATTERN),
    ("", PATTERN),
    ("a" * 71, ("Invalid 'tools[1].function.name': string too long. Expected a string with maximum length 64, but "
                "got a string with length 71 instead.", "tools[1].function.name", "string_above_max_length")),
    ("mcp__todoist__find-tasks", None),
    ("a" * 64, None),
])  # fmt: skip
def test_function_names(name: str, expected: tuple[str, str, str] | None) -> None:
    assert refused_with(tools=[function("Bash"), function(name)]) == expected


def test_a_history_calls_function_name_is_held_to_the_same_pattern() -> None:
    """"Invalid 'messages[9].tool_calls[0].function.name': string does not match pattern. Expected
    a string that matches the pattern '^[a-zA-Z0-9_-]+$'." (param and code as quoted in
    mcp-use/mcp-use#94): a tool's name is checked in the history as in ``tools``."""
    dotted = {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "files.read", "arguments": "{}"}}]}
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": [USER, dotted, tool("c1"), USER]})
    assert reply is not None and reply.body["error"] == {
        "message": "Invalid 'messages[1].tool_calls[0].function.name': string does not match pattern. Expected a "
                   "string that matches the pattern '^[a-zA-Z0-9_-]+$'.", "type": "invalid_request_error",
        "param": "messages[1].tool_calls[0].function.name", "code": "invalid_value"}  # fmt: skip
    assert refused([USER, calls("c1"), tool("c1")]) is None


def test_function_parameters_with_a_type_json_schema_does_not_have() -> None:
    mistyped = {"type": "function", "function": {"name": "route", "parameters": {
        "type": "object", "properties": {"n": {"type": "array", "items": {"type": "INTEGER"}}}}}}  # fmt: skip
    assert refused_with(tools=[function("Bash"), mistyped]) == (
        "Invalid schema for function 'route': 'INTEGER' is not valid under any of the given schemas.",
        "tools[1].function.parameters", "invalid_function_parameters")


LONG_ID = "toolu_01A__gsig_" + "Q" * 76  # the gateway's own Gemini carrier: 92 characters


def test_a_tool_call_id_is_at_most_40_characters() -> None:
    assert refused([USER, calls("c" * 40), tool("c" * 40)]) is None
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": [USER, calls("call_1", LONG_ID), tool("call_1"),
                                                                 tool(LONG_ID)]})  # fmt: skip
    assert reply is not None and reply.body["error"] == {
        "message": "Invalid 'messages[1].tool_calls[1].id': string too long. Expected a string with maximum length "
                   "40, but got a string with length 92 instead.",
        "type": "invalid_request_error", "param": "messages[1].tool_calls[1].id", "code": "string_above_max_length"}


TOOLS = [function("Bash")]
OLD_WAY_OUT = "Please use /v1/responses instead."
NEW_WAY_OUT = "To use function tools, use /v1/responses or set reasoning_effort to 'none'."


def effort_refusal(model: str, way_out: str) -> tuple[str, str, None]:
    return (f"Function tools with reasoning_effort are not supported for {model} in /v1/chat/completions. "
            f"{way_out}", "reasoning_effort", None)  # fmt: skip


@pytest.mark.parametrize(("model", "payload", "expected"), [
    ("gpt-5.4", {"tools": TOOLS, "reasoning_effort": "high"}, effort_refusal("gpt-5.4", OLD_WAY_OUT)),
    ("gpt-5.4", {"tools": TOOLS}, None),  # its default effort is none
    ("gpt-5.4", {"tools": TOOLS, "reasoning_effort": "none"}, None),
    ("gpt-5.4", {"reasoning_effort": "high"}, None),  # no tools: effort taken
    ("gpt-5.4-mini", {"tools": TOOLS, "reasoning_effort": "low"}, effort_refusal("gpt-5.4-mini", OLD_WAY_OUT)),
    ("gpt-5.5", {"tools": TOOLS}, effort_refusal("gpt-5.5", OLD_WAY_OUT)),  # its own default refused
    ("gpt-5.6-terra", {"tools": TOOLS}, effort_refusal("gpt-5.6-terra", NEW_WAY_OUT)),
    ("gpt-5.6-terra", {"tools": TOOLS, "reasoning_effort": "medium"}, effort_refusal("gpt-5.6-terra", NEW_WAY_OUT)),
    ("gpt-5.6-terra", {"tools": TOOLS, "reasoning_effort": "none"}, None),
    ("gpt-5.2", {"tools": TOOLS, "reasoning_effort": "high"}, None),
    ("gpt-5", {"tools": TOOLS, "reasoning_effort": "high"}, None),
])  # fmt: skip
def test_gpt_5_4_and_later_refuse_effort_beside_function_tools(model: str, payload: dict[str, Any],
                                                              expected: tuple[str, str, None] | None) -> None:  # fmt: skip
    assert refused_with(**payload, model=model) == expected


STOP = ("Unsupported parameter: 'stop' is not supported with this model.", "stop", "unsupported_parameter")


@pytest.mark.parametrize(("model", "expected"), [
    ("o1-preview", STOP), ("o3", STOP), ("o3-pro", STOP), ("o4-mini-2025-04-16", STOP), ("gpt-5", STOP),
    ("gpt-5-mini", STOP), ("gpt-5.2", STOP), ("o3-mini", None), ("gpt-5-chat-latest", None), ("gpt-4o", None),
])  # fmt: skip
def test_reasoning_models_refuse_stop(model: str, expected: tuple[str, str, str] | None) -> None:
    assert refused_with(model=model, stop=["\n"]) == expected
    assert refused_with(model=model) is None


def unsupported(param: str) -> tuple[str, str, str]:
    return f"Unsupported parameter: '{param}' is not supported with this model.", param, "unsupported_parameter"


MAX_TOKENS = ("Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' "
              "instead.", "max_tokens", "unsupported_parameter")  # fmt: skip
TEMPERATURE = ("Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value "
               "is supported.", "temperature", "unsupported_value")  # fmt: skip


@pytest.mark.parametrize(("model", "payload", "expected"), [
    # One refused per answer, in this order: the knobs a Gemini client's request carries.
    ("gpt-5", {"max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "stop": ["END"]}, MAX_TOKENS),
    ("gpt-5", {"max_completion_tokens": 256, "temperature": 0.2, "top_p": 0.9, "stop": ["END"]}, TEMPERATURE),
    ("o3-mini", {"temperature": 1, "top_p": 1}, unsupported("top_p")),
    ("o1-preview", {"frequency_penalty": 0}, unsupported("frequency_penalty")),
    ("gpt-5-mini", {"presence_penalty": 0.5}, unsupported("presence_penalty")),
    ("gpt-5", {"max_completion_tokens": 256, "temperature": 1}, None),
    ("gpt-5-chat-latest", {"max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "presence_penalty": 1}, None),
    ("gpt-4o", {"max_tokens": 256, "temperature": 0.2, "top_p": 0.9, "frequency_penalty": 1}, None),
])  # fmt: skip
def test_reasoning_models_refuse_sampling_settings(model: str, payload: dict[str, Any],
                                                  expected: tuple[str, str, str] | None) -> None:  # fmt: skip
    assert refused_with(model=model, **payload) == expected


@pytest.mark.parametrize(("payload", "expected"), [
    ({"stop": ["a", "b", "c", "d", "e"]}, ("Invalid 'stop': array too long. Expected an array with maximum length 4, "
                                          "but got an array with length 5 instead.", "stop", "array_above_max_length")),
    ({"stop": ["a", "b", "c", "d"]}, None),
    ({"stop": "a"}, None),
    ({"tools": [function(f"t{i}") for i in range(129)]},
     ("Invalid 'tools': array too long. Expected an array with maximum length 128, but got an array with length 129 "
      "instead.", "tools", "array_above_max_length")),
    ({"tools": [function(f"t{i}") for i in range(128)]}, None),
    ({"stream_options": {"include_usage": True}},
     ("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", None)),
    ({"stream_options": {"include_usage": True}, "stream": False},
     ("The 'stream_options' parameter is only allowed when 'stream' is enabled.", "stream_options", None)),
    ({"stream_options": {"include_usage": True}, "stream": True}, None),
    ({"metadata": {"session": "s"}}, ("The 'metadata' parameter is only allowed when 'store' is enabled.", "metadata",
                                      None)),
    ({"metadata": {"session": "s"}, "store": True}, None),
    ({"parallel_tool_calls": False}, ("Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
                                      "when 'tools' are specified.", "parallel_tool_calls", None)),
    ({"tool_choice": "none"}, ("Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
                               "specified.", "tool_choice", None)),
    ({"tool_choice": "auto", "parallel_tool_calls": False, "tools": TOOLS}, None),
    ({"max_tokens": 1, "max_completion_tokens": 5000}, (BOTH_BUDGETS, "max_tokens", "invalid_parameter_combination")),
    ({"max_tokens": 1}, None),
    ({"max_completion_tokens": 5000}, None),
])  # fmt: skip
def test_what_openai_refuses_of_the_requests_fields(payload: dict[str, Any],
                                                    expected: tuple[str, str, str | None] | None) -> None:
    assert refused_with(**payload) == expected


def picture(url: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": url}}]}


@pytest.mark.parametrize(("url", "is_refused"), [
    ("data:image/heic;base64,AAAA", True), ("data:image/heif;base64,AAAA", True), ("data:image/avif;base64,AAAA", True),
    ("data:image/png;base64,iVBO", False), ("data:image/jpeg;base64,/9j/", False), ("data:image/jpg;base64,/9j/", False),
    ("data:image/webp;base64,UklG", False), ("data:image/gif;base64,R0lG", False), ("https://x/y.heic", False),
])  # fmt: skip
def test_image_types_openai_reads(url: str, is_refused: bool) -> None:
    reply = chat_rules.refusal(PATH, {"model": "m", "messages": [picture(url)]})
    if not is_refused:
        assert reply is None
        return
    assert reply is not None and reply.status == 400
    assert reply.body["error"] == {"message": "You uploaded an unsupported image. Please make sure your image has of one "
                                   "the following formats: ['png', 'jpeg', 'gif', 'webp'].",
                                   "type": "invalid_request_error", "param": None, "code": "invalid_image_format"}


def response_format(schema: dict[str, Any], strict: bool = True) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": strict, "schema": schema}}


def closed(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


STRING = {"type": "string"}
REQUIRED = "'required' is required to be supplied and to be an array including every key in properties. Missing 'b'."
CLOSED = "'additionalProperties' is required to be supplied and to be false."


@pytest.mark.parametrize(("schema", "context", "why"), [
    ({**closed(a=STRING, b=STRING), "required": ["a"]}, "()", REQUIRED),
    ({**closed(a=STRING, b=STRING), "required": None}, "()", "'required' is required to be supplied and to be an "
     "array including every key in properties. Missing 'a'."),
    ({"type": "object", "properties": {"a": STRING}, "required": ["a"]}, "()", CLOSED),
    (closed(user={"type": "object", "properties": {"a": STRING}, "required": ["a"]}), "('properties', 'user')", CLOSED),
    (closed(rows={"type": "array", "items": {**closed(a=STRING, b=STRING), "required": ["a"]}}),
     "('properties', 'rows', 'items')", REQUIRED),
    (closed(pick={"anyOf": [STRING, {**closed(b=STRING), "additionalProperties": True}]}),
     "('properties', 'pick', 'anyOf', 1)", CLOSED),
    ({**closed(user={"$ref": "#/$defs/User"}), "$defs": {"User": {**closed(a=STRING, b=STRING), "required": ["a"]}}},
     "('$defs', 'User')", REQUIRED),
])  # fmt: skip
def test_a_strict_schema_closes_and_requires_every_object(schema: dict[str, Any], context: str, why: str) -> None:
    assert refused_with(response_format=response_format(schema)) == (
        f"Invalid schema for response_format 'answer': In context={context}, {why}", "response_format", None)


@pytest.mark.parametrize("payload", [
    {"response_format": response_format(closed(a=STRING, user=closed(b=STRING), rows={"type": "array", "items": closed(c=STRING)}))},
    {"response_format": response_format({"type": "object", "properties": {"a": STRING}}, strict=False)},
    {"response_format": {"type": "json_object"}},
])  # fmt: skip
def test_schemas_openai_takes(payload: dict[str, Any]) -> None:
    assert refused_with(**payload) is None


NO_PROPERTIES = "Invalid schema for function 'list_things': In context=(), object schema missing properties."


@pytest.mark.parametrize(("parameters", "expected"), [
    # MCP's Go SDK declares a tool without arguments so; Claude Code passes it on as it came.
    ({"type": "object"}, (NO_PROPERTIES, "tools[1].function.parameters", "invalid_function_parameters")),
    ({"type": "object", "additionalProperties": False},
     (NO_PROPERTIES, "tools[1].function.parameters", "invalid_function_parameters")),
    ({"type": "object", "properties": {}}, None),
    # Only the top level is known refused: an object inside properties is taken without strict.
    ({"type": "object", "properties": {"filter": {"type": "object"}}}, None),
])  # fmt: skip
def test_a_function_object_schema_must_name_its_properties(parameters: dict[str, Any],
                                                           expected: tuple[str, str, str] | None) -> None:
    tools = [function("Bash"), {"type": "function", "function": {"name": "list_things", "parameters": parameters}}]
    assert refused_with(tools=tools) == expected


def strict_function(parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "search_documents", "strict": True, "parameters": parameters}}


@pytest.mark.parametrize(("parameters", "context", "why"), [
    (closed(body={"type": "object", "properties": {"q": STRING}, "required": ["q"]}), "('properties', 'body')", CLOSED),
    ({"type": "object", "properties": {"q": STRING}, "required": ["q"]}, "()", CLOSED),
    ({**closed(a=STRING, b=STRING), "required": ["a"]}, "()", REQUIRED),
])  # fmt: skip
def test_a_strict_function_closes_and_requires_every_object(parameters: dict[str, Any], context: str,
                                                            why: str) -> None:
    assert refused_with(tools=[strict_function(parameters)]) == (
        f"Invalid schema for function 'search_documents': In context={context}, {why}",
        "tools[0].function.parameters", "invalid_function_parameters")


def test_a_function_not_strict_takes_an_open_schema() -> None:
    open_schema = {"type": "object", "properties": {"body": {"type": "object", "properties": {"q": STRING}}}}
    tool = strict_function(open_schema)
    assert refused_with(tools=[{**tool, "function": {**tool["function"], "strict": False}}]) is None
    assert refused_with(tools=[strict_function(closed(body=closed(q=STRING)))]) is None


TRANSLATIONS = default_translations().table
TARGET = Target(model="qwen")
CLAUDE_CODE_BETA = {"anthropic-beta": "mid-conversation-system-2026-04-07"}


def _messages_conversation(r: random.Random) -> list[dict[str, Any]]:
    """What Anthropic takes: tool rounds answered in any order (with errors and text after the
    results), thinking, Claude Code's system turns (where Anthropic places one: after a user turn,
    before an assistant turn or last)."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": r.choice(["hi", [{"type": "text", "text": "hey"}]])}]
    for _ in range(r.randint(0, 7)):
        placed = msgs[-1]["role"] == "system"
        kind = r.choice(["assistant", "round"] if placed else ["user", "assistant", "round", "system"])
        if kind == "user":
            msgs.append({"role": "user", "content": "more"})
        elif kind == "assistant":
            msgs.append({"role": "assistant", "content": r.choice(["ok", [
                {"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "a"}]])})
        elif kind == "system":
            if msgs[-1]["role"] == "user":
                msgs.append({"role": "system", "content": "<reminder>"})
        else:
            # Some carry a Gemini thought signature (a conversation begun on a Gemini upstream).
            ids = [f"toolu_{r.randint(0, 99999)}" + ("__gsig_" + "Q" * r.randint(1, 120) if r.random() < 0.3 else "")
                   for _ in range(r.randint(1, 3))]  # fmt: skip
            lead = [{"type": "text", "text": "calling"}] if r.random() < 0.5 else []
            msgs.append({"role": "assistant", "content": [*lead, *({"type": "tool_use", "id": t, "name": "Bash",
                                                                    "input": {"c": "ls"}} for t in ids)]})
            results: list[dict[str, Any]] = [
                {"type": "tool_result", "tool_use_id": t, "content": r.choice(["ok", "(no output)", [{"type": "text", "text": "r"}]]),
                 **({"is_error": True} if r.random() < 0.2 else {})} for t in r.sample(ids, len(ids))]
            if r.random() < 0.3:
                results.append({"type": "text", "text": "also this"})
            msgs.append({"role": "user", "content": results})
    return msgs


def _responses_conversation(r: random.Random) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    for _ in range(r.randint(0, 6)):
        kind = r.choice(["user", "assistant", "round", "reasoning"])
        if kind == "user":
            items.append({"type": "message", "role": "user", "content": "more"})
        elif kind == "assistant":
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]})
        elif kind == "reasoning":
            items.append({"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}]})
        else:
            made = [{"type": "function_call", "call_id": f"call_{r.randint(0, 99999)}" + "x" * r.choice([0, 0, 40]),
                     "name": "f", "arguments": "{}"} for _ in range(r.randint(1, 3))]  # fmt: skip
            items.extend(made)
            items.extend({"type": "function_call_output", "call_id": c["call_id"], "output": "res"}
                         for c in r.sample(made, len(made)))  # fmt: skip
    return items


@pytest.mark.parametrize("seed", range(0, 2000, 500))
def test_a_conversation_anthropic_takes_is_sent_as_one_openai_takes(seed: int) -> None:
    translate = TRANSLATIONS["messages", "chat"]
    for k in range(seed, seed + 500):
        r = random.Random(k)
        payload = {"model": "claude-x", "max_tokens": 100, "messages": _messages_conversation(r),
                   "tools": [{"name": "Bash", "input_schema": {"type": "object"}}]}  # the rounds' tool
        assert messages_rules.refusal("/v1/messages", payload, CLAUDE_CODE_BETA) is None, k  # the generator's
        out = translate.request(payload, TARGET)
        assert not isinstance(out, Refusal), (k, out)
        assert chat_rules.refusal(PATH, out) is None, (k, payload["messages"], out["messages"])


@pytest.mark.parametrize("seed", range(0, 2000, 500))
def test_a_responses_conversation_is_sent_as_one_openai_takes(seed: int) -> None:
    translate = TRANSLATIONS["responses", "chat"]
    for k in range(seed, seed + 500):
        out = translate.request({"model": "m", "input": _responses_conversation(random.Random(k))}, TARGET)
        assert not isinstance(out, Refusal), (k, out)
        assert chat_rules.refusal(PATH, out) is None, (k, out["messages"])


def _gemini_contents(r: random.Random) -> list[dict[str, Any]]:
    """Google's pairing: a model turn's functionCalls answered by the next turn's
    functionResponses, by name and in order (role user or function), text around them."""
    contents: list[dict[str, Any]] = [{"role": "user", "parts": [{"text": "hi"}]}]
    for _ in range(r.randint(0, 6)):
        kind = r.choice(["user", "model", "round"])
        if kind == "user":
            contents.append({"role": "user", "parts": [{"text": "more"}, *_inline(r)]})
        elif kind == "model":
            contents.append({"role": "model", "parts": [{"text": "ok"}]})
        else:
            names = [r.choice("fgh") for _ in range(r.randint(1, 3))]
            lead = [{"text": "calling"}] if r.random() < 0.5 else []
            # Gemini CLI names each call itself (45 characters and more); google-genai sends no id.
            ids = [{"id": f"{n}-1759912345678-{r.getrandbits(52):013x}"} if r.random() < 0.5 else {} for n in names]
            contents.append({"role": "model", "parts": [*lead, *({"functionCall": {"name": n, "args": {"i": i}, **ids[i]}}
                                                                 for i, n in enumerate(names))]})  # fmt: skip
            answers = [{"functionResponse": {"name": n, "response": {"r": i}, **ids[i]}} for i, n in enumerate(names)]
            contents.append({"role": r.choice(["user", "function"]), "parts": [*answers, *_inline(r)]})
    return contents


def _inline(r: random.Random) -> list[dict[str, Any]]:
    """A file Gemini reads (Gemini CLI's read_file sends one after its functionResponse), or none."""
    mime = r.choice([None, None, "image/png", "image/jpeg", "image/jpg", "image/webp", "image/heic", "image/heif",
                     "application/pdf"])  # fmt: skip
    return [] if mime is None else [{"inlineData": {"mimeType": mime, "data": "AAAA"}}]


@pytest.mark.parametrize("seed", range(0, 2000, 500))
def test_a_gemini_conversation_is_sent_as_one_openai_takes(seed: int) -> None:
    translate = TRANSLATIONS["gemini", "chat"]
    for k in range(seed, seed + 500):
        out = translate.request({"contents": _gemini_contents(random.Random(k))}, TARGET)
        assert not isinstance(out, Refusal), (k, out)
        assert chat_rules.refusal(PATH, out) is None, (k, out["messages"])


@pytest.mark.parametrize("seed", range(0, 2000, 500))
def test_a_gemini_conversation_is_sent_as_one_anthropic_takes(seed: int) -> None:
    translate = TRANSLATIONS["gemini", "messages"]
    for k in range(seed, seed + 500):
        out = translate.request({"contents": _gemini_contents(random.Random(k))}, Target("claude-sonnet-4-5"))
        assert not isinstance(out, Refusal), (k, out)
        assert messages_rules.refusal("/v1/messages", out, {}) is None, (k, out["messages"])
