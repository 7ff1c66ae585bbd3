"""compress(payload, error_message, context_window) → a smaller, still valid chat request.

Called once, after the provider said the conversation is too long. What it keeps,
exactly as it was: every system/developer message, the newest user message, and the
step the agent is on (everything after that user message: its tool calls and results).

**The target** is the provider's own limit when the error states it, else the upstream's
``context_window``, else half the current size; minus a 6 % safety margin and the
completion budget. Our estimate is bytes / 3.5; when the error gives the provider's count
of this request, every estimate is scaled by provider / ours, however large (images, tool
schemas, a server-side prompt or another tokenizer can each make ours several times too
low; capping the scale would aim above the provider's limit). It is bounded only from
below (0.5), which can only make the cut deeper.

**The order**, cheapest loss first. A *turn* is one message, or an assistant tool call
with all of its results; turns are kept or dropped whole.

1. If only the completion budget does not fit, lower ``max_tokens`` (never below 256)
   and touch nothing else.
2. Drop the oldest turns: walk the turns before the current step newest first and keep
   each whole while it fits the room the protected messages and the current step leave.
   The newest turns therefore come back verbatim.
3. A turn that does not fit whole and holds an *oversized* output (text above a quarter of
   that room) has those outputs cut to head + tail, no further than the older turns need
   (a quarter, unless step 4 gives room back); then the walk goes on. A huge log's middle
   is cheaper to lose than every turn before it.
4. The first other turn that does not fit is the oldest kept: it is cut to the room left
   when each text it cuts keeps at least 300 tokens (a head and tail says more than an
   empty room), else dropped, and the room it leaves goes back to the outputs cut in 3.
   Everything older is dropped.
5. Only when the protected messages and the current step alone do not fit: every older
   turn goes and the current step's outputs are cut, all to one common size. If even that
   cannot fit a stated limit (the provider's or ``context_window``), the result is
   ``not_applicable`` and says so; against half the current size, a guess, it is sent anyway
   when it removed anything (``short_of_target`` in the report).

Cuts keep about 3/5 head and 2/5 tail with ``…truncated by llm-gateway, N more bytes…``
between; tool-call arguments, images and every other part are never cut. Dropped turns are
announced by one note, merged into the first kept user message or inserted as a user
message (so the first non-system message is a user message). The result never orphans a
tool result. ``report`` holds counts and sizes, never content: what was removed, the
target, the estimates before and after, where the limit came from and the calibration; or,
when nothing can be done, the true reason. Pure and linear in the conversation size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.policy.compress_plan import Refusal, plan
from gateway.policy.cut import cap_tool_outputs
from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.tokens import message_tokens, request_tokens

__all__ = ["CompressionResult", "cap_tool_outputs", "compress"]

SAFETY_MARGIN = 0.06  # of the limit: our estimate is not the provider's tokenizer
MIN_COMPLETION_TOKENS = 256
UNKNOWN_LIMIT_RATIO = 0.5  # with no number at all, aim at half the current size
MIN_SCALE = 0.5  # provider tokens per estimated token, at least


@dataclass(frozen=True)
class CompressionResult:
    payload: dict[str, Any] | None  # None: nothing sensible can be removed
    outcome: Literal["applied", "not_applicable"]
    target_tokens: int
    estimated_before: int
    estimated_after: int
    report: dict[str, Any] = field(default_factory=dict)  # counts and sizes, never content
    # Request headers the retry needs beside the changed body (a beta a field it sets requires).
    headers: tuple[tuple[str, str], ...] = ()


def compress(
    payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
    removed_tokens: float = 0.0, prompt_tokens: int | None = None,
) -> CompressionResult:
    """``removed_tokens``: what was already taken out of the request the error is about
    (oversized tool outputs excluded in the rescue), so the provider's count is matched
    against our estimate of the request it counted. ``prompt_tokens``: the provider's count
    of the prompt alone where its message counts more (a tokens-per-minute refusal's
    "Requested" adds the output budget sent: ``policy/per_minute_fit.py``)."""
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return _not_applicable(0, 0, "no messages")
    sizes = [message_tokens(m) for m in messages]
    raw_total = request_tokens(dict(payload))
    limits = parse_overflow(error_message)
    counted = prompt_tokens or limits.prompt
    # Provider tokens per estimated token: how far our byte count is off for this content.
    # The provider's count is a fact about this very request, so it is trusted however far
    # it is from ours (images, tool schemas, a server-side prompt or an unusual tokenizer
    # can each make ours several times too low); capping it would aim above the provider's
    # limit and the one retry would overflow again. The only bound is from below: assuming
    # the provider counts more than it said can only cut more, never aim too high.
    seen = raw_total + removed_tokens  # our estimate of the request the provider counted
    scale = max(MIN_SCALE, counted / seen) if counted else 1.0
    before = round(raw_total * scale)
    limit = limits.limit or context_window
    source = "provider" if limits.limit else "context_window" if context_window else "estimate"
    facts: dict[str, Any] = {"limit_source": source}
    if counted:
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
        if not counted and round(seen) <= budget:
            # The provider counted more than our estimate; without its count, assume ours
            # is low by the gap we can see and aim well under the size it refused.
            budget = min(budget, round(seen * 0.8))
    target_raw = budget / scale - (raw_total - sum(sizes))  # what the messages may use

    # Half the request is a guess (OpenAI's Responses overflow states no limit): one the
    # protected messages exceed says nothing about the window, and dropping the older turns
    # may well fit it, so the one retry still goes with everything that may be removed gone.
    planned = plan(messages, sizes, target_raw, best_effort=limit is None)
    if isinstance(planned, Refusal):
        protected = round((planned.protected + raw_total - sum(sizes)) * scale)
        why = {"reason": planned.reason, "protected_tokens": protected, **facts}
        return _not_applicable(budget, before, why)
    new_messages, counts = planned
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
