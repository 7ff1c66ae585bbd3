"""A chat client's tools named as MCP servers name them (a dot, a name past the upstream's
length), driven through two turns with the openai SDK: the model calls the dotted one, the
client sends its result back. Shared by the translations that rename them (chat -> Responses,
chat -> Messages)."""

from __future__ import annotations

import json
from typing import Any

DOTTED = "github.create_issue"


def named_tools(long: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": {
        "type": "object", "properties": {"title": {"type": "string"}}}}} for n in (DOTTED, long)]  # fmt: skip


async def round_trip(client: Any, tools: list[dict[str, Any]], stream: bool) -> Any:
    """The first turn (forced to the dotted tool, streamed or not), whose call must come back
    under the client's own name, then the turn with its result; the second answer."""
    messages: list[Any] = [{"role": "user", "content": "File it."}]
    choice = {"type": "function", "function": {"name": DOTTED}}
    if stream:
        async with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools,
                                                  tool_choice=choice) as s:  # fmt: skip
            first = await s.get_final_completion()
    else:
        first = await client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools,
                                                     tool_choice=choice)  # fmt: skip
    [call] = first.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == (DOTTED, {"title": "Bug"})
    messages += [{"role": "assistant", "content": None,
                  "tool_calls": [call.model_dump(include={"id", "type", "function"})]},
                 {"role": "tool", "tool_call_id": call.id, "content": "issue #7"}]  # fmt: skip
    return await client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
