"""The object (sub)schemas of a JSON Schema, for the structured-output rules that Anthropic
(messages_rules.py) and OpenAI (chat_rules.py) both apply to every object in a schema, not only
the outermost: a translation that closes the top object and leaves a nested one open is what
they catch. OpenAI's answer names where the object is (``context=('properties', 'a')``), so
each one comes with the keys that lead to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Path = tuple[str | int, ...]

_NAMED = ("properties", "$defs", "definitions")
_LISTED = ("anyOf", "allOf", "oneOf")


def objects(schema: Any, path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every object-typed (sub)schema, outermost first, with its path from the top."""
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        yield path, schema
    for key in _NAMED:
        named = schema.get(key)
        if isinstance(named, dict):
            for name, sub in named.items():
                yield from objects(sub, (*path, key, name))
    items = schema.get("items")
    if isinstance(items, list):  # the tuple form of older drafts
        for i, sub in enumerate(items):
            yield from objects(sub, (*path, "items", i))
    else:
        yield from objects(items, (*path, "items"))
    for key in _LISTED:
        listed = schema.get(key)
        if isinstance(listed, list):
            for i, sub in enumerate(listed):
                yield from objects(sub, (*path, key, i))
