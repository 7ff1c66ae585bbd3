"""A stream collected into the one buffered answer it stands for, in each API's grammar.

The mirror of ``synthesize.py``. Some servers stream whatever the request asked: they ignore
``stream: false`` (sgl-project/mini-sglang#51: "the server always returns SSE streaming
responses regardless of the stream parameter"), and no client that asked for one answer reads
a stream (every SDK fails on one). So the gateway reads such a stream to its end (an error
event in it is an error like any other, a stream without its end marker a cut) and makes the
answer of the upstream's own API from its events; a translated request then has that answer
translated like any buffered one. Every field comes from the events; only the gathering is
ours, done as the APIs' own SDKs accumulate a stream (text deltas joined, a tool call's
argument fragments joined by call, the last usage and finish kept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.apis.base import Dialect, EventKind
from gateway.apis.chat.call_slots import CallSlots
from gateway.sse import EventSplitter, parse_event


@dataclass(frozen=True, slots=True)
class Collected:
    """What a whole stream said: its answer (None without the API's end marker: cut short),
    or the payload of the error event that ended it."""

    answer: dict[str, Any] | None
    error: dict[str, Any] | None = None


def collect(dialect: Dialect, body: bytes) -> Collected:
    """``body``: a whole stream (bounded by the answer's own limit) in ``dialect``'s API."""
    reader = dialect.reader(False)
    splitter = EventSplitter()
    raws = splitter.feed(body)
    if splitter.pending.strip():
        raws.append(splitter.pending)  # a last event without its blank line: still whole
    docs: list[dict[str, Any]] = []
    complete = False
    for raw in raws:
        kind = reader.kind(raw, committed=True)
        if kind is EventKind.ERROR:
            return Collected(None, reader.error)
        if kind is EventKind.SKIP:
            continue
        complete = complete or kind is EventKind.FINAL
        doc = parse_event(raw).json()
        if isinstance(doc, dict):
            docs.append(doc)
    return Collected(dialect.collect(docs) if complete else None)


def _index(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _join(into: dict[str, Any], key: str, piece: Any) -> None:
    if isinstance(piece, str):
        into[key] = (into.get(key) or "") + piece


def chat_answer(events: list[dict[str, Any]]) -> dict[str, Any]:
    """``chat.completion.chunk`` events as the ``chat.completion`` they make."""
    head: dict[str, Any] = {}
    choices: dict[int, dict[str, Any]] = {}
    calls: dict[int, dict[int, dict[str, Any]]] = {}
    slots: dict[int, CallSlots] = {}  # per choice: which call a fragment is part of
    usage: Any = None
    for event in events:
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if key not in head and event.get(key) is not None:
                head[key] = event[key]
        if event.get("usage") is not None:
            usage = event["usage"]
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = _index(choice.get("index"))
            made = choices.setdefault(index, {
                "index": index, "message": {"role": "assistant", "content": None},
                "finish_reason": None, "logprobs": None,
            })  # fmt: skip
            message = made["message"]
            delta = _obj(choice.get("delta"))
            if isinstance(delta.get("role"), str):
                message["role"] = delta["role"]
            for key in ("content", "refusal", "reasoning_content", "reasoning"):
                _join(message, key, delta.get(key))
            for position, call in enumerate(delta.get("tool_calls") or ()):
                if not isinstance(call, dict):
                    continue
                at = slots.setdefault(index, CallSlots()).slot(call, position)
                made_call = calls.setdefault(index, {}).setdefault(
                    at, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
                if made_call["id"] is None and call.get("id"):
                    made_call["id"] = call["id"]  # sent once, with the call's first fragment
                if isinstance(call.get("type"), str):
                    made_call["type"] = call["type"]
                fn = _obj(call.get("function"))
                _join(made_call["function"], "name", fn.get("name"))
                _join(made_call["function"], "arguments", fn.get("arguments"))
            if choice.get("finish_reason") is not None:
                made["finish_reason"] = choice["finish_reason"]
            logprobs = choice.get("logprobs")
            if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
                kept = made["logprobs"] or {"content": []}
                kept["content"] = [*kept["content"], *logprobs["content"]]
                made["logprobs"] = kept
    for index, made_calls in calls.items():
        choices[index]["message"]["tool_calls"] = [made_calls[at] for at in sorted(made_calls)]
    for made in choices.values():
        if made["message"]["content"] is None and "tool_calls" not in made["message"]:
            made["message"]["content"] = ""  # null only beside tool calls, as OpenAI answers
    doc: dict[str, Any] = {"id": head.get("id", ""), "object": "chat.completion",
                           "created": head.get("created", 0), "model": head.get("model", "")}  # fmt: skip
    doc.update({k: head[k] for k in ("system_fingerprint", "service_tier") if k in head})
    doc["choices"] = [choices[i] for i in sorted(choices)]
    if usage is not None:
        doc["usage"] = usage
    return doc


def messages_answer(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A Messages stream's events as the ``message`` they make."""
    message: dict[str, Any] = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict[str, Any]] = {}
    inputs: dict[int, list[str]] = {}
    for event in events:
        kind = event.get("type")
        index = _index(event.get("index"))
        if kind == "message_start" and isinstance(event.get("message"), dict):
            message = {**message, **event["message"]}
        elif kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            blocks[index] = dict(event["content_block"])
        elif kind == "content_block_delta" and isinstance(event.get("delta"), dict):
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            delta = event["delta"]
            step = delta.get("type")
            if step == "text_delta":
                _join(block, "text", delta.get("text"))
            elif step == "input_json_delta":
                inputs.setdefault(index, []).append(str(delta.get("partial_json") or ""))
            elif step == "thinking_delta":
                _join(block, "thinking", delta.get("thinking"))
            elif step == "signature_delta":
                _join(block, "signature", delta.get("signature"))
            elif step == "citations_delta" and delta.get("citation") is not None:
                block["citations"] = [*(block.get("citations") or []), delta["citation"]]
        elif kind == "message_delta":
            changes = _obj(event.get("delta"))
            message.update(changes)
            counted = event.get("usage")
            if isinstance(counted, dict):  # cumulative; a count it does not restate is kept
                usage = dict(message.get("usage") or {})
                usage.update({k: v for k, v in counted.items() if v is not None})
                message["usage"] = usage
    for index, fragments in inputs.items():
        text = "".join(fragments)
        try:
            blocks[index]["input"] = json.loads(text) if text.strip() else {}
        except ValueError:
            pass  # not whole JSON: the block keeps the input its start gave it
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def responses_answer(events: list[dict[str, Any]]) -> dict[str, Any]:
    """A Responses stream's events as its ``response``: the one its last event carries
    (``response.completed`` / ``.incomplete`` repeat the whole answer), with the output items
    the stream finished where that one lists none."""
    response: dict[str, Any] = {}
    items: dict[int, Any] = {}
    for event in events:
        if isinstance(event.get("response"), dict):
            response = event["response"]
        if event.get("type") == "response.output_item.done" and "item" in event:
            items[_index(event.get("output_index"), len(items))] = event["item"]
    if not response.get("output") and items:
        response = {**response, "output": [items[i] for i in sorted(items)]}
    return response


def gemini_answer(events: list[dict[str, Any]]) -> dict[str, Any]:
    """GenerateContentResponse chunks as the one GenerateContentResponse they make: each
    candidate's parts in order, adjacent text of one kind (thought or not) joined; the last
    chunk's finishReason, usage and ids."""
    answer: dict[str, Any] = {}
    candidates: dict[int, dict[str, Any]] = {}
    for event in events:
        for key, value in event.items():
            if key != "candidates" and value is not None:
                answer[key] = value
        for n, candidate in enumerate(event.get("candidates") or ()):
            if not isinstance(candidate, dict):
                continue
            index = _index(candidate.get("index"), n)
            made = candidates.setdefault(index, {"content": {"role": "model", "parts": []}})
            for key, value in candidate.items():
                if key == "content" and isinstance(value, dict):
                    if isinstance(value.get("role"), str):
                        made["content"]["role"] = value["role"]
                    for part in value.get("parts") or ():
                        _add_part(made["content"]["parts"], part)
                elif value is not None:
                    made[key] = value
    if candidates:
        answer["candidates"] = [candidates[i] for i in sorted(candidates)]
    return answer


def _add_part(parts: list[Any], part: Any) -> None:
    last = parts[-1] if parts else None
    if (isinstance(part, dict) and isinstance(last, dict) and _plain_text(part) and _plain_text(last)
            and bool(part.get("thought")) == bool(last.get("thought"))):  # fmt: skip
        parts[-1] = {**last, "text": last["text"] + part["text"]}
    else:
        parts.append(dict(part) if isinstance(part, dict) else part)


def _plain_text(part: Any) -> bool:
    """Text and nothing else (a thoughtSignature, say, is kept on its own part)."""
    return isinstance(part, dict) and isinstance(part.get("text"), str) and set(part) <= {"text", "thought"}
