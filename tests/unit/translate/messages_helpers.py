"""Shared by the Messages → chat translator tests: the corpus, the real anthropic SDK fed
through an in-memory transport, and a strict checker of the Messages stream grammar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import httpx2

from gateway.sse import EventSplitter, parse_event
from gateway.translate.base import Context

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def corpus_request(name: str) -> dict[str, Any]:
    doc = json.loads((CORPUS / "requests" / name).read_text())
    assert doc["source"] and doc["client"]
    body: dict[str, Any] = doc["body"]
    return body


def corpus_answer(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CORPUS / "answers" / name).read_text())
    assert doc["source"]
    return doc


def wire_stream(doc: dict[str, Any]) -> bytes:
    """A stream corpus file as the bytes the upstream sent (vercel/ai keeps one JSON chunk
    per line: put each back in its ``data:`` event)."""
    if "stream" in doc:
        return str(doc["stream"]).encode()
    return b"".join(b"data: " + line.encode() + b"\n\n" for line in doc["chunks"])


def ctx_for(request: dict[str, Any], model: str = "claude-opus-4-8") -> Context:
    return Context(requested_model=model, request=request, request_id="0123456789abcdef")


def run(translator: Any, wire: bytes, *, chunk: int = 0, close: bool = True) -> bytes:
    """Feeds the upstream bytes event by event (in ``chunk``-byte pieces when given)."""
    splitter = EventSplitter()
    out = b""
    pieces = [wire[i : i + chunk] for i in range(0, len(wire), chunk)] if chunk else [wire]
    for piece in pieces:
        for raw in splitter.feed(piece):
            out += translator.event(raw)
    if close:
        out += translator.close()
    return bytes(out)


def events(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for raw in EventSplitter().feed(stream):
        event = parse_event(raw)
        doc = event.json()
        assert event.name == doc["type"], raw  # the event name and the data's type agree
        out.append((event.name, doc))
    return out


def check_grammar(stream: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Anthropic's stream grammar, stricter than the SDK (which ignores a thinking_delta in a
    text block): message_start with usage first; blocks started in index order, one open at
    a time, deltas only to the open block and of its kind; message_delta, then message_stop."""
    evs = events(stream)
    names = [n for n, _ in evs if n != "ping"]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"], names
    usage = evs[0][1]["message"]["usage"]
    assert usage["input_tokens"] > 0 and "output_tokens" in usage  # LiteLLM #24176, vercel/ai #17326
    kinds = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "tool_use",
             "signature_delta": "thinking"}  # fmt: skip
    open_block: tuple[int, str] | None = None
    next_index = 0
    for name, doc in evs[1:-2]:
        if name == "content_block_start":
            assert open_block is None, "a block started while another is open"
            assert doc["index"] == next_index
            open_block = (doc["index"], doc["content_block"]["type"])
            next_index += 1
        elif name == "content_block_delta":
            assert open_block is not None and doc["index"] == open_block[0], "Content block not found"
            assert kinds[doc["delta"]["type"]] == open_block[1], f"{doc['delta']['type']} in a {open_block[1]} block"
        elif name == "content_block_stop":
            assert open_block is not None and doc["index"] == open_block[0]
            open_block = None
        else:
            assert name == "ping", name
    assert open_block is None
    return evs


def sdk_client(respond: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="dummy", base_url="http://upstream.test",
                               http_client=httpx2.Client(transport=httpx2.MockTransport(respond)))  # fmt: skip


def sdk_final_message(stream: bytes) -> Any:
    """What the anthropic SDK's own stream accumulator makes of the bytes."""
    client = sdk_client(lambda r: httpx2.Response(200, headers={"content-type": "text/event-stream"}, content=stream))
    with client.messages.stream(model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        return s.get_final_message()


def sdk_message(body: dict[str, Any]) -> Any:
    client = sdk_client(lambda r: httpx2.Response(200, json=body))
    return client.messages.create(model="claude-opus-4-8", max_tokens=64, messages=[{"role": "user", "content": "hi"}])


def sdk_request(**kwargs: Any) -> dict[str, Any]:
    """The body the anthropic SDK really sends for ``messages.create(**kwargs)``."""
    seen: list[dict[str, Any]] = []

    def respond(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json={"id": "msg_x", "type": "message", "role": "assistant", "model": "m",
                                          "content": [], "stop_reason": "end_turn", "stop_sequence": None,
                                          "usage": {"input_tokens": 1, "output_tokens": 1}})  # fmt: skip

    client = sdk_client(respond)
    kwargs.setdefault("model", "claude-opus-4-8")
    kwargs.setdefault("max_tokens", 256)
    client.messages.create(**kwargs)
    return seen[0]
