"""Tools a Responses request declares inside ``input`` (``additional_tools`` items).

Codex sends its newest models' requests in the "responses-lite" shape (header
``x-openai-internal-codex-responses-lite: true``; Codex 0.171 on its default ``gpt-6.2-sol``,
``tests/corpus/requests/codex-0.171-lite-first.json``): no top-level ``tools``; instead an
input item ``{"type": "additional_tools", "role": "developer", "tools": [...]}`` holds the
tool definitions, here the namespaces ``functions`` (the custom tool ``exec``, JavaScript that
calls the other tools), ``clock`` and ``collaboration``. openai/codex PR #27946: "When using
Responses Lite, we should all use `additional_tools` and a developer item instead of the top
level tools array & instructions field." A translator that reads only ``tools`` offers the
model none (cc-switch-cli #466: "every tool is silently dropped"; tokenmaxx #27); one that
reads the item as conversation refuses it.

On a chat upstream the item is no turn of the conversation: its tools join the request's own
(``declared``), named and answered as any of those, and the item itself is left out of the
messages. A later item may repeat a tool an earlier one (or ``tools``) declared: the first
declaration stands, and a namespace declared twice is one namespace with the tools of both.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

ITEM = "additional_tools"


def items(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The request's ``additional_tools`` input items, in order."""
    found = payload.get("input")
    if not isinstance(found, list):
        return []
    return [i for i in found if isinstance(i, dict) and i.get("type") == ITEM]


def declared(payload: Mapping[str, Any]) -> Any:
    """The request's tools: ``tools`` (as given, when no input item adds any) followed by
    those of its ``additional_tools`` items."""
    tools = payload.get("tools")
    carriers = items(payload)
    if not carriers:
        return tools
    out: list[Any] = []
    flat: set[Any] = set()
    spaces: dict[str, dict[str, Any]] = {}
    for tool in [*(tools if isinstance(tools, list) else ()), *_tools_of(carriers)]:
        if not isinstance(tool, dict):
            out.append(tool)  # chat_tools refuses it in the client's words
        elif tool.get("type") == "namespace" and isinstance(tool.get("name"), str):
            _merge(spaces, out, tool)
        elif "name" in tool:
            if tool.get("name") not in flat:
                flat.add(tool.get("name"))
                out.append(tool)
        elif tool not in out:  # a hosted tool has no name (web_search): once
            out.append(tool)
    return out


def _tools_of(carriers: list[dict[str, Any]]) -> list[Any]:
    found: list[Any] = []
    for item in carriers:
        tools = item.get("tools")
        if isinstance(tools, list):
            found += tools
    return found


def _merge(spaces: dict[str, dict[str, Any]], out: list[Any], tool: dict[str, Any]) -> None:
    inner = tool.get("tools")
    if not isinstance(inner, list):
        out.append(tool)  # chat_tools refuses it in the client's words
        return
    space = spaces.get(tool["name"])
    if space is None:
        space = spaces[tool["name"]] = {**tool, "tools": list(inner)}
        out.append(space)
        return
    names = {t.get("name") for t in space["tools"] if isinstance(t, dict)}
    space["tools"] += [t for t in inner if not (isinstance(t, dict) and t.get("name") in names)]
