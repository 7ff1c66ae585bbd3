"""The (sub)schemas of a JSON Schema, for the rules that Anthropic (messages_rules.py) and
OpenAI (chat_rules.py) both apply to every schema a schema holds, not only the outermost: a
translation that closes the top object and leaves a nested one open, or lower-cases the top
``type`` and not a nested one, is what they catch. OpenAI's answer names where the object is
(``context=('properties', 'a')``), so each one comes with the keys that lead to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

Path = tuple[str | int, ...]

_NAMED = ("properties", "$defs", "definitions")
_LISTED = ("anyOf", "allOf", "oneOf")
# JSON Schema's type names (draft 2020-12, "simpleTypes"): the only values ``type`` may hold.
TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
COUNTS = ("minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties")


def objects(schema: Any, path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every object-typed (sub)schema, outermost first, with its path from the top."""
    for where, sub in schemas(schema, path):
        kind = sub.get("type")
        if kind == "object" or (isinstance(kind, list) and "object" in kind):
            yield where, sub


def mistyped(schema: Any) -> dict[str, Any] | None:
    """The outermost (sub)schema whose ``type`` is no JSON Schema type (``"OBJECT"``), or None."""
    for _, sub in schemas(schema):
        kind = sub.get("type")
        kinds = kind if isinstance(kind, list) else [] if kind is None else [kind]
        if any(k not in TYPES for k in kinds):
            return sub
    return None


def miscounted(schema: Any) -> dict[str, Any] | None:
    """The outermost (sub)schema with a count (``minItems``, ``maxLength``…) that is no
    non-negative integer (``"1"``: draft 2020-12 requires one), or None."""
    for _, sub in schemas(schema):
        for key in COUNTS:
            value = sub.get(key)
            if key in sub and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                return sub
    return None


def schemas(schema: Any, path: Path = ()) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every (sub)schema, outermost first, with its path from the top."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in _NAMED:
        named = schema.get(key)
        if isinstance(named, dict):
            for name, sub in named.items():
                yield from schemas(sub, (*path, key, name))
    items = schema.get("items")
    if isinstance(items, list):  # the tuple form of older drafts
        for i, sub in enumerate(items):
            yield from schemas(sub, (*path, "items", i))
    else:
        yield from schemas(items, (*path, "items"))
    for key in _LISTED:
        listed = schema.get(key)
        if isinstance(listed, list):
            for i, sub in enumerate(listed):
                yield from schemas(sub, (*path, key, i))
