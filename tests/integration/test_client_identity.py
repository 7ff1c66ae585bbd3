"""What the provider learns about the client, and what the client learns about the gateway:
the client's cookies and addresses stay here unless the operator forwards them
(``server.forward_client_headers``), and no response names the gateway's software versions."""

from __future__ import annotations

import asyncio

import pytest

from gateway.config import ConfigError, parse_config
from tests.fakeupstream import Reply, Stream, chunk

IDENTITY = {
    "Cookie": "session=abc", "X-Forwarded-For": "203.0.113.7, 10.0.0.2", "Forwarded": "for=203.0.113.7",
    "X-Real-IP": "203.0.113.7", "X-Forwarded-Host": "gateway.internal", "X-Forwarded-Proto": "https",
    "X-Forwarded-Port": "443",
}  # fmt: skip


async def test_the_clients_cookies_and_addresses_are_not_forwarded(make_gateway) -> None:
    gw = await make_gateway()
    status, _, _ = await gw.chat(headers={**IDENTITY, "X-Custom": "kept"})
    assert status == 200
    sent = gw.fake.chat_requests()[-1].headers
    assert not {k.lower() for k in IDENTITY} & {k.lower() for k in sent}
    assert sent["X-Custom"] == "kept"


async def test_the_operator_can_forward_some_of_them(make_gateway) -> None:
    gw = await make_gateway("server: {forward_client_headers: [Cookie, x-forwarded-for]}\n")
    await gw.chat(headers=IDENTITY)
    sent = gw.fake.chat_requests()[-1].headers
    assert sent["Cookie"] == "session=abc" and sent["X-Forwarded-For"] == "203.0.113.7, 10.0.0.2"
    assert "Forwarded" not in sent and "X-Real-IP" not in sent


async def test_passthrough_paths_drop_them_too(make_gateway) -> None:
    gw = await make_gateway()
    async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "m", "input": "x"}, headers=IDENTITY) as r:
        assert r.status == 200
    sent = gw.fake.requests[-1].headers
    assert not {k.lower() for k in IDENTITY} & {k.lower() for k in sent}


def test_only_the_withheld_headers_can_be_forwarded() -> None:
    base = "upstreams: [{name: a, base_url: 'http://127.0.0.1:9000/v1'}]\n"
    with pytest.raises(ConfigError) as e:
        parse_config("server: {forward_client_headers: [cookie, authorization]}\n" + base, env={})
    [problem] = e.value.problems
    assert problem.startswith("server.forward_client_headers") and "authorization" in problem
    assert parse_config(base, env={}).server.forward_client_headers == ()


def _no_versions(server: str | None) -> None:
    assert server is None or not any(c.isdigit() for c in server), server
    assert server is None or ("aiohttp" not in server and "Python" not in server), server


async def test_no_response_names_the_software_versions(make_gateway) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([chunk({"content": "a"}), chunk({}, "stop")]),
                   Reply(400, {"error": {"message": "bad", "type": "invalid_request_error", "code": None}}))
    async with gw.session.post(gw.base + "/v1/chat/completions", json={
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:  # fmt: skip
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        await r.read()
        _no_versions(r.headers.get("Server"))
    status, headers, _ = await gw.chat()  # the upstream's own 400, relayed
    assert status == 400
    _no_versions(headers.get("Server"))
    status, headers, _ = await gw.chat(data=b"{nope")  # a gateway-made error
    assert status == 400
    _no_versions(headers.get("Server"))
    for path in ("/healthz", "/metrics", "/nowhere"):
        async with gw.session.get(gw.base + path) as r:
            _no_versions(r.headers.get("Server"))
    # Malformed HTTP is answered by aiohttp's own protocol handler, before any route.
    host, port = gw.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
    head = (await reader.read(4096)).decode("latin-1")
    writer.close()
    assert head.split("\r\n")[0].endswith(" 400 Bad Request")
    server = next((line.split(":", 1)[1].strip() for line in head.split("\r\n") if line.lower().startswith("server:")), None)
    _no_versions(server)
