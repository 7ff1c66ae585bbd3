"""What OpenAI's Responses API refuses in an input's shape, refused by the fake in its words: a
tool call and its output must come in pairs, the call first (400 ``invalid_request_error``,
param ``input``):

- "No tool call found for function call output with call_id <id>.": an output whose call is not
  before it (quoted with OpenAI's error object by clients that replay histories, and by a Codex
  user whose trimmed history lost the call);
- "No tool output found for function call <id>.": a call with no output after it (a table of
  measured answers, case G5).

A compression or a cut of the input that separates a pair is exactly what these catch. Neither
is judged when the input continues a stored response (``previous_response_id``, ``conversation``):
the call can then be in the stored part.
"""

from __future__ import annotations

from typing import Any

from gateway.fake.responses import responses_error
from gateway.fake.steps import Reply

_CALLS = frozenset({"function_call", "custom_tool_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


def refusal(path: str, payload: dict[str, Any]) -> Reply | None:
    """OpenAI's 400 for this Responses request, or None when OpenAI takes it."""
    if not path.endswith("/responses") or payload.get("previous_response_id") or payload.get("conversation"):
        return None
    items = payload.get("input")
    if not isinstance(items, list):
        return None
    called: list[str] = []
    answered: set[str] = set()
    for item in items:
        if not isinstance(item, dict):
            continue
        kind, call_id = item.get("type"), item.get("call_id")
        if kind in _CALLS:
            called.append(str(call_id))
        elif kind in _OUTPUTS:
            if str(call_id) not in called:
                return _refused(f"No tool call found for function call output with call_id {call_id}.")
            answered.add(str(call_id))
    for call_id in called:
        if call_id not in answered:
            return _refused(f"No tool output found for function call {call_id}.")
    return None


def _refused(message: str) -> Reply:
    return responses_error(400, message, "invalid_request_error", None, "input")
