"""Each stream reader parses an upstream event at most once, however many questions it asks
of it (an error? usage? malformed? whose stream? visible? the end?), continuation tracking on
or off: real provider streams from tests/corpus/answers, and a Responses stream whose
response object says ``"error": null`` as OpenAI's does."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gateway.apis import DIALECT_FOR_API
from gateway.apis.base import EventKind
from gateway.sse import EventSplitter
from gateway.translate import Composed, Translation, default_translations
from gateway.translate.base import Context
from tests.parse_count import count_parses

ANSWERS = Path(__file__).resolve().parents[2] / "corpus" / "answers"
STREAMS = sorted(p.name for p in ANSWERS.glob("*.json") if json.loads(p.read_text()).get("stream"))


def _stream(case: dict) -> tuple[str, bytes]:
    """(api, body) of a corpus stream: files hold it as ``body`` (with ``stream: true``) or,
    for chat recordings, as the ``stream`` text itself."""
    if isinstance(case["stream"], str):
        return "chat", case["stream"].encode()
    return case["api"], case["body"].encode()

# OpenAI's Responses streaming events (platform.openai.com/docs/api-reference/responses-streaming):
# the response object in created / in_progress / completed carries "error": null.
_RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress", "error": None, "model": "m",
             "output": [], "usage": None}
RESPONSES_STREAM = "".join(f"event: {name}\ndata: {json.dumps({'type': name, **doc})}\n\n" for name, doc in [
    ("response.created", {"sequence_number": 0, "response": _RESPONSE}),
    ("response.in_progress", {"sequence_number": 1, "response": _RESPONSE}),
    ("response.output_item.added", {"sequence_number": 2, "output_index": 0,
                                    "item": {"id": "msg_1", "type": "message", "role": "assistant", "content": []}}),
    ("response.output_text.delta", {"sequence_number": 3, "item_id": "msg_1", "output_index": 0,
                                    "content_index": 0, "delta": "Hi"}),
    ("response.completed", {"sequence_number": 4, "response": {**_RESPONSE, "status": "completed",
                                                               "usage": {"input_tokens": 3, "output_tokens": 1}}}),
]).encode()


def _read(api: str, body: bytes, tracking: bool, parsed: list[str]) -> tuple[list[int], list[EventKind]]:
    """Each event's kind as the relay asks it (held back until the first visible one), and
    how many JSON parses each took."""
    reader = DIALECT_FOR_API[api].reader(strip_usage=api == "chat")
    if tracking:
        reader.track()
    splitter = EventSplitter()
    events = splitter.feed(body) + ([splitter.pending] if splitter.pending.strip() else [])
    kinds: list[EventKind] = []
    parses: list[int] = []
    for raw in events:
        before = len(parsed)
        kinds.append(reader.kind(raw, committed=any(k in (EventKind.VISIBLE, EventKind.FINAL) for k in kinds)))
        parses.append(len(parsed) - before)
    return parses, kinds


@pytest.mark.parametrize("tracking", [False, True], ids=["plain", "tracking"])
@pytest.mark.parametrize("name", STREAMS)
def test_a_corpus_stream_is_parsed_at_most_once_per_event(monkeypatch, name: str, tracking: bool) -> None:
    case = json.loads((ANSWERS / name).read_text())
    parses, kinds = _read(*_stream(case), tracking, count_parses(monkeypatch))
    assert EventKind.ERROR not in kinds and EventKind.FINAL in kinds
    assert max(parses) == 1, parses


@pytest.mark.parametrize("tracking", [False, True], ids=["plain", "tracking"])
def test_a_responses_stream_whose_response_says_error_null_is_parsed_once_per_event(monkeypatch, tracking) -> None:
    parses, kinds = _read("responses", RESPONSES_STREAM, tracking, count_parses(monkeypatch))
    assert kinds == [EventKind.CONTENTLESS, EventKind.CONTENTLESS, EventKind.CONTENTLESS,
                     EventKind.VISIBLE, EventKind.FINAL]
    assert max(parses) == 1, parses


# A translated stream: the upstream's reader judges each event, then the translator writes it
# in the client's API. The translator takes what the reader decoded (StreamReader.parsed), so
# an upstream event is decoded once by both together, not once by each. (A composed direction,
# Responses client on a Messages upstream, decodes the intermediate chat event it wrote too.)
_TABLE = default_translations().table
TRANSLATED = [(client, upstream, name) for name in STREAMS
              for upstream in [_stream(json.loads((ANSWERS / name).read_text()))[0]]
              for client in ("chat", "messages", "responses")
              if not isinstance(_TABLE.get((client, upstream)), (Composed, type(None)))]


@pytest.mark.parametrize(("client", "upstream", "name"), TRANSLATED)
def test_a_translated_corpus_stream_is_decoded_once_per_event(monkeypatch, client: str, upstream: str,
                                                              name: str) -> None:
    case = json.loads((ANSWERS / name).read_text())
    _, body = _stream(case)
    request = {"model": "m", "stream": True, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    if client == "responses":
        request = {"model": "m", "stream": True, "input": "hi"}
    translation = Translation(_TABLE[client, upstream], Context("m", request, "req1"))
    decoded: list[object] = []
    real = orjson.loads

    def counting(data: object) -> object:
        decoded.append(data)
        return real(data)

    monkeypatch.setattr(orjson, "loads", counting)  # the reader's and the translator's decodes alike
    reader = DIALECT_FOR_API[upstream].reader(strip_usage=False)
    reader.parsed_events.keep = True
    translate = translation.stream(reader.parsed_events.take)
    splitter = EventSplitter()
    events = splitter.feed(body) + ([splitter.pending] if splitter.pending.strip() else [])
    held: list[bytes] = []
    committed = False
    out: list[bytes] = []
    for raw in events:  # as the relay goes: held until the first visible event, then one by one
        kind = reader.kind(raw, committed=committed)
        if committed:
            out.append(translate.event(raw))
            continue
        held.append(raw)
        if kind in (EventKind.VISIBLE, EventKind.FINAL):
            committed = True
            out += [translate.event(e) for e in held]
            held = []
    out.append(translate.close())
    assert committed and b"".join(out)
    # Held events are decoded when judged and translated later: count the stream as a whole.
    assert len(decoded) <= len(events), f"{len(decoded)} decodes for {len(events)} events"
