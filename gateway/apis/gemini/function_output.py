"""Where a Gemini ``functionResponse`` holds the function's output, as text to size, project or
cut, and how a new text goes back in its place.

``response`` is a free-form object; the clients fill it three ways:

* Gemini CLI sends ``{"output": text}`` (tests/corpus/requests/gemini-cli-0.61-tool-result.json);
* google-genai's automatic function calling sends ``{"result": value}``, ``value`` being what the
  Python function returned (a string, or an object or list), and ``{"error": text}`` when it
  raised; its MCP adapter sends the tool's answer as ``result`` too
  (google/genai/_extra_utils.py, ``get_function_response_parts`` and its async twin, 3.6.1);
* the Gemini API's reference documents ``output`` and ``error``.

A ``result`` that is not a string is read as its JSON text: it can be as large as any output,
and left out of every cut it made an overflow that nothing could rescue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_SLOTS = ("output", "result", "error")  # the first that holds an output is the output


@dataclass(frozen=True, slots=True)
class Output:
    key: str  # "functionResponse", or the snake_case twin the client spelled
    slot: str  # the response's field that holds it
    text: str  # its text: the string, or a non-string ``result`` as compact JSON
    as_json: bool  # the text stands for a JSON value, not a string


def output_of(part: dict[str, Any]) -> Output | None:
    """The function output ``part`` carries, or None (not a functionResponse, or no output)."""
    key = "functionResponse" if "functionResponse" in part else "function_response"
    fr = part.get(key)
    response = fr.get("response") if isinstance(fr, dict) else None
    if not isinstance(response, dict):
        return None
    for slot in _SLOTS:
        value = response.get(slot)
        if isinstance(value, str):
            return Output(key, slot, value, False)
        if slot == "result" and value is not None:
            return Output(key, slot, json.dumps(value, ensure_ascii=False, separators=(",", ":")), True)
    return None


def with_output(part: dict[str, Any], out: Output, new: str, *, slot: str | None = None) -> dict[str, Any]:
    """``part`` with ``new`` in place of its output (under ``slot`` instead, when given); the
    rest of the part (``name``, ``id``, the response's other fields) as it was.

    Text that stands for a JSON value goes back as the value it reads as (a projection). When
    it no longer reads as one (cut to head and tail), it goes as text under ``output``, the
    key the Gemini API documents for a function's output: as a string under ``result`` it
    would reach a chat or Messages upstream inside the JSON of the response, every quote
    escaped, larger than the rescue sized it, where an ``output`` alone reaches it as the
    text itself (``translate/gemini_chat/request.py``)."""
    fr = part[out.key]
    response = fr["response"]
    if out.as_json and slot is None:
        try:
            value = json.loads(new)
        except ValueError:
            slot = "output" if "output" not in response else None
        else:
            return {**part, out.key: {**fr, "response": {**response, out.slot: value}}}
    if slot is not None and slot != out.slot:
        moved = {k: v for k, v in response.items() if k != out.slot}
        moved[slot] = new
        return {**part, out.key: {**fr, "response": moved}}
    return {**part, out.key: {**fr, "response": {**response, out.slot: new}}}
