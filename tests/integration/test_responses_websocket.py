"""The Responses API's WebSocket mode (``GET /v1/responses`` with ``Upgrade: websocket``).

The handshake's headers are Codex 0.171.0's on its built-in provider (``openai_base_url`` in
config.toml), recorded by a listener that logged each request's head (audit of 2026-11-30):
it opens the WebSocket before any HTTP request and falls back to HTTPS on a 426 alone."""

from __future__ import annotations

import json

import aiohttp
import pytest

OPERATOR = "sk-OPERATOR-SECRET"
# Codex 0.171.0's handshake, less its session ids and turn metadata (which the gateway never reads).
CODEX_HANDSHAKE = {
    "Authorization": "Bearer dummy",
    "User-Agent": "codex_exec/0.171.0 (Debian 12.0.0; x86_64) unknown (codex_exec; 0.171.0)",
    "originator": "codex_exec",
    "openai-beta": "responses_websockets=2026-02-06",
    "version": "0.171.0",
}


async def test_an_upgrade_is_answered_426_in_the_responses_shape_and_never_forwarded(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=f", api_key: {OPERATOR}")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 426
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_upstream_attempts_total", upstream="primary", outcome="unknown") == 0

    # The body, as a client that reads it (the openai SDK's error) gets it.
    upgrade = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
               "Sec-WebSocket-Key": "AK4kJq+TYivE45J4c807RQ==", **CODEX_HANDSHAKE}  # fmt: skip
    async with gw.session.get(gw.base + "/v1/responses", headers=upgrade) as r:
        status, headers, body = r.status, r.headers, await r.read()
    assert status == 426
    assert headers["x-llm-attempts"] == "0" and headers["x-should-retry"] == "false"
    assert headers["Content-Type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["code"] == "websocket_not_supported" and error["param"] is None
    assert "POST /v1/responses" in error["message"]
    assert OPERATOR.encode() not in body
    assert gw.fake.requests == []


async def test_the_upgrade_is_refused_before_the_key_check(make_gateway) -> None:
    """Codex retries a refused handshake other than 426 up to 5 times before HTTPS, where a bad
    key gets the 400 it shows at once: the upgrade is refused alike for every caller."""
    gw = await make_gateway(extra_yaml="server: {client_keys: [gw-key-1]}\n")
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await gw.session.ws_connect(gw.base + "/v1/responses", headers=CODEX_HANDSHAKE)
    assert refused.value.status == 426
    assert gw.fake.requests == []


async def test_a_plain_get_of_the_path_is_still_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.get(gw.base + "/v1/responses", headers={"Authorization": "Bearer x"}) as r:
        await r.read()
    assert [(q.method, q.path) for q in gw.fake.requests] == [("GET", "/v1/responses")]
