"""What the rescue keeps, drops and cuts, given a budget in our own token estimate.

The order is in ``compress.py``'s docstring; this module carries it out. A *unit* is what
is dropped as a whole: one message, or an assistant tool call together with all of its
results, and with every message after them that says it ``CONTINUES`` the unit (an API's
adapter marks those its API will not take apart). Pure; linear in the conversation size.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from gateway.policy.cut import (
    MARKER_TOKENS,
    MIN_CAP_TOKENS,
    MIN_KEEP_TOKENS,
    text_tokens,
    truncate,
    water_level,
)

# A view message that may only be dropped with the unit before it: Responses' calls that follow
# an output but belong to the reasoning item before it (``apis/responses/compress.py``).
CONTINUES = "_llm_gateway_continues"
NOTE_TOKENS = 50  # the "[llm-gateway: N earlier messages … were removed …]" note, as a message
# A turn that does not fit whole may spend at most this share of the history's room on any
# one output: the middle of a huge log is the cheapest loss there is, cheaper than the
# older turns that would otherwise all be dropped to make room for it.
OVERSIZED_SHARE = 0.25
# A cut that leaves the older turns exactly their size leaves it as a difference of floats, which
# can fall a hair short of their sum: without this slack the oldest went for a rounding error.
ROUNDING = 1e-6


@dataclass(frozen=True)
class Refusal:
    """Why the plan removes nothing, and the size of what it may not remove (our estimate)."""

    reason: str
    protected: float


def plan(
    messages: list[dict[str, Any]], sizes: list[float], target: float, *, best_effort: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any]] | Refusal:
    """The new messages and counts of what went, or why nothing can go. ``best_effort``: the
    target is our own guess, not a stated limit, so one the protected messages alone exceed
    still drops every older turn and cuts the current step's outputs as far as a cut goes
    (``short_of_target`` in the counts), when that removes anything."""
    newest_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    step_start = newest_user + 1 if newest_user >= 0 else len(messages)
    if newest_user < 0:  # no user message: protect the last unit as the current step
        tail = _units(messages, 0, len(messages))
        step_start = tail[-1][0] if tail else len(messages)
    keep_exact = {i for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    if newest_user >= 0:
        keep_exact.add(newest_user)
    step = [i for i in range(step_start, len(messages)) if i not in keep_exact]
    units = [[i for i in u if i not in keep_exact] for u in _units(messages, 0, step_start)]
    units = [u for u in units if u]

    fixed = sum(sizes[i] for i in keep_exact) + NOTE_TOKENS
    step_size = sum(sizes[i] for i in step)
    text = [text_tokens(m) for m in messages]
    caps: dict[int, float] = {}  # message index -> tokens of text it keeps
    room = target - fixed - step_size
    # A cut keeps MIN_KEEP_TOKENS of a text, or less in a small window: with 1,024 tokens in
    # all, 300 per output would leave no turn but the newest.
    floor = min(MIN_KEEP_TOKENS, max(MIN_CAP_TOKENS, target / 8))
    short = False
    if room < 0:
        # Dropping alone is not enough: every older turn goes and the current step's
        # outputs are cut, all to one common size.
        short = fixed + sum(_floor(sizes[i], text[i], floor) for i in step) > target
        if short and not best_effort:
            return Refusal("protected messages alone exceed the limit", fixed + step_size)
        keep_from = len(units)
        caps = _fill(step, sizes, text, target - fixed, floor)  # each at ``floor`` when short
    else:
        keep_from, caps = _keep_newest(units, sizes, text, room, floor)

    dropped = {i for u in units[:keep_from] for i in u}
    counts: dict[str, Any] = {
        "messages_removed": len(dropped), "turns_removed": keep_from, "outputs_truncated": 0,
        "bytes_removed": _bytes([messages[i] for i in sorted(dropped)]),
    }  # fmt: skip
    result: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i in dropped:
            continue
        if i in caps:
            m, removed = truncate(m, caps[i])
            if removed:
                counts["outputs_truncated"] += 1
                counts["bytes_removed"] += removed
        result.append(m)
    if not dropped and not counts["outputs_truncated"]:
        if short:
            return Refusal("protected messages alone exceed the limit", fixed + step_size)
        return Refusal("the messages already fit the target; nothing to remove", fixed + step_size)
    if short:
        counts["short_of_target"] = True
    return _with_note(result, messages, dropped, counts), counts


def _keep_newest(
    units: list[list[int]], sizes: list[float], text: list[float], room: float, floor: float
) -> tuple[int, dict[int, float]]:
    """Walk the turns newest first, keeping each whole while it fits; returns the index of the
    oldest unit kept and the cuts made on the way."""
    share = max(floor, OVERSIZED_SHARE * room)
    caps: dict[int, float] = {}
    keep_from = len(units)
    whole = [sum(sizes[i] for i in u) for u in units]
    older = sum(whole)  # of the units not yet walked
    for k in range(len(units) - 1, -1, -1):
        unit = units[k]
        older -= whole[k]
        if whole[k] <= room + ROUNDING:
            room -= whole[k]
            keep_from = k
            continue
        oversized = [i for i in unit if text[i] > share + MARKER_TOKENS]
        trimmed = whole[k] - sum(text[i] - share - MARKER_TOKENS for i in oversized)
        if oversized and trimmed <= room:
            # Its oversized outputs are cut, but no further than the older turns need.
            spend = max(trimmed, room - older)
            caps.update(_fill(unit, sizes, text, spend, floor))
            room -= spend
            keep_from = k
            continue
        # The oldest turn kept: cut to the room left, if it can keep `floor` tokens of
        # each text it cuts; else it goes with everything older.
        if sum(_floor(sizes[i], text[i], floor) for i in unit) <= room:
            caps.update(_fill(unit, sizes, text, room, floor))
            keep_from = k
            room = 0
        break
    if caps and room > 0:
        # The turn after the last one kept did not fit even cut: what it leaves goes back
        # to the outputs already cut, rather than unused.
        cut = list(caps)
        spent = sum(sizes[i] - text[i] + caps[i] + MARKER_TOKENS for i in cut)
        caps = _fill(cut, sizes, text, spent + room, floor)
    return keep_from, caps


def _fill(
    indexes: list[int], sizes: list[float], text: list[float], room: float, floor: float
) -> dict[int, float]:
    """The common cap ("water level") that makes these messages fit ``room``, per message it cuts."""
    base = sum(sizes[i] - text[i] for i in indexes)  # what a cut cannot shorten
    level = water_level([text[i] for i in indexes], room - base, floor)
    return {i: level for i in indexes if text[i] > level}


def _floor(size: float, text: float, floor: float) -> float:
    """The smallest a message can be made by cutting (not dropping) it."""
    return size if text <= floor else size - text + floor + MARKER_TOKENS


def _units(messages: list[dict[str, Any]], start: int, end: int) -> list[list[int]]:
    """Indexes in [start, end) grouped into droppable units; system messages are not in any."""
    units: list[list[int]] = []
    for i in range(start, end):
        role = messages[i].get("role")
        if role in ("system", "developer"):
            continue
        if role in ("tool", "function") and units and _is_call_unit(messages, units[-1]):
            units[-1].append(i)  # a result travels with the call that asked for it
        elif messages[i].get(CONTINUES) and units:
            units[-1].append(i)
        else:
            units.append([i])
    return units


def _is_call_unit(messages: list[dict[str, Any]], unit: list[int]) -> bool:
    head = messages[unit[0]]
    return head.get("role") == "assistant" and bool(head.get("tool_calls") or head.get("function_call"))


def _bytes(ms: list[dict[str, Any]]) -> int:
    """The messages' size as JSON; one encoding for all, as one per message is slow on a large
    conversation (only the list's brackets and separators are counted too)."""
    return len(json.dumps(ms, ensure_ascii=False, default=str).encode()) if ms else 0


def _with_note(
    result: list[dict[str, Any]], original: list[dict[str, Any]], dropped: set[int], counts: dict[str, Any]
) -> list[dict[str, Any]]:
    if not dropped:
        return result
    text = (
        f"[{len(dropped)} earlier messages ({counts['bytes_removed'] // 1024} KB) were removed by "
        "llm-gateway to fit the model's context window. Earlier tool results may need to be re-run.]"
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
    # A user note keeps "first non-system message is a user message" for strict providers,
    # in the content form the newest user message uses: a backend that took that takes this.
    form = original[newest_user].get("content") if newest_user >= 0 else None
    note: str | list[dict[str, Any]] = [{"type": "text", "text": text}] if isinstance(form, list) else text
    return [*result[:lead], {"role": "user", "content": note}, *result[lead:]]
