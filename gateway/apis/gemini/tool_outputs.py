"""Tool outputs in a Gemini request: the per-tool policy (``policy/tool_outputs.py``) and the
opt-in cap, done on the request itself (no round trip through chat, which would lose what
chat has no field for).

An output is a ``functionResponse`` part, named by its own ``name`` (the Gemini API puts the
function's name on the response, so no call has to be looked up). Its text is
``response.output`` (Gemini CLI's), ``response.result`` (google-genai's automatic function
calling and MCP tools'; an object or list is read as its JSON text, and a projection of it goes
back as JSON) or a string ``response.error`` (``function_output.py``); a response of another
shape is left as it is. Only that output changes: the part keeps its ``name`` and ``id``, so
every call keeps its answer and the pairs stay valid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gateway.apis.gemini.fields import field
from gateway.apis.gemini.function_output import output_of, with_output
from gateway.policy.cut import cap_content
from gateway.policy.tool_outputs import Stage, Tally, ToolOutputPolicy, handle

# name, text → the new text (the same object when unchanged), and whether it was excluded
Rewrite = Callable[[str | None, str], tuple[Any, bool]]


def apply_tool_policy(
    payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage
) -> tuple[dict[str, Any] | None, Tally]:
    tally = Tally()

    def rewrite(name: str | None, text: str) -> tuple[Any, bool]:
        done = handle(text, (name,) if name else (), policy, stage, tally)
        return done.content, done.excluded

    return _rewritten(payload, rewrite), tally


def cap_outputs(payload: Mapping[str, Any], max_tokens: int) -> tuple[dict[str, Any] | None, int]:
    count = 0

    def rewrite(name: str | None, text: str) -> tuple[Any, bool]:
        nonlocal count
        cut, removed = cap_content(text, max_tokens)
        count += 1 if removed else 0
        return cut, False

    return _rewritten(payload, rewrite), count


def _rewritten(payload: Mapping[str, Any], rewrite: Rewrite) -> dict[str, Any] | None:
    contents = payload.get("contents")
    if not isinstance(contents, list):
        return None
    out: list[Any] | None = None
    for i, content in enumerate(contents):
        parts = content.get("parts") if isinstance(content, dict) else None
        if not isinstance(parts, list):
            continue
        new_parts: list[Any] | None = None
        for j, part in enumerate(parts):
            changed = _part(part, rewrite) if isinstance(part, dict) else None
            if changed is not None:
                new_parts = new_parts if new_parts is not None else list(parts)
                new_parts[j] = changed
        if new_parts is not None:
            out = out if out is not None else list(contents)
            out[i] = {**content, "parts": new_parts}
    return {**payload, "contents": out} if out is not None else None


def _part(part: dict[str, Any], rewrite: Rewrite) -> dict[str, Any] | None:
    out = output_of(part)
    if out is None:
        return None
    name = field(part[out.key], "name")
    new, excluded = rewrite(name if isinstance(name, str) else None, out.text)
    if new is out.text:
        return None
    # An excluded output is the structured note the policy wrote: an error to the model.
    return with_output(part, out, new, slot="error" if excluded else None)
