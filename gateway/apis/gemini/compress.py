"""A Gemini request onto the shared compression core, and back.

The core (``policy/compress.py``) plans over a chat-shaped view: droppable units (a model turn
that calls functions travels with the user turn that answers them), protected messages
(instructions, the newest user turn, the current step) and cuttable text. Each Gemini
``contents`` entry is one view message, the plan is applied back to the original parts, and
everything the core does not touch stays as it was:

* ``systemInstruction`` is sized as a system message and never changed;
* a ``model`` turn with ``functionCall`` parts is a call unit; the ``user`` turn holding the
  ``functionResponse`` parts is its result (role ``tool`` in the view), so a call never loses
  its answer nor an answer its call, and each kept call keeps its ``thoughtSignature``;
* text that may be cut: ``text`` parts (not thoughts) and a function's output
  (``function_output.py``: Gemini CLI's ``response.output``, google-genai's ``response.result``,
  a string ``response.error``); a ``result`` that is an object or list is sized as its JSON
  text and, when cut, goes back as that text cut to head and tail (``with_output``);
  never ``functionCall`` args, thoughts, signatures or inline data;
* ``generationConfig.maxOutputTokens`` is the completion budget the core may lower.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.gemini.fields import field
from gateway.apis.gemini.function_output import output_of, with_output
from gateway.policy.compress import CompressionResult, compress

_SRC = "_llm_gateway_src"  # index of the original content a view message stands for
_PART = "_llm_gateway_part"  # index of the original part a view part stands for


def compress_gemini(
    payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
    removed_tokens: float = 0.0, prompt_tokens: int | None = None,
) -> CompressionResult:
    contents = payload.get("contents")
    if not isinstance(contents, list) or not all(isinstance(c, dict) for c in contents):
        return compress({}, error_message=error_message, context_window=context_window)  # not_applicable
    view: dict[str, Any] = {}
    instruction = field(payload, "systemInstruction")
    head = [{"role": "system", "content": _system_text(instruction), _SRC: "system"}] if instruction else []
    view["messages"] = head + [_to_view(i, c) for i, c in enumerate(contents)]
    config = field(payload, "generationConfig")
    asked = field(config, "maxOutputTokens") if isinstance(config, dict) else None
    if isinstance(asked, int):
        view["max_tokens"] = asked
    for key in ("tools", "toolConfig"):  # sized with the request, never changed
        if key in payload:
            view[key] = payload[key]
    result = compress(view, error_message=error_message, context_window=context_window,
                      removed_tokens=removed_tokens, prompt_tokens=prompt_tokens)  # fmt: skip
    if result.payload is None:
        return result
    out = dict(payload)
    out["contents"] = [_from_view(v, contents) for v in result.payload["messages"] if v.get(_SRC) != "system"]
    lowered = result.payload.get("max_tokens")
    if isinstance(config, dict) and isinstance(asked, int) and lowered != asked:
        key = "maxOutputTokens" if "maxOutputTokens" in config else "max_output_tokens"
        configs = "generationConfig" if "generationConfig" in payload else "generation_config"
        out[configs] = {**config, key: lowered}
    return CompressionResult(out, result.outcome, result.target_tokens, result.estimated_before,
                             result.estimated_after, result.report)  # fmt: skip


def _system_text(instruction: Any) -> Any:
    parts = instruction.get("parts") if isinstance(instruction, dict) else None
    if isinstance(parts, list):
        return [{"type": "opaque", "value": p} for p in parts]  # sized, never cut
    return instruction


def _to_view(index: int, content: dict[str, Any]) -> dict[str, Any]:
    parts = content.get("parts")
    role = "assistant" if content.get("role") == "model" else "user"
    v: dict[str, Any] = {"role": role, _SRC: index}
    view_parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    answers = False
    for j, part in enumerate(parts if isinstance(parts, list) else ()):
        if not isinstance(part, dict):
            view_parts.append({"type": "opaque", "value": part, _PART: j})
            continue
        output = output_of(part)
        if isinstance(part.get("text"), str) and part.get("thought") is not True:
            view_parts.append({"type": "text", "text": part["text"], _PART: j})
        elif output is not None:
            answers = True
            view_parts.append({"type": "text", "text": output.text, _PART: j})
        else:
            if field(part, "functionCall") is not None:
                calls.append({"id": f"{index}.{j}"})
            elif field(part, "functionResponse") is not None:
                answers = True
            view_parts.append({"type": "opaque", "value": part, _PART: j})  # sized as JSON, never cut
    v["content"] = view_parts
    if role == "assistant" and calls:
        v["tool_calls"] = calls
    elif role == "user" and answers:
        v["role"] = "tool"  # travels with the call unit before it
    return v


def _from_view(v: dict[str, Any], originals: list[dict[str, Any]]) -> dict[str, Any]:
    src = v.get(_SRC)
    content = v.get("content")
    if not isinstance(src, int):
        # A message the core added (its note about what was removed).
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or ())
        return {"role": "user", "parts": [{"text": text}]}
    original = originals[src]
    parts = original.get("parts")
    if not isinstance(parts, list) or not isinstance(content, list):
        return original
    texts: dict[int, str] = {}
    added: list[dict[str, Any]] = []
    for part in content:
        if _PART not in part:
            added.append({"text": part.get("text", "")})
        elif part.get("type") == "text":
            texts[part[_PART]] = part["text"]
    rebuilt = [_rebuild(j, p, texts) for j, p in enumerate(parts)]
    if not added and all(r is p for r, p in zip(rebuilt, parts, strict=True)):
        return original
    return {**original, "parts": added + rebuilt}


def _rebuild(j: int, part: Any, texts: dict[int, str]) -> Any:
    new = texts.get(j)
    if new is None or not isinstance(part, dict):
        return part
    if isinstance(part.get("text"), str):
        return part if part["text"] == new else {**part, "text": new}
    output = output_of(part)
    return part if output is None or output.text == new else with_output(part, output, new)
