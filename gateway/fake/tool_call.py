"""The ``tool`` scenario: the model calls a shell tool the request declares, then answers.

The first answer to a conversation is one call, in the API's own shape (chat ``tool_calls``,
Messages ``tool_use``, Responses ``function_call``), to Claude Code's ``Bash``, Codex's
``exec_command`` or ``shell``, else the first function declared. Once the request carries a
tool's result, the answer is text quoting it, so whoever runs the agent sees the round trip.
A request that declares no tool (an agent's side requests: titles, summaries) gets a normal
answer: there is nothing to call. Any other tool is called with arguments its schema accepts,
and a request that asks for JSON gets its final answer in its schema (structured.py), as the
real APIs answer both: the OpenAI Agents SDK refuses prose to an agent with an ``output_type``
(ModelBehaviorError) and a tool call missing its enum or object arguments.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from gateway.fake import structured
from gateway.fake.chat import chat_completion, chunk, stream_events, wants_usage
from gateway.fake.messages import anthropic_message, anthropic_stream, sse
from gateway.fake.responses import Seq, response_object, responses_stream
from gateway.fake.steps import Reply, Step, Stream

Api = Literal["chat", "messages", "responses"]
COMMAND = "echo hello from a shell tool"
# The agents' shell tools and the arguments each reads.
SHELLS: dict[str, Callable[[str], dict[str, Any]]] = {
    "Bash": lambda cmd: {"command": cmd, "description": "Print a greeting"},  # Claude Code
    "exec_command": lambda cmd: {"cmd": cmd},  # Codex
    "shell": lambda cmd: {"command": ["bash", "-lc", cmd]},  # older Codex
}
_RESULTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})


def answer(api: Api, payload: dict[str, Any], model: str) -> tuple[Step | None, str]:
    """What the model answers, and how the fake's log line says it (None: a normal answer)."""
    result = _last_result(api, payload)
    if result is not None:
        said = f"answer (tool result came back: {result.strip()[:60]!r})"
        document = _asked_json(api, payload)
        if document is not None:
            return _text(api, payload, model, document), said + " in JSON"
        text = f"The tool answered: {result.strip()[:200] or '(nothing)'}"
        return _text(api, payload, model, text), said
    tool = _pick_tool(api, payload)
    if tool is None:
        return None, "answer (no tool declared)"
    name, args = tool
    return _call(api, payload, model, name, args), f"tool call {name}"


def _declared(api: Api, payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, JSON schema) of each function tool the request declares."""
    out = []
    for t in payload.get("tools") or ():
        if not isinstance(t, dict):
            continue
        if api == "chat":
            fn = t.get("function") if t.get("type") == "function" else None
            name, schema = (fn.get("name"), fn.get("parameters")) if isinstance(fn, dict) else (None, None)
        elif api == "messages":  # a server tool (web_search_…) has a versioned type and no schema
            name, schema = t.get("name"), t.get("input_schema")
            name = name if t.get("type") in (None, "custom") else None
        else:
            name, schema = (t.get("name"), t.get("parameters")) if t.get("type") == "function" else (None, None)
        if isinstance(name, str):
            out.append((name, schema if isinstance(schema, dict) else {}))
    return out


def _pick_tool(api: Api, payload: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    declared = _declared(api, payload)
    for name, args in SHELLS.items():
        if any(n == name for n, _ in declared):
            return name, args(COMMAND)
    if not declared:
        return None
    name, schema = declared[0]
    return name, arguments(schema)


def arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """Arguments a tool's JSON (or Gemini) schema accepts: the smallest instance of it, each
    required free-text field the shell command, so that whoever runs the agent sees it come back."""
    args = structured.instance(schema) if schema else {}
    if not isinstance(args, dict):  # a schema that is no object's: nothing to fill
        return {}
    props = schema.get("properties")
    props = props if isinstance(props, dict) else {}
    for p in schema.get("required") or ():
        field = props.get(p) if isinstance(p, str) else None
        if isinstance(field, dict) and str(field.get("type")).lower() == "string" and not _FREE_TEXT_BOUNDS & field.keys():
            args[p] = COMMAND
    return args


# What makes a string field something other than free text the command can fill.
_FREE_TEXT_BOUNDS = frozenset({"enum", "const", "format", "pattern", "maxLength", "minLength"})


def _asked_json(api: Api, payload: dict[str, Any]) -> str | None:
    """The answer's text when the request asks for JSON, each API its own way (structured.py)."""
    return (structured.chat_json(payload) if api == "chat" else structured.messages_json(payload)
            if api == "messages" else structured.responses_json(payload))  # fmt: skip


def _last_result(api: Api, payload: dict[str, Any]) -> str | None:
    """The text of the last tool result the request carries; None when it carries none."""
    found: list[Any] = []
    if api == "responses":
        items = payload.get("input")
        found = [i.get("output") for i in items if isinstance(i, dict) and i.get("type") in _RESULTS] \
            if isinstance(items, list) else []  # fmt: skip
    else:
        for m in payload.get("messages") or ():
            if not isinstance(m, dict):
                continue
            if api == "chat" and m.get("role") in ("tool", "function"):
                found.append(m.get("content"))
            elif api == "messages" and isinstance(m.get("content"), list):
                found += [b.get("content") for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
    return _text_of(found[-1]) if found else None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _text(api: Api, payload: dict[str, Any], model: str, text: str) -> Step:
    words = tuple(w if i == 0 else " " + w for i, w in enumerate(text.split(" ")))
    if not payload.get("stream"):
        body = (chat_completion(model, text) if api == "chat" else anthropic_message(model, text)
                if api == "messages" else response_object(model, text))  # fmt: skip
        return Reply(200, body)
    if api == "chat":
        usage = wants_usage(payload)
        return Stream(stream_events(model, words, include_usage=usage))
    return Stream(anthropic_stream(model, words) if api == "messages" else responses_stream(model, words), then="eof")


def _call(api: Api, payload: dict[str, Any], model: str, name: str, args: dict[str, Any]) -> Step:
    # Ids are fresh per call: Claude Code merges assistant messages that share an id.
    tag = uuid.uuid4().hex[:12]
    arguments = json.dumps(args)
    stream = bool(payload.get("stream"))
    if api == "chat":
        return _chat_call(payload, model, f"call_{tag}", name, arguments, stream)
    if api == "messages":
        return _messages_call(model, f"msg_{tag}", f"toolu_{tag}", name, args, stream)
    return _responses_call(model, tag, name, arguments, stream)


def _chat_call(payload: dict[str, Any], model: str, call_id: str, name: str, arguments: str, stream: bool) -> Step:
    if not stream:
        body = chat_completion(model, "")
        body["choices"][0].update(finish_reason="tool_calls", message={"role": "assistant", "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]})  # fmt: skip
        return Reply(200, body)
    head = {"index": 0, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
    events: list[Any] = [
        chunk({"role": "assistant", "content": None, "tool_calls": [head]}, model=model),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": arguments}}]}, model=model),
        chunk({}, "tool_calls", model=model),
    ]
    if wants_usage(payload):
        events.append({"id": "chatcmpl-fake123", "object": "chat.completion.chunk", "created": int(time.time()),
                       "model": model, "choices": [],
                       "usage": {"prompt_tokens": 11, "completion_tokens": 9, "total_tokens": 20}})  # fmt: skip
    return Stream(events)


def _messages_call(model: str, msg_id: str, use_id: str, name: str, args: dict[str, Any], stream: bool) -> Step:
    block = {"type": "tool_use", "id": use_id, "name": name, "input": args}
    if not stream:
        body = anthropic_message(model)
        body.update(id=msg_id, content=[block], stop_reason="tool_use")
        return Reply(200, body)
    start = {**anthropic_message(model), "id": msg_id, "content": [], "stop_reason": None}
    return Stream([
        sse("message_start", {"type": "message_start", "message": start}),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": {**block, "input": {}}}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(args)}}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                              "usage": {"output_tokens": 9}}),
        sse("message_stop", {"type": "message_stop"}),
    ], then="eof")  # fmt: skip


def _responses_call(model: str, tag: str, name: str, arguments: str, stream: bool) -> Step:
    item = {"id": f"fc_{tag}", "type": "function_call", "status": "completed", "arguments": arguments,
            "call_id": f"call_{tag}", "name": name}  # fmt: skip
    done = {**response_object(model), "id": f"resp_{tag}", "output": [item]}
    if not stream:
        return Reply(200, done)
    seq = Seq()
    shell = {**done, "status": "in_progress", "output": [], "usage": None}
    where = {"item_id": item["id"], "output_index": 0}
    return Stream([
        seq("response.created", response=shell),
        seq("response.in_progress", response=shell),
        seq("response.output_item.added", output_index=0, item={**item, "status": "in_progress", "arguments": ""}),
        seq("response.function_call_arguments.delta", **where, delta=arguments),
        seq("response.function_call_arguments.done", **where, arguments=arguments),
        seq("response.output_item.done", output_index=0, item=item),
        seq("response.completed", response=done),
    ], then="eof")  # fmt: skip
