"""What differs between wire APIs, behind one small interface.

A dialect owns everything the pipeline must not know about a particular API:

* admission: parse and check a request body, find its model and stream flag;
* the shape of errors the gateway makes itself (the upstream's own errors always pass
  through untouched);
* the SSE grammar: which leading events are contentless (held back so a stream that
  dies before showing anything can be replayed), which event marks a complete stream,
  which event is an upstream error, where usage lives, and the one typed error event
  that ends a broken stream;
* compression: how its conversation maps onto the shared core in ``policy/compress.py``.

``forward.py`` is written against this interface only; adding an API is one module.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from gateway.errors import Classification
from gateway.jsonbody import Lenient, loads
from gateway.policy.compress import CompressionResult
from gateway.policy.tool_outputs import Stage, Tally, ToolOutputPolicy

if TYPE_CHECKING:
    from gateway.apis.replay import Trim
    from gateway.sse import ParsedEvents

# Rewrites one raw event of a continuation stream (b"" drops it).
Splice = Callable[[bytes], bytes]

# A payload with its tool outputs capped (None: nothing changed), and how many were cut.
Capped = tuple[dict[str, Any] | None, int]
# A payload after the per-tool output policy (None: nothing changed), and what it did.
Applied = tuple[dict[str, Any] | None, Tally]


# Not frozen: made once per request, and a frozen dataclass's __init__ (object.__setattr__
# per field) costs ~1.2 us more; only ``drop`` changes one after it is made.
@dataclass(slots=True)
class Inbound:
    """An admitted request: its bytes, and its document while something reads it.

    The document (a 150 KB body parses into ~160 KiB of objects) is what the stages before
    the send read; while the upstream works, only the bytes are needed (they are what goes
    upstream when the request is unchanged, and again on a retry). So the pipeline drops it
    before it waits, and the rarer stages after the send (a compress-and-retry, the
    empty-stream probe, a fallback, the loop breaker's fingerprint) read it again from the
    bytes: the same bytes parse into an equal document (~85 us per 76 KB)."""

    body: bytes  # as the client sent it (forwarded byte for byte when unchanged); see ``hand_over``
    held: dict[str, Any] | None  # the document; None once dropped (``payload`` reads it again)
    model: str | None
    stream: bool
    # What admission made of the parsed body, applied again on a re-read (Gemini adds the
    # model and the stream flag its path names); None: the body's document as it is.
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    dropped_lenient: bool = False  # whether the dropped document was a ``Lenient`` one
    added: tuple[str, ...] = ()  # members ``body`` has that the client's had not (``hand_over``)
    extra: int = 0  # and the bytes they take

    @property
    def payload(self) -> dict[str, Any]:
        doc = self.held
        if doc is None:
            doc, lenient = loads(self.body)
            for name in self.added:
                del doc[name]
            if lenient:
                doc = Lenient(doc)
            if self.shape is not None:
                doc = self.shape(doc)
            self.held = doc
        return doc

    @property
    def lenient(self) -> bool:
        """Only Python's json reads it (``jsonbody``): a rewrite of it is written by json too."""
        held = self.held
        return self.dropped_lenient if held is None else isinstance(held, Lenient)

    @property
    def size(self) -> int:
        """The bytes of the body as the client sent it."""
        return len(self.body) - self.extra

    def hand_over(self, sent: bytes, added: tuple[str, ...]) -> None:
        """``sent`` is the client's bytes with the top-level members ``added`` (none of them the
        client's) written in before the closing brace: it stands for them from now on, so one
        body, not two, lives while the upstream works; a re-read takes the members out."""
        self.extra += len(sent) - len(self.body)
        self.body, self.added = sent, self.added + added

    def drop(self) -> None:
        """Nothing reads the document for now: only the bytes stay (``payload`` re-reads)."""
        held = self.held
        if held is not None:
            self.dropped_lenient = isinstance(held, Lenient)
            self.held = None


class Where(NamedTuple):
    """What a request's URL says besides the body: the variables of the route it matched
    (Gemini names the model and the method in the path) and the query (Gemini's ``alt=sse``).
    Empty for the APIs that say everything in the body. (A NamedTuple: made for every
    request; see ``translate.base.Target``.)"""

    params: Mapping[str, str]
    query: Mapping[str, str]


NOWHERE = Where({}, {})


@dataclass(frozen=True, slots=True)
class Address:
    """Where one request goes on an upstream of an API that names the model and the method in
    the URL (Gemini), and the body it is sent there: the payload without the fields the
    gateway keeps in it for itself (``model``, ``stream``)."""

    path: str  # ``/v1/...``, mapped onto the upstream's base_url as every upstream path is
    query: str  # the whole query string (the client's own is not sent on)
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a body was not admitted; rendered in the dialect's error shape with status 400."""

    message: str
    code: str


class EventKind(enum.Enum):
    CONTENTLESS = "contentless"  # nothing a client would show: may be held back before commit
    VISIBLE = "visible"
    FINAL = "final"  # visible, and marks the stream as complete
    ERROR = "error"  # the upstream reported an error in the stream
    SKIP = "skip"  # never forwarded (bookkeeping the gateway asked for itself)


@dataclass(frozen=True, slots=True)
class Ending:
    """Why a committed stream is being ended early, for the one typed error event."""

    classification: Classification
    message: str
    code: str | None
    # The status the upstream's error event stands for (its own, else its class's: errors.py
    # EVENT_STATUS); None where the gateway ended the stream itself (a reset, a stall).
    status: int | None = None


class StreamReader(Protocol):
    """Reads one upstream stream event by event; one instance per attempt."""

    usage: dict[str, int]  # "prompt" / "completion" token counts seen so far
    error: dict[str, Any] | None  # the payload of the last ERROR event
    # Whether the FINAL event ends the stream, nothing the client needs after it (the Responses
    # API's response.completed, usage in it): the relay stops reading there. Not chat's
    # finish_reason (usage and [DONE] follow), nor Gemini's or a Messages message_delta.
    ends_at_final: bool
    # The events it decoded, kept (``keep``) for a translator after it, which then takes
    # each document from here instead of decoding the same event again.
    parsed_events: ParsedEvents

    def kind(self, raw: bytes, *, committed: bool) -> EventKind:
        """Classify one raw event. Before the stream is committed the full visibility
        analysis runs; after it only what relaying needs (errors, the end, usage)."""
        ...

    def broken(self, ending: Ending, request_id: str, model: str | None) -> bytes:
        """The single event that ends a broken stream, never mistaken for completion."""
        ...

    def owed_end(self) -> bytes:
        """What a whole answer's stream still owes its client when the upstream ended it (a
        clean close, a reset, a stall, ``drain_s``) after the event that ends the answer but
        before the marker that only follows it; written as the stream's last event. b"" when
        nothing is owed, or when this API's clients end on the answer's own end (chat's
        ``[DONE]``, docs/streaming.md)."""
        ...

    def track(self) -> None:
        """Also collect the visible text from now on, so a broken stream can be continued."""
        ...

    def partial(self) -> str | None:
        """The text shown so far when the stream could be continued from it: tracked, text
        only, no tool call started (its arguments cannot be continued safely); else None."""
        ...

    def shown_text(self) -> str:
        """All the text tracked so far, whatever else the stream started (for usage)."""
        ...

    def event_text(self, doc: Mapping[str, Any]) -> str:
        """What one of this API's stream events generated, as text (gateway/apis/answer_text.py):
        counted for a stream that broke before its usage came, or whose server sends none."""
        ...


@dataclass(frozen=True, slots=True)
class ForeignError:
    """An upstream's error answer to a request that was translated from this API: the
    client cannot read the upstream's envelope, so its dialect renders one of its own."""

    status: int  # the status the gateway decided on (402 for a budget error, say)
    classification: Classification
    upstream_api: str  # the API the upstream spoke (``chat``, ``messages``, ``responses``)
    upstream_status: int
    upstream_body: bytes  # the provider's original body, carried along for the curious
    prompt_tokens: int | None  # the provider's count of the request, else our estimate
    limit_tokens: int | None  # the provider's stated window, else the upstream's context_window
    output_tokens: int | None = None  # the output budget sent (told with a per-minute overflow)


@dataclass(frozen=True, slots=True)
class FailedAnswer:
    """A 2xx answer that reports its own failure in its API's terms (a Responses response whose
    ``status`` is ``failed``): to a client of another API, which has no place for that status,
    it is the error it names, classified and retried like the same error sent as one."""

    status: int  # the HTTP status the same error gets when sent as an error answer
    body: bytes  # the error alone (``{"error": {...}}``), as the classifier reads one


class Dialect(Protocol):
    name: str  # for logs
    api: str  # the name config uses in ``upstreams[].apis``
    path: str  # the endpoint an upstream that speaks this API is sent requests at
    # The routes (aiohttp patterns) that get the full pipeline: ``(path,)`` for an API whose
    # body says everything, more where the path carries the model and method (Gemini).
    paths: tuple[str, ...]
    # The query parameter this API's clients may send their key in (Gemini's ``key``), else
    # None. Accepted as a gateway key like the credential headers; never logged nor forwarded.
    key_param: str | None
    # The top-level member of a buffered success that holds its token counts.
    usage_member: str
    # Bytes whose presence in a buffered success means it bills something its usage member
    # does not count (web searches: the Responses API's ``web_search_call`` items, Gemini's
    # grounding queries), so it is read whole; empty where none can (a search per answer on
    # every chat answer cost ~0.4 % of a request).
    billed_outside_usage: tuple[bytes, ...]

    def admit(self, body: bytes, payload: dict[str, Any], where: Where = NOWHERE) -> Inbound | Rejection:
        """Check a parsed JSON object; ``body`` is its bytes, ``where`` what its URL says."""
        ...

    def prepare(self, inbound: Inbound, stream_usage: bool) -> tuple[dict[str, Any], bool]:
        """The payload to send, and whether the stream reader must drop usage it asked for."""
        ...

    def address(self, payload: Mapping[str, Any]) -> Address | None:
        """Where an upstream that speaks this API is sent ``payload``, and in which body; None
        for an API whose body says everything: at ``path``, the payload as it is."""
        ...

    def error_body(self, status: int, message: str, code: str, c: Classification, request_id: str) -> bytes:
        """A gateway-made error in this API's own envelope."""
        ...

    def error_status(self, status: int, code: str) -> int:
        """The status a gateway-made error is answered with on this API."""
        ...

    def passed_status(self, status: int, upstream_status: int | None, body: bytes) -> int:
        """The status an upstream's error body, passed through untouched, is answered with:
        ``status`` (the gateway's decision: 402 for a budget) unless the body itself states
        another (Google's ``error.code``)."""
        ...

    def foreign_error(self, e: ForeignError, request_id: str) -> tuple[int, bytes]:
        """An upstream error on a translated request, in this API's envelope and with the
        wording this API's clients act on (an overflow reads as this API's own overflow)."""
        ...

    def reader(self, strip_usage: bool) -> StreamReader: ...

    def broken_apart(self, ending: Ending, request_id: str) -> bytes:
        """What follows the event that ends a broken stream (``StreamReader.broken``) in a write
        of its own, a moment later: the same error in the form a client that reads errors only
        from a network read holding nothing else can see (Gemini's); b"" for most APIs."""
        ...

    def body_usage(self, doc: Mapping[str, Any]) -> dict[str, int]:
        """Token counts of a buffered success body."""
        ...

    def answer_text(self, doc: Mapping[str, Any]) -> str:
        """What a buffered success body generated, as text (gateway/apis/answer_text.py): counted
        when the body carries no usage of its own."""
        ...

    def failed(self, doc: Mapping[str, Any]) -> FailedAnswer | None:
        """The error a buffered success body reports in this API's own terms, read when the
        body is to be translated for another API's client; None for an answer."""
        ...

    def compress(
        self, payload: Mapping[str, Any], *, error_message: str | None, context_window: int | None,
        removed_tokens: float = 0.0, prompt_tokens: int | None = None,
    ) -> CompressionResult: ...

    def tool_outputs(self, payload: Mapping[str, Any], policy: ToolOutputPolicy, stage: Stage) -> Applied:
        """The per-tool output policy (projection, cut or exclusion) applied to every tool
        output, each named by the call it answers; None when nothing changed."""
        ...

    def without_stream(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The same request, asking for a buffered answer (the empty-stream probe)."""
        ...

    def lower_output(
        self, payload: Mapping[str, Any], limit: int, name_if_absent: bool = False
    ) -> dict[str, Any] | None:
        """The same request with its output budget at most ``limit`` (named where it names
        none, with ``name_if_absent``); None when it already was (``output_budget.py``)."""
        ...

    def replay_as_stream(self, doc: dict[str, Any], client_payload: Mapping[str, Any]) -> bytes:
        """A buffered success body as this API's stream, for a client that asked to stream."""
        ...

    def collect(self, events: list[dict[str, Any]]) -> dict[str, Any]:
        """A whole stream's decoded events as this API's buffered answer, for a client that
        asked for one from a server that streams regardless (``apis/collect.py``)."""
        ...

    def continuation(self, payload: Mapping[str, Any], partial: str, mode: str) -> dict[str, Any] | None:
        """The request that asks an upstream to go on from ``partial`` (the answer shown so
        far), in the way ``mode`` names; None when this API or request cannot be continued."""
        ...

    def splicer(self, original: StreamReader, partial: str, mode: str) -> Splice:
        """Rewrites a continuation stream's events into the original stream: same ids and
        indexes, its own start events dropped, the end marked as continued."""
        ...

    def replay(self, partial: str) -> Trim:
        """A fresh trim of a replay stream (``apis/replay.py``): checks, event by event,
        that the replay reproduces ``partial`` before anything of it is relayed."""
        ...

    def cap_tool_outputs(self, payload: Mapping[str, Any], max_tokens: int) -> Capped:
        """Every single tool output above ``max_tokens`` cut to head + tail before the first
        send (opt-in); None when nothing changed, and how many outputs were cut."""
        ...
