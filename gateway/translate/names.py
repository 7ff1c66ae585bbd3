"""Function names one API takes and another refuses, sent as valid ones and given back.

The APIs differ: the Gemini API takes dots and colons (``FunctionDeclaration.name``: a letter or
an underscore first, then a-z, A-Z, 0-9, ``_ . : -``, at most 64); OpenAI's chat API takes
``^[a-zA-Z0-9_-]{1,64}$`` and Anthropic's ``^[a-zA-Z0-9_-]{1,128}$``. So ``files.read`` (an MCP
server's tool, say) is a 400 on OpenAI and Anthropic, and Claude Code's
``mcp__<server>__<tool>`` names past 64 characters or a name starting with a digit are a 400
on Gemini ("Invalid function name. Must start with a letter or an underscore..."). Such a name
goes upstream as a valid one, its odd characters replaced and a short digest of the original
added (so two names that differ only there stay two), and every call the model makes under it
comes back under the original. A valid name is left as it is.

The mapping is a function of the declared names alone: the answer side rebuilds it from the
request's tools (kept for the answer only when some name needed it), as Responses -> chat
does with its tools. Built once per distinct tuple of names and rule (LRU, 256), read-only.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any


# Compared and hashed by identity (the rules are this module's constants): a cache key of
# ``names_for``, whose generated hash of the fields ran at every look-up.
@dataclass(frozen=True, slots=True, eq=False)
class Rule:
    """What an upstream API takes as a function name."""

    valid: re.Pattern[str]
    odd: re.Pattern[str]  # a character it does not take
    first: re.Pattern[str] | None = None  # what the first character must be, if anything
    most: int = 64


CHAT = Rule(re.compile(r"[a-zA-Z0-9_-]{1,64}"), re.compile(r"[^a-zA-Z0-9_-]"))
MESSAGES = Rule(re.compile(r"[a-zA-Z0-9_-]{1,128}"), CHAT.odd, most=128)
GEMINI = Rule(re.compile(r"[a-zA-Z_][a-zA-Z0-9_.:-]{0,63}"), re.compile(r"[^a-zA-Z0-9_.:-]"),
              re.compile(r"[a-zA-Z_]"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Names:
    to_upstream: Mapping[str, str]
    from_upstream: Mapping[str, str]

    def upstream(self, name: str) -> str:
        return self.to_upstream.get(name, name)

    def client(self, upstream_name: str) -> str:
        return self.from_upstream.get(upstream_name, upstream_name)

    @property
    def mapped(self) -> bool:
        return bool(self.to_upstream)


NONE = Names(MappingProxyType({}), MappingProxyType({}))


def per_tools(read: Callable[[Any], Names]) -> Callable[[Any], Names]:
    """``read`` remembered for the last tools list it was given, by identity: a request's
    translation asks for its names two or three times (request, held context, answer), and
    reading Claude Code's 24 tools costs ~2.8 µs each time (issue #38). The list is held, so
    its identity cannot be reused by another while remembered."""
    last: list[Any] = [None, NONE]

    def remembered(tools: Any) -> Names:
        if not tools:  # most requests declare none (every reader makes NONE of that): no call
            return NONE
        if tools is not last[0]:
            last[0], last[1] = tools, read(tools)
        return last[1]  # type: ignore[no-any-return]

    return remembered


def chat_declared(tools: Any) -> tuple[str, ...]:
    """The function names a chat request's ``tools`` declare (one of the wrong type skipped:
    the request translator refuses it, and answers read the tools too)."""
    return tuple(fn["name"] for t in tools if isinstance(t, dict)
                 and isinstance(fn := t.get("function"), dict) and isinstance(fn.get("name"), str)
                 ) if isinstance(tools, list) else ()  # fmt: skip


def sent(functions: Names, name: str, rule: Rule) -> str:
    """``name`` as it goes upstream, where it may be one no tool declares (a call in the history
    of a function the request no longer offers). A name's upstream form depends on the name
    alone, so such a call is written as its tool was when it was declared."""
    if name in functions.to_upstream or rule.valid.fullmatch(name):
        return functions.upstream(name)
    return names_for((name,), rule).upstream(name)


@functools.lru_cache(maxsize=256)
def names_for(declared: tuple[str, ...], rule: Rule) -> Names:
    """Cached whole (an agent declares the same tools every turn: a hit costs the tuple's hash,
    not a pattern match per name)."""
    if all(rule.valid.fullmatch(n) for n in declared):
        return NONE
    to_upstream: dict[str, str] = {}
    taken = {n for n in declared if rule.valid.fullmatch(n)}
    for name in declared:
        if name in taken or name in to_upstream:
            continue
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        stem = rule.odd.sub("_", name)
        if rule.first is not None and not rule.first.match(stem):
            stem = "_" + stem
        upstream = f"{stem[: rule.most - 9]}_{digest}"
        to_upstream[name] = upstream
        taken.add(upstream)
    return Names(MappingProxyType(to_upstream), MappingProxyType({u: c for c, u in to_upstream.items()}))
