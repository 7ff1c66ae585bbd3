"""Methods the gateway does not forward: TRACE and CONNECT, on any path. Each is a 405 with
``Allow`` in the path's API error shape, with the header contract, and nothing reaches the
upstream (a TRACE forwarded came back with the operator's ``api_key`` in its echo). Other
methods keep their passthrough (GET /v1/chat/completions is OpenAI's stored completions:
tests/integration/test_proxy.py)."""

from __future__ import annotations

import json

import pytest

from tests.integration.test_bad_http import raw_exchange

OPERATOR = "sk-OPERATOR-SECRET"
UPSTREAM = f", api_key: {OPERATOR}"


def _request(method: str, target: str, extra: str = "") -> bytes:
    return (f"{method} {target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer client\r\n{extra}"
            "Connection: close\r\nContent-Length: 0\r\n\r\n").encode()  # fmt: skip


@pytest.mark.parametrize(("method", "target", "allow"), [
    ("TRACE", "/v1/models", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ("TRACE", "/v1/chat/completions", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ("TRACE", "/v1/messages", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ("TRACE", "/v1/gateway/key", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ("TRACE", "/healthz", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    ("CONNECT", "api.openai.com:443", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
])  # fmt: skip
async def test_a_method_not_served_is_refused_405_and_never_forwarded(
    make_gateway, method: str, target: str, allow: str
) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    status, headers, body = await raw_exchange(gw.base, _request(method, target))
    assert status.split(" ", 2)[1] == "405", (status, body)
    assert headers["allow"] == allow
    assert len(headers["x-request-id"]) == 32
    assert headers["x-llm-error-type"] == "unknown" and headers["x-llm-error-retryable"] == "false"
    assert headers["content-type"].startswith("application/json")
    assert OPERATOR.encode() not in body
    assert gw.fake.requests == []
    doc = json.loads(body)
    if "/messages" in target:
        assert doc["type"] == "error" and doc["error"]["type"] == "invalid_request_error"
    else:
        assert doc["error"]["code"] == "method_not_allowed"


async def test_other_v1_paths_are_still_forwarded_with_their_method(make_gateway) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    status, _, _ = await raw_exchange(gw.base, _request("DELETE", "/v1/files/file-1"))
    assert status.split(" ", 2)[1] != "405"
    assert [r.method for r in gw.fake.requests] == ["DELETE"]
