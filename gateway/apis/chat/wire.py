"""OpenAI chat completions (``POST /v1/chat/completions``), the first dialect.

Stream grammar (OpenAI API reference, "The chat completion chunk object"): ``data:``
events carrying ``chat.completion.chunk`` objects, the last choice chunk with a
``finish_reason``, an optional usage-only chunk (``choices: []``) when
``stream_options.include_usage`` is set, then ``data: [DONE]``. Errors mid-stream come
as a ``data:`` event holding ``{"error": {...}}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from gateway.apis import output_budget
from gateway.apis.answer_text import chat_event_text, chat_text
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
from gateway.apis.chat import replay as chat_replay
from gateway.apis.chat import resume as chat_continue
from gateway.apis.chat.ids import GEMINI_SIGNED, chat_request_ids
from gateway.apis.chat.tool_outputs import apply_tool_policy
from gateway.apis.collect import chat_answer
from gateway.apis.common import (
    PER_MINUTE_CODE,
    ShownText,
    admit_messages,
    malformed_event_error,
    overflow_numbers,
    per_minute_message,
    token_counts,
    told_per_minute,
    upstream_detail,
)
from gateway.apis.replay import Trim, is_replay, trimmed
from gateway.apis.synthesize import chat_stream
from gateway.errors import Classification, ErrorType
from gateway.policy.compress import CompressionResult, cap_tool_outputs, compress
from gateway.policy.tool_outputs import Stage, ToolOutputPolicy
from gateway.sse import Event, ParsedEvents, encode_data, error_payload, parse_event

_GEMINI_SIGNED = GEMINI_SIGNED.encode()


# A relayed event's kind, as module names: on Python 3.11 (the shipped image's) reading a member
# off the enum class costs ~900 instructions more (callgrind; issue #38).
_FINAL_KIND, _VISIBLE_KIND, _ERROR_KIND = EventKind.FINAL, EventKind.VISIBLE, EventKind.ERROR
_SKIP_KIND, _CONTENTLESS_KIND = EventKind.SKIP, EventKind.CONTENTLESS


def _finished(raw: bytes) -> bool:
    """Whether the event ends the answer: ``data: [DONE]``, or a choice whose ``finish_reason``
    names why it stopped. Searched, not parsed (this runs on every relayed event): a key
    ``"finish_reason"`` is found only as a key, since a quote inside a JSON string (an answer's
    text, a tool call's arguments) is escaped, but its value must be a string of something
    (``"finish_reason": ""`` is no end: some servers send it on every chunk, ollama/ollama#4357,
    sgl-project/sglang#3912), and ``[DONE]`` must be the event's whole data: an answer quoting
    ``data: [DONE]`` (code an agent writes about SSE), or tool arguments holding it, were taken
    for the end, and a cut after them relayed as a finished answer (audit). partition()'s
    middle is the needle where it is found, else empty: see ``kind``."""
    _, found, after = raw.partition(b'"finish_reason":"')
    if not found:
        _, found, after = raw.partition(b'"finish_reason": "')
    if found and after[:1] != b'"':
        return True
    if not raw.partition(b"[DONE]")[1]:
        return False
    data = raw.strip()
    return data == b"data: [DONE]" or data == b"data:[DONE]" or parse_event(raw).is_done


class OpenAIChat:
    name = "openai_chat"
    api = "chat"
    path = "/v1/chat/completions"
    paths: tuple[str, ...] = ("/v1/chat/completions",)
    key_param: str | None = None
    usage_member = "usage"
    billed_outside_usage: tuple[bytes, ...] = ()

    def admit(self, body: bytes, payload: dict[str, Any], where: Where = NOWHERE) -> Inbound | Rejection:
        return admit_messages(body, payload)

    def address(self, payload: Mapping[str, Any]) -> Address | None:
        return None  # always at ``path``, the body as it is

    def prepare(self, inbound: Inbound, stream_usage: bool) -> tuple[dict[str, Any], bool]:
        """For token accounting, ask a stream for its usage chunk when the client did not,
        and have the reader strip that chunk again before it reaches the client. Tool call ids
        that carry the gateway's own Gemini signature go as a chat upstream takes them
        (``apis/chat/ids.py``)."""
        payload = inbound.payload
        # The byte search (~2 us per 100 KB) spares every other request a walk of its messages.
        if inbound.body.find(_GEMINI_SIGNED) >= 0:
            payload = chat_request_ids(payload) or payload
        if not inbound.stream or not stream_usage:
            return payload, False
        options = payload.get("stream_options")
        if isinstance(options, dict) and options.get("include_usage") is True:
            return payload, False
        if options is not None and not isinstance(options, dict):
            return payload, False  # malformed: let the upstream say so, untouched
        return {**payload, "stream_options": {**(options or {}), "include_usage": True}}, True

    def error_body(self, status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
        return openai_error_body(status, message, code, c)

    def error_status(self, status: int, code: str) -> int:
        return status

    def passed_status(self, status: int, upstream_status: int | None, body: bytes) -> int:
        return status  # its SDKs retry a 429 whatever a body says: the 402 stands

    def foreign_error(self, e: ForeignError, request_id: str) -> tuple[int, bytes]:
        return openai_foreign_error(e)

    def reader(self, strip_usage: bool) -> ChatStreamReader:
        return ChatStreamReader(strip_usage)

    def broken_apart(self, ending: Ending, request_id: str) -> bytes:
        return b""  # its broken event is the whole ending

    def body_usage(self, doc: Mapping[str, Any]) -> dict[str, int]:
        return chat_usage(doc.get("usage"))

    def answer_text(self, doc: Mapping[str, Any]) -> str:
        return chat_text(doc)

    def failed(self, doc: Mapping[str, Any]) -> FailedAnswer | None:
        return None  # a chat completion has no failed state: its errors come as errors

    def compress(
        self, payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
        removed_tokens: float = 0.0, prompt_tokens: int | None = None,
    ) -> CompressionResult:
        return compress(
            payload, error_message=error_message, context_window=context_window,
            removed_tokens=removed_tokens, prompt_tokens=prompt_tokens,
        )

    def tool_outputs(self, payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage) -> Applied:
        return apply_tool_policy(payload, policy, stage)

    def without_stream(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in payload.items() if k != "stream_options"} | {"stream": False}

    def lower_output(
        self, payload: Mapping[str, Any], limit: int, name_if_absent: bool = False
    ) -> dict[str, Any] | None:
        return output_budget.chat(payload, limit, name_if_absent)

    def replay_as_stream(self, doc: dict[str, Any], client_payload: Mapping[str, Any]) -> bytes:
        options = client_payload.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        return chat_stream(doc, include_usage=asked)

    def collect(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        return chat_answer(events)

    def continuation(self, payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
        if is_replay(mode):
            return chat_replay.request(payload, mode)
        return chat_continue.continuation(payload, partial, mode)

    def splicer(self, original: StreamReader, partial: str, mode: str) -> Splice:
        assert isinstance(original, ChatStreamReader)
        sid, model = original.identity or (None, None)
        if is_replay(mode):
            splice = chat_continue.splicer((sid, model, original.created), partial, count_shown=False)
            return trimmed(chat_replay.Trim(partial), splice)
        return chat_continue.splicer((sid, model, original.created), partial)

    def replay(self, partial: str) -> Trim:
        return chat_replay.Trim(partial)

    def cap_tool_outputs(self, payload: Mapping[str, Any], max_tokens: int) -> Capped:
        out, report = cap_tool_outputs(payload, max_tokens)
        return out, report["outputs_capped"]


def chat_usage(usage: Any) -> dict[str, int]:
    return token_counts(usage, "prompt_tokens", "completion_tokens")


class ChatStreamReader(ShownText):
    __slots__ = ("created", "error", "identity", "parsed_events", "strip_usage", "usage")
    ends_at_final = False

    def __init__(self, strip_usage: bool) -> None:
        super().__init__()
        self.strip_usage = strip_usage
        self.parsed_events = ParsedEvents()
        self.usage: dict[str, int] = {}
        self.error: dict[str, Any] | None = None
        self.identity: tuple[str | None, str | None] | None = None  # (id, model) of the stream
        self.created: int | None = None

    def _track(self, event: Event) -> None:
        doc = event.json()
        if not isinstance(doc, dict):
            return
        if self.created is None and isinstance(doc.get("created"), int):
            self.created = doc["created"]
        choices = doc.get("choices")
        if not isinstance(choices, list):
            return
        if len(choices) > 1:
            self.tool_started = True  # n > 1: several answers cannot be continued as one
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            if delta.get("tool_calls") or delta.get("function_call"):
                self.tool_started = True
            if isinstance(delta.get("content"), str):
                self.texts.append(delta["content"])

    def event_text(self, doc: Mapping[str, Any]) -> str:
        return chat_event_text(doc)

    def kind(self, raw: bytes, *, committed: bool) -> EventKind:
        # Cheap byte checks first: most events are plain deltas and need no JSON parse.
        event: Event | None = None  # parsed once, when a question needs it
        # Searched with partition(), whose middle is the needle where it is found, else empty:
        # not `in` (gateway/sse.py), nor find(), which on 3.11 parses its arguments from a
        # format string (~500 instructions more a search, five searches an event).
        if raw.partition(b"error")[1]:
            event = self.parsed_events.parse(raw)
            err = error_payload(event)
            if err is not None:
                self.error = err
                return _ERROR_KIND
        if raw.partition(b'"usage"')[1]:
            event = event or self.parsed_events.parse(raw)
            doc = usage_doc(event)
            if doc is not None:
                self.usage.update(chat_usage(doc["usage"]))
                if not doc.get("choices"):
                    return _SKIP_KIND if self.strip_usage else _CONTENTLESS_KIND
        # A malformed chunk would crash the client's parser (the openai SDK raises a
        # JSONDecodeError): it ends the stream like any other break. Every chunk is one JSON
        # object, so a cheap look at its last byte spares the parse for all the others.
        if self.tracking or not raw.rstrip().endswith((b"}", b"[DONE]")):
            event = event or self.parsed_events.parse(raw)
            if _malformed(event):
                self.error = malformed_event_error()
                return _ERROR_KIND
            if self.tracking:
                self._track(event)
        if committed:
            return _FINAL_KIND if _finished(raw) else _VISIBLE_KIND
        if event is None:
            event = self.parsed_events.parse(raw)
        if self.identity is None and event.data is not None:
            doc = event.json()
            self.identity = _identity(doc)
            if self.created is None and isinstance(doc, dict) and isinstance(doc.get("created"), int):
                self.created = doc["created"]
        if not is_visible(event):
            return _CONTENTLESS_KIND
        return _FINAL_KIND if _finished(raw) else _VISIBLE_KIND

    def owed_end(self) -> bytes:
        # A [DONE] left unsent after the finish_reason is owed nobody: the openai SDKs and the
        # Vercel AI SDK (opencode's) end on the body's end all the same (docs/streaming.md).
        return b""

    def broken(self, ending: Ending, request_id: str, model: str | None) -> bytes:
        # finish_reason "error" is none of OpenAI's (stop, length, tool_calls, content_filter,
        # function_call), on purpose: no client may read this end as a finished answer. The
        # openai SDKs raise APIError on any chunk carrying "error" before they look at a
        # choice; @ai-sdk/openai-compatible (chunk schema a loose object) sees "error" and
        # ends with finishReason "error", and where a version strips the unknown member it
        # maps an unknown finish_reason to "other", never to "stop". A "stop" here would
        # read as a whole answer to anything that looks only at the choice.
        # One completion, one `created`, this chunk's too: "The Unix timestamp (in seconds) of
        # when the chat completion was created. Each chunk has the same timestamp." (OpenAI API
        # reference, the chat completion chunk object; openai-node's ChatCompletionChunk.created).
        c = ending.classification
        sid, smodel = self.identity or (None, None)
        return encode_data({
            "id": sid or f"chatcmpl-{request_id}",
            "object": "chat.completion.chunk",
            "created": self.created if self.created is not None else int(time.time()),
            "model": smodel or model or "",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
            "error": {
                "message": ending.message,
                "type": openai_type(None, c, ending.code or "", ending.message),
                "code": ending.code or c.provider_code or c.type.value,
                "x_llm_error_type": c.type.value,
                "retryable": c.retryable,
            },
        })  # fmt: skip


def broken_chunk(base: Mapping[str, Any], ending: Ending, request_id: str, model: str) -> bytes:
    """The chunk that ends a chat stream the gateway writes itself (a translation), with the
    ``id`` and ``created`` of the chunks ``base`` made before it: made by the chat reader, so
    translated and relayed streams end in one shape."""
    reader = ChatStreamReader(strip_usage=False)
    reader.identity = (base["id"], model)
    reader.created = base["created"]
    return reader.broken(ending, request_id, model)


def _malformed(event: Event) -> bool:
    return event.data is not None and not event.is_done and not isinstance(event.json(), dict)


def _identity(doc: Any) -> tuple[str | None, str | None]:
    if not isinstance(doc, dict):
        return None, None
    sid, model = doc.get("id"), doc.get("model")
    return (sid if isinstance(sid, str) else None, model if isinstance(model, str) else None)


def is_visible(event: Event) -> bool:
    """Whether the client would see something: content, a tool call, a finish, or anything
    we do not understand. Role-only first chunks, empty deltas and comments are not."""
    if event.data is None:
        return False
    if event.is_done:
        return True
    doc = event.json()
    if not isinstance(doc, dict):
        return True
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices:
        # A usage-only chunk is bookkeeping; other shapes we pass on untouched.
        return "usage" not in doc
    for choice in choices:
        if not isinstance(choice, dict):
            return True
        if choice.get("finish_reason"):
            return True
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return True
        for key, value in delta.items():
            if key != "role" and value not in (None, "", [], {}):
                return True
    return False


def usage_doc(event: Event) -> dict[str, Any] | None:
    if event.raw.find(b'"usage"') < 0:
        return None
    doc = event.json()
    if isinstance(doc, dict) and isinstance(doc.get("usage"), dict):
        return doc
    return None


# OpenAI's own code per class, as its API and SDK users match on them: an overflow is code
# `context_length_exceeded` (Codex and the Agents SDK look for it), a quota error
# `insufficient_quota`, a rate limit `rate_limit_exceeded` (OpenAI API reference, "Error codes";
# the bodies in tests/corpus/openai.json). The type goes with the class: see ``openai_type``.
_OPENAI_CODE = {
    ErrorType.CONTEXT_OVERFLOW: "context_length_exceeded",
    ErrorType.RATE_LIMIT: "rate_limit_exceeded",
    ErrorType.BUDGET: "insufficient_quota",
    ErrorType.AUTH: "invalid_api_key",
    ErrorType.PROVIDER_UNAVAILABLE: "server_error",
}


def openai_type(status: int | None, c: Classification, code: str, message: str) -> str:
    """The ``type`` OpenAI gives an error of this class and status (``None``: a stream under
    way, whose status went out before). OpenAI names a rate limit by what ran out, ``requests``
    or ``tokens``, and a spent quota ``insufficient_quota`` (the 429s in
    tests/corpus/openai.json); a 5xx is ``server_error``; the rest ``invalid_request_error``, 401
    included. A code that names what ran out (``key_tokens_per_minute``) says which; else the
    message does, as the provider's own does ("on tokens per min (TPM)")."""
    if c.type is ErrorType.RATE_LIMIT:
        named = code.lower()
        said = named if "token" in named or "request" in named else message.lower()
        return "tokens" if "token" in said else "requests"
    if c.type is ErrorType.BUDGET:
        return "insufficient_quota"
    if status is None:  # the stream's status said nothing: the class alone decides
        the_request = c.type in (ErrorType.AUTH, ErrorType.CONTEXT_OVERFLOW)
        return "invalid_request_error" if the_request else "server_error"
    server = status >= 500 or c.type is ErrorType.PROVIDER_UNAVAILABLE
    return "server_error" if server else "invalid_request_error"


def openai_error_body(status: int, message: str, code: str, c: Classification) -> bytes:
    """A gateway-made error in OpenAI's envelope (chat completions and Responses alike): every
    member OpenAI's has (``message``, ``type``, ``param``, ``code``), the gateway's own code."""
    return json.dumps({"error": {
        "message": message, "type": openai_type(status, c, code, message), "param": None, "code": code,
        "x_llm_error_type": c.type.value, "retryable": c.retryable,
    }}).encode()  # fmt: skip


def openai_error_fields(e: ForeignError, budget_field: str = "max_tokens") -> tuple[int, str, str, str]:
    """Status, type, code and message of a translated upstream error in OpenAI's terms
    (shared by chat completions and Responses, each naming its own output budget field)."""
    c = e.classification
    message = c.message or f"the upstream answered {e.upstream_status}"
    if c.type is ErrorType.CONTEXT_OVERFLOW and told_per_minute(e):
        return 400, "invalid_request_error", PER_MINUTE_CODE, per_minute_message(e, budget_field)
    if c.type is ErrorType.CONTEXT_OVERFLOW:
        # OpenAI's own sentence and nothing after it: the provider's words, which say the same
        # numbers again, are in x_llm_upstream for whoever wants them.
        prompt, limit = overflow_numbers(e)
        message = (f"This model's maximum context length is {limit} tokens. However, your messages "
                   f"resulted in {prompt} tokens.")  # fmt: skip
        return 400, "invalid_request_error", _OPENAI_CODE[c.type], message
    if c.type is ErrorType.AUTH:
        status = e.status if e.status in (401, 403) else 401
        return status, openai_type(status, c, "", message), _auth_code(e, status), message
    if c.type in _OPENAI_CODE:
        return e.status, openai_type(e.status, c, "", message), _OPENAI_CODE[c.type], message
    type_ = openai_type(e.status, c, "", message)
    return e.status, type_, c.provider_code or type_, message


_OPENAI_APIS = frozenset({"chat", "responses"})


def _auth_code(e: ForeignError, status: int) -> str:
    """The code of a refused credential or permission. An upstream that spoke an OpenAI API
    said it in OpenAI's own terms: its code goes on as it is (OpenAI's 403 from a country it
    does not serve is ``unsupported_country_region_territory``, type ``request_forbidden``:
    tests/corpus/openai.json). Else a 401 is ``invalid_api_key``, OpenAI's code for a key it
    refuses, and a 403 the provider's own code (Anthropic's ``permission_error``, Google's
    ``PERMISSION_DENIED``), or ``request_forbidden``, OpenAI's word for a 403, where it gave none:
    a refused permission is no bad key."""
    spoke_openai = e.upstream_api in _OPENAI_APIS
    if spoke_openai and (own := _openai_body_code(e.upstream_body)) is not None:
        return own
    if status == 401:
        return _OPENAI_CODE[ErrorType.AUTH]
    # An OpenAI body without a code: its provider_code is the type that stood in for one.
    return (None if spoke_openai else e.classification.provider_code) or "request_forbidden"


def _openai_body_code(body: bytes) -> str | None:
    """``error.code`` of an OpenAI error body, when it is a non-empty string."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return code if isinstance(code, str) and code else None


def openai_foreign_error(e: ForeignError, budget_field: str = "max_tokens") -> tuple[int, bytes]:
    """An upstream error on a translated request in OpenAI's envelope (chat and Responses)."""
    status, type_, code, message = openai_error_fields(e, budget_field)
    return status, json.dumps({"error": {
        "message": message, "type": type_, "param": None, "code": code,
        "x_llm_error_type": e.classification.type.value, "retryable": e.classification.retryable,
        "x_llm_upstream": upstream_detail(e),
    }}).encode()  # fmt: skip
