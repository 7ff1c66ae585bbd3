"""Input nested too deeply for the translations' recursion, though within the depth admission
takes (about 990 levels): each was a 500 ``internal_error`` (a RecursionError) on a translated
upstream, found by an audit of bad input.

- A past call's arguments that are ``"[" * 3000 + "]" * 3000``: not a JSON object, so sent as
  their text (``base.call_arguments``), as any other arguments no object are.
- A schema of ~350 nested objects (700 levels of JSON) in a tool's parameters or a structured
  output's schema: refused 400 in the client's API's shape, the field named.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.translate.base import UNPARSED

DEEP_ARGS = "[" * 3000 + "]" * 3000
HI = [{"role": "user", "content": "hi"}]
GEMINI = "/v1beta/models/gemini-2.5-pro:generateContent"


def schema(levels: int) -> dict[str, Any]:
    s: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        s = {"type": "object", "properties": {"a": s}}
    return s


@pytest.mark.parametrize("api", ["messages", "gemini"])
async def test_a_chat_clients_arguments_too_deep_to_parse_go_as_their_text(make_gateway: Any, api: str) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [{api}], api_key: k")
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP_ARGS}}
    body = {"model": "gpt-4o-mini", "messages": [*HI, {"role": "assistant", "content": None, "tool_calls": [call]},
                                                 {"role": "tool", "tool_call_id": "c1", "content": "r"}]}
    status, _, raw = await gw.chat(body)
    assert status == 200, raw
    assert UNPARSED in gw.fake.requests[-1].body.decode()


@pytest.mark.parametrize("api", ["messages", "gemini"])
async def test_a_responses_clients_arguments_too_deep_to_parse_go_as_their_text(make_gateway: Any, api: str) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [{api}], api_key: k")
    body = {"model": "gpt-4o-mini", "input": [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": DEEP_ARGS},
        {"type": "function_call_output", "call_id": "c1", "output": "r"}]}
    status, _, raw = await gw.responses(body)
    assert status == 200, raw
    assert UNPARSED in gw.fake.requests[-1].body.decode()


def _gemini_tools(levels: int) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": schema(levels)}]}]}


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
async def test_a_gemini_function_schema_too_deep_to_translate_is_refused_in_googles_shape(
    make_gateway: Any, api: str
) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [{api}], api_key: k")
    async with gw.session.post(gw.base + GEMINI, json=_gemini_tools(350), headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 400, await r.text()
        error = (await r.json())["error"]
    assert error["code"] == 400 and error["status"] == "INVALID_ARGUMENT"
    assert "tools[0].functionDeclarations[0].parametersJsonSchema" in error["message"]
    assert not gw.fake.requests


async def test_a_gemini_response_schema_too_deep_to_translate_is_refused(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages]")
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "generationConfig": {"responseMimeType": "application/json", "responseSchema": schema(350)}}
    async with gw.session.post(gw.base + GEMINI, json=body, headers={"x-goog-api-key": "k"}) as r:
        assert r.status == 400, await r.text()
        error = (await r.json())["error"]
    assert error["status"] == "INVALID_ARGUMENT" and "generationConfig.responseSchema" in error["message"]


async def test_a_chat_response_format_too_deep_to_translate_is_refused(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [messages]")
    body = {"model": "gpt-4o-mini", "messages": HI,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema(350)}}}
    status, _, raw = await gw.chat(body)
    assert status == 400, raw
    error = json.loads(raw)["error"]
    assert error["type"] == "invalid_request_error" and "response_format.json_schema.schema" in error["message"]
    assert not gw.fake.requests


async def test_a_schema_as_deep_translates_where_nothing_walks_it(make_gateway: Any) -> None:
    gw = await make_gateway(upstream_yaml=", apis: [chat]")
    status, _, raw = await gw.chat({"model": "gpt-4o-mini", "messages": HI,
                                    "response_format": {"type": "json_schema",
                                                        "json_schema": {"name": "x", "schema": schema(350)}}})
    assert status == 200, raw  # byte for byte on a chat upstream: only a translation recurses
