"""Anthropic Messages bodies and SSE events as the fake upstream sends them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.fake.steps import Reply


def anthropic_message(model: str = "claude-sonnet-4-5", text: str = "Hello from the fake upstream.",
                      input_tokens: int = 12, output_tokens: int = 7) -> dict[str, Any]:
    return {
        "id": "msg_fake123", "type": "message", "role": "assistant", "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
    }  # fmt: skip


# The fake's own thinking signatures: the thinking's digest, so that the rules can tell one
# it issued from one altered on the way (Anthropic checks its signatures cryptographically),
# and from one another organization's key was given (signatures hold only for the account that
# got them: happyclaw #474, a pool of two Anthropic accounts; ``FakeUpstream.orgs``).
SIGNATURE_MARK = "fakesig1."


def sign(thinking: str, org: str | None = None) -> str:
    """The signature the fake gives a thinking block of this text, answering a key of ``org``
    (None: a key the fake puts in no organization of its own, as every key by default)."""
    basis = thinking if org is None else f"{org}\n{thinking}"
    return SIGNATURE_MARK + hashlib.sha256(basis.encode()).hexdigest()[:40]


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
