"""An upstream whose answer is not of the kind its status or the request says, through the
gateway to the real openai and anthropic SDKs, on the client's own API and translated:

* a 200 whose body is an error document (OpenRouter's, once a model started): an error of the
  status it names, classified, retried and stamped like any, in the client's own shape;
* JSON to a request that streams (a server that ignores ``stream``): the client gets a stream;
* a stream to a request that does not (a server that always streams): the client gets one
  answer, collected from the stream.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from gateway.fake import ScenarioUpstream
from gateway.fake.scenarios import OPENROUTER_ERROR_200
from tests.fakeupstream import (
    Reply,
    Stream,
    anthropic_message,
    anthropic_stream,
    chat_completion,
    chunk,
    responses_stream,
    stream_events,
)
from tests.unit.translate.messages_helpers import corpus_answer, wire_stream

ON_CHAT = ", apis: [chat]"
RETRY_ONCE = "retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}}\n"
HI = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "Weather of a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}  # fmt: skip


def _openai(gw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)


def _anthropic(gw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)


def _error_200(doc: dict[str, Any] = OPENROUTER_ERROR_200) -> Reply:
    return Reply(200, doc)


def _chat_events(name: str) -> list[bytes]:
    wire = wire_stream(corpus_answer(name))
    return [e + b"\n\n" for e in wire.split(b"\n\n") if e and not e.startswith(b"data: [DONE]")]


# --- a 200 whose body is an error -----------------------------------------------------------


async def test_an_error_in_a_200_reaches_the_openai_sdk_as_the_502_it_names_body_kept(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE)
    gw.fake.script(_error_200(), _error_200())
    async with _openai(gw) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    e = caught.value
    assert e.status_code == 502 and e.response.json() == OPENROUTER_ERROR_200  # the provider's body, untouched
    headers = e.response.headers
    assert headers["x-llm-error-type"] == "provider_unavailable" and headers["x-llm-error-retryable"] == "true"
    assert headers["x-llm-attempts"] == "2" and headers["x-should-retry"] == "false"  # retried once, as configured


async def test_an_error_in_a_200_is_retried_and_the_next_answer_served(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE)
    gw.fake.script(_error_200(), Reply(200, chat_completion(content="Second time lucky.")))
    async with _openai(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content == "Second time lucky."
    assert raw.headers["x-llm-attempts"] == "2"


async def test_an_error_in_a_200_is_classified_by_the_status_it_names(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE)
    credits = {"error": {"code": 402, "message": "Insufficient credits"}}
    gw.fake.script(_error_200(credits))
    async with _openai(gw) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    assert caught.value.status_code == 402 and caught.value.response.headers["x-llm-error-type"] == "budget"
    assert caught.value.response.headers["x-llm-attempts"] == "1"  # a budget error is never retried


async def test_the_operators_key_refused_in_a_200_names_the_status_the_document_gives(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE, ", api_key: sk-operator")
    gw.fake.script(_error_200({"error": {"code": 401, "message": "No auth credentials found"}}))
    async with _openai(gw) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            await client.chat.completions.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    e = caught.value
    assert e.status_code == 502 and e.response.headers["x-llm-error-type"] == "auth"
    assert "upstream 'primary' (401)" in e.response.json()["error"]["message"]


async def test_an_error_in_a_200_reaches_the_anthropic_sdk_in_messages_shape_on_a_chat_upstream(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE, ON_CHAT)
    gw.fake.script(_error_200(), _error_200())
    async with _anthropic(gw) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model="claude-opus-4-8", max_tokens=64, messages=HI)  # type: ignore[arg-type]
    e = caught.value
    body = e.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "overloaded_error"
    assert body["error"]["message"] == "Provider returned error" and body["error"]["x_llm_error_type"] == "provider_unavailable"
    assert e.response.headers["x-llm-translated"] == "messages->chat"
    assert e.response.headers["x-llm-error-type"] == "provider_unavailable" and e.response.headers["x-llm-attempts"] == "2"


async def test_an_error_in_a_200_reaches_a_responses_client_on_a_chat_upstream_as_an_error(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE, ON_CHAT)
    gw.fake.script(_error_200(), _error_200())
    async with _openai(gw) as client:
        with pytest.raises(openai.InternalServerError) as caught:
            await client.responses.create(model="gpt-4o-mini", input="hi")
    assert caught.value.status_code == 502 and caught.value.response.headers["x-llm-translated"] == "responses->chat"


async def test_an_error_in_a_200_to_a_stream_request_is_an_error_before_any_event(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE, ON_CHAT)
    gw.fake.script(_error_200(), _error_200(), _error_200(), _error_200())
    async with _openai(gw) as client:
        with pytest.raises(openai.InternalServerError):
            await client.chat.completions.create(model="gpt-4o-mini", messages=HI, stream=True)  # type: ignore[arg-type]
    async with _anthropic(gw) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with client.messages.stream(model="claude-opus-4-8", max_tokens=64, messages=HI) as stream:  # type: ignore[arg-type]
                await stream.get_final_message()
    assert caught.value.status_code == 529


# --- JSON to a request that streams ---------------------------------------------------------


async def test_json_to_a_stream_reaches_the_openai_sdk_as_a_stream(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Reply(200, chat_completion(content="One piece.")))
    async with _openai(gw) as client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=HI, stream=True, stream_options={"include_usage": True})  # type: ignore[arg-type]
        chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "One piece."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_json_to_a_stream_reaches_the_anthropic_sdk_as_a_stream_translated_or_not(make_gateway) -> None:
    for upstream, answer in ((ON_CHAT, chat_completion(content="One piece.")),
                             ("", anthropic_message(text="One piece."))):  # fmt: skip
        gw = await make_gateway(upstream_yaml=upstream)
        gw.fake.script(Reply(200, answer))
        async with _anthropic(gw) as client, client.messages.stream(
                model="claude-opus-4-8", max_tokens=64, messages=HI) as stream:  # type: ignore[arg-type]  # fmt: skip
            kinds = [event.type async for event in stream]
            message = await stream.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert message.content[0].type == "text" and message.content[0].text == "One piece."
        assert message.stop_reason == "end_turn"


async def test_json_to_a_stream_reaches_a_responses_client_as_a_stream_on_a_chat_upstream(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=ON_CHAT)
    gw.fake.script(Reply(200, chat_completion(content="One piece.")))
    async with _openai(gw) as client:
        stream = await client.responses.create(model="gpt-4o-mini", input="hi", stream=True)
        events = [e async for e in stream]
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "One piece."


# --- a stream to a request that does not stream ---------------------------------------------


async def test_a_stream_to_a_buffered_request_reaches_the_openai_sdk_as_one_answer(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream(_chat_events("openai-gpt-4o-parallel-tools.stream.json")))
    async with _openai(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    assert raw.headers["Content-Type"].startswith("application/json")
    completion = raw.parse()
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [  # type: ignore[union-attr]
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"})]
    assert completion.choices[0].finish_reason == "tool_calls" and completion.usage is not None
    assert completion.usage.total_tokens == 209


async def test_a_stream_to_a_buffered_request_reaches_the_anthropic_sdk_as_one_message_on_a_chat_upstream(
    make_gateway,
) -> None:
    gw = await make_gateway(upstream_yaml=ON_CHAT)
    gw.fake.script(Stream(_chat_events("openai-gpt-4o-parallel-tools.stream.json")))
    async with _anthropic(gw) as client:
        raw = await client.messages.with_raw_response.create(
            model="claude-opus-4-8", max_tokens=256, tools=[WEATHER], messages=HI)  # type: ignore[arg-type, list-item]
    assert raw.headers["x-llm-translated"] == "messages->chat"
    assert raw.headers["Content-Type"].startswith("application/json")
    message = await raw.parse()
    assert message.stop_reason == "tool_use"
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [
        ("GetWeatherArgs", {"city": "Edinburgh", "country": "UK", "units": "c"}),
        ("get_stock_price", {"ticker": "AAPL", "exchange": "NASDAQ"})]
    assert message.usage.input_tokens == 149 and message.usage.output_tokens == 60


async def test_a_stream_to_a_buffered_request_reaches_the_sdks_as_one_answer_on_their_own_api(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream(anthropic_stream(words=("Many", " words.")), then="eof"),
                   Stream(responses_stream(words=("Many", " words.")), then="eof"))
    async with _anthropic(gw) as client:
        message = await client.messages.create(model="claude-opus-4-8", max_tokens=64, messages=HI)  # type: ignore[arg-type]
    assert message.content[0].type == "text" and message.content[0].text == "Many words."
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 15
    async with _openai(gw) as client:
        response = await client.responses.create(model="gpt-5-codex", input="hi")
    assert response.output_text == "Many words." and response.status == "completed"


async def test_an_error_event_in_a_stream_to_a_buffered_request_is_an_error(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE, ON_CHAT)
    broken = Stream([chunk({"role": "assistant", "content": "Hi"}),
                     {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}])  # fmt: skip
    gw.fake.script(broken, broken)
    async with _anthropic(gw) as client:
        with pytest.raises(anthropic.APIStatusError) as caught:
            await client.messages.create(model="claude-opus-4-8", max_tokens=64, messages=HI)  # type: ignore[arg-type]
    assert caught.value.response.headers["x-llm-error-type"] == "provider_unavailable"
    assert caught.value.response.json()["type"] == "error"


async def test_a_stream_cut_before_its_end_to_a_buffered_request_is_retried(make_gateway) -> None:
    gw = await make_gateway(RETRY_ONCE)
    gw.fake.script(Stream(stream_events("gpt-4o-mini")[:2], then="eof"),
                   Stream(stream_events("gpt-4o-mini", ("Whole",))))  # fmt: skip
    async with _openai(gw) as client:
        raw = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini", messages=HI)  # type: ignore[arg-type]
    assert raw.parse().choices[0].message.content == "Whole" and raw.headers["x-llm-attempts"] == "2"


# --- the scenario fake ----------------------------------------------------------------------


async def test_the_fakes_scenarios_for_these_answers(make_gateway) -> None:
    fake = await ScenarioUpstream().start()
    try:
        gw = await make_gateway(RETRY_ONCE, fake=fake)
        async with _openai(gw) as client:
            raw = await client.chat.completions.with_raw_response.create(model="gpt-4o-mini-error200", messages=HI)  # type: ignore[arg-type]
            assert raw.headers["x-llm-attempts"] == "2" and raw.parse().choices[0].message.content
            stream = await client.chat.completions.create(model="gpt-4o-mini-nostream", messages=HI, stream=True)  # type: ignore[arg-type]
            assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            answer = await client.chat.completions.create(model="gpt-4o-mini-alwaysstream", messages=HI)  # type: ignore[arg-type]
            assert answer.choices[0].message.content and answer.choices[0].finish_reason == "stop"
        async with _anthropic(gw) as client:
            message = await client.messages.create(model="claude-alwaysstream", max_tokens=64, messages=HI)  # type: ignore[arg-type]
            assert message.content[0].type == "text" and message.content[0].text
    finally:
        await fake.close()
