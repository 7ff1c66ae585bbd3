"""Anthropic Messages agent conversations for tests, and a structural validator that
encodes the API's rules (Anthropic docs, "Tool use": tool_result blocks answer the
tool_use blocks of the assistant turn right before them and come first in their user
message)."""

from __future__ import annotations

import json
from typing import Any

SYSTEM = [{"type": "text", "text": "You are Claude Code, a coding agent.", "cache_control": {"type": "ephemeral"}}]


# Claude Code 2.1.197 named this beta and then sent `role: "system"` turns mid-conversation
# (../shared/AGENT-REQUESTS.md); 2.1.332 names none, and Anthropic asks for none. Kept: a
# request that names it is what 2.1.197 sends.
CLAUDE_CODE_BETA = {"anthropic-beta": "mid-conversation-system-2026-04-07"}

# The tool ``messages_conversation`` calls: Anthropic refuses tool blocks in a request that
# declares no tools.
TOOLS = [{"name": "Bash", "description": "Run a shell command.",
          "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}}}]


def messages_conversation(rounds: int = 30, output_bytes: int = 2000) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Fix the failing test."}]}]
    for i in range(rounds):
        tid = f"toolu_{i:03d}"
        body = "".join(f"line {n}: value = compute({i}, {n})  # comment\n" for n in range(output_bytes // 40))
        msgs.append({"role": "assistant", "content": [
            {"type": "thinking", "thinking": f"I should read module {i}.", "signature": f"sig-{i}=="},
            {"type": "text", "text": f"Reading module {i}."},
            {"type": "tool_use", "id": tid, "name": "Bash", "input": {"command": f"cat src/module_{i}.py"}}]})
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": tid, "content": body[:output_bytes]}
        if i % 3 == 1:  # the list form of tool_result content
            result["content"] = [{"type": "text", "text": body[:output_bytes]}]
        user: list[dict[str, Any]] = [result]
        if i % 5 == 4:
            user.append({"type": "text", "text": f"Keep going ({i})."})
        msgs.append({"role": "user", "content": user})
    # The current step: the newest user turn, then a tool round still in progress.
    msgs.append({"role": "assistant", "content": [{"type": "text", "text": "Done reading."}]})
    msgs.append({"role": "user", "content": [{"type": "text", "text": "Now write the fix and explain it."}]})
    msgs.append({"role": "system", "content": "<system-reminder>Plan mode is off.</system-reminder>"})
    msgs.append({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Run the tests first.", "signature": "sig-last=="},
        {"type": "tool_use", "id": "toolu_last", "name": "Bash", "input": {"command": "pytest -q"}}]})
    msgs.append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_last", "content": "1 failed, 41 passed"}]})
    return msgs


def assert_valid_messages(msgs: list[dict[str, Any]]) -> None:
    # Claude Code also sends role "system" entries mid-conversation; they sit between turns.
    turns = [m for m in msgs if m["role"] != "system"]
    assert turns and turns[0]["role"] == "user", "the first message must be a user message"
    assert turns[-1]["role"] == "user", "the conversation must end with a user turn"
    pending: set[str] = set()
    for m in turns:
        blocks = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        if m["role"] == "user":
            results = [b for b in blocks if b.get("type") == "tool_result"]
            got = {b["tool_use_id"] for b in results}
            assert got == pending, f"tool_use without result or result without call: {pending ^ got}"
            kinds = [b.get("type") == "tool_result" for b in blocks]
            assert kinds == sorted(kinds, reverse=True), "tool_result blocks must come first"
            pending = set()
        else:
            assert not pending, f"tool_use without result: {pending}"
            pending = {b["id"] for b in blocks if b.get("type") == "tool_use"}


def size(msgs: list[dict[str, Any]]) -> int:
    return len(json.dumps(msgs))
