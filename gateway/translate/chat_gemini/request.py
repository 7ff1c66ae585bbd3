"""OpenAI chat completions client → Gemini API upstream: the request.

What is carried, dropped or refused, each with its reason, is the table in
``docs/translation/chat_gemini.md``; this module is that table in code.

Facts about the Gemini API relied on here (Gemini API reference, "Generating content" and
"Caching"; the function-calling and thought-signatures guides):

* instructions go in ``systemInstruction``; ``contents`` alternate ``user`` and ``model``;
* a function's answer is a ``functionResponse`` part (``name``, ``id``, ``response`` an
  object) in the user turn right after the model turn that called it, one per call;
* tools are ``functionDeclarations``; ``parametersJsonSchema`` takes JSON Schema as it is
  (``parameters`` wants Google's OpenAPI subset);
* ``generationConfig`` holds the sampling knobs, ``responseMimeType`` / ``responseJsonSchema``
  and ``thinkingConfig`` (``thinkingBudget``, which Gemini 2.5 and 3 both take, and
  ``includeThoughts``);
* the model and the method are in the URL: ``model`` and ``stream`` stay in the payload for the
  gateway, and ``GeminiGenerate.address`` takes them out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gateway.translate import names, thinking_room, typed
from gateway.translate.base import Refusal, Target, call_arguments, option_kind
from gateway.translate.chat_gemini import signature
from gateway.translate.names import Names
from gateway.translate.typed import WrongType

# reasoning_effort → thinkingBudget: what Gemini 2.5 Flash and Pro both accept (128–24576 on
# Flash, 128–32768 on Pro), so one effort means the same on either; Gemini 3 takes budgets too.
EFFORT_BUDGET = {"minimal": 512, "low": 1024, "medium": 8192, "high": 24576, "xhigh": 24576}
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+);base64,(.*)$", re.DOTALL)
_AUDIO = {"wav": "audio/wav", "mp3": "audio/mp3"}
_MODE = {"auto": "AUTO", "none": "NONE", "required": "ANY"}


class Refused(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def to_gemini(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _request(payload, target)
    except Refused as r:
        return Refusal(r.message)
    except WrongType as e:
        return typed.refusal(e, "chat")


def _request(p: Mapping[str, Any], target: Target) -> dict[str, Any]:
    _refuse_uncarried(p, target.model)
    functions = function_names(p.get("tools"))
    system, contents = _conversation(typed.objects(p.get("messages"), ("messages",)), functions)
    if not contents:
        # Google refuses it ("GenerateContentRequest.contents: contents is not specified"):
        # refused here, before any call, in words that say why.
        raise Refused("the conversation has no content to send: a Gemini upstream needs at least one "
                      "message with text, an image or a tool call or result")  # fmt: skip
    out: dict[str, Any] = {"model": target.model, "contents": contents}
    tools, config = _tools(p, functions)
    generation = _generation(p, target.model)
    calling = bool(tools) and (config or {}).get("mode") != "NONE"
    if calling and "responseMimeType" in generation and not takes_json_with_tools(target.model):
        # Gemini 2.x refuses JSON mode beside function declarations ("Function calling with a
        # response mime type: 'application/json' is unsupported"): the tools are kept, and the
        # answer's shape asked for in words (docs/translation/chat_gemini.md).
        del generation["responseMimeType"]
        schema = generation.pop("responseJsonSchema", None)
        if schema is None:
            system.append("Answer in JSON.")
        else:
            shape = json.dumps(schema, ensure_ascii=False)
            system.append(f"Answer in JSON that matches this JSON Schema: {shape}")
    if system:
        out["systemInstruction"] = {"parts": [{"text": t} for t in system]}
    if tools:
        out["tools"] = [{"functionDeclarations": tools}]
        if config is not None:
            out["toolConfig"] = {"functionCallingConfig": config}
    if generation:
        out["generationConfig"] = generation
    if p.get("stream") is True:
        out["stream"] = True  # the method in the URL; usage always comes on the last chunk
    return out


_GENERATION = re.compile(r"(?:models/)?gemini-(\d+)(?:[.-]|$)")


def takes_json_with_tools(model: str) -> bool:
    """Whether the model takes JSON mode (``responseMimeType: application/json``, a response
    schema) beside function declarations. Gemini 3 does ("Structured Outputs with tools", the
    Gemini 3 developer guide, https://ai.google.dev/gemini-api/docs/gemini-3); Gemini 1.5 and
    2.x refuse it with 400 "Function calling with a response mime type: 'application/json' is
    unsupported" (gemini-2.5-flash in symfony/ai#1777, gemini-2.5-flash-lite in
    analyticalrohit/ai-blog-generator#17, gemini-2.5-pro in google/adk-python#5735). A name
    that says no generation (an alias, a tuned model) is taken for one that refuses: asked in
    words, the answer still comes; refused, the request fails."""
    found = _GENERATION.match(model)
    return found is not None and int(found.group(1)) >= 3


def _refuse_uncarried(p: Mapping[str, Any], model: str) -> None:
    if "/" in model.removeprefix("models/"):
        raise Refused(f"the model name {model[:128]!r} cannot be put in a Gemini API URL")
    n = typed.top(p, "n", typed.integer)
    if n is not None and n > 1:
        raise Refused("'n' > 1 is not carried to a Gemini upstream: the answer would hold one choice")
    if typed.top(p, "logprobs", typed.flag) or typed.top(p, "top_logprobs", typed.integer):
        raise Refused("'logprobs' is not carried to a Gemini upstream")
    if typed.top(p, "audio", typed.obj) or "audio" in typed.top(p, "modalities", typed.items):
        raise Refused("audio output cannot be asked of a Gemini upstream through chat completions")
    if p.get("functions") or p.get("function_call"):
        raise Refused("legacy 'functions' / 'function_call' are not translated: send 'tools' / 'tool_choice'")


# --- the conversation ----------------------------------------------------------------------


class _Turns:
    """Gemini contents as they are built: one role per turn, tool results first in theirs."""

    def __init__(self, functions: Names) -> None:
        self.functions = functions  # the tools' names as Gemini takes them
        self.contents: list[dict[str, Any]] = []
        self.names: dict[str, str] = {}  # chat tool call id → function name (tool messages lack it)

    def add(self, role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        last = self.contents[-1] if self.contents else None
        if last is not None and last["role"] == role:
            last["parts"] += parts
        else:
            self.contents.append({"role": role, "parts": parts})


def _conversation(items: list[dict[str, Any]], functions: Names) -> tuple[list[str], list[dict[str, Any]]]:
    system: list[str] = []
    turns = _Turns(functions)
    for i, m in enumerate(items):
        role = typed.text(m.get("role"), ("messages", i, "role"))
        if role in ("system", "developer"):
            # Wherever it stands: Gemini has no system turn; it stays an instruction.
            system += [t for t in _texts(m.get("content"), i) if t]
        elif role == "user":
            turns.add("user", _user_parts(m.get("content"), i))
        elif role == "assistant":
            turns.add("model", _model_parts(m, i, turns))
        elif role == "tool":
            turns.add("user", [_function_response(m, i, turns)])
        else:
            raise Refused(f"messages[{i}]: role {role!r} cannot be sent to a Gemini upstream")
    for content in turns.contents:
        if content["role"] == "user":
            # A call's answers open the turn that follows it; text the user added comes after.
            content["parts"].sort(key=lambda part: "functionResponse" not in part)
    return system, turns.contents


def _texts(content: Any, i: int) -> list[str]:
    """The text of a message that Gemini takes as text only (system, assistant, tool)."""
    content = typed.content(content, ("messages", i, "content"))
    if isinstance(content, str):
        return [content]
    out = []
    for j, part in enumerate(content or ()):
        kind = typed.text(part.get("type"), ("messages", i, "content", j, "type"))
        if kind not in ("text", "refusal"):
            raise Refused(f"messages[{i}].content[{j}]: only text parts can be carried here")
        text = part.get(kind)
        if not isinstance(text, str):
            raise typed.wrong(text, ("messages", i, "content", j, kind), "string")
        out.append(text)
    return out


def _user_parts(content: Any, i: int) -> list[dict[str, Any]]:
    content = typed.content(content, ("messages", i, "content"))
    if isinstance(content, str) or content is None:
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = typed.text(part.get("type"), ("messages", i, "content", j, "type"))
        where = f"messages[{i}].content[{j}]"
        if kind == "text":
            text = typed.text(part.get("text"), ("messages", i, "content", j, "text"))
            if text:
                parts.append({"text": text})
        elif kind == "image_url":
            parts.append(_inline(part.get("image_url"), where, "image_url"))
        elif kind == "file":
            file = part.get("file")
            data = file.get("file_data") if isinstance(file, dict) else None
            parts.append(_inline({"url": data}, where, "file"))
        elif kind == "input_audio":
            parts.append(_audio(part.get("input_audio"), where))
        else:
            raise Refused(f"{where}: a {kind!r} part cannot be sent to a Gemini upstream")
    return parts


def _inline(spec: Any, where: str, kind: str) -> dict[str, Any]:
    url = spec.get("url") if isinstance(spec, dict) else spec
    found = _DATA_URL.match(url) if isinstance(url, str) else None
    if found is None:
        # fileData takes only files uploaded to Google's Files API, which a chat client has not.
        article = "an" if kind[0] in "aeiou" else "a"
        raise Refused(f"{where}: {article} {kind} part must be a base64 data URL for a Gemini upstream "
                      "(an http(s) URL or a file id is not fetched)")  # fmt: skip
    mime, data = found.groups()
    mime = _MIME_ALIAS.get(mime, mime)
    if mime.startswith("image/") and mime not in _IMAGE_TYPES:
        # Google refuses it ("Unsupported MIME type: image/gif") on every later turn of the
        # conversation too; Anthropic and OpenAI take GIFs, so a history may hold one.
        return {"text": f"[an image ({mime}) left out: this model reads PNG, JPEG, WEBP, HEIC and HEIF]"}
    return {"inlineData": {"mimeType": mime, "data": data}}


# Google's image types (Gemini API, "Image understanding": supported formats); "image/jpg" is
# refused by name ("Unsupported MIME type: image/jpg") though it means JPEG.
_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
_MIME_ALIAS = {"image/jpg": "image/jpeg"}
# "the number of stop_sequences must not exceed 5" (Gemini API, GenerationConfig).
MAX_STOPS = 5


def _audio(spec: Any, where: str) -> dict[str, Any]:
    data = spec.get("data") if isinstance(spec, dict) else None
    mime = _AUDIO.get(str(spec.get("format"))) if isinstance(spec, dict) else None
    if not isinstance(data, str) or mime is None:
        raise Refused(f"{where}: input_audio needs base64 'data' and a 'format' of wav or mp3")
    return {"inlineData": {"mimeType": mime, "data": data}}


def _model_parts(m: Mapping[str, Any], i: int, turns: _Turns) -> list[dict[str, Any]]:
    # reasoning_content is not sent back: Gemini takes thoughts back only as signed parts.
    parts: list[dict[str, Any]] = [{"text": t} for t in _texts(m.get("content"), i) if t]
    calls: list[dict[str, Any]] = []
    for j, call in enumerate(typed.objects(m.get("tool_calls"), ("messages", i, "tool_calls"))):
        where = f"messages[{i}].tool_calls[{j}]"
        fn = typed.obj(call.get("function"), ("messages", i, "tool_calls", j, "function"))
        if fn is None or call.get("type", "function") != "function":
            raise Refused(f"{where}: only function tool calls can be carried")
        name = typed.text(fn.get("name"), ("messages", i, "tool_calls", j, "function", "name"))
        if not name:
            raise Refused(f"{where}: function.name is required")
        typed.text(call.get("id"), ("messages", i, "tool_calls", j, "id"))
        arguments = fn.get("arguments") or "{}"
        args = call_arguments(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(args, dict):
            raise Refused(f"{where}: function.arguments must be a JSON object for a Gemini upstream")
        chat_id = str(call.get("id") or "")
        call_id, signed = signature.of_tool_call(call)
        turns.names[chat_id] = name
        function_call: dict[str, Any] = {"name": turns.functions.upstream(name), "args": args}
        if call_id:
            function_call["id"] = call_id
        part: dict[str, Any] = {"functionCall": function_call}
        if signed:
            part["thoughtSignature"] = signed
        calls.append(part)
    if calls and not any("thoughtSignature" in c for c in calls):
        # No Gemini model signed these calls (another upstream made them): Google's stand-in,
        # on the first call of the step as a signature would be, so Gemini 3 takes the history.
        calls[0]["thoughtSignature"] = signature.SKIP
    return parts + calls


def _function_response(m: Mapping[str, Any], i: int, turns: _Turns) -> dict[str, Any]:
    chat_id = typed.text(m.get("tool_call_id"), ("messages", i, "tool_call_id")) or ""
    name = turns.names.get(chat_id)
    if name is None:
        raise Refused(f"messages[{i}]: tool_call_id {chat_id[:64]!r} answers no tool call of an earlier "
                      "assistant message, and Gemini names a function's answer by its call")  # fmt: skip
    text = "".join(_texts(m.get("content"), i))
    response: dict[str, Any] = {"name": turns.functions.upstream(name), "response": {"output": text}}
    call_id, _ = signature.split(chat_id)
    if call_id:
        response["id"] = call_id
    return {"functionResponse": response}


# --- tools and generation -------------------------------------------------------------------


@names.per_tools
def function_names(tools: Any) -> Names:
    """The chat tools' names as the Gemini API takes them (``translate/names.py``)."""
    return names.names_for(names.chat_declared(tools), names.GEMINI)


def _tools(p: Mapping[str, Any], functions: Names) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    tools = typed.objects(p.get("tools"), ("tools",))
    declarations = [_declaration(tool, j, functions) for j, tool in enumerate(tools)]
    choice = p.get("tool_choice")
    if not declarations or choice is None:
        return declarations, None
    if isinstance(choice, str):
        if choice in _MODE:
            return declarations, {"mode": _MODE[choice]}
    elif not isinstance(choice, dict):
        raise typed.wrong(choice, ("tool_choice",), "string", "object")
    elif (kind := typed.text(choice.get("type"), ("tool_choice", "type"))) == "function":
        name = _chosen(choice, ("tool_choice",))
        return declarations, {"mode": "ANY", "allowedFunctionNames": [functions.upstream(str(name))]}
    elif kind == "allowed_tools":
        allowed = typed.obj(choice.get("allowed_tools"), ("tool_choice", "allowed_tools")) or {}
        listed = typed.objects(allowed.get("tools"), ("tool_choice", "allowed_tools", "tools"))
        asked = [_chosen(t, ("tool_choice", "allowed_tools", "tools", k)) for k, t in enumerate(listed)]
        named = [functions.upstream(n) for n in asked if isinstance(n, str)]
        if allowed.get("mode") == "required":
            return declarations, {"mode": "ANY", "allowedFunctionNames": named}
        # Google takes allowedFunctionNames with ANY only ("should only be set when the Mode is
        # ANY"): for auto, the model is shown only the allowed tools instead.
        return [d for d in declarations if d["name"] in named], {"mode": "AUTO"}
    raise Refused(f"tool_choice of type {option_kind(choice)} cannot be sent to a Gemini upstream")


def _declaration(tool: dict[str, Any], j: int, functions: Names) -> dict[str, Any]:
    fn = typed.obj(tool.get("function"), ("tools", j, "function"))
    if tool.get("type") != "function" or fn is None:
        raise Refused(f"tools[{j}]: only function tools can be sent to a Gemini upstream")
    name = typed.text(fn.get("name"), ("tools", j, "function", "name"))
    if not name:
        raise Refused(f"tools[{j}].function.name is required")
    out: dict[str, Any] = {"name": functions.upstream(name)}
    description = typed.text(fn.get("description"), ("tools", j, "function", "description"))
    if description:
        out["description"] = description
    parameters = typed.obj(fn.get("parameters"), ("tools", j, "function", "parameters"))
    if parameters is not None:
        out["parametersJsonSchema"] = ref_alone(parameters)
    return out


# Where a JSON Schema holds schemas: by name, and one or a list of them under a key.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONES = ("items", "prefixItems", "additionalItems", "additionalProperties", "anyOf", "oneOf", "allOf",
                "not", "if", "then", "else", "contains", "propertyNames", "unevaluatedProperties",
                "unevaluatedItems")  # fmt: skip
_BESIDE_REF = frozenset({"description", "default"})  # and any field whose name starts with "$"


def ref_alone(schema: Any) -> Any:
    """A JSON Schema whose ``$ref`` nodes hold only what Gemini takes beside a reference:
    ``$`` fields, ``description`` and ``default``; a ``title`` goes into a missing description.
    Gemini refuses the rest ("$ref 'QuestionOption' was set alongside unsupported fields. If a
    schema node has $ref set, then only description and default can be set alongside it",
    anomalyco/opencode#12295; for responseJsonSchema Google's reference says "If $ref is set on
    a sub-schema, no other properties, except for than those starting as a $, may be set"), and
    pydantic writes a nested model's field as a $ref beside its title and examples (an MCP
    tool's schema). What the reference points to holds the dropped fields' meaning. ``schema``
    itself comes back when nothing changes: this runs for every tool of every request."""
    if isinstance(schema, list):
        done = [ref_alone(s) for s in schema]
        return schema if all(a is b for a, b in zip(done, schema, strict=True)) else done
    if not isinstance(schema, dict):
        return schema
    changed: dict[str, Any] = {}
    for key in _SCHEMA_MAPS:
        named = schema.get(key)
        if isinstance(named, dict):
            each = {name: ref_alone(s) for name, s in named.items()}
            if any(each[name] is not s for name, s in named.items()):
                changed[key] = each
    for key in _SCHEMA_ONES:
        if key in schema and (one := ref_alone(schema[key])) is not schema[key]:
            changed[key] = one
    if "$ref" in schema and any(k not in _BESIDE_REF and not k.startswith("$") for k in schema):
        out = {k: changed.get(k, v) for k, v in schema.items() if k in _BESIDE_REF or k.startswith("$")}
        title = schema.get("title")
        if "description" not in out and isinstance(title, str) and title:
            out["description"] = title
        return out
    return {**schema, **changed} if changed else schema


def _chosen(choice: dict[str, Any], at: typed.Path) -> str | None:
    """The function name a tool choice (or an allowed tool) gives."""
    fn = typed.obj(choice.get("function"), (*at, "function")) or {}
    return typed.text(fn.get("name"), (*at, "function", "name"))


def _generation(p: Mapping[str, Any], model: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for chat, gemini in (("temperature", "temperature"), ("top_p", "topP"), ("top_k", "topK"),
                         ("presence_penalty", "presencePenalty"), ("frequency_penalty", "frequencyPenalty"),
                         ("seed", "seed")):  # fmt: skip
        value = (typed.integer if chat in ("top_k", "seed") else typed.number)(p.get(chat), (chat,))
        if value is not None:
            if chat.endswith("_penalty") and value == 0:
                # OpenAI's default, sent by clients that fill every knob in: left out, since a
                # Gemini 2.5 model refuses any penalty ("Penalty is not enabled for models/…").
                continue
            out[gemini] = value
    newer, older = _positive(p, "max_completion_tokens"), _positive(p, "max_tokens")
    limit = newer or older
    if limit:
        out["maxOutputTokens"] = limit
    stops = [s for s in typed.strings(p.get("stop"), ("stop",), one=True) if s]
    if stops:
        out["stopSequences"] = stops[:MAX_STOPS]
    _response_format(p.get("response_format"), out)
    effort = typed.text(p.get("reasoning_effort"), ("reasoning_effort",))
    if effort == "none":
        # No thinkingConfig is the model's default thinking, not none: the least the model
        # does (``thinking_room.gemini_least``: off where it can stop, nothing where the least
        # is unknown), no thoughts to show.
        least = thinking_room.gemini_least(model)
        if least is not None:
            out["thinkingConfig"] = least
    elif effort is not None:
        if effort not in EFFORT_BUDGET:
            raise Refused(f"reasoning_effort {effort!r} is not one of none, {', '.join(EFFORT_BUDGET)}")
        # The answer keeps its share of maxOutputTokens, which Gemini counts thoughts against
        # (``thinking_room``): 0 turns thinking off where the limit leaves it no room.
        budget = thinking_room.gemini_budget(EFFORT_BUDGET[effort], limit, model)
        out["thinkingConfig"] = {"thinkingBudget": budget}
        # Thoughts shown, so that reasoning_content can carry them back; not when the client
        # said it wants no reasoning text (OpenRouter's ``include_reasoning: false``, and what
        # messages_chat writes for a Messages client that asked for no thinking).
        if budget and typed.flag(p.get("include_reasoning"), ("include_reasoning",)) is not False:
            out["thinkingConfig"]["includeThoughts"] = True
    return out


def _response_format(fmt: Any, out: dict[str, Any]) -> None:
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise typed.wrong(fmt, ("response_format",), "object")
    kind = typed.text(fmt.get("type"), ("response_format", "type"))
    if kind == "text":
        return
    if kind == "json_object":
        out["responseMimeType"] = "application/json"
        return
    if kind == "json_schema":
        spec = typed.obj(fmt.get("json_schema"), ("response_format", "json_schema")) or {}
        schema = typed.obj(spec.get("schema"), ("response_format", "json_schema", "schema"))
        if schema is not None:
            out["responseMimeType"] = "application/json"
            out["responseJsonSchema"] = ref_alone(schema)
            return
    raise Refused(f"response_format of type {option_kind(fmt)} cannot be sent to a Gemini upstream")


def _positive(p: Mapping[str, Any], key: str) -> int | None:
    value = typed.integer(p.get(key), (key,))
    return value if value is not None and value > 0 else None
