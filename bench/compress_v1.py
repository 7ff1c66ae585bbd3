"""FROZEN copy of gateway/policy/compress.py as of commit 6740786, before the "drop the oldest
whole turns first" order and the uncapped calibration. Used only by bench/compress_bench.py to
compare the old order with the new one; never imported by the gateway. Do not edit."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.tokens import BYTES_PER_TOKEN, message_tokens, request_tokens

SAFETY_MARGIN = 0.06  # of the limit: our estimate is not the provider's tokenizer
MIN_COMPLETION_TOKENS = 256
MIN_KEEP_TOKENS = 300  # a cut message keeps at least this much of its head and tail
UNKNOWN_LIMIT_RATIO = 0.5  # with no number at all, aim at half the current size
NOTE_TOKENS = 40
MARKER_TOKENS = 16  # the "…truncated by llm-gateway, N more bytes…" line a cut adds


@dataclass(frozen=True)
class CompressionResult:
    payload: dict[str, Any] | None  # None: nothing sensible can be removed
    outcome: Literal["applied", "not_applicable"]
    target_tokens: int
    estimated_before: int
    estimated_after: int
    report: dict[str, Any] = field(default_factory=dict)  # counts and sizes, never content


def compress(
    payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None
) -> CompressionResult:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return _not_applicable(0, 0, "no messages")
    sizes = [message_tokens(m) for m in messages]
    raw_total = request_tokens(dict(payload))
    limits = parse_overflow(error_message)
    # Provider tokens per estimated token: how far our byte count is off for this content.
    scale = min(3.0, max(0.5, limits.prompt / raw_total)) if limits.prompt else 1.0
    before = round(raw_total * scale)
    limit = limits.limit or context_window
    completion_key = "max_completion_tokens" if "max_completion_tokens" in payload else "max_tokens"
    asked = payload.get(completion_key)
    completion = asked if isinstance(asked, int) and asked > 0 else (limits.completion or 0)

    if limit is None:
        budget = round(before * UNKNOWN_LIMIT_RATIO)
        completion_out = completion
    else:
        budget = round(limit * (1 - SAFETY_MARGIN))
        fits_with = budget - before
        if completion and MIN_COMPLETION_TOKENS <= fits_with < completion and isinstance(asked, int):
            # The messages fit; only the completion budget does not: shrink that instead.
            out = {**payload, completion_key: fits_with}
            report = {"max_tokens_lowered_to": fits_with}
            return CompressionResult(out, "applied", budget, before, before, report)
        # Cutting the conversation to make room for a huge max_tokens would waste it.
        completion_out = min(completion, max(MIN_COMPLETION_TOKENS, budget // 4)) if completion else 0
        budget -= completion_out
        if not limits.prompt and before <= budget:
            # The provider counted more than our estimate; without its count, assume ours
            # is low by the gap we can see and aim well under the current size.
            budget = round(before * 0.8)
    target_raw = budget / scale - (raw_total - sum(sizes))  # what the messages may use

    plan = _plan(messages, sizes, target_raw)
    if plan is None:
        return _not_applicable(budget, before, "protected messages alone exceed the limit")
    new_messages, report = plan
    out = dict(payload)
    out["messages"] = new_messages
    if completion_out and isinstance(asked, int) and completion_out < asked:
        out[completion_key] = completion_out
        report["max_tokens_lowered_to"] = completion_out
    after = round(request_tokens(out) * scale)
    return CompressionResult(out, "applied", budget, before, after, report)


def _not_applicable(target: int, before: int, why: str) -> CompressionResult:
    return CompressionResult(None, "not_applicable", target, before, before, {"reason": why})


def _units(messages: list[dict[str, Any]], start: int, end: int) -> list[list[int]]:
    """Indexes in [start, end) grouped into droppable units; system messages are not in any."""
    units: list[list[int]] = []
    for i in range(start, end):
        role = messages[i].get("role")
        if role in ("system", "developer"):
            continue
        if role in ("tool", "function") and units and _is_call_unit(messages, units[-1]):
            units[-1].append(i)  # a result travels with the call that asked for it
        else:
            units.append([i])
    return units


def _is_call_unit(messages: list[dict[str, Any]], unit: list[int]) -> bool:
    head = messages[unit[0]]
    return head.get("role") == "assistant" and bool(head.get("tool_calls") or head.get("function_call"))


def _plan(
    messages: list[dict[str, Any]], sizes: list[float], target: float
) -> tuple[list[dict[str, Any]], dict[str, Any]] | None:
    newest_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    step_start = newest_user + 1 if newest_user >= 0 else len(messages)
    if newest_user < 0:  # no user message: protect the last unit as the current step
        tail = _units(messages, 0, len(messages))
        step_start = tail[-1][0] if tail else len(messages)
    keep_exact = {i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    if newest_user >= 0:
        keep_exact.add(newest_user)
    step = [i for i in range(step_start, len(messages)) if i not in keep_exact]
    units = _units(messages, 0, step_start)
    units = [[i for i in u if i not in keep_exact] for u in units]
    units = [u for u in units if u]

    fixed = sum(sizes[i] for i in keep_exact) + NOTE_TOKENS
    step_size = sum(sizes[i] for i in step)
    text = [_text_tokens(m) for m in messages]  # the part of each message a cut can shorten

    def floor_of(i: int) -> float:
        if text[i] <= MIN_KEEP_TOKENS:
            return sizes[i]
        return sizes[i] - text[i] + MIN_KEEP_TOKENS + MARKER_TOKENS

    # floor[k]: the smallest the units from k on can be made by cutting (not dropping).
    floor = [0.0] * (len(units) + 1)
    for k in range(len(units) - 1, -1, -1):
        floor[k] = floor[k + 1] + sum(floor_of(i) for i in units[k])
    drop = next((k for k in range(len(units) + 1) if fixed + step_size + floor[k] <= target), None)
    cut_step = False
    if drop is None:
        if fixed + sum(floor_of(i) for i in step) > target:
            return None
        drop, cut_step = len(units), True
    candidates = [i for u in units[drop:] for i in u] + (step if cut_step else [])
    base = sum(sizes[i] - text[i] for i in candidates)
    room = target - fixed - base - (0 if cut_step else step_size)
    cap = _water_level([text[i] for i in candidates], room)
    cuttable_set = set(candidates)

    dropped = {i for u in units[:drop] for i in u}
    report: dict[str, Any] = {"messages_removed": len(dropped), "outputs_truncated": 0, "bytes_removed": 0}
    report["bytes_removed"] = sum(_bytes(messages[i]) for i in dropped)
    result: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i in dropped:
            continue
        if i in cuttable_set and text[i] > cap:
            cut, removed = _truncate(m, cap)
            if removed:
                m = cut
                report["outputs_truncated"] += 1
                report["bytes_removed"] += removed
        result.append(m)
    if not dropped and not report["outputs_truncated"]:
        return None
    return _with_note(result, messages, dropped, report), report


def _text_tokens(m: dict[str, Any]) -> float:
    """Tokens of a message's text content; tool-call arguments are never cut (they are JSON)."""
    content = m.get("content")
    if isinstance(content, str):
        return len(content.encode()) / BYTES_PER_TOKEN
    if isinstance(content, list):
        return sum(
            len(p["text"].encode()) / BYTES_PER_TOKEN
            for p in content
            if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return 0.0


def _water_level(sizes: list[float], room: float) -> float:
    """The largest cap c (>= MIN_KEEP_TOKENS) with sum(min(s, c)) plus a marker per cut <= room."""
    if sum(sizes) <= room:
        return float("inf")
    ordered = sorted(sizes)
    below = 0.0
    for n, s in enumerate(ordered):
        remaining = len(ordered) - n
        cap = (room - below) / remaining - MARKER_TOKENS
        if cap <= s:
            return max(MIN_KEEP_TOKENS, cap)
        below += s
    return max(MIN_KEEP_TOKENS, room)


def _bytes(m: dict[str, Any]) -> int:
    return len(json.dumps(m, ensure_ascii=False, default=str).encode())


def _truncate(m: dict[str, Any], cap: float) -> tuple[dict[str, Any], int]:
    """Cut the message's text to about ``cap`` tokens in all, keeping head and tail."""
    content = m.get("content")
    keep = int(max(cap, MIN_KEEP_TOKENS) * BYTES_PER_TOKEN)
    if isinstance(content, str):
        text, removed = _cut_text(content, keep)
        return ({**m, "content": text}, removed) if removed else (m, 0)
    if isinstance(content, list):
        texts = [p for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        text_ids = {id(p) for p in texts}
        total = sum(len(p["text"].encode()) for p in texts) or 1
        parts, removed = [], 0
        for p in content:
            if id(p) in text_ids:
                share = max(int(keep * len(p["text"].encode()) / total), 64)
                text, r = _cut_text(p["text"], share)
                parts.append({**p, "text": text} if r else p)
                removed += r
            else:
                parts.append(p)
        return ({**m, "content": parts}, removed) if removed else (m, 0)
    return m, 0


def _cut_text(text: str, keep_bytes: int) -> tuple[str, int]:
    data = text.encode()
    if len(data) <= keep_bytes:
        return text, 0
    # Tool output's end (errors, summaries) tends to matter as much as its start.
    head_n = keep_bytes * 3 // 5
    tail_n = keep_bytes - head_n
    head = data[:head_n].decode("utf-8", "ignore")
    tail = data[len(data) - tail_n :].decode("utf-8", "ignore")
    removed = len(data) - len(head.encode()) - len(tail.encode())
    return f"{head}\n…truncated by llm-gateway, {removed} more bytes…\n{tail}", removed


def _with_note(
    result: list[dict[str, Any]], original: list[dict[str, Any]], dropped: set[int], report: dict[str, Any]
) -> list[dict[str, Any]]:
    if not dropped:
        return result
    text = (
        f"[llm-gateway: {len(dropped)} earlier messages ({report['bytes_removed'] // 1024} KB) were "
        "removed to fit the model's context window. Earlier tool results may need to be re-run.]"
    )
    lead = 0
    while lead < len(result) and result[lead].get("role") in ("system", "developer"):
        lead += 1
    nxt = result[lead] if lead < len(result) else None
    newest_user = max((i for i, m in enumerate(original) if m.get("role") == "user"), default=-1)
    if nxt is not None and nxt.get("role") == "user" and nxt is not original[newest_user]:
        merged = copy.copy(nxt)
        content = nxt.get("content")
        if isinstance(content, str):
            merged["content"] = f"{text}\n\n{content}"
        elif isinstance(content, list):
            merged["content"] = [{"type": "text", "text": text}, *content]
        else:
            merged["content"] = text
        return [*result[:lead], merged, *result[lead + 1 :]]
    # A user note keeps "first non-system message is a user message" for strict providers.
    return [*result[:lead], {"role": "user", "content": text}, *result[lead:]]
