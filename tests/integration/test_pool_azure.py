"""Two Azure OpenAI deployments of one resource in a pool: one base URL and key (the v1 API),
told apart only by the deployment each model is mapped to. Azure's 429s are the corpus's real
bodies. Sleeps are recorded, not slept."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import FakeUpstream, Reply
from tests.integration.conftest import Gateway


def _case(name: str) -> dict[str, Any]:
    return next(c for c in IN_SAMPLE if c["name"] == name)


async def _azure_pool(make_gateway: Any, **kw: Any) -> tuple[Gateway, FakeUpstream]:
    fake = await FakeUpstream().start()
    same = f"base_url: '{fake.url}', api_key: AZKEY, key_header: api-key, apis: [chat]"
    upstreams = (f"  - {{name: east, {same}, model_map: {{gpt-4o: gpt4o-east}}, weight: 1000000}}\n"
                 f"  - {{name: west, {same}, model_map: {{gpt-4o: gpt4o-west}}}}\n")  # fmt: skip
    pools = "pools:\n  - {name: gpt, models: [gpt-4o], deployments: [east, west], affinity: {enabled: false}}\n"
    gw = await make_gateway(pools, fake=fake, upstreams=upstreams, **kw)
    return gw, fake


def _chat(text: str = "hi", max_tokens: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


async def test_a_day_long_token_rate_429_moves_to_the_sibling_and_benches_no_deployment(make_gateway: Any) -> None:
    """Azure's "exceeded token rate limit ... Please retry after 86400 seconds" to a request
    bigger than the deployment's tokens per minute: as budget it answered 402 with a day's
    retry-after and sat the key, both deployments with it, out for 24 hours (every later
    request 402 pool_budget without a call, audit). The TPM is the deployment's own, so the
    sibling takes it (read as a window overflow, no sibling of the same context window was
    asked: 6 of 60 requests answered 400 with one call, review)."""
    gw, fake = await _azure_pool(make_gateway)
    day = _case("azure-429-retry-after-a-day-is-overflow")
    try:
        fake.script(Reply(429, day["body"], day["headers"]))
        status, headers, body = await gw.chat(_chat("a long document", max_tokens=60000))
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "2", body
        assert "x-llm-compressed" not in headers
        sent = [r.json() for r in fake.chat_requests()]
        assert [r["model"] for r in sent] == ["gpt4o-east", "gpt4o-west"]
        assert sent[0]["messages"] == sent[1]["messages"] and sent[1]["max_tokens"] == 60000  # as the client sent it
        for reason in ("budget", "rate_limit"):
            assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="east",
                             reason=reason) == 0  # fmt: skip
        for _ in range(3):
            status, headers, _ = await gw.chat(_chat())
            assert status == 200 and headers["x-llm-upstream"] == "east" and headers["x-llm-attempts"] == "1"
    finally:
        await fake.close()


def _conversation(turns: int = 10) -> list[dict[str, Any]]:
    facts = [{"role": "user", "content": f"fact {i}: " + "blah " * 400} for i in range(turns - 1)]
    return [{"role": "system", "content": "You are terse."}, *facts, {"role": "user", "content": "what was fact 0?"}]


async def test_a_token_rate_429_from_every_deployment_drops_no_turn_and_is_told_as_itself(make_gateway: Any) -> None:
    """Both deployments refuse the request's max_tokens: Azure's refusal states no numbers, so
    nothing says how far to lower it; the compress-and-retry dropped 3 of 10 messages (the fact
    the last one asks about among them) and lowered max_tokens to 30,080 against the context
    window, which the request fitted all along (review). Now: the 400, each deployment asked
    once, the conversation never cut."""
    gw, fake = await _azure_pool(make_gateway)
    day = _case("azure-429-retry-after-a-day-is-overflow")
    try:
        fake.script(Reply(429, day["body"], day["headers"]), Reply(429, day["body"], day["headers"]))
        status, headers, body = await gw.chat({**_chat(max_tokens=60000), "messages": _conversation()})
        assert status == 400 and headers["x-llm-error-type"] == "context_overflow", body
        assert headers["x-llm-attempts"] == "2" and "x-llm-compressed" not in headers
        assert "exceeded token rate limit" in json.loads(body)["error"]["message"]  # Azure's own body, relayed
        assert len(fake.chat_requests()) == 2
        assert all(len(r.json()["messages"]) == 11 for r in fake.chat_requests())
    finally:
        await fake.close()


async def test_a_messages_client_is_told_its_max_tokens_exceed_the_tokens_per_minute(make_gateway: Any) -> None:
    """Claude Code (max_tokens 32000) on the pool, translated to chat: "prompt is too long:
    128001 tokens > 128000 maximum" for a prompt of a few tokens made it stop ("cannot be
    compacted"), or compact a longer history and meet the same 429 on its next turn (review).
    The refusal says what it is, in no words Claude Code compacts on."""
    gw, fake = await _azure_pool(make_gateway)
    day = _case("azure-429-retry-after-a-day-is-overflow")
    try:
        fake.script(Reply(429, day["body"], day["headers"]), Reply(429, day["body"], day["headers"]))
        ask = {"model": "gpt-4o", "max_tokens": 32000, "messages": [{"role": "user", "content": "say hi"}]}
        status, headers, body = await gw.messages(ask)
        error = json.loads(body)["error"]
        assert status == 400 and error["type"] == "invalid_request_error", body
        assert headers["x-llm-error-type"] == "context_overflow"
        assert "prompt is too long" not in error["message"]
        assert "max_tokens 32000" in error["message"] and "tokens per minute" in error["message"]
        assert "exceeded token rate limit" in error["message"]  # the upstream's own words follow
    finally:
        await fake.close()


async def test_an_azure_primary_over_its_tokens_per_minute_falls_back(make_gateway: Any) -> None:
    """Read as budget, Azure's day-long token-rate 429 fell back by ``fallback.when``; read as a
    window overflow it needed ``fallback.context_overflow`` and a bigger window, and an Azure
    primary with an OpenAI fallback of the same window answered 400 (review)."""
    fake = await FakeUpstream().start()
    day = _case("azure-429-retry-after-a-day-is-overflow")
    upstreams = (f"  - {{name: azure, base_url: '{fake.url}/azure', api_key: AZKEY, key_header: api-key, "
                 f"models: [gpt-4o], apis: [chat], context_window: 128000, fallbacks: [openai]}}\n"
                 f"  - {{name: openai, base_url: '{fake.url}/v1', api_key: OAKEY, models: [gpt-4o-other], "
                 f"apis: [chat], context_window: 128000}}\n")  # fmt: skip
    gw = await make_gateway(fake=fake, upstreams=upstreams)
    try:
        fake.script(Reply(429, day["body"], day["headers"]))
        status, headers, body = await gw.chat(_chat(max_tokens=60000))
        assert status == 200 and headers["x-llm-upstream"] == "openai" and headers["x-llm-attempts"] == "2", body
    finally:
        await fake.close()


async def test_a_request_over_openais_tokens_per_minute_is_sent_again_with_less_max_tokens(
    make_gateway: Any,
) -> None:
    """OpenAI's "Request too large ... on tokens per min (TPM): Limit 30000, Requested 36278"
    counts the max_tokens asked: the one rescue lowers it by the excess (and 1 % of the limit)
    and keeps every turn (against the TPM as a window, it cut the conversation)."""
    gw, fake = await _azure_pool(make_gateway)
    tpm = _case("openai-429-request-bigger-than-tpm-is-overflow")
    try:
        fake.script(Reply(429, tpm["body"], tpm.get("headers") or {}), Reply(429, tpm["body"], tpm.get("headers") or {}))
        status, headers, body = await gw.chat({**_chat(max_tokens=16000), "messages": _conversation()})
        assert status == 200 and headers["x-llm-compressed"] == "true", body
        sent = [r.json() for r in fake.chat_requests()]
        assert len(sent) == 3 and all(r["messages"] == sent[0]["messages"] for r in sent)
        assert [r["max_tokens"] for r in sent] == [16000, 16000, 16000 - 6278 - 300]
    finally:
        await fake.close()


async def test_a_rate_limit_on_one_deployment_leaves_its_sibling_on_the_same_resource_serving(
    make_gateway: Any,
) -> None:
    """Azure sets tokens per minute per deployment: east's 429 ("retry after 6 seconds") is the
    deployment's (its model as sent, gpt4o-east), not the resource key's, so west, the same
    base URL and key with another deployment name, takes the request and the next."""
    gw, fake = await _azure_pool(make_gateway)
    minute = _case("azure-429-token-rate")
    try:
        fake.script(Reply(429, minute["body"], minute["headers"]))
        status, headers, _ = await gw.chat(_chat())
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "2"
        assert [r.json()["model"] for r in fake.chat_requests()] == ["gpt4o-east", "gpt4o-west"]
        status, headers, _ = await gw.chat(_chat())
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "1"
        assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="east",
                         reason="rate_limit") == 1  # fmt: skip
    finally:
        await fake.close()


async def test_a_size_a_deployment_refused_as_over_its_tokens_per_minute_goes_to_the_sibling_first(
    make_gateway: Any,
) -> None:
    """Azure's day-long token-rate 429 says a request is larger than the deployment's whole TPM:
    east, weighted first, refused each large request and west answered it, one refused call per
    large request (10 calls for 5). The size east refused is remembered: larger requests go to
    west first, smaller ones still to east, and a smaller size refused lowers the mark."""
    gw, fake = await _azure_pool(make_gateway)
    day = _case("azure-429-retry-after-a-day-is-overflow")

    def east_tpm(payload: dict[str, Any]) -> Reply | None:  # east's TPM takes about 30,000
        if payload["model"] == "gpt4o-east" and payload.get("max_tokens", 0) >= 30000:
            return Reply(429, day["body"], day["headers"])
        return None

    fake.always = east_tpm
    try:
        for _ in range(5):
            status, headers, _ = await gw.chat(_chat("a long document", max_tokens=60000))
            assert status == 200 and headers["x-llm-upstream"] == "west"
        assert [r.json()["model"] for r in fake.chat_requests()] == ["gpt4o-east"] + ["gpt4o-west"] * 5
        status, headers, _ = await gw.chat(_chat())  # small: east, as its weight says
        assert status == 200 and headers["x-llm-upstream"] == "east" and headers["x-llm-attempts"] == "1"
        for expected in ("2", "1"):  # smaller than the size remembered: east is asked, once
            status, headers, _ = await gw.chat(_chat("a long document", max_tokens=40000))
            assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == expected
        assert len(fake.chat_requests()) == 6 + 1 + 3
        for reason in ("budget", "rate_limit"):
            assert gw.metric("llm_gateway_deployment_sit_outs_total", pool="gpt", deployment="east",
                             reason=reason) == 0  # fmt: skip
    finally:
        await fake.close()


async def test_a_deployment_passed_by_for_its_tokens_per_minute_is_asked_when_no_sibling_may_serve(
    make_gateway: Any,
) -> None:
    """The memory never refuses a request alone: with west sitting out a rate limit, the large
    request goes to east after all; east's quota was raised meanwhile and it answers, which ends
    the memory (the next large request goes to east first, west back from its wait)."""
    now = [time.time()]
    gw, fake = await _azure_pool(make_gateway, wall=lambda: now[0])
    day, minute = _case("azure-429-retry-after-a-day-is-overflow"), _case("azure-429-token-rate")
    try:
        fake.script(Reply(429, day["body"], day["headers"]))
        status, headers, _ = await gw.chat(_chat("a long document", max_tokens=60000))
        assert status == 200 and headers["x-llm-upstream"] == "west" and headers["x-llm-attempts"] == "2"
        fake.script(Reply(429, minute["body"], minute["headers"]))  # west: "retry after 6 seconds"
        status, headers, _ = await gw.chat(_chat("a long document", max_tokens=60000))
        assert status == 200 and headers["x-llm-upstream"] == "east" and headers["x-llm-attempts"] == "2"
        now[0] += 7  # west's wait is over
        status, headers, _ = await gw.chat(_chat("a long document", max_tokens=60000))
        assert status == 200 and headers["x-llm-upstream"] == "east" and headers["x-llm-attempts"] == "1"
        models = [r.json()["model"] for r in fake.chat_requests()]
        assert models == ["gpt4o-east", "gpt4o-west", "gpt4o-west", "gpt4o-east", "gpt4o-east"]
    finally:
        await fake.close()


# A Microsoft Entra ID access token's shape (a JWT: three base64url parts, a JSON header first).
ENTRA = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.eyJhdWQiOiJodHRwczovL2NvZ25pdGl2ZXNlcnZpY2VzIn0.c2ln-_x"
CLIENT_KEY = "0123456789abcdef0123456789abcdef"


async def test_a_clients_entra_id_token_reaches_an_azure_pool_as_a_bearer_token(make_gateway: Any) -> None:
    """A pool of Azure deployments that forwards the client's credential (no api_key): a
    translated request's credential moves to the host's key_header, `api-key`, and an Entra ID
    token went there too, where Azure reads only keys. It goes as `Authorization: Bearer`, on
    each deployment, and the model listing's too; a key still goes to `api-key`. The fake stands
    behind the host's name as the gateway's egress proxy (a proxy is sent the whole URL)."""
    import anthropic

    proxy = await FakeUpstream().start()
    same = "base_url: 'http://res.openai.azure.com/openai/v1', apis: [chat]"
    upstreams = (f"  - {{name: east, {same}, model_map: {{gpt-4o: gpt4o-east}}, weight: 1000000}}\n"
                 f"  - {{name: west, {same}, model_map: {{gpt-4o: gpt4o-west}}}}\n")  # fmt: skip
    pools = "pools:\n  - {name: gpt, models: [gpt-4o], deployments: [east, west], affinity: {enabled: false}}\n"
    gw = await make_gateway(f"server: {{upstream_proxy: 'http://127.0.0.1:{proxy.port}'}}\n" + pools,
                            fake=proxy, upstreams=upstreams)  # fmt: skip
    ask = [{"role": "user", "content": "hi"}]

    def sent() -> dict[str, str]:
        last = proxy.requests[-1]
        return {k.lower(): v for k, v in last.headers.items() if k.lower() in ("authorization", "api-key", "x-api-key")}

    try:
        async with anthropic.AsyncAnthropic(base_url=gw.base, auth_token=ENTRA, max_retries=0) as claude:
            await claude.messages.create(model="gpt-4o", max_tokens=64, messages=ask)  # type: ignore[arg-type]
            assert sent() == {"authorization": f"Bearer {ENTRA}"}
            proxy.script(Reply(429, _case("azure-429-token-rate")["body"], _case("azure-429-token-rate")["headers"]))
            await claude.messages.create(model="gpt-4o", max_tokens=64, messages=ask)  # type: ignore[arg-type]
            assert [r.json()["model"] for r in proxy.chat_requests()[-2:]] == ["gpt4o-east", "gpt4o-west"]
            assert sent() == {"authorization": f"Bearer {ENTRA}"}  # the sibling's too
        async with anthropic.AsyncAnthropic(base_url=gw.base, api_key=ENTRA, max_retries=0) as claude:
            await claude.messages.create(model="gpt-4o", max_tokens=64, messages=ask)  # type: ignore[arg-type]
            assert sent() == {"authorization": f"Bearer {ENTRA}"}  # from x-api-key
        status, _, _ = await gw.chat(_chat(), headers={"Authorization": f"Bearer {ENTRA}"})  # not translated
        assert status == 200 and sent() == {"authorization": f"Bearer {ENTRA}"}
        async with anthropic.AsyncAnthropic(base_url=gw.base, auth_token=CLIENT_KEY, max_retries=0) as claude:
            await claude.messages.create(model="gpt-4o", max_tokens=64, messages=ask)  # type: ignore[arg-type]
            assert sent() == {"api-key": CLIENT_KEY}  # a key: where Azure reads keys
        async with gw.session.get(gw.base + "/v1/models", headers={"Authorization": f"Bearer {ENTRA}"}) as r:
            assert r.status == 200
        assert proxy.requests[-1].path.endswith("/models") and sent() == {"authorization": f"Bearer {ENTRA}"}
    finally:
        await proxy.close()
