"""Serves the Responses API's WebSocket mode (``GET /v1/responses`` upgraded; the frames are
``apis/responses/websocket.py``'s).

Each ``response.create`` is one request through the pipeline of ``POST /v1/responses``, streamed:
observed on its own (its log line, metrics, in-flight count), authenticated with the
handshake's headers, admitted, routed, retried, classified, compressed and translated as any.
The seam is the stream the relay writes: :class:`FramedStream` takes the SSE events the relay
writes (the Gemini JSON array's way, ``state.stream_response``) and sends each event's data as
one text frame; an answer written at once (an error before any event) becomes the mode's error
frame (observe hands it here, its ``at_once``: nothing on a turn is ever written to the connection as
HTTP). Each lane keeps its last response, so a turn that sends only its new items with
``previous_response_id`` (on its lane, or forking another lane's onto its own) reaches an
upstream that does not hold that response whole (``expanded``); it is remembered as its last
event goes out, and what the lanes remember together is bounded (``forgotten``).

Frames are read all the while turns run (pings are answered only as frames are read, and a
client's heartbeat must not time out behind a long turn). Each ``stream_id`` is a lane with its
own queue and worker: its turns run one at a time, in the order they came; lanes run at once,
``MAX_IN_FLIGHT`` turns at most, the rest waiting for a place. The reading never waits on a
lane: a connection holds ``MAX_IN_FLIGHT + QUEUED_TURNS`` turns at most, running or waiting,
all lanes together, and a turn past them is refused on its lane (``queue_full``), as is one on a
lane past ``MAX_NAMED_LANES`` (``lane_limit``) and a frame refused as read: at once, or, on a lane
with turns under way or queued, in its place after them (an error event says only its lane, so a
client matches a lane's answers by their order); only a turn taken opens a lane. A turn chained
to a response another lane is still generating is refused (``still_streaming``): it is not
stored yet. Frames go on the socket one whole frame at
a time. The connection asks whether it is to end (``due``) when woken and before each turn: a
drain (``Lifecycle.start_draining``), a reload that turned the mode off, or its age past
``server.responses_websocket_max_age_s`` closes an idle connection with 1001 Going Away at once,
a busy one once its turns under way are answered; each turn not started, waiting or come
meanwhile, is answered with an error frame saying why (``unstarted``), in its lane's order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import WebSocketError, WSCloseCode, WSMsgType, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.streams import StreamReader
from multidict import CIMultiDict

from gateway.apis import OPENAI_RESPONSES
from gateway.apis.responses.websocket import (
    MAX_IN_FLIGHT,
    MAX_NAMED_LANES,
    QUEUED_REFUSALS,
    QUEUED_TURNS,
    REMEMBERED_BODIES,
    SHUTTING_DOWN,
    Create,
    FrameRefused,
    Last,
    Leave,
    chained_to,
    due,
    error_frame,
    expanded,
    forgotten,
    lane_limit,
    queue_full,
    read_frame,
    refusal_error,
    remembered,
    still_streaming,
    unstarted,
    warm_response,
)
from gateway.apis.synthesize import responses_stream
from gateway.errors import Classification, ErrorType
from gateway.live import LIVE
from gateway.pipeline.admit import LOOKED_AGAIN, identify, too_large
from gateway.pipeline.forward import authenticate
from gateway.pipeline.outcome import STATE, Failure
from gateway.pipeline.relay import relay
from gateway.routing.stored import stores
from gateway.services import SERVICES
from gateway.sse import EventSplitter, parse_event

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

log = logging.getLogger("gateway.access")

# Pings every 30 s, closed when one goes unanswered for 15 s: a client gone without a close (a
# laptop's lid shut) does not hold its connection and its memory for good.
HEARTBEAT_S = 30.0
_ENDS = (b'"response.completed"', b'"response.incomplete"', b'"response.failed"')
_REMEMBERED = ("response.completed", "response.incomplete")
_CREATED = b'"response.created"'
# The handshake's own headers: none of them is the turn's (its body has its own length and type;
# each turn is a request of its own, with an id of its own).
_HANDSHAKE_ONLY = frozenset({"connection", "upgrade", "sec-websocket-key", "sec-websocket-version",
                             "sec-websocket-extensions", "sec-websocket-protocol", "content-length",
                             "content-type", "transfer-encoding", "accept", "accept-encoding",
                             "x-request-id"})  # fmt: skip
WEBSOCKET_BETA = "responses_websockets="  # Codex's ``openai-beta: responses_websockets=2026-02-06``


@dataclass
class Turn:
    """One ``response.create`` under way: where its events go and what they ended with."""

    ws: web.WebSocketResponse
    lane: str | None
    warm: dict[str, Any] | None = None  # a ``generate: false`` turn's body: answered here
    refused: FrameRefused | None = None  # a turn the connection refuses itself, once its key is checked
    # Given the response of its completed or incomplete event, as that event goes out: a turn sent
    # as soon as the client reads it goes on from it, not once the upstream closes its stream.
    on_end: Callable[[dict[str, Any]], None] | None = None
    ended: bool = False  # its last event is out (or it was answered otherwise)
    answered: bool = False  # with an error frame
    # The connection's: turns of other lanes send at the same time, each frame whole.
    sending: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The connection's responses still being generated, by id: a turn chained to one is refused.
    streaming: dict[str, Turn] = field(default_factory=dict)
    created: str | None = None  # the id of its ``response.created`` event

    def end(self, response: Any) -> None:
        """Its response is over (``response``: what to remember of it, None for nothing): no
        longer one a turn chained to it is refused for."""
        if self.ended:
            return
        self.ended = True
        if isinstance(response, dict) and self.on_end is not None:
            self.on_end(response)
        if self.created is not None:
            self.streaming.pop(self.created, None)

    async def send(self, data: bytes) -> None:
        async with self.sending:
            await self.ws.send_frame(data, WSMsgType.TEXT)


TURN = web.RequestKey("ws_turn", Turn)


class FramedStream(web.StreamResponse):
    """The stream response of a turn: the SSE events the relay writes, each sent as one text
    frame of its data (with the turn's ``stream_id``); nothing is written to the HTTP connection."""

    def __init__(self, turn: Turn, *, status: int = 200,
                 headers: Iterable[tuple[str, str]] | None = None) -> None:  # fmt: skip
        super().__init__(status=status, headers=CIMultiDict(headers or ()))
        self._turn = turn
        self._splitter = EventSplitter()
        self._started = False

    @property
    def prepared(self) -> bool:
        return self._started

    async def prepare(self, request: web.BaseRequest) -> None:
        self._started = True

    async def write(self, data: bytes | bytearray | memoryview) -> None:
        for raw in self._splitter.feed(bytes(data)):
            await self._event(raw)

    async def write_eof(self, data: bytes = b"") -> None:
        if data:
            await self.write(data)
        tail = self._splitter.pending
        if tail.strip():
            await self._event(tail)

    async def _event(self, raw: bytes) -> None:
        event = parse_event(raw)
        if event.data is None or not event.data.strip() or event.is_done:
            return  # a comment or keep-alive: a frame would hold nothing
        data = event.data.encode()
        turn = self._turn
        ends = any(data.find(end) >= 0 for end in _ENDS)
        created = turn.created is None and data.find(_CREATED) >= 0
        if ends or created or turn.lane is not None:
            doc = event.json()
            if isinstance(doc, dict):
                kind = doc.get("type")
                if ends and kind in _REMEMBERED:
                    turn.end(doc.get("response"))
                elif ends and kind == "response.failed":
                    turn.end(None)
                if created and doc.get("type") == "response.created":
                    response = doc.get("response")
                    rid = response.get("id") if isinstance(response, dict) else None
                    if isinstance(rid, str):
                        turn.created = rid
                        turn.streaming[rid] = turn
                if turn.lane is not None:
                    data = orjson.dumps({**doc, "stream_id": turn.lane})
        await turn.send(data)


async def answered_at_once(request: web.Request, response: web.StreamResponse) -> None:
    """An answer the pipeline wrote at once (a refusal, an upstream's error before any event,
    observe's own) as the mode's error frame: its status, its body's ``error`` object, and the
    headers a client acts on (``retry-after``, the ``x-llm-*`` classification). Never HTTP:
    the connection is a WebSocket's."""
    turn = request[TURN]
    body = response.body if isinstance(response, web.Response) else None
    raw = body if isinstance(body, bytes) else b""
    status = response.status
    if status < 400:
        # A success that is no stream (a server's non-JSON answer to a streamed request): the
        # turn has no events to end it, and an error frame of a 2xx status is one Codex skips.
        status, raw = 502, b"the upstream's answer to a streamed request was not a stream"
    error = _error_of(raw, status)
    headers = {k.lower(): v for k, v in response.headers.items() if _told(k.lower())}
    turn.answered = True
    with contextlib.suppress(ConnectionError):
        await turn.send(error_frame(status, error, turn.lane, headers))


def _told(name: str) -> bool:
    return name.startswith(("x-llm-", "retry-after")) or name in ("x-request-id", "x-should-retry")


def _error_of(body: bytes, status: int) -> dict[str, Any]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        doc = None
    error = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(error, dict):
        return error
    text = body[:500].decode("utf-8", "replace") or f"the upstream answered {status}"
    return {"type": "server_error" if status >= 500 else "invalid_request_error", "code": None,
            "message": text, "param": None}  # fmt: skip


async def _warmed(request: web.Request, turn: Turn, body: dict[str, Any]) -> web.StreamResponse:
    """``generate: false``: an id to chain from, answered here; the model is not called. Its key
    is checked as any turn's."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = OPENAI_RESPONSES
    model = body.get("model")
    state.model, state.stream = (model if isinstance(model, str) else None), True
    refused = await authenticate(svc, request)
    limit = svc.cfg.server.max_body_bytes
    if refused is None and (request.content_length or 0) > limit:
        # Expanded (its lane's conversation before its input), it is held as a cold turn's
        # would be sent: refused as that one is, the conversation it would grow not kept.
        refused = too_large(limit)
    if refused is not None:
        return await relay(request, svc, state, refused)  # unprepared: observe frames it
    framed = FramedStream(turn)
    await framed.prepare(request)
    state.head_status, state.first_byte_at = 200, svc.monotonic()
    await framed.write(responses_stream(warm_response(body, int(svc.wall()), svc.warm_ids.mint())))
    state.stream_complete = True
    return framed


async def _refused(request: web.Request, refused: FrameRefused) -> web.StreamResponse:
    """A turn the connection cannot take (chained to a response still being generated): a
    request all the same, its key checked first (a revoked one is told so), logged and counted."""
    svc, state = request[SERVICES], request[STATE]
    model = orjson.loads(await request.read()).get("model")  # the frame's body: an object
    state.dialect, state.stream = OPENAI_RESPONSES, True
    state.model = model if isinstance(model, str) else None
    failure = await authenticate(svc, request)
    if failure is None:
        c = Classification(ErrorType.UNKNOWN, False, provider_code=refused.code,
                           evidence="a response still being generated on this connection")  # fmt: skip
        failure = Failure(c, refused.status, [("Content-Type", "application/json")],
                          orjson.dumps({"error": refusal_error(refused)}), final=True)  # fmt: skip
    return await relay(request, svc, state, failure)  # unprepared: observe frames it


def asks_websocket(request: web.Request) -> bool:
    """Whether the request asks to upgrade its connection to a WebSocket (RFC 6455 §4.1)."""
    return any(t.strip().lower() == "websocket" for t in request.headers.get("Upgrade", "").split(","))


def turn_handler(pipeline: Handler) -> Handler:
    """The handler of one turn, inside ``observed``: POST /v1/responses's pipeline, its stream
    framed, an answer written at once made an error frame."""

    async def answer(request: web.Request) -> web.StreamResponse:
        turn = request[TURN]
        request[STATE].stream_response = functools.partial(FramedStream, turn)
        if turn.refused is not None:
            return await _refused(request, turn.refused)
        if turn.warm is not None:
            return await _warmed(request, turn, turn.warm)
        return await pipeline(request)  # an answer written at once: observe frames it (at_once)

    return answer


def serve(passthrough: Handler, refused: Handler, unauthenticated: Handler, draining: Handler,
          turn: Handler) -> Handler:  # fmt: skip
    """``GET /v1/responses``: an upgrade is served here (``server.responses_websocket``) or
    ``refused`` (426), or ``draining`` (503, as HTTP: the process is shutting down); any other GET
    goes to ``passthrough``. Each handler but the connection itself is observed: the connection
    is no request, its turns are."""
    async def route(request: web.Request) -> web.StreamResponse:
        if not asks_websocket(request):
            return await passthrough(request)
        live = request.app[LIVE]
        svc = live.services
        if not svc.cfg.server.responses_websocket:
            return await refused(request)
        if live.life.draining:  # /readyz says 503: a connection opened now would be closed at once
            return await draining(request)
        if not (await identify(svc, request.headers, None)).ok:
            request[LOOKED_AGAIN] = True
            return await unauthenticated(request)  # each turn is checked again, at its own time
        ws = _Socket(svc.cfg.server.max_body_bytes)
        await ws.prepare(request)
        connection = Connection(request, ws, turn, svc.monotonic)
        live.life.connections.add(connection)
        try:
            await connection.run()
        finally:
            live.life.connections.discard(connection)
        return ws

    return route


class _Socket(web.WebSocketResponse):
    """The connection's WebSocket. A message over ``max_msg_size`` makes aiohttp (3.14) close it
    1009 with no reason (``receive`` calls ``close(code=1009)``): the reason says which limit, so
    the client's error does (OpenAI's own server closes 1009 there too, with no error event:
    lidge-jun/opencodex#2473 measured it at 16 MiB). tests/integration/test_responses_websocket.py
    fails loudly if aiohttp stops closing through this method."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(heartbeat=HEARTBEAT_S, max_msg_size=max_bytes)
        # A close reason holds 123 bytes at most (RFC 6455 §5.5).
        self._too_big = f"message too big: a frame may be at most {max_bytes} bytes".encode()

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if code == WSCloseCode.MESSAGE_TOO_BIG and not message:
            message = self._too_big
        return await super().close(code=code, message=message, drain=drain)


class Connection:
    """One WebSocket: frames read as they come, each lane's turns answered in order, the lanes at
    once (``MAX_IN_FLIGHT`` turns at most; the rest wait for one to end)."""

    def __init__(self, handshake: web.Request, ws: web.WebSocketResponse, turn: Handler,
                 clock: Callable[[], float]) -> None:  # fmt: skip
        self.handshake = handshake
        self.ws = ws
        self.turn = turn
        self.clock = clock
        self.opened = clock()
        self.frames = 0  # answered
        # Each lane's most recent response, the least recently used first: what the connection
        # remembers is bounded (``forgotten``), all lanes together.
        self.lasts: dict[str | None, Last] = {}
        self.lanes: dict[str | None, _Lane] = {}  # the default lane is None's
        self.named: set[str] = set()  # every named lane the connection took (its 32 are for life)
        # Turns taken onto a lane that have not started, by the key their lane's queue holds.
        self.waiting: dict[int, Create] = {}
        self.taken = 0  # turns taken onto lanes: the next one's key in ``waiting``
        self.streaming: dict[str, Turn] = {}  # responses under way, by the id they were created with
        # Turns under way (each holds one of the MAX_IN_FLIGHT places); ``room`` is told when one
        # ends and when the connection is to end.
        self.busy = 0
        self.room = asyncio.Condition()
        self.refusals = 0  # refusals waiting in lanes' queues (bounded: QUEUED_REFUSALS)
        # One frame at a time on the socket: the frames of turns under way interleave whole.
        self.sending = asyncio.Lock()
        self.owed = 0  # what the lanes' queues hold or answer now: turns and refusals
        self.settled = asyncio.Event()  # set while none is
        self.settled.set()
        # Set: the watcher is to ask ``due`` again (a reload, a drain, a lane that found it due).
        self.woken = asyncio.Event()
        self.leaving: Leave | None = None  # decided: no turn starts, the connection closes

    def reconsider(self) -> None:
        """Something a connection's end depends on changed (``Lifecycle.start_draining``, a
        reload): an idle connection asks ``due`` now, a busy one once its turns are answered."""
        self.woken.set()

    def _due(self) -> Leave | None:
        live = self.handshake.app[LIVE]
        server = live.services.cfg.server
        return due(draining=live.life.draining, serving=server.responses_websocket, age_s=self._age(),
                   max_age_s=server.responses_websocket_max_age_s)  # fmt: skip

    def _age(self) -> float:
        return self.clock() - self.opened

    async def run(self) -> None:
        watcher = asyncio.create_task(self._watch())
        try:
            async for msg in self.ws:
                if msg.type is WSMsgType.TEXT:
                    frame = read_frame(msg.data)
                elif msg.type is WSMsgType.BINARY:
                    frame = FrameRefused(400, "invalid_event", "binary frames are not read; send JSON text")
                else:
                    if msg.type is WSMsgType.ERROR:
                        self._broken(msg.data)
                    continue
                if frame is not None:
                    await self._route(frame)
        finally:
            # The client is gone: so is any turn of its, upstream call included.
            tasks = [watcher, *(lane.task for lane in self.lanes.values() if lane.task is not None)]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _broken(self, error: object) -> None:
        """aiohttp ended the connection for a protocol error (already closed, with its code)."""
        if isinstance(error, WebSocketError) and error.code == WSCloseCode.MESSAGE_TOO_BIG:
            # aiohttp's own words: the size and the limit, nothing of the frame.
            log.warning({"event": "websocket_closed", "reason": "message_too_big", "code": int(error.code),
                         "detail": str(error)[:200], "frames": self.frames})  # fmt: skip

    async def _route(self, frame: Create | FrameRefused) -> None:
        """A turn onto its lane's queue (a lane's first turn starts it), or refused: a frame
        refused as read, a turn on a new named lane past the connection's limit, one past the
        turns the connection holds, and one that comes once the connection is to end. Only a turn
        taken opens a lane (and counts toward the 32). The reading never waits for a lane."""
        if isinstance(frame, FrameRefused):
            # One of no lane (no JSON, no object, a bad stream_id) goes out at once: no turn is its.
            await self._refuse(frame, on_lane=frame.laned)
            return
        name = frame.lane
        refused = None
        if self.leaving is not None:
            refused = unstarted(self.leaving, name)
        elif name is not None and name not in self.named and len(self.named) >= MAX_NAMED_LANES:
            refused = lane_limit(name)
        elif len(self.waiting) + self.busy >= MAX_IN_FLIGHT + QUEUED_TURNS:
            refused = queue_full(name)
        if refused is not None:
            await self._refuse(refused, on_lane=True)
            return
        if name is not None:
            self.named.add(name)
        lane = self.lanes.get(name)
        if lane is None:
            lane = self.lanes[name] = _Lane(name)
            lane.task = asyncio.create_task(self._serve(lane))
        self.taken += 1
        self.waiting[self.taken] = frame
        self._owe(lane, self.taken)

    async def _refuse(self, refused: FrameRefused, *, on_lane: bool) -> None:
        """A refusal of a frame on its lane goes out after that lane's turns taken before it: a
        client sending several on a lane matches the answers by their order. Else at once."""
        self.frames += 1
        lane = self.lanes.get(refused.lane) if on_lane else None
        # Past QUEUED_REFUSALS held, one goes out at once, out of its lane's order: holding each
        # for a lane that may be busy for minutes would hold memory without bound, and closing
        # would cut the turns taken, one already upstream, that the client had no way to stop.
        if lane is None or not lane.owed or self.refusals >= QUEUED_REFUSALS:
            await self._say(refused)
            return
        self.refusals += 1
        self._owe(lane, refused)

    async def _say(self, refused: FrameRefused) -> None:
        with contextlib.suppress(ConnectionError):
            await self._send(error_frame(*_refusal(refused)))

    def _owe(self, lane: _Lane, item: int | FrameRefused) -> None:
        lane.owed += 1
        self.owed += 1
        self.settled.clear()
        lane.queue.put_nowait(item)

    def _paid(self, lane: _Lane) -> None:
        lane.owed -= 1
        self.owed -= 1
        if not self.owed:
            self.settled.set()

    async def _send(self, data: bytes) -> None:
        async with self.sending:
            await self.ws.send_frame(data, WSMsgType.TEXT)

    async def _watch(self) -> None:
        """Asks ``due`` when woken and when the connection's age runs out; once it is due, no turn
        starts, and the connection ends when each lane has answered what it holds."""
        while (leave := self.leaving or self._due()) is None:
            left = self.handshake.app[LIVE].services.cfg.server.responses_websocket_max_age_s - self._age()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), timeout=max(left, 0.0))
            self.woken.clear()
        await self._decide(leave)
        # Each lane answers the turns it will not start, in their order: after its turn under way.
        await self.settled.wait()
        await self._leave(leave)

    async def _decide(self, leave: Leave) -> None:
        if self.leaving is None:
            self.leaving = leave
        self.woken.set()
        async with self.room:
            self.room.notify_all()  # a turn waiting for a place is answered now

    async def _place(self) -> bool:
        """A place in flight for a lane's next turn; False, taking none, once the connection is
        to end (its turns not started are answered)."""
        async with self.room:
            await self.room.wait_for(lambda: self.leaving is not None or self.busy < MAX_IN_FLIGHT)
            if self.leaving is not None:
                return False
            self.busy += 1
            return True

    async def _serve(self, lane: _Lane) -> None:
        """One lane: its turns answered one at a time, in the order they came, a refusal among
        them in its place."""
        while True:
            item = await lane.queue.get()
            try:
                if isinstance(item, FrameRefused):
                    self.refusals -= 1
                    await self._say(item)
                    continue
                if not await self._place():
                    del self.waiting[item]
                    self.frames += 1
                    await self._say(unstarted(self.leaving or SHUTTING_DOWN, lane.name))
                    continue
                try:
                    # Asked once a place is taken: what came meanwhile (a drain) holds.
                    if self.leaving is None and (leave := self._due()) is not None:
                        await self._decide(leave)
                    frame = self.waiting.pop(item)
                    if self.leaving is not None:
                        self.frames += 1
                        await self._say(unstarted(self.leaving, lane.name))
                        continue
                    self.frames += 1
                    going_on = await self._frame(frame)
                finally:
                    async with self.room:
                        self.busy -= 1
                        self.room.notify_all()
                    self.woken.set()  # between turns: is the connection to end now?
                if not going_on:
                    return
            finally:
                self._paid(lane)

    async def _leave(self, leave: Leave) -> None:
        if leave.logged is not None:
            log.info({"event": "websocket_closed", "reason": leave.logged, "code": leave.code,
                      "age_s": round(self._age(), 3), "frames": self.frames})  # fmt: skip
        error = leave.error
        if error is not None:
            with contextlib.suppress(ConnectionError):
                await self._send(error_frame(error.status, refusal_error(error)))
        await self.ws.close(code=leave.code, message=leave.reason)

    async def _frame(self, frame: Create) -> bool:
        """Answers one turn; False where the connection is to end without more."""
        try:
            await self._answer(frame)
        except ConnectionError:
            return False  # the client left mid-answer; the reading side ends the connection
        except Exception as e:
            # A bug of this module's (the pipeline answers its own): the connection ends,
            # where it would otherwise read frames no one answers. The type and place only.
            where = traceback.extract_tb(e.__traceback__)[-1]
            log.error({"event": "unhandled_error", "exception": type(e).__name__,
                       "at": f"{where.filename}:{where.lineno}", "transport": "websocket"})  # fmt: skip
            await self.ws.close(code=WSCloseCode.INTERNAL_ERROR)
            return False
        return True

    async def _answer(self, frame: Create) -> None:
        previous = frame.body.get("previous_response_id")
        if isinstance(previous, str) and previous in self.streaming:
            # Its last event is not out yet (once it is, the response is remembered).
            refused = still_streaming(previous, frame.lane)
            await self._run(frame, frame.body, Turn(self.ws, frame.lane, refused=refused,
                                                    sending=self.sending))  # fmt: skip
            return
        body = expanded(frame.body, self._recall(frame.body))
        turn = Turn(self.ws, frame.lane, None if frame.generate else body, sending=self.sending,
                    streaming=self.streaming)  # fmt: skip
        try:
            await self._run(frame, body, turn)
        finally:
            turn.end(None)

    def _recall(self, body: dict[str, Any]) -> Last | None:
        last = chained_to(body, self.lasts.values())
        if last is not None:
            lane = next(lane for lane, kept in self.lasts.items() if kept is last)
            self.lasts[lane] = self.lasts.pop(lane)  # the most recently used now
        return last

    async def _run(self, frame: Create, body: dict[str, Any], turn: Turn) -> None:
        request = _as_post(self.handshake, orjson.dumps(body))
        request[TURN] = turn
        turn.on_end = functools.partial(self._remember, frame.lane, body, request, turn)
        response = await self.turn(request)
        if not response.prepared and not turn.answered:  # observe's 500 for a bug inside it
            await answered_at_once(request, response)

    def _remember(self, lane: str | None, body: dict[str, Any], request: web.Request, turn: Turn,
                  response: dict[str, Any]) -> None:  # fmt: skip
        state = request[STATE]
        # Held where the upstream itself stored the response (a native Responses upstream, not
        # told ``store: false``): a turn chained to it goes on as sent (stored.py's rule, which
        # the pool's pin and the provider's cache follow). A translated answer's id, or this
        # gateway's own (``generate: false``), no upstream can find.
        held = turn.warm is None and state.translated is None and stores(body)
        last = remembered(body, response, held=held)
        if last is None:
            return
        # The lane's own: a fork leaves the lane it came from as it was.
        self.lasts.pop(lane, None)
        self.lasts[lane] = last
        bound = REMEMBERED_BODIES * self.handshake.app[LIVE].services.cfg.server.max_body_bytes
        for gone in forgotten(self.lasts, bound):
            del self.lasts[gone]


def _refusal(refused: FrameRefused) -> tuple[int, dict[str, Any], str | None]:
    return refused.status, refusal_error(refused), refused.lane


@dataclass
class _Lane:
    name: str | None = None
    # Keys of the connection's ``waiting``, and refusals to send in their place among them.
    queue: asyncio.Queue[int | FrameRefused] = field(default_factory=asyncio.Queue)
    task: asyncio.Task[None] | None = None
    owed: int = 0  # what its queue holds, and what it answers now


class _NotHTTP(AbstractStreamWriter):
    """The writer of a turn's request: the connection under it speaks WebSocket, so an HTTP
    answer prepared on the turn (a route observed without ``at_once``) fails before any byte of it
    is written, rather than corrupting the connection (the client's 1002)."""

    async def write_headers(self, status_line: str, headers: CIMultiDict[str]) -> None:
        raise RuntimeError("an HTTP answer was prepared on a WebSocket turn")

    async def write(self, chunk: bytes | bytearray | memoryview) -> None:
        raise RuntimeError("an HTTP answer was written on a WebSocket turn")

    async def write_eof(self, chunk: bytes = b"") -> None:
        raise RuntimeError("an HTTP answer was written on a WebSocket turn")

    async def drain(self) -> None:
        pass

    def enable_compression(self, encoding: str = "deflate", strategy: int | None = None) -> None:
        pass

    def enable_chunking(self) -> None:
        pass


def _as_post(handshake: web.Request, body: bytes) -> web.Request:
    """The request one turn stands for: POST /v1/responses with the handshake's headers (its key,
    its client's identity) and the frame's body."""
    headers = CIMultiDict[str]()
    for name, value in handshake.headers.items():
        lowered = name.lower()
        if lowered in _HANDSHAKE_ONLY:
            continue
        if lowered == "openai-beta":  # the mode's own beta is not the upstream's
            value = ",".join(v for v in value.split(",") if not v.strip().startswith(WEBSOCKET_BETA))
            if not value:
                continue
        headers.add(name, value)
    headers["Content-Type"] = "application/json"
    headers["Content-Length"] = str(len(body))
    headers["Accept"] = "text/event-stream"
    request = handshake.clone(method="POST", headers=headers)
    content = StreamReader(handshake.protocol, max(len(body), 2**16), loop=asyncio.get_running_loop())
    content.feed_data(body)
    content.feed_eof()
    # clone() keeps the handshake's body, which is empty, and its writer, the connection's: the
    # turn's body is the frame's, and its writer refuses HTTP. aiohttp has no public way to give
    # a request either (3.14); tests/unit/pipeline/test_websocket_turn.py fails loudly if these
    # attributes stop being the ones read. (The limit above the body's size: a reader over its
    # limit would pause the connection's reading.)
    request._payload = content
    request._payload_writer = _NotHTTP()
    return request
