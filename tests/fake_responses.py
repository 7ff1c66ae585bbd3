"""The fake upstream's OpenAI Responses API (`POST /v1/responses`), for Codex and the SDK.

Event shapes follow the installed openai-python types
(``openai/types/responses/response_{created,in_progress,output_item_added,
content_part_added,text_delta,text_done,content_part_done,output_item_done,completed,
failed}_event.py``, ``response.py``, ``response_usage.py``): every event carries ``type``
and a ``sequence_number``, and is sent as a named SSE event (``event: <type>``).

``ResponsesFake`` is a ``FakeUpstream`` that also answers ``/v1/responses``: with nothing
queued, a normal success (streamed when the request asks), with usage; with
``context_limit`` set, OpenAI's ``context_length_exceeded`` error for requests whose
estimated size exceeds it. Queued steps (``Reply``, ``Stream``, ``Drop``, ``Hang``,
callables) work as for chat completions; a ``Stream`` of these events should end with
``then="eof"`` (the Responses API sends no ``[DONE]``).
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from tests.fakeupstream import FakeUpstream, Recorded, Reply, Step, Stream, sse

MODEL = "gpt-5-codex"
TEXT_WORDS = ("Hello", " from", " the", " fake", " Responses", " API.")

# The wording the OpenAI API answers an oversized Responses request with.
OVERFLOW_MESSAGE = "Your input exceeds the context window of this model. Please adjust your input and try again."
OVERFLOW = {"error": {"message": OVERFLOW_MESSAGE, "type": "invalid_request_error",
                      "param": "input", "code": "context_length_exceeded"}}  # fmt: skip
RATE = {"error": {"message": "Rate limit reached for gpt-5-codex in organization org-fake on tokens per min (TPM). "
                             "Please try again in 1s.", "type": "tokens", "param": None,
                  "code": "rate_limit_exceeded"}}  # fmt: skip
UNAVAILABLE = {"error": {"message": "The server is overloaded or not ready yet.", "type": "server_error",
                         "param": None, "code": None}}  # fmt: skip


def usage(input_tokens: int = 21, output_tokens: int = 6, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": input_tokens + output_tokens}  # fmt: skip


def message_item(text: str, status: str = "completed", item_id: str = "msg_fake001") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" or text else []
    return {"id": item_id, "type": "message", "role": "assistant", "status": status, "content": content}


def response_obj(model: str = MODEL, status: str = "completed", output: list[dict[str, Any]] | None = None,
                 use: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
                 incomplete_reason: str | None = None) -> dict[str, Any]:
    """A ``Response`` object (``openai/types/responses/response.py``)."""
    return {
        "id": "resp_fake001", "object": "response", "created_at": int(time.time()), "status": status,
        "model": model, "output": output or [], "error": error,
        "incomplete_details": {"reason": incomplete_reason} if incomplete_reason else None,
        "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": None,
        "tool_choice": "auto", "tools": [], "top_p": None, "usage": use,
    }  # fmt: skip


def response_body(model: str = MODEL, text: str = "".join(TEXT_WORDS)) -> dict[str, Any]:
    """A buffered (``stream: false``) success."""
    return response_obj(model, output=[message_item(text)], use=usage(output_tokens=len(TEXT_WORDS)))


class Events:
    """Builds one stream's events with consecutive sequence numbers."""

    def __init__(self, model: str = MODEL) -> None:
        self.model = model
        self.seq = 0
        self.text = ""

    def ev(self, type_: str, **fields: Any) -> bytes:
        data = {"type": type_, "sequence_number": self.seq, **fields}
        self.seq += 1
        return sse(type_, data)

    def head(self) -> list[bytes]:
        """created and in_progress: contentless."""
        r = response_obj(self.model, status="in_progress")
        return [self.ev("response.created", response=r), self.ev("response.in_progress", response=r)]

    def open_message(self) -> list[bytes]:
        """output_item.added and content_part.added: still nothing a user would see."""
        return [
            self.ev("response.output_item.added", output_index=0, item=message_item("", "in_progress")),
            self.ev("response.content_part.added", item_id="msg_fake001", output_index=0, content_index=0,
                    part={"type": "output_text", "text": "", "annotations": []}),
        ]  # fmt: skip

    def deltas(self, words: tuple[str, ...] | list[str]) -> list[bytes]:
        out = []
        for w in words:
            self.text += w
            out.append(self.ev("response.output_text.delta", item_id="msg_fake001", output_index=0,
                               content_index=0, delta=w, logprobs=[]))  # fmt: skip
        return out

    def close_message(self) -> list[bytes]:
        return [
            self.ev("response.output_text.done", item_id="msg_fake001", output_index=0, content_index=0,
                    text=self.text, logprobs=[]),
            self.ev("response.content_part.done", item_id="msg_fake001", output_index=0, content_index=0,
                    part={"type": "output_text", "text": self.text, "annotations": []}),
            self.ev("response.output_item.done", output_index=0, item=message_item(self.text)),
        ]  # fmt: skip

    def completed(self, use: dict[str, Any] | None = None) -> bytes:
        r = response_obj(self.model, output=[message_item(self.text)], use=use or usage(output_tokens=6))
        return self.ev("response.completed", response=r)

    def failed(self, message: str = "The server had an error while processing your request.",
               code: str = "server_error") -> bytes:
        r = response_obj(self.model, status="failed", output=[message_item(self.text, "incomplete")],
                         error={"code": code, "message": message})  # fmt: skip
        return self.ev("response.failed", response=r)


def responses_stream(model: str = MODEL, words: tuple[str, ...] = TEXT_WORDS) -> list[bytes]:
    e = Events(model)
    return [*e.head(), *e.open_message(), *e.deltas(words), *e.close_message(), e.completed()]


def cut_stream(model: str = MODEL, words: tuple[str, ...] = ("Hel", "lo", " wor")) -> Stream:
    """A stream whose connection drops after some visible text."""
    e = Events(model)
    return Stream([*e.head(), *e.open_message(), *e.deltas(words)], then="drop")


def estimate_tokens(payload: dict[str, Any]) -> int:
    """The fake's 'tokenizer' for Responses requests (not the gateway's estimator)."""
    text = json.dumps(payload.get("input", "")) + json.dumps(payload.get("instructions") or "")
    text += json.dumps(payload.get("tools") or [])
    items = payload.get("input")
    return int(len(text) / 3.5) + 3 * (len(items) if isinstance(items, list) else 1)


class ResponsesFake(FakeUpstream):
    """``FakeUpstream`` plus ``/v1/responses``; ``times`` has each request's arrival (monotonic)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def responses_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/responses")]

    async def _answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        self.times.append(time.monotonic())
        if not request.path.endswith("/responses") or request.method != "POST":
            return await super()._answer(request, body)
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            payload = {}
        step: Any = self.steps.popleft() if self.steps else None
        while callable(step):
            step = step(payload)
        if step is None:
            step = self._default_responses(payload)
        return await self._play(request, step)

    def _default_responses(self, payload: dict[str, Any]) -> Step:
        model = payload.get("model") or MODEL
        if self.context_limit is not None and estimate_tokens(payload) > self.context_limit:
            return Reply(400, OVERFLOW)
        if payload.get("stream"):
            return Stream(responses_stream(model), then="eof")
        return Reply(200, response_body(model))
