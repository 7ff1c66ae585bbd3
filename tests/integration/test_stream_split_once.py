"""An upstream stream's bytes are split into events once (issue #38): the relay goes on with
the events and the splitter the attempt's peek left, where it split the rest of the first
visible event's chunk again (~20,000 instructions a stream); what the client gets, and the
first visible event's chunk that also brings an event past its bound, stay as they were."""

from __future__ import annotations

import json

import pytest

from gateway import sse
from gateway.pipeline import attempt, continuation, relay
from gateway.sse import EventSplitter
from tests.fakeupstream import Stream, chunk, named_events
from tests.unit.translate.messages_helpers import corpus_answer, wire_stream

# A real OpenAI stream: a role chunk, the text token by token, the finish chunk, a usage chunk.
OPENAI = wire_stream(corpus_answer("openai-gpt-4o-text.stream.json"))


@pytest.fixture
def fed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the pieces fed to each splitter of upstream bytes the pipeline makes."""
    sizes: list[int] = []

    class Counting(EventSplitter):
        __slots__ = ()

        def feed(self, chunk: bytes) -> list[bytes]:
            sizes.append(len(chunk))
            return super().feed(chunk)

    for module in (attempt, relay, continuation):
        monkeypatch.setattr(module, "upstream_splitter", lambda: Counting(sse.MAX_EVENT_BYTES))
    return sizes


async def test_a_relayed_stream_is_split_once_and_relayed_as_it_came(make_gateway, fed: list[int]) -> None:
    gw = await make_gateway()
    gw.fake.script(Stream([OPENAI], then="eof"))  # one write: the first chunk holds every event
    payload = {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True},
               "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    status, _, body = await gw.chat(payload)
    assert status == 200 and body == OPENAI
    assert sum(fed) == len(OPENAI)


async def test_a_translated_stream_is_split_once(make_gateway, fed: list[int]) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    gw.fake.script(Stream([OPENAI], then="eof"))
    status, _, body = await gw.messages({"model": "gpt-4o", "max_tokens": 64, "stream": True,
                                         "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    events = named_events(body)
    assert status == 200 and [name for name, _ in events][-1] == "message_stop"
    text = "".join(doc["delta"].get("text", "") for name, doc in events if name == "content_block_delta")
    assert text == "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                           for line in OPENAI.split(b"\n\n") if line.startswith(b'data: {"id"')
                           and b'"choices":[]' not in line)  # fmt: skip
    assert sum(fed) == len(OPENAI)


async def test_an_event_past_its_bound_after_the_first_visible_one_in_its_chunk_is_a_typed_502(
    make_gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing was shown yet: the attempt fails as a first event past the bound does."""
    monkeypatch.setattr(sse, "MAX_EVENT_BYTES", 1024)
    gw = await make_gateway()
    first = b"data: " + json.dumps(chunk({"role": "assistant", "content": "Hel"})).encode() + b"\n\n"
    gw.fake.script(Stream([first + b"data: " + b"x" * 4096], then="eof"))  # one write
    status, headers, body = await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                           "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
    assert status == 502 and json.loads(body)["error"]["code"] == "event_too_large"
    assert headers["x-llm-error-type"] == "unknown" and len(gw.fake.requests) == 1
