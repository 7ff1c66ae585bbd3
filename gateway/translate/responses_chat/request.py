"""A Responses request as a chat completions request.

Rules, each with its reason (docs/translation/responses_chat.md has the whole table):

* ``instructions`` and every ``system`` / ``developer`` message become **one** leading system
  message, in their order. Many chat templates (llama.cpp's and vLLM's Jinja templates for
  Llama, Qwen, Mistral…) raise on a system message that is not first, and Codex sends
  developer messages later in a conversation when its settings change; hoisting them keeps
  their authority and relative order, at the price of their position.
* Consecutive assistant output (a ``message`` and the ``function_call`` / ``custom_tool_call``
  items after it) is one assistant message with ``tool_calls``: chat wants one assistant turn
  per model turn. Its ``content`` is a string, ``""`` when there is no text: llama-cpp-python
  answers 500 to ``content: null`` (tests/real/NOTES.md).
* ``function_call_output`` → a ``tool`` message (text). Images in a tool output (Codex's
  ``view_image``) cannot ride in a chat ``tool`` message (text parts only), so they follow the
  run of tool messages in one ``user`` message. Outputs of one call in a run (Codex's code mode
  sends a script's and each ``notify()``'s) are one ``tool`` message, their texts in order: OpenAI
  refuses a ``tool_call_id`` twice; but a turn that called twice under one id gets a message for
  each call first (``tool_results.py``). A ``call_id`` longer than OpenAI's 40
  characters (the Responses API takes 64; the gateway's Gemini ids carrying a thought signature
  run longer) goes to a chat upstream as a digest of itself, on the call and its output alike
  (``apis/chat/ids.py``).
* A ``reasoning`` item's ``content`` (``reasoning_text`` parts: the raw reasoning, as this
  translator, vLLM and Ollama answer it) becomes ``reasoning_content`` of the assistant message
  its turn's output lands in: clients replay the items they got, and DeepSeek's thinking mode
  answers 400 when a turn that called tools comes back without it. Summaries and
  ``encrypted_content`` (only OpenAI can read it) are dropped, as is reasoning with no
  assistant output after it in its turn; but for the gateway's own ``encrypted_content``
  (``thinking.py``: Anthropic's signed thinking, sealed by this translator's answers) on a
  request bound for Messages, which becomes the ``thinking_blocks`` of that same assistant
  message, so that Claude keeps thinking through a tool loop.
* Hosted-tool items (``web_search_call``…) are dropped: the server ran them, the assistant
  text after them carries what they found. A client-executed tool search is no hosted tool:
  its call and output are a function call and its result (``tool_search.py``).
* Refused: ``previous_response_id`` / ``conversation`` (a stateless chat upstream has no stored
  conversation to continue), ``background``, stored ``prompt`` templates, ``item_reference``,
  ``compaction`` items (history encrypted by OpenAI: dropping one would lose that history),
  ``input_file`` and file-id images (only OpenAI's file store has them), unknown item or part
  types. An ``input_file`` given by its data goes on to a Gemini or a Messages upstream, which
  read it; by its URL to a Messages one, Anthropic fetching a PDF by its URL.
* On to Messages, what Anthropic would refuse in an image or a document the client sent is
  refused here, naming the client's own field rather than the chat message it became; but for an
  image over Anthropic's 5 MB earlier in the conversation than the last assistant output, which
  ``chat_messages`` replaces by a note, a session keeping it in its history going on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.apis.chat.ids import to_chat_id
from gateway.translate import tool_cap, typed
from gateway.translate.base import Refusal, Target
from gateway.translate.chat_messages.request import (
    asked_from,
    image_seen,
    over_words,
    unread_document,
    unread_image,
    unread_image_words,
)
from gateway.translate.image_limits import Over, Seen, plan
from gateway.translate.responses_chat import additional_tools, thinking, tool_search
from gateway.translate.responses_chat.tools import (
    CUSTOM_INPUT,
    ToolNames,
    chat_tool_choice,
    chat_tools,
    tool_names,
)
from gateway.translate.tool_results import folded_into
from gateway.translate.typed import WrongType

_HOSTED_CALLS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_list_tools",
        "mcp_call",
        "mcp_approval_request",
        "mcp_approval_response",
        "tool_search_call",
        "tool_search_output",
    }
)
LOGPROBS = "message.output_text.logprobs"  # what ``include`` names to ask for the answer's log probabilities
_NEEDS_STORE = {
    "previous_response_id": "continues a response stored on the server",
    "conversation": "continues a conversation stored on the server",
    "prompt": "names a prompt template stored at OpenAI",
}
# The API the request goes on in (``Target.onward``), as a refusal names it.
_SPOKEN = {"": "chat completions", "messages": "Anthropic Messages", "gemini": "the Gemini API"}
# A refusal says what the gateway does not carry to the API the route ends on, not what that API
# lacks (Anthropic's API reads a document, Gemini's an image in a tool's result).
_CARRIED_TO = " to chat completions"
_SYSTEM_ROLES = ("system", "developer")
TOO_MANY_TOOLS = ("Connect fewer MCP servers (Codex: a client tool_search, which it sends for a model it "
                  "knows, loads them when needed), or route this model to an upstream that speaks "
                  "Responses.")  # fmt: skip
# What a json_schema text format carries to chat's json_schema, with each member's JSON type.
_SCHEMA_FORMAT = (
    ("name", typed.text), ("description", typed.text), ("schema", typed.obj), ("strict", typed.flag),
)  # fmt: skip


def _named_upstream(message: str, onward: str) -> str:
    """A refusal's words for the API the request goes on in: the rules are chat's, but the
    client reads of the upstream it has (a Messages upstream reached through chat)."""
    spoken = _SPOKEN.get(onward)
    return message if not onward or spoken is None else message.replace(_CARRIED_TO, f" to {spoken}")


class Untranslatable(Exception):
    """Raised inside the converters; becomes a ``Refusal``."""


def to_chat(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    try:
        return _to_chat(payload, target)
    except WrongType as e:
        return typed.refusal(e, "responses")


def _to_chat(payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
    spoken = _SPOKEN.get(target.onward, target.onward)
    for key, what in _NEEDS_STORE.items():
        if payload.get(key):
            return Refusal(
                f"'{key}' {what}; this upstream speaks {spoken}, which stores nothing. "
                "Send the whole conversation in 'instructions' and 'input' instead (what Codex "
                "does with store: false)."
            )
    if payload.get("background"):
        return Refusal(
            f"'background' responses need a server that stores them; this upstream speaks {spoken}, "
            "which stores nothing"
        )
    included = typed.top(payload, "include", typed.items)
    if typed.top(payload, "top_logprobs", typed.integer) or LOGPROBS in included:
        # As chat's own logprobs on every translation (chat_messages, chat_responses, chat_gemini).
        return Refusal(f"'top_logprobs' (and include '{LOGPROBS}') cannot be carried to an upstream that "
                       f"speaks {spoken}: the translation brings no token probabilities back")  # fmt: skip
    given = additional_tools.declared(payload)
    if tool_search.clashes(given):
        return Refusal("a function tool named 'tool_search' beside the client-executed tool_search tool: "
                       "through chat completions both would be one function 'tool_search'")  # fmt: skip
    declared = tool_search.effective_tools(payload, given)
    names = tool_names(declared)
    try:
        # Gemini and Claude read documents (a chat file part becomes Gemini's inlineData, or
        # Anthropic's document block); a chat server does not.
        onward = target.onward
        messages = _messages(
            payload, names, anthropic=onward == "messages", files=onward in ("gemini", "messages"),
            short_ids=not onward, model=target.model or None,
        )
    except Untranslatable as e:
        return Refusal(_named_upstream(str(e), onward))
    tools = chat_tools(declared, names)
    choice = chat_tool_choice(payload.get("tool_choice"), tools, names)
    if isinstance(choice, Refusal):
        return choice
    tool_choice, tools = choice
    if target.tools_max is not None and len(tools) > target.tools_max and not target.onward:
        return tool_cap.too_many(len(tools), target.tools_max, TOO_MANY_TOOLS)
    out: dict[str, Any] = {"model": target.model, "messages": messages}
    if tools:
        out["tools"] = tools
        if tool_choice is not None:
            out["tool_choice"] = tool_choice
        parallel = typed.top(payload, "parallel_tool_calls", typed.flag)
        if parallel is not None:
            out["parallel_tool_calls"] = parallel
    for key in ("temperature", "top_p"):
        value = typed.top(payload, key, typed.number)
        if value is not None:
            out[key] = value
    max_tokens = typed.top(payload, "max_output_tokens", typed.integer)
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    user, safety = typed.top(payload, "user", typed.text), typed.top(payload, "safety_identifier", typed.text)
    user = user or safety
    if user:
        out["user"] = user
    reasoning = typed.top(payload, "reasoning", typed.obj) or {}
    effort = typed.text(reasoning.get("effort"), ("reasoning", "effort"))
    if effort is not None:
        out["reasoning_effort"] = effort
    try:
        fmt = _response_format(payload.get("text"))
    except Untranslatable as e:
        return Refusal(str(e))
    if fmt is not None:
        out["response_format"] = fmt
    if payload.get("stream") is True:
        out["stream"] = True
        if target.stream_usage:
            out["stream_options"] = {"include_usage": True}
    return out


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = typed.obj((typed.obj(text, ("text",)) or {}).get("format"), ("text", "format"))
    kind = typed.text(fmt.get("type"), ("text", "format", "type")) if fmt is not None else None
    if fmt is None or kind in (None, "text"):
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        for key, read in _SCHEMA_FORMAT:
            read(fmt.get(key), ("text", "format", key))
        schema = {k: fmt[k] for k, _ in _SCHEMA_FORMAT if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise Untranslatable(f"text.format {fmt.get('type')!r} has no chat completions equivalent")


def _said(part: Mapping[str, Any], key: str, at: typed.Path) -> str:
    """The text of a content part (``at``), "" when it has none."""
    return typed.text(part.get(key), (*at, key)) or ""


def _text_of(content: Any, where: str, at: typed.Path) -> str:
    """The text of a message that chat wants as a plain string (system, assistant)."""
    content = typed.content(content, (*at, "content"))
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for j, part in enumerate(content or ()):
        kind = typed.text(part.get("type"), (*at, "content", j, "type"))
        if kind in ("input_text", "output_text", "text"):
            texts.append(_said(part, "text", (*at, "content", j)))
        elif kind == "refusal":
            texts.append(_said(part, "refusal", (*at, "content", j)))
        else:
            raise Untranslatable(
                f"the gateway does not carry a {where} message's {kind!r} part to chat completions"
            )
    return "\n\n".join(t for t in texts if t) if where == "system" else "".join(texts)


def _image_part(
    part: Mapping[str, Any], at: typed.Path, anthropic: bool, asked: bool = True, over: Over | None = None
) -> dict[str, Any]:
    """``anthropic``: the request goes on to Messages, whose refusal of an image type it does
    not read, or of one too large (``over``: ``_image_plan``) that the client ``asked`` about
    now, is made here, where it can name the client's own field."""
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise Untranslatable(
            "an input_image given by file_id names a file of OpenAI's file store, which the gateway does "
            "not carry to chat completions: send it as a URL or a base64 data URL"
        )
    unread = unread_image(url) if anthropic else None
    if unread is not None:
        raise Untranslatable(f"{typed.bracketed(at)}: {unread_image_words(unread)}")
    if over is not None and anthropic and asked:
        raise Untranslatable(f"{typed.bracketed(at)}: {over_words(over)}")
    image: dict[str, Any] = {"url": url}
    if part.get("detail") in ("low", "high", "auto"):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _file_part(part: Mapping[str, Any], at: typed.Path, anthropic: bool) -> dict[str, Any]:
    """An ``input_file`` as chat's file part, on its way to Gemini or (``anthropic``) Messages."""
    data, url = part.get("file_data"), part.get("file_url")
    file: dict[str, Any]
    if isinstance(data, str) and data:
        file = {"file_data": data}
    elif anthropic and isinstance(url, str) and url:
        file = {"file_url": url}  # no chat field: chat_messages reads it, Anthropic fetches the PDF
    elif part.get("file_id"):
        raise Untranslatable(f"{typed.bracketed(at)}: an input_file by file_id names a file of OpenAI's file "
                             "store, which the gateway does not carry to chat completions: send the document "
                             "as file_data (a base64 data URL)")  # fmt: skip
    else:
        # Google's fileData takes only files its own Files API holds.
        raise Untranslatable(f"{typed.bracketed(at)}: an input_file by file_url cannot be fetched by a chat "
                             "completions upstream: send the document as file_data (a base64 data "
                             "URL)")  # fmt: skip
    unread = unread_document(file) if anthropic else None
    if unread is not None:
        raise Untranslatable(f"{typed.bracketed(at)}: {unread}")
    name = part.get("filename")
    file["filename"] = name if isinstance(name, str) else "document"
    return {"type": "file", "file": file}


def _user_content(
    content: Any, at: typed.Path, anthropic: bool, files: bool = False, asked: bool = True,
    over: Mapping[typed.Path, Over] | None = None,
) -> str | list[dict[str, Any]]:
    """A user message's content: a plain string when it is only text (what every chat server
    takes), else chat content parts; ``files``: an ``input_file`` goes as chat's file part;
    ``asked``: the message is part of what the client asks about now (after the last output);
    ``over``: the images that cannot go on to Messages as they are (``_image_plan``)."""
    content = typed.content(content, (*at, "content"))
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content or ()):
        kind = typed.text(part.get("type"), (*at, "content", j, "type"))
        if kind in ("input_text", "output_text", "text"):
            parts.append({"type": "text", "text": _said(part, "text", (*at, "content", j))})
        elif kind == "input_image":
            where = (*at, "content", j)
            parts.append(_image_part(part, where, anthropic, asked, (over or {}).get(where)))
        elif kind == "input_file" and files:
            parts.append(_file_part(part, (*at, "content", j), anthropic))
        elif kind == "input_file":
            raise Untranslatable(
                "the gateway does not carry input_file (a document) to chat completions: "
                "the model would answer without it. Send its text as input_text instead."
            )
        else:
            raise Untranslatable(
                f"the gateway does not carry a user message's {kind!r} part to chat completions"
            )
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _tool_output(
    output: Any, at: typed.Path, anthropic: bool, asked: bool = True,
    over: Mapping[typed.Path, Over] | None = None,
) -> tuple[str, list[dict[str, Any]]]:
    """A function_call_output's text, and the images it returned (carried separately)."""
    output = typed.content(output, (*at, "output"))
    if isinstance(output, str):
        return output, []
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    for j, part in enumerate(output or ()):
        kind = typed.text(part.get("type"), (*at, "output", j, "type"))
        if kind in ("input_text", "output_text", "text"):
            texts.append(_said(part, "text", (*at, "output", j)))
        elif kind == "input_image":
            where = (*at, "output", j)
            images.append(_image_part(part, where, anthropic, asked, (over or {}).get(where)))
        else:
            raise Untranslatable(
                f"the gateway does not carry a tool output's {kind!r} part to chat completions"
            )
    text = "".join(texts)
    if images and not text:
        text = f"(the tool returned {len(images)} image(s): attached after this result)"
    return text, images


class _Builder:
    """Builds the chat ``messages`` list, merging what chat wants as one message."""

    def __init__(
        self, names: ToolNames, anthropic: bool = False, files: bool = False, asked_from: int = 0
    ) -> None:
        self.names = names
        self.asked_from = asked_from  # the first input item after the last assistant output
        self.over: dict[typed.Path, Over] = {}  # images that cannot go on to Messages as they are
        # The request goes on to Messages: signed thinking is read, and images it does not read refused.
        self.anthropic = anthropic
        self.files = files  # the request goes on to Gemini, which reads an input_file's data
        self.signed: list[dict[str, Any]] = []  # thinking_blocks for the turn's next assistant output
        self.model: str | None = None  # the upstream's: another model's sealed thinking is left out
        self.system: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.pending_images: list[dict[str, Any]] = []
        self.reasoning: list[str] = []  # reasoning items' text, for the turn's next assistant output

    def _flush_images(self) -> None:
        if self.pending_images:
            self.messages.append({"role": "user", "content": self.pending_images})
            self.pending_images = []

    def _assistant(self) -> dict[str, Any]:
        """The assistant message tool calls join: the last one, if nothing came after it."""
        last = self.messages[-1] if self.messages else None
        if last is not None and last["role"] == "assistant" and not self.pending_images:
            return last
        self._flush_images()
        msg: dict[str, Any] = {"role": "assistant", "content": ""}
        self.messages.append(msg)
        return msg

    def think(self, item: Mapping[str, Any]) -> None:
        content = item.get("content")
        parts = content if isinstance(content, list) else []
        text = "".join(p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "reasoning_text"
                       and isinstance(p.get("text"), str))  # fmt: skip
        if text:
            self.reasoning.append(text)
        if self.anthropic:
            self.signed += thinking.unseal(item, self.model)

    def _reasoned(self, msg: dict[str, Any]) -> None:
        """``msg`` carries the reasoning that came before this output of its turn."""
        if self.signed:
            msg["thinking_blocks"] = msg.get("thinking_blocks", []) + self.signed
            self.signed = []
        if self.reasoning:
            before = [msg["reasoning_content"]] if "reasoning_content" in msg else []
            msg["reasoning_content"] = "\n\n".join(before + self.reasoning)
            self.reasoning = []

    def message(self, item: Mapping[str, Any], at: typed.Path) -> None:
        role = typed.text(item.get("role"), (*at, "role")) or "user"
        content = item.get("content")
        if role in _SYSTEM_ROLES:
            text = _text_of(content, "system", at)
            if text:
                self.system.append(text)
            return
        if role == "assistant":
            text = _text_of(content, "assistant", at)
            last = self.messages[-1] if self.messages else None
            # Text after tool calls is a new turn; text after text (two output messages of one
            # turn) is joined.
            if (
                last is not None
                and last["role"] == "assistant"
                and "tool_calls" not in last
                and not self.pending_images
            ):
                last["content"] += text
            else:
                self._flush_images()
                self.messages.append({"role": "assistant", "content": text})
            self._reasoned(self.messages[-1])
            return
        if role != "user":
            raise Untranslatable(f"message role {role!r} has no chat completions equivalent")
        self.reasoning, self.signed = [], []
        self._flush_images()
        content = _user_content(content, at, self.anthropic, self.files, self.asked(at), self.over)
        self.messages.append({"role": "user", "content": content})

    def asked(self, at: typed.Path) -> bool:
        """Whether the item at ``at`` is part of what the client asks about now."""
        index = at[1] if at[0] == "input" else None
        return index >= self.asked_from if isinstance(index, int) else self.asked_from == 0

    def call(self, call_id: str, chat_name: str, arguments: str) -> None:
        msg = self._assistant()
        msg.setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": chat_name, "arguments": arguments}}
        )
        self._reasoned(msg)

    def output(self, call_id: str, text: str, images: list[dict[str, Any]]) -> None:
        if self.pending_images and self.messages and self.messages[-1]["role"] != "tool":
            self._flush_images()
        self.reasoning, self.signed = [], []
        # On to Messages they stay apart: ``chat_messages`` folds them into one result's blocks.
        answered = None if self.anthropic else folded_into(self.messages, call_id)
        if answered is not None:
            answered["content"] = "\n\n".join(t for t in (answered["content"], text) if t)
        else:
            self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
        self.pending_images += images

    def done(self) -> list[dict[str, Any]]:
        self._flush_images()
        head = [{"role": "system", "content": "\n\n".join(self.system)}] if self.system else []
        return head + self.messages


def _call_id(item: Mapping[str, Any], at: typed.Path, short: bool) -> str:
    call_id = typed.text(item.get("call_id"), (*at, "call_id"))
    if not call_id:
        raise Untranslatable(f"a {item.get('type')} item without a call_id cannot be paired with its output")
    return to_chat_id(call_id) if short else call_id


def _image_plan(b: _Builder, instructions: Any, items: Any) -> dict[typed.Path, Over]:
    """The ``input_image`` parts that cannot go on to Messages as they are, by their place: in
    messages and in function outputs, in the order chat has them (``chat_messages`` plans the
    same images again, and comes to the same count)."""
    seen: dict[typed.Path, Seen] = {}
    for top, listed in (("instructions", instructions), ("input", items)):
        for k, item in enumerate(listed if isinstance(listed, list) else ()):
            for key in ("content", "output"):
                parts = item.get(key) if isinstance(item, dict) else None
                for j, part in enumerate(parts if isinstance(parts, list) else ()):
                    if isinstance(part, dict) and part.get("type") == "input_image":
                        seen[top, k, key, j] = image_seen(part.get("image_url"), b.asked((top, k)))
    return plan(seen)


def _namespace(item: Mapping[str, Any]) -> str | None:
    ns = item.get("namespace")
    return ns if isinstance(ns, str) else None


def _messages(
    payload: Mapping[str, Any], names: ToolNames, anthropic: bool = False, files: bool = False,
    short_ids: bool = False, model: str | None = None,
) -> list[dict[str, Any]]:
    items = payload.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    b = _Builder(names, anthropic, files, _asked_from(items))
    b.model = model
    instructions = payload.get("instructions")
    b.over = _image_plan(b, instructions, items) if anthropic else {}
    if isinstance(instructions, str):
        if instructions:
            b.system.append(instructions)
    elif instructions is not None:  # the response object's echo form: input items
        if not isinstance(instructions, list):
            raise typed.wrong(instructions, ("instructions",), "string", "array")
        for k, item in enumerate(typed.objects(instructions, ("instructions",))):
            b.message(item, ("instructions", k))
    for k, item in enumerate(typed.objects(items, ("input",))):
        at = ("input", k)
        kind = typed.text(item.get("type"), (*at, "type")) or "message"
        if kind == "message":
            b.message(item, at)
        elif kind == "function_call":
            args = item.get("arguments")
            b.call(
                _call_id(item, at, short_ids),
                names.chat_name(typed.text(item.get("name"), (*at, "name")) or "", _namespace(item)),
                args if isinstance(args, str) else json.dumps(args or {}),
            )
        elif kind == "custom_tool_call":
            # Codex's custom `exec` lives in the `functions` namespace (responses-lite).
            b.call(
                _call_id(item, at, short_ids),
                names.chat_name(typed.text(item.get("name"), (*at, "name")) or "", _namespace(item)),
                json.dumps({CUSTOM_INPUT: typed.text(item.get("input"), (*at, "input")) or ""}),
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            text, images = _tool_output(item.get("output"), at, anthropic, b.asked(at), b.over)
            b.output(_call_id(item, at, short_ids), text, images)
        elif kind == "reasoning":
            b.think(item)
        elif kind == "tool_search_call" and tool_search.is_client(item):
            args = item.get("arguments")
            b.call(_call_id(item, at, short_ids), names.chat_name(tool_search.NAME),
                   args if isinstance(args, str) else json.dumps(args or {}))  # fmt: skip
        elif kind == "tool_search_output" and tool_search.is_client(item):
            b.output(_call_id(item, at, short_ids), tool_search.output_text(item, names), [])
        elif kind in _HOSTED_CALLS:
            continue
        elif kind == additional_tools.ITEM:
            continue  # no turn: its tools are the request's (additional_tools.py)
        elif kind in ("compaction", "compaction_summary"):
            raise Untranslatable(
                "a compaction item holds earlier conversation encrypted by OpenAI: the gateway does "
                "not carry it to chat completions, and dropping it would lose that history"
            )
        elif kind == "item_reference":
            raise Untranslatable(
                "item_reference points at an item stored on the server; the gateway does not carry "
                "it to chat completions. Send the item itself."
            )
        else:
            raise Untranslatable(f"the gateway does not carry input item type {kind!r} to chat completions")
    return b.done()


def _asked_from(items: Any) -> int:
    """The index of the first input item after the last one that becomes assistant output in
    chat (``chat_messages`` tells what the client asks about now by the same mark)."""
    return asked_from(items if isinstance(items, list) else (), _output)


def _output(item: Any) -> bool:
    return isinstance(item, dict) and (
        item.get("type") in ("function_call", "custom_tool_call")
        or (item.get("type") == "tool_search_call" and tool_search.is_client(item))
        or (item.get("type", "message") == "message" and item.get("role") == "assistant"))
