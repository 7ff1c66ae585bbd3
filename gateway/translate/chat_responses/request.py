"""OpenAI chat completions client → OpenAI Responses upstream: the request.

What is carried, dropped or refused, each with its reason, is the table in
``docs/translation/chat_responses.md``; this module is that table in code.

Facts about the Responses API relied on here (OpenAI API reference, "Create a model
response", and the openai-python SDK's ``types/responses``):

* a function tool is flat (``{type, name, description, parameters, strict}``) and its
  ``strict`` defaults to **true**, where chat's defaults to false: a chat tool that says
  nothing is sent ``strict: false``, or a schema strict mode cannot take would be refused;
* ``store`` defaults to **true**: OpenAI keeps every response it is not told to forget, so a
  chat client (whose API stores only when asked) is sent ``store: false`` unless it asked;
* ``max_output_tokens`` is at least 16 ("integer below minimum value");
* there are no stop sequences, no ``n``, no ``seed`` and no penalties;
* a call and its output are ``function_call`` / ``function_call_output`` items tied by
  ``call_id``; reasoning goes back only as OpenAI's own items (an id or encrypted content);
* a function's name is ``^[a-zA-Z0-9_-]{1,64}$`` (gateway/fake/responses_rules.py), where chat
  servers (vLLM, llama.cpp) take an MCP tool's ``server.tool``: such a name goes as a valid one,
  in the tools, the history's calls and ``tool_choice``, and answers give the client's back
  (``translate/names.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from gateway.apis.output_budget import RESPONSES_MIN_OUTPUT
from gateway.apis.responses.ids import to_responses_id
from gateway.translate import json_schema, names, typed
from gateway.translate.base import Refusal, Target, option_kind
from gateway.translate.names import Names
from gateway.translate.typed import WrongType

# The name an unnamed file's data goes by, for the types a Gemini client sends that OpenAI reads
# (https://developers.openai.com/api/docs/guides/file-inputs: PDF, ".txt, .md, .json, .html, .xml
# and code files", spreadsheets as .csv), which it tells by the name's extension.
_EXTENSIONS = {"application/pdf": ".pdf", "text/plain": ".txt", "text/markdown": ".md", "text/csv": ".csv",
               "application/json": ".json", "text/html": ".html", "application/xml": ".xml",
               "text/xml": ".xml"}  # fmt: skip
_DATA_TYPE = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,")
# Chat fields sent on under the same name and meaning, each with the reader of its type.
_SAME = {"parallel_tool_calls": typed.flag, "temperature": typed.number, "top_p": typed.number,
         "user": typed.text, "safety_identifier": typed.text, "metadata": typed.obj,
         "prompt_cache_key": typed.text, "service_tier": typed.text}  # fmt: skip


class _Refused(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def to_responses(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _request(payload, target)
    except _Refused as r:
        return Refusal(r.message)
    except WrongType as e:
        return typed.refusal(e, "chat")


@names.per_tools
def function_names(tools: Any) -> Names:
    """The chat tools' names as the Responses API takes them (``translate/names.py``)."""
    return names.names_for(names.chat_declared(tools), names.CHAT)


def _request(p: Mapping[str, Any], target: Target) -> dict[str, Any]:
    _refuse_uncarried(p)
    functions = function_names(p.get("tools"))
    instructions, items = _conversation(typed.objects(p.get("messages"), ("messages",)), functions)
    out: dict[str, Any] = {"model": target.model}
    if instructions:
        out["instructions"] = instructions
    out["input"] = items
    tools = [_tool(tool, j, functions) for j, tool in enumerate(typed.objects(p.get("tools"), ("tools",)))]
    if tools:
        out["tools"] = tools
        choice = _tool_choice(p.get("tool_choice"), functions)
        if choice is not None:
            out["tool_choice"] = choice
    for key, read in _SAME.items():
        value = read(p.get(key), (key,))
        if value is not None:
            out[key] = value
    newer, older = _positive(p, "max_completion_tokens"), _positive(p, "max_tokens")
    budget = newer or older
    if budget is not None:
        out["max_output_tokens"] = max(budget, RESPONSES_MIN_OUTPUT)
    effort = typed.top(p, "reasoning_effort", typed.text)
    if effort is not None:
        out["reasoning"] = {"effort": effort}
    text = _text(p)
    if text:
        out["text"] = text
    # OpenAI keeps a Responses conversation unless told not to; a chat client asked for
    # nothing to be kept unless it set store itself.
    out["store"] = typed.top(p, "store", typed.flag) is True
    if p.get("stream") is True:
        out["stream"] = True
    # Read for their type only: each is dropped (docs/translation/chat_responses.md).
    typed.strings(p.get("stop"), ("stop",), one=True)
    for key in ("top_k", "seed"):
        typed.top(p, key, typed.integer)
    for key in ("presence_penalty", "frequency_penalty"):
        typed.top(p, key, typed.number)
    return out


def _refuse_uncarried(p: Mapping[str, Any]) -> None:
    n = typed.top(p, "n", typed.integer)
    if n is not None and n > 1:
        raise _Refused("'n' > 1 cannot be sent to a Responses upstream: it gives one answer per request")
    if typed.top(p, "logprobs", typed.flag) or typed.top(p, "top_logprobs", typed.integer):
        raise _Refused("'logprobs' cannot be carried to a Responses upstream: the translation does not "
                       "bring token probabilities back")  # fmt: skip
    if typed.top(p, "audio", typed.obj) or "audio" in typed.top(p, "modalities", typed.items):
        raise _Refused("audio output cannot be sent to a Responses upstream")
    if p.get("functions") or p.get("function_call"):
        raise _Refused(
            "legacy 'functions' / 'function_call' are not translated: send 'tools' / 'tool_choice'"
        )


def _conversation(messages: list[dict[str, Any]], functions: Names) -> tuple[str, list[dict[str, Any]]]:
    """The ``instructions`` (the system and developer messages that open the conversation)
    and the input items; a system message further on keeps its place as an item."""
    leading: list[str] = []
    items: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        role = typed.text(m.get("role"), ("messages", i, "role"))
        if role in ("system", "developer"):
            text = _joined(m.get("content"), i)
            if not items:
                leading += [text] if text else []
            elif text:
                items.append({"type": "message", "role": role, "content": text})
        elif role == "user":
            content = _user_content(m.get("content"), i)
            if content:
                items.append({"type": "message", "role": "user", "content": content})
        elif role == "assistant":
            items += _assistant_items(m, i, functions)
        elif role == "tool":
            call_id = _upstream_id(typed.text(m.get("tool_call_id"), ("messages", i, "tool_call_id")) or "")
            items.append({"type": "function_call_output", "call_id": call_id,
                          "output": _joined(m.get("content"), i)})  # fmt: skip
        else:
            raise _Refused(f"messages[{i}]: role {role!r} cannot be sent to a Responses upstream")
    return "\n\n".join(leading), items


def _joined(content: Any, i: int) -> str:
    """The text of a message that the Responses API takes as text (instructions, assistant
    text, a tool's output): its text and refusal parts, joined."""
    content = typed.content(content, ("messages", i, "content"))
    if content is None or isinstance(content, str):
        return content or ""
    texts = []
    for j, part in enumerate(content):
        kind = typed.text(part.get("type"), ("messages", i, "content", j, "type"))
        if kind not in ("text", "refusal"):
            raise _Refused(f"messages[{i}]: only text parts can be carried here")
        texts.append(typed.text(part.get(kind), ("messages", i, "content", j, kind)) or "")
    return "".join(texts)


def _user_content(content: Any, i: int) -> str | list[dict[str, Any]]:
    content = typed.content(content, ("messages", i, "content"))
    if content is None or isinstance(content, str):
        return content or ""
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        at: typed.Path = ("messages", i, "content", j)
        kind = typed.text(part.get("type"), (*at, "type"))
        if kind == "text":
            parts.append({"type": "input_text", "text": typed.text(part.get("text"), (*at, "text")) or ""})
        elif kind == "image_url":
            parts.append(_image(part.get("image_url"), at))
        elif kind == "file":
            parts.append(_file(part.get("file"), at))
        else:
            where = f"messages[{i}].content[{j}]"
            raise _Refused(f"{where}: a {kind!r} part cannot be sent to a Responses upstream")
    return parts


def _image(spec: Any, at: typed.Path) -> dict[str, Any]:
    if isinstance(spec, str):
        spec = {"url": spec}
    spec = typed.obj(spec, (*at, "image_url")) or {}
    url = typed.text(spec.get("url"), (*at, "image_url", "url"))
    if not url:
        raise _Refused(f"{typed.bracketed(at)}: image_url needs a url")
    detail = typed.text(spec.get("detail"), (*at, "image_url", "detail"))
    return {"type": "input_image", "image_url": url, "detail": detail or "auto"}


def _file(spec: Any, at: typed.Path) -> dict[str, Any]:
    spec = typed.obj(spec, (*at, "file")) or {}
    out: dict[str, Any] = {"type": "input_file"}
    # ``file_url`` is no chat field: Messages → chat → Responses writes it for a PDF by URL.
    for key in ("file_data", "file_id", "file_url", "filename"):
        value = typed.text(spec.get(key), (*at, "file", key))
        if value:
            out[key] = value
    if "file_data" not in out and "file_id" not in out and "file_url" not in out:
        raise _Refused(f"{typed.bracketed(at)}: a file part needs file_data or file_id")
    if "file_data" in out and "filename" not in out:
        # OpenAI reads inline file data by its file name's extension; Gemini's files come unnamed.
        found = _DATA_TYPE.match(out["file_data"])
        extension = _EXTENSIONS.get(found.group(1)) if found else None
        out["filename"] = f"document{extension}" if extension else "file"
    return out


def _assistant_items(m: Mapping[str, Any], i: int, functions: Names) -> list[dict[str, Any]]:
    # reasoning_content is not sent back: the Responses API takes reasoning only as its own
    # items (an id it stored, or its encrypted content), which chat carries neither of.
    text = _joined(m.get("content"), i)
    items: list[dict[str, Any]] = []
    if text:
        items.append({"type": "message", "role": "assistant", "content": text})
    for j, call in enumerate(typed.objects(m.get("tool_calls"), ("messages", i, "tool_calls"))):
        at: typed.Path = ("messages", i, "tool_calls", j)
        fn = typed.obj(call.get("function"), (*at, "function"))
        if call.get("type", "function") != "function" or fn is None:
            raise _Refused(f"messages[{i}].tool_calls[{j}]: only function tool calls can be carried")
        arguments = typed.text(fn.get("arguments"), (*at, "function", "arguments")) or "{}"
        call_id = _upstream_id(typed.text(call.get("id"), (*at, "id")) or "")
        name = typed.text(fn.get("name"), (*at, "function", "name")) or ""
        items.append({"type": "function_call", "call_id": call_id,
                      "name": names.sent(functions, name, names.CHAT) if name else "",
                      "arguments": arguments})  # fmt: skip
    return items


def _upstream_id(call_id: str) -> str:
    """A call id as OpenAI takes it: at most 64 characters ("Invalid 'input[2].call_id':
    string too long. Expected a string with maximum length 64", NousResearch/hermes-agent#73538).
    Longer ones (another provider's, or the gateway's own Gemini ids carrying a thought
    signature) become a digest, the same for a call and its output, so they still pair; the
    client never sees it (answers carry the upstream's own ids)."""
    return to_responses_id(call_id)


def _tool(tool: dict[str, Any], j: int, functions: Names) -> dict[str, Any]:
    fn = typed.obj(tool.get("function"), ("tools", j, "function"))
    if tool.get("type") != "function" or fn is None:
        raise _Refused(f"tools[{j}]: only function tools can be sent to a Responses upstream "
                       f"(got type {option_kind(tool)})")  # fmt: skip
    name = typed.text(fn.get("name"), ("tools", j, "function", "name")) or ""
    out: dict[str, Any] = {"type": "function", "name": functions.upstream(name)}
    description = typed.text(fn.get("description"), ("tools", j, "function", "description"))
    if description:
        out["description"] = description
    parameters = typed.obj(fn.get("parameters"), ("tools", j, "function", "parameters"))
    out["parameters"] = json_schema.with_properties(parameters) if parameters is not None else {
        "type": "object", "properties": {}}
    # Chat's default is not strict; the Responses API's is.
    out["strict"] = typed.flag(fn.get("strict"), ("tools", j, "function", "strict")) is True
    return out


def _tool_choice(choice: Any, functions: Names) -> Any:
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if not isinstance(choice, str | dict):
        raise typed.wrong(choice, ("tool_choice",), "string", "object")
    kind = typed.text(choice.get("type"), ("tool_choice", "type")) if isinstance(choice, dict) else None
    if isinstance(choice, dict) and kind == "function":
        return {"type": "function", "name": functions.upstream(_chosen(choice, ("tool_choice",)))}
    if isinstance(choice, dict) and kind == "allowed_tools":
        allowed = typed.obj(choice.get("allowed_tools"), ("tool_choice", "allowed_tools")) or {}
        listed = typed.objects(allowed.get("tools"), ("tool_choice", "allowed_tools", "tools"))
        tools = [{"type": "function",
                  "name": functions.upstream(_chosen(t, ("tool_choice", "allowed_tools", "tools", k)))}
                 for k, t in enumerate(listed)]  # fmt: skip
        mode = typed.text(allowed.get("mode"), ("tool_choice", "allowed_tools", "mode")) or "auto"
        return {"type": "allowed_tools", "mode": mode, "tools": tools}
    raise _Refused(f"tool_choice of type {option_kind(choice)} cannot be sent to a Responses upstream")


def _chosen(choice: dict[str, Any], at: typed.Path) -> str:
    fn = typed.obj(choice.get("function"), (*at, "function")) or {}
    return typed.text(fn.get("name"), (*at, "function", "name")) or ""


def _text(p: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    fmt = typed.top(p, "response_format", typed.obj)
    kind = typed.text(fmt.get("type"), ("response_format", "type")) if fmt is not None else None
    if fmt is None or kind == "text":
        pass
    elif kind == "json_object":
        out["format"] = {"type": "json_object"}
    elif kind == "json_schema":
        spec = typed.obj(fmt.get("json_schema"), ("response_format", "json_schema")) or {}
        at = ("response_format", "json_schema")
        schema = typed.obj(spec.get("schema"), (*at, "schema"))
        name = typed.text(spec.get("name"), (*at, "name")) or "response"
        fields: dict[str, Any] = {"type": "json_schema", "name": name, "schema": schema or {}}
        description = typed.text(spec.get("description"), (*at, "description"))
        if description:
            fields["description"] = description
        strict = typed.flag(spec.get("strict"), (*at, "strict"))
        if strict is not None:
            fields["strict"] = strict
        out["format"] = fields
    else:
        raise _Refused(f"response_format of type {option_kind(fmt)} cannot be sent to a Responses upstream")
    verbosity = typed.top(p, "verbosity", typed.text)
    if verbosity is not None:
        out["verbosity"] = verbosity
    return out


def _positive(p: Mapping[str, Any], key: str) -> int | None:
    value = typed.top(p, key, typed.integer)
    return value if value is not None and value > 0 else None
