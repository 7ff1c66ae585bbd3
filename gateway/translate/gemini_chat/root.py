"""A Gemini structured-output schema whose root is not an object, carried in one, and the
answer's value taken back out of it. Pure.

Gemini takes any root: Google's own example asks for a list (``response_schema=list[Recipe]``,
the structured-output guide), and ``text/x.enum`` answers one value of a string ``enum``. OpenAI
takes only an object: "Invalid schema for response_format 'AdSegmentPredictionList': schema
must be a JSON Schema of 'type: "object"', got 'type: "array"'." (param ``response_format``,
podly-pure-podcasts/podly_pure_podcasts#89), and its structured-outputs guide: "the root level
object of a schema must be an object, and not use anyOf". So such a schema goes as the one
property of a closed object, and the answer's text comes back as that property's value: JSON
for ``application/json``, the bare value for ``text/x.enum`` (what Gemini answers there). A text
that is not the wrapper (a model that ignored the schema, a server that does not constrain)
comes back as it came.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.gemini.fields import field

KEY = "response"  # the wrapper's one property: the json_schema's name too
ENUM_MIME = "text/x.enum"
_DEFS = ("$defs", "definitions")  # kept at the root, where a "#/$defs/…" reference points
_NOT_PLAIN = ("anyOf", "oneOf", "enum", "const")


def needs_wrapping(schema: Any) -> bool:
    """Whether OpenAI would refuse ``schema`` as a structured output's root."""
    if not isinstance(schema, dict):
        return False
    return schema.get("type") != "object" or any(k in schema for k in _NOT_PLAIN)


def wrapped(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` as the one required property of a closed object."""
    inner = {k: v for k, v in schema.items() if k not in _DEFS}
    out: dict[str, Any] = {"type": "object", "properties": {KEY: inner}, "required": [KEY],
                           "additionalProperties": False}  # fmt: skip
    out.update((k, schema[k]) for k in _DEFS if k in schema)
    return out


def wrapping(request: Mapping[str, Any], schema: Any) -> str | None:
    """How the answer to ``request``, whose structured output was sent as ``schema`` (the JSON
    Schema before wrapping), is taken out: "enum" (the bare string), "json", or None (not
    wrapped)."""
    if not needs_wrapping(schema):
        return None
    config = field(request, "generationConfig")
    mime = field(config, "responseMimeType") if isinstance(config, dict) else None
    return "enum" if mime == ENUM_MIME else "json"


def unwrapped(text: str, how: str) -> str:
    """The answer's text with the wrapper taken off; ``text`` itself when it is not one."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not (isinstance(doc, dict) and len(doc) == 1 and KEY in doc):
        return text
    value = doc[KEY]
    if how == "enum" and isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
