"""Anthropic's API takes a key (sk-ant-api03-…) in x-api-key and an OAuth token (sk-ant-oat01-…,
Claude Code's subscription login) as a bearer token, and refuses each in the other's place
(config.ANTHROPIC_HOST). Through the gateway, with the stock anthropic and openai SDKs, an
upstream on api.anthropic.com gets its own key, or a client's, where its kind is taken; the
fake, strict by default, answers a misplaced one with Anthropic's 401. The fake stands behind
the name: it is the gateway's egress proxy, and a proxy is sent the whole URL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anthropic
import openai
import pytest

from tests.fakeupstream import FakeUpstream
from tests.integration.conftest import Gateway, MakeGateway

KEY, OAUTH = "sk-ant-api03-k", "sk-ant-oat01-t"
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _no_sdk_keys_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # The anthropic SDK sends ANTHROPIC_API_KEY / ANTHROPIC_AUTH_TOKEN too when they are set.
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def proxy() -> AsyncIterator[FakeUpstream]:
    fake = await FakeUpstream().start()
    yield fake
    await fake.close()


@pytest.fixture
def anthropic_upstream(make_gateway: MakeGateway, proxy: FakeUpstream) -> MakeGateway:
    async def make(upstream_yaml: str = "") -> Gateway:
        return await make_gateway(
            f"server: {{upstream_proxy: 'http://127.0.0.1:{proxy.port}'}}\n",
            upstreams=f"  - {{name: anthropic, base_url: 'http://api.anthropic.com/v1'{upstream_yaml}}}\n",
            fake=proxy,
        )

    return make


def _credentials(gw: Gateway) -> list[dict[str, str]]:
    """What each Messages request reached the fake with: its credential headers, by lower-case name."""
    return [{k.lower(): v for k, v in r.headers.items() if k.lower() in ("authorization", "x-api-key")}
            for r in gw.fake.messages_requests()]  # fmt: skip


async def _both_sdks(gw: Gateway, *, anthropic_kw: dict[str, str], openai_key: str) -> None:
    async with anthropic.AsyncAnthropic(base_url=gw.base, max_retries=0, **anthropic_kw) as claude:
        message = await claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)  # type: ignore[arg-type]
        assert message.content
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key=openai_key, max_retries=0) as chat:
        completion = await chat.chat.completions.create(model="claude-sonnet-4-6", messages=ASK)  # type: ignore[arg-type]
        assert completion.choices[0].message.content  # translated to Messages and back


async def test_a_configured_key_reaches_anthropic_in_x_api_key(anthropic_upstream: MakeGateway) -> None:
    gw = await anthropic_upstream(f", api_key: {KEY}")
    await _both_sdks(gw, anthropic_kw={"api_key": "sk-client"}, openai_key="sk-client")
    assert _credentials(gw) == [{"x-api-key": KEY}] * 2


async def test_a_configured_oauth_token_reaches_anthropic_as_a_bearer_token(anthropic_upstream: MakeGateway) -> None:
    gw = await anthropic_upstream(f", api_key: {OAUTH}")
    await _both_sdks(gw, anthropic_kw={"api_key": "sk-client"}, openai_key="sk-client")
    assert _credentials(gw) == [{"authorization": f"Bearer {OAUTH}"}] * 2


async def test_said_key_header_wins_and_anthropic_refuses_the_key_as_bearer(anthropic_upstream: MakeGateway) -> None:
    gw = await anthropic_upstream(f", api_key: {KEY}, key_header: authorization")
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key="sk-client", max_retries=0) as claude:
        with pytest.raises(anthropic.APIStatusError) as refused:
            await claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)  # type: ignore[arg-type]
    # Anthropic's 401 for the operator's key is the gateway's 502, said to be no fault of the client's.
    assert refused.value.status_code == 502 and "upstream_auth" in str(refused.value)
    assert _credentials(gw) == [{"authorization": f"Bearer {KEY}"}]


async def test_a_clients_key_sent_as_bearer_is_forwarded_in_x_api_key(anthropic_upstream: MakeGateway) -> None:
    # The openai SDK can send a key only as a bearer token; the anthropic SDK's auth_token does.
    gw = await anthropic_upstream()
    await _both_sdks(gw, anthropic_kw={"auth_token": KEY}, openai_key=KEY)
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key=KEY, max_retries=0) as claude:
        await claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)  # type: ignore[arg-type]
    assert _credentials(gw) == [{"x-api-key": KEY}] * 3


async def test_a_clients_oauth_token_is_forwarded_as_a_bearer_token(anthropic_upstream: MakeGateway) -> None:
    gw = await anthropic_upstream()
    await _both_sdks(gw, anthropic_kw={"auth_token": OAUTH}, openai_key=OAUTH)
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key=OAUTH, max_retries=0) as claude:
        await claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)  # type: ignore[arg-type]
    assert _credentials(gw) == [{"authorization": f"Bearer {OAUTH}"}] * 3


async def test_an_anthropic_compatible_server_gets_a_clients_bearer_token_as_it_came(make_gateway: MakeGateway) -> None:
    # Not Anthropic's host: vLLM's Messages endpoint reads Authorization only, and the fake
    # started with --lax-headers stands for it.
    gw = await make_gateway(upstream_yaml=", apis: [messages]")
    gw.fake.strict_headers = False
    async with anthropic.AsyncAnthropic(base_url=gw.base, auth_token=KEY, max_retries=0) as claude:
        await claude.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=ASK)  # type: ignore[arg-type]
    assert _credentials(gw) == [{"authorization": f"Bearer {KEY}"}]
