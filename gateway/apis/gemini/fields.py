"""Field names in both spellings.

Google's JSON mapping of protobuf accepts a field under its lowerCamelCase JSON name and under
its proto (snake_case) name alike (protobuf's JSON spec: "parsers accept both"), and clients
send both: google-genai 3.6 writes ``inlineData`` with ``mime_type`` inside it, and
``thinkingConfig`` with ``include_thoughts`` / ``thinking_budget`` (its own captured requests,
tests/corpus/requests/genai-3.6-*.json). So every field is read under either name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

_UPPER = re.compile(r"([A-Z])")


@cache
def snake(name: str) -> str:
    return _UPPER.sub(lambda m: "_" + m.group(1).lower(), name)


def field(obj: Mapping[str, Any], name: str) -> Any:
    """``obj[name]`` under its camelCase ``name`` or its snake_case twin; None when neither."""
    value = obj.get(name)
    if value is None:
        value = obj.get(snake(name))
    return value


def has(obj: Mapping[str, Any], name: str) -> bool:
    return name in obj or snake(name) in obj
