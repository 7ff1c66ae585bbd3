"""The tests' name for the fake upstream, which ships as :mod:`gateway.fake` (so anyone can
run it: ``python -m gateway.fake``), plus the SSE parsers the tests read answers with."""

from __future__ import annotations

import json
from typing import Any

from gateway.fake.chat import chat_completion, chunk, estimate_tokens, overflow_error, stream_events
from gateway.fake.messages import (
    anthropic_error,
    anthropic_head,
    anthropic_message,
    anthropic_overflow,
    anthropic_stream,
    anthropic_tail,
    sse,
    text_delta,
)
from gateway.fake.responses import (
    Seq,
    response_object,
    responses_continuation,
    responses_deltas,
    responses_error,
    responses_head,
    responses_overflow,
    responses_stream,
    responses_tail,
)
from gateway.fake.steps import Drop, Hang, Recorded, Reply, Step, Stream
from gateway.fake.upstream import FakeUpstream

__all__ = [
    "Drop", "FakeUpstream", "Hang", "Recorded", "Reply", "Seq", "Step", "Stream", "anthropic_error",
    "anthropic_head", "anthropic_message", "anthropic_overflow", "anthropic_stream", "anthropic_tail",
    "chat_completion", "chunk", "data_events", "estimate_tokens", "named_events", "overflow_error",
    "response_object", "responses_continuation", "responses_deltas", "responses_error", "responses_head",
    "responses_overflow", "responses_stream", "responses_tail", "sse", "stream_events", "text_delta",
]  # fmt: skip


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


