"""An Anthropic Messages request as an OpenAI chat completions request.

Rules (each with its reason in docs/translation/messages_chat.md):

* ``system`` (a string or text blocks) becomes the first ``system`` message, one string;
  Claude Code's attribution block (``x-anthropic-billing-header: …``) is billing metadata for
  Anthropic's API, not an instruction, so it is left out.
* ``role: "system"`` entries inside ``messages`` (Claude Code's mid-conversation system
  beta) become ``<system-reminder>`` text in the neighbouring user turn: many chat templates
  reject a system message that is not first, and folding them into the first system message
  would change the prompt's prefix (and bust a server's prefix cache) each time one appears.
* ``tool_use`` blocks become ``tool_calls`` (ids kept as they are), ``tool_result`` blocks
  ``tool`` messages right after them; images inside a tool result follow in a user message,
  because a chat ``tool`` message carries text only.
* thinking blocks in history are dropped: chat completions has no field for them, and a
  signed Anthropic thinking block means nothing to another model.
* ``cache_control``, ``context_management``, ``top_k``, ``service_tier``, ``container`` are
  dropped; hosted tools, ``mcp_servers`` and Files-API sources are refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gateway.translate import json_schema, names
from gateway.translate.base import Refusal, Target
from gateway.translate.names import NONE, Names

BILLING_PREFIX = "x-anthropic-billing-header:"
NOTE_OPEN, NOTE_CLOSE = "<system-reminder>\n", "\n</system-reminder>"

# Anthropic effort (output_config.effort) → chat reasoning_effort: the three values every
# chat server that takes the field accepts (vLLM validates exactly these).
_EFFORT = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
# OpenAI refuses a longer `user` ("Invalid 'user': string too long. Expected a string with
# maximum length 64", LiteLLM #37623); Claude Code's metadata.user_id is ~120 characters of JSON.
USER_MAX = 64

_TOOL_CHOICE = {"auto": "auto", "any": "required", "none": "none"}


class Untranslatable(Exception):
    """Raised inside the walk; becomes a ``Refusal``."""


def to_chat(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _request(payload, target)
    except Untranslatable as e:
        return Refusal(str(e))


def _request(payload: Mapping[str, Any], target: Target) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    system = _system_text(payload.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    raw = payload.get("messages")
    if not isinstance(raw, list):
        raise Untranslatable("'messages' must be a list of message objects")
    functions = function_names(payload.get("tools"))
    messages += _messages(raw, functions)
    out: dict[str, Any] = {"model": target.model, "messages": messages}

    # Each optional field's rule runs only when the field is there: most requests carry few
    # of them, and this runs for every translated request (issue #38).
    max_tokens = payload.get("max_tokens")
    if max_tokens is not None:
        # max_tokens, not max_completion_tokens: llama.cpp, llama-cpp-python, vLLM and TGI
        # all read it; only OpenAI's reasoning models insist on the newer name.
        out["max_tokens"] = max_tokens
    for key in ("temperature", "top_p"):
        if payload.get(key) is not None:
            out[key] = payload[key]
    stops = payload.get("stop_sequences")
    if isinstance(stops, list) and stops:
        out["stop"] = list(stops)
    if "metadata" in payload:
        user = _user(payload["metadata"])
        if user:
            out["user"] = user
    if "thinking" in payload or "output_config" in payload or "output_format" in payload:
        effort = _reasoning_effort(payload.get("thinking"), payload.get("output_config"))
        if effort:
            out["reasoning_effort"] = effort
        fmt = _response_format(payload.get("output_config"), payload.get("output_format"))
        if fmt:
            out["response_format"] = fmt

    tools = _tools(payload.get("tools"), functions)
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
            "'mcp_servers' are run by Anthropic's API; a chat completions upstream cannot reach them"
        )

    if payload.get("stream") is True:
        out["stream"] = True
        if target.stream_usage:
            out["stream_options"] = {"include_usage": True}
    return out


def _text_of(blocks: Any, where: str) -> str:
    if isinstance(blocks, str):
        return blocks
    if not isinstance(blocks, list):
        raise Untranslatable(f"{where} must be a string or a list of text blocks")
    parts = []
    for block in blocks:
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise Untranslatable(f"{where} may hold only text blocks")
        parts.append(block["text"])
    return "\n\n".join(parts)


def _system_text(system: Any) -> str:
    if system is None:
        return ""
    if isinstance(system, list):
        system = [
            b
            for b in system
            if not (isinstance(b, dict) and str(b.get("text", "")).startswith(BILLING_PREFIX))
        ]
    return _text_of(system, "'system'")


def _user(metadata: Any) -> str | None:
    """metadata.user_id as chat's ``user``: an id over OpenAI's 64 characters is sent as its
    SHA-256 (64 hex digits), which tells users apart as well."""
    if isinstance(metadata, dict) and isinstance(metadata.get("user_id"), str) and metadata["user_id"]:
        user = str(metadata["user_id"])
        return user if len(user) <= USER_MAX else hashlib.sha256(user.encode()).hexdigest()
    return None


def _reasoning_effort(thinking: Any, output_config: Any) -> str | None:
    """``thinking`` and ``output_config.effort`` → ``reasoning_effort``.

    A budget maps by size; it is never refused for being under Anthropic's 1,024 minimum
    (that floor is Anthropic's, not the chat upstream's: Bifrost #1479 refused it)."""
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if kind == "disabled":
        return None  # omitted, not "none": vLLM and older OpenAI models reject "none"
    effort = output_config.get("effort") if isinstance(output_config, dict) else None
    if isinstance(effort, str) and effort in _EFFORT:
        return _EFFORT[effort]
    if kind == "enabled":
        budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
        if not isinstance(budget, int) or isinstance(budget, bool):
            return "medium"
        return "low" if budget < 4096 else "medium" if budget < 16384 else "high"
    return None  # adaptive without an effort: the server's default


def _response_format(output_config: Any, output_format: Any) -> dict[str, Any] | None:
    fmt = output_config.get("format") if isinstance(output_config, dict) else None
    fmt = fmt if isinstance(fmt, dict) else output_format
    if (
        not isinstance(fmt, dict)
        or fmt.get("type") != "json_schema"
        or not isinstance(fmt.get("schema"), dict)
    ):
        return None
    schema = fmt["schema"]
    return {"type": "json_schema",
            "json_schema": {"name": "output", "schema": schema, "strict": strict_ok(schema)}}  # fmt: skip


def strict_ok(schema: Any) -> bool:
    """Whether OpenAI's strict mode takes ``schema``: each object closed with every property
    required (OpenAI: "'required' is required to be supplied and to be an array including
    every key in properties"). Anthropic takes optional properties; a schema with them is sent
    without ``strict``, a best effort, rather than refused."""
    if isinstance(schema, list):
        return all(strict_ok(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if json_schema.is_object(schema):
        props = schema.get("properties")
        names = set(props) if isinstance(props, dict) else set()
        required = schema.get("required")
        if schema.get("additionalProperties") is not False:
            return False
        if names and not (isinstance(required, list) and names <= set(required)):
            return False
    return all(strict_ok(s) for s in json_schema.nested(schema))


@names.per_tools
def function_names(tools: Any) -> Names:
    """The tools' names as a chat upstream takes them (``translate/names.py``): Anthropic takes
    128 characters, OpenAI 64, and Claude Code's ``mcp__<server>__<tool>`` names run past 64."""
    if not isinstance(tools, list) or not tools:
        return NONE
    declared = tuple(t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str))
    return names.names_for(declared, names.CHAT)


def _tools(tools: Any, functions: Names) -> list[dict[str, Any]]:
    if not tools:
        return []
    if not isinstance(tools, list):
        raise Untranslatable("'tools' must be a list")
    out = []
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise Untranslatable("every tool needs a 'name'")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise Untranslatable(
                f"tool {tool['name']!r} is Anthropic's {kind!r} tool, run or defined by Anthropic's API; "
                "a chat completions upstream has no such tool (give it as a custom tool with an input_schema)"
            )
        function: dict[str, Any] = {"name": functions.upstream(tool["name"])}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        schema = tool.get("input_schema")
        function["parameters"] = schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        if tool.get("strict") is True and strict_ok(function["parameters"]):
            function["strict"] = True  # only where OpenAI's stricter rules hold: else it is a 400
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, functions: Names) -> tuple[Any, bool | None]:
    """(chat ``tool_choice`` or None, ``parallel_tool_calls`` or None)."""
    if not isinstance(choice, dict):
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") is True else None
    kind = choice.get("type")
    if kind in _TOOL_CHOICE:
        return _TOOL_CHOICE[kind], parallel
    if kind == "tool" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": functions.upstream(choice["name"])}}, parallel
    raise Untranslatable(f"unknown tool_choice type {kind!r}")


# --- messages ---------------------------------------------------------------------------


class _Convo:
    """Builds the chat message list; keeps the notes (mid-conversation system text) that
    wait for the next user turn."""

    def __init__(self, functions: Names) -> None:
        self.functions = functions
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


def _messages(raw: list[Any], functions: Names) -> list[dict[str, Any]]:
    convo = _Convo(functions)
    for i, message in enumerate(raw):
        if not isinstance(message, dict):
            raise Untranslatable(f"messages[{i}] must be an object")
        role, content = message.get("role"), message.get("content")
        if role == "system":
            text = _text_of(content, f"messages[{i}] (system)")
            if text:
                convo.note(text)
        elif role == "user":
            _user_turn(convo, content, i)
        elif role == "assistant":
            _assistant_turn(convo, content, i)
        else:
            raise Untranslatable(
                f"messages[{i}] has role {role!r}; Messages knows user, assistant and system"
            )
    return convo.finish()


def _blocks(content: Any, i: int) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(b, dict) for b in content):
        raise Untranslatable(f"messages[{i}].content must be a string or a list of content blocks")
    return content


def _user_turn(convo: _Convo, content: Any, i: int) -> None:
    if isinstance(content, str) and content and not convo.notes:
        last = convo.out[-1] if convo.out else None
        if last is None or last["role"] != "user":
            # The common turn (a user's typed line): what the walk below makes of it, directly.
            convo.out.append({"role": "user", "content": content})
            return
    parts: list[dict[str, Any]] = []
    tool_images: list[dict[str, Any]] = []
    for block in _blocks(content, i):
        kind = block.get("type")
        if kind == "tool_result":
            text, images = _tool_result(block, i)
            convo.out.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
            )
            if images:
                tool_images.append(
                    {"type": "text", "text": f"Images returned by tool call {block.get('tool_use_id')}:"}
                )
                tool_images += images
        else:
            parts += _part(block, i)
    convo.user(tool_images + parts)


def _tool_result(block: dict[str, Any], i: int) -> tuple[str, list[dict[str, Any]]]:
    content = block.get("content")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for inner in content:
            if not isinstance(inner, dict):
                raise Untranslatable(f"messages[{i}]: a tool_result's content blocks must be objects")
            for part in _part(inner, i):
                if part["type"] == "text":
                    texts.append(part["text"])
                else:
                    images.append(part)
    elif content is not None:
        raise Untranslatable(f"messages[{i}]: a tool_result's content must be a string or a list of blocks")
    text = "\n\n".join(texts)
    if images:
        text = _join(text, f"[{len(images)} image(s): in the next user message]")
    if block.get("is_error") is True:
        # Chat has no error flag on a tool message; the model still has to know it failed.
        text = "Error: " + text
    return text, images


def _part(block: dict[str, Any], i: int) -> list[dict[str, Any]]:
    """One user-side content block as chat content parts (none when dropped by rule)."""
    kind = block.get("type")
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str):
            raise Untranslatable(f"messages[{i}]: a text block needs a string 'text'")
        return [{"type": "text", "text": text}] if text else []
    if kind == "image":
        return [{"type": "image_url", "image_url": {"url": _image_url(block.get("source"), i)}}]
    if kind == "document":
        return _document(block, i)
    if kind == "search_result":
        # Search results the client supplies (RAG): their text is what the model needs.
        head = "\n".join(str(block[k]) for k in ("title", "source") if isinstance(block.get(k), str))
        inner = [p for b in block.get("content") or [] if isinstance(b, dict) for p in _part(b, i)]
        return [
            {
                "type": "text",
                "text": _join(head, "\n\n".join(p["text"] for p in inner if p["type"] == "text")),
            }
        ]
    if kind in ("thinking", "redacted_thinking"):
        return []
    raise Untranslatable(
        f"messages[{i}]: a {kind!r} content block cannot be sent to a chat completions upstream"
    )


def _image_url(source: Any, i: int) -> str:
    if isinstance(source, dict):
        if source.get("type") == "base64" and isinstance(source.get("data"), str):
            return f"data:{source.get('media_type') or 'image/png'};base64,{source['data']}"
        if source.get("type") == "url" and isinstance(source.get("url"), str):
            return str(source["url"])
        if source.get("type") == "file":
            raise Untranslatable(
                f"messages[{i}]: an image from Anthropic's Files API (file_id) cannot be fetched "
                "by a chat completions upstream"
            )
    raise Untranslatable(f"messages[{i}]: an image block needs a base64 or url source")


def _document(block: dict[str, Any], i: int) -> list[dict[str, Any]]:
    """Plain-text documents are carried as text; a PDF (base64, url or file) is replaced by a
    note saying it was left out, so the model knows rather than guesses (see the doc)."""
    source = block.get("source")
    title = block.get("title") if isinstance(block.get("title"), str) else None
    head = f"Document: {title}\n" if title else ""
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return [{"type": "text", "text": head + source["data"]}]
    if (
        isinstance(source, dict)
        and source.get("type") == "content"
        and isinstance(source.get("content"), list)
    ):
        parts: list[dict[str, Any]] = [{"type": "text", "text": head}] if head else []
        for inner in source["content"]:
            if isinstance(inner, dict):
                parts += _part(inner, i)
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
    for block in _blocks(content, i):
        kind = block.get("type")
        if kind == "text":
            if isinstance(block.get("text"), str) and block["text"]:
                text = _join(text, block["text"]) if apart else text + block["text"]
                apart = False
            continue
        apart = True
        if kind == "tool_use":
            if not isinstance(block.get("name"), str):
                raise Untranslatable(f"messages[{i}]: a tool_use block needs a 'name'")
            arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
            function = {"name": convo.functions.upstream(block["name"]), "arguments": arguments}
            calls.append({"id": str(block.get("id", "")), "type": "function", "function": function})
        elif kind in ("thinking", "redacted_thinking", "server_tool_use", "web_search_tool_result"):
            continue  # see the module doc: no chat field carries them
        else:
            raise Untranslatable(
                f"messages[{i}]: an assistant {kind!r} block cannot be sent to a chat completions upstream"
            )
    convo.assistant(text, calls)
