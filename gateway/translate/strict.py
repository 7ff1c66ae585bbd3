"""Whether OpenAI's strict mode takes a Messages schema (a structured output, a strict tool),
and the schema as it is sent so: Anthropic takes what strict mode refuses, and a schema strict
mode would refuse is sent without ``strict``, a best effort, rather than refused.

Pure: a schema in, a schema (or None) out."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from gateway.translate import json_schema

# What OpenAI's strict mode refuses that Anthropic takes (the anthropic SDK's transform_schema
# passes ``allOf`` on): the Structured Outputs guide's "Supported schemas" lists "Composition:
# allOf, not, dependentRequired, dependentSchemas, if, then, else" as not supported, and "the
# root level object of a schema must be an object, and not use anyOf"
# (https://platform.openai.com/docs/guides/structured-outputs).
_NOT_STRICT = frozenset({"allOf", "not", "dependentRequired", "dependentSchemas", "if", "then", "else"})
# Keywords that only annotate. Strict mode refuses a ``$ref`` with any sibling ("Invalid schema
# for response_format 'response': context=('properties', 'labels'), $ref cannot have keywords
# {'description'}", vectorize-io/hindsight#3944), which is pydantic v2's ordinary output for a
# nested model field with a description; these are left out beside a ``$ref`` (what the field
# may hold is unchanged), any other sibling keeps the schema from strict mode.
_ANNOTATIONS = frozenset({"description", "title", "default", "examples"})
# A reference into the root's definitions, as pydantic writes them (v2 ``$defs``, v1 ``definitions``).
_DEF_REF = re.compile(r"^#/(\$defs|definitions)/([^/]+)$")


def for_strict(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` as strict mode takes it (a one-member ``allOf`` inlined, annotations beside a
    ``$ref`` and definitions nothing refers to left out), or None where strict mode refuses it
    even so (``strict_ok``)."""
    sent = _prepared(_used_definitions(schema))
    return sent if strict_ok(sent) else None


def strict_ok(schema: Any, *, root: bool = True) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: an object at the root without ``anyOf``,
    each object closed with every property required (OpenAI: "'required' is required to be
    supplied and to be an array including every key in properties"), no ``$ref`` with a sibling,
    none of the composition keywords it does not support (``_NOT_STRICT``)."""
    if root and isinstance(schema, dict) and ("anyOf" in schema or not json_schema.is_object(schema)):
        return False
    if isinstance(schema, list):
        return all(strict_ok(s, root=False) for s in schema)
    if not isinstance(schema, dict):
        return True
    if not _NOT_STRICT.isdisjoint(schema) or ("$ref" in schema and len(schema) > 1):
        return False
    if json_schema.is_object(schema):
        props = schema.get("properties")
        names = set(props) if isinstance(props, dict) else set()
        required = schema.get("required")
        if schema.get("additionalProperties") is not False:
            return False
        if names and not (isinstance(required, list) and names <= set(required)):
            return False
    return all(strict_ok(s, root=False) for s in json_schema.nested(schema))


def _prepared(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_prepared(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = json_schema.with_nested(schema, _prepared)
    one = out.get("allOf")
    if isinstance(one, list) and len(one) == 1 and isinstance(one[0], dict):
        # A one-member intersection is its member (pydantic v1 writes a described nested model
        # field as ``{"allOf": [{"$ref": ...}], "description": ...}``): inlined where the two
        # share no keyword but annotations, the outer one's kept.
        rest = {k: v for k, v in out.items() if k != "allOf"}
        if (rest.keys() & one[0].keys()) <= _ANNOTATIONS:
            out = {**one[0], **rest}
    if "$ref" in out:
        out = {k: v for k, v in out.items() if k not in _ANNOTATIONS}
    return out


def _used_definitions(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without the root's definitions that nothing refers to (a model's leftovers
    count for strict mode though they describe nothing the answer holds); as it is where a
    reference points anywhere else, or names a definition not found: pruned then, what it
    names might be one left out."""
    tables = {key: schema[key] for key in ("$defs", "definitions") if isinstance(schema.get(key), dict)}
    if not tables:
        return schema
    outside = {k: v for k, v in schema.items() if k not in tables}
    used: set[tuple[str, str]] = set()
    todo = list(_refs(outside))
    while todo:
        ref = todo.pop()
        m = _DEF_REF.match(ref)
        if m is None:
            return schema  # a reference of another kind: what it reaches is not worked out
        # A URI fragment: percent-decoded first (``A%20B``), then a JSON pointer's escapes.
        key, name = m.group(1), unquote(m.group(2)).replace("~1", "/").replace("~0", "~")
        if name not in tables.get(key, {}):
            return schema
        if (key, name) in used:
            continue
        used.add((key, name))
        todo += _refs(tables[key][name])
    out = dict(outside)
    for key, table in tables.items():
        kept = {name: s for name, s in table.items() if (key, name) in used}
        if kept:
            out[key] = kept
    return out


def _refs(schema: Any) -> list[str]:
    """Every ``$ref`` ``schema`` holds, under any keyword: not only those ``json_schema.nested``
    walks, as one under ``propertyNames`` or ``additionalProperties`` missed would leave its
    definition pruned yet referred to. One that is data (in a ``default``) only keeps more."""
    if isinstance(schema, list):
        return [r for s in schema for r in _refs(s)]
    if not isinstance(schema, dict):
        return []
    own = [schema["$ref"]] if isinstance(schema.get("$ref"), str) else []
    return own + [r for s in schema.values() for r in _refs(s)]
