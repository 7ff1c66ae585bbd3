"""The per-tool output policy (``policy/tool_outputs.py``) on chat completions: an output is
a ``tool`` message, named by the assistant ``tool_calls`` entry whose ``id`` its
``tool_call_id`` answers (or a legacy ``function`` message, named by itself). Only
``content`` changes, so every result keeps its call and the pairs stay valid."""

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
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "assistant":
            for call in m.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict) and isinstance(fn.get("name"), str):
                    names[call.get("id")] = fn["name"]
            continue
        if role == "tool":
            name = names.get(m.get("tool_call_id"))
        elif role == "function":
            name = m.get("name") if isinstance(m.get("name"), str) else None
        else:
            continue
        done = handle(m.get("content"), (name,) if name else (), policy, stage, tally)
        if done.content is not m.get("content"):
            out = out if out is not None else list(messages)
            out[i] = {**m, "content": done.content}
    return ({**payload, "messages": out} if out is not None else None), tally
