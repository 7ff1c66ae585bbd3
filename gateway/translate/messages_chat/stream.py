"""A chat completions stream as an Anthropic Messages stream, chunk by chunk.

Grammar kept (Anthropic docs, "Streaming Messages"): ``message_start`` first, then content
blocks one at a time (``content_block_start`` → deltas → ``content_block_stop``, indexes
0, 1, 2… in order), then ``message_delta`` (stop_reason, usage) and ``message_stop``.

What the translation has to do that chat does not:

* ``message_start`` carries usage, but chat reports usage only at the end: its
  ``input_tokens`` is the request's estimate (never 0: LiteLLM #24176, vercel/ai #17326),
  and the real counts follow in ``message_delta``.
* reasoning, text and each tool call get their own block; a reasoning delta after text
  opens a new thinking block, never a ``thinking_delta`` inside a text block (LiteLLM
  #33224); every delta names a block that was started (LiteLLM #13373).
* parallel tool calls: chat interleaves them by ``index`` (which call a fragment belongs to
  where a server leaves it out or reuses it: ``apis/chat/call_slots.py``); a block cannot be
  reopened once stopped, so the open tool block is stopped only when its arguments parse as
  complete JSON. Until then anything for another block waits (in order) and follows at once after.
* a structured answer whose schema went inside an object (a list, a string enum:
  ``translate/root.py``) is held to the end, or to a tool call after it, and goes out as one
  text block, the value taken out of the wrapper: its fragments cannot be unwrapped one by one;
* a call's id goes out in Anthropic's alphabet (``translate/tool_ids.py``: Kimi K2 on vLLM and
  SGLang names its calls ``functions.Bash:0``), and comes back to the upstream as it was sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.apis.base import Ending
from gateway.apis.chat.call_slots import CallSlots
from gateway.apis.messages.wire import AnthropicStreamReader
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.sse import loads_event, parse_event
from gateway.translate.base import CONTINUED, Context, Known, continued, input_tokens
from gateway.translate.messages_chat.answer import (
    estimate_input_tokens,
    matched_stop,
    message_id,
    reasoning_of,
    stop_reason,
    tool_id,
    usage,
)
from gateway.translate.messages_chat.request import answer_wrapped, declared_tools, function_names
from gateway.translate.names import Names
from gateway.translate.root import unwrapped
from gateway.translate.tool_ids import to_anthropic_id

_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
_DELTA_HEAD = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_DELTA_KEY = {
    "text": b'"text_delta","text":', "thinking": b'"thinking_delta","thinking":',
    "tool": b'"input_json_delta","partial_json":',
}  # fmt: skip
_DELTA_END = b"}}\n\n"
_LF = ord("\n")


# The stream's first event, as ``_event`` writes its document (the message's id, model and
# input tokens go in as JSON; tests/unit/translate/test_messages_chat.py holds the two
# equal): one formatting, not the nested dictionaries and their encoding (~9,600 instructions
# a stream, issue #38). No ``cache_creation`` breakdown: a chat upstream states its cache writes
# in its last chunk, and ``message_delta`` has no place for the breakdown (the anthropic SDK's
# ``MessageDeltaUsage``, which its stream helper copies member by member), so zeros here stayed
# beside a ``cache_creation_input_tokens`` of 3,000 (review); the buffered answer has none either.
_MESSAGE_START = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":%b,"type":"message",'
    b'"role":"assistant","model":%b,"content":[],"stop_reason":null,"stop_sequence":null,'
    b'"usage":{"input_tokens":%b,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
    b'"output_tokens":1}}}\n\n'
)


def _event(name: str, doc: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(doc) + b"\n\n"


def _delta_head(index: int, kind: str) -> bytes:
    """A block's delta event up to its text, which follows as a JSON string and ``_DELTA_END``:
    made once per block, not once per delta (a chat stream has one event per token)."""
    return _DELTA_HEAD + str(index).encode() + b',"delta":{"type":' + _DELTA_KEY[kind]


def _block_stop(index: int) -> bytes:
    return (
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
        + str(index).encode()
        + b"}\n\n"
    )


class _Tool:
    __slots__ = ("args", "block", "closed", "id", "name", "pending")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.block: int | None = None  # its Messages index once started
        self.closed = False
        self.args: list[str] = []  # what was sent as input_json_delta
        self.pending = ""  # arguments that came before the call's name


class ChatToMessagesStream:
    def __init__(self, ctx: Context, known: Known | None = None) -> None:
        self.ctx = ctx
        self.known = known
        self.started = False
        self.done = False
        self.next_index = 0
        self.open_kind: str | None = None  # "text", "thinking" or "tool"
        self.open_index = 0
        self.open_head = b""  # the open block's delta event up to its text (``_delta_head``)
        self.open_tool: _Tool | None = None
        self.tools: dict[int, _Tool] = {}  # by CallSlots' number
        self.slots = CallSlots()
        self.functions: Names | None = None  # the declared tools' names, read at the first call
        # (kind, tool key or None, text) waiting for the open tool's arguments to complete
        self.held: list[tuple[str, int | None, str]] = []
        self.ending = False
        self.finish: Any = None
        self.matched: str | None = None
        self.refused = False
        self.any_tool = False
        self.chat_usage: dict[str, Any] | None = None
        self.shown = 0  # bytes of content sent, for an output estimate when usage never comes
        self.estimate: int | None = None
        self.continued = False  # the gateway continued the stream: its end says so
        self.wrapped = answer_wrapped(ctx.request)
        self.structured: list[str] = []  # a wrapped answer's text, until the end

    # --- the StreamTranslator protocol -------------------------------------------------

    def event(self, raw: bytes) -> bytes:
        if self.done:
            return b""
        # The one-line ``data: …`` every server sends is read without parse_event: this runs
        # once per token, and each call and object counts (issue #38). Each affix is taken off
        # (the same object back when it is absent) rather than tested: on 3.11 startswith,
        # endswith and find parse their arguments from a format string, ~1,000 instructions a
        # call, and a line break is looked for as one byte (a memchr: see gateway/sse.py).
        line = raw.removeprefix(b"data: ")
        data = line.removesuffix(b"\n\n")
        if line is raw or data is line or _LF in data:
            text = parse_event(raw).data
            if text is None:  # a comment (keep-alive): keep the client's connection alive too
                return _PING if self.started else b""
            data = text.encode()
        out: list[bytes] = []
        if len(data) < 16 and data.strip() == b"[DONE]":
            if not self.started:
                out.append(self._start(None))
            out += self._finish()
            return b"".join(out)
        doc = self.known(raw) if self.known is not None else None  # decoded by the reader before us
        if doc is None:
            try:
                doc = orjson.loads(data)
            except orjson.JSONDecodeError:
                doc = loads_event(data)  # what only json reads (a huge int, NaN), or None
        if not isinstance(doc, dict):
            return b""
        if "usage" in doc and isinstance(doc["usage"], dict):
            self.chat_usage = doc["usage"]
        if CONTINUED in doc:
            self.continued = self.continued or continued(doc)
        if not self.started:
            out.append(self._start(self.chat_usage))
        choices = doc.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict) and choice.get("index", 0) == 0:
                    self._choice(choice, out)
                    break
        return b"".join(out)

    def close(self) -> bytes:
        if self.done:
            return b""
        out = [] if self.started else [self._start(None)]
        return b"".join(out + self._finish())

    def broken(self, ending: Ending) -> bytes:
        self.done = True
        return AnthropicStreamReader().broken(ending, self.ctx.request_id, self.ctx.requested_model)

    # --- chunks -------------------------------------------------------------------------

    def _start(self, chat_usage: dict[str, Any] | None) -> bytes:
        self.started = True
        prompt = chat_usage.get("prompt_tokens") if chat_usage else None
        if not isinstance(prompt, int) or prompt <= 0:
            prompt = self._estimate()
        return _MESSAGE_START % (
            orjson.dumps(message_id(self.ctx)), orjson.dumps(self.ctx.requested_model), orjson.dumps(prompt)
        )

    def _estimate(self) -> int:
        if self.estimate is None:
            self.estimate = input_tokens(self.ctx, estimate_input_tokens)
        return self.estimate

    def _choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if len(delta) == 1 and isinstance(content, str):
                # A token's delta is its text alone (OpenAI, vLLM, llama.cpp after the first
                # chunk): no reasoning, refusal or call to look for (~25 bytecodes an event of
                # the ~220 this translation runs per token, issue #38).
                if content:
                    if self.wrapped:
                        self.structured.append(content)
                    else:
                        self._text("text", content, out)
            else:
                self._delta(delta, content, out)
        finish = choice.get("finish_reason")
        if finish:
            self.finish = finish
            self.matched = matched_stop(choice, self.ctx.request) if "stop_reason" in choice else None

    def _delta(self, delta: dict[str, Any], content: Any, out: list[bytes]) -> None:
        """A delta of another shape than a token's text alone: reasoning, a refusal, calls."""
        # Membership first: most deltas carry only content, and a look-up costs more.
        if "reasoning_content" in delta or "reasoning" in delta:
            reasoning = reasoning_of(delta)
            if reasoning:
                self._text("thinking", reasoning, out)
        if isinstance(content, str) and content:
            if self.wrapped:
                self.structured.append(content)
            else:
                self._text("text", content, out)
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.refused = True
            self._text("text", refusal, out)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for position, call in enumerate(calls):
                if isinstance(call, dict):
                    self._call(call, position, out)

    def _call(self, call: dict[str, Any], position: int, out: list[bytes]) -> None:
        key = self.slots.slot(call, position)
        tool = self.tools.get(key)
        if tool is None:
            tool = self.tools[key] = _Tool()
        if isinstance(call.get("id"), str) and call["id"] and tool.id is None:
            tool.id = call["id"]
        function = call.get("function")
        fragment = ""
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and function["name"] and tool.name is None:
                tool.name = function["name"]
            if isinstance(function.get("arguments"), str):
                fragment = function["arguments"]
        self._tool(key, tool, fragment, out)

    # --- blocks -------------------------------------------------------------------------

    def _waiting(self) -> bool:
        """Whether new content must wait: an open tool block whose arguments are not yet a
        complete JSON value (the same call may still send more)."""
        tool = self.open_tool
        if tool is None or self.ending:
            return False
        if self.held:
            return True  # already waiting; the check is redone when the open tool grows
        return not _complete(tool)

    def _text(self, kind: str, text: str, out: list[bytes]) -> None:
        if self.open_kind != kind:
            if self._waiting():
                self.held.append((kind, None, text))
                return
            self._close(out)
            index = self._open(kind, None)
            block = (
                {"type": "text", "text": ""}
                if kind == "text"
                else {"type": "thinking", "thinking": "", "signature": ""}
            )
            out.append(
                _event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": block},
                )
            )
        self.shown += len(text)
        out.append(self.open_head + orjson.dumps(text) + _DELTA_END)

    def _tool(self, key: int | None, tool: _Tool, fragment: str, out: list[bytes]) -> None:
        if tool.closed:
            self.ctx.notes["tool_fragments_dropped"] = self.ctx.notes.get("tool_fragments_dropped", 0) + 1
            return
        if tool is self.open_tool:
            self._arguments(tool, fragment, out)
            if self.held and _complete(tool):
                self._release(out)
            return
        if tool.block is None and (self._waiting() or tool.name is None):
            # Not startable yet: another tool is mid-arguments, or this one has no name yet.
            if tool.name is None and not self._waiting():
                tool.pending += fragment
            else:
                self.held.append(("tool", key, fragment))
            return
        self._unhold(out)  # the answer's text before the call, as the buffered answer has it
        self._close(out)
        index = self._open("tool", tool)
        self.any_tool = True
        if self.functions is None:
            self.functions = function_names(declared_tools(self.ctx.request))
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": to_anthropic_id(tool.id) if tool.id else tool_id(self.ctx, index),
            "name": self.functions.client(tool.name or ""),
            "input": {},
        }
        out.append(
            _event(
                "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            )
        )
        self._arguments(tool, tool.pending + fragment, out)
        tool.pending = ""

    def _arguments(self, tool: _Tool, fragment: str, out: list[bytes]) -> None:
        """Sends ``fragment`` of the open tool block's arguments."""
        if fragment and tool.block is not None:
            tool.args.append(fragment)
            self.shown += len(fragment)
            out.append(self.open_head + orjson.dumps(fragment) + _DELTA_END)

    def _open(self, kind: str, tool: _Tool | None) -> int:
        index = self.next_index
        self.next_index += 1
        self.open_kind, self.open_index, self.open_tool = kind, index, tool
        self.open_head = _delta_head(index, kind)
        if tool is not None:
            tool.block = index
        return index

    def _close(self, out: list[bytes]) -> None:
        if self.open_kind is None:
            return
        if self.open_tool is not None:
            self.open_tool.closed = True
        out.append(_block_stop(self.open_index))
        self.open_kind, self.open_tool = None, None

    def _release(self, out: list[bytes]) -> None:
        """The open tool's arguments are complete: what waited goes out, in its order."""
        held, self.held = self.held, []
        for kind, key, text in held:
            if kind == "tool":
                assert key is not None
                self._tool(key, self.tools[key], text, out)
            else:
                self._text(kind, text, out)

    def _unhold(self, out: list[bytes]) -> None:
        """A wrapped answer's text goes out, unwrapped, as one text block: at the end, or where a
        tool block opens after it (what comes after a call cannot come before it)."""
        if self.structured:
            text, self.structured = "".join(self.structured), []
            self._text("text", unwrapped(text, "json"), out)

    def _finish(self) -> list[bytes]:
        out: list[bytes] = []
        self.ending = True
        self._release(out)
        self._unhold(out)
        for tool in self.tools.values():
            if tool.block is None and tool.name is not None:  # held back for want of a switch
                self._tool(None, tool, "", out)
        self._close(out)
        self.done = True
        reason = stop_reason(self.finish, tools=self.any_tool, refused=self.refused, matched=self.matched)
        counts, estimated = usage(self.chat_usage, self._estimate(), round(self.shown / BYTES_PER_TOKEN))
        if estimated:
            self.ctx.notes["usage_estimated"] = True
        if self.finish is None:
            self.ctx.notes["finish_reason_missing"] = True
        sequence = self.matched if reason == "stop_sequence" else None
        delta = {"stop_reason": reason, "stop_sequence": sequence}
        ending: dict[str, Any] = {"type": "message_delta", "delta": delta, "usage": counts}
        if self.continued:  # where a Messages upstream's splice marks it (apis/messages/resume.py)
            ending[CONTINUED] = True
        out.append(_event("message_delta", ending))
        out.append(_STOP)
        return out


def _complete(tool: _Tool) -> bool:
    text = "".join(tool.args).strip()
    if not text.endswith(("}", "]")):
        return False
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True
