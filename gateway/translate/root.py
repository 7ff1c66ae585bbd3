"""A structured-output schema whose root is not an object, carried in one for an OpenAI chat
upstream, and the answer's value taken back out of it. Pure; shared by the Gemini and Messages
clients' translations to chat.

OpenAI takes only an object: "Invalid schema for response_format 'AdSegmentPredictionList': schema
must be a JSON Schema of 'type: "object"', got 'type: "array"'." (param ``response_format``,
podly-pure-podcasts/podly_pure_podcasts#89), and its structured-outputs guide, "Root objects must
not be anyOf and must be an object": "the root level object of a schema must be an object, and
not use anyOf" (https://platform.openai.com/docs/guides/structured-outputs). The clients' own APIs
take other roots: Gemini any (Google's own example asks for a list, ``response_schema=list[Recipe]``,
the structured-outputs guide, and ``text/x.enum`` answers one value of a string ``enum``);
Anthropic's structured-outputs guide ("JSON Schema limitations", "Supported features": "All basic
types: object, array, string, integer, number, boolean, null",
https://platform.claude.com/docs/en/build-with-claude/structured-outputs) states no rule for the
root. So such a schema goes as the one property of a closed object (in ``$defs`` when it refers
to its own root), and the answer's text comes back as that property's value: its JSON text as
the model wrote it, the bare value for Gemini's ``text/x.enum`` (what Gemini answers there), an
answer cut short as far as it goes. A text that is not the wrapper (a model that ignored the
schema, a server that does not constrain) comes back as it came.
"""

from __future__ import annotations

import json
import re
from typing import Any

KEY = "response"  # the wrapper's one property: the json_schema's name too
_DEFS = ("$defs", "definitions")  # kept at the root, where a "#/$defs/…" reference points
_NOT_PLAIN = ("anyOf", "oneOf", "enum", "const")


def needs_wrapping(schema: Any) -> bool:
    """Whether OpenAI would refuse ``schema`` as a structured output's root."""
    if not isinstance(schema, dict):
        return False
    return schema.get("type") != "object" or any(k in schema for k in _NOT_PLAIN)


def wrapped(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the one required property of a closed object.

    A reference to the root (``"$ref": "#"``, a recursive list or tree; or a pointer under it)
    would mean the wrapper once wrapped: such a schema goes into ``$defs``, where OpenAI takes
    references ("Definitions are supported", and recursion, in its structured-outputs guide),
    the property refers to it, and its root references are rewritten to point there."""
    inner = {k: v for k, v in schema.items() if k not in _DEFS}
    out: dict[str, Any] = {"type": "object", "properties": {KEY: inner}, "required": [KEY],
                           "additionalProperties": False}  # fmt: skip
    out.update((k, schema[k]) for k in _DEFS if k in schema)
    if not _refers_to_root(schema):
        return out
    given = schema.get("$defs", {})
    if not isinstance(given, dict):
        return out  # a "$defs" that is no object: OpenAI refuses it as it is, wrapped or not
    defs = dict(given)
    name = next(n for n in (KEY, *(f"{KEY}_{i}" for i in range(1, len(defs) + 2))) if n not in defs)
    target = f"#/$defs/{name}"
    defs[name] = _rooted(inner, target)
    out["$defs"] = {k: _rooted(v, target) for k, v in defs.items()}
    out["properties"] = {KEY: {"$ref": target}}
    if "definitions" in schema:
        out["definitions"] = _rooted(schema["definitions"], target)
    return out


def _root_ref(ref: Any) -> bool:
    """A reference into the schema's root rather than into its definitions."""
    if not isinstance(ref, str):
        return False
    return ref == "#" or (ref.startswith("#/") and not ref.startswith(tuple(f"#/{d}/" for d in _DEFS)))


def _refers_to_root(node: Any) -> bool:
    if isinstance(node, dict):
        return _root_ref(node.get("$ref")) or any(_refers_to_root(v) for v in node.values())
    return isinstance(node, list) and any(_refers_to_root(v) for v in node)


def _rooted(node: Any, target: str) -> Any:
    """``node`` with its root references made relative to ``target``."""
    if isinstance(node, dict):
        out = {k: _rooted(v, target) for k, v in node.items()}
        ref = node.get("$ref")
        if isinstance(ref, str) and _root_ref(ref):
            out["$ref"] = target + ref[1:]
        return out
    if isinstance(node, list):
        return [_rooted(v, target) for v in node]
    return node


# The wrapper's opening as a model writes it (whitespace where JSON allows it), before the value.
_OPENING = re.compile(r'\s*\{\s*"' + KEY + r'"\s*:\s*')
# Not strict: a raw tab or newline inside a string, which strict JSON refuses, is the model's
# text and no sign of an answer cut short; the slice keeps it as written.
_DECODER = json.JSONDecoder(strict=False)


def unwrapped(text: str, how: str) -> str:
    """The answer's text with the wrapper taken off; ``text`` itself when it is not one.

    The value is the model's own text, sliced out, never encoded again: ``json.dumps`` of the
    parsed value wrote numbers its own way (``1e400`` came back as ``Infinity``, which is no
    JSON). A wrapper that does not parse is the value as far as it goes, as Gemini would have
    answered it unwrapped: an answer cut short, sent ``{"response": [{"recipe_name": "a", "ingr…``
    (review), and not only for its length: a stop sequence (chat says ``stop`` for it) or a
    content filter cuts it too, and an unreadable value inside a closed wrapper (a trailing
    comma) is the model's text all the same (``_as_far_as_it_goes``)."""
    opening = _OPENING.match(text)
    if opening is None:
        return text
    try:
        value, end = _DECODER.raw_decode(text, opening.end())
    except RecursionError:
        return text
    except ValueError:
        rest = _as_far_as_it_goes(text[opening.end():])
        if how == "enum" and rest.startswith('"'):
            rest = rest[1:-1] if len(rest) > 1 and rest.endswith('"') else rest[1:]
        return rest
    if text[end:].strip() not in ("}", ""):  # "": cut short after the value, before the wrapper's end
        return text  # another property: not the wrapper
    return value if how == "enum" and isinstance(value, str) else text[opening.end():end]


def _as_far_as_it_goes(rest: str) -> str:
    """The value's text after the wrapper's opening, less the wrapper's closing brace where the
    value's own brackets closed before it (``[1, 2,]}``); a value cut short keeps its last brace,
    one of its own (``[{"a": 1}``). Brackets inside strings are not counted."""
    body = rest.rstrip()
    depth, quoted, escaped = 0, False, False
    for char in body[:-1]:
        if quoted:
            escaped, quoted = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            quoted = True
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
    return body[:-1].rstrip() if body.endswith("}") and depth == 0 and not quoted else rest
