"""Anthropic Messages onto the shared compression core, and back.

The core (``policy/compress.py``) plans over a chat-shaped conversation: droppable units
(an assistant tool call travels with its results), protected messages (system, the
newest user message, the current step) and cuttable text. An Anthropic conversation is
mapped onto that view, planned there, and the plan is applied back to the original
blocks, so everything the core does not touch stays byte-identical:

* top-level ``system`` is sized as a system message and never changed; so are
  ``role: "system"`` entries inside ``messages`` (Claude Code sends them mid-conversation),
  though one the drop would leave first is moved to where Anthropic takes it
  (``_systems_placed``);
* an assistant message with ``tool_use`` blocks is a call unit; the following user
  message that carries the ``tool_result`` blocks is its result (so the two are dropped
  together and a result never loses its call);
* text that may be cut: ``text`` blocks and ``tool_result`` content; never
  ``tool_use`` input, ``thinking`` / ``redacted_thinking`` (signed), images or documents;
  on the models that bind thinking to what preceded it, the retry asks Anthropic to drop the
  blocks after the first message the compression changed (``_first_change``,
  ``binding.dropping_bound``) instead of refusing them;
* kept blocks keep every other field (``cache_control`` included);
* a lowered ``max_tokens`` takes thinking's ``budget_tokens`` below it (``output_budget.py``).

A user message that carries tool results is not "the newest user message": the newest
user turn is the last one the user typed, and what follows it is the current step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis import output_budget
from gateway.apis.messages.binding import BINDING_BETA, DROP_BLOCK, dropping_bound
from gateway.apis.messages.claude_models import binds_thinking
from gateway.policy.compress import CompressionResult, compress
from gateway.policy.cut import cap_content
from gateway.policy.foreign_reasoning import THOUGHT, thinking_left_out

_SRC = "_llm_gateway_src"  # index of the original message a view message stands for
_BLOCK = "_llm_gateway_block"  # index of the original block a view part stands for
_SUB = "_llm_gateway_sub"  # index inside a tool_result's content list


def compress_messages(
    payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
    removed_tokens: float = 0.0, prompt_tokens: int | None = None,
) -> CompressionResult:
    messages = payload.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return compress(payload, error_message=error_message, context_window=context_window,
                    removed_tokens=removed_tokens, prompt_tokens=prompt_tokens)
    view: dict[str, Any] = {k: v for k, v in payload.items() if k not in ("messages", "system")}
    system = payload.get("system")
    head = [{"role": "system", "content": system, _SRC: "top-level"}] if system else []
    view["messages"] = head + [_to_view(i, m) for i, m in enumerate(messages)]
    result = compress(view, error_message=error_message, context_window=context_window,
                    removed_tokens=removed_tokens, prompt_tokens=prompt_tokens)
    if result.payload is None:
        return result
    out = dict(payload)
    planned = result.payload["messages"]
    kept = [_from_view(v, messages) for v in planned if v.get(_SRC) != "top-level"]
    out["messages"] = _systems_placed(kept, messages)
    report = dict(result.report)
    headers: tuple[tuple[str, str], ...] = ()
    model = payload.get("model")
    since = _first_change(out["messages"], messages)
    if isinstance(model, str) and binds_thinking(model) and _thinking_count(out["messages"][since:]):
        thinking = out.get("thinking")
        if not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
            out["thinking"] = dropping_bound(thinking)
            report["thinking_binding"] = DROP_BLOCK
            headers = (("anthropic-beta", BINDING_BETA),)
        else:  # thinking turned off: the blocks go by hand, as the same page says
            unbound = thinking_left_out(out, since=since)
            if unbound is not None:
                removed = _thinking_count(out["messages"]) - _thinking_count(unbound["messages"])
                report["thinking_removed"] = removed
                out = unbound
    lowered = result.payload.get("max_tokens")
    if isinstance(lowered, int) and lowered != payload.get("max_tokens"):
        # Thinking's budget is held below the lowered one, or Anthropic refuses the retry
        # ("`max_tokens` must be greater than `thinking.budget_tokens`").
        out = output_budget.messages(out, lowered) or out
    return CompressionResult(
        out, result.outcome, result.target_tokens,
        result.estimated_before, result.estimated_after, report, headers,
    )  # fmt: skip


def _systems_placed(new: list[dict[str, Any]], originals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``new`` with the ``role: "system"`` entries the drop left at its head moved to where
    Anthropic takes one.

    The core keeps each system entry where it stood, so one that followed a dropped turn (Claude
    Code's, after the user's first prompt) comes first, which Anthropic refuses: a system entry
    must follow a user turn and precede an assistant turn or end the array, and may not stand next
    to another (the "Placement rules" of
    https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages; the
    words Anthropic answers with are in ``fake/messages_rules.py``). They go, in their order,
    after the first user turn that an assistant turn, a system entry or the end follows: the
    note about what was removed, the kept user turn it opens, or else the newest user turn.
    Everything they preceded was dropped, so from there they still precede all that is kept.
    Several become one entry holding each one's blocks in turn; so does one that lands before a
    kept system entry, with that entry's blocks last."""
    lead = _leading_systems(new)
    stay = _leading_systems(originals)  # where the client itself put them
    moved = new[stay:lead]
    if not moved:
        return new
    rest = new[:stay] + new[lead:]
    for at in range(stay + 1, len(rest) + 1):
        if rest[at - 1].get("role") != "user":
            continue
        following = rest[at] if at < len(rest) else None
        if following is None or following.get("role") == "assistant":
            return [*rest[:at], _one_system(moved), *rest[at:]]
        if following.get("role") == "system":
            return [*rest[:at], _one_system([*moved, following]), *rest[at + 1 :]]
    return new  # no user turn to follow: nothing Anthropic would take either way


def _leading_systems(messages: list[dict[str, Any]]) -> int:
    n = 0
    while n < len(messages) and messages[n].get("role") == "system":
        n += 1
    return n


def _one_system(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """One system entry out of several: their blocks in order, and their other fields (a
    directive's ``output_config``) with a later entry's over an earlier one's."""
    if len(entries) == 1:
        return entries[0]
    merged: dict[str, Any] = {}
    blocks: list[Any] = []
    for entry in entries:
        merged.update({k: v for k, v in entry.items() if k != "content"})
        content = entry.get("content")
        if isinstance(content, list):
            blocks.extend(content)
        elif content:
            blocks.append({"type": "text", "text": content})
    return {**merged, "role": "system", "content": blocks}


def _first_change(new: list[dict[str, Any]], originals: list[dict[str, Any]]) -> int:
    """The index of the first message that is not the client's own at that place.

    Claude's thinking is bound to what preceded it: a replayed thinking or redacted_thinking
    block is taken only while the top-level ``system``, ``tools`` and every message before it
    are as they were when Claude wrote it; otherwise that block and every later one are refused
    ("messages.N.content.M: Invalid `signature` in `thinking` block. The block is bound to a
    different conversation. …": https://platform.claude.com/docs/en/build-with-claude/preserved-thinking,
    https://platform.claude.com/docs/en/build-with-claude/thinking-troubleshooting, and
    …/preserved-thinking/fix-bound-to-a-different-conversation, which warns that leaving out
    only the block the error names is not enough). That check runs on the models
    ``claude_models.binds_thinking`` names; for them a retry with thinking after this index
    asks Anthropic to drop the blocks that fail it (``binding.dropping_bound``: the page's remedy);
    with thinking turned off they are left out by hand (``thinking_left_out``), as the page
    says. The older models take the kept turns' thinking as it is. A client's name routed under
    a binding model's name is not seen here (the client's payload is compressed before its
    route renames it)."""
    for i, (m, original) in enumerate(zip(new, originals, strict=False)):
        if m is not original:
            return i
    return min(len(new), len(originals))


def _thinking_count(messages: list[Any]) -> int:
    count = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) and m.get("role") == "assistant" else None
        if isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict) and b.get("type") in THOUGHT)
    return count


def _to_view(index: int, m: dict[str, Any]) -> dict[str, Any]:
    content = m.get("content")
    role = m.get("role")
    v: dict[str, Any] = {"role": role, _SRC: index}
    if not isinstance(content, list):
        v["content"] = content
        return v
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    results = False
    for j, block in enumerate(content):
        if not isinstance(block, dict):
            parts.append({"type": "opaque", "value": block, _BLOCK: j})
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"], _BLOCK: j})
        elif kind == "tool_result":
            results = True
            parts.extend(_result_parts(j, block))
        else:
            if kind in ("tool_use", "server_tool_use"):
                calls.append({"id": block.get("id")})
            # Sized as JSON by the core, never cut: it has no top-level "text".
            parts.append({**block, _BLOCK: j})
    v["content"] = parts
    if role == "assistant" and calls:
        v["tool_calls"] = calls
    elif role == "user" and results:
        v["role"] = "tool"  # travels with the call unit before it
    return v


def _result_parts(j: int, block: dict[str, Any]) -> list[dict[str, Any]]:
    inner = block.get("content")
    if isinstance(inner, str):
        return [{"type": "text", "text": inner, _BLOCK: j}]
    shell = {k: v for k, v in block.items() if k != "content"}
    parts: list[dict[str, Any]] = [{"type": "result_head", "value": shell, _BLOCK: j}]
    if isinstance(inner, list):
        for s, sub in enumerate(inner):
            if isinstance(sub, dict) and sub.get("type") == "text" and isinstance(sub.get("text"), str):
                parts.append({"type": "text", "text": sub["text"], _BLOCK: j, _SUB: s})
            else:
                parts.append({**sub, _BLOCK: j, _SUB: s} if isinstance(sub, dict) else
                             {"type": "opaque", "value": sub, _BLOCK: j, _SUB: s})  # fmt: skip
    return parts


def _from_view(v: dict[str, Any], originals: list[dict[str, Any]]) -> dict[str, Any]:
    src = v.get(_SRC)
    if not isinstance(src, int):
        # A message the core added (its note about what was removed).
        return {"role": "user", "content": v.get("content")}
    original = originals[src]
    content = v.get("content")
    if not isinstance(original.get("content"), list):
        return original if content is original.get("content") else {**original, "content": content}
    if not isinstance(content, list):
        return original
    blocks = original["content"]
    texts: dict[tuple[int, int | None], str] = {}
    added: list[dict[str, Any]] = []
    for part in content:
        if _BLOCK not in part:
            added.append({"type": "text", "text": part.get("text", "")})
        elif part.get("type") == "text":
            texts[(part[_BLOCK], part.get(_SUB))] = part["text"]
    rebuilt = [_rebuild(j, b, texts) for j, b in enumerate(blocks)]
    if not added and all(r is b for r, b in zip(rebuilt, blocks, strict=True)):
        return original
    return {**original, "content": added + rebuilt}


def _rebuild(j: int, block: Any, texts: dict[tuple[int, int | None], str]) -> Any:
    if not isinstance(block, dict):
        return block
    if block.get("type") == "text" and (j, None) in texts and texts[(j, None)] != block.get("text"):
        return {**block, "text": texts[(j, None)]}
    if block.get("type") != "tool_result":
        return block
    inner = block.get("content")
    if isinstance(inner, str):
        new = texts.get((j, None), inner)
        return block if new == inner else {**block, "content": new}
    if isinstance(inner, list):
        subs = [
            {**sub, "text": texts[(j, s)]}
            if (j, s) in texts and isinstance(sub, dict) and texts[(j, s)] != sub.get("text")
            else sub
            for s, sub in enumerate(inner)
        ]
        if any(a is not b for a, b in zip(subs, inner, strict=True)):
            return {**block, "content": subs}
    return block


def cap_tool_results(payload: Mapping[str, Any], max_tokens: int) -> tuple[dict[str, Any] | None, int]:
    """Each ``tool_result`` block's content capped on its own (the opt-in proactive cap)."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None, 0
    out: list[Any] | None = None
    capped = 0
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m, dict) and m.get("role") == "user" else None
        if not isinstance(blocks, list):
            continue
        new_blocks: list[Any] | None = None
        for j, block in enumerate(blocks):
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            content, removed = cap_content(block.get("content"), max_tokens)
            if removed:
                new_blocks = new_blocks if new_blocks is not None else list(blocks)
                new_blocks[j] = {**block, "content": content}
                capped += 1
        if new_blocks is not None:
            out = out if out is not None else list(messages)
            out[i] = {**m, "content": new_blocks}
    return ({**payload, "messages": out} if out is not None else None), capped
