"""Generated agent conversations of a chosen size and shape, for the compression bench."""

from __future__ import annotations

import json
import random
from typing import Any

WORDS = ("def", "return", "self", "value", "error", "import", "config", "request", "token", "line",
         "assert", "result", "None", "True", "for", "in", "if", "else", "data", "path")


def _text(rng: random.Random, size: int) -> str:
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))) + "\n"
        out.append(line)
        n += len(line)
    return "".join(out)[:size]


def agent_conversation(rng: random.Random, target_bytes: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + _text(rng, 1500)},
        {"role": "user", "content": "Fix the failing tests in this repository."},
    ]
    size, step = 0, 0
    while size < target_bytes:
        step += 1
        calls = [f"call_{step}_{j}" for j in range(rng.choice((1, 1, 1, 2, 3)))]
        msgs.append({"role": "assistant", "content": rng.choice((None, "Let me look.")), "tool_calls": [
            {"id": c, "type": "function", "function": {"name": "run", "arguments": json.dumps({"cmd": f"cat f{step}.py"})}}
            for c in calls]})
        for c in calls:
            out = _text(rng, int(rng.lognormvariate(7.5, 1.2)))  # mostly a few KB, sometimes 100 KB+
            msgs.append({"role": "tool", "tool_call_id": c, "content": out})
            size += len(out)
        if rng.random() < 0.15:
            msgs.append({"role": "assistant", "content": _text(rng, 400)})
            msgs.append({"role": "user", "content": [{"type": "text", "text": "Continue. " + _text(rng, 200)}]})
    msgs.append({"role": "user", "content": "Now write the fix."})
    return msgs


def provider_tokens(payload: dict[str, Any]) -> int:
    """A stand-in for a provider's tokenizer that is deliberately *not* ours: ~3.2 chars a token
    of the JSON-serialised messages, plus 3 a message."""
    msgs = payload.get("messages", [])
    return int(len(json.dumps(msgs)) / 3.2) + 3 * len(msgs)
