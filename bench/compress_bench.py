"""Compression speed (100 KB, 1 MB, 5 MB conversations) and quality over generated agent
conversations: does the one retry fit, how much of the budget it uses, is it valid, and how
much of what matters most (the newest turns) comes back verbatim. Each table sets the
current core ("new") beside a frozen copy of the previous one ("old", ``compress_v1.py``:
drop the fewest turns, then cut every older message to a common size; calibration capped
at 3x).

    python -m bench.compress_bench
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import compress_v1
from bench.conversations import agent_conversation, provider_tokens
from gateway.policy.compress import compress

Compress = Callable[..., Any]
ORDERS: tuple[tuple[str, Compress], ...] = (("old", compress_v1.compress), ("new", compress))


def overflow_message(limit: int, payload: dict[str, Any], factor: float = 1.0) -> str:
    return (f"This model's maximum context length is {limit} tokens. However, your messages resulted in "
            f"{int(provider_tokens(payload) * factor)} tokens. Please reduce the length of the messages.")


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
    lines = ["| conversation | messages | old: compress time | new: compress time (median of 5) | new, per MiB |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for label, size in (("100 KB", 100_000), ("1 MB", 1_000_000), ("5 MB", 5_000_000)):
        msgs = agent_conversation(rng, size)
        payload = {"model": "m", "messages": msgs}
        message = overflow_message(provider_tokens(payload) // 3, payload)
        medians, last = [], 0.0
        for _, fn in ORDERS:
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                r = fn(payload, error_message=message, context_window=None)
                times.append(time.perf_counter() - t0)
                assert r.outcome == "applied"
            last = statistics.median(times) * 1000
            medians.append(f"{last:.1f} ms")
        kib = len(json.dumps(payload)) // 1024
        lines.append(f"| {label} ({kib} KiB) | {len(msgs)} | {' | '.join(medians)} | {last / (kib / 1024):.1f} ms |")
    return "\n".join(lines)


def turns(msgs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The history (neither system nor the newest user message) as turns: a message, or a
    tool call with its results."""
    out: list[list[dict[str, Any]]] = []
    for m in msgs[:-1]:
        if m["role"] == "system":
            continue
        if m["role"] == "tool" and out and out[-1][0].get("tool_calls"):
            out[-1].append(m)
        else:
            out.append([m])
    return out


def newest_verbatim(original: list[dict[str, Any]], out: list[dict[str, Any]]) -> int:
    """How many of the newest turns came back exactly as they were, counting back from the newest."""
    kept = {id(m) for m in out}  # unchanged messages are passed through as the same objects
    n = 0
    for turn in reversed(turns(original)):
        if not all(id(m) in kept for m in turn):
            break
        n += 1
    return n


def score(fn: Compress, cases: list[tuple[dict[str, Any], int, str]], factor: float = 1.0) -> dict[str, Any]:
    applied = fits = ok = 0
    used: list[float] = []
    verbatim: list[int] = []
    cut: list[int] = []
    dropped: list[int] = []
    newest5 = 0
    reasons: dict[str, int] = {}
    for payload, limit, message in cases:
        r = fn(payload, error_message=message, context_window=None)
        if r.payload is None:
            reasons[r.report.get("reason", "?")] = reasons.get(r.report.get("reason", "?"), 0) + 1
            continue
        applied += 1
        original, new = payload["messages"], r.payload["messages"]
        after = provider_tokens(r.payload) * factor
        fits += after <= limit
        used.append(after / limit)
        ok += valid(new, original)
        verbatim.append(newest_verbatim(original, new))
        newest5 += verbatim[-1] >= min(5, len(turns(original)))
        cut.append(sum("truncated by llm-gateway" in json.dumps(m) for m in new))
        kept = {id(m) for m in new}
        dropped.append(sum(1 for m in original if id(m) not in kept and "truncated by" not in json.dumps(m)))
    n = max(applied, 1)
    return {"cases": len(cases), "applied": applied, "fits": fits / n, "used": statistics.median(used or [0.0]),
            "used_min": min(used or [0.0]), "valid": ok / n, "verbatim": statistics.median(verbatim or [0]),
            "newest5": newest5 / n, "cut": statistics.median(cut or [0]), "dropped": statistics.median(dropped or [0]),
            "reasons": reasons}


def quality(n: int = 200) -> str:
    rng = random.Random(11)
    cases = []
    for _ in range(n):
        payload = {"model": "m", "messages": agent_conversation(rng, rng.choice((30_000, 100_000, 300_000, 1_000_000)))}
        limit = int(provider_tokens(payload) * rng.uniform(0.2, 0.9))
        cases.append((payload, limit, overflow_message(limit, payload)))
    lines = [
        "| order | conversations | compressed | fit after one retry | median budget used | structure valid "
        "| newest turns verbatim (median) | newest 5 turns all verbatim | messages cut (median) | messages dropped (median) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, fn in ORDERS:
        s = score(fn, cases)
        lines.append(f"| {name} | {s['cases']} | {s['applied']} | {s['fits']:.0%} | {s['used']:.0%} (min {s['used_min']:.0%}) "
                     f"| {s['valid']:.0%} | {s['verbatim']:.0f} | {s['newest5']:.0%} | {s['cut']:.0f} | {s['dropped']:.0f} |")
    return "\n".join(lines)


def calibration(n: int = 60) -> str:
    """The provider counts k times our estimate (images, tool schemas, a server-side prompt,
    another tokenizer): does the one retry still land under its limit?"""
    rng = random.Random(13)
    lines = ["| provider count vs ours | order | compressed | fit after one retry | not compressed, reason given |",
             "| ---: | --- | ---: | ---: | --- |"]
    for factor in (1.0, 2.0, 4.0, 8.0):
        cases = []
        for _ in range(n):
            payload = {"model": "m", "messages": agent_conversation(rng, rng.choice((30_000, 100_000, 300_000)))}
            limit = int(provider_tokens(payload) * factor * rng.uniform(0.5, 0.9))
            cases.append((payload, limit, overflow_message(limit, payload, factor)))
        for name, fn in ORDERS:
            s = score(fn, cases, factor)
            why = "; ".join(f"{k} ({v})" for k, v in s["reasons"].items()) or "-"
            lines.append(f"| {factor:.0f}x | {name} | {s['applied']}/{n} | {s['fits']:.0%} | {why} |")
    return "\n".join(lines)


def run(quality_n: int = 200) -> str:
    report = ("Compression speed\n\n" + speed() + "\n\nCompression quality (provider tokenizer ≠ ours; limits 20–90 % "
              "of the real size)\n\n" + quality() + "\n\nCalibration (the provider counts k× what we estimate; "
              "limits 50–90 % of its count)\n\n" + calibration() + "\n")
    print(report)
    return report


if __name__ == "__main__":
    run()
