"""Client-executed tool search (``{"type": "tool_search", "execution": "client"}``) on a chat
upstream.

OpenAI's tool search lets a model load deferred tools while it works (OpenAI guide "Tool
search"; the shapes below are the openai SDK's types and what Codex 0.169 sends, captured with
``model = "gpt-5.5"`` and an MCP server). With ``execution: "server"`` OpenAI searches the
request's own ``defer_loading`` tools; with ``execution: "client"`` the client searches:

* the tool carries a ``description`` and a ``parameters`` schema for the model (Codex:
  ``{query, limit}``, a BM25 search over its MCP tools and its ``multi_agent_v1`` namespace,
  which then are in no request's ``tools``);
* the model's search is an output item ``{type: tool_search_call, call_id, execution:
  "client", arguments: {...}}`` (``arguments`` an object, not a string);
* the client answers with ``{type: tool_search_output, call_id, execution: "client", tools:
  [...]}``, the loaded definitions (Codex: ``namespace`` tools of ``defer_loading`` functions),
  which from then on are callable though the request's ``tools`` never names them.

A chat server knows none of it, but every piece is a function call: the search is a function
``tool_search`` with the client's description and parameters, the model's call of it comes
back as the ``tool_search_call`` item, a ``tool_search_output`` goes up as that call's tool
result (the loaded names, as the model is to call them), and the loaded tools join the chat
``tools`` while the search tool is declared (a request without it, such as Codex's
compaction with ``tools: []``, offers nothing to call). Server-executed search stays a hosted
tool: its ``defer_loading`` tools are in ``tools`` and reach the chat server up front.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.translate.responses_chat import additional_tools
from gateway.translate.responses_chat.tools import Origin, ToolNames

NAME = "tool_search"  # its chat function name, as OpenAI names the tool
_SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


def client_search(tools: Any) -> Mapping[str, Any] | None:
    """The request's client-executed tool search tool, if it declares one."""
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, dict) and tool.get("type") == NAME and tool.get("execution") == "client":
            return tool
    return None


def is_client(item: Mapping[str, Any]) -> bool:
    return item.get("execution") == "client"


def clashes(tools: Any) -> bool:
    """A function named ``tool_search`` beside the search tool: the two would be one chat name."""
    return client_search(tools) is not None and any(
        isinstance(t, dict) and t.get("type") == "function" and t.get("name") == NAME for t in tools
    )


def effective_tools(payload: Mapping[str, Any], declared: Any = None) -> Any:
    """The request's tools as the chat side sees them: those it declares (``tools`` and its
    ``additional_tools`` items), the client's search as a function, and the tools its outputs
    in ``input`` loaded. Without a client search, the tools as declared. ``declared``:
    ``additional_tools.declared(payload)`` when the caller has it already."""
    tools = declared if declared is not None else additional_tools.declared(payload)
    search = client_search(tools)
    if search is None or not isinstance(tools, list):
        return tools
    parameters = search.get("parameters")
    function = {"type": "function", "name": NAME, "description": search.get("description") or "Search tools.",
                "parameters": parameters if isinstance(parameters, dict) else _SCHEMA}  # fmt: skip
    kept = [t for t in tools if t is not search]
    return [*kept, function, *_loaded(payload.get("input"), kept)]


def _loaded(items: Any, declared: list[Any]) -> list[dict[str, Any]]:
    """The tools the client's searches loaded, each (namespace, name) once and none the request
    declares itself; a namespace loaded by two searches is one namespace with both's tools."""
    seen: set[tuple[Any, Any]] = set()
    for t in declared:
        if isinstance(t, dict) and t.get("type") in ("function", "custom"):
            seen.add((None, t.get("name")))
        elif isinstance(t, dict) and t.get("type") == "namespace":
            seen |= {(t.get("name"), i.get("name")) for i in _listed(t.get("tools")) if isinstance(i, dict)}
    out: list[dict[str, Any]] = []
    spaces: dict[str, dict[str, Any]] = {}
    for item in items if isinstance(items, list) else ():
        if not (isinstance(item, dict) and item.get("type") == "tool_search_output" and is_client(item)):
            continue
        for tool in _listed(item.get("tools")):
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                continue
            if tool.get("type") == "namespace":
                space = spaces.get(tool["name"])
                if space is None:
                    space = spaces[tool["name"]] = {**tool, "tools": []}
                    out.append(space)
                for inner in _listed(tool.get("tools")):
                    key = (tool["name"], inner.get("name") if isinstance(inner, dict) else None)
                    if isinstance(inner, dict) and key not in seen:
                        seen.add(key)
                        space["tools"].append(inner)
            elif tool.get("type") in ("function", "custom") and (None, tool["name"]) not in seen:
                seen.add((None, tool["name"]))
                out.append(tool)
    return out


def is_search(origin: Origin, tools: Any) -> bool:
    """Whether a chat call of this origin is the model's use of the client's tool search."""
    return origin == Origin(NAME) and client_search(tools) is not None


def output_text(item: Mapping[str, Any], names: ToolNames) -> str:
    """A ``tool_search_output`` as its call's tool result: each loaded tool under the name the
    model calls it by, with its description."""
    found = []
    for tool in _listed(item.get("tools")):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            continue
        if tool.get("type") == "namespace":
            for inner in _listed(tool.get("tools")):
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    found.append({"name": names.chat_name(inner["name"], tool["name"]),
                                  "description": _described(tool, inner)})  # fmt: skip
        else:
            described = str(tool.get("description") or "")
            found.append({"name": names.chat_name(tool["name"]), "description": described})
    return json.dumps({"loaded_tools": found})


def _described(space: Mapping[str, Any], tool: Mapping[str, Any]) -> str:
    return f"{space.get('description') or ''}\n\n{tool.get('description') or ''}".strip()


def call_item(ctx_id: str, call_id: str, arguments: str, status: str) -> dict[str, Any]:
    """The model's call of the search function as the item the client runs: ``arguments`` is
    an object there (a cut call's unreadable arguments give an empty one)."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except (ValueError, RecursionError):  # a model's text nested past json's recursion, too
        parsed = {}
    return {"id": ctx_id, "type": "tool_search_call", "status": status, "execution": "client",
            "call_id": call_id, "arguments": parsed if isinstance(parsed, dict) else {}}  # fmt: skip


def _listed(value: Any) -> list[Any]:
    """A list member as a list; anything else as none (a ``tools: true`` made a 500)."""
    return value if isinstance(value, list) else []
