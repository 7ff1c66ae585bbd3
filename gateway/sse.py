"""Server-sent events, just enough to relay chat-completion streams safely.

The relay works on whole events (so it can hold back contentless leading events,
spot error events and strip the usage chunk it asked for) but never waits for more
than the bytes of the event in progress.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.jsonbody import mended

_SEPARATORS = (b"\n\n", b"\r\n\r\n", b"\r\r")

# Bytes on the per-event path are searched with find(), not `in`: CPython's `in` on bytes
# first tries its operand as an integer (`65 in b"A"`), so for a bytes operand it makes,
# formats and drops a TypeError before it searches, which costs more than searching an
# event (callgrind: ~1,000 of ~1,600 instructions a test; 3.12 and 3.13 too). One byte is
# looked for as that integer (`_LF in chunk`): a memchr, without find()'s argument parsing
# (a format string per call before 3.13).
_LF, _CR = ord("\n"), ord("\r")

# The most one upstream event may hold. An event is held whole until its end, so without a bound
# one that never ends (400 MiB without a line break) took the gateway to 2 GB. The largest real
# ones are a few MB: a Responses stream's ``response.completed`` repeats the whole answer, base64
# images from its image tool included, and a Gemini chunk carries a generated image inline; 64
# MiB is many times that, and a quarter of the bound on a whole answer (attempt.py).
MAX_EVENT_BYTES = 64 * 1024 * 1024


class EventTooLarge(Exception):
    """An event grew past its splitter's limit before it ended."""


class EventSplitter:
    """Feeds arbitrary byte chunks in, gets complete raw events (with their separator) out.
    ``limit``: the most bytes an event may grow to (None: any); past it ``feed`` raises
    :class:`EventTooLarge`. Bytes from an upstream are split by :func:`upstream_splitter`."""

    __slots__ = ("_buf", "_held", "_limit", "_more")

    def __init__(self, limit: int | None = None) -> None:
        self._buf = b""
        self._more: list[bytes] = []  # chunks after ``_buf`` with no line end: joined once
        self._held = 0  # bytes of the event in progress (``_buf`` and ``_more``), when limited
        self._limit = limit

    def feed(self, chunk: bytes) -> list[bytes]:
        limit = self._limit
        if limit is not None and self._held > limit:
            raise EventTooLarge(limit)
        if _LF not in chunk and _CR not in chunk:
            # It cannot complete an event (separators are made of line ends only): kept aside
            # rather than copied onto the buffer and rescanned, chunk after chunk, while a
            # large event (a Responses answer echoing the request's tools) arrives in pieces.
            if self._buf:
                self._more.append(chunk)
            else:
                self._buf = chunk
            if limit is not None:
                self._held += len(chunk)
                if self._held > limit:
                    raise EventTooLarge(limit)
            return []
        if self._more:
            buf = b"".join((self._buf, *self._more, chunk))
            self._more = []
        else:
            buf = self._buf + chunk if self._buf else chunk
        if _CR not in buf:
            # Only "\n\n" can end an event here (what every provider sends): one split in C
            # rather than a find() per event, half the cost on a chunk of many events.
            ended = buf.split(b"\n\n")
            rest = ended.pop()
            if len(ended) == 1 and not rest:
                events = [buf]  # one whole event, as a stream sends a token: no copy
            else:
                events = [raw + b"\n\n" for raw in ended]
        else:
            events = []
            start = 0
            while True:
                end, sep_len = _next_boundary(buf, start)
                if end < 0:
                    break
                events.append(buf[start : end + sep_len])
                start = end + sep_len
            rest = buf[start:]
        self._buf = rest
        if limit is not None:
            self._held = len(rest)
            if self._held > limit and not events:
                raise EventTooLarge(limit)
            # else the events that ended are the caller's first: the next feed, or pending, raises
        return events

    def check(self) -> None:
        """Raises :class:`EventTooLarge` if the event in progress is past the limit already (as
        ``pending`` would), for a caller that leaves it here for whoever feeds the splitter next."""
        if self._limit is not None and self._held > self._limit:
            raise EventTooLarge(self._limit)

    @property
    def pending(self) -> bytes:
        if self._limit is not None and self._held > self._limit:
            raise EventTooLarge(self._limit)
        if self._more:
            self._buf = b"".join((self._buf, *self._more))
            self._more = []
        return self._buf


def upstream_splitter() -> EventSplitter:
    """A splitter for bytes from an upstream, whose events may be at most MAX_EVENT_BYTES."""
    return EventSplitter(MAX_EVENT_BYTES)


def _next_boundary(buf: bytes, start: int) -> tuple[int, int]:
    best, best_len = -1, 0
    for sep in _SEPARATORS:
        i = buf.find(sep, start)
        if i >= 0 and (best < 0 or i < best):
            best, best_len = i, len(sep)
    return best, best_len


_UNPARSED: Any = object()


@dataclass(frozen=True, slots=True)
class Event:
    raw: bytes
    name: str | None  # the `event:` field
    data: str | None  # the joined `data:` lines; None for comment-only events
    # The data's JSON, once read: a reader asks several questions of one event (malformed?
    # whose stream? visible?), and each would otherwise parse it again. Read-only by
    # convention: a caller that edits a document parses its own event.
    _doc: Any = field(default=_UNPARSED, init=False, repr=False, compare=False)

    @property
    def is_done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"

    def decoded_object(self) -> dict[str, Any] | None:
        """The data's JSON object if it has been decoded already (this never decodes)."""
        doc = self._doc
        return doc if isinstance(doc, dict) else None

    def json(self) -> Any:
        doc = self._doc
        if doc is _UNPARSED:
            doc = _loads(self.data)
            object.__setattr__(self, "_doc", doc)  # frozen to everyone else
        return doc


def _loads(data: str | bytes | None) -> Any:
    if data is None:
        return None
    try:
        # orjson is ~4x faster per event; it refuses a little that json accepts (NaN,
        # integers beyond 64 bits, lone surrogates), and json re-judges exactly that.
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return mended(json.loads(data))
    except ValueError:
        return None


loads_event = _loads  # for translators that decode an event's data themselves


class ParsedEvents:
    """The events a stream reader parsed lately, handed on to the translator after it: an
    upstream event is then decoded once, not once by each (issue 24: one parse per body).

    Keyed by the identity of the raw bytes: each kept event holds its bytes, so the id
    cannot be reused while it is here; a few at most (the leading events a reader holds
    before the first visible one), each given away once. Nothing is kept unless ``keep`` is
    set: only a translated stream has anyone to give them to.
    """

    __slots__ = ("_recent", "keep")
    KEEP = 4

    def __init__(self) -> None:
        self._recent: dict[int, Event] = {}
        self.keep = False

    def parse(self, raw: bytes) -> Event:
        event = parse_event(raw)
        if self.keep:
            recent = self._recent
            if len(recent) >= self.KEEP:
                del recent[next(iter(recent))]
            recent[id(raw)] = event
        return event

    def take(self, raw: bytes) -> dict[str, Any] | None:
        if not self._recent:  # most events of a stream: the reader decoded none of them
            return None
        event = self._recent.pop(id(raw), None)
        return event.decoded_object() if event is not None and event.raw is raw else None


def parse_event(raw: bytes) -> Event:
    # Lines end at CR, LF or CRLF only (the SSE grammar): str.splitlines would also break a
    # JSON string at U+2028, U+2029 or NEL, which a provider may send unescaped, and turn a
    # valid event into a malformed one. Splitting the bytes also spares decoding all but data.
    if _CR in raw:
        raw_lines = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    else:
        raw_lines = raw.split(b"\n")
        # The two shapes providers send, read without the walk below (about half its bytecodes;
        # every event of a tracked stream is parsed, issue #38): Anthropic's and OpenAI
        # Responses' ``event:`` line and one ``data:`` line, chat's one ``data:`` line, each
        # ended by a blank line. Sliced, not ``startswith`` (see gateway/translate/messages_chat
        # /stream.py: on 3.11 it parses its arguments from a format string).
        count = len(raw_lines)
        if count == 4 and not raw_lines[2] and not raw_lines[3]:
            first, second = raw_lines[0], raw_lines[1]
            if first[:7] == b"event: " and second[:6] == b"data: ":
                return Event(raw, first[7:].decode("utf-8", "replace"), second[6:].decode("utf-8", "replace"))
        elif count == 3 and not raw_lines[1] and not raw_lines[2] and raw_lines[0][:6] == b"data: ":
            return Event(raw, None, raw_lines[0][6:].decode("utf-8", "replace"))
    name: str | None = None
    data_lines: list[bytes] = []
    for line in raw_lines:
        if not line or line.startswith(b":"):
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data_lines.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    data = b"\n".join(data_lines).decode("utf-8", "replace") if data_lines else None
    return Event(raw, name, data)


def error_payload(event: Event) -> dict[str, Any] | None:
    """The error object of an error event (OpenAI ``{"error": ...}`` or Anthropic
    ``event: error``), else None. Cheap: parses JSON only when the bytes mention an error."""
    if event.raw.find(b"error") < 0:
        return None
    doc = event.json()
    if isinstance(doc, dict) and (doc.get("error") or event.name == "error"):
        return doc
    return None


# Anthropic's error types carry no status in a stream; their documented HTTP statuses
# (Anthropic API docs, "Errors") let a pre-commit stream error be answered faithfully.
_ANTHROPIC_STATUS = {
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402,
    "permission_error": 403, "not_found_error": 404, "request_too_large": 413,
    "rate_limit_error": 429, "api_error": 500, "timeout_error": 504, "overloaded_error": 529,
}  # fmt: skip


# OpenAI's error codes and 429 types carry no status in a stream either; the statuses its
# HTTP answers give them ("Error codes" guide; the bodies in tests/corpus/openai.json). Read
# as a 500, a rate limit in a chat stream's first chunk was retried as an outage (six calls
# and 12.6 s, then a 503, measured).
_OPENAI_STATUS = {
    "rate_limit_exceeded": 429, "insufficient_quota": 429, "requests": 429, "tokens": 429,
    "invalid_api_key": 401, "context_length_exceeded": 400,
}  # fmt: skip


# Text Generation Inference sends its stream errors as ``{"error": "<text>", "error_type": ...}``
# (an ErrorResponse, router/src/server.rs ``impl From<InferError> for Event``); the statuses its
# HTTP answers give the same types (``impl From<InferError> for (StatusCode, ...)`` there, the
# names from ``InferError::error_type`` in router/src/infer/mod.rs). Read as a 500, a request TGI
# refused ("`temperature` must be strictly positive") was retried six times as an outage.
_TGI_STATUS = {
    "validation": 422, "template_error": 422, "missing_template_variable": 422, "tool_error": 422,
    "overloaded": 429, "generation": 424, "incomplete_generation": 500,
}  # fmt: skip


def error_status(payload: dict[str, Any]) -> int | None:
    """The HTTP status an error event carries in ``error.status`` or a numeric ``error.code``,
    or the one its Anthropic ``error.type``, OpenAI ``error.code`` / 429 type or TGI
    ``error_type`` stands for."""
    err = payload.get("error")
    if isinstance(err, str):
        kind = payload.get("error_type")
        return _TGI_STATUS.get(kind) if isinstance(kind, str) else None
    if isinstance(err, dict):
        for key in ("status", "code"):
            value = err.get(key)
            if isinstance(value, int) and 400 <= value <= 599:
                return value
        if payload.get("type") == "error" and isinstance(err.get("type"), str):
            return _ANTHROPIC_STATUS.get(err["type"])
        for key in ("code", "type"):
            value = err.get(key)
            if isinstance(value, str) and value in _OPENAI_STATUS:
                return _OPENAI_STATUS[value]
    return None


def event_error_fields(
    payload: dict[str, Any], fallback: str = "the upstream reported an error in the stream"
) -> tuple[str, str | None]:
    """The message and code of an error event's payload (``{"error": {...}}``, or TGI's
    ``{"error": "<text>", "error_type": ...}``), as text; ``fallback`` when it has no message."""
    message, code = fallback, None
    err = payload.get("error")
    if isinstance(err, str):
        kind = payload.get("error_type")
        return err or fallback, kind if isinstance(kind, str) and kind else None
    if isinstance(err, dict):
        if isinstance(err.get("message"), str) and err["message"]:
            message = err["message"]
        raw = err.get("code") or err.get("type")
        code = str(raw) if isinstance(raw, (str, int)) and raw != "" else None
    return message, code


def encode_data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"
