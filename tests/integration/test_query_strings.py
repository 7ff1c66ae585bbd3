"""The client's query string reaches the upstream as the client encoded it, on both upstream
clients: it was forwarded decoded, so the openai SDK's ``metadata[topic]=my+project+%231``
arrived as ``metadata[topic]=my project `` (a space in the request line, the rest cut at the
``#``), ``%2541`` was decoded twice on its way, ``%0d%0a`` vanished and ``%00`` put a NUL in
the request line."""

from __future__ import annotations

import openai
import pytest
from yarl import URL

from tests.capture_upstream import Capture
from tests.integration.conftest import MakeGateway


@pytest.mark.parametrize("client", ["h1", "aiohttp"])
async def test_the_openai_sdks_listing_query_reaches_the_upstream_as_it_was_encoded(
    make_gateway: MakeGateway, capture: Capture, client: str
) -> None:
    gw = await make_gateway(f"server: {{upstream_client: {client}}}\n",
                            upstreams=f"  - {{name: up, base_url: 'http://127.0.0.1:{capture.port}/v1'}}\n")
    sdk = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="sk-client", max_retries=0)
    try:
        page = await sdk.chat.completions.list(metadata={"topic": "my project #1"}, limit=5)
        assert page.data == []
    finally:
        await sdk.close()
    assert capture.lines == [b"GET /v1/chat/completions?limit=5&metadata%5Btopic%5D=my+project+%231 HTTP/1.1"]


@pytest.mark.parametrize("client", ["h1", "aiohttp"])
@pytest.mark.parametrize("query", ["q=%2541", "q=a%0d%0aX-Injected:%201", "q=a%00b", "a=%20&b=%26&c=%3D&d=%25",
                                   "q=%E2%82%AC+x", "flag&x=", "q=~!$'()*,;:@/?"])  # fmt: skip
async def test_any_query_goes_upstream_byte_for_byte(
    make_gateway: MakeGateway, capture: Capture, client: str, query: str
) -> None:
    gw = await make_gateway(f"server: {{upstream_client: {client}}}\n",
                            upstreams=f"  - {{name: up, base_url: 'http://127.0.0.1:{capture.port}/v1'}}\n")
    async with gw.session.get(URL(f"{gw.base}/v1/files?{query}", encoded=True)) as r:
        assert r.status == 200, await r.read()
    assert capture.lines == [f"GET /v1/files?{query} HTTP/1.1".encode()]


async def test_a_messages_clients_query_goes_on_as_encoded(make_gateway: MakeGateway, capture: Capture) -> None:
    """The full pipeline forwards its client's query too (Claude Code's ``?beta=true``)."""
    gw = await make_gateway(upstreams=f"  - {{name: up, base_url: 'http://127.0.0.1:{capture.port}/v1', "
                                      "apis: [messages]}\n")
    body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    await gw.messages(body, query="?beta=true&x=a%26b%2Bc")
    assert capture.lines == [b"POST /v1/messages?beta=true&x=a%26b%2Bc HTTP/1.1"]


async def test_a_gemini_callers_key_is_taken_out_of_the_query_and_the_rest_kept_as_encoded(
    make_gateway: MakeGateway, capture: Capture
) -> None:
    """``?key=`` is a credential for the gateway, never forwarded; the rest goes as it came.
    Its ``/v1/files`` is Gemini's Files API: asked of an upstream that speaks Gemini."""
    gw = await make_gateway(upstreams=f"  - {{name: up, base_url: 'http://127.0.0.1:{capture.port}/v1', "
                                      "apis: [gemini]}\n")  # fmt: skip
    url = URL(f"{gw.base}/v1/files?a=x%2By&key=AIza-secret&k%65y=AIza-2&b=%23", encoded=True)
    async with gw.session.get(url) as r:
        assert r.status == 200
    assert capture.lines == [b"GET /v1/files?a=x%2By&b=%23 HTTP/1.1"]


async def test_an_upstreams_configured_query_goes_with_every_request_in_place_of_the_clients_own(
    make_gateway: MakeGateway, capture: Capture
) -> None:
    """Azure OpenAI's deployment path takes ``api-version`` in the query; stock SDKs aimed at a
    base URL send none, and Azure answers 404 "Resource not found" (audit). Configured, it goes
    on the request's own API, on one translated, on a path passed through and on the listing,
    and a client's stale one is replaced."""
    base = f"http://127.0.0.1:{capture.port}/openai/deployments/gpt4o-east"
    gw = await make_gateway(upstreams=f"  - {{name: az, base_url: '{base}', apis: [chat], "
                                      "query: {api-version: 2024-10-21}}\n")  # fmt: skip
    await gw.chat({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
    await gw.messages({"model": "gpt-4o", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
                      query="?beta=true")  # fmt: skip
    async with gw.session.get(URL(f"{gw.base}/v1/files?limit=5&api-version=2023-05-15&b=%23", encoded=True)):
        pass
    async with gw.session.get(f"{gw.base}/v1/models"):
        pass
    assert capture.lines == [
        b"POST /openai/deployments/gpt4o-east/chat/completions?api-version=2024-10-21 HTTP/1.1",
        b"POST /openai/deployments/gpt4o-east/chat/completions?api-version=2024-10-21 HTTP/1.1",
        b"GET /openai/deployments/gpt4o-east/files?limit=5&b=%23&api-version=2024-10-21 HTTP/1.1",
        b"GET /openai/deployments/gpt4o-east/models?api-version=2024-10-21 HTTP/1.1",
    ]
