"""A fast, fixed OpenAI-compatible upstream: the bench measures the proxies, not this.

It also answers `/v1/messages`, `/v1/responses` and the Gemini API's
`/v1beta/models/{model}:generateContent` and `:streamGenerateContent?alt=sse` with the same
text, in those APIs' own shapes and stream grammars (the translation bench compares a client
on its own API with the same client translated to chat).

Three request headers change its answer (both proxies forward them untouched):

* ``x-bench-trickle: COUNT,INTERVAL_S`` streams COUNT one-token chunks, one every
  INTERVAL_S, then the finish chunk and ``[DONE]`` (the concurrent-streams bench);
* ``x-bench-delay-ms: MS`` waits MS milliseconds before answering (``bench.public``'s 20 ms
  mock, and its long-held requests for the memory figures);
* ``x-bench-429: 1`` answers 429 (``retry-after-ms: 1``) the first time it sees a
  request id (``X-Request-Id``, the same on the gateway's retry) and succeeds the next.

A request whose key starts ``bench-rl-`` (the pool rows' deployments) is answered with
OpenAI's rate-limit headers for that key, as a provider's answers carry them, so the pool's
``headroom`` strategy has them to read; other requests get none.
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
# OpenAI sends a last chunk with no choices and the usage when the request asks for it
# (`stream_options.include_usage`, API reference "Create chat completion"); the gateway asks
# (upstreams[].stream_usage), the minimal proxy forwards the client's request, which does not.
# Without it the gateway's stream was measured on its fallback, counting tokens from the text.
STREAM_WITH_USAGE = STREAM[:-len(b"data: [DONE]\n\n")] + b"data: " + json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "gpt-4o-mini",
    "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18}}).encode() + (
    b"\n\ndata: [DONE]\n\n")


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


async def _delay(request: web.Request) -> None:
    if (ms := request.headers.get("x-bench-delay-ms")) is not None:
        await asyncio.sleep(float(ms) / 1000)


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    await _delay(request)
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
    usage = b'"include_usage":true' in body or b'"include_usage": true' in body
    return await _answer(request, _wants_stream(body), COMPLETION, STREAM_WITH_USAGE if usage else STREAM)


# The same answer in Anthropic Messages and OpenAI Responses, as those providers send it
# (event grammars: Anthropic "Streaming Messages", OpenAI "Responses streaming events"), so
# that a client on its own API and the same client translated to chat read the same text.
WORDS = ("Hello", "!", " How", " can", " I", " help", " today", "?")  # streamed, as the chat stream
TEXT = "Hello! How can I help you today?"  # buffered, as the chat completion
STREAMED = "".join(WORDS)


def _sse(name: str, doc: dict[str, object]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + json.dumps(doc).encode() + b"\n\n"


MESSAGE = {"id": "msg_bench", "type": "message", "role": "assistant", "model": "claude-bench",
           "content": [{"type": "text", "text": TEXT}], "stop_reason": "end_turn", "stop_sequence": None,
           "usage": {"input_tokens": 9, "output_tokens": 9}}
MESSAGES_BODY = json.dumps(MESSAGE).encode()
MESSAGES_STREAM = (
    _sse("message_start", {"type": "message_start", "message": {
        **MESSAGE, "content": [], "stop_reason": None, "usage": {"input_tokens": 9, "output_tokens": 1}}})
    + _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                   "content_block": {"type": "text", "text": ""}})
    + _sse("ping", {"type": "ping"})
    + b"".join(_sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                            "delta": {"type": "text_delta", "text": w}}) for w in WORDS)
    + _sse("content_block_stop", {"type": "content_block_stop", "index": 0})
    + _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"output_tokens": 9}})
    + _sse("message_stop", {"type": "message_stop"})
)

_ITEM = {"id": "msg_bench", "type": "message", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}
RESPONSE = {"id": "resp_bench", "object": "response", "created_at": 1700000000, "status": "completed",
            "model": "gpt-bench", "output": [_ITEM], "incomplete_details": None, "error": None,
            "usage": {"input_tokens": 9, "output_tokens": 9, "total_tokens": 18,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}
RESPONSES_BODY = json.dumps(RESPONSE).encode()


def _responses_stream(echo: dict[str, object] | None = None) -> bytes:
    item = {**_ITEM, "content": [{"type": "output_text", "text": STREAMED, "annotations": []}]}
    started = {**RESPONSE, "status": "in_progress", "output": [], "usage": None, **(echo or {})}
    open_item = {**_ITEM, "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    events: list[tuple[str, dict[str, object]]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0, "item": open_item}),
        ("response.content_part.added", {"item_id": "msg_bench", "output_index": 0, "content_index": 0, "part": part}),
        *(("response.output_text.delta", {"item_id": "msg_bench", "output_index": 0, "content_index": 0, "delta": w})
          for w in WORDS),
        ("response.output_text.done", {"item_id": "msg_bench", "output_index": 0, "content_index": 0, "text": STREAMED}),
        ("response.content_part.done", {"item_id": "msg_bench", "output_index": 0, "content_index": 0,
                                        "part": {**part, "text": STREAMED}}),
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": {**RESPONSE, "output": [item], **(echo or {})}}),
    ]
    return b"".join(_sse(name, {"type": name, "sequence_number": i, **doc}) for i, (name, doc) in enumerate(events))


RESPONSES_STREAM = _responses_stream()


def _wants_stream(body: bytes) -> bool:
    return b'"stream": true' in body or b'"stream":true' in body


_sent_by_key: dict[str, int] = {}


def _rate_limit_headers(request: web.Request) -> dict[str, str]:
    key = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not key.startswith("bench-rl-"):
        return {}
    n = _sent_by_key[key] = _sent_by_key.get(key, 0) + 1
    # OpenAI's names and formats (its rate-limits guide): a limit no bench run reaches.
    return {"x-ratelimit-limit-requests": "100000000", "x-ratelimit-remaining-requests": str(100000000 - n),
            "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-limit-tokens": "1000000000",
            "x-ratelimit-remaining-tokens": str(1000000000 - 18 * n), "x-ratelimit-reset-tokens": "1ms"}


async def _answer(request: web.Request, streamed: bool, body: bytes, stream: bytes) -> web.StreamResponse:
    """``stream`` as an event stream when the request asked for one, else ``body`` as JSON."""
    limits = _rate_limit_headers(request)
    if streamed:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", **limits})
        await resp.prepare(request)
        await resp.write(stream)
        await resp.write_eof()
        return resp
    return web.Response(body=body, content_type="application/json", headers=limits)


async def messages(request: web.Request) -> web.StreamResponse:
    sent = await request.read()
    await _delay(request)
    return await _answer(request, _wants_stream(sent), MESSAGES_BODY, MESSAGES_STREAM)


# OpenAI's response object echoes these request fields (API reference, "The response object"),
# in response.created, response.in_progress and response.completed too: a real agent's 17 KB of
# tools travel back three times, natively as well as translated.
_ECHOED = ("instructions", "max_output_tokens", "parallel_tool_calls", "temperature", "tool_choice", "tools",
           "top_p", "truncation")
_echoes: dict[bytes, tuple[bytes, bytes]] = {}


def _echoing(body: bytes) -> tuple[bytes, bytes]:
    """The answer and the stream for this request, with its echoed fields (cached: the bench
    sends the same bytes again and again, and the upstream's time is not what is measured)."""
    if b'"tools"' not in body and b'"instructions"' not in body:
        return RESPONSES_BODY, RESPONSES_STREAM
    if (hit := _echoes.get(body)) is None:
        req = json.loads(body)
        echo = {k: req[k] for k in _ECHOED if k in req}
        hit = _echoes[body] = (json.dumps({**RESPONSE, **echo}).encode(), _responses_stream(echo))
    return hit


async def responses(request: web.Request) -> web.StreamResponse:
    sent = await request.read()
    await _delay(request)
    body, stream = _echoing(sent)
    return await _answer(request, _wants_stream(sent), body, stream)


# The same answer as the Gemini API gives it (GenerateContentResponse, Gemini API reference;
# the shapes of Google's bodies in tests/corpus/answers/gemini-*.json): one document buffered;
# streamed, one document per event, events separated by CRLF pairs, and finishReason and
# usageMetadata on the last one.
_GEMINI_USAGE = {"promptTokenCount": 9, "candidatesTokenCount": 9, "totalTokenCount": 18}


def _gemini(text: str, last: bool) -> dict[str, object]:
    candidate: dict[str, object] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
    doc: dict[str, object] = {"candidates": [candidate], "modelVersion": "gemini-bench", "responseId": "bench"}
    if last:
        candidate["finishReason"] = "STOP"
        doc["usageMetadata"] = _GEMINI_USAGE
    return doc


GEMINI_BODY = json.dumps(_gemini(TEXT, True)).encode()
GEMINI_STREAM = b"".join(b"data: " + json.dumps(_gemini(w, i == len(WORDS) - 1)).encode() + b"\r\n\r\n"
                         for i, w in enumerate(WORDS))


def _google_error(status: int, state: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": message, "status": state}}, status=status)


async def gemini(request: web.Request) -> web.StreamResponse:
    await request.read()
    await _delay(request)
    model, _, method = request.match_info["rest"].partition(":")
    if not model or method not in ("generateContent", "streamGenerateContent"):
        return _google_error(404, "NOT_FOUND", f"{method or 'method'} is not found")
    # Without alt=sse Google streams one JSON array, which the gateway never asks for.
    if method == "streamGenerateContent" and request.query.get("alt") != "sse":
        return _google_error(400, "INVALID_ARGUMENT", "this mock streams only alt=sse")
    return await _answer(request, method == "streamGenerateContent", GEMINI_BODY, GEMINI_STREAM)


def main() -> None:
    # argv: PORT [--reuse-port]: several processes on one port (bench.public's mock on its own cores).
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1beta/models/{rest}", gemini)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None,
                reuse_port="--reuse-port" in sys.argv[2:], backlog=4096)


if __name__ == "__main__":
    main()
