"""Gemini function names as chat function names, and back (the rule and the mapping:
``translate/names.py``): Gemini takes dots and colons in a name, OpenAI's and Anthropic's APIs
refuse them."""

from __future__ import annotations

from typing import Any

from gateway.apis.gemini.fields import field
from gateway.translate import names
from gateway.translate.names import NONE, Names

__all__ = ["NONE", "Names", "declared", "names_for"]


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


@names.per_tools
def names_for(tools: Any) -> Names:
    return names.names_for(declared(tools), names.CHAT)
