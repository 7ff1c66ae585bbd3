"""The fixed-path table ahead of aiohttp's router answers exactly what the router would."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from prometheus_client import CollectorRegistry

from gateway.app import create_app
from gateway.config import parse_config
from gateway.exact_routes import ExactFirstRunner, exact_first, exact_table
from gateway.server import make_runner

CONFIG = "upstreams:\n  - {name: primary, base_url: 'http://127.0.0.1:9/v1'}\n"


def _gateway_app() -> web.Application:
    app = create_app(parse_config(CONFIG, env={}), registry=CollectorRegistry())
    app.freeze()
    return app


async def test_every_entry_is_what_the_router_resolves() -> None:
    app = _gateway_app()
    table = exact_table(app)
    # The API paths of every dialect and the ops paths are all fixed: all in the table.
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses", "/healthz", "/metrics"):
        assert any(p == path for _, p in table), path
    for (method, path), info in table.items():
        resolved = await app.router.resolve(make_mocked_request(method, path, app=app))
        assert resolved.route is info.route, (method, path)
        assert info.apps == (app,) and info.current_app is app


async def test_paths_with_a_variable_part_and_any_method_routes_are_left_to_the_router() -> None:
    app = _gateway_app()
    paths = {p for _, p in exact_table(app)}
    assert not any("{" in p for p in paths)
    methods = {m for m, _ in exact_table(app)}
    assert "*" not in methods


async def test_the_first_registered_route_wins_as_in_the_router() -> None:
    app = web.Application()

    async def first(request: web.Request) -> web.Response:
        return web.Response(text="first")

    async def second(request: web.Request) -> web.Response:
        return web.Response(text="second")

    app.router.add_post("/x", first)
    app.router.add_get("/y", second)
    app.router.add_post("/x", second)  # a second resource for the same path: never reached
    app.freeze()
    table = exact_table(app)
    assert table[("POST", "/x")].handler is first
    resolved = await app.router.resolve(make_mocked_request("POST", "/x", app=app))
    assert resolved.handler is first


async def test_an_app_with_middlewares_keeps_its_own_handler() -> None:
    @web.middleware
    async def mw(request: web.Request, handler):  # type: ignore[no-untyped-def]
        return await handler(request)

    async def fallback(request: web.Request) -> web.StreamResponse:
        return web.Response()

    app = web.Application(middlewares=[mw])
    app.router.add_get("/x", fallback)

    assert exact_first(app, fallback) is fallback


@pytest.fixture
async def served():  # type: ignore[no-untyped-def]
    """A small app served by the runner, and what each request saw."""
    seen: list[tuple[str, object, object, str]] = []
    expected: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(
            (request.path, request.match_info.route, request.app, dict(request.match_info).get("name", ""))
        )
        return web.Response(text=request.method)

    async def expect(request: web.Request) -> None:
        expected.append(request.path)
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    app = web.Application()
    fixed = app.router.add_post("/v1/fixed", record, expect_handler=expect)
    app.router.add_get("/v1/both", record)
    app.router.add_get("/v1/items/{name}", record)
    app.router.add_route("*", "/{tail:.*}", record)
    runner = make_runner(app)
    assert isinstance(runner, ExactFirstRunner)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    async with aiohttp.ClientSession() as session:
        yield base, session, app, fixed, seen, expected
    await runner.cleanup()


async def test_a_fixed_path_request_sees_its_route_and_app_without_the_router(  # type: ignore[no-untyped-def]
    served, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, session, app, fixed, seen, _ = served
    resolved: list[str] = []
    resolve = web.UrlDispatcher.resolve

    async def counted(self, request):  # type: ignore[no-untyped-def]
        resolved.append(request.path)
        return await resolve(self, request)

    monkeypatch.setattr(web.UrlDispatcher, "resolve", counted)
    async with session.post(base + "/v1/fixed", data=b"{}") as r:
        assert r.status == 200 and await r.text() == "POST"
    assert seen[-1][1] is fixed and seen[-1][2] is app
    async with session.head(base + "/v1/both") as r:  # add_get serves HEAD too
        assert r.status == 200
    assert resolved == []
    async with session.get(base + "/v1/items/abc") as r:
        assert r.status == 200
    assert resolved == ["/v1/items/abc"]


async def test_misses_reach_the_router(served) -> None:  # type: ignore[no-untyped-def]
    base, session, app, fixed, seen, _ = served
    async with session.get(base + "/v1/items/abc") as r:
        assert r.status == 200
    assert seen[-1][3] == "abc"
    async with session.get(base + "/v1/fixed") as r:  # a fixed path, another method: the catch-all
        assert r.status == 200
    assert seen[-1][1] is not fixed
    # The router matches the path as sent: an encoded slash is not the fixed path's slash.
    async with session.post(base + "/v1%2Ffixed", data=b"{}") as r:
        assert r.status == 200
    assert seen[-1][1] is not fixed


async def test_expect_continue_goes_through_the_router(served) -> None:  # type: ignore[no-untyped-def]
    base, _, _, fixed, seen, expected = served
    port = int(base.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /v1/fixed HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
    writer.write(b"{}")
    await writer.drain()
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
    writer.close()
    await writer.wait_closed()
    assert expected == ["/v1/fixed"] and seen[-1][1] is fixed
