"""The Gemini API's content generation (``models.generateContent`` and
``models.streamGenerateContent``): Gemini CLI and the google-genai SDKs.

Facts this module relies on (Gemini API reference, https://ai.google.dev/api/generate-content;
the requests in tests/corpus/requests/gemini-cli-*.json and genai-*.json):

* the model and the method are in the path, not the body:
  ``POST /v1beta/models/{model}:generateContent`` and ``…:streamGenerateContent``; Gemini CLI
  0.61 calls ``/v1beta``, google-genai 3.6 ``/v1`` (its default API version), both with
  ``x-goog-api-key``; the REST API also takes the key as ``?key=``;
* a stream with ``?alt=sse`` is server-sent events, each ``data:`` one whole
  GenerateContentResponse (``candidates[0].content.parts``, ``role: "model"``), the last one
  with ``finishReason`` and ``usageMetadata``; no end marker follows. Without ``alt=sse`` the
  answer is one JSON array written as it grows: the same stream, framed on the way out
  (``array.py``, set up by ``pipeline/gemini_extras.json_array_or``);
* an error, over HTTP and inside a stream alike, is ``{"error": {"code", "message", "status",
  "details"}}`` (``errors.py``);
* usage: ``usageMetadata.{promptTokenCount, candidatesTokenCount, thoughtsTokenCount,
  cachedContentTokenCount, toolUsePromptTokenCount, totalTokenCount}``; the prompt count
  includes the cached part but not the tool-use prompt (a server-side tool's: url_context,
  code execution), which is input too, and thoughts are billed as output.

The path's facts travel with the payload inside the gateway: ``model`` and ``stream`` (the
translators, the model map and the empty-stream probe read and change them there, as they do
the other APIs' fields). Neither is sent to a Gemini server, which refuses a field it does not
know ("Invalid JSON payload received. Unknown name ..."): ``address`` puts them back in the
URL, ``/v1/models/{model}:generateContent`` or ``:streamGenerateContent?alt=sse`` under the
upstream's base_url (``https://generativelanguage.googleapis.com/v1beta``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from gateway.apis import output_budget
from gateway.apis.answer_text import gemini_text
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
from gateway.apis.collect import gemini_answer
from gateway.apis.common import ShownText, malformed_event_error, model_too_long
from gateway.apis.gemini import errors
from gateway.apis.gemini.compress import compress_gemini
from gateway.apis.gemini.fields import field
from gateway.apis.gemini.tool_outputs import apply_tool_policy, cap_outputs
from gateway.apis.replay import Trim
from gateway.errors import Classification, ErrorType
from gateway.jsonbody import Lenient, dumps
from gateway.policy.compress import CompressionResult
from gateway.policy.thinking_signers import thought_signature_of
from gateway.policy.tool_outputs import Stage, ToolOutputPolicy
from gateway.sse import ParsedEvents

GENERATE = "generateContent"
STREAM = "streamGenerateContent"
# The routes, under both API versions the clients use; ``method`` is one of the two above.
PATHS = tuple(f"/{v}/models/{{model}}:{{method:{GENERATE}|{STREAM}}}" for v in ("v1beta", "v1"))


# Read on every relayed event as module names: on Python 3.11 (the shipped image's) reading a
# member off the enum class costs ~900 instructions more (callgrind; issue #38).
_CONTENTLESS_KIND, _ERROR_KIND = EventKind.CONTENTLESS, EventKind.ERROR
_FINAL_KIND, _VISIBLE_KIND = EventKind.FINAL, EventKind.VISIBLE


class GeminiGenerate:
    name = "gemini"
    api = "gemini"
    path = "/v1beta/models/{model}:generateContent"
    paths: tuple[str, ...] = PATHS
    key_param: str | None = "key"
    usage_member = "usageMetadata"
    billed_outside_usage: tuple[bytes, ...] = (b'"webSearchQueries"', b'"web_search_queries"')

    def admit(self, body: bytes, payload: dict[str, Any], where: Where = NOWHERE) -> Inbound | Rejection:
        model = where.params.get("model", "")
        if not model:
            return Rejection("the model is named in the path: /v1beta/models/{model}:generateContent",
                             "missing_model")  # fmt: skip
        too_long = model_too_long(model)
        if too_long is not None:
            return too_long
        stream = where.params.get("method") == STREAM
        contents = payload.get("contents")
        if not isinstance(contents, list) or not all(isinstance(c, dict) for c in contents):
            return Rejection("'contents' must be a list of Content objects", "invalid_contents")
        def shape(doc: dict[str, Any]) -> dict[str, Any]:
            return {**doc, "model": model, "stream": stream}

        return Inbound(body, shape(payload), model, stream, shape)

    def prepare(self, inbound: Inbound, stream_usage: bool) -> tuple[dict[str, Any], bool]:
        # The last chunk of a stream always carries usageMetadata. Claude's thinking the gateway
        # sealed into a signature is swapped per Gemini leg, not here: a translated leg reads
        # the seal (pipeline/reasoning_fix.gemini_passed).
        return inbound.payload, False

    def address(self, payload: Mapping[str, Any]) -> Address:
        return address(payload)

    def error_body(self, status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
        return errors.gemini_error(status, message, code, c, request_id)

    def error_status(self, status: int, code: str) -> int:
        return errors.own_status(status, code)

    def passed_status(self, status: int, upstream_status: int | None, body: bytes) -> int:
        return errors.passed_status(status, upstream_status, body)

    def foreign_error(self, e: ForeignError, request_id: str) -> tuple[int, bytes]:
        return errors.foreign_error(e, request_id)

    def reader(self, strip_usage: bool) -> GeminiStreamReader:
        return GeminiStreamReader()

    def broken_apart(self, ending: Ending, request_id: str) -> bytes:
        return bare_error(ending, request_id)

    def body_usage(self, doc: Mapping[str, Any]) -> dict[str, int]:
        used = gemini_usage(field(doc, "usageMetadata"))
        searches = grounding_searches(doc)
        if searches:
            used["web_search"] = searches
        return used

    def answer_text(self, doc: Mapping[str, Any]) -> str:
        return gemini_text(doc)

    def failed(self, doc: Mapping[str, Any]) -> FailedAnswer | None:
        return None  # a finishReason that stops a candidate is an ending the translators carry

    def compress(
        self,
        payload: Mapping[str, Any],
        *,
        error_message: str | None,
        context_window: int | None,
        removed_tokens: float = 0.0,
        prompt_tokens: int | None = None,
    ) -> CompressionResult:
        return compress_gemini(payload, error_message=error_message, context_window=context_window,
                               removed_tokens=removed_tokens, prompt_tokens=prompt_tokens)  # fmt: skip

    def tool_outputs(self, payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage) -> Applied:
        return apply_tool_policy(payload, policy, stage)

    def without_stream(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        return {**payload, "stream": False}

    def lower_output(
        self, payload: Mapping[str, Any], limit: int, name_if_absent: bool = False
    ) -> dict[str, Any] | None:
        return output_budget.gemini(payload, limit, name_if_absent)

    def replay_as_stream(self, doc: dict[str, Any], client_payload: Mapping[str, Any]) -> bytes:
        # One event holding the whole answer is a whole stream: each event is a complete
        # GenerateContentResponse, and the last one carries finishReason and usage.
        return sse_event(doc)

    def collect(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        return gemini_answer(events)

    def continuation(self, payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
        # Not yet: a broken stream from a Gemini upstream ends with its one typed error event
        # (``broken_event``), as on an upstream that declares no continuation.
        return None

    def splicer(self, original: StreamReader, partial: str, mode: str) -> Splice:
        raise NotImplementedError("continuation() declines every Gemini stream")

    def replay(self, partial: str) -> Trim:
        raise NotImplementedError("continuation() declines every Gemini stream")

    def cap_tool_outputs(self, payload: Mapping[str, Any], max_tokens: int) -> Capped:
        return cap_outputs(payload, max_tokens)


# What the gateway keeps in a Gemini payload that the Gemini API has in the URL instead.
INTERNAL = ("model", "stream")


def address(payload: Mapping[str, Any]) -> Address:
    """The model's method under ``/v1/models/`` (base_url ends in ``/v1beta``), the stream as
    server-sent events (the only stream format the gateway reads); the body without
    ``INTERNAL``. A model named ``models/x`` (the resource name) is ``x``."""
    model = payload.get("model")
    stream = payload.get("stream") is True
    body = {k: v for k, v in payload.items() if k not in INTERNAL}
    return Address(model_path(model if isinstance(model, str) else "", STREAM if stream else GENERATE),
                   "alt=sse" if stream else "", body)  # fmt: skip


def model_path(model: str, method: str) -> str:
    """``/v1/models/{model}:{method}``, the model quoted (it is a path segment, never a query)."""
    return f"/v1/models/{quote(model.removeprefix('models/'), safe='-._~@')}:{method}"


def sse_event(doc: Mapping[str, Any]) -> bytes:
    # CRLF pairs, as the Gemini API separates its events. orjson: a translated stream writes
    # one of these per chat delta, and json took ~5 µs each (issue 39's profile); a document
    # only json could read is written back by json (``jsonbody``).
    return b"data: " + dumps(doc, lenient=isinstance(doc, Lenient)) + b"\r\n\r\n"


def gemini_usage(usage: Any) -> dict[str, int]:
    """``prompt`` (cached part included, as Google counts it, and the tool-use prompt),
    ``completion`` (answer and thoughts: both are billed as output) and ``cache_read``."""
    out: dict[str, int] = {}
    if not isinstance(usage, dict):
        return out
    prompt = prompt_tokens(usage)
    if prompt is not None:
        out["prompt"] = prompt
    answer, thoughts = field(usage, "candidatesTokenCount"), field(usage, "thoughtsTokenCount")
    counted = [v for v in (answer, thoughts) if isinstance(v, int) and v >= 0]
    if counted:
        out["completion"] = sum(counted)
    cached = field(usage, "cachedContentTokenCount")
    if isinstance(cached, int) and cached > 0:
        out["cache_read"] = cached
    return out


def prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """The input tokens of a usageMetadata: ``promptTokenCount`` and ``toolUsePromptTokenCount``
    ("Number of tokens present in tool-use prompt(s)", UsageMetadata in Google's API reference),
    which is not part of the first: 1041 prompt + 902 candidates + 2191 thoughts + 377545
    tool-use = 381679 total (a url_context answer, Arize-ai/openinference#2578), and it is
    input (the fix there, #2597, and mozilla-ai/any-llm#1367 count it in the prompt, as
    BerriAI/litellm#24622 proposed). None when neither is a count."""
    counted = [v for v in (field(usage, "promptTokenCount"), field(usage, "toolUsePromptTokenCount"))
               if isinstance(v, int) and not isinstance(v, bool) and v >= 0]  # fmt: skip
    return sum(counted) if counted else None


def grounding_searches(doc: Mapping[str, Any]) -> int:
    """The Google Search queries grounding ran for an answer (each candidate's
    ``groundingMetadata.webSearchQueries``), billed on top of tokens (keys/prices.py)."""
    candidates = doc.get("candidates")
    n = 0
    for candidate in candidates if isinstance(candidates, list) else ():
        grounding = field(candidate, "groundingMetadata") if isinstance(candidate, dict) else None
        queries = field(grounding, "webSearchQueries") if isinstance(grounding, dict) else None
        n += len(queries) if isinstance(queries, list) else 0
    return n


class GeminiStreamReader(ShownText):
    """Reads a Gemini SSE stream: every event one GenerateContentResponse, an ``{"error"}``
    event an upstream error, the event whose candidate has a ``finishReason`` the end."""

    __slots__ = ("error", "parsed_events", "signed", "usage")
    ends_at_final = False

    def __init__(self) -> None:
        super().__init__()
        # Told each thought signature the answer carries, when set: whose reasoning is whose
        # (``policy/thinking_signers.py``).
        self.signed: Callable[[str], None] | None = None
        self.parsed_events = ParsedEvents()
        self.usage: dict[str, int] = {}
        self.error: dict[str, Any] | None = None

    def kind(self, raw: bytes, *, committed: bool) -> EventKind:
        event = self.parsed_events.parse(raw)
        if event.data is None:
            bare = _bare_error(raw)
            if bare is not None:
                self.error = bare
                return _ERROR_KIND
            return _VISIBLE_KIND if committed else _CONTENTLESS_KIND  # comments
        doc = event.json()
        if not isinstance(doc, dict):
            self.error = malformed_event_error()
            return _ERROR_KIND
        if isinstance(doc.get("error"), dict):
            self.error = doc
            return _ERROR_KIND
        usage = field(doc, "usageMetadata")
        if usage is not None:
            self.usage.update(gemini_usage(usage))
        # A chunk's grounding states the queries so far: the largest count is the answer's.
        # partition(), not find(): see the Messages reader's kind().
        grounded = raw.partition(b"ebSearchQueries")[1] or raw.partition(b"eb_search_queries")[1]
        searches = grounding_searches(doc) if grounded else 0
        if searches > self.usage.get("web_search", 0):
            self.usage["web_search"] = searches
        candidate = _first_candidate(doc)
        parts = _parts(candidate)
        if self.tracking:
            self._track(parts)
        if self.signed is not None:  # the event is parsed already: its few parts looked into
            for part in parts:
                if "thoughtSignature" in part or "thought_signature" in part:
                    self._signed(part)
        if candidate is not None and field(candidate, "finishReason"):
            return _FINAL_KIND
        feedback = field(doc, "promptFeedback") if candidate is None else None
        if isinstance(feedback, dict) and field(feedback, "blockReason"):
            # A blocked prompt: Google streams it as one event with no candidate
            # ({"promptFeedback": {"blockReason": ...}}). The stream's whole answer, not a break:
            # sending it again is blocked again (it was retried six times into a 502).
            return _FINAL_KIND
        if committed or parts:
            return _VISIBLE_KIND
        return _CONTENTLESS_KIND

    def _signed(self, part: dict[str, Any]) -> None:
        assert self.signed is not None
        mark = thought_signature_of(part)
        if mark is not None:
            self.signed(mark)

    def _track(self, parts: list[dict[str, Any]]) -> None:
        for part in parts:
            if isinstance(part.get("text"), str) and not part.get("thought"):
                self.texts.append(part["text"])
            elif field(part, "functionCall") is not None:
                self.tool_started = True

    def event_text(self, doc: Mapping[str, Any]) -> str:
        return gemini_text(doc)

    def owed_end(self) -> bytes:
        return b""  # Gemini sends no marker after its finishReason

    def broken(self, ending: Ending, request_id: str, model: str | None) -> bytes:
        return broken_event(ending, request_id)


def _bare_error(raw: bytes) -> dict[str, Any] | None:
    """An error Google wrote mid-stream as bare JSON, no ``data:`` (python-genai#1162: a 500's
    pretty-printed ``{"error": {...}}`` among the events, which python-genai then failed to
    parse), else None. Read as an error event, it is classified and retried or relayed as one:
    taken for a comment, a 429's or a 400's stream was retried as a broken connection, six
    times, and its words lost (audit)."""
    text = raw.strip()
    if not text.startswith(b"{"):
        return None  # a comment, or a line of another kind: never parsed
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("error"), dict) else None


def broken_event(ending: Ending, request_id: str) -> bytes:
    """A broken stream ends with an ``{"error": …}`` event: what an SSE parser reads (and the
    JSON-array framing turns into its last element). python-genai raises APIError on it (a
    chunk whose JSON starts with ``{"error":``); @google/genai, the JS SDK inside Gemini CLI,
    parses it as an empty answer and drops it, so ``bare_error`` follows it (the relay writes
    it apart: ``Dialect.broken_apart``)."""
    return sse_event(_broken_error(ending, request_id))


def bare_error(ending: Ending, request_id: str) -> bytes:
    """The same error as the bare JSON object, one line, no ``data:``: the form Google writes an
    error in mid-stream (googleapis/js-genai#461, python-genai#1162) and the only one
    @google/genai raises on. Its ``processStreamResponse`` (bundled in Gemini CLI 0.61.0) tries
    ``JSON.parse`` on each network read as a whole and throws ``ApiError`` when that is an
    object with ``error`` and a 4xx/5xx ``code``; anything else goes to its ``data: …``
    splitter. So this must be a read of its own: written apart, after a pause. Read together
    with the event before it, JSON.parse fails, the splitter leaves it unmatched and the SDK
    ends with "Incomplete JSON segment at the end": still an error, never an answer. SSE
    parsers ignore the line (a field named ``{"error"``, no ``data``); python-genai has raised
    on the event before it."""
    return dumps(_broken_error(ending, request_id)) + b"\r\n\r\n"


def _broken_error(ending: Ending, request_id: str) -> dict[str, Any]:
    c = ending.classification
    code = ending.code or c.provider_code or c.type.value
    return errors.google_error(_status_for(c), ending.message, code, c, request_id)


def _status_for(c: Classification) -> int:
    return {ErrorType.RATE_LIMIT: 429, ErrorType.BUDGET: 402, ErrorType.CONTEXT_OVERFLOW: 400,
            ErrorType.AUTH: 401, ErrorType.PROVIDER_UNAVAILABLE: 503}.get(c.type, 500)  # fmt: skip


def _first_candidate(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    candidates = doc.get("candidates")
    if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict):
        return candidates[0]
    return None


def _parts(candidate: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    content = candidate.get("content") if candidate is not None else None
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict) and p] if isinstance(parts, list) else []
