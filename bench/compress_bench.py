"""Compression speed (100 KB, 1 MB, 5 MB conversations) and quality over generated agent
conversations: does the one retry fit, how much of the budget it uses, is it valid.

    python -m bench.compress_bench
"""

from __future__ import annotations

import json
import random
import statistics
import time
from typing import Any

from bench.conversations import agent_conversation, provider_tokens
from gateway.policy.compress import compress


def overflow_message(limit: int, payload: dict[str, Any]) -> str:
    return (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{provider_tokens(payload)} tokens. Please reduce the length of the messages.")


def valid(msgs: list[dict[str, Any]], original: list[dict[str, Any]]) -> bool:
    pending: set[str] = set()
    for m in msgs:
        if m.get("role") == "tool":
            if m.get("tool_call_id") not in pending:
                return False
            pending.discard(m["tool_call_id"])
            continue
        if pending:
            return False
        if m.get("role") == "assistant" and m.get("tool_calls"):
            pending = {c["id"] for c in m["tool_calls"]}
    kept = all(m in msgs for m in original if m["role"] == "system")
    newest_user = next(m for m in reversed(original) if m["role"] == "user")
    first = next(m for m in msgs if m["role"] != "system")
    return not pending and kept and newest_user in msgs and first["role"] == "user"


def speed() -> str:
    rng = random.Random(7)
    # The last column shows whether the cost stays linear in the conversation's size.
    lines = ["| conversation | messages | compress time (median of 5) | per MiB |", "| --- | ---: | ---: | ---: |"]
    for label, size in (("100 KB", 100_000), ("1 MB", 1_000_000), ("5 MB", 5_000_000)):
        msgs = agent_conversation(rng, size)
        payload = {"model": "m", "messages": msgs}
        message = overflow_message(provider_tokens(payload) // 3, payload)
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            r = compress(payload, error_message=message, context_window=None)
            times.append(time.perf_counter() - t0)
            assert r.outcome == "applied"
        kib = len(json.dumps(payload)) // 1024
        ms = statistics.median(times) * 1000
        lines.append(f"| {label} ({kib} KiB) | {len(msgs)} | {ms:.1f} ms | {ms / (kib / 1024):.1f} ms |")
    return "\n".join(lines)


def quality(n: int = 200) -> str:
    rng = random.Random(11)
    fits = used = ok = applied = 0
    budget_use: list[float] = []
    for _ in range(n):
        payload = {"model": "m", "messages": agent_conversation(rng, rng.choice((30_000, 100_000, 300_000, 1_000_000)))}
        real = provider_tokens(payload)
        limit = int(real * rng.uniform(0.2, 0.9))
        r = compress(payload, error_message=overflow_message(limit, payload), context_window=None)
        if r.payload is None:
            continue
        applied += 1
        after = provider_tokens(r.payload)
        fits += after <= limit
        budget_use.append(after / limit)
        ok += valid(r.payload["messages"], payload["messages"])
    used = statistics.median(budget_use) if budget_use else 0.0
    return "\n".join([
        "| conversations | compressed | fit after one retry | median budget used | structure valid |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {n} | {applied} | {fits / max(applied, 1):.0%} | {used:.0%} (min {min(budget_use):.0%}) | {ok / max(applied, 1):.0%} |",
    ])


def run(quality_n: int = 200) -> str:
    report = ("Compression speed\n\n" + speed() + "\n\nCompression quality (provider tokenizer ≠ ours; limits 20–90 % "
              "of the real size)\n\n" + quality(quality_n) + "\n")
    print(report)
    return report


if __name__ == "__main__":
    run()
