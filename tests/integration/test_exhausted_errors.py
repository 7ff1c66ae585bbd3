"""When every attempt of a stream fails before anything visible, the answer is an ordinary
error in the client's own API's envelope, read with the real SDKs: a typed error class,
``type``, ``code``, ``x_llm_error_type`` / ``retryable``, nothing internal leaked."""

import json

import anthropic
import openai

from tests.fakeupstream import Stream, anthropic_head, chunk, responses_head, sse

TRIES = 6  # 1 + provider_unavailable.max_retries (5): every attempt gets the same failure


def responses_failed() -> Stream:
    failed = sse("response.failed", {"type": "response.failed", "sequence_number": 4, "response": {
        "id": "resp_x", "status": "failed", "error": {"code": "server_error", "message": "An error occurred."}}})
    return Stream([*responses_head(), failed], then="eof")


async def test_a_responses_stream_failing_every_time_ends_in_the_responses_envelope(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(*(responses_failed() for _ in range(TRIES)))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        await client.responses.create(model="gpt-5-codex", input="hi", stream=True)
        raise AssertionError("expected an error")
    except openai.InternalServerError as e:
        assert e.status_code == 500 and e.type == "server_error" and e.code == "server_error"
        err = e.body if isinstance(e.body, dict) else {}
        assert set(err) >= {"message", "type", "param", "code"} and "status" not in err
        assert err["message"] == "An error occurred."
        assert err["x_llm_error_type"] == "provider_unavailable" and err["retryable"] is True
        assert e.response.headers["x-llm-error-type"] == "provider_unavailable"
    finally:
        await client.close()
    assert len(gw.fake.responses_requests()) == TRIES


async def test_a_responses_error_event_every_time_ends_in_the_responses_envelope(make_gateway) -> None:
    gw = await make_gateway()
    error = sse("error", {"type": "error", "sequence_number": 2, "code": "rate_limit_exceeded",
                          "message": "Rate limit reached for requests", "param": None})
    gw.fake.script(*(Stream([*responses_head()[:2], error], then="eof") for _ in range(4)))  # 1 + 3 retries
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        await client.responses.create(model="gpt-5-codex", input="hi", stream=True)
        raise AssertionError("expected an error")
    except openai.RateLimitError as e:
        assert e.type == "requests" and e.code == "rate_limit_exceeded" and isinstance(e.body, dict)
        assert e.body["x_llm_error_type"] == "rate_limit" and "status" not in e.body
    finally:
        await client.close()


async def test_a_chat_stream_failing_every_time_ends_in_the_chat_envelope(make_gateway) -> None:
    gw = await make_gateway()
    # OpenRouter's mid-stream error shape: a numeric code, no type.
    failing = Stream([chunk({"role": "assistant", "content": ""}),
                      {"error": {"code": 502, "message": "Provider returned error"}}], then="eof")
    gw.fake.script(*(failing for _ in range(TRIES)))
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        await client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                             messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except openai.APIStatusError as e:
        assert e.status_code == 502 and e.type == "server_error"
        assert isinstance(e.body, dict) and e.body["message"] == "Provider returned error"
        assert e.body["x_llm_error_type"] == "provider_unavailable" and e.body["retryable"] is True
    finally:
        await client.close()


async def test_a_malformed_first_event_every_time_leaks_no_internal_status(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(*(Stream([b"data: {not json\n\n"], then="eof") for _ in range(TRIES)))
    status, _, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                     "messages": [{"role": "user", "content": "hi"}]})
    err = json.loads(body)["error"]
    assert status == 502 and err["code"] == "malformed_event" and "status" not in err
    assert err["type"] == "server_error" and err["x_llm_error_type"] == "provider_unavailable"


async def test_a_messages_stream_overloaded_every_time_ends_in_the_messages_envelope(make_gateway) -> None:
    gw = await make_gateway()
    overloaded = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    gw.fake.script(*(Stream([*anthropic_head()[:2], overloaded], then="eof") for _ in range(TRIES)))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    try:
        await client.messages.create(model="claude-x", max_tokens=10, stream=True,
                                     messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except anthropic.APIStatusError as e:
        assert e.status_code == 529 and isinstance(e.body, dict)
        assert e.body["type"] == "error" and e.body["error"]["type"] == "overloaded_error"
        assert e.body["error"]["message"] == "Overloaded" and e.body["request_id"] == e.response.headers["x-request-id"]
        assert e.body["error"]["x_llm_error_type"] == "provider_unavailable"
    finally:
        await client.close()
