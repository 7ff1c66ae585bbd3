"""A Responses upstream whose stream ends ``response.completed`` then ``data: [DONE]``, as
LiteLLM's proxy answers ``/v1/responses`` (BerriAI/litellm#34095: "the last two being
`response.completed` and `[DONE]`"; OpenAI's own stream has no such marker). The gateway read the
marker as a malformed event and, after the answer it had already finished, sent each client an
error (review): a chat client a ``finish_reason: "error"`` chunk after its ``[DONE]``, a Messages
client an error event after ``message_stop``, a Responses client a ``response.failed`` after
``response.completed``. The marker after the answer's end is now dropped on every path."""

from __future__ import annotations

import time

import pytest

from gateway.apis.base import EventKind
from gateway.apis.responses.wire import ResponsesStreamReader
from gateway.sse import EventSplitter
from tests.fakeupstream import Stream, responses_stream

UPSTREAM = ", apis: [responses], model_map: {'*': gpt-5-codex}"
HI = [{"role": "user", "content": "hi"}]
CLIENTS = {
    "chat": ("/v1/chat/completions", {"model": "gpt-4o", "stream": True, "messages": HI}),
    "messages": ("/v1/messages", {"model": "gpt-4o", "stream": True, "max_tokens": 50, "messages": HI}),
    "gemini": ("/v1beta/models/gpt-4o:streamGenerateContent?alt=sse",
               {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
    "responses": ("/v1/responses", {"model": "gpt-4o", "stream": True, "input": "hi"}),
}  # fmt: skip
# The last event each client's stream ends on, whole.
LAST = {"chat": "[DONE]", "messages": '{"type":"message_stop"}', "gemini": "STOP", "responses": "response.completed"}


@pytest.mark.parametrize("client", list(CLIENTS))
async def test_a_done_after_the_responses_end_is_dropped_not_an_error(make_gateway, client: str) -> None:
    gw = await make_gateway(upstream_yaml=UPSTREAM)
    gw.fake.script(Stream(responses_stream(), done_marker=True))  # LiteLLM's end, not OpenAI's
    path, body = CLIENTS[client]
    headers = {"Authorization": "Bearer sk-client", "x-api-key": "sk-client", "x-goog-api-key": "sk-client"}
    async with gw.session.post(gw.base + path, json=body, headers=headers) as r:
        raw = await r.read()
    assert r.status == 200
    assert b"malformed" not in raw.lower() and b"response.failed" not in raw and b"event: error" not in raw
    assert b'"finish_reason":"error"' not in raw
    events = EventSplitter().feed(raw)
    assert LAST[client].encode() in events[-1], events[-1]
    assert client == "chat" or b"[DONE]" not in raw  # a Responses client gets none: OpenAI's stream has none

def _events() -> list[bytes]:
    return [*responses_stream(), b"data: [DONE]\n\n"]


def test_the_reader_skips_a_done_after_the_end_and_still_refuses_one_before_it() -> None:
    reader = ResponsesStreamReader()
    kinds = [reader.kind(raw, committed=True) for raw in _events()]
    assert kinds[-2:] == [EventKind.FINAL, EventKind.SKIP] and reader.error is None
    early = ResponsesStreamReader()
    assert early.kind(b"data: [DONE]\n\n", committed=False) is EventKind.ERROR
    assert early.error is not None and early.error["error"]["code"] == "malformed_event"


async def test_a_responses_stream_ends_at_its_completed_event_not_at_the_upstreams_close(make_gateway) -> None:
    """An upstream holding its stream open after response.completed: the client's stream ends
    there, where it waited for the upstream's close or idle_s (3 s here)."""
    gw = await make_gateway(upstream_yaml=UPSTREAM, real_sleep=True,
                            timeouts="{connect_s: 2, first_byte_s: 5.0, idle_s: 3.0}")  # fmt: skip
    gw.fake.script(Stream(responses_stream(), then="stall"))
    path, body = CLIENTS["responses"]
    began = time.monotonic()
    async with gw.session.post(gw.base + path, json=body, headers={"Authorization": "Bearer sk-client"}) as r:
        raw = await r.read()
    took = time.monotonic() - began
    assert r.status == 200 and b"response.completed" in EventSplitter().feed(raw)[-1]
    assert b"response.failed" not in raw and took < 1.0, took
