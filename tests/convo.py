"""Agent conversations for tests: long, tool-heavy, and structurally checkable."""

from __future__ import annotations

import json
from typing import Any


def agent_conversation(rounds: int = 30, output_bytes: int = 2000, system: str = "You are a coding agent.") -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": system},
                                  {"role": "user", "content": "Fix the failing test in the repo."}]
    for i in range(rounds):
        call_id = f"call_{i:03d}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": "run_shell", "arguments": json.dumps({"cmd": f"cat src/module_{i}.py"})}}]})
        body = "".join(f"line {n}: value = compute({i}, {n})  # comment\n" for n in range(output_bytes // 40))
        msgs.append({"role": "tool", "tool_call_id": call_id, "content": body[:output_bytes]})
        if i % 5 == 4:
            msgs.append({"role": "assistant", "content": f"Progress note {i}: still investigating."})
            msgs.append({"role": "user", "content": f"Keep going ({i})."})
    msgs.append({"role": "user", "content": "Now write the fix and explain it."})
    return msgs


def assert_valid_conversation(msgs: list[dict[str, Any]]) -> None:
    """Every tool call has all its results right after it; no result is orphaned."""
    pending: set[str] = set()
    for m in msgs:
        role = m.get("role")
        if role == "tool":
            assert m.get("tool_call_id") in pending, f"orphaned tool result {m.get('tool_call_id')}"
            pending.discard(m["tool_call_id"])
            continue
        assert not pending, f"tool calls without results: {pending}"
        if role == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
    assert not pending, f"tool calls without results: {pending}"
