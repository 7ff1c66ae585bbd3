"""Structured output on the fake upstream (gateway/fake/structured.py): a request for JSON in a
schema, on chat completions, Messages and Responses as on the Gemini API, gets the smallest
document the schema allows, buffered and streamed, leaning to the low end so that a fake answer
decides nothing a client acts on (Gemini CLI's router picks flash, its loop check finds no loop)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.fake.structured import instance
from tests.fakeupstream import FakeUpstream, data_events, named_events

ROUTER = {"type": "object", "properties": {"reasoning": {"type": "string"},
                                           "model_choice": {"type": "string", "enum": ["flash", "pro"]}},
          "required": ["reasoning", "model_choice"]}  # fmt: skip
ROUTED = {"reasoning": "fake", "model_choice": "flash"}


@pytest.mark.parametrize(("schema", "value"), [
    (ROUTER, ROUTED),
    # Gemini CLI's loop check: a confidence "between 0.0 and 1.0"; 1 made every check a loop.
    ({"type": "object", "properties": {"unproductive_state_analysis": {"type": "string"},
                                       "unproductive_state_confidence": {"type": "number"}},
      "required": ["unproductive_state_analysis", "unproductive_state_confidence"]},
     {"unproductive_state_analysis": "fake", "unproductive_state_confidence": 0}),
    # Its numerical router: an integer "from 1-100" in words, zod min(1).
    ({"type": "OBJECT", "properties": {"complexity_score": {"type": "INTEGER"}}, "required": ["complexity_score"]},
     {"complexity_score": 1}),
    ({"type": "number", "minimum": 0.5}, 0.5),
    ({"type": "integer", "minimum": 3}, 3),
    ({"type": "integer", "exclusiveMinimum": 3}, 4),
    ({"type": "number", "exclusiveMinimum": 0, "maximum": 1}, 0.5),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}}, "required": ["b"]},
     {"b": False}),
    ({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "null"}}}, {"a": "fake", "b": None}),
    ({"type": "array", "items": {"type": "integer"}, "minItems": "2"}, [1, 1]),  # Google's int64 as a string
    ({"type": "string", "minLength": 6}, "fakefake"),
    ({"type": "string", "maxLength": 2}, "fa"),
    ({"type": ["string", "null"]}, "fake"),
    ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, 1),
    ({"const": "x"}, "x"),
    ({"type": "object", "properties": {"n": {"$ref": "#/$defs/N"}}, "required": ["n"],
      "$defs": {"N": {"type": "string", "enum": ["low", "high"]}}}, {"n": "low"}),
    ({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]}, None),  # recursive: ends
])  # fmt: skip
def test_the_smallest_instance_of_a_schema(schema: dict[str, Any], value: Any) -> None:
    got = instance(schema)
    if value is not None:
        assert got == value
    else:
        assert json.dumps(got)


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeUpstream, aiohttp.ClientSession]]:
    async with FakeUpstream() as f, aiohttp.ClientSession() as http:
        yield f, http


HI = [{"role": "user", "content": "route this"}]
CHAT = {"model": "gpt-4o-mini", "messages": HI,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": ROUTER}}}  # fmt: skip
MESSAGES = {"model": "claude-haiku-4-5", "max_tokens": 100, "messages": HI,
            "output_config": {"format": {"type": "json_schema", "schema": {**ROUTER, "additionalProperties": False}}}}
RESPONSES = {"model": "gpt-5-mini", "input": "route this",
             "text": {"format": {"type": "json_schema", "name": "r", "schema": ROUTER}}}
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "k"}


async def post(http: aiohttp.ClientSession, f: FakeUpstream, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
    async with http.post(f"{f.url}{path}", json=body, headers=ANTHROPIC if path == "/messages" else {}) as r:
        return r.status, await r.read()


async def test_chat_answers_json_in_the_response_formats_schema(fake: Any) -> None:
    f, http = fake
    status, raw = await post(http, f, "/chat/completions", CHAT)
    assert status == 200 and json.loads(json.loads(raw)["choices"][0]["message"]["content"]) == ROUTED
    status, raw = await post(http, f, "/chat/completions", {**CHAT, "stream": True})
    chunks = [json.loads(d) for d in data_events(raw) if d != "[DONE]"]
    assert json.loads("".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])) == ROUTED
    plain = {**CHAT, "response_format": {"type": "json_object"}}
    assert json.loads(json.loads((await post(http, f, "/chat/completions", plain))[1])["choices"][0]
                      ["message"]["content"]) == {}  # fmt: skip
    prose = {k: v for k, v in CHAT.items() if k != "response_format"}
    assert json.loads((await post(http, f, "/chat/completions", prose))[1])["choices"][0]["message"]["content"] == (
        "Hello from the fake upstream.")


@pytest.mark.parametrize("field", ["output_config", "output_format"])
async def test_messages_answers_json_in_the_output_formats_schema(fake: Any, field: str) -> None:
    f, http = fake
    body = MESSAGES if field == "output_config" else {
        **{k: v for k, v in MESSAGES.items() if k != "output_config"}, "output_format": MESSAGES["output_config"]["format"]}
    status, raw = await post(http, f, "/messages", body)
    assert status == 200 and json.loads(json.loads(raw)["content"][0]["text"]) == ROUTED
    status, raw = await post(http, f, "/messages", {**body, "stream": True})
    deltas = [d["delta"]["text"] for name, d in named_events(raw) if name == "content_block_delta"]
    assert json.loads("".join(deltas)) == ROUTED


async def test_responses_answers_json_in_the_text_formats_schema(fake: Any) -> None:
    f, http = fake
    status, raw = await post(http, f, "/responses", RESPONSES)
    assert status == 200 and json.loads(json.loads(raw)["output"][0]["content"][0]["text"]) == ROUTED
    status, raw = await post(http, f, "/responses", {**RESPONSES, "stream": True})
    events = named_events(raw)
    deltas = [d["delta"] for name, d in events if name == "response.output_text.delta"]
    assert json.loads("".join(deltas)) == ROUTED
    [done] = [d for name, d in events if name == "response.completed"]
    assert json.loads(done["response"]["output"][0]["content"][0]["text"]) == ROUTED
