"""A scriptable OpenAI-compatible upstream on loopback, for integration, e2e and deploy tests.

Queue what the next chat-completion requests get with ``script(*steps)``; with nothing
queued, every request gets a normal success (streamed when the request asks), with
usage. Steps:

* ``Reply(status, body, headers)``: a buffered response.
* ``Stream(events, then=...)``: an SSE stream of the given events (dicts become
  ``data: {...}`` chunks, bytes are sent raw), then ``"done"`` (``[DONE]``), ``"drop"``
  (the connection is cut), ``"stall"`` (silence until the client gives up) or
  ``"eof"`` (a clean end without ``[DONE]``).
* ``Drop()``: the connection is closed before any response.
* ``Hang(seconds)``: no response head for that long (then the connection is closed).
* a callable ``f(request_json) -> step``: decided from the request.

``fake.always = step`` answers every request with that step once the queue is empty (an
upstream that fails the same way however often it is retried).

With ``context_limit`` set, requests whose estimated size exceeds it are answered with
OpenAI's real overflow error (the wording of the ``context_length_exceeded`` error as
the OpenAI API returns it), computed from the request.

Use it in-loop (``async with FakeUpstream() as fake``) or from sync code and
subprocess tests in a thread (``with FakeUpstream.in_thread() as fake``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDict


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict/list → JSON; str/bytes → raw
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stream:
    events: list[Any]
    then: str = "done"  # done | drop | stall | eof
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Drop:
    pass


@dataclass
class Hang:
    seconds: float = 3600.0


Step = Reply | Stream | Drop | Hang | Callable[[dict[str, Any]], Any]


@dataclass
class Recorded:
    method: str
    path: str
    headers: CIMultiDict[str]
    body: bytes
    query: str = ""

    def json(self) -> Any:
        return json.loads(self.body)


def chat_completion(model: str = "gpt-4o-mini", content: str = "Hello from the fake upstream.",
                    prompt_tokens: int = 12, completion_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake123",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    }  # fmt: skip


def chunk(delta: dict[str, Any], finish: str | None = None, model: str = "gpt-4o-mini") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake123", "object": "chat.completion.chunk", "created": int(time.time()),
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip


def stream_events(model: str = "gpt-4o-mini", words: tuple[str, ...] = ("Hello", " from", " fake."),
                  include_usage: bool = False) -> list[Any]:
    events: list[Any] = [chunk({"role": "assistant", "content": ""}, model=model)]
    events += [chunk({"content": w}, model=model) for w in words]
    events.append(chunk({}, "stop", model=model))
    if include_usage:
        events.append({"id": "chatcmpl-fake123", "object": "chat.completion.chunk",
                       "created": int(time.time()), "model": model, "choices": [],
                       "usage": {"prompt_tokens": 11, "completion_tokens": len(words),
                                 "total_tokens": 11 + len(words)}})  # fmt: skip
    return events


def anthropic_message(model: str = "claude-sonnet-4-5", text: str = "Hello from the fake upstream.",
                      input_tokens: int = 12, output_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "msg_fake123", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }  # fmt: skip


def sse(name: str, data: dict[str, Any]) -> bytes:
    """One named SSE event, as Anthropic's API sends them."""
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def anthropic_head(model: str = "claude-sonnet-4-5", input_tokens: int = 25,
                   cache_read: int = 0) -> list[bytes]:
    """message_start, ping and an empty text block: contentless, held back by the gateway."""
    return [
        sse("message_start", {"type": "message_start", "message": {
            "id": "msg_fake123", "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": cache_read, "output_tokens": 1}}}),
        sse("ping", {"type": "ping"}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {"type": "text", "text": ""}}),
    ]  # fmt: skip


def text_delta(text: str, index: int = 0) -> bytes:
    return sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                       "delta": {"type": "text_delta", "text": text}})


def anthropic_tail(output_tokens: int = 15, stop_reason: str = "end_turn") -> list[bytes]:
    return [
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta",
                              "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                              "usage": {"output_tokens": output_tokens}}),
        sse("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip


def anthropic_stream(model: str = "claude-sonnet-4-5",
                     words: tuple[str, ...] = ("Hello", " from", " fake.")) -> list[bytes]:
    return [*anthropic_head(model), *(text_delta(w) for w in words), *anthropic_tail()]


def anthropic_error(status: int, type_: str, message: str) -> Reply:
    return Reply(status, {"type": "error", "error": {"type": type_, "message": message},
                          "request_id": "req_fake0001"})  # fmt: skip


def anthropic_overflow(limit: int, used: int) -> Reply:
    # The wording Anthropic's API answers with (see tests/corpus/anthropic.json).
    return anthropic_error(400, "invalid_request_error",
                           f"prompt is too long: {used} tokens > {limit} maximum")


def response_object(model: str = "gpt-5-codex", text: str = "Hello from the fake upstream.",
                    status: str = "completed", input_tokens: int = 30, output_tokens: int = 9) -> dict[str, Any]:
    return {
        "id": "resp_fake123", "object": "response", "created_at": int(time.time()), "status": status,
        "model": model, "error": None, "incomplete_details": None,
        "output": [{"id": "msg_fake1", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": input_tokens + output_tokens},
    }  # fmt: skip


class Seq:
    def __init__(self) -> None:
        self.n = -1

    def __call__(self, name: str, **data: Any) -> bytes:
        self.n += 1
        return sse(name, {"type": name, "sequence_number": self.n, **data})


def responses_head(model: str = "gpt-5-codex", seq: Seq | None = None) -> list[bytes]:
    """response.created, response.in_progress and an empty message item: contentless."""
    ev = seq or Seq()
    shell = {**response_object(model), "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_fake1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    return [
        ev("response.created", response=shell),
        ev("response.in_progress", response=shell),
        ev("response.output_item.added", output_index=0, item=item),
        ev("response.content_part.added", item_id="msg_fake1", output_index=0, content_index=0,
           part={"type": "output_text", "text": "", "annotations": []}),
    ]  # fmt: skip


def responses_stream(model: str = "gpt-5-codex", words: tuple[str, ...] = ("Hello", " from", " fake."),
                     end: str = "response.completed") -> list[bytes]:
    seq = Seq()
    out = responses_head(model, seq)
    out += [seq("response.output_text.delta", item_id="msg_fake1", output_index=0, content_index=0,
                delta=w, logprobs=[]) for w in words]
    out += responses_tail(model, "".join(words), seq, end)
    return out


def responses_deltas(words: tuple[str, ...], start_seq: int = 4) -> list[bytes]:
    seq = Seq()
    seq.n = start_seq - 1
    return [seq("response.output_text.delta", item_id="msg_fake1", output_index=0, content_index=0,
                delta=w, logprobs=[]) for w in words]


def responses_tail(model: str, text: str, seq: Seq, end: str = "response.completed") -> list[bytes]:
    done = response_object(model, text, status="completed" if end == "response.completed" else "incomplete")
    return [
        seq("response.output_text.done", item_id="msg_fake1", output_index=0, content_index=0, text=text, logprobs=[]),
        seq("response.output_item.done", output_index=0, item=done["output"][0]),
        seq(end, response=done),
    ]  # fmt: skip


def responses_continuation(rest: str, words: Sequence[str] | None = None, model: str = "gpt-5-codex",
                           output_tokens: int = 3) -> list[bytes]:
    """A continuation stream as vLLM sends one: its own response and item ids, numbering
    from 0, the text it adds in ``words`` (default: ``rest`` in one delta)."""
    seq = Seq()
    shell = {**response_object(model), "id": "resp_other", "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_other", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    done = response_object(model, rest, output_tokens=output_tokens)
    done["id"], done["output"][0]["id"] = "resp_other", "msg_other"
    where = {"item_id": "msg_other", "output_index": 0, "content_index": 0}
    return [
        seq("response.created", response=shell), seq("response.in_progress", response=shell),
        seq("response.output_item.added", output_index=0, item=item),
        seq("response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": []}),
        *(seq("response.output_text.delta", **where, delta=w, logprobs=[]) for w in (words or [rest])),
        seq("response.output_text.done", **where, text=rest, logprobs=[]),
        seq("response.content_part.done", **where, part={"type": "output_text", "text": rest, "annotations": []}),
        seq("response.output_item.done", output_index=0, item=done["output"][0]),
        seq("response.completed", response=done),
    ]  # fmt: skip


def responses_error(status: int, message: str, type_: str, code: str | None, param: str | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": type_, "param": param, "code": code}})


def responses_overflow() -> Reply:
    # The Responses API's overflow states no numbers (see tests/corpus/openai.json).
    return responses_error(400, "Your input exceeds the context window of this model. "
                           "Please adjust your input and try again.",
                           "invalid_request_error", "context_length_exceeded", "input")


def data_events(body: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, as the client received them."""
    return [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]


def named_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """``(event name, data)`` of each named SSE event (Messages, Responses)."""
    out = []
    for block in body.decode().split("\n\n"):
        name = next((line[7:] for line in block.split("\n") if line.startswith("event: ")), None)
        data = next((line[6:] for line in block.split("\n") if line.startswith("data: ")), None)
        if name and data:
            out.append((name, json.loads(data)))
    return out


def estimate_tokens(payload: dict[str, Any]) -> int:
    """The fake's 'tokenizer': deliberately not the gateway's estimator (3.5 chars/token)."""
    messages = payload.get("messages", [])
    text = json.dumps(messages) + (json.dumps(payload["system"]) if payload.get("system") else "")
    return int(len(text) / 3.5) + 3 * len(messages)


def overflow_error(limit: int, used: int, completion: int | None) -> Reply:
    if completion:
        msg = (f"This model's maximum context length is {limit} tokens. However, you requested "
               f"{used + completion} tokens ({used} in the messages, {completion} in the completion). "
               "Please reduce the length of the messages or completion.")
    else:
        msg = (f"This model's maximum context length is {limit} tokens. However, your messages "
               f"resulted in {used} tokens. Please reduce the length of the messages.")
    return Reply(400, {"error": {"message": msg, "type": "invalid_request_error",
                                 "param": "messages", "code": "context_length_exceeded"}})  # fmt: skip


class FakeUpstream:
    def __init__(self) -> None:
        self.steps: collections.deque[Step] = collections.deque()
        self.always: Step | None = None  # answers every request once the queued steps are used up
        self.requests: list[Recorded] = []
        self.context_limit: int | None = None
        self.models_listing: dict[str, Any] | None = None  # what GET /models answers
        self.cancelled = 0  # handlers torn down because the gateway went away
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *steps: Step) -> None:
        self.steps.extend(steps)

    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def responses_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/v1/responses")]

    def messages_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/v1/messages")]

    async def start(self) -> FakeUpstream:
        app = web.Application(client_max_size=512 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                                     shutdown_timeout=0.1)  # fmt: skip
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeUpstream:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @classmethod
    @contextlib.contextmanager
    def in_thread(cls) -> Iterator[FakeUpstream]:
        fake = cls()
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(fake.start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(fake.close())
            loop.close()

        thread = threading.Thread(target=run, name="fake-upstream", daemon=True)
        thread.start()
        started.wait(10)
        try:
            yield fake
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Recorded(request.method, request.path, CIMultiDict(request.headers), body,
                                      request.query_string))
        try:
            return await self._answer(request, body)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def _answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        path = request.path
        if path.endswith("/models") and request.method == "GET":
            return web.json_response(self.models_listing or {"object": "list", "data": [
                {"id": "gpt-4o-mini", "object": "model", "created": 0, "owned_by": "fake"}]})
        if path.endswith("/embeddings"):
            return web.json_response({"object": "list", "model": "text-embedding-3-small",
                                      "data": [{"object": "embedding", "index": 0,
                                                "embedding": [0.1, 0.2, 0.3]}],
                                      "usage": {"prompt_tokens": 3, "total_tokens": 3}})
        if path.endswith("/messages/count_tokens"):
            return web.json_response({"input_tokens": estimate_tokens(json.loads(body or b"{}"))})
        if not path.endswith(("/completions", "/messages", "/responses")):
            return web.json_response({"error": {"message": f"unknown path {path}",
                                                "type": "invalid_request_error", "code": None}},
                                     status=404)  # fmt: skip
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        step: Any = self.steps.popleft() if self.steps else self.always
        while callable(step):
            step = step(payload)
        if step is None:
            step = (self._default_messages(payload) if path.endswith("/messages")
                    else self._default_responses(payload) if path.endswith("/responses")
                    else self._default(payload))
        return await self._play(request, step)

    def _default(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "gpt-4o-mini"
        if self.context_limit is not None:
            used = estimate_tokens(payload)
            completion = payload.get("max_completion_tokens") or payload.get("max_tokens")
            if used + (completion or 0) > self.context_limit:
                return overflow_error(self.context_limit, used, completion)
        if payload.get("stream"):
            usage = bool((payload.get("stream_options") or {}).get("include_usage"))
            return Stream(stream_events(model, include_usage=usage))
        return Reply(200, chat_completion(model))

    def _default_messages(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "claude-sonnet-4-5"
        if self.context_limit is not None:
            used = estimate_tokens(payload)
            if used + (payload.get("max_tokens") or 0) > self.context_limit:
                return anthropic_overflow(self.context_limit, used)
        if payload.get("stream"):
            return Stream(anthropic_stream(model), then="eof")
        return Reply(200, anthropic_message(model))

    def _default_responses(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or "gpt-5-codex"
        if self.context_limit is not None:
            items = payload.get("input")
            view = {"messages": items if isinstance(items, list) else [{"content": items}],
                    "system": payload.get("instructions")}
            if estimate_tokens(view) > self.context_limit:
                return responses_overflow()
        if payload.get("stream"):
            return Stream(responses_stream(model), then="eof")
        return Reply(200, response_object(model))

    async def _play(self, request: web.Request, step: Step) -> web.StreamResponse:
        if isinstance(step, Reply):
            body = step.body
            if isinstance(body, (dict, list)):
                data, ctype = json.dumps(body).encode(), "application/json"
            else:
                data = body.encode() if isinstance(body, str) else (body or b"")
                ctype = step.headers.get("Content-Type", "application/json")
            headers = {"Content-Type": ctype, **step.headers}
            return web.Response(status=step.status, body=data, headers=headers)
        if isinstance(step, Drop):
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError  # aiohttp treats this as the handler going away
        if isinstance(step, Hang):
            await asyncio.sleep(step.seconds)
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        assert isinstance(step, Stream)
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                       "Cache-Control": "no-cache", **step.headers})
        await resp.prepare(request)
        for ev in step.events:
            if step.delay_s:
                await asyncio.sleep(step.delay_s)
            await resp.write(ev if isinstance(ev, bytes) else b"data: " + json.dumps(ev).encode() + b"\n\n")
        if step.then == "done":
            await resp.write(b"data: [DONE]\n\n")
        elif step.then == "drop":
            assert request.transport is not None
            request.transport.close()
            raise asyncio.CancelledError
        elif step.then == "stall":
            await asyncio.sleep(3600)
        await resp.write_eof()
        return resp
