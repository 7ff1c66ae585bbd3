"""Gemini function names as chat function names, and back.

The Gemini API takes dots and colons in a function's name (``FunctionDeclaration.name``: a-z,
A-Z, 0-9, underscores, dots, colons and dashes); OpenAI's chat API takes
``^[a-zA-Z0-9_-]{1,64}$`` and Anthropic's ``^[a-zA-Z0-9_-]{1,128}$`` ("tools.0.custom.name:
String should match pattern"), so a name like ``files.read`` (an MCP server's tool, say) would
be a 400 on either. Such a name goes upstream as a valid one, its characters replaced and a
short digest of the original added (so two names that differ only there stay two), and every
call the model makes under it comes back under the original. A valid name is left as it is.

The mapping is a function of the declared names alone: the answer side rebuilds it from the
request's tools (kept for the answer only when some name needed it), as Responses → chat does
with its tools. Built once per distinct tuple of names (LRU, 256), read-only.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from gateway.apis.gemini.fields import field

_CHAT = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ODD = re.compile(r"[^a-zA-Z0-9_-]")


@dataclass(frozen=True, slots=True)
class Names:
    to_chat: Mapping[str, str]
    from_chat: Mapping[str, str]

    def chat(self, name: str) -> str:
        return self.to_chat.get(name, name)

    def gemini(self, chat_name: str) -> str:
        return self.from_chat.get(chat_name, chat_name)

    @property
    def mapped(self) -> bool:
        return bool(self.to_chat)


NONE = Names(MappingProxyType({}), MappingProxyType({}))


def declared(tools: Any) -> tuple[str, ...]:
    names: list[str] = []
    for tool in tools if isinstance(tools, list) else ():
        for decl in (field(tool, "functionDeclarations") or ()) if isinstance(tool, dict) else ():
            if isinstance(decl, dict) and isinstance(decl.get("name"), str):
                names.append(decl["name"])
    return tuple(names)


def names_for(tools: Any) -> Names:
    found = declared(tools)
    return NONE if all(_CHAT.match(n) for n in found) else _names(found)


@functools.lru_cache(maxsize=256)
def _names(found: tuple[str, ...]) -> Names:
    to_chat: dict[str, str] = {}
    taken = {n for n in found if _CHAT.match(n)}
    for name in found:
        if name in taken or name in to_chat:
            continue
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        chat = f"{_ODD.sub('_', name)[:55]}_{digest}"
        to_chat[name] = chat
        taken.add(chat)
    return Names(MappingProxyType(to_chat), MappingProxyType({c: g for g, c in to_chat.items()}))
