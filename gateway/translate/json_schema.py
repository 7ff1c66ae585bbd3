"""Where a JSON Schema nests schemas, for the translations that hold every object of a
structured-output schema to a provider's rule (Anthropic: each closed; OpenAI's strict mode:
each closed with every property required), and a rule OpenAI holds a function's
parameters to whatever the mode (``with_properties``). The fake upstream walks schemas on its
own (``gateway/fake/schemas.py``): a check sharing this walk would share its blind spots."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_MAPS = ("properties", "patternProperties", "$defs", "definitions")  # name -> schema
_ONES = ("anyOf", "oneOf", "allOf", "prefixItems",  # lists of schemas
         "items", "additionalItems", "not", "if", "then", "else", "contains")  # fmt: skip
KEYWORDS = frozenset((*_MAPS, *_ONES))  # every key under which a schema holds schemas


def nested(schema: dict[str, Any]) -> list[Any]:
    """The schemas ``schema`` holds directly (a list of them counts as one: callers recurse)."""
    out = [v for key in _MAPS if isinstance(schema.get(key), dict) for v in schema[key].values()]
    return out + [schema[key] for key in _ONES if key in schema]


def with_nested(schema: dict[str, Any], each: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of ``schema`` with ``each`` applied to every schema it holds directly."""
    out = dict(schema)
    for key in _MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: each(s) for name, s in out[key].items()}
    for key in _ONES:
        if key in out:
            out[key] = each(out[key])
    return out


def is_object(schema: dict[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in schema


def with_properties(parameters: Any) -> Any:
    """A function's ``parameters`` as OpenAI takes them, chat and Responses alike: an object
    schema that names no ``properties`` gets an empty one, else OpenAI refuses the whole request
    ("Invalid schema for function '<name>': In context=(), object schema missing properties.",
    https://github.com/evalstate/fast-agent/issues/143; the Responses API,
    https://github.com/everruns/everruns/pull/984). MCP's Go SDK writes a tool without
    arguments as ``{"type": "object"}`` (xpzouying/xiaohongshu-mcp#677), which Anthropic and
    Gemini take. The same schema otherwise, for any upstream: only the top level, the one a
    refusal names (``In context=()``)."""
    if not isinstance(parameters, dict) or "properties" in parameters:
        return parameters
    kind = parameters.get("type")
    if kind == "object" or (isinstance(kind, list) and "object" in kind):
        return {**parameters, "properties": {}}
    return parameters
