"""What OpenAI's chat completions API refuses in a conversation's shape, refused by the fake in
its words: the mirror of messages_rules.py for requests translated to chat (Claude Code and
Codex on a chat-only server). Each rule, as OpenAI words it (400 ``invalid_request_error``):

- "[] is too short - 'messages'": no messages at all (quoted in llama.cpp's and Ollama's
  compatibility notes and tests, which copy OpenAI's wording);
- "An assistant message with 'tool_calls' must be followed by tool messages responding to each
  'tool_call_id'. The following tool_call_ids did not have response messages: <ids>" (param
  ``messages``): quoted in many agents' reports with OpenAI's full error object;
- "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with
  'tool_calls'." (param ``messages.[N].role``; the misspelling is OpenAI's): a tool result whose
  call is not in the assistant turn right before it.
"""

from __future__ import annotations

from typing import Any

from gateway.fake.responses import responses_error
from gateway.fake.steps import Reply


def refusal(path: str, payload: dict[str, Any]) -> Reply | None:
    """OpenAI's 400 for this chat request, or None when OpenAI takes it."""
    if not path.endswith("/chat/completions"):
        return None
    found = _why(payload.get("messages"))
    if found is None:
        return None
    message, param = found
    return responses_error(400, message, "invalid_request_error", None, param)


def _why(messages: Any) -> tuple[str, str | None] | None:
    if messages == []:
        return "[] is too short - 'messages'", None
    if not isinstance(messages, list):
        return None
    window: set[str] = set()  # the calls of the assistant turn the tool messages now answer
    waiting: list[str] = []  # of those, the ones no tool message answered yet
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "tool":
            call = message.get("tool_call_id")
            if call not in window:
                return ("Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                        "with 'tool_calls'.", f"messages.[{i}].role")  # fmt: skip
            if call in waiting:
                waiting.remove(call)
            continue
        if waiting:
            return _unanswered(waiting)
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        ids = [str(c.get("id")) for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        window, waiting = set(ids), list(ids)
    return _unanswered(waiting) if waiting else None


def _unanswered(ids: list[str]) -> tuple[str, str]:
    return ("An assistant message with 'tool_calls' must be followed by tool messages responding to each "
            f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(ids)}",
            "messages")  # fmt: skip
