"""The app's fixed paths looked up in one dict, ahead of aiohttp's router.

aiohttp's ``Application._handle`` resolves every request through its router: it walks the
path's prefixes through the resource index, awaits a ``resolve`` per candidate resource,
builds a fresh match info, stacks the app on it and freezes it, and asks the running loop
(a ``getpid(2)`` on Python 3.11) for a debug flag. For the gateway's API paths, which have no
variable part, the answer is the same every time: here it is made once per (method, path)
at start-up and handed to each request. Everything else (a path with a variable part,
``Expect: 100-continue``, a miss, a 404 or 405) goes to the application's own handler
unchanged, so the router stays the only authority on what matches.

The only private piece is ``Request._match_info``, which ``_handle`` sets in the same
place; tests/unit/test_exact_routes.py holds every entry to what the router resolves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.web_urldispatcher import UrlMappingMatchInfo

from gateway.idle_clients import ClientTimeouts, DeadlineServer

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def exact_table(app: web.Application) -> dict[tuple[str, str], UrlMappingMatchInfo]:
    """(method, path) → a frozen match info, for every route of a plain (fixed) path, in the
    order the router would find them (the first registered wins, as it does there)."""
    table: dict[tuple[str, str], UrlMappingMatchInfo] = {}
    for resource in app.router.resources():
        if not isinstance(resource, web.PlainResource):
            continue
        path = resource.canonical
        for route in resource:
            if route.method == hdrs.METH_ANY:
                continue  # matches any method: left to the router
            key = (route.method, path)
            if key in table:
                continue
            info = UrlMappingMatchInfo({}, route)
            info.add_app(app)
            info.freeze()
            table[key] = info
    return table


def exact_first(app: web.Application, fallback: Handler) -> Handler:
    """``fallback`` (the application's handler) with the fixed paths answered from a table.
    Only where the app runs no middlewares: those wrap the handler inside ``_handle``."""
    if app.middlewares:
        return fallback
    table = exact_table(app)
    # CONNECT's target is an authority (host:port), not a path: the router matches no route to
    # it and aiohttp answered a text/plain 404 of its own. The app's CONNECT route takes it.
    connect = next((r for r in app.router.routes() if r.method == hdrs.METH_CONNECT), None)
    connect_info = None
    if connect is not None:
        connect_info = UrlMappingMatchInfo({"tail": ""}, connect)
        connect_info.add_app(app)
        connect_info.freeze()

    async def handle(request: web.Request) -> web.StreamResponse:
        if connect_info is not None and request.method == hdrs.METH_CONNECT:
            request._match_info = connect_info
            return await connect_info.handler(request)
        # The path as the router matches it (percent-encoded slashes stay encoded).
        info = table.get((request.method, request.rel_url.path_safe))
        if info is None or hdrs.EXPECT in request.headers:
            return await fallback(request)
        request._match_info = info  # what _handle sets after its resolve
        return await info.handler(request)

    return handle


class ExactFirstRunner(web.AppRunner):
    """An ``AppRunner`` whose server looks fixed paths up before the router (:func:`exact_first`).
    ``client_timeouts``: how long a client connection may wait to send a request (idle_clients.py)."""

    def __init__(
        self, app: web.Application, *, client_timeouts: ClientTimeouts | None = None, **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self._client_timeouts = client_timeouts

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The app's request factory makes web.Request objects, as _handle itself expects.
        server.request_handler = exact_first(self.app, server.request_handler)  # type: ignore[assignment]
        # Malformed HTTP answered without quoting it (bad_http.py); silent connections closed.
        return DeadlineServer.with_timeouts(server, self._client_timeouts)
