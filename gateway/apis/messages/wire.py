"""Anthropic Messages (``POST /v1/messages``): Claude Code and the ``anthropic`` SDKs.

Facts this module relies on (Anthropic API docs, "Errors" and "Streaming Messages"):

* error envelope: ``{"type": "error", "error": {"type", "message"}, "request_id"}`` with
  types ``invalid_request_error`` 400, ``authentication_error`` 401, ``billing_error``
  402, ``permission_error`` 403, ``not_found_error`` 404, ``request_too_large`` 413,
  ``rate_limit_error`` 429, ``api_error`` 500, ``timeout_error`` 504 and
  ``overloaded_error`` 529;
* stream: ``message_start`` → (``content_block_start``, ``content_block_delta``…,
  ``content_block_stop``)… → ``message_delta`` (stop_reason, cumulative usage) →
  ``message_stop``; ``ping`` anywhere; ``event: error`` may arrive mid-stream;
* usage: ``input_tokens``, ``cache_creation_input_tokens``, ``cache_read_input_tokens``,
  ``output_tokens``. All three input kinds count as prompt tokens here, because the
  provider processed (and bills for) all of them.

Claude Code's LLM-gateway notes ask for an ``overloaded_error`` 529 when the gateway
sheds load, which is what an open circuit answers on this dialect.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from gateway.apis import output_budget
from gateway.apis.answer_text import messages_event_text, messages_text
from gateway.apis.base import (
    NOWHERE,
    Address,
    Applied,
    Capped,
    Ending,
    EventKind,
    FailedAnswer,
    ForeignError,
    Inbound,
    Rejection,
    Splice,
    StreamReader,
    Where,
)
from gateway.apis.collect import messages_answer
from gateway.apis.common import (
    ShownText,
    admit_messages,
    malformed_event_error,
    overflow_numbers,
    per_minute_message,
    told_per_minute,
    upstream_detail,
)
from gateway.apis.messages import replay as anthropic_replay
from gateway.apis.messages import resume as anthropic_continue
from gateway.apis.messages.compress import cap_tool_results, compress_messages
from gateway.apis.messages.tool_outputs import apply_tool_policy
from gateway.apis.replay import Trim, is_replay, trimmed
from gateway.apis.synthesize import anthropic_stream
from gateway.errors import Classification, ErrorType
from gateway.policy.compress import CompressionResult
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.policy.tool_outputs import Stage, ToolOutputPolicy
from gateway.sse import Event, ParsedEvents, error_payload

_TYPE_FOR_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}

# The types an Anthropic client knows (its SDK's ErrorType; "Errors" in Anthropic's docs): an
# upstream's own one of these is kept, anything else is put in these terms.
_ANTHROPIC_TYPES = frozenset({*_TYPE_FOR_STATUS.values(), "api_error"})
# An upstream that is down, in Anthropic's terms by the status it answered, as Anthropic's own
# (https://docs.claude.com/en/api/errors): "500 - api_error: An unexpected error has occurred
# internal to Anthropic's systems", "529 - overloaded_error: The API is temporarily overloaded",
# and 504 timeout_error. Overloaded or unavailable (a 503, 529, a proxy's 502, capacity said on
# a 429) is 529, which Claude Code retries 3 times at most; timed out (504, 408) is 504; any
# other failure (a 500, a 5xx Anthropic has no name for) is the 500 it is, which Claude Code
# retries for minutes unless told not to (tests/e2e/CLAUDE_CODE_NOTES.md: 11 calls in 187 s; one
# with the x-should-retry: false the gateway sends once it retried itself).
_UNAVAILABLE = {
    429: (529, "overloaded_error"), 502: (529, "overloaded_error"), 503: (529, "overloaded_error"),
    529: (529, "overloaded_error"), 408: (504, "timeout_error"), 504: (504, "timeout_error"),
}  # fmt: skip
# A class that says what kind of error it is, whatever the status.
_TYPE_FOR_CLASS = {
    ErrorType.RATE_LIMIT: "rate_limit_error",
    ErrorType.BUDGET: "billing_error",
    ErrorType.AUTH: "authentication_error",
    ErrorType.CONTEXT_OVERFLOW: "invalid_request_error",
}

# A body Anthropic cannot read is a 400 whose ``error.details.error_code`` says why, which the
# anthropic SDKs map to their own exception classes (2.14: ``_error_classes.ERROR_CLASSES``,
# RequestBodyEncodingUnsupportedError, RequestBodyEncodingInvalidError,
# BetaRequestBodyTimeoutError); the gateway's 415 and 408 for the same were a bare
# APIStatusError and a RequestTimeoutError, which code written against Anthropic's answers
# does not catch. Keyed by the gateway's own code.
_BODY_UNREADABLE = {
    "unsupported_content_encoding": "request_body_encoding_unsupported",
    "invalid_content_encoding": "request_body_encoding_invalid",
    "request_timeout": "request_body_timeout",
}

# Events that never show the user anything; held back so an early failure can be replayed.
_CONTENTLESS = frozenset({"message_start", "ping"})
_DELTA_EVENT = b"event: content_block_delta\n"
_DELTA_LEN = len(_DELTA_EVENT)


# Read on every relayed event as module names: on Python 3.11 (the shipped image's) reading a
# member off the enum class costs ~900 instructions more (callgrind; issue #38).
_CONTENTLESS_KIND, _ERROR_KIND = EventKind.CONTENTLESS, EventKind.ERROR
_FINAL_KIND, _VISIBLE_KIND = EventKind.FINAL, EventKind.VISIBLE


class AnthropicMessages:
    name = "anthropic_messages"
    api = "messages"
    path = "/v1/messages"
    paths: tuple[str, ...] = ("/v1/messages",)
    key_param: str | None = None
    usage_member = "usage"
    billed_outside_usage: tuple[bytes, ...] = ()  # its searches are in the usage

    def admit(self, body: bytes, payload: dict[str, Any], where: Where = NOWHERE) -> Inbound | Rejection:
        return admit_messages(body, payload)

    def address(self, payload: Mapping[str, Any]) -> Address | None:
        return None  # always at ``path``, the body as it is

    def prepare(self, inbound: Inbound, stream_usage: bool) -> tuple[dict[str, Any], bool]:
        return inbound.payload, False  # usage is always in the stream; nothing to ask for

    def error_body(self, status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
        return anthropic_error(self.error_status(status, code), message, code, c, request_id)

    def error_status(self, status: int, code: str) -> int:
        # Anthropic has no 503: its "temporarily unavailable" is 529 overloaded_error, which
        # Claude Code backs off on (an open circuit, a store down, an upstream's 503 event).
        if status == 503:
            return 529
        return 400 if code in _BODY_UNREADABLE else status

    def passed_status(self, status: int, upstream_status: int | None, body: bytes) -> int:
        return status  # its SDKs retry a 429 whatever a body says: the 402 stands

    def foreign_error(self, e: ForeignError, request_id: str) -> tuple[int, bytes]:
        status, type_, message = _anthropic_terms(e)
        return status, json.dumps({
            "type": "error",
            "error": {
                "type": type_, "message": message,
                "x_llm_error_type": e.classification.type.value, "retryable": e.classification.retryable,
                "x_llm_upstream": upstream_detail(e),
            },
            "request_id": request_id,
        }).encode()  # fmt: skip

    def reader(self, strip_usage: bool) -> AnthropicStreamReader:
        return AnthropicStreamReader()

    def broken_apart(self, ending: Ending, request_id: str) -> bytes:
        return b""  # its broken event is the whole ending

    def body_usage(self, doc: Mapping[str, Any]) -> dict[str, int]:
        return anthropic_usage(doc.get("usage"))

    def answer_text(self, doc: Mapping[str, Any]) -> str:
        return messages_text(doc)

    def failed(self, doc: Mapping[str, Any]) -> FailedAnswer | None:
        return None  # a Messages answer has no failed state: its errors come as errors

    def compress(
        self, payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
        removed_tokens: float = 0.0, prompt_tokens: int | None = None,
    ) -> CompressionResult:
        return compress_messages(
            payload, error_message=error_message, context_window=context_window,
            removed_tokens=removed_tokens, prompt_tokens=prompt_tokens,
        )

    def tool_outputs(self, payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage) -> Applied:
        return apply_tool_policy(payload, policy, stage)

    def without_stream(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return {**payload, "stream": False}

    def lower_output(
        self, payload: Mapping[str, Any], limit: int, name_if_absent: bool = False
    ) -> dict[str, Any] | None:
        return output_budget.messages(payload, limit, name_if_absent)

    def replay_as_stream(self, doc: dict[str, Any], client_payload: Mapping[str, Any]) -> bytes:
        return anthropic_stream(doc)

    def collect(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        return messages_answer(events)

    def continuation(self, payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
        if is_replay(mode):
            return anthropic_replay.request(payload, mode)
        return anthropic_continue.continuation(payload, partial, mode)

    def splicer(self, original: StreamReader, partial: str, mode: str) -> Splice:
        assert isinstance(original, AnthropicStreamReader)
        if is_replay(mode):
            opened, nxt = original.open_block, original.next_index
            splice = anthropic_continue.splicer(opened, nxt, 0, partial, prefilled=False)
            return trimmed(anthropic_replay.Trim(partial), splice)
        # The broken part's own count never arrived (it comes in message_delta): estimate it.
        shown = max(original.usage.get("completion", 0), round(len(partial.encode()) / BYTES_PER_TOKEN))
        return anthropic_continue.splicer(original.open_block, original.next_index, shown, partial)

    def replay(self, partial: str) -> Trim:
        return anthropic_replay.Trim(partial)

    def cap_tool_outputs(self, payload: Mapping[str, Any], max_tokens: int) -> Capped:
        return cap_tool_results(payload, max_tokens)


def anthropic_error(status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
    type_ = _TYPE_FOR_STATUS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
    err: dict[str, Any] = {
        "type": type_, "message": message, "code": code,
        "x_llm_error_type": c.type.value, "retryable": c.retryable,
    }  # fmt: skip
    if code in _BODY_UNREADABLE:
        err["details"] = {"error_code": _BODY_UNREADABLE[code]}
    return json.dumps({"type": "error", "error": err, "request_id": request_id}).encode()


def anthropic_usage(usage: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    if not isinstance(usage, dict):
        return out
    # Each member read once, and the rarer ones only where present: this reads every Messages
    # answer's usage, and a stream's twice (issue #38).
    given = usage.get("input_tokens")
    read, wrote = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    counted = [v for v in (given, wrote, read) if isinstance(v, int) and v >= 0]
    if counted:
        out["prompt"] = sum(counted)
    output = usage.get("output_tokens")
    if isinstance(output, int) and output >= 0:
        out["completion"] = output
    # Of the prompt: what was read from the cache and written to it (priced apart).
    if isinstance(read, int) and read > 0:
        out["cache_read"] = read
    if isinstance(wrote, int) and wrote > 0:
        out["cache_write"] = wrote
    if "cache_creation" in usage:
        # Of the cache write, what was written for an hour: twice the input price, not 1.25 times.
        split = usage["cache_creation"]
        hour = split.get("ephemeral_1h_input_tokens") if isinstance(split, dict) else None
        if isinstance(hour, int) and not isinstance(hour, bool) and hour > 0:
            out["cache_write_1h"] = hour
    if "server_tool_use" in usage:
        # The web searches Anthropic ran (its web_search server tool), billed per search on top
        # of tokens (keys/prices.py); a stream's message_delta states the total so far.
        tools = usage["server_tool_use"]
        searches = tools.get("web_search_requests") if isinstance(tools, dict) else None
        if isinstance(searches, int) and not isinstance(searches, bool) and searches > 0:
            out["web_search"] = searches
    return out


class AnthropicStreamReader(ShownText):
    __slots__ = ("error", "next_index", "open_block", "parsed_events", "signed", "stop_owed", "usage")
    ends_at_final = False

    def __init__(self) -> None:
        super().__init__()
        # Told each thinking signature (a redacted block's data) the answer carries, when set:
        # whose thinking is whose (``policy/thinking_signers.py``).
        self.signed: Callable[[str], None] | None = None
        self.parsed_events = ParsedEvents()
        self.usage: dict[str, int] = {}
        self.error: dict[str, Any] | None = None
        self.open_block: int | None = None  # the text block the client has open
        self.next_index = 0
        self.stop_owed = False  # the stop_reason came, its message_stop not yet

    def _track(self, doc: dict[str, Any]) -> None:
        kind = doc.get("type")
        index = doc.get("index")
        if kind == "content_block_start" and isinstance(index, int):
            block = doc.get("content_block")
            is_text = isinstance(block, dict) and block.get("type") == "text"
            if isinstance(block, dict) and is_text:
                self.texts.append(block.get("text") or "")
            elif not (isinstance(block, dict) and block.get("type") in ("thinking", "redacted_thinking")):
                self.tool_started = True  # tool_use, server tools: cannot be continued
            self.open_block = index if is_text else None
            self.next_index = max(self.next_index, index + 1)
        elif kind == "content_block_delta":
            delta = doc.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("text"), str):
                self.texts.append(delta["text"])
        elif kind == "content_block_stop" and index == self.open_block:
            self.open_block = None

    def event_text(self, doc: Mapping[str, Any]) -> str:
        return messages_event_text(doc)

    def kind(self, raw: bytes, *, committed: bool) -> EventKind:
        event: Event | None = None  # parsed once, when a question needs it
        # Every event's data is one JSON object: its last byte spares the parse for the others.
        # (A `[DONE]` after message_stop, as some compatible servers send, is no break.)
        if raw.rstrip()[-1:] != b"}":
            event = self.parsed_events.parse(raw)
            if event.data is not None and not event.is_done and not isinstance(event.json(), dict):
                self.error = malformed_event_error()
                return _ERROR_KIND
        # Searched with partition(), whose middle is the needle where found, else empty: not
        # `in` (gateway/sse.py), nor find(), which on 3.11 parses its arguments from a format
        # string (~500 instructions more a search, five or more searches an event).
        if raw.partition(b"error")[1]:
            event = event or self.parsed_events.parse(raw)
            err = error_payload(event)
            if err is not None:
                self.error = err
                return _ERROR_KIND
        if committed and raw[:_DELTA_LEN] == _DELTA_EVENT:
            # A block's delta, most of a stream's events: no usage, server tool or end comes in
            # one (Anthropic names each event as its data's type), so only a signature and the
            # tracked text are looked for (about 30 bytecodes fewer an event, issue #38).
            if self.signed is not None and raw.partition(b"signature_delta")[1]:
                event = event or self.parsed_events.parse(raw)
                self._signed(event.json())
            if self.tracking:
                event = event or self.parsed_events.parse(raw)
                tracked = event.json()
                if isinstance(tracked, dict):
                    self._track(tracked)
            return _VISIBLE_KIND
        if raw.partition(b"usage")[1] and (
            raw.partition(b"message_start")[1] or raw.partition(b"message_delta")[1]
        ):
            event = event or self.parsed_events.parse(raw)
            self._take_usage(event.json())
        elif raw.partition(b"server_tool_use")[1]:
            # A search is counted as its block starts: the count is stated only in the
            # message_delta at the end, which a stream cut or continued never gets.
            event = event or self.parsed_events.parse(raw)
            self._searched(event.json())
        signs = self.signed is not None
        if signs and (raw.partition(b"signature_delta")[1] or raw.partition(b"redacted_thinking")[1]):
            event = event or self.parsed_events.parse(raw)
            self._signed(event.json())
        if self.tracking and raw.partition(b"content_block")[1]:
            event = event or self.parsed_events.parse(raw)
            tracked = event.json()
            if isinstance(tracked, dict):
                self._track(tracked)
        if committed and not (raw.partition(b"message_stop")[1] or raw.partition(b"message_delta")[1]):
            return _VISIBLE_KIND
        event = event or self.parsed_events.parse(raw)
        name = event.name
        doc = event.json()
        if name is None and isinstance(doc, dict) and isinstance(doc.get("type"), str):
            name = doc["type"]
        if name == "message_stop" or (name == "message_delta" and _stops(doc)):
            # The message_delta that gives the stop_reason ends the answer as chat's
            # finish_reason does: message_stop, like [DONE], only follows it. A server that
            # closes without it (or a reset or stall before it) has sent the whole answer.
            self.stop_owed = name == "message_delta"
            return _FINAL_KIND
        if committed:
            return _VISIBLE_KIND
        if event.data is None or name in _CONTENTLESS:
            return _CONTENTLESS_KIND
        if name == "content_block_start" and isinstance(doc, dict) and _empty_block(doc.get("content_block")):
            return _CONTENTLESS_KIND
        return _VISIBLE_KIND

    def _signed(self, doc: Any) -> None:
        assert self.signed is not None
        if not isinstance(doc, dict):
            return
        delta, block = doc.get("delta"), doc.get("content_block")
        if doc.get("type") == "content_block_delta" and isinstance(delta, dict):
            mark = delta.get("signature") if delta.get("type") == "signature_delta" else None
        elif doc.get("type") == "content_block_start" and isinstance(block, dict):
            mark = block.get("data") if block.get("type") == "redacted_thinking" else None
        else:
            return
        if isinstance(mark, str) and mark:
            self.signed(mark)

    def _take_usage(self, doc: Any) -> None:
        if not isinstance(doc, dict):
            return
        if doc.get("type") == "message_start":
            message = doc.get("message")
            if isinstance(message, dict):
                self.usage.update(anthropic_usage(message.get("usage")))
        elif doc.get("type") == "message_delta":
            # Cumulative counts: the last message_delta has the totals.
            usage = doc.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("server_tool_use"), dict):
                # Its count replaces the blocks counted as they streamed: "If an error occurs
                # during web search, the web search will not be billed" (the tool's docs).
                self.usage.pop("web_search", None)
            self.usage.update(anthropic_usage(usage))

    def _searched(self, doc: Any) -> None:
        """Counts a ``server_tool_use`` block of the ``web_search`` tool as it starts
        (Anthropic's streaming example: ``content_block_start`` with ``"type":
        "server_tool_use", "name": "web_search"``)."""
        if not isinstance(doc, dict) or doc.get("type") != "content_block_start":
            return
        block = doc.get("content_block")
        if not isinstance(block, dict):
            return
        if block.get("type") == "server_tool_use" and block.get("name") == "web_search":
            self.usage["web_search"] = self.usage.get("web_search", 0) + 1

    def owed_end(self) -> bytes:
        # The SDKs' stream helpers make the answer at message_stop alone: without it the
        # TypeScript SDK's MessageStream.finalMessage() (src/lib/MessageStream.ts, also inside
        # Claude Code) rejects "stream ended without producing a Message with role=assistant".
        return MESSAGE_STOP if self.stop_owed else b""

    def broken(self, ending: Ending, request_id: str, model: str | None) -> bytes:
        c = ending.classification
        code = ending.code or c.provider_code or c.type.value
        type_ = anthropic_type(c, ending.status, code)
        doc = {
            "type": "error",
            "error": {
                "type": type_, "message": ending.message, "code": code,
                "x_llm_error_type": c.type.value, "retryable": c.retryable,
            },
            "request_id": request_id,
        }  # fmt: skip
        return b"event: error\ndata: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


# As Anthropic's API writes it (tests/corpus/answers/messages-stream-*.json, less its padding).
MESSAGE_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def _stops(doc: Any) -> bool:
    delta = doc.get("delta") if isinstance(doc, dict) else None
    return isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str)


def _empty_block(block: Any) -> bool:
    """A text or thinking block opened with no content yet shows nothing."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind == "text":
        return not block.get("text")
    if kind == "thinking":
        return not block.get("thinking")
    return False


def anthropic_type(c: Classification, status: int | None, given: str | None = None) -> str:
    """The Anthropic error type of an error event ending a stream: the upstream's own when it is
    one of Anthropic's (an Anthropic upstream's ``overloaded_error``), else the type Anthropic
    gives that class or the status the event stands for: a chat upstream's ``server_error``
    read as a type would be one no Anthropic client knows, and a Gemini 503 UNAVAILABLE is what
    Anthropic calls ``overloaded_error`` (its 529). ``status`` None: the gateway cut the stream
    (a reset, a stall), which stays ``api_error``."""
    if given in _ANTHROPIC_TYPES:
        return given
    if c.type in _TYPE_FOR_CLASS:
        return "permission_error" if c.type is ErrorType.AUTH and status == 403 else _TYPE_FOR_CLASS[c.type]
    if status is None:
        return "api_error"
    if c.type is ErrorType.PROVIDER_UNAVAILABLE and status in (429, 503, 529):
        return "overloaded_error"
    return _TYPE_FOR_STATUS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def _anthropic_terms(e: ForeignError) -> tuple[int, str, str]:
    """Status, error type and message the way Anthropic's API says them, because Claude Code
    acts on exactly these: it compacts on "prompt is too long: N tokens > M maximum"
    (claude-code issue #86507: a reworded overflow stops auto-compact), backs off on
    ``rate_limit_error`` 429, ``overloaded_error`` 529 and ``api_error`` 500 (``_UNAVAILABLE``)."""
    c = e.classification
    message = c.message or f"the upstream answered {e.upstream_status}"
    if c.type is ErrorType.CONTEXT_OVERFLOW and told_per_minute(e):
        return 400, "invalid_request_error", per_minute_message(e)
    if c.type is ErrorType.CONTEXT_OVERFLOW:
        prompt, limit = overflow_numbers(e)
        return 400, "invalid_request_error", f"prompt is too long: {prompt} tokens > {limit} maximum"
    if c.type is ErrorType.RATE_LIMIT:
        return 429, "rate_limit_error", message
    if c.type is ErrorType.BUDGET:
        return 402, "billing_error", message
    if c.type is ErrorType.AUTH:
        forbidden = e.status == 403
        return (403, "permission_error", message) if forbidden else (401, "authentication_error", message)
    if c.type is ErrorType.PROVIDER_UNAVAILABLE:
        return (*_UNAVAILABLE.get(e.status, (500, "api_error")), message)
    type_ = _TYPE_FOR_STATUS.get(e.status) or ("api_error" if e.status >= 500 else "invalid_request_error")
    return e.status, type_, message
