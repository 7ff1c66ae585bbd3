"""Chat-completions clients (and, through chat, Anthropic ones) on a Responses-only upstream
(``apis: [responses]``: OpenAI's Responses-only models, a server speaking only Responses),
through the whole app: the real openai and anthropic SDKs at stock settings against the
gateway, whose fake upstream answers in Responses shapes and refuses what the Responses API
refuses (gateway/fake/responses_rules.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.fake.tool_call import _responses_call
from gateway.sse import EventSplitter, parse_event
from tests.corpus_cases import load_cases
from tests.fakeupstream import Reply, Seq, Stream, response_object, responses_head, responses_stream
from tests.named_tools import DOTTED, named_tools, round_trip

CORPUS = Path(__file__).parents[1] / "corpus"
UPSTREAM = ", apis: [responses], model_map: {'*': gpt-5-codex}"
WEATHER = [{"type": "function", "function": {"name": "weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}]  # fmt: skip


@pytest.fixture
async def sdk() -> Any:
    made: list[Any] = []

    def make(gw: Any, kind: str = "openai") -> Any:
        if kind == "openai":
            made.append(openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client"))
        else:
            made.append(anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client"))
        return made[-1]

    yield make
    for c in made:
        await c.close()


def _call(stream: bool) -> Any:
    return _responses_call("gpt-5-codex", "w1", "weather", '{"location":"Florence"}', stream)


async def test_a_buffered_tool_round_with_the_openai_sdk(make_gateway, sdk) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(_call(stream=False))
    client = sdk(gw)
    messages: list[Any] = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather?"}]
    done = await client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, tools=WEATHER, max_tokens=500, reasoning_effort="low")
    first = done.parse()
    assert done.headers["x-llm-translated"] == "chat->responses"
    assert first.model == "gpt-4o" and first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls or []
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == (
        "call_w1", "weather", {"location": "Florence"})
    [sent] = gw.fake.responses_requests()
    body = sent.json()
    assert body["model"] == "gpt-5-codex" and body["instructions"] == "Be brief." and body["store"] is False
    assert body["tools"] == [{"type": "function", "name": "weather", "parameters": WEATHER[0]["function"]["parameters"],
                              "strict": False}]  # fmt: skip
    assert body["max_output_tokens"] == 500 and body["reasoning"] == {"effort": "low"}

    messages += [first.choices[0].message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]  # fmt: skip
    second = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=WEATHER)
    assert second.choices[0].message.content == "Hello from the fake upstream."
    assert second.choices[0].finish_reason == "stop" and second.usage is not None
    assert second.usage.prompt_tokens == 30 and second.usage.completion_tokens == 9
    items = gw.fake.responses_requests()[1].json()["input"]
    assert [i["type"] for i in items[-2:]] == ["function_call", "function_call_output"]
    assert items[-1] == {"type": "function_call_output", "call_id": "call_w1", "output": "sunny"}


async def test_a_streamed_tool_round_read_by_the_openai_sdk(make_gateway, sdk) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(_call(stream=True), Stream(responses_stream("gpt-5-codex"), then="eof"))
    client = sdk(gw)
    messages: list[Any] = [{"role": "user", "content": "Weather?"}]
    async with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=WEATHER,
                                              stream_options={"include_usage": True}) as s:  # fmt: skip
        first = await s.get_final_completion()
    [call] = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls" and call.id == "call_w1"
    assert json.loads(call.function.arguments) == {"location": "Florence"}
    assert first.usage is not None and first.usage.total_tokens == 39
    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]  # fmt: skip
    stream = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=WEATHER, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello from fake."
    sent = gw.fake.responses_requests()[1].json()
    assert sent["stream"] is True and "stream_options" not in sent


async def test_a_failed_response_mid_stream_ends_in_the_gateways_error_chunk(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    seq = Seq()
    failed = {**response_object("gpt-5-codex"), "status": "failed", "output": [],
              "error": {"code": "server_error", "message": "The model crashed."}}  # fmt: skip
    events = [*responses_head("gpt-5-codex", seq),
              seq("response.output_text.delta", item_id="msg_fake1", output_index=0, content_index=0, delta="Hel"),
              seq("response.failed", response=failed)]  # fmt: skip
    gw.fake.script(*[Stream(events, then="eof")] * 5)
    status, _, body = await gw.chat({"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    chunks = [parse_event(e) for e in EventSplitter().feed(body)]
    assert status == 200 and b"[DONE]" not in body
    last = chunks[-1].json()
    assert last["choices"][0]["finish_reason"] == "error" and "error" in last
    assert "".join(c.json()["choices"][0]["delta"].get("content") or "" for c in chunks[:-1]).startswith("Hel")


def _corpus_event(name: str) -> dict[str, Any]:
    [case] = [c for c in load_cases() if c["name"] == name]
    return dict(json.loads(case["body"].split("data: ", 1)[1]))


def _failed_response(outage: bool = False) -> dict[str, Any]:
    """A buffered Responses answer that failed: the response object of the corpus's real
    ``response.failed`` (tests/corpus/wild.json), which is what a non-streamed request gets
    in a 200. ``outage``: its error the Responses API's ``server_error`` code (openai-python
    ``types/responses/response_error.py``) with the message of the corpus's real overloaded
    stream error."""
    response = _corpus_event("openai-responses-stream-failed-context-length-exceeded")["response"]
    if outage:
        said = _corpus_event("openai-responses-stream-error-servers-overloaded")["message"]
        response["error"] = {"code": "server_error", "message": said}
    return {**response_object("gpt-5-codex"), **response, "output": [], "usage": None}


async def test_a_buffered_failed_response_is_the_error_it_names_for_a_chat_client(make_gateway, sdk) -> None:
    # Relayed as an answer, it reached the openai SDK as finish_reason "stop", content "" and
    # no usage, once: an empty turn where the provider said it had failed.
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    failed = _failed_response(outage=True)
    gw.fake.script(*[Reply(200, failed)] * 6)
    client = sdk(gw).with_options(max_retries=0)
    with pytest.raises(openai.InternalServerError) as caught:
        await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    got = caught.value.response
    assert got.headers["x-llm-error-type"] == "provider_unavailable"
    assert got.headers["x-llm-attempts"] == "6" and len(gw.fake.responses_requests()) == 6  # its class's retries
    err = got.json()["error"]
    assert err["code"] == "server_error" and err["message"].startswith("Our servers are currently overloaded")
    assert err["x_llm_upstream"]["body"] == {"error": failed["error"]}  # the provider's, nothing added


async def test_a_buffered_failed_response_of_an_overflow_is_an_overflow_for_chat_and_messages(
        make_gateway, sdk) -> None:  # fmt: skip
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(*[Reply(200, _failed_response())] * 4)
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk(gw).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.response.headers["x-llm-error-type"] == "context_overflow"
    assert caught.value.code == "context_length_exceeded"
    status, headers, body = await gw.messages()  # Messages → chat → Responses: the same answer
    assert status == 400 and headers["x-llm-error-type"] == "context_overflow"
    assert json.loads(body)["error"]["message"].startswith("prompt is too long")


async def test_a_buffered_failed_response_reaches_a_responses_client_as_it_came(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    failed = _failed_response(outage=True)
    gw.fake.script(Reply(200, failed))
    status, _, body = await gw.responses()
    assert status == 200 and json.loads(body) == failed and len(gw.fake.responses_requests()) == 1


async def test_claude_code_and_the_anthropic_sdk_on_a_responses_upstream(make_gateway, sdk) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(_call(stream=True))  # then the fake's own answers, buffered or streamed as asked
    client = sdk(gw, "anthropic")
    tools: Any = [{"name": "weather", "input_schema": WEATHER[0]["function"]["parameters"]}]
    messages: list[Any] = [{"role": "user", "content": "Weather?"}]
    async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=1024, messages=messages,
                                      tools=tools) as s:  # fmt: skip
        first = await s.get_final_message()
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and use.name == "weather" and use.input == {"location": "Florence"}
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}]
    second = await client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages, tools=tools)
    assert second.content[0].type == "text" and second.content[0].text == "Hello from the fake upstream."
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert [i["type"] for i in sent[1]["input"][-2:]] == ["function_call", "function_call_output"]
    assert sent[1]["input"][-1]["call_id"] == sent[1]["input"][-2]["call_id"]

    claude = json.loads((CORPUS / "requests" / "claude-code-2.1.197-bash-result.json").read_text())["body"]
    status, headers, body = await gw.messages({**claude, "stream": False})
    assert status == 200, body
    assert headers["x-llm-translated"] == "messages->responses"
    assert json.loads(body)["content"][0]["text"] == "Hello from the fake upstream."


async def test_a_reasoning_model_refusing_temperature_is_asked_again_without_it(make_gateway, sdk) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)  # gpt-5-codex: the fake refuses it as OpenAI does
    done = await sdk(gw).chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[{"role": "user", "content": "hi"}], temperature=0.2)
    assert done.parse().choices[0].message.content == "Hello from the fake upstream."
    assert "temperature" in done.headers["x-llm-params-dropped"]
    first, second = (r.json() for r in gw.fake.responses_requests())
    assert first["temperature"] == 0.2 and "temperature" not in second


async def test_a_failed_response_to_the_gateways_key_does_not_relay_the_operators_headers(make_gateway) -> None:
    """The failed answer's error goes the way every upstream error to the gateway's own key goes:
    without the provider's headers naming the operator's account (review: this path alone kept
    set-cookie, openai-organization and openai-project)."""
    operator = {"openai-organization": "org-operator", "openai-project": "proj_operator",
                "set-cookie": "__cf_bm=operator-session; path=/; HttpOnly"}  # fmt: skip
    gw = await make_gateway(upstream_yaml=UPSTREAM + ", api_key: upkey",
                            extra_yaml="retry: {provider_unavailable: {max_retries: 0}}\n")  # fmt: skip
    gw.fake.script(Reply(200, _failed_response(outage=True), operator))
    status, headers, _ = await gw.chat({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    assert status >= 500 and not {"openai-organization", "openai-project", "set-cookie"} & {k.lower() for k in headers}


# MCP tools as a chat server takes their names (vLLM, llama.cpp) and the Responses API does not
# (^[a-zA-Z0-9_-]{1,64}$: responses_rules.name_fault).
LONG = "mcp__" + "tracker_" * 8 + "issue"
NAMED_TOOLS = named_tools(LONG)


def _calls_first_tool(stream: bool) -> Any:
    """The model calling the first tool by the name the request gave it."""
    return lambda payload: _responses_call("gpt-5-codex", "n1", payload["tools"][0]["name"], '{"title":"Bug"}', stream)


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "streamed"])
async def test_tools_named_as_mcp_servers_name_them_round_trip_with_the_openai_sdk(
    make_gateway, sdk, stream: bool
) -> None:
    assert len(LONG) > 64
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(_calls_first_tool(stream), Stream(responses_stream("gpt-5-codex"), then="eof") if stream
                   else Reply(200, response_object("gpt-5-codex")))  # fmt: skip
    client = sdk(gw)
    second = await round_trip(client, NAMED_TOOLS, stream)
    assert second.choices[0].finish_reason == "stop" and second.choices[0].message.content
    sent = [r.json() for r in gw.fake.responses_requests()]
    assert len(sent) == 2
    names = [t["name"] for t in sent[0]["tools"]]
    assert all(n not in (DOTTED, LONG) and len(n) <= 64 for n in names)
    assert sent[0]["tool_choice"] == {"type": "function", "name": names[0]}
    assert [i["name"] for i in sent[1]["input"] if i["type"] == "function_call"] == [names[0]]
