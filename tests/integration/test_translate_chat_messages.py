"""A chat-completions client on an Anthropic-only upstream, through the whole app: the real
openai SDK (async, stock settings) against the gateway, whose upstream speaks only Messages and
answers with real Anthropic bodies and streams from tests/corpus/answers/."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import BaseModel, Field

from gateway.fake.messages import sign
from gateway.fake.tool_call import _messages_call
from tests import images
from tests.fakeupstream import Reply, Stream, anthropic_message, anthropic_overflow, named_events
from tests.named_tools import DOTTED, named_tools, round_trip

CORPUS = Path(__file__).parents[1] / "corpus"
UPSTREAM = ", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-5}"


def answer(name: str) -> Any:
    return json.loads((CORPUS / "answers" / f"{name}.json").read_text())["body"]


def stream_of(name: str, then: str = "done") -> Stream:
    events = [e + b"\n\n" for e in answer(name).encode().strip().split(b"\n\n")]
    return Stream(events, then=then)


@pytest.fixture
async def clients() -> Any:
    made: list[openai.AsyncOpenAI] = []

    def make(gw: Any) -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client"))
        return made[-1]

    yield make
    for c in made:
        await c.close()


WEATHER = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]  # fmt: skip


async def test_buffered_tool_call_with_reasoning(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Reply(200, answer("messages-thinking-then-tool-use")))
    done = await clients(gw).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "system", "content": "Be brief."},
                                  {"role": "user", "content": "Weather in Florence?"}],
        tools=WEATHER, reasoning_effort="medium", max_completion_tokens=4096)  # fmt: skip
    completion = done.parse()
    assert done.headers["x-llm-translated"] == "chat->messages"
    assert completion.model == "gpt-4o" and completion.choices[0].finish_reason == "tool_calls"
    [tool_call] = completion.choices[0].message.tool_calls or []
    assert tool_call.function.name == "weather" and json.loads(tool_call.function.arguments) == {
        "location": "Florence, Italy"}
    assert completion.usage is not None and completion.usage.prompt_tokens == 424
    [sent] = gw.fake.messages_requests()
    body = sent.json()
    assert body["model"] == "claude-sonnet-4-5" and body["system"] == [{"type": "text", "text": "Be brief."}]
    # medium's 8,192, held to what leaves the answer max(1,024, a quarter) of 4,096 (thinking_room)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 3072} and body["max_tokens"] == 4096


async def test_streamed_tool_call_read_by_the_sdk_then_the_result_goes_back(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(stream_of("messages-stream-thinking-then-tool-use"),
                   stream_of("messages-stream-text-after-tool-result"))
    messages: list[Any] = [{"role": "user", "content": "Weather in Florence?"}]
    async with clients(gw).chat.completions.stream(
        model="gpt-4o", messages=messages, tools=WEATHER, stream_options={"include_usage": True}
    ) as s:
        first = await s.get_final_completion()
    message = first.choices[0].message
    [call] = message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls" and call.id.startswith("toolu_")
    assert "Florence" in getattr(message, "reasoning_content", "")
    assert first.usage is not None and first.usage.completion_tokens > 0
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
                 {"role": "tool", "tool_call_id": call.id, "content": "40 C"}]  # fmt: skip
    async with clients(gw).chat.completions.stream(model="gpt-4o", messages=messages, tools=WEATHER) as s:
        second = await s.get_final_completion()
    assert second.choices[0].message.content is not None and "40°C" in second.choices[0].message.content
    sent = gw.fake.messages_requests()[1].json()
    assert sent["messages"][1]["content"] == [{"type": "tool_use", "id": call.id, "name": "weather",
                                               "input": {"location": "Florence, Italy"}}]  # fmt: skip
    assert sent["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": call.id, "content": "40 C"}]


async def test_what_cannot_be_carried_is_a_400_in_the_chat_envelope_never_sent(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    with pytest.raises(openai.BadRequestError) as raised:
        await clients(gw).chat.completions.create(
            model="gpt-4o", n=2, messages=[{"role": "user", "content": "hi"}])
    assert "'n' > 1" in raised.value.message and gw.fake.requests == []


@pytest.mark.parametrize(("field", "value", "named"), [
    ("messages", [{"role": "user", "content": 5}], "'messages[0].content'"),
    ("tools", "x", "'tools'"),
    ("response_format", {"type": "json_schema", "json_schema": "x"}, "'response_format.json_schema'"),
])  # fmt: skip
async def test_a_field_of_the_wrong_json_type_is_a_400_in_the_chat_envelope_never_sent(
    make_gateway, clients, field: str, value: Any, named: str
) -> None:
    """It was a 500 internal_error (a crash in the translator), which the openai SDK retries."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    payload = {"model": "gpt-4o", "messages": [{"role": "user", "content": "my secret prompt"}], field: value}
    status, headers, body = await gw.chat(payload)
    assert status == 400 and headers["x-llm-error-type"] == "unknown" and headers["x-should-retry"] == "false"
    error = json.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_type"
    assert error["message"].startswith(f"Invalid type for {named}: expected ")
    assert gw.fake.requests == [] and b"secret" not in body
    with pytest.raises(openai.BadRequestError):  # the SDK's own reading: a 400, not retried
        await clients(gw).chat.completions.create(**payload)
    assert gw.fake.requests == []


async def test_a_stream_cut_mid_answer_ends_in_the_chat_error_chunk(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    cut = stream_of("messages-stream-text-after-tool-result", then="drop")
    cut.events = cut.events[:5]
    gw.fake.script(cut)
    status, _, body = await gw.chat({"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "x"}]})
    chunks = [json.loads(line[6:]) for line in body.decode().splitlines() if line.startswith("data: {")]
    assert status == 200 and b"[DONE]" not in body
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]).startswith("The current")
    assert chunks[-1]["choices"][0]["finish_reason"] == "error" and chunks[-1]["error"]["message"]


async def test_an_upstream_overflow_reads_as_the_chat_apis_overflow(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM, extra_yaml="compression: {enabled: false}\n")
    gw.fake.script(anthropic_overflow(200000, 215000))
    with pytest.raises(openai.BadRequestError) as raised:
        await clients(gw).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.code == "context_length_exceeded"


async def test_a_responses_client_reaches_a_messages_upstream_through_chat(make_gateway, clients) -> None:
    """Responses → chat → Messages: this translator as the second half of a composed pair."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(stream_of("messages-stream-sdk-text-then-tool"))
    tools: Any = [{"type": "function", "name": "get_weather", "parameters": {
        "type": "object", "properties": {"location": {"type": "string"}}}}]  # fmt: skip
    async with clients(gw).responses.stream(model="gpt-5-codex", input="Weather in Paris?", tools=tools) as s:
        final = await s.get_final_response()
    calls = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("get_weather", {"location": "Paris"})]
    assert "Paris" in final.output_text
    [sent] = gw.fake.messages_requests()
    assert sent.json()["tools"][0]["name"] == "get_weather" and sent.json()["model"] == "claude-sonnet-4-5"


def codex_compaction() -> dict[str, Any]:
    """Codex 0.169's compaction request as it sends it on a provider without remote compaction
    (seen through a recording proxy): its history as it was (here the captured exec round),
    ``tools: []``, no parallel calls, and the compaction prompt as the last user message."""
    body: dict[str, Any] = json.loads((CORPUS / "requests" / "codex-0.169-exec-result.json").read_text())["body"]
    body["input"].append({"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "It printed hi.", "annotations": []}]})  # fmt: skip
    body["input"].append({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "You are performing a CONTEXT CHECKPOINT COMPACTION."}]})  # fmt: skip
    return {**body, "tools": [], "parallel_tool_calls": False}


async def test_codex_compaction_after_a_tool_round_reaches_an_anthropic_upstream(make_gateway) -> None:
    """Anthropic refuses tool blocks in a request that declares no tools ("Requests which include
    `tool_use` or `tool_result` blocks must define tools.", anthropic-sdk-python #494), and the
    fake as well: Codex failed "pre-sampling compact" on every session that had run a tool."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    status, _, body = await gw.responses(codex_compaction())
    names = [n for n, _ in named_events(body)]
    assert status == 200 and names[-1] == "response.completed", body[-300:]
    [sent] = gw.fake.messages_requests()
    doc = sent.json()
    assert [t["name"] for t in doc["tools"]] == ["exec_command"] and doc["tool_choice"] == {"type": "none"}
    assert any(b["type"] == "tool_use" for m in doc["messages"] for b in m["content"])


async def test_function_call_history_beside_hosted_tools_only_reaches_an_anthropic_upstream(
    make_gateway, clients
) -> None:
    """Hosted tools are dropped on the way (a chat or Messages server cannot run them), which
    left a request with function_call history and no tools."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    done = await clients(gw).responses.create(model="gpt-5-codex", tools=[{"type": "web_search"}], input=[
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "user", "content": "Summarize."}])  # fmt: skip
    assert done.status == "completed" and done.output_text
    doc = gw.fake.messages_requests()[0].json()
    assert [t["name"] for t in doc["tools"]] == ["get_weather"] and doc["tool_choice"] == {"type": "none"}


async def test_a_chat_summary_request_without_tools_reaches_an_anthropic_upstream(make_gateway, clients) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    done = await clients(gw).chat.completions.create(model="gpt-4o", messages=[
        {"role": "user", "content": "Weather in Florence?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"location":"Florence"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "40 C"},
        {"role": "user", "content": "Summarize the conversation."}])  # fmt: skip
    assert done.choices[0].finish_reason == "stop" and done.choices[0].message.content
    assert gw.fake.messages_requests()[0].json()["tool_choice"] == {"type": "none"}


def no_argument_call() -> Stream:
    """Claude calling a tool without parameters: ``input: {}`` at the block's start and one
    empty ``input_json_delta``."""
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
         "model": "claude-sonnet-4-5", "content": [], "stop_reason": None,
         "usage": {"input_tokens": 50, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "toolu_01N", "name": "noargs", "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]  # fmt: skip
    return Stream([f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events])


async def test_a_streamed_call_without_arguments_reaches_responses_and_chat_clients_as_an_empty_object(
    make_gateway, clients
) -> None:
    """The openai SDK's ``responses.stream()`` parses a strict tool's arguments: it raised
    JSONDecodeError on the "" the stream gave (the buffered answer gave "{}")."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(no_argument_call(), no_argument_call())
    tools: Any = [{"type": "function", "name": "noargs", "strict": True,
                   "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}]  # fmt: skip
    async with clients(gw).responses.stream(model="gpt-5-codex", input="Call noargs.", tools=tools) as s:
        final = await s.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.arguments == "{}" and call.parsed_arguments == {}
    chat_tools: Any = [{"type": "function", "function": {"name": "noargs", "parameters": {"type": "object"}}}]
    async with clients(gw).chat.completions.stream(
        model="gpt-4o", messages=[{"role": "user", "content": "Call noargs."}], tools=chat_tools
    ) as cs:
        completion = await cs.get_final_completion()
    [chat_call] = completion.choices[0].message.tool_calls or []
    assert chat_call.function.arguments == "{}"


class Person(BaseModel):
    name: str = Field(min_length=1, description="Their full name")
    age: int = Field(ge=0, le=150)
    tags: list[str] = Field(max_length=5)


PERSON = {"name": "Ada Lovelace", "age": 36, "tags": ["math"]}


def sent_schema(gw: Any) -> dict[str, Any]:
    schema: dict[str, Any] = gw.fake.messages_requests()[-1].json()["output_config"]["format"]["schema"]
    return schema


def constraints_in_descriptions(schema: dict[str, Any]) -> None:
    props = schema["properties"]
    assert props["name"]["description"] == "Their full name\n\n{minLength: 1}" and "minLength" not in props["name"]
    assert props["age"]["description"] == "{maximum: 150, minimum: 0}" and "minimum" not in props["age"]
    assert props["tags"]["description"] == "{maxItems: 5}" and "maxItems" not in props["tags"]


async def test_a_pydantic_models_bounds_reach_claude_as_words_not_a_400_job_ops_654(make_gateway, clients) -> None:
    """`chat.completions.parse()` and `responses.parse()` with `Field(min_length=1)`, `ge`/`le`
    and a list's `max_length`: Anthropic's structured outputs refuse each ("For 'integer' type,
    property 'minimum' is not supported"), so every such call was a 400; the bounds now reach
    the model in the descriptions, as Anthropic's SDKs send them, and the SDK still checks the
    answer against the model."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Reply(200, anthropic_message(text=json.dumps(PERSON))),
                   Reply(200, anthropic_message(text=json.dumps(PERSON))))  # fmt: skip
    client = clients(gw)
    done = await client.chat.completions.parse(
        model="gpt-4o", messages=[{"role": "user", "content": "Who wrote the first program?"}], response_format=Person)
    assert done.choices[0].message.parsed == Person(**PERSON)
    constraints_in_descriptions(sent_schema(gw))
    answered = await client.responses.parse(model="gpt-5", input="Who wrote the first program?", text_format=Person)
    assert answered.output_parsed == Person(**PERSON)
    constraints_in_descriptions(sent_schema(gw))


async def test_a_gemini_response_schemas_bounds_reach_claude_as_words(make_gateway) -> None:
    """Gemini's `responseSchema` takes `minItems` (as a string), `maxItems` and `minimum`."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'gemini-*': claude-sonnet-4-5}")
    gw.fake.script(Reply(200, anthropic_message(text=json.dumps({"picks": ["a", "b"], "score": 3}))))
    schema = {"type": "OBJECT", "properties": {
        "picks": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": "2", "maxItems": "4"},
        "score": {"type": "INTEGER", "minimum": 1, "maximum": 5}}, "required": ["picks", "score"]}  # fmt: skip
    body = {"contents": [{"role": "user", "parts": [{"text": "Pick two."}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema}}  # fmt: skip
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent", json=body,
                               headers={"x-goog-api-key": "dummy"}) as r:  # fmt: skip
        assert r.status == 200, await r.text()
    props = sent_schema(gw)["properties"]
    assert props["picks"] == {"type": "array", "items": {"type": "string"}, "description": "{maxItems: 4, minItems: 2}"}
    assert props["score"] == {"type": "integer", "description": "{minimum: 1, maximum: 5}"}


async def test_a_call_cut_short_in_the_history_no_longer_fails_every_later_turn_openai_agents_2061(
    make_gateway, clients
) -> None:
    """A call whose arguments max_tokens cut short is valid history in OpenAI's APIs (arguments
    are an opaque string), and an agent replays it every turn: refused as "not valid JSON", its
    session could never go on. The text now goes in the call's input."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    client = clients(gw)
    cut = '{"command": "echo hi", '
    done = await client.chat.completions.create(model="gpt-4o", tools=[{"type": "function", "function": {
        "name": "shell", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}], messages=[
        {"role": "user", "content": "Say hi in the shell."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": cut}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "error: the arguments are not valid JSON"}])  # fmt: skip
    assert done.choices[0].message.content
    call = gw.fake.messages_requests()[-1].json()["messages"][1]["content"][0]
    assert call == {"type": "tool_use", "id": "call_1", "name": "shell", "input": {"unparsed_arguments": cut}}
    answered = await client.responses.create(model="gpt-5", input=[
        {"role": "user", "content": "Say hi in the shell."},
        {"type": "function_call", "call_id": "call_2", "name": "shell", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "call_2", "output": "error: the arguments are not valid JSON"}],
        tools=[{"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}, "strict": False}])  # fmt: skip
    assert answered.status == "completed" and answered.output_text
    assert gw.fake.messages_requests()[-1].json()["messages"][1]["content"][0]["input"] == {"unparsed_arguments": "{bad"}


async def test_a_pdf_from_a_responses_client_reaches_claude_as_a_document(make_gateway) -> None:  # type: ignore[no-untyped-def]
    """Anthropic reads PDFs; a Responses ``input_file`` with its data was refused on a Messages
    upstream (400 untranslatable_request), as on a chat one, whose servers read none."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-6}")
    pdf = "JVBERi0xLjQKJcOkw7zDtsOfCjEgMCBvYmoKPDwvVHlwZS9DYXRhbG9nPj4KZW5kb2JqCg=="
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        response = await client.responses.create(model="gpt-5-codex", input=[{"role": "user", "content": [
            {"type": "input_file", "filename": "report.pdf", "file_data": f"data:application/pdf;base64,{pdf}"},
            {"type": "input_text", "text": "Summarise it."}]}])  # fmt: skip
    finally:
        await client.close()
    assert response.output_text
    [sent] = gw.fake.messages_requests()
    assert sent.json()["messages"][0]["content"][0] == {
        "type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}}


JPEG = base64.b64encode(bytes.fromhex("ffd8ffe000104a464946000101")).decode()


async def test_images_from_the_openai_sdk_reach_claude_as_what_their_bytes_are_or_are_refused_when_too_big(
    make_gateway, clients
) -> None:
    """JPEG bytes sent as ``data:image/png`` (OpenAI reads them): Anthropic answered "Image does not
    match the provided media type image/png" (claude-code #15746), on that turn and every later
    one. An image over Anthropic's 5 MB of base64 ("image exceeds 5 MB maximum", lobehub #14711),
    which the gateway cannot resize, is refused before any call, naming the part; once answered
    and in the history, it goes as a note, so the session goes on."""
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    client = clients(gw)
    mislabelled = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{JPEG}"}}
    done = await client.chat.completions.create(model="gpt-4o", messages=[
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, mislabelled]}])  # fmt: skip
    assert done.choices[0].message.content
    [sent] = gw.fake.messages_requests()
    assert sent.json()["messages"][0]["content"][1]["source"]["media_type"] == "image/jpeg"
    big = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "iVBORw0K" + "A" * (5 << 20)}}
    convo: list[Any] = [{"role": "user", "content": [{"type": "text", "text": "And this?"}, big]}]
    with pytest.raises(openai.BadRequestError) as refused:
        await client.with_options(max_retries=0).chat.completions.create(model="gpt-4o", messages=convo)
    assert "messages[0].content[1]: the image is 5,242,888 bytes of base64, over the 5 MB" in str(refused.value)
    assert len(gw.fake.messages_requests()) == 1  # no call
    convo += [{"role": "assistant", "content": "It did not come through."}, {"role": "user", "content": "Never mind."}]
    assert (await client.chat.completions.create(model="gpt-4o", messages=convo)).choices[0].message.content
    assert "left out: its 5,242,888 bytes of base64" in json.dumps(gw.fake.messages_requests()[-1].json())


async def test_text_files_and_files_by_url_from_a_responses_client_reach_claude_as_documents(make_gateway) -> None:  # type: ignore[no-untyped-def]
    """Anthropic reads plain text and fetches a PDF by URL; a text ``input_file`` was refused
    naming chat's ``messages[0]`` and one by ``file_url`` as "cannot be fetched for this upstream"."""
    gw = await make_gateway(upstream_yaml=", apis: [messages], model_map: {'gpt-*': claude-sonnet-4-6}")
    notes = base64.b64encode(b"- ship it\n- test it").decode()
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        response = await client.responses.create(model="gpt-5", input=[{"role": "user", "content": [
            {"type": "input_file", "filename": "notes.txt", "file_data": f"data:text/plain;base64,{notes}"},
            {"type": "input_file", "file_url": "https://example.com/report.pdf"},
            {"type": "input_text", "text": "Compare them."}]}])  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            await client.responses.create(model="gpt-5", input=[{"role": "user", "content": [
                {"type": "input_file", "filename": "a.zip", "file_data": "data:application/zip;base64,UEsDBA=="}]}])
    finally:
        await client.close()
    assert response.output_text
    [sent] = gw.fake.messages_requests()
    assert sent.json()["messages"][0]["content"][:2] == [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "- ship it\n- test it"}},
        {"type": "document", "source": {"type": "url", "url": "https://example.com/report.pdf"}}]
    assert "input[0].content[0]: a document of type application/zip" in str(refused.value)


FABLE = ", apis: [messages], model_map: {'gpt-*': claude-fable-5-1}"
TOOL_CALL = {**anthropic_message(model="claude-fable-5-1"), "stop_reason": "tool_use", "content": [
    {"type": "tool_use", "id": "toolu_01", "name": "weather", "input": {"location": "Paris"}}]}  # fmt: skip
NEWS = {"type": "function", "function": {"name": "news", "parameters": {"type": "object", "properties": {}}}}


@pytest.mark.parametrize(("choice", "names"), [
    ("required", ["weather", "news"]),
    ({"type": "function", "function": {"name": "weather"}}, ["weather"]),
])  # fmt: skip
async def test_a_forced_tool_from_the_openai_sdk_reaches_claude_fable_5_1_as_auto(
    make_gateway, clients, choice: Any, names: list[str]
) -> None:
    """Fable and Mythos 5.1 refuse a forced tool on every request ("tool_choice: type "tool" and
    "any" are not supported for this model.", inspect_ai #5176), as the fake does: the openai
    SDK's `tool_choice="required"` or named function was a 400 on each call. It goes as `auto`
    (the tools narrowed to the named one), in one call, with the effort the forced choice used
    to cost, and without the temperature these models no longer take."""
    gw = await make_gateway(upstream_yaml=FABLE)
    gw.fake.script(Reply(200, TOOL_CALL))
    done = await clients(gw).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[*WEATHER, NEWS],
        tool_choice=choice, reasoning_effort="high", temperature=0.2, max_completion_tokens=8000)  # fmt: skip
    completion = done.parse()
    assert done.headers["x-llm-attempts"] == "1" and "x-llm-params-dropped" not in done.headers
    [call] = completion.choices[0].message.tool_calls or []
    assert completion.choices[0].finish_reason == "tool_calls" and call.function.name == "weather"
    [sent] = gw.fake.messages_requests()
    body = sent.json()
    assert body["model"] == "claude-fable-5-1" and body["tool_choice"] == {"type": "auto"}
    assert [t["name"] for t in body["tools"]] == names
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}
    assert "temperature" not in body


SONNET_55 = ", apis: [messages], model_map: {'gpt-*': claude-sonnet-5-5}"
LOOKUP = {"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}  # fmt: skip


def thought_then_call(plan: str) -> dict[str, Any]:
    """Claude's answer with a thinking block the fake signed (so it knows what it was bound to)."""
    return {**anthropic_message(model="claude-sonnet-5-5"), "stop_reason": "tool_use", "content": [
        {"type": "thinking", "thinking": plan, "signature": sign(plan)},
        {"type": "tool_use", "id": "toolu_01lookup", "name": "lookup", "input": {"q": "x"}}]}  # fmt: skip


@pytest.mark.parametrize(("forced", "reminder"), [
    (True, False),  # the forced turn's tools were narrowed to the one named; auto sends them all
    (False, True),  # a system message from mid-conversation joins the top-level system
    (True, True),  # the audit's case: both, as openai-agents' reset_tool_choice and a reminder do
])  # fmt: skip
async def test_thinking_replayed_to_a_model_that_binds_it_survives_the_prefix_the_gateway_rewrote(
    make_gateway, clients, forced: bool, reminder: bool
) -> None:
    """Claude Sonnet 5.5 (Fable 5.1 on, Opus and Haiku 5.5) takes a replayed thinking block only
    behind the system, tools and messages it was produced under ("The block is bound to a
    different conversation", a 400 on every later turn). The translation writes that prefix and
    changes it between turns by its own rules, which the client never sees: refused, the turn was
    sent again without thinking. The second turn asks Anthropic to drop such a block instead,
    with the beta that needs. The fake remembers the prefix each block it signed was produced
    under, and refuses it as Anthropic does."""
    gw = await make_gateway(upstream_yaml=SONNET_55)
    gw.fake.script(Reply(200, thought_then_call("Look it up first.")), Reply(200, anthropic_message("claude-sonnet-5-5")))
    client = clients(gw)
    messages: list[Any] = [{"role": "system", "content": "You are terse."},
                           {"role": "user", "content": "look up x then the weather"}]  # fmt: skip
    choice: Any = {"type": "function", "function": {"name": "lookup"}} if forced else "auto"
    first = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=[*WEATHER, LOOKUP],
                                                 tool_choice=choice, reasoning_effort="high")  # fmt: skip
    said = first.choices[0].message.model_dump(exclude_none=True)
    assert said["thinking_blocks"] and said["tool_calls"]
    messages += [said, {"role": "tool", "tool_call_id": said["tool_calls"][0]["id"], "content": "x=1"}]
    if reminder:
        messages.append({"role": "system", "content": "Reminder: answer in French."})
    second = await client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=[*WEATHER, LOOKUP], tool_choice="auto", reasoning_effort="high")
    assert second.parse().choices[0].message.content
    # Refused, the turn went again with its thinking left out and thinking off (reasoning_fix):
    # two calls and no thinking on every later turn of the session.
    assert second.headers["x-llm-attempts"] == "1" and "x-llm-reasoning-dropped" not in second.headers
    turn1, turn2 = gw.fake.messages_requests()
    assert "block_binding" not in turn1.json()["thinking"]  # nothing replayed yet
    body = turn2.json()
    assert body["messages"][1]["content"][0] == {"type": "thinking", "thinking": "Look it up first.",
                                                 "signature": sign("Look it up first.")}  # fmt: skip
    assert body["thinking"] == {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}}
    assert turn2.headers["anthropic-beta"] == "thinking-binding-controls-2026-08-01"


OPUS_5 = ", apis: [messages], model_map: {'gpt-*': claude-opus-5}"
OPUS_45 = ", apis: [messages], model_map: {'gpt-*': claude-opus-4-5-20251101}"


async def test_150_screenshots_reach_claude_opus_5_whole_and_no_thinking_stays_off(make_gateway, clients) -> None:
    """Anthropic's vision guide takes "up to 600 for API requests (100 for models with a 200k-token
    context window)", and Opus 5's is 1M: 150 small PNGs from the openai SDK reached it as 100
    images and 50 notes (audit). And `reasoning_effort: "none"` went without `thinking`, which on
    Opus 5 thinks ("pass thinking: {type: "disabled"}", its migration guide)."""
    gw = await make_gateway(upstream_yaml=OPUS_5)
    shot = {"type": "image_url", "image_url": {"url": images.data_url("image/png", images.png(10, 10))}}
    convo: list[Any] = [{"role": "user", "content": [shot] * 150}, {"role": "assistant", "content": "Seen."},
                        {"role": "user", "content": "Which one is red?"}]  # fmt: skip
    done = await clients(gw).chat.completions.create(model="gpt-4o", messages=convo, reasoning_effort="none")
    assert done.choices[0].message.content
    [sent] = gw.fake.messages_requests()
    body = sent.json()
    assert [b["type"] for b in body["messages"][0]["content"]] == ["image"] * 150
    assert body["thinking"] == {"type": "disabled"} and "output_config" not in body


async def test_opus_4_5_gets_the_clients_effort_with_its_beta_a_forced_tool_too(make_gateway, clients) -> None:
    """Claude Opus 4.5 takes `output_config.effort` behind `anthropic-beta: effort-2025-11-24`
    (the claude-code Opus 4.5 migration skill's effort.md), with or without thinking: a chat
    client's effort never reached it. A forced tool drops thinking, not the effort."""
    gw = await make_gateway(upstream_yaml=OPUS_45)
    gw.fake.script(Reply(200, anthropic_message(model="claude-opus-4-5-20251101")), Reply(200, TOOL_CALL))
    client = clients(gw)
    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}],
                                         reasoning_effort="medium", max_completion_tokens=8000)  # fmt: skip
    await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Weather?"}],
                                         tools=WEATHER, tool_choice="required", reasoning_effort="low")  # fmt: skip
    first, second = gw.fake.messages_requests()
    assert first.json()["thinking"]["type"] == "enabled" and first.json()["output_config"] == {"effort": "medium"}
    assert "thinking" not in second.json() and second.json()["output_config"] == {"effort": "low"}
    for sent in (first, second):
        assert sent.headers["anthropic-beta"] == "effort-2025-11-24"


# MCP tools as a chat server takes their names (vLLM, llama.cpp) and Anthropic does not
# (^[a-zA-Z0-9_-]{1,128}$: messages_rules.py).
LONG = "mcp__" + "tracker_" * 16 + "issue"
NAMED_TOOLS = named_tools(LONG)


def _calls_first_tool(stream: bool) -> Any:
    """The model calling the first tool by the name the request gave it."""
    return lambda payload: _messages_call("claude-sonnet-4-5", "msg_n1", "toolu_n1", payload["tools"][0]["name"],
                                          {"title": "Bug"}, stream)  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
async def test_tools_named_as_mcp_servers_name_them_round_trip_with_the_openai_sdk(
    make_gateway, clients, stream: bool
) -> None:
    assert len(LONG) > 128
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(_calls_first_tool(stream), Reply(200, anthropic_message()))
    client = clients(gw)
    second = await round_trip(client, NAMED_TOOLS, stream)
    assert second.choices[0].message.content == "Hello from the fake upstream."
    sent = [r.json() for r in gw.fake.messages_requests()]
    assert len(sent) == 2
    names = [t["name"] for t in sent[0]["tools"]]
    assert all(n not in (DOTTED, LONG) and len(n) <= 128 for n in names)
    assert sent[0]["tool_choice"] == {"type": "tool", "name": names[0]}
    assert [b["name"] for m in sent[1]["messages"] for b in m["content"] if b["type"] == "tool_use"] == [names[0]]
