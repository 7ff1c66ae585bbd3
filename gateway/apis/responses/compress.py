"""OpenAI Responses ``input`` items onto the shared compression core, and back.

The core (``policy/compress.py``) plans over a chat-shaped view; the plan is applied to
the original items, so whatever it does not touch stays byte-identical:

* ``instructions``, system/developer messages and ``additional_tools`` items (tool
  definitions) are kept exactly;
* a run of model output items (``reasoning``, an assistant ``message``,
  ``function_call``, ``custom_tool_call``, ``local_shell_call``, ``compaction``, …) is one
  assistant turn; the tool outputs after it (``function_call_output``,
  ``custom_tool_call_output``, …) travel with it, so no output loses its call (matched by
  ``call_id`` in the API) and reasoning is kept or dropped with its turn, never edited;
* a reasoning item holds the calls after it up to the next user, system or developer message,
  reasoning item or assistant message, outputs between them or not: parallel calls sent as
  ``rs, fc1, out1, fc2, out2`` are one unit, as OpenAI refuses a call without its reasoning
  ("Item 'fc_…' of type 'function_call' was provided without its required 'reasoning' item:
  'rs_…'.", https://github.com/mastra-ai/mastra/issues/8738,
  https://github.com/cline/cline/issues/12242);
* cuttable text: ``input_text`` / ``output_text`` parts and tool outputs; never call
  arguments, reasoning, or encrypted content.

With ``previous_response_id`` the request carries only the new items and the stored
conversation cannot be shortened here: the single retry asks the API to do it
(``truncation: "auto"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.policy.compress import CompressionResult, compress
from gateway.policy.compress_plan import CONTINUES
from gateway.policy.cut import cap_content
from gateway.policy.tokens import request_tokens

_SRC = "_llm_gateway_src"  # indexes of the original items a view message stands for
_PART = "_llm_gateway_part"  # (item index, part index or -1 for a tool output string)

_TOOLS_ITEM = "additional_tools"  # translate/responses_chat/additional_tools.py
_OUTPUTS = frozenset({
    "function_call_output", "custom_tool_call_output", "local_shell_call_output",
    "computer_call_output", "mcp_approval_response",
})  # fmt: skip


def compress_input(
    payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
    removed_tokens: float = 0.0, prompt_tokens: int | None = None,
) -> CompressionResult:
    if payload.get("previous_response_id"):
        return _ask_for_truncation(payload)
    items = payload.get("input")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return _unchanged("input is not a list of items")
    view: dict[str, Any] = {k: v for k, v in payload.items() if k not in ("input", "instructions")}
    instructions = payload.get("instructions")
    head = [{"role": "system", "content": instructions, _SRC: "head"}] if instructions else []
    if "max_output_tokens" in payload:
        view["max_tokens"] = payload["max_output_tokens"]
        view.pop("max_output_tokens")
    view["messages"] = head + _to_view(items)
    result = compress(view, error_message=error_message, context_window=context_window,
                    removed_tokens=removed_tokens, prompt_tokens=prompt_tokens)
    if result.payload is None:
        return result
    out = dict(payload)
    out["input"] = [item for v in result.payload["messages"] if v.get(_SRC) != "head"
                    for item in _from_view(v, items)]  # fmt: skip
    if "max_tokens" in result.payload and result.payload["max_tokens"] != view.get("max_tokens"):
        out["max_output_tokens"] = result.payload["max_tokens"]
    return CompressionResult(
        out, result.outcome, result.target_tokens,
        result.estimated_before, result.estimated_after, result.report,
    )  # fmt: skip


def _ask_for_truncation(payload: Mapping[str, Any]) -> CompressionResult:
    size = round(request_tokens({"messages": []}))
    if payload.get("truncation") == "auto":
        return _unchanged("the stored conversation is already truncated by the API")
    out = {**payload, "truncation": "auto"}
    return CompressionResult(out, "applied", 0, size, size, {"truncation": "auto"})


def _unchanged(why: str) -> CompressionResult:
    return CompressionResult(None, "not_applicable", 0, 0, 0, {"reason": why})


def _to_view(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    view: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None  # the assistant turn being collected
    reasoned = False  # whether a reasoning item holds the calls that come next
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        role = item.get("role")
        if kind == "message" and role in ("user", "system", "developer"):
            turn, reasoned = None, False
            view.append({"role": role, "content": _parts(i, item.get("content")), _SRC: [i]})
        elif kind == _TOOLS_ITEM:
            # Codex's tool definitions (responses-lite): kept as the developer's messages are,
            # never cut (an opaque part). As a turn it went first, and the rescued request
            # offered the model no tools.
            turn, reasoned = None, False
            view.append({"role": "developer", "content": [{"type": "opaque", "value": item.get("tools"),
                                                           _PART: (i, None)}], _SRC: [i]})  # fmt: skip
        elif kind in _OUTPUTS:
            turn = None
            view.append({"role": "tool", "content": _output_parts(i, item.get("output")), _SRC: [i]})
        else:
            if turn is None:
                turn = {"role": "assistant", "content": [], _SRC: []}
                if kind in ("reasoning", "message"):
                    reasoned = False  # the model's next step, which the one before does not hold
                elif reasoned:
                    turn[CONTINUES] = True  # a call after an output, the reasoning's still
                view.append(turn)
            reasoned = reasoned or kind == "reasoning"
            turn[_SRC].append(i)
            if kind == "message":
                turn["content"].extend(_parts(i, item.get("content")))
            else:
                # Sized as JSON and never cut: it has no top-level "text".
                turn["content"].append({**item, _PART: (i, None)})
            if "call_id" in item:
                turn.setdefault("tool_calls", []).append({"id": item["call_id"]})
    return view


def _parts(i: int, content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content, _PART: (i, -1)}]
    if content is None:
        return []  # a message item without content (it made the rescue a 500)
    if not isinstance(content, list):
        return [{"type": "opaque", "value": content, _PART: (i, None)}]
    out: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"], _PART: (i, j)})
        else:
            out.append({"type": "opaque", "value": part, _PART: (i, None)})
    return out


def _output_parts(i: int, output: Any) -> list[dict[str, Any]]:
    if isinstance(output, str):
        return [{"type": "text", "text": output, _PART: (i, -1)}]
    return _parts(i, output) if isinstance(output, list) else [{"type": "opaque", "value": output}]


def _from_view(v: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    src = v.get(_SRC)
    content = v.get("content")
    if not isinstance(src, list):
        # A message the core added (its note about what was removed).
        text = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content or [] if isinstance(p, dict))
        return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}]
    texts: dict[tuple[int, int], str] = {}
    added: list[str] = []
    for part in content if isinstance(content, list) else []:
        where = part.get(_PART)
        if where is None and isinstance(part.get("text"), str):
            added.append(part["text"])
        elif where is not None and where[1] is not None and part.get("type") == "text":
            texts[(where[0], where[1])] = part["text"]
    out = [_rebuild(i, items[i], texts) for i in src]
    if added and out:  # the core's note, merged into the first user message it kept
        first = out[0]
        parts = first.get("content")
        body = [{"type": "input_text", "text": parts}] if isinstance(parts, str) else list(parts or [])
        out[0] = {**first, "content": [{"type": "input_text", "text": t} for t in added] + body}
    return out


def _rebuild(i: int, item: dict[str, Any], texts: dict[tuple[int, int], str]) -> dict[str, Any]:
    kind = item.get("type", "message")
    key = "output" if kind in _OUTPUTS else "content"
    value = item.get(key)
    if isinstance(value, str):
        new = texts.get((i, -1), value)
        return item if new == value else {**item, key: new}
    if isinstance(value, list):
        parts = [
            {**p, "text": texts[(i, j)]} if (i, j) in texts and texts[(i, j)] != p.get("text") else p
            for j, p in enumerate(value)
        ]
        if any(a is not b for a, b in zip(parts, value, strict=True)):
            return {**item, key: parts}
    return item


def cap_outputs(payload: Mapping[str, Any], max_tokens: int) -> tuple[dict[str, Any] | None, int]:
    """Each tool output item's ``output`` capped on its own (the opt-in proactive cap)."""
    items = payload.get("input")
    if not isinstance(items, list):
        return None, 0
    out: list[Any] | None = None
    capped = 0
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("type") not in _OUTPUTS:
            continue
        output, removed = cap_content(item.get("output"), max_tokens)
        if removed:
            out = out if out is not None else list(items)
            out[i] = {**item, "output": output}
            capped += 1
    return ({**payload, "input": out} if out is not None else None), capped
