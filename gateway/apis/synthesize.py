"""A buffered answer replayed as a well-formed stream, in each dialect's grammar.

Used once per request at most: when a streaming request keeps getting an empty stream
(some servers answer an overflowing streaming request with ``200 text/event-stream`` and
nothing in it), the gateway asks the same question without streaming to learn what the
upstream objects to; if that probe succeeds, the client, which asked for a stream, gets
the answer as one. Every event carries the real content; only the chunking is ours.
"""

from __future__ import annotations

import json
from typing import Any


def _data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _named(name: str, obj: dict[str, Any]) -> bytes:
    return f"event: {name}\n".encode() + _data(obj)


def chat_stream(doc: dict[str, Any], include_usage: bool) -> bytes:
    """A ``chat.completion`` as ``chat.completion.chunk`` events, then ``[DONE]``."""
    base = {"id": doc.get("id", ""), "object": "chat.completion.chunk", "created": doc.get("created", 0),
            "model": doc.get("model", "")}  # fmt: skip
    out: list[bytes] = []
    for choice in doc.get("choices") or []:
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": message.get("role", "assistant")}
        for key in ("content", "refusal", "reasoning_content"):
            if message.get(key) is not None:
                delta[key] = message[key]
        if message.get("tool_calls"):
            delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        out.append(_data({**base, "choices": [{"index": index, "delta": delta, "finish_reason": None}]}))
        out.append(_data({**base, "choices": [{"index": index, "delta": {},
                                               "finish_reason": choice.get("finish_reason") or "stop"}]}))
    if include_usage and doc.get("usage") is not None:
        out.append(_data({**base, "choices": [], "usage": doc["usage"]}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def anthropic_stream(doc: dict[str, Any]) -> bytes:
    """A Messages ``message`` as message_start → content blocks → message_delta → message_stop."""
    usage = doc.get("usage") or {}
    start = {**doc, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 0}}  # fmt: skip
    out = [_named("message_start", {"type": "message_start", "message": start})]
    for i, block in enumerate(doc.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            opened, deltas = {**block, "text": ""}, [{"type": "text_delta", "text": block.get("text", "")}]
        elif kind in ("tool_use", "server_tool_use"):
            opened = {**block, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}]
        elif kind == "thinking":
            opened = {**block, "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                      {"type": "signature_delta", "signature": block.get("signature", "")}]
        else:  # redacted_thinking and anything newer arrive whole in their start event
            opened, deltas = block, []
        out.append(_named("content_block_start", {"type": "content_block_start", "index": i,
                                                  "content_block": opened}))  # fmt: skip
        out += [_named("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
                for d in deltas]  # fmt: skip
        out.append(_named("content_block_stop", {"type": "content_block_stop", "index": i}))
    out.append(_named("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": doc.get("stop_reason"), "stop_sequence": doc.get("stop_sequence")},
        "usage": {"output_tokens": usage.get("output_tokens", 0)},
    }))  # fmt: skip
    out.append(_named("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def responses_stream(doc: dict[str, Any]) -> bytes:
    """A Responses ``response`` as created → output items → completed (or incomplete)."""
    seq = iter(range(1_000_000))
    out: list[bytes] = []

    def emit(name: str, **fields: Any) -> None:
        out.append(_named(name, {"type": name, "sequence_number": next(seq), **fields}))

    shell = {**doc, "status": "in_progress", "output": [], "usage": None}
    emit("response.created", response=shell)
    emit("response.in_progress", response=shell)
    for i, item in enumerate(doc.get("output") or []):
        if item.get("type") == "message":
            emit("response.output_item.added", output_index=i,
                 item={**item, "content": [], "status": "in_progress"})  # fmt: skip
            for j, part in enumerate(item.get("content") or []):
                text = part.get("text", "")
                at = {"item_id": item.get("id"), "output_index": i, "content_index": j}
                emit("response.content_part.added", **at, part={**part, "text": ""})
                if part.get("type") == "output_text":
                    emit("response.output_text.delta", **at, delta=text, logprobs=[])
                    emit("response.output_text.done", **at, text=text, logprobs=[])
                emit("response.content_part.done", **at, part=part)
        else:
            emit("response.output_item.added", output_index=i, item=item)
        emit("response.output_item.done", output_index=i, item=item)
    final = "response.incomplete" if doc.get("status") == "incomplete" else "response.completed"
    emit(final, response=doc)
    return b"".join(out)
