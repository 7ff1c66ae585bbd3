"""The container's HEALTHCHECK asks the address the running gateway wrote it listens on, else
the one the config says; never a hard-coded one."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from aiohttp import web

from gateway.healthcheck import health_url, main
from gateway.listening import ADDRESS_FILE_ENV, forget_address, record_address, recorded_address


@pytest.mark.parametrize(("host", "url"), [
    ("0.0.0.0", "http://127.0.0.1:8080/healthz"),
    ("127.0.0.1", "http://127.0.0.1:8080/healthz"),
    ("::", "http://[::1]:8080/healthz"),
    ("::1", "http://[::1]:8080/healthz"),
    ("gateway.local", "http://gateway.local:8080/healthz"),
])
def test_health_url(host: str, url: str) -> None:
    assert health_url(host, 8080) == url


async def test_exit_code_follows_healthz_on_the_configured_port(tmp_path: Path, unused_tcp_port: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADDRESS_FILE_ENV, raising=False)
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


async def _healthz_on(port: int) -> web.AppRunner:
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/healthz", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


async def test_the_address_the_running_gateway_wrote_wins_over_the_config(
    tmp_path: Path, unused_tcp_port_factory, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    listening, elsewhere = unused_tcp_port_factory(), unused_tcp_port_factory()
    runner = await _healthz_on(listening)
    address = tmp_path / "address"
    monkeypatch.setenv(ADDRESS_FILE_ENV, str(address))
    config = tmp_path / "gateway.yaml"
    try:
        record_address([f"http://0.0.0.0:{listening}"])
        assert json.loads(address.read_text())["listen"] == [f"http://0.0.0.0:{listening}"]
        # The file now names a port the running gateway does not listen on (a restart applies
        # it), or says nothing valid at all (a reload refused it): the gateway is still healthy.
        for text in (f"server: {{port: {elsewhere}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:1/v1'}}]\n",
                     "server: {port: eighty}\n"):
            config.write_text(text)
            assert await asyncio.to_thread(main, [str(config)]) == 0
        forget_address()
        assert not address.exists()
        # Not written (yet, or a read-only /tmp): the config's address is asked.
        config.write_text(f"server: {{port: {listening}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:1/v1'}}]\n")
        assert await asyncio.to_thread(main, [str(config)]) == 0
        config.write_text(f"server: {{port: {elsewhere}}}\nupstreams: [{{name: a, base_url: 'http://127.0.0.1:1/v1'}}]\n")
        assert await asyncio.to_thread(main, [str(config)]) == 1
    finally:
        await runner.cleanup()


def test_an_address_file_that_cannot_be_written_is_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(ADDRESS_FILE_ENV, str(tmp_path / "missing-dir" / "address"))
    record_address(["http://127.0.0.1:8080"])
    err = capsys.readouterr().err
    assert err.startswith(f"llm-gateway: warning: cannot write {ADDRESS_FILE_ENV}") and "config file instead" in err
    assert recorded_address() is None


def test_another_process_s_address_file_is_left_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    address = tmp_path / "address"
    address.write_text(json.dumps({"listen": ["http://127.0.0.1:8080"], "pid": os.getpid() + 1}))
    monkeypatch.setenv(ADDRESS_FILE_ENV, str(address))
    forget_address()
    assert recorded_address() == ["http://127.0.0.1:8080"]
