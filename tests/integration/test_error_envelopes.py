"""Errors the gateway makes, as the real SDKs read them (stock settings unless a test says why):
the exception class, the status, the envelope's ``type`` and code, and the request id."""

from __future__ import annotations

import openai

KEYED = "keys:\n  - {name: k1, key: ck-1, requests_per_minute: 1}\n"


async def test_a_key_over_its_requests_per_minute_is_openais_rate_limit_of_requests(make_gateway) -> None:
    gw = await make_gateway(KEYED)
    # No SDK retry: the 429 carries the minute's end as its wait, which the SDK would sleep.
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="ck-1", max_retries=0)
    try:
        await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        for create in (lambda: client.chat.completions.create(model="gpt-4o-mini",
                                                               messages=[{"role": "user", "content": "hi"}]),
                       lambda: client.responses.create(model="gpt-4o-mini", input="hi")):  # fmt: skip
            try:
                await create()
                raise AssertionError("expected a rate limit")
            except openai.RateLimitError as e:
                assert e.status_code == 429 and e.type == "requests" and e.code == "key_requests_per_minute"
                assert isinstance(e.body, dict) and "param" in e.body and e.body["param"] is None
                assert e.request_id == e.response.headers["x-request-id"] and e.request_id
    finally:
        await client.close()


async def test_a_missing_gateway_key_is_openais_401_invalid_request_error(make_gateway) -> None:
    gw = await make_gateway(KEYED)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="not-a-gateway-key")
    try:
        await client.responses.create(model="gpt-4o-mini", input="hi")
        raise AssertionError("expected a refusal")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.type == "invalid_request_error" and e.code == "invalid_client_key"
        assert e.request_id == e.response.headers["x-request-id"]
    finally:
        await client.close()


async def test_an_unreachable_upstream_is_openais_server_error(make_gateway) -> None:
    gw = await make_gateway(upstreams="  - {name: gone, base_url: 'http://127.0.0.1:9'}\n")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")
    try:
        await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except openai.InternalServerError as e:
        assert e.status_code == 502 and e.type == "server_error" and e.code == "upstream_unreachable"
        assert e.response.headers["x-should-retry"] == "false"  # the gateway retried already
    finally:
        await client.close()
