"""A body whose top-level object names a member twice is refused, in the client's API's own
error shape, and never forwarded: the gateway reads the last of them (key rules, prices,
budgets, routing, the stream flag), and an upstream sent the client's bytes may read the first
(``gateway/jsonbody.repeated_member``). The SDKs cannot write such a body, so each is handed
raw bytes through its own ``post`` and reads the refusal with its own error type."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
import pytest

from tests.integration.conftest import Gateway, MakeGateway

# A key held to gpt-4o-mini: the gateway checked the last model, a first-wins upstream serves the first.
KEYED = ("keys:\n  - {name: alice, key: gk-alice, models: ['gpt-4o-mini*', 'claude-haiku*', 'gemini-2.5-flash*'],"
         " budget: {usd: 5, period: day}}\n")  # fmt: skip
ALICE = {"Authorization": "Bearer gk-alice"}
HI = [{"role": "user", "content": "hi"}]


def assert_refused_naming(message: str, name: str) -> None:
    assert f"'{name}'" in message and "more than once" in message
    assert "gpt-4o\"" not in message and "forbidden" not in message  # a name, never a value


async def test_chat_with_model_twice_is_openais_400_and_nothing_is_sent(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYED)
    raw = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"model":"gpt-4o-mini"}'
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.post("/chat/completions", cast_to=openai.types.chat.ChatCompletion, content=raw)
        e = refused.value
        assert e.status_code == 400 and e.code == "duplicate_member" and e.type == "invalid_request_error"
        assert_refused_naming(e.message, "model")
        assert e.response.headers["x-llm-error-type"] == "unknown" and e.response.headers["x-llm-attempts"] == "0"
        assert gw.fake.requests == []
        # "model" written twice inside a message, or in a nested object, is the client's business.
        said = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": '{"model":"gpt-4o","model":"gpt-4o"}'}],
            tools=[{"type": "function", "function": {"name": "spawn", "parameters": {
                "type": "object", "properties": {"model": {"type": "string"}}}}}])
        assert said.choices
        assert len(gw.fake.chat_requests()) == 1
    finally:
        await client.close()


@pytest.mark.parametrize("raw", [
    b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"stream":false,"stream":true}',
    b'{"model":"gpt-4o-mini","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"max_tokens":100000}',
    b'{"model": "gpt-4o-mini", "messages": [], "mod\\u0065l": "gpt-4o"}',  # an escaped spelling of the same name
], ids=["stream", "max_tokens", "escaped"])
async def test_any_member_twice_is_refused(make_gateway: MakeGateway, raw: bytes) -> None:
    gw = await make_gateway()
    status, _, body = await gw.chat(data=raw, headers={"Content-Type": "application/json"})
    err = json.loads(body)["error"]
    assert status == 400 and err["code"] == "duplicate_member"
    assert gw.fake.requests == []


async def test_responses_with_model_twice_is_openais_400(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYED)
    raw = b'{"model":"gpt-5-codex","input":"hi","model":"gpt-4o-mini"}'
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            await client.post("/responses", cast_to=openai.types.responses.Response, content=raw)
        assert refused.value.code == "duplicate_member"
        assert_refused_naming(refused.value.message, "model")
        assert gw.fake.requests == []
    finally:
        await client.close()


async def test_messages_with_model_twice_is_anthropics_400(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYED)
    raw = (b'{"model":"claude-opus-4-1","max_tokens":64,"messages":[{"role":"user","content":"hi"}],'
           b'"model":"claude-haiku-4-5"}')
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    try:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.post("/v1/messages", cast_to=anthropic.types.Message, content=raw,
                              options={"headers": {"Content-Type": "application/json"}})
        e = refused.value
        assert e.status_code == 400 and isinstance(e.body, dict) and e.body["type"] == "error"
        assert e.body["error"]["type"] == "invalid_request_error"
        assert_refused_naming(e.body["error"]["message"], "model")
        # count_tokens is relayed as it came when the upstream speaks Messages: refused all the same.
        with pytest.raises(anthropic.BadRequestError):
            await client.post("/v1/messages/count_tokens", cast_to=anthropic.types.MessageTokensCount, content=raw,
                              options={"headers": {"Content-Type": "application/json"}})
        assert gw.fake.requests == []
        said = await client.messages.create(model="claude-haiku-4-5", max_tokens=64,
                                            messages=[{"role": "user", "content": 'say "model": "model"'}])
        assert said.content
    finally:
        await client.close()


async def gemini_post(gw: Gateway, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    async with gw.session.post(gw.base + path, data=raw,
                               headers={"x-goog-api-key": "gk-alice", "Content-Type": "application/json"}) as r:
        return r.status, await r.json()


@pytest.mark.parametrize("path", [
    "/v1beta/models/gemini-2.5-flash:generateContent",
    "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    "/v1beta/models/gemini-2.5-flash:countTokens",
])
async def test_gemini_with_a_member_twice_is_googles_invalid_argument(make_gateway: MakeGateway, path: str) -> None:
    gw = await make_gateway(KEYED, ", apis: [gemini]")
    raw = (b'{"contents":[{"role":"user","parts":[{"text":"hi"}]}],'
           b'"generationConfig":{"maxOutputTokens":10},"generationConfig":{"maxOutputTokens":65536}}')
    status, doc = await gemini_post(gw, path, raw)
    assert status == 400 and doc["error"]["status"] == "INVALID_ARGUMENT" and doc["error"]["code"] == 400
    assert_refused_naming(doc["error"]["message"], "generationConfig")
    assert gw.fake.requests == []


async def test_relayed_paths_refuse_it_with_a_key_and_without(make_gateway: MakeGateway) -> None:
    raw = b'{"model":"text-embedding-3-large","input":"x","model":"gpt-4o-mini"}'
    for extra, headers in ((KEYED, ALICE), ("", {})):
        gw = await make_gateway(extra)
        async with gw.session.post(gw.base + "/v1/embeddings", data=raw,
                                   headers={**headers, "Content-Type": "application/json"}) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "duplicate_member"
        assert gw.fake.requests == []
