"""The Gemini API's side endpoints against the fake as a Gemini upstream (``gateway/fake``,
which answers and refuses as Google does): ``countTokens`` with a Gemini client's ``?key=``
on a pass-through."""

from __future__ import annotations

import json

from tests.integration.conftest import Gateway, MakeGateway

COUNT = "/v1beta/models/gemini-2.5-flash:countTokens"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "hello there"}]}]}


async def pass_through(make_gateway: MakeGateway) -> Gateway:
    """No api_key: the client's own key goes on; the fake refuses a request without one (403)."""
    gw = await make_gateway(upstream_yaml=", apis: [gemini]")
    gw.fake.require_key = True
    return gw


async def test_count_tokens_moves_a_query_key_to_the_header_on_a_pass_through(make_gateway) -> None:
    """docs/security.md: a Gemini client's ``?key=`` "has its key moved into the upstream's
    key_header". generateContent did; countTokens sent no key and got Google's 403."""
    gw = await pass_through(make_gateway)
    async with gw.session.post(gw.base + COUNT + "?key=okkey", json=HELLO) as r:
        body = await r.read()
        assert r.status == 200, body
    assert json.loads(body)["totalTokens"] > 0
    [asked] = gw.fake.requests
    assert asked.path == "/v1/models/gemini-2.5-flash:countTokens"
    assert asked.headers["x-goog-api-key"] == "okkey" and "okkey" not in asked.query
