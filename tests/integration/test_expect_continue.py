"""``Expect: 100-continue`` is answered by the gateway, never forwarded: the expectation was
the client's of the gateway, which has the whole body by then. Forwarded, the aiohttp upstream
client held the body back for the upstream's 100, which an upstream need not send (RFC 9110
§10.1.1 lets a server answer without it), and the request hung until first_byte_s."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from tests.capture_upstream import Capture
from tests.integration.conftest import MakeGateway


@pytest.fixture
async def capture() -> AsyncIterator[Capture]:
    upstream = await Capture().start()
    yield upstream
    await upstream.close()


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
