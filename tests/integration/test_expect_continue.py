"""``Expect: 100-continue`` is answered by the gateway, never forwarded: the expectation was
the client's of the gateway, which has the whole body by then. Forwarded, the aiohttp upstream
client held the body back for the upstream's 100, which an upstream need not send (RFC 9110
§10.1.1 lets a server answer without it), and the request hung until first_byte_s. And the
gateway sends its 100 only to a client it will serve: one with a wrong key uploaded its body
for nothing."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from yarl import URL

from tests.capture_upstream import Capture
from tests.integration.conftest import Gateway, MakeGateway


@pytest.mark.parametrize("client", ["h1", "aiohttp"])
@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/chat/completions"])
async def test_a_client_expecting_100_continue_is_served_and_the_expectation_stays_here(
    make_gateway: MakeGateway, capture: Capture, client: str, path: str
) -> None:
    gw = await make_gateway(f"server: {{upstream_client: {client}}}\n",
                            upstreams=f"  - {{name: up, base_url: 'http://127.0.0.1:{capture.port}/v1'}}\n",
                            timeouts="{connect_s: 2, first_byte_s: 5.0, idle_s: 5.0}")  # fmt: skip
    body = {"model": "gpt-4o-mini", "input": "hi", "messages": [{"role": "user", "content": "hi"}]}
    started = time.monotonic()
    async with gw.session.post(gw.base + path, json=body, expect100=True) as r:
        assert r.status == 200, await r.read()
    assert time.monotonic() - started < 2.5  # not held until first_byte_s (5 s)
    [head] = capture.heads
    assert b"expect:" not in head.lower()


KEYED = "keys:\n  - {name: alice, key: gk-alice}\n"
BODY = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
                   "contents": [{"role": "user", "parts": [{"text": "hi"}]}]}).encode()  # fmt: skip


async def first_answer(gw: Gateway, target: str, headers: dict[str, str]) -> bytes:
    """What the gateway says first to a client that announces its body and waits: the head of
    a 100 Continue, or of the final answer."""
    port = URL(gw.base).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(f"POST {target} HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(BODY)}\r\nExpect: 100-continue\r\n{lines}\r\n".encode())  # fmt: skip
        await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    finally:
        writer.close()


@pytest.mark.parametrize(("target", "good", "bad"), [
    ("/v1/chat/completions", {"Authorization": "Bearer gk-alice"}, {"Authorization": "Bearer nope"}),
    ("/v1/messages", {"x-api-key": "gk-alice", "anthropic-version": "2023-06-01"},
     {"x-api-key": "nope", "anthropic-version": "2023-06-01"}),
    ("/v1/embeddings", {"Authorization": "Bearer gk-alice"}, {}),
    ("/v1beta/models/gemini-2.5-flash:generateContent?key=gk-alice", {},
     {"x-goog-api-key": "nope"}),
    ("/v1beta/models/gemini-2.5-flash:countTokens", {"x-goog-api-key": "gk-alice"}, {"x-goog-api-key": "nope"}),
    ("/v1/files?key=gk-alice", {}, {"x-goog-api-key": "nope"}),
])  # fmt: skip
async def test_100_continue_is_sent_only_to_a_holder_of_a_gateway_key(
    make_gateway: MakeGateway, target: str, good: dict[str, str], bad: dict[str, str]
) -> None:
    """A client with no key or a wrong one is answered 401 at once, in its API's shape and with
    the header contract, without uploading its body for nothing."""
    gw = await make_gateway(KEYED)
    assert (await first_answer(gw, target, good)).startswith(b"HTTP/1.1 100 Continue\r\n")
    refused = await first_answer(gw, target.replace("key=gk-alice", "key=nope"), bad)
    assert refused.startswith(b"HTTP/1.1 401 "), refused
    assert b"x-llm-error-type: auth" in refused.lower()
    assert gw.fake.requests == []


async def test_a_body_announced_over_the_limit_gets_its_413_instead_of_the_100(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYED + f"server: {{max_body_bytes: {len(BODY) - 1}}}\n")
    refused = await first_answer(gw, "/v1/chat/completions", {"Authorization": "Bearer gk-alice"})
    assert refused.startswith(b"HTTP/1.1 413 "), refused
