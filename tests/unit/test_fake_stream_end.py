"""How the fake ends a scripted stream, over HTTP in-process: as each API ends its own. A chat
stream ends with ``data: [DONE]``; OpenAI's Responses stream ends after ``response.completed``
with no marker (its streaming reference lists typed events only, the last
``response.completed``, ``response.incomplete`` or ``response.failed``; openai-python reads none),
so a script that does not ask for one gets none there. Some compatible servers send it anyway
(LiteLLM's proxy: BerriAI/litellm#34095), which ``done_marker=True`` plays."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from gateway.fake import FakeUpstream
from gateway.fake.chat import stream_events
from gateway.fake.responses import responses_stream
from gateway.fake.steps import Stream
from gateway.sse import EventSplitter, parse_event

DONE = b"data: [DONE]\n\n"


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as f:
        yield f


async def _streamed(fake: FakeUpstream, path: str, body: dict[str, object]) -> bytes:
    async with aiohttp.ClientSession() as http, http.post(fake.url + path, json={**body, "stream": True}) as r:
        assert r.status == 200
        return await r.read()


async def test_a_scripted_responses_stream_ends_after_response_completed(fake: FakeUpstream) -> None:
    fake.script(Stream(responses_stream()))
    raw = await _streamed(fake, "/responses", {"model": "gpt-5-codex", "input": "hi"})
    assert DONE not in raw
    assert parse_event(EventSplitter().feed(raw)[-1]).name == "response.completed"


async def test_a_responses_stream_may_be_asked_to_end_with_done_as_some_servers_do(fake: FakeUpstream) -> None:
    fake.script(Stream(responses_stream(), done_marker=True))
    raw = await _streamed(fake, "/responses", {"model": "gpt-5-codex", "input": "hi"})
    events = EventSplitter().feed(raw)
    assert raw.endswith(DONE) and parse_event(events[-2]).name == "response.completed"


async def test_a_scripted_chat_stream_still_ends_with_done(fake: FakeUpstream) -> None:
    fake.script(Stream(stream_events()))
    raw = await _streamed(fake, "/chat/completions", {"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"}]})  # fmt: skip
    assert raw.endswith(DONE)
    fake.script(Stream(stream_events(), done_marker=False))
    assert DONE not in await _streamed(fake, "/chat/completions", {"model": "gpt-4o-mini", "messages": [
        {"role": "user", "content": "hi"}]})  # fmt: skip
