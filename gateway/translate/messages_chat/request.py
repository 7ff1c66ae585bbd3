"""An Anthropic Messages request as an OpenAI chat completions request.

Rules (each with its reason in docs/translation/messages_chat.md):

* ``system`` (a string or text blocks) becomes the first ``system`` message, one string;
  Claude Code's attribution block (``x-anthropic-billing-header: …``) is billing metadata for
  Anthropic's API, not an instruction, so it is left out.
* ``role: "system"`` entries inside ``messages`` (Claude Code's mid-conversation system
  messages) become ``<system-reminder>`` text in the neighbouring user turn: many chat
  templates reject a system message that is not first, and folding them into the first system
  message would change the prompt's prefix (and bust a server's prefix cache) each time one
  appears. Their tool changes are said there too, an added definition joining ``tools``.
* ``tool_use`` blocks become ``tool_calls`` (ids kept as they are, but one the answer encoded
  into Anthropic's alphabet goes back as the upstream wrote it, ``translate/tool_ids.py``, and
  one longer than OpenAI's 40 characters goes to a chat upstream as a digest of itself:
  ``apis/chat/ids.py``),
  ``tool_result`` blocks ``tool`` messages right after them; images inside a tool result follow
  in a user message, because a chat ``tool`` message carries text only. A ``tool_reference``
  in a result (a tool search loading a deferred tool) becomes text saying the tool is loaded:
  every tool, ``defer_loading`` ones too, is sent up front, unless that makes more than OpenAI's
  128: then the deferred ones not yet loaded or called are left out (``tool_cap.py``), and a
  request still over it is refused where the upstream's host is known to cap it.
* ``stop_sequences``: the first 4 go to a chat upstream, OpenAI's most ("Invalid 'stop': array
  too long. Expected an array with maximum length 4").
* thinking blocks in history are dropped: chat completions has no field for them, and a
  signed Anthropic thinking block means nothing to another model.
* a structured output (``output_config.format``, the beta's ``output_format``) whose schema's
  root is not an object (a list, a string enum, a root ``anyOf``) goes inside one, as OpenAI
  takes only an object root and Anthropic states no rule for it (``translate/root.py``); the
  answer's text comes back as the value the client's schema asked for (``answer.py``,
  ``stream.py``).
* ``cache_control``, ``context_management``, ``top_k``, ``service_tier``, ``container`` are
  dropped (``top_k`` goes on to a Gemini upstream, which has ``topK``); hosted tools,
  ``mcp_servers`` and Files-API sources are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from gateway.apis.chat.ids import GEMINI_SIGNED, to_chat_id
from gateway.translate import json_schema, names, root, tool_cap, typed
from gateway.translate.base import Refusal, Target
from gateway.translate.names import NONE, Names
from gateway.translate.strict import for_strict
from gateway.translate.tool_ids import from_anthropic_id
from gateway.translate.typed import WrongType

BILLING_PREFIX = "x-anthropic-billing-header:"
NOTE_OPEN, NOTE_CLOSE = "<system-reminder>\n", "\n</system-reminder>"

# Anthropic effort (output_config.effort) → chat reasoning_effort: the three values every
# chat server that takes the field accepts (vLLM validates exactly these).
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
# OpenAI refuses a longer `user` ("Invalid 'user': string too long. Expected a string with
# maximum length 64", LiteLLM #37623); Claude Code's metadata.user_id is ~120 characters of JSON.
USER_MAX = 64
# OpenAI takes at most 4 stop strings ("Invalid 'stop': array too long. Expected an array with
# maximum length 4, but got an array with length 14 instead.", continuedev/continue#1572).
STOP_MAX = 4

_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}
# Written for the next hop only (Messages → chat → Gemini, ``Target.onward``): no reasoning
# text is to come back. OpenRouter's chat field of that name
# (https://openrouter.ai/blog/reasoning-tokens-for-thinking-models), which chat_gemini reads.
INCLUDE_REASONING = "include_reasoning"
TOO_MANY_TOOLS = (
    "Let the client defer the tools it loads by search (defer_loading; Claude Code: "
    "ENABLE_TOOL_SEARCH=true), connect fewer MCP servers, or route this model to an upstream that "
    "speaks Messages or Responses."
)


class Untranslatable(Exception):
    """Raised inside the walk; becomes a ``Refusal``."""


# The API a refusal names, by ``Target.onward``: the rules are chat's, the client reads of the
# API its route ends on (Messages → chat → Responses or Gemini). A refusal says what the gateway
# does not carry there, not what that API lacks: Responses has MCP and web search of its own.
_CARRIED_TO = " to chat completions"
_API_NAMED = {"responses": " to OpenAI Responses", "gemini": " to the Gemini API"}


def to_chat(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _request(payload, target)
    except Untranslatable as e:
        api = _API_NAMED.get(target.onward)
        return Refusal(str(e) if api is None else str(e).replace(_CARRIED_TO, api))
    except WrongType as e:
        return typed.refusal(e, "messages")


def _request(payload: Mapping[str, Any], target: Target) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = payload.get("system")
    if system is not None:
        text = _system_text(system)
        if text:
            messages.append({"role": "system", "content": text})
    raw = payload.get("messages")
    if not isinstance(raw, list):
        raise Untranslatable("'messages' must be a list of message objects")
    if target.onward == "gemini":
        _no_image_urls(raw)
    declared = declared_tools(payload)
    functions = function_names(declared) if declared else NONE
    # A PDF goes on where the request ends at a Responses or a Gemini upstream, which read
    # files (as Claude does, through the same chat file part); a chat server reads images only.
    # Ids as OpenAI takes them, where the request stops at chat: the Gemini ids the gateway wrote
    # carry their signature on to a Gemini upstream (Messages → chat → Gemini).
    files = target.onward if target.onward in ("responses", "gemini") else ""
    messages += _messages(raw, functions, files=files, short_ids=not target.onward)
    out: dict[str, Any] = {"model": target.model, "messages": messages}

    # Each optional field's rule runs only when the field is there (each absent one costs a
    # dictionary read, not a call): most requests carry few of them, and this runs for every
    # translated request (issue #38).
    max_tokens = payload.get("max_tokens")
    if max_tokens is not None:
        # max_tokens, not max_completion_tokens: llama.cpp, llama-cpp-python, vLLM and TGI
        # all read it; only OpenAI's reasoning models insist on the newer name. (An int, as
        # every request has it, without the reader's call: ``type`` is no bool.)
        out["max_tokens"] = (max_tokens if type(max_tokens) is int
                             else typed.integer(max_tokens, ("max_tokens",)))  # fmt: skip
    for key in ("temperature", "top_p"):
        value = payload.get(key)
        if value is not None:
            out[key] = typed.number(value, (key,))
    top_k = payload.get("top_k")
    if top_k is not None and target.onward == "gemini":
        # Written for the next hop only: Gemini has it (``generationConfig.topK``), chat does not.
        out["top_k"] = typed.integer(top_k, ("top_k",))
    stops = payload.get("stop_sequences")
    if stops is not None and typed.strings(stops, ("stop_sequences",)):
        out["stop"] = list(stops)[:STOP_MAX] if not target.onward else list(stops)
    if "metadata" in payload:
        user = _user(payload["metadata"])
        if user:
            out["user"] = user
    if "thinking" in payload or "output_config" in payload or "output_format" in payload:
        thinking = typed.obj(payload.get("thinking"), ("thinking",))
        config = typed.obj(payload.get("output_config"), ("output_config",))
        effort = _reasoning_effort(thinking, config)
        if effort is None and target.onward == "gemini" and _disabled(thinking):
            # Left out, a Gemini model thinks as it likes (2.5 Flash) or at its default level
            # (HIGH on 3 Pro): "none" asks chat_gemini for the least it does. Only here: vLLM
            # and older OpenAI models refuse "none" (see _reasoning_effort).
            out["reasoning_effort"] = "none"
        if effort:
            out["reasoning_effort"] = effort
            if thinking is None and target.onward == "gemini":
                # No thinking asked for: the effort still shapes the answer, but no thought
                # text is to come back (see _reasoning_effort). Gemini shows thoughts only
                # when asked; chat and Responses show none for an effort alone.
                out[INCLUDE_REASONING] = False
        fmt = _response_format(config, typed.obj(payload.get("output_format"), ("output_format",)))
        if fmt:
            out["response_format"] = fmt

    tools = _tools(declared, functions) if declared is not None else None
    if tools and len(tools) > tool_cap.CHAT_MAX and not target.onward:
        tools = _loaded_only(declared, tools, raw, payload.get("tool_choice"))
        if target.tools_max is not None and len(tools) > target.tools_max:
            raise Untranslatable(tool_cap.too_many(len(tools), target.tools_max, TOO_MANY_TOOLS).message)
    if tools:
        out["tools"] = tools
    if "tool_choice" in payload:
        choice, parallel = _tool_choice(payload["tool_choice"], functions)
        # OpenAI answers 400 to tool_choice or parallel_tool_calls without tools.
        if tools and choice is not None:
            out["tool_choice"] = choice
        if tools and parallel is False:
            out["parallel_tool_calls"] = False
    if payload.get("mcp_servers"):
        raise Untranslatable(
            "'mcp_servers' are run by Anthropic's API; the gateway does not carry them to chat completions"
        )

    if payload.get("stream") is True:
        out["stream"] = True
        if target.stream_usage:
            out["stream_options"] = {"include_usage": True}
    return out


def _texts_of(
    blocks: Any, at: typed.Path, where: str,
    other: Callable[[dict[str, Any], typed.Path], str | None] | None = None, allowed: str = "text blocks",
) -> list[str]:  # fmt: skip
    """The texts of a string or a list of text blocks (system text). ``other``: the words for a
    block of another type (None: refused, as ``where`` may hold only ``allowed``)."""
    found = typed.content(blocks, at)
    if found is None:
        raise typed.wrong(blocks, at, "string", "array")
    if isinstance(found, str):
        return [found]
    texts = []
    for k, block in enumerate(found):
        if block.get("type") != "text":
            said = other(block, (*at, k)) if other is not None else None
            if said is None:
                raise Untranslatable(f"{where} may hold only {allowed}")
            texts.append(said)
            continue
        text = block.get("text")
        if not isinstance(text, str):
            raise typed.wrong(text, (*at, k, "text"), "string")
        texts.append(text)
    return texts


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    texts = _texts_of(system, ("system",), "'system'")
    return "\n\n".join(t for t in texts if not t.startswith(BILLING_PREFIX))


def _user(metadata: Any) -> str | None:
    """metadata.user_id as chat's ``user``: an id over OpenAI's 64 characters is sent as its
    SHA-256 (64 hex digits), which tells users apart as well."""
    found = typed.obj(metadata, ("metadata",)) or {}
    user = typed.text(found.get("user_id"), ("metadata", "user_id"))
    if user:
        return user if len(user) <= USER_MAX else hashlib.sha256(user.encode()).hexdigest()
    return None


def _reasoning_effort(thinking: dict[str, Any] | None, output_config: dict[str, Any] | None) -> str | None:
    """``thinking`` and ``output_config.effort`` → ``reasoning_effort``.

    A budget maps by size; it is never refused for being under Anthropic's 1,024 minimum
    (that floor is Anthropic's, not the chat upstream's: Bifrost #1479 refused it).

    An effort without ``thinking`` (Claude Code 2.1.332 with CLAUDE_CODE_DISABLE_THINKING=1)
    is carried: Anthropic's effort "affects all tokens in the response", text and tool calls
    too, and "doesn't require thinking to be enabled"
    (https://platform.claude.com/docs/en/build-with-claude/effort, as quoted in LiteLLM's
    docs/providers/anthropic_effort). No thinking text was asked for: Opus 4.8 and earlier do
    not think without ``thinking``, and the Claude 5 models that do think by default return
    no thinking text unless ``display`` asks (its default is "omitted" since Opus 4.7,
    anthropics/claude-code#49268). So the effort goes where the upstream's knob shows no
    reasoning by itself, and the request asks a Gemini upstream for no thoughts."""
    thinking = thinking or {}
    kind = typed.text(thinking.get("type"), ("thinking", "type"))
    budget = typed.integer(thinking.get("budget_tokens"), ("thinking", "budget_tokens"))
    effort = typed.text((output_config or {}).get("effort"), ("output_config", "effort"))
    if kind == "disabled":
        return None  # omitted, not "none": vLLM and older OpenAI models reject "none"
    if effort in _EFFORT:
        return _EFFORT[effort]
    if kind == "enabled":
        if budget is None:
            return "medium"
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return None  # adaptive without an effort: the server's default


def _disabled(thinking: dict[str, Any] | None) -> bool:
    return typed.text((thinking or {}).get("type"), ("thinking", "type")) == "disabled"


def _response_format(
    output_config: dict[str, Any] | None, output_format: dict[str, Any] | None
) -> dict[str, Any] | None:
    schema = _output_schema(output_config, output_format)
    if schema is None:
        return None
    # A root other than an object goes inside one (``root.py``): OpenAI refuses it.
    sent = root.wrapped(schema) if root.needs_wrapping(schema) else schema
    strict = for_strict(sent)
    return {"type": "json_schema",
            "json_schema": {"name": "output", "schema": sent if strict is None else strict,
                            "strict": strict is not None}}  # fmt: skip


def _output_schema(
    output_config: dict[str, Any] | None, output_format: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The structured output's JSON Schema, from ``output_config.format`` or else the beta's
    ``output_format``; None without one."""
    at: typed.Path = ("output_config", "format")
    fmt = typed.obj((output_config or {}).get("format"), at)
    if fmt is None:
        fmt, at = output_format, ("output_format",)
    kind = typed.text(fmt.get("type"), (*at, "type")) if fmt is not None else None
    schema = typed.obj(fmt.get("schema"), (*at, "schema")) if fmt is not None else None
    return schema if kind == "json_schema" else None


def answer_wrapped(request: Mapping[str, Any]) -> bool:
    """Whether ``_response_format`` put the request's schema inside an object, so that the
    answer's text is taken back out of it (``root.unwrapped``). For a request it already
    carried: the two fields, where present, are of their types."""
    if "output_config" not in request and "output_format" not in request:
        return False  # most requests ask for no structured output
    try:
        config = typed.obj(request.get("output_config"), ("output_config",))
        schema = _output_schema(config, typed.obj(request.get("output_format"), ("output_format",)))
    except WrongType:
        return False
    return root.needs_wrapping(schema)


@names.per_tools
def function_names(tools: Any) -> Names:
    """The tools' names as a chat upstream takes them (``translate/names.py``): Anthropic takes
    128 characters, OpenAI 64, and Claude Code's ``mcp__<server>__<tool>`` names run past 64."""
    if not isinstance(tools, list) or not tools:
        return NONE
    declared = tuple(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
    return names.names_for(declared, names.CHAT)


def declared_tools(payload: Mapping[str, Any]) -> Any:
    """The request's ``tools`` with the definitions its system messages add (mid-conversation
    tool changes), each name once, a later definition in place of an earlier one; ``tools``
    itself (the same object, which ``function_names`` remembers) when none is added."""
    tools = payload.get("tools")
    added = _definitions(payload.get("messages"))
    if not added or not isinstance(tools, (list, type(None))):
        return tools
    out = list(tools or ())
    at = {t["name"]: k for k, t in enumerate(out) if isinstance(t, dict) and isinstance(t.get("name"), str)}
    for definition in added:
        k = at.setdefault(definition["name"], len(out))
        if k == len(out):
            out.append(definition)
        else:
            out[k] = definition
    return out


def _definitions(messages: Any) -> list[dict[str, Any]]:
    """The tool definitions ``tool_addition`` blocks of system messages carry, in order (the
    walk refuses a malformed one, naming it)."""
    found = []
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, dict) or message.get("role") != "system":
            continue
        for block in message["content"] if isinstance(message.get("content"), list) else ():
            if not isinstance(block, dict) or block.get("type") != "tool_addition":
                continue
            tool = block.get("tool")
            if isinstance(tool, dict) and tool.get("type") == "tool_definition":
                definition = tool.get("definition")
                if isinstance(definition, dict) and isinstance(definition.get("name"), str):
                    found.append(definition)
    return found


def _tools(tools: Any, functions: Names) -> list[dict[str, Any]]:
    return [_tool(tool, k, functions) for k, tool in enumerate(typed.objects(tools, ("tools",)))]


def _tool(tool: dict[str, Any], k: int, functions: Names) -> dict[str, Any]:
    name, description, schema = tool.get("name"), tool.get("description"), tool.get("input_schema")
    if type(name) is str and type(description) is str and type(schema) is dict and (
        "type" not in tool and "strict" not in tool
    ):
        # The tool every agent declares (a name, a description, a schema: Claude Code's 24 on
        # every request) without the readers of ``_tool_read``, which cost twice as much (issue
        # #38); they read every other one, naming what is wrong with it. The same result.
        parameters = schema if "properties" in schema else json_schema.with_properties(schema)
        function = {"name": functions.upstream(name), "description": description, "parameters": parameters}
        return {"type": "function", "function": function}
    return _tool_read(tool, k, functions)


def _tool_read(tool: dict[str, Any], k: int, functions: Names) -> dict[str, Any]:
    name = typed.text(tool.get("name"), ("tools", k, "name"))
    if name is None:
        raise Untranslatable("every tool needs a 'name'")
    kind = typed.text(tool.get("type"), ("tools", k, "type"))
    if kind not in (None, "custom"):
        raise Untranslatable(
            f"tool {name!r} is Anthropic's {kind!r} tool, run or defined by Anthropic's API; "
            "the gateway does not carry it to chat completions "
            "(give it as a custom tool with an input_schema)"
        )
    function: dict[str, Any] = {"name": functions.upstream(name)}
    description = typed.text(tool.get("description"), ("tools", k, "description"))
    if description is not None:
        function["description"] = description
    schema = typed.obj(tool.get("input_schema"), ("tools", k, "input_schema"))
    function["parameters"] = json_schema.with_properties(schema) if schema is not None else {
        "type": "object", "properties": {}}
    if typed.flag(tool.get("strict"), ("tools", k, "strict")):
        strict = for_strict(function["parameters"])  # only where OpenAI's stricter rules hold: else a 400
        if strict is not None:
            function["parameters"], function["strict"] = strict, True
    return {"type": "function", "function": function}


def _loaded_only(
    declared: list[dict[str, Any]], tools: list[dict[str, Any]], messages: list[Any], choice: Any
) -> list[dict[str, Any]]:
    """``tools`` (made from ``declared``, one each) without the ``defer_loading`` ones the
    conversation has neither loaded (a ``tool_reference`` in a tool result) nor called, nor
    ``choice`` names: over OpenAI's cap, what Anthropic's API would show the model. A deferred
    tool "is not loaded into the model's context initially" and is loaded by the tool search's
    ``tool_reference`` (https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool),
    which then names it here: the next request carries it."""
    used = _used_tools(messages)
    if isinstance(choice, dict) and isinstance(choice.get("name"), str):
        used.add(choice["name"])
    return [tool for given, tool in zip(declared, tools, strict=True)
            if given.get("defer_loading") is not True or given.get("name") in used]  # fmt: skip


def _used_tools(messages: list[Any]) -> set[str]:
    """The tool names the conversation called (``tool_use``) or loaded (``tool_reference``)."""
    used: set[str] = set()
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_use" and isinstance(block.get("name"), str):
                used.add(block["name"])
            elif kind == "tool_result" and isinstance(block.get("content"), list):
                used.update(ref["tool_name"] for ref in block["content"]
                            if isinstance(ref, dict) and ref.get("type") == "tool_reference"
                            and isinstance(ref.get("tool_name"), str))  # fmt: skip
    return used


def _tool_choice(choice: Any, functions: Names) -> tuple[Any, bool | None]:
    """(chat ``tool_choice`` or None, ``parallel_tool_calls`` or None)."""
    choice = typed.obj(choice, ("tool_choice",))
    if choice is None:
        return None, None
    no_parallel = "disable_parallel_tool_use"
    parallel = False if typed.flag(choice.get(no_parallel), ("tool_choice", no_parallel)) else None
    kind = typed.text(choice.get("type"), ("tool_choice", "type"))
    name = typed.text(choice.get("name"), ("tool_choice", "name"))
    if kind in _TOOL_CHOICE:
        return _TOOL_CHOICE[kind], parallel
    if kind == "tool" and name is not None:
        return {"type": "function", "function": {"name": functions.upstream(name)}}, parallel
    raise Untranslatable(f"unknown tool_choice type {kind!r}")


# --- messages ---------------------------------------------------------------------------


class _Convo:
    """Builds the chat message list; keeps the notes (mid-conversation system text) that
    wait for the next user turn."""

    __slots__ = ("files", "functions", "ids", "notes", "out")

    def __init__(self, functions: Names, files: str = "", short_ids: bool = False) -> None:
        self.functions = functions
        self.files = files  # a PDF may go on as a chat file part: to this upstream ("" none)
        self.ids = to_chat_id if short_ids else str  # how a tool call's id is written
        self.out: list[dict[str, Any]] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        last = self.out[-1] if self.out else None
        if last is not None and last["role"] == "user":
            _append_parts(last, [{"type": "text", "text": NOTE_OPEN + text + NOTE_CLOSE}])
        else:
            self.notes.append(text)

    def user(self, parts: list[dict[str, Any]]) -> None:
        notes = [{"type": "text", "text": NOTE_OPEN + n + NOTE_CLOSE} for n in self.notes]
        self.notes = []
        parts = notes + parts
        if not parts:
            return
        last = self.out[-1] if self.out else None
        if last is not None and last["role"] == "user":
            _append_parts(last, parts)  # Anthropic merges consecutive user turns; so do we
        else:
            self.out.append({"role": "user", "content": _content(parts)})

    def assistant(self, text: str, calls: list[dict[str, Any]]) -> None:
        last = self.out[-1] if self.out else None
        if last is not None and last["role"] == "assistant" and not last.get("tool_calls"):
            last["content"] = _join(last.get("content") or "", text)
            if calls:
                last["tool_calls"] = calls
            return
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text,
        }  # "" not null: llama-cpp-python 500s on null
        if calls:
            message["tool_calls"] = calls
        self.out.append(message)

    def finish(self) -> list[dict[str, Any]]:
        if self.notes:
            self.user([])
        return self.out


def _join(a: str, b: str) -> str:
    return a + "\n\n" + b if a and b else a or b


def _content(parts: list[dict[str, Any]]) -> Any:
    """A plain string when the parts are all text (what every server and template takes)."""
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _append_parts(message: dict[str, Any], parts: list[dict[str, Any]]) -> None:
    current = message["content"]
    have = [{"type": "text", "text": current}] if isinstance(current, str) else list(current)
    if isinstance(current, str) and not current:
        have = []
    message["content"] = _content(have + parts)


def _messages(
    raw: list[Any], functions: Names, files: str = "", short_ids: bool = False
) -> list[dict[str, Any]]:
    convo = _Convo(functions, files, short_ids)
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise typed.wrong(message, ("messages", i), "object")
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            _user_turn(convo, content, i)
        elif role == "assistant":
            _assistant_turn(convo, content, i)
        elif role == "system":
            text = "\n\n".join(_system_turn(content, i, functions))
            if text:
                convo.note(text)
        else:
            role = typed.text(role, ("messages", i, "role"))  # a role of another type: named as such
            raise Untranslatable(
                f"messages[{i}] has role {role!r}; Messages knows user, assistant and system"
            )
    return convo.finish()


def _system_turn(content: Any, i: int, functions: Names) -> list[str]:
    """A system message's texts, its tool changes said in words.

    ``tool_addition`` / ``tool_removal`` (beta mid-conversation-tool-changes-2026-07-01, named by
    Claude Code 2.1.332) offer a tool "from this point in the conversation onward" or withdraw
    one (https://platform.claude.com/docs/en/build-with-claude/mid-conversation-system-messages,
    "Mid-conversation tool changes"; the SDKs' BetaRequestToolAdditionBlock and
    BetaRequestToolRemovalBlock: a ``tool_reference`` to a ``tools`` entry by ``name``, or an
    MCP tool or toolset). A ``tool_definition`` carries the tool by value and joins the chat
    tools (``declared_tools``); a chat upstream has no tool list that changes mid-conversation,
    so the model is told here what it may call from now on."""
    def change(block: dict[str, Any], at: typed.Path) -> str | None:
        kind = block.get("type")
        if kind not in ("tool_addition", "tool_removal"):
            return None
        return _tool_change(block, kind == "tool_addition", at, functions)

    return _texts_of(content, ("messages", i, "content"), f"messages[{i}] (system)", change,
                     "text, tool_addition and tool_removal blocks")  # fmt: skip


def _tool_change(block: dict[str, Any], added: bool, at: typed.Path, functions: Names) -> str:
    tool = typed.obj(block.get("tool"), (*at, "tool")) or {}
    kind = typed.text(tool.get("type"), (*at, "tool", "type"))
    if kind in ("mcp_tool_reference", "mcp_toolset_reference"):
        raise Untranslatable(
            f"{typed.bracketed(at)}: MCP tools are connected by Anthropic's API; the gateway does not "
            "carry them to chat completions"
        )
    if kind == "tool_definition":
        definition = typed.obj(tool.get("definition"), (*at, "tool", "definition")) or {}
        name = typed.text(definition.get("name"), (*at, "tool", "definition", "name"))
    else:
        name = typed.text(tool.get("name"), (*at, "tool", "name"))
    if name is None:
        raise Untranslatable(f"{typed.bracketed(at)}: a {block['type']} block needs the tool's 'name'")
    called = functions.upstream(name)
    return f"Tool {called} is available from here on." if added else (
        f"Tool {called} is no longer available: do not call it.")


def _blocks(content: Any, i: int) -> list[dict[str, Any]]:
    found = typed.content(content, ("messages", i, "content"))
    if found is None:
        raise typed.wrong(content, ("messages", i, "content"), "string", "array")
    return [{"type": "text", "text": found}] if isinstance(found, str) else found


def _user_turn(convo: _Convo, content: Any, i: int) -> None:
    if isinstance(content, str) and content and not convo.notes:
        last = convo.out[-1] if convo.out else None
        if last is None or last["role"] != "user":
            # The common turn (a user's typed line): what the walk below makes of it, directly.
            convo.out.append({"role": "user", "content": content})
            return
    parts: list[dict[str, Any]] = []
    tool_images: list[dict[str, Any]] = []
    for k, block in enumerate(_blocks(content, i)):
        at = ("messages", i, "content", k)
        kind = typed.text(block.get("type"), (*at, "type"))
        if kind == "tool_result":
            given = typed.text(block.get("tool_use_id"), (*at, "tool_use_id")) or ""
            call_id = convo.ids(from_anthropic_id(given))
            text, images = _tool_result(block, i, at, convo.functions, convo.files)
            convo.out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            if images:
                # Named as the model sees the call: without the thought signature a Gemini id
                # carries (chat_gemini/signature.py), which the functionResponse goes without
                # too; a real one is a long base64 blob, prompt tokens on every image result.
                shown = call_id.partition(GEMINI_SIGNED)[0]
                what = "Images" if all(p["type"] == "image_url" for p in images) else "Files"
                tool_images.append({"type": "text", "text": f"{what} returned by tool call {shown}:"})
                tool_images += images
        else:
            parts += _part(block, i, at, convo.files)
    convo.user(tool_images + parts)


def _tool_result(
    block: dict[str, Any], i: int, at: typed.Path, functions: Names = NONE, files: str = ""
) -> tuple[str, list[dict[str, Any]]]:
    """The tool message's text, and the images and files it returned, which a chat tool message
    cannot hold: they follow it in a user turn. A PDF among them (Claude Code's Read on a .pdf
    returns one as a ``document`` block here) goes on as a file where a user turn's would
    (``files``), not as the note a chat server gets."""
    content = typed.content(block.get("content"), (*at, "content"))
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    for j, inner in enumerate(content if isinstance(content, list) else ()):
        if inner.get("type") == "tool_reference":
            texts.append(_tool_reference(inner, (*at, "content", j), functions))
            continue
        for part in _part(inner, i, (*at, "content", j), files):
            if part["type"] == "text":
                texts.append(part["text"])
            else:
                images.append(part)
    text = "\n\n".join(texts)
    shown = sum(part["type"] == "image_url" for part in images)
    if shown:
        text = _join(text, f"[{shown} image(s): attached after this result]")
    if len(images) > shown:
        text = _join(text, f"[{len(images) - shown} file(s): attached after this result]")
    if typed.flag(block.get("is_error"), (*at, "is_error")):
        # Chat has no error flag on a tool message; the model still has to know it failed.
        text = "Error: " + text
    return text, images


def _tool_reference(block: dict[str, Any], at: typed.Path, functions: Names) -> str:
    """A ``tool_reference`` in a tool search's result, as the text of the tool message.

    Anthropic's API loads the referenced tool's definition there ("Tool search tool" guide,
    https://platform.claude.com/docs/en/agents-and-tools/tool-use/tool-search-tool: "you can also
    implement client-side tool search by returning tool_reference blocks"; the SDKs'
    ``ToolReferenceBlockParam {type: "tool_reference", tool_name}``). A chat upstream is sent
    every tool up front, ``defer_loading`` ones as ordinary functions, so there is nothing to
    load: the model is told the tool is there, under the name it calls it by."""
    name = typed.text(block.get("tool_name"), (*at, "tool_name"))
    if name is None:
        raise Untranslatable(f"{typed.bracketed(at)}: a tool_reference block needs a 'tool_name'")
    return f"Tool {functions.upstream(name)} loaded: it can be called now."


def _part(block: dict[str, Any], i: int, at: typed.Path, files: str = "") -> list[dict[str, Any]]:
    """One user-side content block (at ``at``) as chat content parts (none when dropped by rule)."""
    kind = typed.text(block.get("type"), (*at, "type"))
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise typed.wrong(text, (*at, "text"), "string")
        return [{"type": "text", "text": text}] if text else []
    if kind == "image":
        return [{"type": "image_url", "image_url": {"url": _image_url(block.get("source"), i)}}]
    if kind == "document":
        return _document(block, i, at, files)
    if kind == "search_result":
        # Search results the client supplies (RAG): their text is what the model needs.
        head = "\n".join(str(block[k]) for k in ("title", "source") if isinstance(block.get(k), str))
        inner = [p for j, b in enumerate(typed.objects(block.get("content"), (*at, "content")))
                 for p in _part(b, i, (*at, "content", j))]  # fmt: skip
        return [
            {
                "type": "text",
                "text": _join(head, "\n\n".join(p["text"] for p in inner if p["type"] == "text")),
            }
        ]
    if kind in ("thinking", "redacted_thinking"):
        return []
    raise Untranslatable(
        f"messages[{i}]: the gateway does not carry a {kind!r} content block to chat completions"
    )


def _no_image_urls(raw: list[Any]) -> None:
    """Refuses an image given by URL, named where the client put it: Gemini reads an image sent
    inline only (chat_gemini refuses it too, but by its place among chat's messages, which a
    system prompt and split tool results shift)."""
    for i, message in enumerate(raw):
        content = message.get("content") if isinstance(message, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            for at, each in _with_inner(block, ("messages", i, "content", j)):
                source = each.get("source") if each.get("type") == "image" else None
                if isinstance(source, dict) and source.get("type") == "url":
                    raise Untranslatable(
                        f"{typed.bracketed(at)}: an image given by URL cannot be sent to a Gemini API "
                        "upstream, which does not fetch it: send it as base64 data"
                    )


def _with_inner(block: Any, at: typed.Path) -> list[tuple[typed.Path, dict[str, Any]]]:
    """A block and, for a tool result, the blocks it holds, each with where it is."""
    if not isinstance(block, dict):
        return []
    inner = block.get("content") if block.get("type") == "tool_result" else None
    held = [((*at, "content", k), b) for k, b in enumerate(inner) if isinstance(b, dict)] if isinstance(
        inner, list) else []  # fmt: skip
    return [(at, block), *held]


def _image_url(source: Any, i: int) -> str:
    if isinstance(source, dict):
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
        if source.get("type") == "file":
            raise Untranslatable(
                f"messages[{i}]: an image from Anthropic's Files API (file_id) is kept by Anthropic's API; "
                "the gateway does not carry it to chat completions"
            )
    raise Untranslatable(f"messages[{i}]: an image block needs a base64 or url source")


def _document(block: dict[str, Any], i: int, at: typed.Path, files: str = "") -> list[dict[str, Any]]:
    """Plain-text documents are carried as text; a PDF is replaced by a note saying it was left
    out, so the model knows rather than guesses (see the doc), unless ``files``: then a base64
    one goes as chat's file part (OpenAI's ``file_data`` data URL), and to Responses one by URL."""
    source = block.get("source")
    title = block.get("title") if isinstance(block.get("title"), str) else None
    pdf = isinstance(source, dict) and source.get("type") == "base64" and isinstance(source.get("data"), str)
    if files and pdf and isinstance(source, dict) and source.get("media_type") == "application/pdf":
        data_url = f"data:application/pdf;base64,{source['data']}"
        return [{"type": "file", "file": {"file_data": data_url, "filename": f"{title or 'document'}.pdf"}}]
    if files == "responses" and isinstance(source, dict) and source.get("type") == "url" \
            and isinstance(source.get("url"), str):  # fmt: skip
        # Written for the next hop only: Responses fetches a file by URL (``input_file``'s
        # ``file_url``), chat does not (OpenAI's "File inputs" guide: external file URL,
        # "Not supported" on Chat Completions, https://platform.openai.com/docs/guides/file-inputs).
        return [{"type": "file", "file": {"file_url": source["url"]}}]
    head = f"Document: {title}\n" if title else ""
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return [{"type": "text", "text": head + source["data"]}]
    if (
        isinstance(source, dict)
        and source.get("type") == "content"
        and isinstance(source.get("content"), list)
    ):
        parts: list[dict[str, Any]] = [{"type": "text", "text": head}] if head else []
        for j, inner in enumerate(source["content"]):
            if isinstance(inner, dict):
                parts += _part(inner, i, (*at, "source", "content", j))
        return parts
    what = source.get("media_type") if isinstance(source, dict) else None
    name = f" {title!r}" if title else ""
    return [
        {"type": "text", "text": f"[document{name} ({what or 'PDF'}) left out: this model cannot read it]"}
    ]


def _assistant_turn(convo: _Convo, content: Any, i: int) -> None:
    text = ""
    apart = False  # a non-text block since the last text: the next text is a new paragraph
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(_blocks(content, i)):
        at = ("messages", i, "content", k)
        kind = typed.text(block.get("type"), (*at, "type"))
        if kind == "text":
            said = typed.text(block.get("text"), (*at, "text"))
            if said:
                text = _join(text, said) if apart else text + said
                apart = False
            continue
        apart = True
        if kind == "tool_use":
            calls.append(_call(block, i, at, convo))
        elif kind in ("thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"):
            continue  # see the module doc: no chat field carries them
        else:
            raise Untranslatable(
                f"messages[{i}]: the gateway does not carry an assistant {kind!r} block to chat completions"
            )
    convo.assistant(text, calls)


def _call(block: dict[str, Any], i: int, at: typed.Path, convo: _Convo) -> dict[str, Any]:
    """A tool_use block as a chat tool call."""
    name = typed.text(block.get("name"), (*at, "name"))
    if name is None:
        raise Untranslatable(f"messages[{i}]: a tool_use block needs a 'name'")
    arguments = json.dumps(typed.obj(block.get("input"), (*at, "input")) or {}, ensure_ascii=False)
    function = {"name": convo.functions.upstream(name), "arguments": arguments}
    call_id = convo.ids(from_anthropic_id(typed.text(block.get("id"), (*at, "id")) or ""))
    return {"id": call_id, "type": "function", "function": function}
