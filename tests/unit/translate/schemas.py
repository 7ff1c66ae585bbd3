"""Function parameters as given and as a translation to an OpenAI API sends them: an object
schema that names no ``properties`` gets an empty one (OpenAI: "object schema missing
properties", ``gateway/translate/json_schema.with_properties``); any other schema goes as it
came. Shared by the translations' tests, one row each."""

from __future__ import annotations

from typing import Any

NO_PROPERTIES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    # MCP's Go SDK's tool without arguments (xpzouying/xiaohongshu-mcp#677).
    ({"type": "object"}, {"type": "object", "properties": {}}),
    ({"type": "object", "additionalProperties": False}, {"type": "object", "additionalProperties": False,
                                                         "properties": {}}),
    ({"type": "object", "description": "d", "required": []}, {"type": "object", "description": "d", "required": [],
                                                              "properties": {}}),
    ({"type": "object", "properties": {}}, {"type": "object", "properties": {}}),
    # Only the top level: an object inside properties is not known refused.
    ({"type": "object", "properties": {"filter": {"type": "object"}}},
     {"type": "object", "properties": {"filter": {"type": "object"}}}),
]  # fmt: skip
