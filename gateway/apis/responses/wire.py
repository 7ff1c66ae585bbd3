"""OpenAI Responses (``POST /v1/responses``): Codex and the OpenAI Agents SDK.

Facts this module relies on (OpenAI API reference, "Responses" and "Streaming events";
openai-python ``types/responses/response_*_event.py``):

* errors over HTTP: ``{"error": {"message", "type", "param", "code"}}``;
* stream: named events whose data carries ``type`` and ``sequence_number``:
  ``response.created``, ``response.in_progress`` (contentless), output events
  (``response.output_item.added``, ``response.output_text.delta``,
  ``response.function_call_arguments.delta``, reasoning events, …), then exactly one of
  ``response.completed`` / ``response.incomplete`` / ``response.failed``; no ``[DONE]``;
* failures in a stream: ``response.failed`` (``response.error.{code,message}``) or an
  ``error`` event (``code``, ``message``, ``param``);
* usage: ``response.usage.{input_tokens, output_tokens}``, where ``input_tokens``
  already includes ``input_tokens_details.cached_tokens``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from gateway.apis import output_budget
from gateway.apis.answer_text import responses_event_text, responses_text
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
from gateway.apis.chat.ids import GEMINI_SIGNED
from gateway.apis.chat.wire import openai_error_body, openai_foreign_error
from gateway.apis.collect import responses_answer
from gateway.apis.common import admit_fields, malformed_event_error, token_counts
from gateway.apis.replay import Trim, is_replay, trimmed
from gateway.apis.responses import replay as responses_replay
from gateway.apis.responses import resume as responses_continue
from gateway.apis.responses.compress import cap_outputs, compress_input
from gateway.apis.responses.failed import failed_response
from gateway.apis.responses.ids import responses_request_ids
from gateway.apis.responses.tool_outputs import apply_tool_policy
from gateway.apis.synthesize import responses_stream
from gateway.errors import Classification
from gateway.policy.compress import CompressionResult
from gateway.policy.foreign_reasoning import GATEWAY_THINKING_MARK, without_gateway_thinking
from gateway.policy.thinking_signers import sealed_in
from gateway.policy.tool_outputs import Stage, ToolOutputPolicy
from gateway.sse import Event, ParsedEvents, error_status

_CONTENTLESS = frozenset({"response.created", "response.in_progress", "response.queued"})
_FINAL = frozenset({"response.completed", "response.incomplete"})

# A response.failed / error event carries a code but no status; these are the codes the
# Responses API documents for them, mapped to the statuses the same errors get over HTTP.
_STATUS_FOR_CODE = {
    "server_error": 500, "rate_limit_exceeded": 429, "insufficient_quota": 429,
    "context_length_exceeded": 400, "invalid_prompt": 400, "invalid_request_error": 400,
}  # fmt: skip
_SEQ = re.compile(rb'"sequence_number":\s*(\d+)')
_TEXT_DELTA_EVENT = b"event: response.output_text.delta\n"
_TEXT_DELTA_LEN = len(_TEXT_DELTA_EVENT)


_GATEWAY_THINKING = GATEWAY_THINKING_MARK.encode()
_GEMINI_SIGNED = GEMINI_SIGNED.encode()


# Read on every relayed event as module names: on Python 3.11 (the shipped image's) reading a
# member off the enum class costs ~900 instructions more (callgrind; issue #38).
_CONTENTLESS_KIND, _ERROR_KIND = EventKind.CONTENTLESS, EventKind.ERROR
_FINAL_KIND, _VISIBLE_KIND = EventKind.FINAL, EventKind.VISIBLE
_SKIP_KIND = EventKind.SKIP


class OpenAIResponses:
    name = "openai_responses"
    api = "responses"
    path = "/v1/responses"
    paths: tuple[str, ...] = ("/v1/responses",)
    key_param: str | None = None
    usage_member = "usage"
    billed_outside_usage: tuple[bytes, ...] = (b'"web_search_call"',)

    def admit(self, body: bytes, payload: dict[str, Any], where: Where = NOWHERE) -> Inbound | Rejection:
        items = payload.get("input")
        if items is not None and not isinstance(items, (str, list)):
            return Rejection("'input' must be a string or a list of input items", "invalid_input")
        if isinstance(items, list) and not all(isinstance(i, dict) for i in items):
            return Rejection("every item of 'input' must be an object", "invalid_input")
        return admit_fields(body, payload)

    def address(self, payload: Mapping[str, Any]) -> Address | None:
        return None  # always at ``path``, the body as it is

    def prepare(self, inbound: Inbound, stream_usage: bool) -> tuple[dict[str, Any], bool]:
        # response.completed always carries usage. The byte searches (~2 us each per 100 KB)
        # spare every other request a walk of its items: what the gateway wrote into a
        # conversation for another provider (Claude's thinking, Gemini's signatures in call
        # ids) is of no use to a Responses upstream, which would refuse it.
        body = inbound.body
        payload = inbound.payload
        if body.find(_GATEWAY_THINKING) >= 0:  # find(), not `in`: see gateway/sse.py
            payload = without_gateway_thinking(payload) or payload
        if body.find(_GEMINI_SIGNED) >= 0:
            payload = responses_request_ids(payload) or payload
        return payload, False

    def error_body(self, status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
        return openai_error_body(status, message, code, c)

    def error_status(self, status: int, code: str) -> int:
        return status

    def passed_status(self, status: int, upstream_status: int | None, body: bytes) -> int:
        return status  # its SDKs retry a 429 whatever a body says: the 402 stands

    def foreign_error(self, e: ForeignError, request_id: str) -> tuple[int, bytes]:
        return openai_foreign_error(e, "max_output_tokens")

    def reader(self, strip_usage: bool) -> ResponsesStreamReader:
        return ResponsesStreamReader()

    def broken_apart(self, ending: Ending, request_id: str) -> bytes:
        return b""  # its broken event is the whole ending

    def body_usage(self, doc: Mapping[str, Any]) -> dict[str, int]:
        return responses_usage(doc.get("usage"), doc.get("output"))

    def answer_text(self, doc: Mapping[str, Any]) -> str:
        return responses_text(doc)

    def failed(self, doc: Mapping[str, Any]) -> FailedAnswer | None:
        # A response that failed once the model had started comes in a 200 with ``status:
        # "failed"`` and its ``error`` (the API reference's Response object), the buffered twin
        # of ``response.failed``. A Responses client reads it as such; a chat client has only
        # a finish_reason, and got an empty ``stop`` (openai/openai-agents-python#4515: the
        # same answer taken for an empty turn, fixed by raising on it in #4516).
        if doc.get("status") != "failed":
            return None
        status = error_status(failed_error(doc)) or 500
        err = doc.get("error")  # the body: the provider's error object as it came
        err = err if isinstance(err, dict) else {"message": "the upstream response failed"}
        return FailedAnswer(status, json.dumps({"error": err}).encode())

    def compress(
        self, payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
        removed_tokens: float = 0.0, prompt_tokens: int | None = None,
    ) -> CompressionResult:
        return compress_input(
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
        return output_budget.responses(payload, limit, name_if_absent)

    def replay_as_stream(self, doc: dict[str, Any], client_payload: Mapping[str, Any]) -> bytes:
        return responses_stream(doc)

    def collect(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        return responses_answer(events)

    def continuation(self, payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
        if is_replay(mode):
            return responses_replay.request(payload, mode)
        return responses_continue.continuation(payload, partial, mode)

    def splicer(self, original: StreamReader, partial: str, mode: str) -> Splice:
        assert isinstance(original, ResponsesStreamReader)
        if is_replay(mode):
            splice = responses_continue.splicer(original, partial, count_shown=False)
            return trimmed(responses_replay.Trim(partial), splice)
        return responses_continue.splicer(original, partial)

    def replay(self, partial: str) -> Trim:
        return responses_replay.Trim(partial)

    def cap_tool_outputs(self, payload: Mapping[str, Any], max_tokens: int) -> Capped:
        return cap_outputs(payload, max_tokens)


def failed_error(response: Mapping[str, Any]) -> dict[str, Any]:
    """A failed response's ``error``, streamed or buffered, in the shape the classifier reads."""
    err = response.get("error")
    return _with_status(err if isinstance(err, dict) else {"message": "the upstream response failed"})


def _with_status(err: dict[str, Any]) -> dict[str, Any]:
    code = err.get("code")
    status = _STATUS_FOR_CODE.get(code, 500) if isinstance(code, str) else 500
    return {"error": {**err, "status": err.get("status") or status}}


def responses_usage(usage: Any, output: Any = None) -> dict[str, int]:
    """``output``: the response's items, whose ``web_search_call`` items are web searches, each
    billed on top of tokens (keys/prices.py): the usage does not count them."""
    out = token_counts(usage, "input_tokens", "output_tokens")
    searches = web_searches(output)
    if searches:
        out["web_search"] = searches
    return out


def web_searches(output: Any) -> int:
    """The searches among a response's output items: a ``web_search_call`` whose action is a
    search ("Search actions incur a tool call cost"; opening a page found does not). One with no
    action stated is taken for a search; a failed one too (OpenAI does not say it is free)."""
    n = 0
    for item in output if isinstance(output, list) else ():
        if not isinstance(item, dict) or item.get("type") != "web_search_call":
            continue
        action = item.get("action")
        if not isinstance(action, dict) or action.get("type", "search") == "search":
            n += 1
    return n


class ResponsesStreamReader:
    __slots__ = ("ended", "error", "next_seq", "parsed_events", "response", "shown", "signed", "usage")
    ends_at_final = True  # response.completed / .incomplete: the answer and its usage, nothing after

    def __init__(self) -> None:
        # Told each reasoning item's ``encrypted_content`` the answer carries, when set: whose
        # reasoning is whose (``policy/thinking_signers.py``).
        self.signed: Callable[[str], None] | None = None
        self.parsed_events = ParsedEvents()
        self.usage: dict[str, int] = {}
        self.error: dict[str, Any] | None = None
        # The response object of response.created (its id, model, echoed request), which the
        # gateway's response.failed completes.
        self.response: dict[str, Any] = {}
        self.next_seq = 0
        self.shown: responses_continue.Shown | None = None  # kept only when it may be continued
        self.ended = False  # response.completed or response.incomplete came: the answer is whole

    def kind(self, raw: bytes, *, committed: bool) -> EventKind:
        # The client's numbers run on without a gap: an event the client never sees (an error
        # event, a malformed one: each ends the stream, so none is relayed after it) does not
        # advance ``next_seq``, which the gateway's response.failed and a continuation's
        # events take. Relayed events keep their own numbers, byte for byte.
        seq = _SEQ.search(raw)
        # A malformed event would crash the client's parser (the openai SDK raises a
        # JSONDecodeError): it ends the stream like any other break. Every event's data is
        # one JSON object, so its last byte spares the parse for all the others.
        # Parsed once, when a question needs it: the response object's "error": null puts
        # every response.created/in_progress/completed (tools echoed: ~17 KB for Codex) here.
        event: Event | None = None
        if raw.rstrip()[-1:] != b"}":
            event = self.parsed_events.parse(raw)
            if self.ended and event.is_done:
                # Chat's end marker after the answer's end, as LiteLLM's proxy sends it on
                # /v1/responses (BerriAI/litellm#34095: "the last two being `response.completed`
                # and `[DONE]`"). OpenAI's stream has none (its streaming guide: typed events
                # only; vLLM's router writes none either): dropped, never an error after a
                # finished answer, nor relayed to a client that expects none.
                return _SKIP_KIND
            if event.data is not None and not isinstance(event.json(), dict):
                self.error = malformed_event_error()
                return _ERROR_KIND
        # Searched with partition(), whose middle is the needle where found, else empty: not
        # `in` (gateway/sse.py), nor find(), which on 3.11 parses its arguments from a format
        # string (~500 instructions more a search, five or more searches an event).
        if raw.partition(b"response.failed")[1] or raw.partition(b"error")[1]:
            event = event or self.parsed_events.parse(raw)
            err = self._error_of(event.json())
            if err is not None:
                self.error = err
                return _ERROR_KIND
        if seq is not None:
            self.next_seq = int(seq.group(1)) + 1
        if committed and raw[:_TEXT_DELTA_LEN] == _TEXT_DELTA_EVENT:
            # A text delta, most of an answer's events: no search or end comes in one (OpenAI
            # names each event as its data's type), so only the text a continuation needs is
            # looked at (its name holds "output_", as the test below asks; issue #38).
            if self.shown is not None:
                event = event or self.parsed_events.parse(raw)
                tracked = event.json()
                if isinstance(tracked, dict):
                    self.shown.see(tracked)
            return _VISIBLE_KIND
        if self.shown is not None and (
            raw.partition(b"output_")[1] or raw.partition(b"content_part")[1] or raw.partition(b"refusal")[1]
        ):
            event = event or self.parsed_events.parse(raw)
            tracked = event.json()
            if isinstance(tracked, dict):
                self.shown.see(tracked)
        if raw.partition(b'"web_search_call"')[1]:
            # A search is counted as its item is done: a stream cut or continued before
            # response.completed (whose output alone listed them) had its searches shown and
            # never charged (audit: 3 Codex had received). One search per event, parsed only here.
            event = event or self.parsed_events.parse(raw)
            self._searched(event.json())
        if committed and not (
            raw.partition(b"response.completed")[1] or raw.partition(b"response.incomplete")[1]
        ):
            return _VISIBLE_KIND
        event = event or self.parsed_events.parse(raw)
        doc = event.json()
        name = doc.get("type") if isinstance(doc, dict) else None
        if name in _FINAL:
            assert isinstance(doc, dict)
            response = doc.get("response")
            if isinstance(response, dict):
                streamed = self.usage.get("web_search", 0)
                self.usage.update(responses_usage(response.get("usage"), response.get("output")))
                if streamed > self.usage.get("web_search", 0):
                    self.usage["web_search"] = streamed
            self.ended = True
            if self.signed is not None:
                # Whose reasoning is whose, read off the one event that holds every item whole
                # (parsed here anyway): no search of the events before it (issue #38).
                self._sealed(doc)
            return _FINAL_KIND
        if committed:
            return _VISIBLE_KIND
        if doc is None and event.data is None:
            return _CONTENTLESS_KIND  # comments, keep-alives
        if name in _CONTENTLESS:
            assert isinstance(doc, dict)
            if isinstance(doc.get("response"), dict):
                r = doc["response"]
                self.response = r
            return _CONTENTLESS_KIND
        if isinstance(doc, dict) and _opens_empty(doc):
            return _CONTENTLESS_KIND
        return _VISIBLE_KIND

    def _sealed(self, doc: Any) -> None:
        assert self.signed is not None
        for mark in sealed_in(doc):
            self.signed(mark)

    def _searched(self, doc: Any) -> None:
        """Counts the search of a ``response.output_item.done`` whose item is a
        ``web_search_call`` (``web_searches``' rule)."""
        if isinstance(doc, dict) and doc.get("type") == "response.output_item.done":
            n = web_searches([doc.get("item")])
            if n:
                self.usage["web_search"] = self.usage.get("web_search", 0) + n

    def _error_of(self, doc: Any) -> dict[str, Any] | None:
        """An ``{"error": {...}}`` payload (with the status the code stands for) when the
        event reports a failure, in the shape the classifier reads."""
        if not isinstance(doc, dict):
            return None
        kind = doc.get("type")
        if kind == "response.failed":
            response = doc.get("response")
            return failed_error(response if isinstance(response, dict) else {})
        if kind == "error":
            err = {k: doc[k] for k in ("code", "message", "param") if k in doc}
            if isinstance(doc.get("error"), dict):
                err = doc["error"]
            return _with_status(err)
        return None

    def track(self) -> None:
        self.shown = responses_continue.Shown()

    def partial(self) -> str | None:
        return self.shown.partial() if self.shown is not None else None

    def shown_text(self) -> str:
        return "".join(self.shown.texts) if self.shown is not None else ""

    def event_text(self, doc: Mapping[str, Any]) -> str:
        return responses_event_text(doc)

    def owed_end(self) -> bytes:
        return b""  # response.completed is the end and the answer at once: nothing follows it

    def broken(self, ending: Ending, request_id: str, model: str | None) -> bytes:
        response = failed_response(self.response, ending)
        response["id"] = response.get("id") or f"resp_{request_id}"
        response["created_at"] = response.get("created_at") or 0
        response["model"] = response.get("model") or model or ""
        response["output"] = []  # what was shown is the client's already; it is not kept here
        doc = {"type": "response.failed", "sequence_number": self.next_seq, "response": response}
        return b"event: response.failed\ndata: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n"


def _opens_empty(doc: dict[str, Any]) -> bool:
    """An output item or content part opened with nothing in it yet shows nothing."""
    kind = doc.get("type")
    if kind == "response.output_item.added":
        item = doc.get("item")
        if not isinstance(item, dict):
            return False
        if item.get("type") == "message":
            return not item.get("content")
        if item.get("type") == "reasoning":
            return not item.get("summary") and not item.get("content")
        return False
    if kind in ("response.content_part.added", "response.reasoning_summary_part.added"):
        part = doc.get("part")
        return isinstance(part, dict) and not part.get("text")
    return False
