"""OpenAI Responses bodies and SSE events as the fake upstream sends them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from gateway.fake.messages import sse
from gateway.fake.steps import Reply


def response_object(model: str = "gpt-5-codex", text: str = "Hello from the fake upstream.",
                    status: str = "completed", input_tokens: int = 30, output_tokens: int = 9,
                    rid: str = "resp_fake123") -> dict[str, Any]:  # fmt: skip
    return {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": status,
        "model": model, "error": None, "incomplete_details": None,
        "output": [{"id": "msg_fake1", "type": "message", "role": "assistant", "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}]}],
        "usage": {"input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": input_tokens + output_tokens},
    }  # fmt: skip


class Seq:
    def __init__(self) -> None:
        self.n = -1

    def __call__(self, name: str, **data: Any) -> bytes:
        self.n += 1
        return sse(name, {"type": name, "sequence_number": self.n, **data})


def responses_head(model: str = "gpt-5-codex", seq: Seq | None = None, rid: str = "resp_fake123") -> list[bytes]:
    """response.created, response.in_progress and an empty message item: contentless."""
    ev = seq or Seq()
    shell = {**response_object(model, rid=rid), "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_fake1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    return [
        ev("response.created", response=shell),
        ev("response.in_progress", response=shell),
        ev("response.output_item.added", output_index=0, item=item),
        ev("response.content_part.added", item_id="msg_fake1", output_index=0, content_index=0,
           part={"type": "output_text", "text": "", "annotations": []}),
    ]  # fmt: skip


def responses_stream(model: str = "gpt-5-codex", words: tuple[str, ...] = ("Hello", " from", " fake."),
                     end: str = "response.completed", rid: str = "resp_fake123") -> list[bytes]:
    seq = Seq()
    out = responses_head(model, seq, rid)
    out += [seq("response.output_text.delta", item_id="msg_fake1", output_index=0, content_index=0,
                delta=w, logprobs=[]) for w in words]
    out += responses_tail(model, "".join(words), seq, end, rid)
    return out


def responses_deltas(words: tuple[str, ...], start_seq: int = 4) -> list[bytes]:
    seq = Seq()
    seq.n = start_seq - 1
    return [seq("response.output_text.delta", item_id="msg_fake1", output_index=0, content_index=0,
                delta=w, logprobs=[]) for w in words]


def responses_tail(model: str, text: str, seq: Seq, end: str = "response.completed",
                   rid: str = "resp_fake123") -> list[bytes]:  # fmt: skip
    done = response_object(model, text, status="completed" if end == "response.completed" else "incomplete", rid=rid)
    return [
        seq("response.output_text.done", item_id="msg_fake1", output_index=0, content_index=0, text=text, logprobs=[]),
        seq("response.output_item.done", output_index=0, item=done["output"][0]),
        seq(end, response=done),
    ]  # fmt: skip


def responses_continuation(rest: str, words: Sequence[str] | None = None, model: str = "gpt-5-codex",
                           output_tokens: int = 3) -> list[bytes]:
    """A continuation stream as vLLM sends one: its own response and item ids, numbering
    from 0, the text it adds in ``words`` (default: ``rest`` in one delta)."""
    seq = Seq()
    shell = {**response_object(model), "id": "resp_other", "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_other", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
    done = response_object(model, rest, output_tokens=output_tokens)
    done["id"], done["output"][0]["id"] = "resp_other", "msg_other"
    where = {"item_id": "msg_other", "output_index": 0, "content_index": 0}
    return [
        seq("response.created", response=shell), seq("response.in_progress", response=shell),
        seq("response.output_item.added", output_index=0, item=item),
        seq("response.content_part.added", **where, part={"type": "output_text", "text": "", "annotations": []}),
        *(seq("response.output_text.delta", **where, delta=w, logprobs=[]) for w in (words or [rest])),
        seq("response.output_text.done", **where, text=rest, logprobs=[]),
        seq("response.content_part.done", **where, part={"type": "output_text", "text": rest, "annotations": []}),
        seq("response.output_item.done", output_index=0, item=done["output"][0]),
        seq("response.completed", response=done),
    ]  # fmt: skip


def responses_error(status: int, message: str, type_: str, code: str | None, param: str | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": type_, "param": param, "code": code}})


def responses_overflow() -> Reply:
    # The Responses API's overflow states no numbers (see tests/corpus/openai.json).
    return responses_error(400, "Your input exceeds the context window of this model. "
                           "Please adjust your input and try again.",
                           "invalid_request_error", "context_length_exceeded", "input")
