"""The per-tool output policy (``policy/tool_outputs.py``) on Anthropic Messages: an output
is a ``tool_result`` block, named by the assistant ``tool_use`` block whose ``id`` its
``tool_use_id`` answers. Only its ``content`` changes (and ``is_error``, set on an
excluded output, which is an error to the model); ``cache_control`` and the block order
stay, so the pairs stay valid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.tool_outputs import Stage, Tally, ToolOutputPolicy, handle


def apply_tool_policy(
    payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage
) -> tuple[dict[str, Any] | None, Tally]:
    tally = Tally()
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return None, tally
    names: dict[Any, str] = {}
    out: list[Any] | None = None
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m, dict) else None
        if not isinstance(blocks, list):
            continue
        if m.get("role") == "assistant":
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_use" and isinstance(b.get("name"), str):
                    names[b.get("id")] = b["name"]
            continue
        new_blocks: list[Any] | None = None
        for j, b in enumerate(blocks):
            if not isinstance(b, dict) or b.get("type") != "tool_result":
                continue
            name = names.get(b.get("tool_use_id"))
            done = handle(b.get("content"), (name,) if name else (), policy, stage, tally)
            if done.content is b.get("content"):
                continue
            block = {**b, "content": done.content}
            if done.excluded:
                block["is_error"] = True
            new_blocks = new_blocks if new_blocks is not None else list(blocks)
            new_blocks[j] = block
        if new_blocks is not None:
            out = out if out is not None else list(messages)
            out[i] = {**m, "content": new_blocks}
    return ({**payload, "messages": out} if out is not None else None), tally
