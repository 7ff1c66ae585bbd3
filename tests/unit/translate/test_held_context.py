"""A translated call keeps only what its answer's translation reads of the client's request
(``Translator.held``): the conversation and the tools are not kept while the upstream works.
Every direction, composed ones included, must answer exactly as it does with the whole
request: real provider answers (tests/corpus/answers), buffered and streamed, translated for
clients whose requests carry every field an answer reads (stop sequences, stream options,
thinking, echoed settings, tools, an image that the prompt estimate counts apart)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.sse import EventSplitter
from gateway.translate import HOLD_WHOLE_BELOW, Translations, held_context
from gateway.translate.base import Context
from gateway.translate.chat_gemini import ChatToGemini
from gateway.translate.chat_messages import ChatToMessages
from gateway.translate.gemini_chat import GeminiToChat
from gateway.translate.messages_chat import MessagesToChat
from gateway.translate.responses_chat import ResponsesToChat

ANSWERS = Path(__file__).resolve().parents[2] / "corpus" / "answers"
IMAGE = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="

REQUESTS: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "hi"}, {
                                             "type": "image_url", "image_url": {"url": f"data:image/png;base64,{IMAGE}"}}]}],
             "stream_options": {"include_usage": True}, "max_tokens": 64,
             "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]},
    "messages": {"model": "m", "max_tokens": 64, "system": "Be brief.", "stop_sequences": ["\n\nHuman:", "STOP"],
                 "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, {
                     "type": "image", "source": {"type": "base64", "media_type": "image/png", "data": IMAGE}}]}],
                 "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]},
    "gemini": {"model": "m", "contents": [{"role": "user", "parts": [
                   {"text": "hi"}, {"inlineData": {"mimeType": "image/png", "data": IMAGE}}]}],
               "systemInstruction": {"parts": [{"text": "Be brief."}]},
               "generationConfig": {"maxOutputTokens": 64, "thinkingConfig": {"includeThoughts": True}},
               "tools": [{"functionDeclarations": [{"name": "get_weather", "parameters": {"type": "object"}}]}]},
    "responses": {"model": "m", "instructions": "Be brief.", "max_output_tokens": 64, "parallel_tool_calls": False,
                  "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}, {
                      "type": "input_image", "image_url": f"data:image/png;base64,{IMAGE}"}]}],
                  "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]},
}


def _answers() -> list[tuple[str, str, Any]]:
    """(name, upstream API, buffered document or stream bytes) of the corpus."""
    out: list[tuple[str, str, Any]] = []
    for path in sorted(ANSWERS.glob("*.json")):
        case = json.loads(path.read_text())
        body = case.get("body")
        for text in (case.get("sse"), case.get("stream"), body):
            if isinstance(text, str):
                api = case.get("api") if case.get("api") in ("messages", "gemini") else "chat"
                out.append((path.stem + ":stream", api, text.encode()))
        if isinstance(body, dict):
            api = "gemini" if "candidates" in body else "messages" if body.get("type") == "message" else "chat"
            out.append((path.stem, api, body))
    return out


ANSWERED = _answers()
TABLE = Translations({(t.client, t.upstream): t for t in (  # fixed clocks: the two runs must agree
    MessagesToChat(), ResponsesToChat(), ChatToMessages(lambda: 1.7e9), GeminiToChat(),
    ChatToGemini(lambda: 1.7e9))}).table  # fmt: skip
CASES = [(client, upstream, name, answer) for (client, upstream) in sorted(TABLE)
         for name, api, answer in ANSWERED if api == upstream]


def _translated(client: str, upstream: str, answer: Any, held: bool) -> tuple[Any, dict[str, Any]]:
    request = REQUESTS[client]
    full = Context("m", request, "req_0123456789abcdef", len(json.dumps(request).encode()))
    translator = TABLE[client, upstream]
    ctx = translator.held(full) if held else full
    if isinstance(answer, dict):
        return translator.answer(answer, ctx), ctx.notes
    stream = translator.stream(ctx)
    splitter = EventSplitter()
    events = splitter.feed(answer) + ([splitter.pending] if splitter.pending.strip() else [])
    return b"".join(stream.event(raw) for raw in events) + stream.close(), ctx.notes


@pytest.mark.parametrize(("client", "upstream", "name", "answer"), CASES, ids=[f"{c}<-{u}:{n}" for c, u, n, _ in CASES])
def test_an_answer_translated_with_the_held_context_is_the_same(monkeypatch, client, upstream, name, answer) -> None:
    monkeypatch.setattr(time, "time", lambda: 1.7e9)  # ids and timestamps some directions stamp
    assert _translated(client, upstream, answer, held=True) == _translated(client, upstream, answer, held=False)


@pytest.mark.parametrize(("client", "upstream"), sorted(TABLE))
def test_the_held_context_keeps_neither_the_conversation_nor_the_tools(client: str, upstream: str) -> None:
    request = REQUESTS[client]
    held = TABLE[client, upstream].held(Context("m", request, "req1", len(json.dumps(request).encode())))
    conversation = {"chat": "messages", "messages": "messages", "gemini": "contents", "responses": "input"}[client]
    assert conversation not in held.request
    if client != "responses":  # Responses answers echo the tools the request declared
        assert "tools" not in held.request
    assert held.request_bytes == len(json.dumps(request).encode())


def test_a_small_request_is_kept_whole_and_a_large_one_without_its_conversation() -> None:
    """``held_context``: below HOLD_WHOLE_BELOW bytes holding the conversation costs little, and
    its prompt estimate is then made only if an answer asks (the answers are the same either
    way: the test above)."""
    translator = TABLE["messages", "chat"]
    small = REQUESTS["messages"]
    size = len(json.dumps(small).encode())
    assert size < HOLD_WHOLE_BELOW
    whole = held_context(translator, "m", small, "req1", size)
    assert whole.request is small and whole.input_tokens is None
    large = {**small, "messages": [{"role": "user", "content": "x" * HOLD_WHOLE_BELOW}]}
    held = held_context(translator, "m", large, "req1", len(json.dumps(large).encode()))
    assert "messages" not in held.request and held.input_tokens is not None
    changed = held_context(translator, "m", large, "req1", None)  # a stage rewrote it: no size
    assert changed.request is large
