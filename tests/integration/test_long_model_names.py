"""A model name is refused past 256 characters, in the client's API's own error, before
anything is routed, cached or sent: every cache keyed by model name (routes, legs, upstream
URLs, where Gemini's path holds the name) kept each name whole, so ten requests naming a
20 MB model took a worker from 60 MB to 1.1 GB, never given back."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from gateway.apis.common import MODEL_MAX
from gateway.live import LIVE
from tests.integration.conftest import Gateway, MakeGateway

LONG = "gemini-25" + "x" * 300
GEMINI_UPSTREAM = ", apis: [gemini], models: ['gemini-*']"


def held_names(gw: Gateway) -> list[str]:
    """Every string the gateway keeps per model name, or per URL holding one."""
    svc = gw.app[LIVE].services
    names = [m for m in svc.chains if m]
    for up in svc.upstreams.values():
        names += [m for _, m in up.legs if m]
        names += list(up.urls) + list(up.urls.values())
    return names


def assert_nothing_long_kept(gw: Gateway) -> None:
    assert all(len(n) < 300 for n in held_names(gw)), [n[:40] for n in held_names(gw) if len(n) >= 300]


async def test_the_openai_sdk_gets_a_400_for_an_overlong_model_on_chat_and_responses(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(upstream_yaml=GEMINI_UPSTREAM)
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="k", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as chat:
            await client.chat.completions.create(model=LONG, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as responses:
            await client.responses.create(model=LONG, input="hi")
    finally:
        await client.close()
    for e in (chat.value, responses.value):
        assert e.status_code == 400 and e.code == "invalid_model"
        assert f"at most {MODEL_MAX} characters" in e.message
    assert gw.fake.requests == []
    assert_nothing_long_kept(gw)


async def test_the_anthropic_sdk_gets_a_400_for_an_overlong_model(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(upstream_yaml=GEMINI_UPSTREAM)
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="k", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(model=LONG, max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    finally:
        await client.close()
    assert refused.value.status_code == 400
    body = refused.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "invalid_request_error"
    assert gw.fake.requests == []
    assert_nothing_long_kept(gw)


@pytest.mark.parametrize("path", [f"/v1beta/models/{LONG}:generateContent",
                                  f"/v1beta/models/{LONG}:streamGenerateContent?alt=sse",
                                  f"/v1/models/{LONG}:countTokens"])  # fmt: skip
async def test_a_gemini_client_gets_googles_400_for_an_overlong_model_in_the_path(
    make_gateway: MakeGateway, path: str
) -> None:
    gw = await make_gateway(upstream_yaml=GEMINI_UPSTREAM)
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    async with gw.session.post(gw.base + path, json=body, headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 400
        err = json.loads(await r.read())["error"]
    assert err["status"] == "INVALID_ARGUMENT" and f"at most {MODEL_MAX} characters" in err["message"]
    async with gw.session.get(gw.base + f"/v1beta/models/{LONG}", headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 400
    assert gw.fake.requests == []
    assert_nothing_long_kept(gw)


async def test_a_relayed_path_with_an_overlong_model_is_refused(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "e" * 1000, "input": "x"}) as r:
        assert r.status == 400
        assert (await r.json())["error"]["code"] == "invalid_model"
    assert gw.fake.requests == []
    assert_nothing_long_kept(gw)


async def test_a_model_name_of_the_longest_length_admitted_is_served(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    name = "gpt-4o-mini-" + "x" * (MODEL_MAX - len("gpt-4o-mini-"))
    status, _, _ = await gw.chat({"model": name, "messages": [{"role": "user", "content": "hi"}]})
    assert status == 200
    assert gw.fake.chat_requests()[0].json()["model"] == name
