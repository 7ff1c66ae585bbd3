"""A Gemini caller's ``?key=`` becomes a header upstream when the gateway is a pass-through (no
``api_key``, no client keys): decoded, a key holding a CR, LF or NUL (RFC 9110 §5.5: never in a
field value) was a 500 (``BadRequestHead`` on h1, aiohttp's ValueError) or, for a NUL, sent in
``x-goog-api-key`` by the h1 client. It is the client's mistake: a 400 in Google's shape."""

from __future__ import annotations

import json

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from gateway.app import create_app
from gateway.config import parse_config
from gateway.server import make_runner
from gateway.upstream import BadRequestHead, UpstreamRequest, UpstreamResponse
from tests.integration.conftest import MakeGateway

PATH = "/v1beta/models/gemini-2.5-flash:generateContent"
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
BAD_KEYS = ["AIza%0d%0aX-Inj:%201", "AIza%0aX-Inj:%201", "AIza%0dx", "AIza%00x"]


@pytest.mark.parametrize("client", ["h1", "aiohttp"])
@pytest.mark.parametrize("apis", ["gemini", "chat"])  # the key goes as it came, or moves with the translation
@pytest.mark.parametrize("key", BAD_KEYS)
async def test_a_query_key_no_header_can_carry_is_a_400_in_googles_shape(
    make_gateway: MakeGateway, client: str, apis: str, key: str
) -> None:
    gw = await make_gateway(f"server: {{upstream_client: {client}}}\n", upstream_yaml=f", apis: [{apis}]")
    async with gw.session.post(URL(f"{gw.base}{PATH}?key={key}", encoded=True), json=BODY) as r:
        body = await r.read()
        assert r.status == 400, body
    err = json.loads(body)["error"]
    assert err["status"] == "INVALID_ARGUMENT" and "AIza" not in err["message"]
    assert gw.fake.requests == []
    async with gw.session.post(URL(f"{gw.base}{PATH}?key=AIza-good", encoded=True), json=BODY) as r:
        assert r.status == 200  # the same request with a key a header can carry


async def test_a_head_the_upstream_client_cannot_write_is_a_400_not_a_500() -> None:
    """Both clients refuse a head with a CR, LF or NUL in it (BadRequestHead,
    tests/conformance): nothing was sent, and the request is at fault, so it is answered 400 in
    the client's shape, not retried, where an unhandled error was a 500."""
    calls = 0

    async def refusing(request: UpstreamRequest) -> UpstreamResponse:
        nonlocal calls
        calls += 1
        raise BadRequestHead("header 'x-goog-api-key' has a line break or NUL in it")

    cfg = parse_config("upstreams:\n  - {name: g, base_url: 'http://127.0.0.1:9/v1beta', apis: [gemini]}\n", env={})
    runner = make_runner(create_app(cfg, sender=refusing), shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{runner.addresses[0][1]}"
            async with session.post(base + PATH, json=BODY, headers={"x-goog-api-key": "k"}) as r:
                assert r.status == 400
                err = (await r.json())["error"]
            async with session.post(base + "/v1/chat/completions", json={
                    "model": "gemini-2.5-flash", "messages": [{"role": "user", "content": "hi"}]}) as r:  # fmt: skip
                assert r.status == 400
                assert (await r.json())["error"]["code"] == "invalid_header"
    finally:
        await runner.cleanup()
    assert err["status"] == "INVALID_ARGUMENT" and "x-goog-api-key" in err["message"]
    assert calls == 2  # once each: never retried
