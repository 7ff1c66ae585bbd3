"""What an answer relayed as it is used, read from its head and tail (gateway/pipeline/
relayed_usage.py): real streams and answers from tests/corpus/answers/, made long the way a
long answer is (more of the same deltas), relayed in small chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.apis import ANTHROPIC_MESSAGES, OPENAI_CHAT
from gateway.jsonpeek import top_level_member
from gateway.pipeline.outcome import RequestState
from gateway.pipeline.relayed_usage import HEAD_BYTES, TAIL_BYTES, Kept

ANSWERS = Path(__file__).resolve().parents[1] / "corpus" / "answers"


def _events(name: str) -> list[bytes]:
    doc = json.loads((ANSWERS / f"{name}.json").read_text())
    text = doc["stream"] if isinstance(doc["stream"], str) else doc["body"]
    return [e + b"\n\n" for e in text.encode().strip().split(b"\n\n")]


def _long(events: list[bytes], delta: bytes, size: int) -> bytes:
    """The stream with its deltas repeated until it is ``size`` bytes: the first and last
    events (where the counts are) as they were."""
    deltas = [e for e in events if delta in e]
    at = events.index(deltas[-1]) + 1
    middle: list[bytes] = []
    while sum(map(len, middle)) < size:
        middle += deltas
    return b"".join(events[:at] + middle + events[at:])


def _relayed(data: bytes, sse: bool, chunk: int = 1000) -> Kept:
    kept = Kept(sse)
    for i in range(0, len(data), chunk):
        kept.add(data[i : i + chunk])
    return kept


@pytest.mark.parametrize(("name", "dialect", "delta", "usage"), [
    ("messages-stream-sdk-text-then-tool", ANTHROPIC_MESSAGES, b"content_block_delta", (377, 65)),
    ("openai-gpt-4o-text.stream", OPENAI_CHAT, b'"content":" ', (14, 47)),
])  # fmt: skip
@pytest.mark.parametrize("size", [0, 300_000])
def test_a_streams_counts_are_read_from_its_head_and_tail(name, dialect, delta, usage, size) -> None:
    data = _long(_events(name), delta, size)
    kept = _relayed(data, sse=True)
    assert kept.dropped is (size > 0)
    state = RequestState("req", 0.0)
    kept.count_stream(state, dialect)
    assert (state.usage["prompt"], state.usage["completion"]) == usage
    assert not state.completion_estimated and not state.answered_uncounted


def test_what_is_kept_is_bounded_whatever_the_answers_size() -> None:
    for chunk in (1000, 16_384, 1 << 20):  # a first chunk past the head's size too
        kept = _relayed(b"x" * 5_000_000, sse=False, chunk=chunk)
        held = sum(map(len, kept._head)) + sum(map(len, kept._tail))
        assert kept.size == 5_000_000 and held <= HEAD_BYTES + 2 * TAIL_BYTES
    small = _relayed(b"0123456789" * 1000, sse=False, chunk=6000)  # its head cut mid-chunk: all kept
    assert small.body() == (b"0123456789" * 1000, True)


def test_a_long_json_answers_usage_is_read_from_its_tail() -> None:
    """300 base64 embeddings (4.9 MB): the usage member at the end, found where the whole body
    would show it."""
    vector = "A" * 16_384
    body = json.dumps({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": vector}
                                                 for i in range(300)], "model": "text-embedding-3-large",
                       "usage": {"prompt_tokens": 3000, "total_tokens": 3000}}).encode()  # fmt: skip
    tail, whole = _relayed(body, sse=False, chunk=65_536).body()
    assert not whole and len(tail) < 3 * TAIL_BYTES
    assert top_level_member(tail, "usage") == {"usage": {"prompt_tokens": 3000, "total_tokens": 3000}}
    # A member named usage inside the last element is not the answer's.
    nested = json.dumps([{"data": "A" * 200_000, "usage": {"prompt_tokens": 1}}]).encode()
    assert top_level_member(_relayed(nested, sse=False).body()[0], "usage") is None


def test_a_stream_without_a_count_is_estimated_from_its_text_and_its_prompt_marked_unread() -> None:
    events = [e for e in _events("openai-gpt-4o-text.stream") if b'"usage"' not in e]
    text = "".join(json.loads(e[6:])["choices"][0]["delta"].get("content", "") for e in events[:-1])
    state = RequestState("req", 0.0)
    _relayed(b"".join(events), sse=True).count_stream(state, OPENAI_CHAT)
    # Its first 4 KiB sampled, the text of the rest taken in the same proportion to its bytes.
    assert state.usage == {"completion": pytest.approx(len(text.encode()) / 3.5, rel=0.05)}
    assert state.completion_estimated and state.answered_uncounted


def test_what_is_kept_depends_on_the_answers_type_and_whether_the_key_pays() -> None:
    assert Kept.of("text/event-stream; charset=utf-8", charged=False) is None  # relayed at no added cost
    assert Kept.of("text/event-stream", charged=True) is not None
    assert Kept.of("application/json", charged=False) is not None  # tokens_total, with keys or without
    assert Kept.of("audio/mpeg", charged=True) is None


def test_a_json_answer_that_counts_first_is_read_from_its_head() -> None:
    """An embeddings answer with ``usage`` before its data (the member order Jina's is read in by
    its clients), past what the relay keeps whole: the count is in the kept head."""
    vector = "A" * 16_384
    body = json.dumps({"model": "jina-embeddings-v3", "object": "list",
                       "usage": {"prompt_tokens": 3000, "total_tokens": 3000},
                       "data": [{"object": "embedding", "index": i, "embedding": vector}
                                for i in range(20)]}).encode()  # fmt: skip
    read, whole = _relayed(body, sse=False, chunk=16_384).body()
    assert not whole
    assert top_level_member(read, "usage") == {"usage": {"prompt_tokens": 3000, "total_tokens": 3000}}


def test_a_cut_messages_stream_counts_the_text_it_showed_not_its_opening_count() -> None:
    """Messages' message_start states ``output_tokens: 1``; a stream cut after that (or left by
    its client) counts what it showed, as a native stream does."""
    events = _events("messages-stream-sdk-text-then-tool")
    cut = [e for e in events if b"message_delta" not in e and b"message_stop" not in e]
    data = _long(cut, b"content_block_delta", 200_000)
    whole_state, cut_state = RequestState("req", 0.0), RequestState("req", 0.0)
    _relayed(data, sse=True).count_stream(whole_state, ANTHROPIC_MESSAGES, whole=True)
    _relayed(data, sse=True).count_stream(cut_state, ANTHROPIC_MESSAGES, whole=False)
    assert whole_state.usage["completion"] == 1  # what the stream said, taken as said
    assert cut_state.usage["completion"] > 1_000 and cut_state.completion_estimated
    assert cut_state.usage["prompt"] == whole_state.usage["prompt"] == 377
