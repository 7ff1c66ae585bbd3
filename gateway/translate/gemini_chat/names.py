"""Gemini function names as chat function names, and back (the rule and the mapping:
``translate/names.py``): Gemini takes dots and colons in a name, OpenAI's and Anthropic's APIs
refuse them.

The names mapped are the tools' and those the history calls: Gemini CLI keeps an MCP server's
dots in its tools' names (``files.read``), and a request may call in its history a function it
no longer declares (a summary request declares none), which chat_messages then declares for
Anthropic; sent raw, Anthropic refuses it ("tools.0.custom.name: String should match pattern
'^[a-zA-Z0-9_-]{1,128}$'", modelcontextprotocol/modelcontextprotocol#1345), and OpenAI a call
of it in the history ("Invalid 'messages[9].tool_calls[0].function.name': string does not
match pattern", mcp-use/mcp-use#94)."""

from __future__ import annotations

from typing import Any

from gateway.apis.gemini.fields import field
from gateway.translate import names
from gateway.translate.names import NONE, Names

__all__ = ["NONE", "Names", "called", "declared", "names_for"]


def declared(tools: Any) -> tuple[str, ...]:
    found: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        decls = field(tool, "functionDeclarations") if isinstance(tool, dict) else None
        # Read before the request is checked (and by answers): a wrong type is the request
        # translator's to refuse, so it is skipped here.
        for decl in decls if isinstance(decls, list) else ():
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                found.append(decl["name"])
    return tuple(found)


def called(contents: Any) -> tuple[str, ...]:
    """The names the history's function calls give, each once, in order (skipped like
    ``declared`` where of the wrong type)."""
    found: dict[str, None] = {}
    for content in contents if isinstance(contents, list) else ():
        parts = content.get("parts") if isinstance(content, dict) and content.get("role") == "model" else None
        for part in parts if isinstance(parts, list) else ():
            call = field(part, "functionCall") if isinstance(part, dict) else None
            name = call.get("name") if isinstance(call, dict) else None
            if isinstance(name, str):
                found[name] = None
    return tuple(found)


def names_for(tools: Any, contents: Any = None) -> Names:
    """The mapping for a request's ``tools`` and the calls in its ``contents``, remembered for
    the last pair given, by identity: a request's translation asks two or three times (request,
    held context, answer), and reading Claude Code's 24 tools costs ~2.8 µs each time (issue
    #38). Both are held, so their identities cannot be reused by others while remembered. A
    history that calls only declared functions (an agent's usual turn) shares the tools' entry
    of the mapping's cache."""
    if tools is _last[0] and contents is _last[1]:
        return _last[2]  # type: ignore[no-any-return]
    tools_named = declared(tools)
    known = set(tools_named)
    extra = tuple(n for n in called(contents) if n not in known)
    found = names.names_for(tools_named + extra, names.CHAT)
    _last[:] = [tools, contents, found]
    return found


_last: list[Any] = [object(), object(), NONE]


def calls_kept(contents: Any) -> list[dict[str, Any]]:
    """What a held context keeps of ``contents`` for the answer to name calls by: one model
    turn holding a call of each name the history calls, nothing else of the conversation."""
    history = called(contents)
    return [{"role": "model", "parts": [{"functionCall": {"name": n}} for n in history]}] if history else []
