"""A fast, fixed OpenAI-compatible upstream: the bench measures the proxies, not this.

Two request headers change its answer (both proxies forward them untouched):

* ``x-bench-trickle: COUNT,INTERVAL_S`` streams COUNT one-token chunks, one every
  INTERVAL_S, then the finish chunk and ``[DONE]`` (the concurrent-streams bench);
* ``x-bench-429: 1`` answers 429 (``retry-after-ms: 1``) the first time it sees a
  request id (``X-Request-Id``, the same on the gateway's retry) and succeeds the next.
"""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web

COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-mini",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
                 "finish_reason": "stop", "logprobs": None}],
    "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18},
}).encode()


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000,
            "model": "gpt-4o-mini", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


STREAM = (
    _chunk({"role": "assistant", "content": ""})
    + b"".join(_chunk({"content": w}) for w in ("Hello", "!", " How", " can", " I", " help", " today", "?"))
    + _chunk({}, "stop")
    + b"data: [DONE]\n\n"
)
TOKEN = _chunk({"content": " token"})


RATE_LIMITED = json.dumps({"error": {"message": "Rate limit reached for requests", "type": "requests",
                                      "param": None, "code": "rate_limit_exceeded"}}).encode()
_limited: set[str] = set()


async def trickle(request: web.Request, spec: str) -> web.StreamResponse:
    count_s, _, interval_s = spec.partition(",")
    count, interval = int(count_s), float(interval_s or "0.2")
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(_chunk({"role": "assistant", "content": ""}))
    for _ in range(count):
        await asyncio.sleep(interval)
        await resp.write(TOKEN)
    await resp.write(_chunk({}, "stop") + b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    if (spec := request.headers.get("x-bench-trickle")) is not None:
        return await trickle(request, spec)
    if request.headers.get("x-bench-429"):
        rid = request.headers.get("X-Request-Id", "")
        if rid not in _limited:
            if len(_limited) < 100_000:
                _limited.add(rid)
            return web.Response(status=429, body=RATE_LIMITED, content_type="application/json",
                                headers={"retry-after-ms": "1"})
        _limited.discard(rid)
    if b'"stream": true' in body or b'"stream":true' in body:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(STREAM)
        await resp.write_eof()
        return resp
    return web.Response(body=COMPLETION, content_type="application/json")


def main() -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
