"""Errors the gateway makes, as the real SDKs read them (stock settings unless a test says why):
the exception class, the status, the envelope's ``type`` and code, and the request id."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic._error_classes import ERROR_CLASSES
from anthropic.types.beta_request_body_timeout_error import BetaRequestBodyTimeoutError
from anthropic.types.shared import RequestBodyEncodingInvalidError, RequestBodyEncodingUnsupportedError

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import FakeUpstream, Reply, Stream, anthropic_message, chunk, responses_overflow
from tests.integration.conftest import same_minute

KEYED = "keys:\n  - {name: k1, key: ck-1, requests_per_minute: 1}\n"


async def test_a_key_over_its_requests_per_minute_is_openais_rate_limit_of_requests(make_gateway) -> None:
    gw = await make_gateway(KEYED)
    await same_minute()  # the key's one request of this minute, then refusals
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


# --- credentials the gateway sent, refused by the provider ----------------------------------


def _no_key_in(body: bytes) -> None:
    # The fake quotes a refused key as OpenAI does ("Incorrect API key provided: fak***-s1").
    assert b"***" not in body and b"Incorrect API key" not in body and b"fak" not in body


def _case(name: str) -> Reply:
    case = next(c for c in IN_SAMPLE if c["name"] == name)
    return Reply(case["status"], case["body"])


@pytest.mark.parametrize(("upstream", "refusal", "said"), [
    (", apis: [gemini], api_key: k-gemini, model_map: {'claude-*': gemini-2.5-pro}",
     "gemini-400-user-location-not-supported-is-auth",
     "the provider does not serve the place the gateway calls upstream 'primary' (400) from, not your key: "
     "the gateway's operator must call it from a region the provider serves"),
    (", apis: [responses], api_key: k-openai, model_map: {'claude-*': gpt-5}",
     "openai-400-org-not-verified-to-stream-is-auth",
     "the provider wants the organization behind the gateway's own credentials for upstream 'primary' (400) "
     "verified for this model, not yours: the gateway's operator must verify it"),
])  # fmt: skip
async def test_a_refusal_of_the_gateways_place_or_organization_says_so_not_fix_its_key(
    make_gateway, upstream: str, refusal: str, said: str
) -> None:
    """Gemini's "User location is not supported for the API use." and OpenAI's "Your organization
    must be verified to stream this model" hold no key: the client read "the gateway's operator
    must fix its api_key" for both (audit). Still the gateway's 502, class auth."""
    gw = await make_gateway(upstream_yaml=upstream)
    gw.fake.script(_case(refusal))
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=10, messages=[{"role": "user",
                                                                                         "content": "hi"}])
        raise AssertionError("expected an error")
    except anthropic.InternalServerError as e:
        assert e.status_code == 502 and e.response.headers["x-llm-error-type"] == "auth"
        assert isinstance(e.body, dict) and e.body["error"]["code"] == "upstream_auth"
        assert e.body["error"]["message"] == said
    finally:
        await client.close()


async def test_an_upstream_refusing_the_operators_key_is_a_502_without_the_providers_body(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", api_key: fake-key-s1")
    gw.fake.keys.revoke("fake-key-s1")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")
    try:
        await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except openai.InternalServerError as e:
        assert e.status_code == 502 and e.type == "server_error" and e.code == "upstream_auth"
        assert e.response.headers["x-llm-error-type"] == "auth" and e.response.headers["x-should-retry"] == "false"
        _no_key_in(e.response.content)
    finally:
        await client.close()
    assert len(gw.fake.chat_requests()) == 1  # neither the gateway nor the SDK tried again

    anthropic_client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        await anthropic_client.messages.create(model="claude-sonnet-4-6", max_tokens=10,
                                               messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except anthropic.InternalServerError as e:
        assert e.status_code == 502 and e.type == "api_error" and isinstance(e.body, dict)
        assert e.body["error"]["code"] == "upstream_auth" and e.request_id == e.body["request_id"]
        _no_key_in(e.response.content)
    finally:
        await anthropic_client.close()


async def test_a_clients_own_key_refused_keeps_the_providers_401(make_gateway) -> None:
    gw = await make_gateway()  # no api_key, no gateway keys: the client's key goes upstream
    gw.fake.keys.revoke("sk-client-own")
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client-own")
    try:
        await client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.code == "invalid_api_key"  # the provider's own
    finally:
        await client.close()


async def test_a_pool_whose_every_key_is_refused_answers_502_not_401(make_gateway) -> None:
    fakes = [await FakeUpstream().start() for _ in range(2)]
    try:
        ups = "".join(f"  - {{name: r{i}, base_url: '{f.url}', api_key: fake-key-r{i}, models: ['gpt-*']}}\n"
                      for i, f in enumerate(fakes))  # fmt: skip
        for i, f in enumerate(fakes):
            f.keys.revoke(f"fake-key-r{i}")
        gw = await make_gateway("pools:\n  - {name: revp, models: ['gpt-*'], deployments: [r0, r1]}\n",
                                fake=fakes[0], upstreams=ups)
        client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")
        codes = []
        for _ in range(2):  # the first call finds the keys refused, the second is answered without one
            try:
                await client.chat.completions.create(model="gpt-4o-mini",
                                                     messages=[{"role": "user", "content": "hi"}])
                raise AssertionError("expected an error")
            except openai.InternalServerError as e:
                assert e.status_code == 502 and e.type == "server_error"
                assert e.response.headers["x-llm-error-type"] == "auth"
                _no_key_in(e.response.content)
                codes.append(e.code)
        await client.close()
        assert codes == ["upstream_auth", "pool_auth"]
        assert sum(len(f.chat_requests()) for f in fakes) == 2
    finally:
        for f in fakes:
            await f.close()


# --- Messages: the request id in Anthropic's header ----------------------------------------


async def test_messages_answers_carry_anthropics_request_id_header(make_gateway) -> None:
    gw = await make_gateway()
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        try:
            await client.messages.create(model="claude-sonnet-4-6", max_tokens=10, messages="hi")  # type: ignore[arg-type]
            raise AssertionError("expected an error")
        except anthropic.BadRequestError as e:  # made by the gateway: messages is not a list
            assert e.body["error"]["code"] == "invalid_messages"  # type: ignore[index]
            assert e.request_id and e.request_id == e.body["request_id"] == e.response.headers["x-request-id"]  # type: ignore[index]
        message = await client.messages.create(model="claude-sonnet-4-6", max_tokens=10,
                                               messages=[{"role": "user", "content": "hi"}])
        assert message._request_id and len(message._request_id) == 32  # the gateway's: the fake sends none
        gw.fake.script(Reply(200, anthropic_message(), {"request-id": "req_011upstream"}))
        message = await client.messages.create(model="claude-sonnet-4-6", max_tokens=10,
                                               messages=[{"role": "user", "content": "hi"}])
        assert message._request_id == "req_011upstream"  # Anthropic's own, passed on
        counted = await client.messages.with_raw_response.count_tokens(
            model="claude-sonnet-4-6", messages=[{"role": "user", "content": "hi"}])
        assert counted.request_id == counted.headers["x-request-id"]
    finally:
        await client.close()
    status, headers, _ = await gw.chat()
    assert status == 200 and "request-id" not in headers  # OpenAI's clients read x-request-id


# --- Messages: a body the gateway cannot read, answered as Anthropic answers it -------------


@pytest.mark.parametrize(("encoding", "raised", "error_code"), [
    ("br", RequestBodyEncodingUnsupportedError, "request_body_encoding_unsupported"),
    ("gzip", RequestBodyEncodingInvalidError, "request_body_encoding_invalid"),  # the body is not gzip
])  # fmt: skip
async def test_a_body_in_an_encoding_the_gateway_cannot_read_is_anthropics_400(
    make_gateway, encoding: str, raised: type[anthropic.BadRequestError], error_code: str
) -> None:
    gw = await make_gateway()
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=10, messages=[
            {"role": "user", "content": "hi"}], extra_headers={"Content-Encoding": encoding})
        raise AssertionError("expected a refusal")
    except raised as e:
        assert e.status_code == 400 and e.type == "invalid_request_error" and e.error_code == error_code
        assert e.request_id == e.response.headers["x-request-id"]
    finally:
        await client.close()
    assert gw.fake.messages_requests() == []


@pytest.mark.stall_timeouts
async def test_a_body_too_slow_to_arrive_is_anthropics_400_request_body_timeout(make_gateway) -> None:
    gw = await make_gateway()  # idle_s is 1 s in the harness

    async def trickle() -> AsyncIterator[bytes]:
        yield b'{"model": "claude-sonnet-4-6", '
        await asyncio.sleep(2)
        yield b'"max_tokens": 10, "messages": []}'

    async with gw.session.post(gw.base + "/v1/messages", data=trickle(), headers={
            "Content-Type": "application/json", "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        doc = await r.json()
        assert r.status == 400 and r.headers["request-id"] == doc["request_id"]
    assert doc["error"]["type"] == "invalid_request_error" and doc["error"]["code"] == "request_timeout"
    assert doc["error"]["details"] == {"error_code": "request_body_timeout"}
    # The class the SDK raises for it (the upload cannot be made slow through the SDK itself).
    assert ERROR_CLASSES[(400, doc["error"]["details"]["error_code"])] is BetaRequestBodyTimeoutError
    async with gw.session.post(gw.base + "/v1/chat/completions", data=trickle(),
                               headers={"Content-Type": "application/json"}) as r:  # fmt: skip
        assert r.status == 408  # OpenAI's clients keep the gateway's 408


# --- Gemini: Google's code and status, and how a Gemini client sends its key ---------------

GENERATE = "/v1beta/models/gemini-2.5-pro:generateContent"


async def test_gemini_clients_get_googles_pairs_and_their_own_way_to_send_a_key(make_gateway) -> None:
    gw = await make_gateway("server: {client_keys: [gk-1], max_body_bytes: 2000}\n")
    hi = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.post(gw.base + GENERATE, json=hi) as r:
        err = (await r.json())["error"]
        assert (r.status, err["code"], err["status"]) == (401, 401, "UNAUTHENTICATED")
        assert "x-goog-api-key" in err["message"] and "?key=" in err["message"]
    big = {"contents": [{"role": "user", "parts": [{"text": "x" * 4000}]}]}
    async with gw.session.post(gw.base + GENERATE + "?key=gk-1", json=big) as r:
        err = (await r.json())["error"]
        # Google's answer to a payload over its limit: 400 INVALID_ARGUMENT, not 413.
        assert (r.status, err["code"], err["status"]) == (400, 400, "INVALID_ARGUMENT")
        assert err["details"][0]["metadata"]["code"] == "request_too_large"
    async with gw.session.post(gw.base + GENERATE, data=b"{}", headers={
            "x-goog-api-key": "gk-1", "Content-Encoding": "br", "Content-Type": "application/json"}) as r:  # fmt: skip
        err = (await r.json())["error"]
        assert (r.status, err["code"], err["status"]) == (400, 400, "INVALID_ARGUMENT")
    assert gw.fake.requests == []


async def test_a_gemini_client_whose_upstream_is_unreachable_gets_503_unavailable(make_gateway) -> None:
    gw = await make_gateway(upstreams="  - {name: gone, base_url: 'http://127.0.0.1:9', apis: [gemini]}\n")
    async with gw.session.post(gw.base + GENERATE, json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                               headers={"x-goog-api-key": "k"}) as r:  # fmt: skip
        err = (await r.json())["error"]
        assert (r.status, err["code"], err["status"]) == (503, 503, "UNAVAILABLE")
        assert err["details"][0]["metadata"]["code"] == "upstream_unreachable"


async def test_a_gemini_client_whose_upstream_refused_the_gateways_key_gets_a_403_it_does_not_retry(
    make_gateway,
) -> None:
    """Not Google's 503 UNAVAILABLE, which Gemini CLI retried ten times over 3.5 minutes: a 403
    PERMISSION_DENIED that names the gateway's key, without the provider's body."""
    gw = await make_gateway(upstreams="  - {name: google, base_url: 'URL', apis: [gemini], api_key: fake-key-g1}\n"
                            .replace("URL", (fake := await FakeUpstream().start()).url), fake=fake)
    try:
        fake.keys.revoke("fake-key-g1")
        hi = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
        async with gw.session.post(gw.base + GENERATE, json=hi, headers={"x-goog-api-key": "k"}) as r:
            body = await r.read()
            err = (await r.json())["error"]
        assert (r.status, err["code"], err["status"]) == (403, 403, "PERMISSION_DENIED")
        assert err["details"][0]["metadata"]["code"] == "upstream_auth" and err["retryable"] is False
        assert "gateway's own credentials" in err["message"]
        _no_key_in(body)
    finally:
        await fake.close()


# --- Messages: an upstream's error in another API's terms, in Anthropic's -------------------


async def _messages_stream_error(gw: Any) -> anthropic.APIStatusError:
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=64,
                                          messages=[{"role": "user", "content": "hi"}]) as stream:  # fmt: skip
            async for _ in stream:
                pass
    except anthropic.APIStatusError as e:
        return e
    finally:
        await client.close()
    raise AssertionError("expected the stream's error")


async def test_a_chat_upstreams_server_error_mid_stream_reaches_the_anthropic_sdk_in_anthropics_terms(
    make_gateway,
) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat], model_map: {'claude-*': qwen3-coder}")
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"}),
                           {"error": {"message": "The server had an error", "type": "server_error", "code": None}}],
                          then="eof"))  # fmt: skip
    e = await _messages_stream_error(gw)
    assert e.type == "overloaded_error" and isinstance(e.body, dict)  # Anthropic's word for an outage
    assert e.body["error"]["code"] == "server_error" and e.body["error"]["x_llm_error_type"] == "provider_unavailable"


async def test_a_gemini_503_mid_stream_is_overloaded_error_for_the_anthropic_sdk(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [gemini]")
    overloaded = {"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                            "status": "UNAVAILABLE"}}  # fmt: skip
    gw.fake.script(Stream([{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}, "index": 0}]},
                           overloaded], then="eof"))  # fmt: skip
    e = await _messages_stream_error(gw)
    assert e.type == "overloaded_error" and isinstance(e.body, dict)
    assert e.body["error"]["message"] == "The model is overloaded. Please try again later."


async def test_a_gemini_503_before_anything_visible_is_anthropics_529_overloaded_error(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [gemini]")
    overloaded = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    gw.fake.always = Stream([overloaded], then="eof")  # every attempt, the retries included
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k")
    try:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=64, stream=True,
                                     messages=[{"role": "user", "content": "hi"}])
        raise AssertionError("expected an error")
    except anthropic.OverloadedError as e:
        assert e.status_code == 529 and e.type == "overloaded_error"
        assert e.request_id == e.response.headers["x-request-id"] and e.response.headers["x-should-retry"] == "false"
    finally:
        await client.close()


# --- chat: the chunk that ends a broken stream ----------------------------------------------


async def test_a_chat_stream_cut_after_its_first_words_raises_in_the_openai_sdk_with_openais_type(
    make_gateway,
) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"role": "assistant", "content": "Hel"})], then="eof"))  # no finish, no [DONE]
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k")
    seen = []
    try:
        stream = await client.chat.completions.create(model="gpt-4o-mini", stream=True,
                                                      messages=[{"role": "user", "content": "hi"}])
        async for part in stream:
            seen.append(part.choices[0].finish_reason if part.choices else None)
        raise AssertionError("expected the stream's error")
    except openai.APIError as e:  # raised at the error chunk: its finish_reason "error" is never read
        assert isinstance(e.body, dict) and e.body["type"] == "server_error" and e.body["code"] == "stream_broken"
    finally:
        await client.close()
    assert "error" not in seen and "stop" not in seen


# --- An outage on a translated request, by the status the upstream gave it ----------------

_SERVER_ERROR = {"error": {"message": "The server had an error while processing your request. Sorry about that!",
                           "type": "server_error", "param": None, "code": None}}  # fmt: skip
_ONE_RETRY = "retry:\n  provider_unavailable: {max_retries: 1}\n"


async def test_a_chat_upstreams_500_reaches_the_anthropic_sdk_as_anthropics_500_api_error(make_gateway) -> None:
    """Anthropic's 500 api_error, not 529 overloaded_error (audit E); the SDK, which retries
    both, does not retry it again: the gateway did (x-should-retry: false)."""
    gw = await make_gateway(_ONE_RETRY, ", apis: [chat], model_map: {'claude-*': qwen3-coder}")
    gw.fake.always = Reply(500, _SERVER_ERROR)
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=2)
    try:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=64,
                                     messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        raise AssertionError("expected an error")
    except anthropic.InternalServerError as e:
        assert e.status_code == 500 and e.type == "api_error" and not isinstance(e, anthropic.OverloadedError)
        assert e.response.headers["x-should-retry"] == "false"
        assert isinstance(e.body, dict) and e.body["error"]["x_llm_upstream"]["status"] == 500
    finally:
        await client.close()
    assert len(gw.fake.chat_requests()) == 2  # the gateway's two attempts, none of the SDK's


async def test_a_chat_upstreams_503_reaches_the_anthropic_sdk_as_529_overloaded_error(make_gateway) -> None:
    gw = await make_gateway(_ONE_RETRY, ", apis: [chat], model_map: {'claude-*': qwen3-coder}")
    gw.fake.always = Reply(503, {"error": {"message": "The engine is currently overloaded, please try again later",
                                           "type": "server_error", "param": None, "code": None}})  # fmt: skip
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=2)
    try:
        await client.messages.create(model="claude-sonnet-4-6", max_tokens=64,
                                     messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        raise AssertionError("expected an error")
    except anthropic.OverloadedError as e:
        assert e.status_code == 529 and e.type == "overloaded_error"
    finally:
        await client.close()
    assert len(gw.fake.chat_requests()) == 2


@pytest.mark.parametrize(("upstream", "answer", "state"), [(500, 500, "INTERNAL"), (503, 503, "UNAVAILABLE")])
async def test_a_chat_upstreams_outage_reaches_a_gemini_client_as_google_says_it(
    make_gateway, upstream: int, answer: int, state: str
) -> None:
    gw = await make_gateway(_ONE_RETRY, ", apis: [chat], model_map: {'gemini-*': qwen3-coder}")
    gw.fake.always = Reply(upstream, _SERVER_ERROR)
    hi = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.post(gw.base + GENERATE, json=hi, headers={"x-goog-api-key": "k"}) as r:
        err = (await r.json())["error"]
        assert (r.status, err["code"], err["status"]) == (answer, answer, state)


# --- A refused credential or permission on a translated request, to the openai SDK ---------


async def test_a_chat_upstreams_region_refusal_reaches_a_responses_client_with_openais_own_code(make_gateway) -> None:
    """Audit E: the code became invalid_api_key, telling the client its key is bad."""
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.always = Reply(403, {"error": {"code": "unsupported_country_region_territory",
                                           "message": "Country, region, or territory not supported",
                                           "param": None, "type": "request_forbidden"}})  # fmt: skip
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        with pytest.raises(openai.PermissionDeniedError) as e:
            await client.responses.create(model="gpt-5-codex", input="hi")
    finally:
        await client.close()
    assert e.value.status_code == 403 and e.value.code == "unsupported_country_region_territory"


async def test_an_anthropic_permission_error_reaches_a_chat_client_as_a_403_not_a_bad_key(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages]")
    gw.fake.always = Reply(403, {"type": "error", "error": {
        "type": "permission_error", "message": "Your API key does not have permission to use the specified resource."}})
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        with pytest.raises(openai.PermissionDeniedError) as e:
            await client.chat.completions.create(model="claude-sonnet-4-6",
                                                 messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    finally:
        await client.close()
    assert e.value.status_code == 403 and e.value.code == "permission_error"


# --- A translated overflow states the window, not a number made up from the request ---------


async def test_a_responses_upstreams_overflow_reaches_the_anthropic_sdk_with_the_configured_window(
    make_gateway,
) -> None:
    """The Responses API's overflow states no numbers; the upstream's context_window is the
    limit, and the size the least that is over it (audit E: "42 tokens > 41 maximum", which
    made up a window of 41). Claude Code reads both numbers (apis/common.py)."""
    gw = await make_gateway("compression: {enabled: false}\n", ", apis: [responses], context_window: 2000")
    gw.fake.always = responses_overflow()
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as e:
            await client.messages.create(model="gpt-5-codex", max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
    finally:
        await client.close()
    assert isinstance(e.value.body, dict)
    assert e.value.body["error"]["message"] == "prompt is too long: 2001 tokens > 2000 maximum"
