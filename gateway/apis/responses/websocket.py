"""The Responses API's WebSocket mode as data: what a client frame asks, and what a connection
remembers between its turns. No I/O here (``gateway/pipeline/websocket.py`` serves it).

OpenAI's mode (``wss://…/v1/responses``, https://developers.openai.com/api/docs/guides/websocket-mode):
the client sends ``response.create`` frames, which "use the same top-level fields as POST
/v1/responses"; ``stream`` "is implicit over WebSocket and should not be sent" (the Agents SDK
0.24 sends ``stream: true`` all the same, and Codex 0.171 too: both are taken); ``background``
is not supported; ``generate: false`` warms a turn up, returning a response id to chain from
without calling the model; an optional ``stream_id`` names a lane whose turns run in order and
whose events echo it. The server keeps each lane's most recent response in memory, so a turn
may send only its new input with ``previous_response_id``, ``store: false`` included; a turn
on another lane chained to it forks that conversation onto its own lane.

The guide's "Run conversations in parallel" section: turns of one ``stream_id`` run in order
and never overlap, turns of different ones run at once (a turn without one is on the implicit
default lane, by the same rules); a connection has at most 16 responses in flight across its
lanes, the rest "queued until an in-flight response finishes", and accepts at most 32 distinct
named ``stream_id`` values in its life, the default lane not counted; a ``stream_id`` is 1-256
letters, digits, ``_``, ``-`` or ``.``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import orjson

MAX_IN_FLIGHT = 16  # responses in flight on one connection, all lanes together: more wait
MAX_NAMED_LANES = 32  # distinct named stream_ids a connection accepts in its life
# Turns a connection holds beyond its MAX_IN_FLIGHT, all lanes together: the guide queues them
# without saying how many, and each is a parsed frame of up to ``server.max_body_bytes``, so the
# queue is bounded and a frame past it refused on its lane (``queue_full``) while reading goes on.
QUEUED_TURNS = 8
# Refusals a connection holds back, all lanes together, to send each after the turns its lane took
# before it (a refusal has no body; past this many, one goes out at once, out of its lane's order:
# closing instead would cut turns taken, one already upstream, that the client could not stop).
QUEUED_REFUSALS = 64
# What a connection remembers of its lanes' conversations (``Last.items``), all lanes together, in
# ``server.max_body_bytes``: a turn chained to one more than that could not be sent anyway, and
# ``generate: false`` turns, which call no upstream, could otherwise pile up memory for nothing.
REMEMBERED_BODIES = 2
K = TypeVar("K")
_LANE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")

CREATE = "response.create"
# Codex's acknowledgement of a response it has read (codex-rs/codex-api/src/common.rs,
# ResponseProcessedWsRequest): nothing to answer. Answering it with an error frame would be read
# as the next turn's error.
PROCESSED = "response.processed"


@dataclass(frozen=True)
class Create:
    """One ``response.create``: the POST /v1/responses body it stands for (streamed, without the
    frame's own members), its lane, and whether it asks the model at all."""

    body: dict[str, Any]
    lane: str | None
    generate: bool


@dataclass(frozen=True)
class FrameRefused:
    """A frame answered with the mode's error frame instead of a turn."""

    status: int
    code: str
    message: str
    param: str | None = None
    lane: str | None = None
    # Whether the frame is of a lane (``lane``, None the default one), so waits behind that
    # lane's turns: ``lane`` alone cannot say, None both for the default lane and for no lane.
    laned: bool = False


def read_frame(text: str | bytes) -> Create | FrameRefused | None:
    """A client's text frame: a turn, a refusal, or None for one that needs no answer."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError:
        return FrameRefused(400, "invalid_json", "the frame is not valid JSON")
    if not isinstance(doc, dict):
        return FrameRefused(400, "invalid_body", "the frame must be a JSON object")
    lane = doc.get("stream_id")
    if lane is not None and not (isinstance(lane, str) and _LANE_NAME.fullmatch(lane)):
        # No ``stream_id`` on this one: the guide's ``invalid_stream_id`` event names no lane.
        return FrameRefused(400, "invalid_stream_id", "'stream_id' must be a non-empty string of at most 256 "
                            "letters, digits, underscores, hyphens and periods", "stream_id")  # fmt: skip
    kind = doc.get("type")
    if kind == PROCESSED:
        return None
    if kind != CREATE:
        return FrameRefused(400, "invalid_event", f"unsupported client event type {str(kind)[:64]!r}; "
                       f"send {CREATE!r}", "type", lane, laned=True)  # fmt: skip
    if doc.get("background"):
        return FrameRefused(400, "invalid_event", "'background' is not supported over WebSocket",
                       "background", lane, laned=True)  # fmt: skip
    generate = doc.get("generate", True)
    if not isinstance(generate, bool):
        return FrameRefused(400, "invalid_event", "'generate' must be a boolean", "generate", lane,
                            laned=True)  # fmt: skip
    cache = doc.get("prompt_cache_options")
    if isinstance(cache, dict) and cache.get("prewarm") is True:
        # "When set to `true`, overrides the `generate` field to `false`" (the openai SDK 3.57's
        # PromptCacheOptions.prewarm, openai/types/responses/response_create_params.py).
        generate = False
    body = {k: v for k, v in doc.items() if k not in _FRAME_ONLY}
    body["stream"] = True
    return Create(body, lane, generate)


_FRAME_ONLY = frozenset({"type", "stream_id", "generate", "background"})


@dataclass(frozen=True)
class Last:
    """A lane's most recent response: its id, the conversation it ends as far as this
    connection knows it (the input it was made from, earlier turns expanded, then its output),
    the stored response that conversation goes on from (``base``: the ``previous_response_id``
    it was sent upstream with, None where ``items`` are whole), and whether the upstream that
    made it holds it (``held``: a native Responses upstream, not told ``store: false``), and
    what ``items`` weigh as JSON (``size``, what the connection's bound counts)."""

    id: str
    items: tuple[Any, ...]
    base: str | None = None
    held: bool = False
    size: int = field(default=0, compare=False)


def chained_to(body: dict[str, Any], lasts: Iterable[Last]) -> Last | None:
    """The remembered response a turn goes on from: its lane's last, or another lane's (a fork
    onto a new lane, the guide's "Fork a conversation onto a new stream"), by the
    ``previous_response_id`` it names; None where it names none of them."""
    previous = body.get("previous_response_id")
    if not isinstance(previous, str):
        return None
    return next((last for last in lasts if last.id == previous), None)


def lane_limit(lane: str) -> FrameRefused:
    """A ``response.create`` on a named lane past the connection's 32: the guide's
    ``websocket_stream_limit_reached`` event, with that lane's ``stream_id``; the connection
    goes on, its lanes too."""
    message = (f"this WebSocket connection has reached its limit of {MAX_NAMED_LANES} distinct stream ids; "
               "reuse one of them or open a new connection")  # fmt: skip
    return FrameRefused(400, "websocket_stream_limit_reached", message, "stream_id", lane)


def queue_full(lane: str | None) -> FrameRefused:
    """A turn past the ``MAX_IN_FLIGHT + QUEUED_TURNS`` a connection holds (running or waiting):
    refused on its lane, where waiting for room would stop the reading of every lane (and the
    answers to pings); the turns already taken go on."""
    message = (f"this WebSocket connection already holds {MAX_IN_FLIGHT + QUEUED_TURNS} turns (at most "
               f"{MAX_IN_FLIGHT} in flight, {QUEUED_TURNS} queued); send this one once one of them "
               "ends")  # fmt: skip
    return FrameRefused(429, "websocket_queue_full", message, "stream_id" if lane is not None else None, lane)


def still_streaming(previous: str, lane: str | None) -> FrameRefused:
    """A turn chained to a response another lane of the connection is still generating: not
    stored yet, so refused as OpenAI refuses a ``previous_response_id`` it does not hold (its 400
    ``previous_response_not_found``), on the turn's lane; sent once that response has completed,
    it is taken. Waiting instead would hold a place in flight, unbounded, behind another lane."""
    message = (f"Previous response with id '{previous}' not found: it is still being generated on this "
               "connection; send this turn once it has completed")  # fmt: skip
    return FrameRefused(400, "previous_response_not_found", message, "previous_response_id", lane)


def expanded(body: dict[str, Any], last: Last | None) -> dict[str, Any]:
    """``body`` as it goes upstream. A turn chained to the connection's last response, which no
    upstream holds (``store: false``, a translated upstream's answer, a ``generate: false``
    one), gets that response's conversation before its own input, chained to what that
    conversation went on from (``base``) or to nothing, so any upstream can answer it. A turn
    chained to a response its upstream holds, or to another id, goes on as it is: the
    provider's stored response (and its cache, and the pool's pin to the key that made it) is
    the one to go on from."""
    if last is None or last.held or body.get("previous_response_id") != last.id:
        return body
    rest = {k: v for k, v in body.items() if k != "previous_response_id"}
    if last.base is not None:
        rest["previous_response_id"] = last.base
    rest["input"] = [*last.items, *_items(body.get("input"))]
    return rest


def remembered(body: dict[str, Any], response: Any, *, held: bool = False) -> Last | None:
    """What the connection keeps of a turn (``body`` as sent upstream, expanded) whose stream
    ended with ``response`` (a ``response.completed`` or ``.incomplete`` event's): None when it
    has no id or no output list to chain from. Its items go on from the stored response the body
    was chained to, if any: what a turn chained to it must be sent on from too."""
    if not isinstance(response, dict):
        return None
    rid, output = response.get("id"), response.get("output")
    if not isinstance(rid, str) or not isinstance(output, list):
        return None
    base = body.get("previous_response_id")
    items = (*_items(body.get("input")), *output)
    return Last(rid, items, base if isinstance(base, str) else None, held, len(orjson.dumps(items)))


def forgotten(lasts: Mapping[K, Last], bound: int) -> list[K]:
    """The lanes whose last response a connection forgets so that what it remembers (``lasts``,
    least recently used first) weighs ``bound`` bytes at most: the least recently used first, the
    newest too where it alone is over. A turn chained to a forgotten response is sent on as it
    came, as one chained to any id the connection does not know."""
    total = sum(last.size for last in lasts.values())
    gone: list[K] = []
    for lane, last in lasts.items():
        if total <= bound:
            break
        gone.append(lane)
        total -= last.size
    return gone


def _items(given: Any) -> list[Any]:
    """A request's ``input`` as a list of items: a string is one user message (the API's own
    reading of it)."""
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def warm_response(body: dict[str, Any], created_at: int, response_id: str) -> dict[str, Any]:
    """The response a ``generate: false`` turn is answered with: an id to chain from (the
    gateway's own, ``warm_ids.py``), no output, no tokens (the model is not called)."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "model": body.get("model"),
        "output": [],
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "store": body.get("store", True),
        "usage": _NO_TOKENS,
    }


_NO_TOKENS = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0}  # fmt: skip


def error_frame(status: int, error: dict[str, Any], lane: str | None = None,
                headers: dict[str, str] | None = None) -> bytes:  # fmt: skip
    """The mode's error event: ``{"type": "error", "status", "error": {type, code, message,
    param}}``, with the stream id of the turn it ends and the answer's headers (Codex reads a
    ``headers`` map there, codex-rs/codex-api/src/endpoint/responses_websocket.rs)."""
    frame: dict[str, Any] = {"type": "error", "status": status, "error": error}
    if headers:
        # Both places: Codex reads the top level; the openai SDK types them inside ``error``
        # (ResponseWsErrorError.headers, openai/types/responses/responses_server_event.py, 3.57).
        frame["headers"] = headers
        frame["error"] = {**error, "headers": headers}
    if lane is not None:
        frame["stream_id"] = lane
    return orjson.dumps(frame)


# RFC 6455 §7.4.1: the endpoint is going away. Every end the gateway gives a connection uses it:
# a code the openai SDK 3.57 counts as recoverable (openai/types/websocket_reconnection.py,
# _RECOVERABLE_CLOSE_CODES). That SDK reconnects on it only for a caller that passed
# ``on_reconnecting`` to ``responses.connect()``, and only while reading events
# (openai/_websocket_connection.py, ``_reconnect``); otherwise, and on a send, the caller sees the
# connection closed and connects again itself, as Codex and the Agents SDK do.
GOING_AWAY = 1001


@dataclass(frozen=True)
class Leave:
    """How the gateway ends a connection before its next turn: the close code and reason, the
    error the turns it will not start are each answered with on their lane (``unstarted``), the
    connection's error event sent last (None: none), and the ``reason`` of its log line (None:
    not logged)."""

    code: int
    reason: bytes
    unstarted: FrameRefused
    error: FrameRefused | None = None
    logged: str | None = None


SHUTTING_DOWN = Leave(GOING_AWAY, b"the gateway is shutting down; connect again",
                      FrameRefused(503, "gateway_shutdown", "the gateway is shutting down; this turn was not "
                                   "started: send it again on a new connection"))  # fmt: skip
# A reload set ``server.responses_websocket: false``: the next upgrade is answered 426, on which
# Codex goes on over HTTPS. No connection error event: a client with no turn waiting would read
# it as a failed turn. A turn that was waiting is refused as that upgrade would be.
TURNED_OFF = Leave(GOING_AWAY, b"the gateway no longer serves the WebSocket mode; use POST /v1/responses",
                   FrameRefused(426, "websocket_not_supported", "the gateway no longer serves the WebSocket "
                                "mode; this turn was not started: send it with POST /v1/responses"),
                   logged="mode_off")  # fmt: skip


def due(*, draining: bool, serving: bool, age_s: float, max_age_s: float) -> Leave | None:
    """Whether a connection ends before its next turn, and how (None: it goes on). Asked between
    turns only: a turn under way is never cut for any of these (a drain's ``drain_s`` is)."""
    if draining:
        return SHUTTING_DOWN
    if not serving:
        return TURNED_OFF
    if age_s >= max_age_s:
        return aged(max_age_s)
    return None


def aged(max_age_s: float) -> Leave:
    """OpenAI's connections last 60 minutes; then the server sends this error event, with no
    ``stream_id`` (the connection's, not a turn's), status 400 and type
    ``invalid_request_error`` (the WebSocket mode guide,
    https://developers.openai.com/api/docs/guides/websocket-mode). Codex takes the code as
    retryable and opens a new connection (codex-rs/codex-api/src/endpoint/responses_websocket.rs,
    ``map_wrapped_websocket_error_event``); the Agents SDK 0.24 opens one for its next turn once
    the connection is closed (``_ensure_websocket_connection``)."""
    message = (f"this WebSocket connection reached its limit of {_span(max_age_s)}; open a new "
               "connection to continue")  # fmt: skip
    refused = FrameRefused(400, "websocket_connection_limit_reached", message)
    return Leave(GOING_AWAY, b"connection limit reached; connect again", refused, refused, "max_age")


def _span(seconds: float) -> str:
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute" + ("s" if minutes != 1 else "")
    return f"{seconds:g} seconds"


def refusal_error(refused: FrameRefused) -> dict[str, Any]:
    kind = "server_error" if refused.status >= 500 else "invalid_request_error"
    return {"type": kind, "code": refused.code, "message": refused.message, "param": refused.param}


def unstarted(leave: Leave, lane: str | None) -> FrameRefused:
    """The refusal of a turn on ``lane`` that a connection ending (``leave``) will not start."""
    return replace(leave.unstarted, lane=lane)
