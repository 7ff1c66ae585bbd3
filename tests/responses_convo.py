"""Agent conversations in the Responses API's shape (``input`` items), as Codex builds them:
developer messages first, then user turns, ``function_call`` / ``function_call_output``
pairs joined by ``call_id``, and the newest user message last."""

from __future__ import annotations

import json
from typing import Any

INSTRUCTIONS = "You are a coding agent. Use the tools to inspect the repository."


def msg(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def agent_input(rounds: int = 40, output_bytes: int = 2500) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        msg("developer", "Sandbox: read-only. Approval policy: never."),
        msg("user", "Fix the failing test in the repo."),
    ]
    for i in range(rounds):
        call_id = f"call_{i:03d}"
        items.append({"type": "function_call", "call_id": call_id, "name": "exec_command",
                      "arguments": json.dumps({"cmd": f"cat src/module_{i}.py"})})  # fmt: skip
        body = "".join(f"line {n}: value = compute({i}, {n})  # comment\n" for n in range(output_bytes // 40))
        items.append({"type": "function_call_output", "call_id": call_id, "output": body[:output_bytes]})
        if i % 5 == 4:
            items.append(msg("assistant", f"Progress note {i}: still investigating."))
            items.append(msg("user", f"Keep going ({i})."))
    items.append(msg("user", "Now write the fix and explain it."))
    return items


def assert_valid_input(items: list[dict[str, Any]]) -> None:
    """Every function_call keeps its function_call_output (by call_id) after it, and no
    output is left without its call."""
    calls: dict[str, int] = {}
    outputs: dict[str, int] = {}
    for n, item in enumerate(items):
        assert isinstance(item, dict), f"input[{n}] is not an object"
        if item.get("type") == "function_call":
            assert item["call_id"] not in calls, f"duplicate call {item['call_id']}"
            calls[item["call_id"]] = n
        elif item.get("type") == "function_call_output":
            assert item["call_id"] not in outputs, f"duplicate output {item['call_id']}"
            outputs[item["call_id"]] = n
    assert set(calls) == set(outputs), (
        f"calls without outputs: {sorted(set(calls) - set(outputs))}; "
        f"outputs without calls: {sorted(set(outputs) - set(calls))}"
    )
    for call_id, at in calls.items():
        assert outputs[call_id] > at, f"output of {call_id} comes before its call"
