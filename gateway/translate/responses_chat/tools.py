"""Responses tools as chat tools, and the names back (Responses → chat, both ways).

A chat upstream knows one kind of tool, ``{"type": "function", "function": {...}}``, under a
flat name (OpenAI: ``^[a-zA-Z0-9_-]{1,64}$``). Responses has more:

* flat function tools ``{type: function, name, description, parameters, strict}``;
* ``namespace`` tools holding functions (Codex 0.169's ``multi_agent_v1``): the model's call
  names the function *and* its namespace, and Codex dispatches on both (measured: a call
  named ``close_agent`` without ``namespace: multi_agent_v1`` is answered "unsupported
  call"). On chat each becomes one function named ``<namespace>__<name>``; the answer gives
  the client back ``name`` and ``namespace`` separately;
* ``custom`` tools (freeform text input, optionally under a grammar): on chat a function with
  one string parameter ``input``; the grammar goes into the description (a chat server cannot
  enforce it), and the call comes back as a ``custom_tool_call`` with that string;
* hosted tools (``web_search``, ``file_search``, ``code_interpreter``, ``computer_use``,
  ``image_generation``, ``mcp``, ``local_shell``, …) run inside OpenAI's servers; a chat server
  cannot run them, so they are dropped (a ``tool_choice`` forcing one is refused), each named
  for ``x-llm-params-dropped`` (``hosted``) and left out of the answer's echo of the request's
  tools (``offered``): Codex sends ``web_search`` on every request.

The mapping is a pure function of the request's ``tools``, so the answer side rebuilds it
from the client's request instead of keeping state between request and answer. It is a
pure function of the declared (namespace, name, custom) triples alone, and an agent sends
the same tools on every turn: the mapping is built once per distinct tuple of triples (the
key is the whole tuple, so two tool lists share an entry only when they declare the same
names), bounded (LRU, 256), and immutable, so no caller can change what a later request
reads. Measured on Codex 0.169's tools: building it 12.6 µs, reading the triples and the
cache ~2 µs, twice per translated request (request and answer).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from gateway.translate import json_schema, typed
from gateway.translate.base import Refusal

SEPARATOR = "__"
_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_EMPTY_SCHEMA = {"type": "object", "properties": {}}
CUSTOM_INPUT = "input"  # the one parameter a custom tool gets on chat
CARRIED = ("function", "custom", "namespace")  # the kinds of tool a chat server is offered


@dataclass(frozen=True, slots=True)
class Origin:
    """What a chat function name stands for in the client's Responses request."""

    name: str
    namespace: str | None = None
    custom: bool = False


@dataclass(frozen=True, slots=True)
class ToolNames:
    """Chat name ⇄ Responses (name, namespace), for one request's tools; read-only (shared
    between requests that declare the same tools)."""

    to_chat: Mapping[tuple[str | None, str], str] = field(default_factory=lambda: MappingProxyType({}))
    origin: Mapping[str, Origin] = field(default_factory=lambda: MappingProxyType({}))

    def chat_name(self, name: str, namespace: str | None = None) -> str:
        """The chat name of a client's tool; a name the request did not declare stays as it
        is (a call to an unknown tool is the model's business, not ours)."""
        return self.to_chat.get((namespace or None, name), name)

    def lookup(self, chat_name: str) -> Origin:
        return self.origin.get(chat_name) or Origin(chat_name)


def _chat_name(namespace: str | None, name: str, taken: set[str]) -> str:
    candidate = f"{namespace}{SEPARATOR}{name}" if namespace else name
    if candidate in taken or not _VALID.match(candidate):
        # Too long, odd characters or a clash: a stable short name (the map resolves it back).
        digest = hashlib.sha1(f"{namespace}\0{name}".encode()).hexdigest()[:8]
        stem = re.sub(r"[^a-zA-Z0-9_-]", "_", candidate)[:55]
        candidate = f"{stem}_{digest}"
    return candidate


Declared = tuple[tuple[str | None, str, bool], ...]


def tool_names(tools: Any) -> ToolNames:
    return _names_for(_declared(tools))


def _declared(tools: Any) -> Declared:
    """(namespace, name, custom) of each function and custom tool, in the request's order."""
    if not isinstance(tools, list):
        return ()
    declared: list[tuple[str | None, str, bool]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind in ("function", "custom") and isinstance(tool.get("name"), str):
            declared.append((None, tool["name"], kind == "custom"))
        elif kind == "namespace" and isinstance(tool.get("name"), str):
            inners = tool.get("tools")
            # Read before the request is checked (and by answers): a wrong type is chat_tools'
            # to refuse, so it is skipped here.
            for inner in inners if isinstance(inners, list) else ():
                if (
                    isinstance(inner, dict)
                    and inner.get("type") in ("function", "custom")
                    and isinstance(inner.get("name"), str)
                ):
                    declared.append((tool["name"], inner["name"], inner.get("type") == "custom"))
    return tuple(declared)


@functools.lru_cache(maxsize=256)
def _names_for(declared: Declared) -> ToolNames:
    to_chat: dict[tuple[str | None, str], str] = {}
    origin: dict[str, Origin] = {}
    # Flat names first: they keep their own name whatever a namespace flattens to.
    taken: set[str] = set()
    for namespace, name, custom in sorted(declared, key=lambda d: d[0] is not None):
        chat = _chat_name(namespace, name, taken)
        taken.add(chat)
        to_chat[(namespace, name)] = chat
        origin[chat] = Origin(name, namespace, custom)
    return ToolNames(MappingProxyType(to_chat), MappingProxyType(origin))


def _function(tool: Mapping[str, Any], chat_name: str, at: typed.Path, prefix: str = "") -> dict[str, Any]:
    """A function tool; ``prefix``: its namespace's description, said before its own."""
    fn: dict[str, Any] = {"name": chat_name}
    description = typed.text(tool.get("description"), (*at, "description")) or ""
    if prefix:
        description = f"{prefix}\n\n{description}".strip()
    if description:
        fn["description"] = description
    params = typed.obj(tool.get("parameters"), (*at, "parameters"))
    fn["parameters"] = json_schema.with_properties(params) if params is not None else _EMPTY_SCHEMA
    if typed.flag(tool.get("strict"), (*at, "strict")):
        fn["strict"] = True
    return {"type": "function", "function": fn}


def _custom(tool: Mapping[str, Any], chat_name: str, at: typed.Path) -> dict[str, Any]:
    description = typed.text(tool.get("description"), (*at, "description")) or ""
    fmt = typed.obj(tool.get("format"), (*at, "format"))
    if fmt is not None and fmt.get("type") == "grammar" and fmt.get("definition"):
        description += (
            f"\n\nFreeform tool: put the raw text in `{CUSTOM_INPUT}`; it must match this "
            f"{fmt.get('syntax', '')} grammar:\n{fmt['definition']}"
        )
    else:
        description += f"\n\nFreeform tool: put the raw text in `{CUSTOM_INPUT}`."
    return {
        "type": "function",
        "function": {
            "name": chat_name,
            "description": description.strip(),
            "parameters": {
                "type": "object",
                "properties": {CUSTOM_INPUT: {"type": "string"}},
                "required": [CUSTOM_INPUT],
                "additionalProperties": False,
            },
        },
    }


def is_hosted(tool: Any) -> bool:
    """A tool only OpenAI's servers run: none of the kinds chat carries, nor the client's own
    tool search (a function on chat: ``tool_search.py``)."""
    if not isinstance(tool, dict):
        return False
    kind = tool.get("type")
    return kind not in CARRIED and not (kind == "tool_search" and tool.get("execution") == "client")


def hosted(tools: Any) -> tuple[str, ...]:
    """``tools.<type>`` of each hosted tool ``chat_tools`` leaves out, each kind once."""
    found = (f"tools.{t.get('type')}" for t in tools if is_hosted(t)) if isinstance(tools, list) else ()
    return tuple(dict.fromkeys(found))


def offered(tools: Any) -> Any:
    """The request's tools without the hosted ones: what the model was offered."""
    if not isinstance(tools, list) or not any(is_hosted(t) for t in tools):
        return tools
    return [t for t in tools if not is_hosted(t)]


def chat_tools(tools: Any, names: ToolNames) -> list[dict[str, Any]]:
    """The chat ``tools`` array; hosted tools are left out (module docstring)."""
    out: list[dict[str, Any]] = []
    for k, tool in enumerate(typed.objects(tools, ("tools",))):
        kind = typed.text(tool.get("type"), ("tools", k, "type"))
        if kind not in CARRIED:
            continue  # a hosted tool: left out (module docstring)
        name = typed.text(tool.get("name"), ("tools", k, "name"))
        if name is None:
            continue
        if kind == "function":
            out.append(_function(tool, names.chat_name(name), ("tools", k)))
        elif kind == "custom":
            out.append(_custom(tool, names.chat_name(name), ("tools", k)))
        elif kind == "namespace":
            out += _namespace(tool, name, ("tools", k), names)
    return out


def _namespace(
    tool: Mapping[str, Any], namespace: str, at: typed.Path, names: ToolNames
) -> list[dict[str, Any]]:
    """A namespace's functions, each under its flattened chat name."""
    out = []
    prefix = (typed.text(tool.get("description"), (*at, "description")) or "").strip()
    for k, inner in enumerate(typed.objects(tool.get("tools"), (*at, "tools"))):
        name = typed.text(inner.get("name"), (*at, "tools", k, "name"))
        kind = typed.text(inner.get("type"), (*at, "tools", k, "type"))
        if name is None:
            continue
        chat = names.chat_name(name, namespace)
        if kind == "custom":
            out.append(_custom(inner, chat, (*at, "tools", k)))
        elif kind == "function":
            out.append(_function(inner, chat, (*at, "tools", k), prefix))
    return out


def _named_choice(choice: Mapping[str, Any], names: ToolNames, at: typed.Path) -> dict[str, Any]:
    name = typed.text(choice.get("name"), (*at, "name"))
    if name is None:
        fn = typed.obj(choice.get("function"), (*at, "function"))
        name = typed.text(fn.get("name"), (*at, "function", "name")) if fn is not None else None
    ns = choice.get("namespace") if isinstance(choice.get("namespace"), str) else None
    return {"type": "function", "function": {"name": names.chat_name(str(name), ns)}}


def chat_tool_choice(
    choice: Any, tools: Sequence[dict[str, Any]], names: ToolNames
) -> tuple[Any, list[dict[str, Any]]] | Refusal:
    """The chat ``tool_choice`` (None: leave it out) and the tools it leaves callable."""
    tools = list(tools)
    if choice is None or choice == "auto":
        return (None if choice is None else "auto"), tools
    if choice in ("none", "required"):
        if choice == "required" and not tools:
            return Refusal(
                "tool_choice 'required' cannot be met: the upstream cannot run the hosted tools "
                "this request offers (OpenAI runs them), and no function tool is left"
            )
        return choice, tools
    if isinstance(choice, str):
        return Refusal(f"unsupported tool_choice {choice[:64]!r}")
    if not isinstance(choice, dict):
        raise typed.wrong(choice, ("tool_choice",), "string", "object")
    kind = typed.text(choice.get("type"), ("tool_choice", "type"))
    if kind in ("function", "custom"):
        return _named_choice(choice, names, ("tool_choice",)), tools
    if kind == "allowed_tools":
        allowed: set[str] = set()
        for k, t in enumerate(typed.objects(choice.get("tools"), ("tool_choice", "tools"))):
            if t.get("type") in ("function", "custom"):
                allowed.add(_named_choice(t, names, ("tool_choice", "tools", k))["function"]["name"])
        kept = [t for t in tools if t["function"]["name"] in allowed]
        mode = typed.text(choice.get("mode"), ("tool_choice", "mode")) or "auto"
        if mode == "required" and not kept:
            return Refusal("tool_choice allowed_tools 'required' names no function tool the upstream can run")
        return (mode if mode in ("auto", "required") else "auto"), kept
    return Refusal(f"tool_choice {kind!r} forces a hosted tool, which only OpenAI runs: the upstream cannot")
