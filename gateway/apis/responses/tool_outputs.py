"""The per-tool output policy (``policy/tool_outputs.py``) on OpenAI Responses: an output is
a ``*_output`` item, named by the call item whose ``call_id`` it answers (a function in a
namespace answers to ``namespace.name`` and to ``name``). Only ``output`` changes, so
every output keeps its ``call_id`` and the pairs stay valid. With ``previous_response_id``
the call may be stored upstream: its output is then unnamed and only a ``*`` rule
matches it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.tool_outputs import Stage, Tally, ToolOutputPolicy, handle

# Outputs whose ``output`` is text (a string or text parts); a computer call's is a screenshot.
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
# Calls without a ``name`` field, named after their hosted tool.
_HOSTED = {"local_shell_call": "local_shell", "computer_call": "computer"}


def apply_tool_policy(
    payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage
) -> tuple[dict[str, Any] | None, Tally]:
    tally = Tally()
    items = payload.get("input")
    if not isinstance(items, list):
        return None, tally
    names: dict[Any, tuple[str, ...]] = {}
    out: list[Any] | None = None
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind in _OUTPUTS:
            done = handle(item.get("output"), names.get(item.get("call_id"), ()), policy, stage, tally)
            if done.content is not item.get("output"):
                out = out if out is not None else list(items)
                out[i] = {**item, "output": done.content}
        elif "call_id" in item:
            names[item["call_id"]] = _names(item, kind)
    return ({**payload, "input": out} if out is not None else None), tally


def _names(item: dict[str, Any], kind: Any) -> tuple[str, ...]:
    name = item.get("name")
    if not isinstance(name, str):
        hosted = _HOSTED.get(kind) if isinstance(kind, str) else None
        return (hosted,) if hosted else ()
    namespace = item.get("namespace")
    return (f"{namespace}.{name}", name) if isinstance(namespace, str) and namespace else (name,)
