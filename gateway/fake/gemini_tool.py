"""The ``tool`` scenario on the Gemini API: a call of a tool the request declares, then an
answer quoting its result (as :mod:`gateway.fake.tool_call` does for the other APIs).

Gemini CLI's shell tool is ``run_shell_command``; a client translated onto the Gemini API
declares its own (Claude Code's ``Bash``, Codex's ``exec_command``), called as
:mod:`gateway.fake.tool_call` calls them on the other APIs. Gemini CLI headless often declares
no shell (its capture, tests/corpus/requests/gemini-cli-0.61-first.json), so
``list_directory`` of the working folder comes next, then the first function declared. The call carries an ``id`` and
a ``thoughtSignature``, as Gemini 3 answers; its id is returned so the fake can hold the
replay to the signature rule (gemini_rules.py), and logged with the call and with the result
that answers it.
"""

from __future__ import annotations

from typing import Any

from gateway.fake import gemini
from gateway.fake.steps import Reply, Step
from gateway.fake.tool_call import COMMAND, SHELLS, arguments

_PREFERRED: dict[str, dict[str, Any]] = {
    "run_shell_command": {"command": COMMAND, "description": "Print a greeting"},
    **{name: args(COMMAND) for name, args in SHELLS.items()},
    "list_directory": {"dir_path": "."},
}


def _declared(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for tool in payload.get("tools") or ():
        if not isinstance(tool, dict):
            continue
        decls = tool.get("functionDeclarations") or tool.get("function_declarations") or ()
        for d in decls:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                schema: dict[str, Any] = next((d[k] for k in ("parametersJsonSchema", "parameters_json_schema", "parameters")
                               if isinstance(d.get(k), dict)), {})  # fmt: skip
                out.append((d["name"], schema))
    return out


def _last_result(payload: dict[str, Any]) -> tuple[str, Any] | None:
    """(the text of the last function response, the id it answers) or None."""
    found: list[dict[str, Any]] = []
    for content in payload.get("contents") or ():
        for part in (content.get("parts") or ()) if isinstance(content, dict) else ():
            answer = part.get("functionResponse") or part.get("function_response") if isinstance(part, dict) else None
            if isinstance(answer, dict):
                found.append(answer)
    if not found:
        return None
    result, call_id = found[-1].get("response"), found[-1].get("id")
    if isinstance(result, dict):  # Gemini CLI answers {"output": "..."}; others any object
        inner = result.get("output", result.get("result"))
        return (inner if isinstance(inner, str) else str(result)), call_id
    return str(result), call_id


def answer(call: Any, text_stream: bool) -> tuple[Step | None, str, str | None]:
    """(the step, the log's words, the id of the call made or None); the step None: a normal
    answer (no tool declared). ``call`` is the upstream's GeminiCall."""
    payload, model = call.payload, call.model
    answered = _last_result(payload)
    if answered is not None:
        result, answered_id = answered
        document = gemini.json_answer(payload)  # asked for JSON: answered in its schema
        text = document if document is not None else f"The tool answered: {result.strip()[:200] or '(nothing)'}"
        words = tuple(w if i == 0 else " " + w for i, w in enumerate(text.split(" ")))
        step: Step = (gemini.stream(gemini.stream_chunks(model, words), call.framing) if text_stream
                      else Reply(200, gemini.answer(model, text)))  # fmt: skip
        said = f"answer (tool result came back: {result.strip()[:60]!r}){' in JSON' if document is not None else ''}"
        return step, f"{said} to call {answered_id or '-'}", None
    declared = _declared(payload)
    if not declared:
        return None, "answer (no tool declared)", None
    names = [n for n, _ in declared]
    name = next((n for n in _PREFERRED if n in names), names[0])
    args = dict(_PREFERRED[name]) if name in _PREFERRED else arguments(dict(declared)[name])
    part, call_id = gemini.function_call(model, name, args)
    body = gemini.response(model, [part], "STOP", gemini.usage(gemini.estimate_tokens(payload), 9))
    # The id in the log: a reader (or test) sees the result come back to the call it answers.
    said = f"tool call {name} {call_id}"
    if text_stream:
        return gemini.stream([body], call.framing), said, call_id
    return Reply(200, body), said, call_id
