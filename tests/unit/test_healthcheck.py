"""The container's HEALTHCHECK asks the address the config says, not a hard-coded one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from gateway.healthcheck import health_url, main


@pytest.mark.parametrize(("host", "url"), [
    ("0.0.0.0", "http://127.0.0.1:8080/healthz"),
    ("127.0.0.1", "http://127.0.0.1:8080/healthz"),
    ("::", "http://[::1]:8080/healthz"),
    ("::1", "http://[::1]:8080/healthz"),
    ("gateway.local", "http://gateway.local:8080/healthz"),
])
def test_health_url(host: str, url: str) -> None:
    assert health_url(host, 8080) == url


async def test_exit_code_follows_healthz_on_the_configured_port(tmp_path: Path, unused_tcp_port: int) -> None:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    config = tmp_path / "gateway.yaml"
    config.write_text(f"server: {{host: 0.0.0.0, port: {unused_tcp_port}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:1/v1'}}]\n")
    try:
        assert await asyncio.to_thread(main, [str(config)]) == 0
    finally:
        await runner.cleanup()
    assert main([str(config)]) == 1  # nothing listens any more
    assert main([str(tmp_path / "missing.yaml")]) == 1
