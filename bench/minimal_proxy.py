"""The baseline: the least an aiohttp reverse proxy can do (pooled session, streamed body)."""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web

HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def make_app(upstream: str, pool: int = 256) -> web.Application:
    app = web.Application()

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=pool))

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with app["session"].post(upstream + "/chat/completions", data=body, headers=headers) as up:
            resp = web.StreamResponse(status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")})
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/v1/chat/completions", forward)
    return app


def main() -> None:
    # argv: PORT UPSTREAM [POOL]; the pool is the same size as the gateway's in each bench.
    pool = int(sys.argv[3]) if len(sys.argv) > 3 else 256
    web.run_app(make_app(sys.argv[2], pool), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None,
                backlog=1024)


if __name__ == "__main__":
    main()
