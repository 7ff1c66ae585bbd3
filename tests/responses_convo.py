"""OpenAI Responses agent conversations (the shape Codex sends) and a structural validator:
every function_call / custom_tool_call keeps its output (matched by call_id, the API
rejects an output without its call and a call without its output)."""

from __future__ import annotations

import json
from typing import Any

INSTRUCTIONS = "You are Codex, a coding agent. Follow the repository's conventions."


def responses_conversation(rounds: int = 30, output_bytes: int = 2000) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions>read-only</permissions>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the failing test."}]},
    ]
    for i in range(rounds):
        body = "".join(f"line {n}: value = compute({i}, {n})  # comment\n" for n in range(output_bytes // 40))
        items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [], "encrypted_content": f"gAAAA{i}=="})
        if i % 4 == 3:
            items.append({"type": "custom_tool_call", "call_id": f"call_{i}", "name": "apply_patch",
                          "input": f"*** Begin Patch\n*** Update File: m{i}.py\n*** End Patch"})
            items.append({"type": "custom_tool_call_output", "call_id": f"call_{i}", "output": body[:output_bytes]})
        else:
            items.append({"type": "function_call", "call_id": f"call_{i}", "name": "shell",
                          "arguments": json.dumps({"command": ["cat", f"src/module_{i}.py"]})})
            items.append({"type": "function_call_output", "call_id": f"call_{i}", "output": body[:output_bytes]})
        if i % 5 == 4:
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": f"Progress note {i}."}]})
            items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Keep going ({i})."}]})
    items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Now write the fix."}]})
    items.append({"type": "reasoning", "id": "rs_last", "summary": [], "encrypted_content": "gAAAAlast=="})
    items.append({"type": "function_call", "call_id": "call_last", "name": "shell", "arguments": '{"command":["pytest"]}'})
    items.append({"type": "function_call_output", "call_id": "call_last", "output": "1 failed, 41 passed"})
    return items


def assert_valid_input(items: list[dict[str, Any]]) -> None:
    calls = {i["call_id"] for i in items if i.get("type") in ("function_call", "custom_tool_call")}
    outputs = {i["call_id"] for i in items if i.get("type") in ("function_call_output", "custom_tool_call_output")}
    assert calls == outputs, f"calls without outputs or outputs without calls: {calls ^ outputs}"
    seen: set[str] = set()
    for i in items:
        if i.get("type") in ("function_call", "custom_tool_call"):
            seen.add(i["call_id"])
        elif i.get("type") in ("function_call_output", "custom_tool_call_output"):
            assert i["call_id"] in seen, "an output comes before its call"


def size(items: list[dict[str, Any]]) -> int:
    return len(json.dumps(items))
