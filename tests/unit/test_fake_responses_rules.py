"""The fake's Responses endpoint refuses a tool call and its output out of pair, as OpenAI does
and in its words (gateway/fake/responses_rules.py), and takes what OpenAI takes."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from gateway.fake import FakeUpstream, chat_rules
from gateway.fake.responses import response_object, responses_stream
from gateway.fake.responses_rules import issued, refusal, seal, unknown_previous
from gateway.fake.steps import Reply, Stream

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}


def call(i: str, kind: str = "function_call") -> dict[str, Any]:
    return {"type": kind, "call_id": i, "name": "f", **({"input": "x"} if kind == "custom_tool_call" else {"arguments": "{}"})}


def output(i: str, kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": i, "output": "ok"}


def refused(items: list[dict[str, Any]], **payload: Any) -> str | None:
    reply = refusal("/v1/responses", {"model": "m", "input": items, **payload})
    if reply is None:
        return None
    assert reply.status == 400 and reply.body["error"]["param"] == "input"
    return str(reply.body["error"]["message"])


@pytest.mark.parametrize(("items", "words"), [
    ([USER, output("call_1")], "No tool call found for function call output with call_id call_1."),
    ([USER, output("call_1"), call("call_1")], "No tool call found for function call output with call_id call_1."),
    ([USER, call("call_1")], "No tool output found for function call call_1."),
    ([USER, call("call_1"), call("call_2"), output("call_2")], "No tool output found for function call call_1."),
    ([USER, call("c", "custom_tool_call")], "No tool output found for function call c."),
])  # fmt: skip
def test_what_openai_refuses(items: list[dict[str, Any]], words: str) -> None:
    assert refused(items) == words


@pytest.mark.parametrize("items", [
    [USER],
    [USER, call("call_1"), call("call_2"), output("call_2"), output("call_1"), USER],
    [USER, call("c", "custom_tool_call"), output("c", "custom_tool_call_output")],
])  # fmt: skip
def test_what_openai_takes(items: list[dict[str, Any]]) -> None:
    assert refused(items) is None


def test_an_input_that_continues_a_stored_response_is_not_judged() -> None:
    # The call can be in the stored part.
    assert refused([output("call_1")], previous_response_id="resp_1") is None
    assert refused([output("call_1")], conversation="conv_1") is None
    assert refusal("/v1/responses", {"model": "m", "input": "hi"}) is None


def reasoning(value: Any) -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": value}


@pytest.mark.parametrize(("value", "org", "taken"), [
    ("gAAAAABpOpenAIsOwn==", None, True),  # a Fernet token the fake did not seal: not checkable here
    (None, None, True),
    ("llm-gateway.thinking.v1:W10", None, False),  # no OpenAI account reads the gateway's carriage
    ("", None, False),
    (seal("org-a"), "org-a", True),
    (seal("org-a"), "org-b", False),
    (seal("org-a"), None, False),
])
def test_encrypted_reasoning_is_read_only_by_the_organization_it_was_sealed_for(
    value: Any, org: str | None, taken: bool
) -> None:
    reply = refusal("/v1/responses", {"model": "m", "input": [USER, reasoning(value)]}, org)
    if taken:
        assert reply is None
        return
    assert reply is not None and reply.status == 400
    assert reply.body["error"] == {
        "message": "The encrypted content for item rs_1 could not be verified. Reason: Encrypted content could "
                   "not be decrypted or parsed.",
        "type": "invalid_request_error", "param": None, "code": "invalid_encrypted_content"}  # fmt: skip


def test_a_reasoning_item_without_its_content_names_a_record_kept_only_when_stored() -> None:
    bare = {"type": "reasoning", "id": "rs_9", "summary": []}
    assert refusal("/v1/responses", {"model": "m", "input": [USER, bare]}) is None
    reply = refusal("/v1/responses", {"model": "m", "input": [USER, bare], "store": False})
    assert reply is not None and reply.status == 404
    assert reply.body["error"]["message"].startswith("Item with id 'rs_9' not found. Items are not persisted")


@pytest.mark.parametrize("items", [[USER, call(""), output("")], [USER, call("call_1"), output("call_1"), output("")]])
def test_an_empty_call_id_is_refused(items: list[dict[str, Any]]) -> None:
    reply = refusal("/v1/responses", {"model": "m", "input": items})
    assert reply is not None and reply.status == 400
    n = next(i for i, item in enumerate(items) if item.get("call_id") == "")
    assert reply.body["error"] == {
        "message": f"Invalid 'input[{n}].call_id': empty string. Expected a string with minimum length 1, but got an "
                   "empty string instead.",
        "type": "invalid_request_error", "code": "empty_string", "param": f"input[{n}].call_id"}  # fmt: skip


def error_of(**payload: Any) -> dict[str, Any] | None:
    reply = refusal("/v1/responses", {"model": "m", "input": "hi", **payload})
    if reply is None:
        return None
    assert reply.status == 400
    return dict(reply.body["error"])


@pytest.mark.parametrize(("parameters", "taken"), [
    ({"type": "object"}, False),
    ({"type": "object", "additionalProperties": False}, False),
    ({"type": "object", "properties": {}}, True),
    ({"type": "object", "properties": {"filter": {"type": "object"}}}, True),
])  # fmt: skip
def test_a_function_object_schema_must_name_its_properties(parameters: dict[str, Any], taken: bool) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}},
             {"type": "function", "name": "list_things", "parameters": parameters, "strict": False}]  # fmt: skip
    assert error_of(tools=tools) == (None if taken else {
        "message": "Invalid schema for function 'list_things': In context=(), object schema missing properties.",
        "type": "invalid_request_error", "code": "invalid_function_parameters", "param": "tools[1].parameters"})


@pytest.mark.parametrize(("name", "error"), [
    ("mcp__github__search_code", None),
    ("get-weather_2", None),
    ("x" * 64, None),
    ("mcp__" + "s" * 67, {"message": "Invalid 'tools[1].name': string too long. Expected a string with maximum length "
                                     "64, but got a string with length 72 instead.",
                          "code": "string_above_max_length"}),
    ("files.read", {"message": "Invalid 'tools[1].name': string does not match pattern. Expected a string that "
                               "matches the pattern '^[a-zA-Z0-9_-]+$'.", "code": "invalid_value"}),
    ("mcp:tool", {"message": "Invalid 'tools[1].name': string does not match pattern. Expected a string that "
                             "matches the pattern '^[a-zA-Z0-9_-]+$'.", "code": "invalid_value"}),
])  # fmt: skip
def test_a_function_name_is_held_to_openais_pattern_and_length(name: str, error: dict[str, str] | None) -> None:
    """As chat's (``tools[N].function.name``), on the flat tool (openai/codex#1289 for the length
    on a Responses-only model, openai/openai-dotnet#441 for the pattern)."""
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}},
             {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}, "strict": False}]
    assert error_of(tools=tools) == (None if error is None else {
        **error, "type": "invalid_request_error", "param": "tools[1].name"})


@pytest.mark.parametrize(("value", "taken"), [(1, False), (15, False), (16, True), (None, True)])
def test_max_output_tokens_is_at_least_16(value: int | None, taken: bool) -> None:
    assert error_of(max_output_tokens=value) == (None if taken else {
        "message": f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got "
                   f"{value} instead.",
        "type": "invalid_request_error", "code": "integer_below_min_value", "param": "max_output_tokens"})


def test_a_chained_turn_is_refused_unless_its_project_stored_the_previous_response() -> None:
    """A stored response is its project's: another project's key, or an id never stored, gets
    OpenAI's 400 previous_response_not_found (responses_rules.py cites the words)."""
    stored: dict[str, set[str | None]] = {"resp_a1": {"proj-a"}}
    chained = {"model": "m", "input": "more", "previous_response_id": "resp_a1"}
    assert unknown_previous(chained, stored, "proj-a") is None
    assert unknown_previous({"model": "m", "input": "hi"}, stored, "proj-b") is None
    for project, payload in (("proj-b", chained), ("proj-a", {**chained, "previous_response_id": "resp_x"})):
        reply = unknown_previous(payload, stored, project)
        assert reply is not None and reply.status == 400
        rid = payload["previous_response_id"]
        assert reply.body == {"error": {"message": f"Previous response with id '{rid}' not found.",
                                        "type": "invalid_request_error", "param": "previous_response_id",
                                        "code": "previous_response_not_found"}}  # fmt: skip


def test_what_an_answer_stores_is_its_response_id_buffered_or_streamed() -> None:
    assert issued(Reply(200, response_object(rid="resp_7"))) == "resp_7"
    assert issued(Stream(responses_stream(rid="resp_8"))) == "resp_8"
    assert issued(Stream([{"type": "response.created", "response": {"id": "resp_9"}}])) == "resp_9"
    assert issued(Reply(400, {"error": {"message": "no"}})) is None
    assert issued(Reply(200, {"id": "chatcmpl-1", "object": "chat.completion"})) is None


async def test_the_fake_keeps_each_response_for_the_project_of_the_key_that_made_it() -> None:
    async with FakeUpstream() as fake, aiohttp.ClientSession() as http:
        fake.projects = {"sk-b2": "proj-b"}

        async def create(key: str, **body: Any) -> tuple[int, dict[str, Any]]:
            async with http.post(fake.url + "/responses", headers={"Authorization": f"Bearer {key}"},
                                 json={"model": "gpt-4o", "input": "hi", **body}) as r:  # fmt: skip
                return r.status, await r.json(content_type=None)

        _, first = await create("sk-a")
        _, second = await create("sk-a")
        assert first["id"] != second["id"]  # every answer its own id, as the API's
        assert (await create("sk-a", previous_response_id=first["id"]))[0] == 200
        status, refused = await create("sk-b", previous_response_id=first["id"])
        assert status == 400 and refused["error"]["code"] == "previous_response_not_found"
        _, by_b = await create("sk-b")
        assert (await create("sk-b2", previous_response_id=by_b["id"]))[0] == 400  # another project
        fake.projects["sk-b"] = "proj-b"
        _, shared = await create("sk-b")
        assert (await create("sk-b2", previous_response_id=shared["id"]))[0] == 200  # one project
        _, unstored = await create("sk-a", store=False)
        assert (await create("sk-a", previous_response_id=unstored["id"]))[0] == 400


@pytest.mark.parametrize(("model", "temperature", "taken"), [
    ("gpt-5", 0.1, False), ("gpt-5-codex", 0.2, False), ("o3", 0, False), ("gpt-5", 1, True), ("gpt-5", None, True),
    ("gpt-5-chat-latest", 0.2, True), ("gpt-4.1", 0.2, True),
])  # fmt: skip
def test_a_reasoning_model_takes_no_temperature_but_1(model: str, temperature: float | None, taken: bool) -> None:
    assert error_of(model=model, temperature=temperature) == (None if taken else {
        "message": "Unsupported parameter: 'temperature' is not supported with this model.",
        "type": "invalid_request_error", "code": "unsupported_parameter", "param": "temperature"})


ARRAY_ROOT = ("Invalid schema for response_format 'AdSegmentPredictionList': schema must be a JSON Schema of "
              "'type: \"object\"', got 'type: \"array\"'.")  # podly-pure-podcasts/podly_pure_podcasts#89


@pytest.mark.parametrize(("schema", "got"), [
    ({"type": "array", "items": {"type": "object", "properties": {}}}, 'type: "array"'),
    ({"type": "string", "enum": ["a"]}, 'type: "string"'),
    ({"anyOf": [{"type": "object", "properties": {}}]}, "type: None"),
    ({"type": "object", "properties": {}}, None),
])  # fmt: skip
def test_a_structured_outputs_root_must_be_an_object(schema: dict[str, Any], got: str | None) -> None:
    fmt = {"type": "json_schema", "name": "AdSegmentPredictionList", "schema": schema}
    expected = None if got is None else {"message": ARRAY_ROOT.replace('type: "array"', got),
                                         "type": "invalid_request_error", "code": None, "param": "text.format.schema"}
    assert error_of(text={"format": fmt}) == expected
    for strict in (True, False):  # with strict or without: chat_rules.py says why
        chat = chat_rules.refusal("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                  "response_format": {"type": "json_schema", "json_schema": {**fmt, "strict": strict}}})
        if got is None:
            assert chat is None or "schema must be" not in chat.body["error"]["message"]
        else:
            assert chat is not None and dict(chat.body["error"]) == {**expected, "param": "response_format"}
