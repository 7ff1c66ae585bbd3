"""A request nested too deeply for a translation to walk. Admission takes what json reads
(about 990 levels); a translation recurses into schemas and messages, a few Python frames a
level, and runs out well before that: ~350 nested objects in a tool's JSON schema (700 levels)
were a RecursionError, a 500 ``internal_error``. The client gets a ``Refusal`` that names the
field, in its own API's shape, as for anything else a translation cannot carry.

Arguments too deep to parse are not refused: they go as their text, as any that are no JSON
object do (``base.call_arguments``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.translate.base import Refusal, Target, Translator
from gateway.translate.json_schema import KEYWORDS


def request_in(
    translator: Translator, payload: Mapping[str, Any], target: Target
) -> dict[str, Any] | Refusal:
    """``translator.request``, or its refusal of a payload too deep for it."""
    try:
        return translator.request(payload, target)
    except RecursionError:
        return too_deep(payload)


def too_deep(payload: Mapping[str, Any]) -> Refusal:
    path = deepest_path(payload)
    return Refusal(f"{field_of(path)} is nested too deeply to translate ({len(path)} levels of JSON); "
                   "nest it less deeply, or send the request to an upstream that speaks its API")  # fmt: skip


def deepest_path(doc: Any) -> list[str | int]:
    """The keys and indexes down to ``doc``'s most deeply nested value (the first of the
    deepest), walked without recursion: the document is one recursion could not walk."""
    nodes: list[tuple[int, str | int]] = [(-1, "")]  # (parent node, key): the path back up
    stack: list[tuple[Any, int, int]] = [(doc, 0, 0)]  # (value, its node, its depth)
    deepest, deepest_node = -1, 0
    while stack:
        value, node, depth = stack.pop()
        if depth > deepest:
            deepest, deepest_node = depth, node
        if isinstance(value, Mapping):
            items: list[tuple[str | int, Any]] = list(value.items())
        else:
            items = list(enumerate(value)) if isinstance(value, list) else []
        for key, child in reversed(items):
            nodes.append((node, key))
            stack.append((child, len(nodes) - 1, depth + 1))
    path: list[str | int] = []
    while deepest_node > 0:
        parent, key = nodes[deepest_node]
        path.append(key)
        deepest_node = parent
    return path[::-1]


def field_of(path: list[str | int]) -> str:
    """The field a refusal names: the path down to where a JSON schema begins nesting
    (``tools[0].function.parameters``), the names of its properties left out (they are the
    client's, not the API's); else the top-level member."""
    end = next((i for i, key in enumerate(path) if i > 0 and key in KEYWORDS), 1)
    if not path:
        return "the request body"
    shown = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path[:end]).lstrip(".")
    return shown if len(shown) <= 160 else shown[:160] + "..."
