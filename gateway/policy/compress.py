"""compress(payload, error_message, context_window) → a smaller, still valid chat request.

Called once, after the provider said the conversation is too long. What it keeps,
exactly as it was: every system/developer message, the newest user message, and the
step the agent is on (everything after that user message: its tool calls and results),
whose outputs are cut only when nothing older can make the request fit.

The target is the provider's own limit when the error states it (calibrating our byte
estimate with the provider's token count when it gives one), else the upstream's
``context_window``, else half the current size; minus a safety margin and the completion
budget. Then, cheapest loss first:

1. if only the completion budget does not fit, lower ``max_tokens`` (never below a floor);
2. drop the fewest oldest turns — an assistant tool call always together with all its
   results — such that every remaining long message still fits at ``MIN_KEEP_TOKENS``;
3. cut the remaining oversized messages to head + tail at the largest common cap that
   fits ("water-filling"), so the request uses nearly the whole target;
4. only if still too big, cut the current step's tool outputs the same way.

A note tells the model what was removed. The result never orphans a tool result, and its
first non-system message is a user message. Pure and linear in the conversation size.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.policy.cut import MARKER_TOKENS, MIN_KEEP_TOKENS, text_tokens, truncate, water_level
from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.tokens import message_tokens, request_tokens

SAFETY_MARGIN = 0.06  # of the limit: our estimate is not the provider's tokenizer
MIN_COMPLETION_TOKENS = 256
UNKNOWN_LIMIT_RATIO = 0.5  # with no number at all, aim at half the current size
MIN_SCALE = 0.5  # provider tokens per estimated token, at least
NOTE_TOKENS = 40


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
    # The provider's count is a fact about this very request, so it is trusted however far
    # it is from ours (images, tool schemas, a server-side prompt or an unusual tokenizer
    # can each make ours several times too low); capping it would aim above the provider's
    # limit and the one retry would overflow again. The only bound is from below: assuming
    # the provider counts more than it said can only cut more, never aim too high.
    scale = max(MIN_SCALE, limits.prompt / raw_total) if limits.prompt else 1.0
    before = round(raw_total * scale)
    limit = limits.limit or context_window
    source = "provider" if limits.limit else "context_window" if context_window else "estimate"
    facts: dict[str, Any] = {"limit_source": source}
    if limits.prompt:
        facts["calibration"] = round(scale, 3)
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
            report = {**_counts(), **facts, "max_tokens_lowered_to": fits_with}
            return _result(out, budget, before, before, report)
        # Cutting the conversation to make room for a huge max_tokens would waste it.
        completion_out = min(completion, max(MIN_COMPLETION_TOKENS, budget // 4)) if completion else 0
        budget -= completion_out
        if not limits.prompt and before <= budget:
            # The provider counted more than our estimate; without its count, assume ours
            # is low by the gap we can see and aim well under the current size.
            budget = round(before * 0.8)
    target_raw = budget / scale - (raw_total - sum(sizes))  # what the messages may use

    plan = _plan(messages, sizes, target_raw)
    if isinstance(plan, Refusal):
        protected = round((plan.protected + raw_total - sum(sizes)) * scale)
        why = {"reason": plan.reason, "protected_tokens": protected, **facts}
        return _not_applicable(budget, before, why)
    new_messages, counts = plan
    out = dict(payload)
    out["messages"] = new_messages
    report = {**counts, **facts}
    if completion_out and isinstance(asked, int) and completion_out < asked:
        out[completion_key] = completion_out
        report["max_tokens_lowered_to"] = completion_out
    after = round(request_tokens(out) * scale)
    return _result(out, budget, before, after, report)


def _counts(messages: int = 0, turns: int = 0, truncated: int = 0, removed: int = 0) -> dict[str, Any]:
    return {"messages_removed": messages, "turns_removed": turns, "outputs_truncated": truncated,
            "bytes_removed": removed}  # fmt: skip


def _result(
    out: dict[str, Any], target: int, before: int, after: int, report: dict[str, Any]
) -> CompressionResult:
    # The sizes go into the report too: it is all the pipeline logs, and after a second
    # overflow it is what says how hard the one compression tried.
    sizes = {"target_tokens": target, "estimated_before": before, "estimated_after": after}
    return CompressionResult(out, "applied", target, before, after, {**report, **sizes})


def _not_applicable(target: int, before: int, why: str | dict[str, Any]) -> CompressionResult:
    report = {"reason": why} if isinstance(why, str) else why
    sizes = {"target_tokens": target, "estimated_before": before, "estimated_after": before}
    return CompressionResult(None, "not_applicable", target, before, before, {**_counts(), **report, **sizes})


@dataclass(frozen=True)
class Refusal:
    """Why the plan removes nothing, and the size of what it may not remove (our estimate)."""

    reason: str
    protected: float


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
) -> tuple[list[dict[str, Any]], dict[str, Any]] | Refusal:
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
    text = [text_tokens(m) for m in messages]  # the part of each message a cut can shorten

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
            return Refusal("protected messages alone exceed the limit", fixed + step_size)
        drop, cut_step = len(units), True
    candidates = [i for u in units[drop:] for i in u] + (step if cut_step else [])
    base = sum(sizes[i] - text[i] for i in candidates)
    room = target - fixed - base - (0 if cut_step else step_size)
    cap = water_level([text[i] for i in candidates], room)
    cuttable_set = set(candidates)

    dropped = {i for u in units[:drop] for i in u}
    report: dict[str, Any] = {"messages_removed": len(dropped), "turns_removed": drop, "outputs_truncated": 0,
                              "bytes_removed": 0}
    report["bytes_removed"] = sum(_bytes(messages[i]) for i in dropped)
    result: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i in dropped:
            continue
        if i in cuttable_set and text[i] > cap:
            cut, removed = truncate(m, cap)
            if removed:
                m = cut
                report["outputs_truncated"] += 1
                report["bytes_removed"] += removed
        result.append(m)
    if not dropped and not report["outputs_truncated"]:
        return Refusal("the messages already fit the target; nothing to remove", fixed + step_size)
    return _with_note(result, messages, dropped, report), report


def _bytes(m: dict[str, Any]) -> int:
    return len(json.dumps(m, ensure_ascii=False, default=str).encode())


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
