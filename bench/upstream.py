"""A fast, fixed OpenAI-compatible upstream: the bench measures the proxies, not this."""

from __future__ import annotations

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


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.read()
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
