"""What Anthropic's Messages API refuses in a request's shape, refused by the fake in its words.

A fake that answers what the real API refuses hides exactly the translation bugs users meet
first: a chat or Responses conversation turned into Messages with a tool call left without its
result, a result without its call, an empty text block or a missing ``max_tokens`` is a 400 from
Anthropic. Each rule here is one Anthropic applies, worded as it words it (400
``invalid_request_error``), from answers quoted in the wild:

- "max_tokens: Field required": an API call shown with its request id in a write-up of
  Anthropic's errors (``req_011CZxXcfahryZyt6K7bmHjK``), and the same words in several
  clients' tests;
- "messages.N: `tool_use` ids were found without `tool_result` blocks immediately after: <ids>":
  quoted in many agents' bug reports (a LiteLLM AnthropicException, a crash report listing three
  ``toolu_`` ids, a table of measured answers: case G1);
- "messages.N.content.M: unexpected `tool_use_id` found in `tool_result` blocks: <id>. Each
  `tool_result` block must have a corresponding `tool_use` block in the previous message.":
  Claude Code's own "API Error: 400" with its request id (``req_011CSYUdcAcsufaZUQ4uDqv8``);
- "messages: text content blocks must be non-empty": quoted by agents that strip empty blocks
  before sending;
- "messages.N.role: Input should be 'user' or 'assistant'": a ``system`` turn inside
  ``messages`` (Anthropic takes the system prompt apart), as Messages-compatible servers word it;
  unless the request names the beta ``mid-conversation-system-…`` in ``anthropic-beta``, as
  Claude Code 2.1.197 does and then sends such turns (../shared/AGENT-REQUESTS.md). Those turns
  stand between the others: a tool call's result is looked for in the next turn past them;
- "messages: at least one message is required": the empty conversation.

What the same measurements found Anthropic accepts is accepted here too: two assistant turns
in a row, and one ``tool_use`` id used twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.fake.messages import anthropic_error
from gateway.fake.steps import Reply

MID_CONVERSATION_SYSTEM = "mid-conversation-system"


def refusal(path: str, payload: dict[str, Any], headers: Mapping[str, str]) -> Reply | None:
    """Anthropic's 400 for this Messages request, or None when Anthropic takes it."""
    if not path.endswith("/messages"):
        return None
    why = _why(payload, MID_CONVERSATION_SYSTEM in headers.get("anthropic-beta", ""))
    if why is None:
        return None
    return anthropic_error(400, "invalid_request_error", why)


def _why(payload: dict[str, Any], system_turns: bool) -> str | None:
    if "max_tokens" not in payload:
        return "max_tokens: Field required"
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None  # the fake's other checks answer a body of the wrong shape
    if not messages:
        return "messages: at least one message is required"
    roles = ("user", "assistant", "system") if system_turns else ("user", "assistant")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if message.get("role") not in roles:
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if any(b.get("type") == "text" and b.get("text") == "" for b in _blocks(message)):
            return "messages: text content blocks must be non-empty"
    turns = [(i, m) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") != "system"]
    for k, (i, message) in enumerate(turns):
        if message.get("role") == "assistant":
            asked = [b.get("id") for b in _blocks(message) if b.get("type") == "tool_use"]
            following = turns[k + 1][1] if k + 1 < len(turns) else None
            answered = {b.get("tool_use_id") for b in _blocks(following)} if following is not None else set()
            missing = [str(t) for t in asked if t not in answered]
            if asked and missing:
                return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                        f"after: {', '.join(missing)}")  # fmt: skip
        else:
            before = turns[k - 1][1] if k else None
            called = set()
            if before is not None and before.get("role") == "assistant":
                called = {b.get("id") for b in _blocks(before) if b.get("type") == "tool_use"}
            for j, block in enumerate(_blocks(message)):
                if block.get("type") == "tool_result" and block.get("tool_use_id") not in called:
                    return (f"messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: "
                            f"{block.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                            "`tool_use` block in the previous message.")  # fmt: skip
    return None


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [b for b in content if isinstance(b, dict)]
    return []
