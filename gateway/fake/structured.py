"""Structured output as the fake upstream answers it: the text of an answer to a request that
asks for JSON, in each API's field for it, is the smallest document its schema allows. Pure.

The real APIs answer such a request with JSON in the schema (their constrained decoding), and
clients rely on it: Gemini CLI's model router asks each "auto" turn for a JSON-schema'd
choice and retries prose five times (about 100 s a prompt through a translating gateway, when
the chat, Messages and Responses fakes answered "Hello from the fake upstream." to it). The
fields read (what each API documents, and what the gateway's translations write):

* chat completions: ``response_format: {type: "json_schema", json_schema: {schema}}``, or
  ``{type: "json_object"}`` (https://platform.openai.com/docs/guides/structured-outputs);
* Messages: ``output_config.format: {type: "json_schema", schema}``, and the beta's
  ``output_format`` of the same shape
  (https://docs.claude.com/en/docs/build-with-claude/structured-outputs);
* Responses: ``text.format: {type: "json_schema", name, schema}`` or ``{type: "json_object"}``;
* Gemini: ``generationConfig.responseMimeType: application/json`` with ``responseJsonSchema`` or
  Google's ``responseSchema`` (gemini.py).

"Smallest" leans to the low, uneventful end, so that a fake answer decides nothing a client
would act on: the first of an ``enum`` (Gemini CLI's router: ``flash``), ``false``, an empty
list, no optional property, and a number's ``minimum`` or else 0, which Gemini CLI's loop check
(``unproductive_state_confidence``, "a number between 0.0 and 1.0") reads as "no loop" where 1
made every 30-turn session "detect" one. An integer with no ``minimum`` is 1: the same CLI's
numerical router asks for an integer "Complexity score from 1-100." in words only and refuses
a 0 (its zod ``min(1)``), and 1 is its lowest score.
"""

from __future__ import annotations

import json
import math
from typing import Any

_MAX_DEPTH = 32  # a recursive $ref yields a shallow value, not a RecursionError


def instance(schema: Any, root: Any = None, depth: int = 0) -> Any:
    """A value ``schema`` accepts (JSON Schema's lower-case types and the Gemini Schema's
    upper-case ones alike); ``root`` is the document ``$ref``s point into."""
    if not isinstance(schema, dict) or depth > _MAX_DEPTH:
        return {}
    root = schema if root is None else root
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        return instance(_resolve(root, ref), root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if isinstance(options, list) and options and "type" not in schema and "properties" not in schema:
            return instance(options[0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first that is not null
        kind = next((k for k in kind if str(k).lower() != "null"), "null")
    kind = str(kind or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props: dict[str, Any] = schema["properties"] if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required")
        names = required if isinstance(required, list) else list(props)
        return {p: instance(props.get(p) or {}, root, depth + 1) for p in names if isinstance(p, str)}
    if kind == "array":
        least = _count(schema.get("minItems"))
        items = schema.get("items")
        return [instance(items if isinstance(items, dict) else {}, root, depth + 1) for _ in range(least)]
    if kind in ("integer", "number"):
        return _number(schema, kind == "integer")
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    text = "fake"
    least, most = _count(schema.get("minLength")), schema.get("maxLength")
    text = text * (least // len(text) + 1) if least > len(text) else text
    return text[:_count(most)] if most is not None else text


def _number(schema: dict[str, Any], integer: bool) -> int | float:
    low, exclusive = schema.get("minimum"), schema.get("exclusiveMinimum")
    if isinstance(exclusive, (int, float)) and not isinstance(exclusive, bool):
        low, exclusive = exclusive, True  # draft 6 on: the bound itself
    if not isinstance(low, (int, float)) or isinstance(low, bool):
        return 1 if integer else 0
    if exclusive is True:
        high = schema.get("maximum")
        if integer:
            return math.floor(low) + 1
        return (low + high) / 2 if isinstance(high, (int, float)) and not isinstance(high, bool) else low + 1
    return math.ceil(low) if integer else low


def _count(value: Any) -> int:
    """A count (``minItems``, ``maxLength``): Google's Schema writes its int64s as strings."""
    try:
        return max(int(value), 0)
    except (TypeError, ValueError):
        return 0


def _resolve(root: Any, ref: str) -> Any:
    node = root
    for step in ref.lstrip("#").split("/"):
        if not step:
            continue
        step = step.replace("~1", "/").replace("~0", "~")
        node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _document(fmt: Any, schema_at: tuple[str, ...]) -> str | None:
    """The answer's text for a format object: ``{}`` for plain JSON mode, an instance of the
    schema found at ``schema_at`` for a json_schema one, None for text."""
    if not isinstance(fmt, dict):
        return None
    kind = fmt.get("type")
    if kind == "json_object":
        return "{}"
    if kind != "json_schema":
        return None
    schema: Any = fmt
    for key in schema_at:
        schema = schema.get(key) if isinstance(schema, dict) else None
    return json.dumps(instance(schema if isinstance(schema, dict) else {}))


def chat_json(payload: dict[str, Any]) -> str | None:
    """The answer's text to a chat completions request with a JSON ``response_format``."""
    return _document(payload.get("response_format"), ("json_schema", "schema"))


def messages_json(payload: dict[str, Any]) -> str | None:
    """The answer's text to a Messages request with ``output_config.format`` (or the beta's
    ``output_format``)."""
    config = payload.get("output_config")
    fmt = config.get("format") if isinstance(config, dict) else None
    return _document(fmt if fmt is not None else payload.get("output_format"), ("schema",))


def responses_json(payload: dict[str, Any]) -> str | None:
    """The answer's text to a Responses request with a JSON ``text.format``."""
    text = payload.get("text")
    return _document(text.get("format") if isinstance(text, dict) else None, ("schema",))
