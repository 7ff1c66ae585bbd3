"""With client keys configured, only their holders reach the upstream (and the operator's
provider key); refusals are 401 in the dialect's own shape, counted, never forwarded."""

import json

import pytest

KEYS = "server: {client_keys: 'gk-alpha-123456,gk-beta-654321'}\n"
UPSTREAM_KEY = ", api_key: sk-operator-secret"


@pytest.mark.parametrize("headers", [
    {},
    {"Authorization": "Bearer gk-alpha-12345"},  # a prefix of a real key
    {"Authorization": "Bearer gk-alpha-1234567"},  # a real key plus one character
    {"Authorization": "gk-alpha-123456"},  # no scheme
    {"Authorization": "Basic gk-alpha-123456"},
    {"x-api-key": "wrong"},
    {"Authorization": "Bearer sk-operator-secret"},  # the provider key is not a gateway key
], ids=["missing", "prefix", "longer", "no-scheme", "basic", "wrong-x-api-key", "provider-key"])
async def test_wrong_missing_or_partial_keys_never_reach_the_upstream(make_gateway, headers) -> None:
    gw = await make_gateway(KEYS, UPSTREAM_KEY)
    status, h, body = await gw.chat(headers=headers)
    assert status == 401 and h["x-llm-error-type"] == "auth" and h["x-should-retry"] == "false"
    assert h["WWW-Authenticate"].startswith("Bearer")
    err = json.loads(body)["error"]
    assert err["code"] in ("missing_client_key", "invalid_client_key")
    assert "gk-" not in body.decode() and "sk-operator" not in body.decode()
    assert gw.fake.requests == []
    refused = sum(gw.metric("llm_gateway_client_auth_refusals_total", reason=r) for r in ("missing", "invalid"))
    assert refused == 1


@pytest.mark.parametrize("headers", [
    {"Authorization": "Bearer gk-alpha-123456"},
    {"authorization": "bearer gk-beta-654321"},
    {"x-api-key": "gk-beta-654321"},
])
async def test_a_valid_key_is_served_with_the_operators_key_and_never_forwarded(make_gateway, headers) -> None:
    gw = await make_gateway(KEYS, UPSTREAM_KEY)
    status, _, _ = await gw.chat(headers=headers)
    assert status == 200
    [sent] = gw.fake.chat_requests()
    assert sent.headers["Authorization"] == "Bearer sk-operator-secret"
    assert "x-api-key" not in sent.headers and "gk-" not in str(dict(sent.headers))


async def test_refusals_use_each_dialects_envelope(make_gateway) -> None:
    gw = await make_gateway(KEYS, UPSTREAM_KEY)
    status, _, body = await gw.messages(headers={"x-api-key": "nope"})
    doc = json.loads(body)
    assert status == 401 and doc["type"] == "error" and doc["error"]["type"] == "authentication_error"
    status, _, body = await gw.responses()
    assert status == 401 and set(json.loads(body)["error"]) >= {"message", "type", "param", "code"}
    async with gw.session.get(gw.base + "/v1/models") as r:
        assert r.status == 401
    assert gw.fake.requests == []


async def test_anthropic_upstream_gets_its_key_in_x_api_key(make_gateway) -> None:
    gw = await make_gateway(KEYS, UPSTREAM_KEY + ", key_header: x-api-key")
    status, _, _ = await gw.messages(headers={"Authorization": "Bearer gk-alpha-123456"})
    assert status == 200
    [sent] = gw.fake.messages_requests()
    assert sent.headers["x-api-key"] == "sk-operator-secret" and "Authorization" not in sent.headers


async def test_ops_endpoints_and_the_claude_code_probe_need_no_key(make_gateway) -> None:
    gw = await make_gateway(KEYS, UPSTREAM_KEY)
    for method, path in (("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"), ("HEAD", "/api/hello")):
        async with gw.session.request(method, gw.base + path) as r:
            assert r.status == 200, path
