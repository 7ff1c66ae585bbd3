"""A tool without arguments declared as MCP's Go SDK writes it, ``{"type": "object"}`` with no
``properties`` (xpzouying/xiaohongshu-mcp#677), by the real anthropic SDK through the gateway to
an OpenAI upstream, chat and Responses: OpenAI refuses every request that holds such a function
("object schema missing properties"), and the fake with it (gateway/fake/chat_rules.py,
responses_rules.py). Claude Code passes an MCP server's schema on as it came, so without the
gateway's empty ``properties`` no prompt of a session with that server would be answered."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import pytest

from gateway.fake.tool_call import _chat_call, _responses_call

LIST_THINGS: Any = {"name": "mcp__probe__list_things", "description": "List things (no arguments)",
                    "input_schema": {"type": "object"}}  # fmt: skip


@pytest.mark.parametrize("wire", ["chat", "responses"])
async def test_a_tool_without_properties_goes_round_on_an_openai_upstream(make_gateway, wire: str) -> None:
    gw = await make_gateway(upstream_yaml=f", apis: [{wire}], model_map: {{'claude-*': gpt-4.1}}")
    call = (_chat_call({"stream": True}, "gpt-4.1", "call_l1", LIST_THINGS["name"], "{}", True) if wire == "chat"
            else _responses_call("gpt-4.1", "l1", LIST_THINGS["name"], "{}", True))  # fmt: skip
    gw.fake.script(call)  # then the fake's own answer
    async with anthropic.AsyncAnthropic(api_key="dummy", base_url=gw.base, max_retries=0) as client:
        messages: list[Any] = [{"role": "user", "content": "What things are there?"}]
        async with client.messages.stream(model="claude-sonnet-4-6", max_tokens=1024, messages=messages,
                                          tools=[LIST_THINGS]) as stream:  # fmt: skip
            first = await stream.get_final_message()
        [use] = [b for b in first.content if b.type == "tool_use"]
        assert first.stop_reason == "tool_use" and (use.name, use.input) == (LIST_THINGS["name"], {})
        messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                   "content": "thing-1, thing-2"}]}]  # fmt: skip
        second = await client.messages.create(model="claude-sonnet-4-6", max_tokens=1024, messages=messages,
                                              tools=[LIST_THINGS])  # fmt: skip
    assert second.stop_reason == "end_turn" and second.content[0].type == "text"
    sent = [r.json() for r in (gw.fake.chat_requests() if wire == "chat" else gw.fake.responses_requests())]
    assert len(sent) == 2
    for body in sent:
        [tool] = body["tools"]
        parameters = tool["function"]["parameters"] if wire == "chat" else tool["parameters"]
        assert parameters == {"type": "object", "properties": {}}, json.dumps(body)
