"""A client that stops waiting for the response head before the gateway's timeouts: Gemini CLI
0.61 gives up after 60 s without one (undici's headersTimeout, policy/clients.client_head_s).
Audit: a primary that read the request and never answered took timeouts.first_byte_s (300 s)
of each CLI attempt; the CLI left after 60 s, the gateway logged 499 with one attempt, and the
fallback was never asked (10 CLI attempts, ~13 minutes, no answer). Each attempt now waits at
most half of what is left of the client's 57 s (its 60 s less a margin), so the fallback
answers before the client gives up.

The clock is injected: the hung primary is a sender that moves it on by the timeout it was
given and fails as a first-byte timeout would; the fallback is the fake upstream."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import parse_config
from gateway.errors import TransportError
from gateway.fake.upstream import FakeUpstream
from gateway.server import make_runner
from gateway.upstream import UpstreamFailure, UpstreamRequest, UpstreamResponse, new_sender

CORPUS = Path(__file__).parents[1] / "corpus" / "requests" / "gemini-cli-0.61-first.json"
HUNG = "http://127.0.0.1:9/v1beta"


async def _ask(headers: dict[str, str], fallbacks: str = "[backup]") -> tuple[int, bytes, list[tuple[str, float]]]:
    """Gemini CLI's captured first request, with ``headers``, through a gateway whose primary
    hangs: the status, the body, and each attempt's (upstream, first-byte timeout)."""
    captured: dict[str, Any] = json.loads(CORPUS.read_text())
    fake = await FakeUpstream().start()
    cfg = parse_config(
        "upstreams:\n"
        f"  - {{name: primary, base_url: '{HUNG}', apis: [gemini], api_key: K, fallbacks: {fallbacks}}}\n"
        f"  - {{name: backup, base_url: '{fake.url.removesuffix('/v1')}/v1beta', apis: [gemini], api_key: K}}\n"
        "timeouts: {connect_s: 10, first_byte_s: 300, idle_s: 120}\n"
        "loop_breaker: {enabled: false}\n",
        env={},
    )
    clock = [1000.0]
    asked: list[tuple[str, float]] = []
    real = new_sender(cfg)

    async def sender(request: UpstreamRequest) -> UpstreamResponse:
        if request.url.startswith(HUNG):
            asked.append(("primary", request.first_byte_timeout_s))
            clock[0] += request.first_byte_timeout_s  # it never answers: its whole timeout passes
            raise UpstreamFailure(TransportError.FIRST_BYTE_TIMEOUT)
        asked.append(("backup", request.first_byte_timeout_s))
        return await real(request)

    await real.start()
    runner = make_runner(create_app(cfg, sender=sender, monotonic=lambda: clock[0]), shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}{captured['path']}"
            async with session.post(url, json=captured["body"], headers={**headers, "x-goog-api-key": "k"}) as r:
                return r.status, await r.read(), asked
    finally:
        await runner.cleanup()
        await real.close()
        await fake.close()


async def test_gemini_cli_gets_the_fallbacks_answer_before_its_60_s_head_timeout() -> None:
    headers = gemini_cli_headers()
    assert headers["User-Agent"].startswith("GeminiCLI-tui/0.61.0/")  # as captured
    status, body, asked = await _ask(headers)
    assert status == 200 and b"fakeResp0001" in body
    assert [who for who, _ in asked] == ["primary", "backup"]
    assert asked[0][1] == pytest.approx(57 / 2)  # half of the client's 57 s: the fallback fits after it
    assert asked[1][1] == pytest.approx(57 / 2)  # the last upstream: all that is left
    assert sum(s for _, s in asked) <= 57


def gemini_cli_headers() -> dict[str, str]:
    return {k: v for k, v in json.loads(CORPUS.read_text())["headers"].items() if k.lower() != "content-type"}


async def test_without_a_fallback_the_upstream_has_all_57_s_and_the_cli_gets_a_504_in_time() -> None:
    """A slow model is cut no sooner than the CLI would cut it, and the CLI gets a typed error
    it retries instead of its own timeout; no retry starts that could not answer in time."""
    status, body, asked = await _ask(gemini_cli_headers(), fallbacks="[]")
    assert status == 504 and b"DEADLINE_EXCEEDED" in body
    assert asked == [("primary", pytest.approx(57.0))]


async def test_a_client_that_waits_longer_keeps_the_gateways_own_first_byte_timeout() -> None:
    status, body, asked = await _ask({"User-Agent": "google-genai-sdk/1.30.0 gl-node/v20.20.2"})
    assert status == 200 and b"fakeResp0001" in body
    assert asked[0] == ("primary", 300.0)
