"""An upstream whose answer is not of the kind its status says, through the gateway to the
real openai and anthropic SDKs, on the client's own API and translated: a 200 whose body is an
error document (OpenRouter's, once a model started) is an error of the status it names,
classified, retried and stamped like any, in the client's own shape.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from gateway.fake.scenarios import OPENROUTER_ERROR_200
from tests.fakeupstream import (
    Reply,
    chat_completion,
)

ON_CHAT = ", apis: [chat]"
RETRY_ONCE = "retry: {provider_unavailable: {max_retries: 1, base_delay_s: 0.01, max_delay_s: 0.01}}\n"
HI = [{"role": "user", "content": "hi"}]


def _openai(gw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)


def _anthropic(gw: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)


def _error_200(doc: dict[str, Any] = OPENROUTER_ERROR_200) -> Reply:
    return Reply(200, doc)


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
