"""Writes an outcome to the client: a buffered error or body, a raw passthrough, or an
SSE stream relayed event by event.

Once a stream is committed nothing is retried; a failure then ends it with exactly one
classified error event in the dialect's own grammar (and never its completion marker), so
no client mistakes it for a finished turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.apis import DIALECT_FOR_API, OPENAI_CHAT, api_of_path, output_budget
from gateway.apis.base import Dialect, Ending, EventKind, Splice, StreamReader
from gateway.config import ANTHROPIC_HOST, on_azure_openai
from gateway.errors import EVENT_STATUS, Classification, ErrorType, TransportError
from gateway.jsonpeek import top_level_member
from gateway.one_write import OneWriteResponse
from gateway.pipeline.attempt import leg_over, own_key_ending, sent_doc, settle_circuit, too_large_event
from gateway.pipeline.outcome import Failure, Leg, Outcome, RequestState, Success, gateway_failure
from gateway.pipeline.relayed_usage import Kept, shown_tokens
from gateway.pipeline.stamp import stamp
from gateway.policy import window_count
from gateway.policy.classify import classify, classify_stream_event
from gateway.policy.tokens import text_tokens
from gateway.services import Services
from gateway.sse import (
    EventSplitter,
    EventTooLarge,
    error_status,
    event_error_fields,
    upstream_splitter,
)
from gateway.translate.base import StreamTranslator
from gateway.upstream import UpstreamFailure

if TYPE_CHECKING:
    from gateway.pipeline.continuation import Resume


async def relay(
    request: web.Request, svc: Services, state: RequestState, outcome: Outcome, resume: Resume | None = None
) -> web.StreamResponse:
    if isinstance(outcome, Failure):
        state.classification = outcome.classification
        status, body = rendered(state, outcome)
        return OneWriteResponse(status=status, body=body, headers=outcome.headers)
    if outcome.chunks is None:
        if outcome.usage is not None:
            state.usage.update(outcome.usage)
        else:
            _count_usage_in_body(state, outcome.body)
        if state.pool_sent is not None and 200 <= outcome.status < 300:
            pool_used(svc, state, state.usage)
        if not state.usage and state.model is not None and 200 <= outcome.status < 300:
            _count_answer_text(state, outcome.body)
        return OneWriteResponse(status=outcome.status, body=outcome.body, headers=outcome.headers)
    if outcome.sse:
        return await _relay_sse(request, svc, state, outcome, resume)
    return await _relay_raw(request, svc, state, outcome)


def rendered(state: RequestState, failure: Failure) -> tuple[int, bytes]:
    """The status and body a failure is answered with: the upstream's own, untouched, or a
    gateway-made error in the request's dialect."""
    if failure.foreign is not None:
        return state.dialect.foreign_error(failure.foreign, state.request_id)
    own = failure.own
    if own is None:
        status = state.dialect.passed_status(failure.status, failure.upstream_status, failure.body)
        return status, failure.body
    status = state.dialect.error_status(failure.status, own.code)
    body = state.dialect.error_body(status, own.message, own.code, failure.classification, state.request_id)
    return status, body


def _count_usage_in_body(
    state: RequestState, body: bytes, dialect: Dialect | None = None, parse_max: int | None = None
) -> None:
    """``parse_max``: the largest body parsed whole when its usage is not where jsonpeek reads
    it (a relayed answer can be megabytes of embeddings: 50 ms to parse 2 MB)."""
    d = dialect or state.dialect
    member = d.usage_member  # Gemini's is usageMetadata: looking for "usage" counted nothing
    # From the end, where answers put their usage: `in` scanned 2 MB of embeddings in 1.4 ms,
    # rfind finds it in 0.1 µs.
    if body.rfind(f'"{member}"'.encode()) < 0:
        return
    # An answer whose web searches are billed apart from its usage (the Responses API's
    # web_search_call items, Gemini's grounding queries) is read whole: rare, and the usage
    # object alone would not count them.
    whole = False
    for marker in d.billed_outside_usage:
        if body.find(marker) >= 0:
            whole = True
            break
    if whole and (parse_max is None or len(body) <= parse_max):
        try:
            doc = json.loads(body)
        except ValueError:
            return
    else:
        doc = top_level_member(body, member)  # the usage object alone, not the whole body
    if doc is None:
        if parse_max is not None and len(body) > parse_max:
            return
        try:
            doc = json.loads(body)
        except ValueError:
            return
    if isinstance(doc, dict):
        state.usage.update(d.body_usage(doc))


def _count_answer_text(state: RequestState, body: bytes) -> None:
    """A model's success that states no usage at all (a server that omits ``usage``) is counted
    from the text it generated, as a stream without a count is: a key never pays $0 for an
    answer. Rare, so the body is parsed here only then; a passthrough (no model) or an answer
    with any count (an embedding's prompt tokens) is never parsed for it."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return
    if not isinstance(doc, dict):
        return
    tokens = round(text_tokens(state.dialect.answer_text(doc)))
    if tokens > 0:
        state.usage["completion"] = tokens
        state.completion_estimated = True


async def _relay_raw(
    request: web.Request, svc: Services, state: RequestState, outcome: Success
) -> web.StreamResponse:
    assert outcome.chunks is not None and outcome.response is not None
    resp = web.StreamResponse(status=outcome.status, headers=outcome.headers)
    kind = next((v for k, v in outcome.headers if k.lower() == "content-type"), "")
    state.stream = "event-stream" in kind
    # A path relayed as it is (an embedding, Codex's compaction, /v1/completions) counts its usage
    # as any answer does (tokens_total, a key's spend): its head and tail are kept, its usage read
    # from them at the end (relayed_usage.py); a stream's only for a key that pays for it.
    charged = state.reservation is not None and state.key is not None and state.key.counts_tokens
    kept = Kept.of(kind, charged)
    broke: Classification | None = None
    ended = False  # the upstream ended the body: whole, or broken (not the client, not drain_s)
    try:
        with _CutOnShutdown(svc):
            stamp(state, resp, svc.monotonic(), close=svc.life.draining)
            await resp.prepare(request)
            state.head_status = resp.status
            async for chunk in outcome.chunks:
                await resp.write(chunk)
                if kept is not None:
                    kept.add(chunk)
            ended = True
    except (UpstreamFailure, _ShutdownCut) as e:
        # Bytes already left and this body's grammar is unknown: the only honest signal left
        # is an unterminated body; the log line and metrics still say what happened.
        kind = e.kind if isinstance(e, UpstreamFailure) else TransportError.STREAM_BROKEN
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=kind)
        state.stream_error, state.classification = c.type, c
        state.ended_by = SHUTDOWN if isinstance(e, _ShutdownCut) else kind.value
        broke = c if isinstance(e, UpstreamFailure) else None  # a cut at shutdown is the gateway's
        ended = broke is not None
        if request.transport is not None:
            request.transport.close()
        return resp
    finally:
        outcome.response.close()
        leg_over(svc, state, broke, state.ended_by if broke is not None else None)
        if state.circuit_due is not None:
            settle_circuit(state, broke, answered=ended)
        if kept is not None and 200 <= outcome.status < 300:  # whole, broken, or left by the client
            _count_kept(state, kept, request.path, whole=ended and broke is None)
    await resp.write_eof()
    return resp


def _count_kept(state: RequestState, kept: Kept, path: str, whole: bool) -> None:
    """A relayed answer's usage, in the path's API's words (Codex's /v1/responses/compact counts
    input_tokens; a legacy completion's stream is chat's). A JSON answer without usage is charged
    nothing (a moderation, a token count) unless it was cut or longer than what was kept: its
    usage was there and unread."""
    api = api_of_path(path)
    dialect = DIALECT_FOR_API[api] if api else None
    if kept.sse:
        kept.count_stream(state, dialect or OPENAI_CHAT, whole)
        return
    body, entire = kept.body()
    _count_usage_in_body(state, body, dialect, RAW_PARSE_MAX if entire else 0)
    if not state.usage and not (entire and whole):
        state.answered_uncounted = True


RAW_PARSE_MAX = 64 * 1024  # a relayed answer whose usage jsonpeek cannot read is parsed whole only up to this


CLIENT_GONE = "client_gone"  # ended_by when the client closed the connection mid-response


class _ShutdownCut(Exception):
    """The drain period ran out while this response was still being relayed."""


class _CutOnShutdown:
    """Turns the cancellation that ends a response being relayed when ``drain_s`` runs out
    (``Lifecycle.cut``) into ``_ShutdownCut``, so the relay can still end the stream with its
    typed error event. (A class, not a generator: entered once per stream, at less than half
    the cost.)"""

    __slots__ = ("_svc", "_task")

    def __init__(self, svc: Services) -> None:
        self._svc = svc
        task = asyncio.current_task()
        assert task is not None
        self._task = task

    def __enter__(self) -> None:
        pass

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if kind is not None and issubclass(kind, asyncio.CancelledError) and self._svc.life.shutting_down:
            self._task.uncancel()
            raise _ShutdownCut from None


SHUTDOWN = "shutdown"  # ended_by of a request that drain_s ran out on
# A client that retries this soon reaches another replica: the load balancer stopped sending
# here when /readyz turned 503, drain_s ago.
SHUTDOWN_RETRY_S = 1.0


def shutdown_failure(svc: Services, state: RequestState) -> Failure:
    """The answer to a request that ``drain_s`` ran out on before its answer began (waiting for
    the upstream, or in a retry's backoff): not the provider's fault, and worth retrying at
    once, on another replica."""
    state.ended_by = SHUTDOWN
    c = Classification(
        ErrorType.PROVIDER_UNAVAILABLE, retryable=True, retry_after_s=SHUTDOWN_RETRY_S,
        reset_at_ms=round((svc.wall() + SHUTDOWN_RETRY_S) * 1000), provider_code="gateway_shutdown",
    )  # fmt: skip
    return gateway_failure(503, c, "the gateway is shutting down; retry the request", "gateway_shutdown")


async def _relay_sse(
    request: web.Request, svc: Services, state: RequestState, outcome: Success, resume: Resume | None
) -> web.StreamResponse:
    assert outcome.reader is not None
    first = outcome.reader  # its ids and grammar state are what the client has seen
    # Speaks the client's API when the upstream speaks another; kept across a continuation,
    # whose events are spliced into the first stream before they are translated.
    translator = outcome.translator
    resp = state.stream_response(status=outcome.status, headers=outcome.headers)
    leg: Success = outcome
    splice: Splice | None = None if translator is None else translator.event
    try:
        with _CutOnShutdown(svc):
            stamp(state, resp, svc.monotonic(), close=svc.life.draining)
            await resp.prepare(request)
            state.head_status = resp.status
            while True:
                end = await _pump(resp, svc, state, leg, splice)
                if end is None:
                    break
                # Once: a continuation that breaks too ends with the original failure.
                more = await resume(first, end) if resume is not None else None
                resume = None
                if more is None:
                    return await _end_with_error(resp, svc, state, first, end, translator)
                leg, splice = more
                if translator is not None:
                    splice = _then(splice, translator.event)
    except _ShutdownCut:
        if state.stream_complete:  # the client has the whole answer: it ends as it would have
            state.after_end = SHUTDOWN
            with contextlib.suppress(ConnectionError):
                if last := _closing(leg, translator):
                    await resp.write(last)
                await resp.write_eof()
            return resp
        # Not the provider's fault, and worth retrying at once (on another replica).
        c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, provider_code="gateway_shutdown")
        state.ended_by = SHUTDOWN
        ending = Ending(c, "the gateway is shutting down; retry the request", "gateway_shutdown")
        return await _end_with_error(resp, svc, state, first, ending, translator)
    except ConnectionError:
        # The client left mid-stream (its cancellation may arrive after the failed write).
        state.ended_by = CLIENT_GONE
        return resp
    with contextlib.suppress(ConnectionError):
        # SDKs close as soon as they have read the end marker, racing this last write: the
        # answer is complete either way.
        if last := _closing(leg, translator):
            await resp.write(last)
        await resp.write_eof()
    return resp


def _closing(leg: Success, translator: StreamTranslator | None) -> bytes:
    """The last bytes of a complete stream: the translation's end, else what the upstream left
    unsent after its answer's end (a Messages message_stop: ``StreamReader.owed_end``)."""
    if translator is not None:
        return translator.close()
    assert leg.reader is not None
    return leg.reader.owed_end()


def _then(first: Splice, second: Splice) -> Splice:
    """``first``'s events, each passed through ``second`` (a continuation, then translated)."""

    def both(raw: bytes) -> bytes:
        out = first(raw)
        if not out:
            return b""
        return _spliced(second, out)

    return both


async def _pump(
    resp: web.StreamResponse, svc: Services, state: RequestState, leg: Success, splice: Splice | None
) -> Ending | None:
    """Relays one upstream stream to the end; returns why it broke, or None when it completed."""
    assert leg.reader is not None
    relayed = Shown()  # what this leg showed: re-read only if it breaks
    broken = True
    end: Ending | None = None  # stays None when the client left or drain_s cut the stream
    try:
        end = await _pump_leg(resp, svc, state, leg, splice, relayed)
        broken = end is not None
        return end
    finally:
        # A leg that broke, or a server that counts nothing (llama-cpp-python sends no usage
        # chunk, asked or not), is counted from the text it showed.
        uncounted = broken or "completion" not in leg.reader.usage
        _count_usage(state, leg.reader, relayed if uncounted else None)
        if state.pool_sent is not None and not uncounted:
            pool_used(svc, state, leg.reader.usage)
        if end is None:
            leg_over(svc, state)
        else:
            leg_over(svc, state, end.classification, state.ended_by)
        if state.circuit_due is not None:
            # Broken with no ending: the client left, or drain_s cut the stream.
            settle_circuit(state, end.classification if end is not None else None,
                                 answered=end is not None or not broken)  # fmt: skip


def pool_used(svc: Services, state: RequestState, usage: dict[str, int]) -> None:
    """The answer of a pool deployment stated its usage: the deployment's count of the call,
    its estimate, becomes what its provider's window counted of it (policy/window_count.py,
    state/pools.py's ``used``), once. Only the provider's own count: an estimate of a broken
    stream's text would only move one guess to another."""
    sent, state.pool_sent = state.pool_sent, None
    if sent is None or svc.pool_state is None:
        return
    azure = on_azure_openai(sent.up.base_url)
    # Only Azure counts the output budget asked (policy/window_count.py): read back for it alone.
    output = output_budget.asked(sent_doc(sent.body)) if azure else None
    tokens = window_count.counted(usage, azure=azure, anthropic=sent.up.host == ANTHROPIC_HOST, api=sent.api,
                                  sent_output=output)  # fmt: skip
    if tokens is not None:
        svc.pool_state.used(sent.up, sent.model, sent.mark, sent.estimate, tokens)
    else:  # a usage the window does not count by: its estimate stays, no longer in flight
        svc.pool_state.landed(sent.up, sent.model, sent.mark)


def _count_usage(state: RequestState, reader: StreamReader, shown: Shown | None) -> None:
    """Adds a leg's usage to the request's, and keeps it as one of its ``legs``, priced at the
    model it was sent (``accounting.settle``). A leg that broke (cut, continued, or left by the
    client) counts the tokens of the text it showed: the provider generated them, though its
    count (if any) comes only in the events that never arrived. So does a leg whose server
    sent no count at all."""
    used = reader.usage
    estimated = False
    if shown is not None:
        tokens = shown.tokens(reader)
        if tokens > used.get("completion", 0):
            used = {**used, "completion": tokens}
            state.completion_estimated = estimated = True
    for kind, n in used.items():
        state.usage[kind] = state.usage.get(kind, 0) + n
    if state.key is not None:  # only a key that pays reads them: no per-stream work otherwise
        state.legs += (Leg(dict(used), state.sent_model, estimated),)


class Shown:
    """The upstream events a leg relayed, kept only to count their text if the leg breaks.

    Keeping them all made a held-open stream's memory grow with its answer (~150 bytes an
    event, every event, for the stream's life); only the first ``SAMPLE_BYTES`` are kept, and
    the text of the rest is taken to be in the same proportion to its bytes as the sample's.
    """

    SAMPLE_BYTES = 4096
    __slots__ = ("_events", "_sampled", "_total")

    def __init__(self) -> None:
        self._events: list[bytes] = []
        self._sampled = 0
        self._total = 0

    def append(self, raw: bytes) -> None:
        self._total += len(raw)
        if self._sampled < self.SAMPLE_BYTES:
            self._events.append(raw)
            self._sampled += len(raw)

    def extend(self, events: list[bytes]) -> None:
        for raw in events:
            self.append(raw)

    def tokens(self, reader: StreamReader) -> int:
        """The tokens the relayed events generated: text, reasoning and tool-call arguments."""
        return shown_tokens(b"".join(self._events), self._total, reader)


async def _pump_leg(
    resp: web.StreamResponse, svc: Services, state: RequestState, leg: Success, splice: Splice | None,
    relayed: Shown,
) -> Ending | None:  # fmt: skip
    assert leg.chunks is not None and leg.response is not None and leg.reader is not None
    reader = leg.reader
    splitter = leg.splitter or upstream_splitter()  # the peek's, holding its chunk's incomplete event
    finished = leg.complete  # the held events end with the first visible one: maybe the last
    try:
        # A splice keeps state (a continuation's renumbered blocks): events go through it in order.
        held = b"".join(leg.held if splice is None else [splice(raw) for raw in leg.held])
        relayed.extend(leg.held)
        out, end, fin = _filter(reader, leg.rest, svc.wall(), splice, relayed)
        end = _as_told(svc, state, end)
        finished = finished or fin
        await resp.write(held + out)
        if end is not None:
            return end
        state.stream_complete = state.stream_complete or finished
        if finished and reader.ends_at_final:
            await _body_end(state, leg)
            return None
        async for chunk in leg.chunks:
            events = splitter.feed(chunk)
            if not events:
                continue
            out, end, fin = _filter(reader, events, svc.wall(), splice, relayed)
            end = _as_told(svc, state, end)
            # The end marker counts even when its event showed nothing to the client (a
            # Gemini finish without parts, a chat finish chunk a translation holds back).
            finished = finished or fin
            if out:
                await resp.write(out)
            if end is not None:
                return end
            if finished:
                state.stream_complete = True  # what drain_s cutting the stream now must not contradict
                if reader.ends_at_final:
                    await _body_end(state, leg)
                    return None
        rest = splitter.pending
    except UpstreamFailure as f:
        if finished:
            # After the end marker (a chat stream's finish_reason, then a stall or a reset before
            # its usage chunk or [DONE]): the client has the whole answer, and an error chunk
            # after it contradicted it (the openai SDK raised APIError on a complete answer).
            state.stream_complete, state.after_end = True, f.kind.value
            return None
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=f.kind)
        state.ended_by = f.kind.value
        return Ending(c, _TRANSPORT_TEXT[f.kind], f.kind.value)
    except EventTooLarge:
        state.ended_by = "event_too_large"
        message = "the upstream sent a stream event larger than the gateway relays (64 MiB)"
        return Ending(too_large_event().classification, message, "event_too_large")
    finally:
        leg.response.close()  # a stalled upstream's late bytes, if any, are discarded
    if rest.strip():
        relayed.append(rest)
        await resp.write(_spliced(splice, rest))
        finished = finished or reader.kind(rest, committed=True) is EventKind.FINAL
    if not finished:
        # The upstream closed cleanly without the dialect's end marker: the turn is cut short.
        broken = TransportError.STREAM_BROKEN
        c = classify(None, {}, b"", now_s=svc.wall(), transport_error=broken)
        state.ended_by = broken.value
        return Ending(c, _TRANSPORT_TEXT[broken], broken.value)
    return None


# How long a stream whose end event ends it (``StreamReader.ends_at_final``) is read on for the
# body's own end, so that its connection can carry another request: one that arrives with the
# event or just after it keeps the socket; an upstream that holds the stream open past this is
# not waited for (it held the answer, and a WebSocket lane's next turn, for up to idle_s).
BODY_END_S = 0.2


async def _body_end(state: RequestState, leg: Success) -> None:
    """Reads what follows the answer's end event, up to ``BODY_END_S``, and drops it: nothing
    after the end is the client's, and the connection is closed (``leg.response.close``) unless
    the body ended meanwhile."""
    assert leg.chunks is not None
    try:
        async with asyncio.timeout(BODY_END_S):
            async for _ in leg.chunks:
                pass
    except TimeoutError:
        pass  # held open: the answer is whole, and nothing more is waited for
    except UpstreamFailure as f:
        state.after_end = f.kind.value  # broken after the whole answer: logged, no error


def _spliced(splice: Splice | None, data: bytes) -> bytes:
    """``data`` (whole events) as the client must see it: rewritten when it comes from a
    continuation, untouched (the hot path) otherwise."""
    if splice is None or not data:
        return data
    splitter = EventSplitter()
    out = b"".join(splice(raw) for raw in splitter.feed(data))
    return out + splice(splitter.pending) if splitter.pending else out


_TRANSPORT_TEXT = {
    TransportError.IDLE_TIMEOUT: "the upstream stream stalled (no data within timeouts.idle_s)",
    TransportError.STREAM_BROKEN: "the upstream stream ended before the response was complete",
    TransportError.RESET: "the upstream connection was reset mid-stream",
    TransportError.CONNECT: "the upstream connection was lost",
    TransportError.FIRST_BYTE_TIMEOUT: "the upstream did not respond in time",
    # A stream whose head went to a client before its first words (pipeline/attempt._HeadTimed).
    TransportError.FIRST_TOKEN_TIMEOUT: "the upstream sent no output within timeouts.first_token_s",
}


# Read per event as module names: on Python 3.11 (the shipped image's) reading a member off the
# enum class costs ~900 instructions more (callgrind), and this loop read three an event (#38).
_ERROR, _SKIP, _FINAL = EventKind.ERROR, EventKind.SKIP, EventKind.FINAL


def _filter(
    reader: StreamReader, events: Sequence[bytes], now_s: float, splice: Splice | None = None,
    shown: Shown | None = None,
) -> tuple[bytes, Ending | None, bool]:  # fmt: skip
    """The bytes to forward (each event through ``splice`` when there is one: already whole
    events, so not split again), the reason to end the stream if an error event came, and
    whether the dialect's end marker passed. ``shown`` collects the upstream's own events that
    were forwarded (re-read for usage if the stream breaks)."""
    kept: list[bytes] = []
    finished = False
    ending: Ending | None = None
    for raw in events:
        kind = reader.kind(raw, committed=True)
        if kind is _ERROR:
            assert reader.error is not None
            ending = _ending_from_event(reader.error, now_s)
            break
        if kind is _SKIP:
            continue
        finished = finished or kind is _FINAL
        kept.append(raw)
    # One append per chunk, not per event: Shown re-splits what it keeps anyway.
    relayed = b"".join(kept)
    if shown is not None and relayed:
        shown.append(relayed)
    if splice is not None:  # in order: a splice keeps state from event to event
        relayed = b"".join([splice(raw) for raw in kept])
    return relayed, ending, finished


def _as_told(svc: Services, state: RequestState, end: Ending | None) -> Ending | None:
    """An upstream's error event as the client may read it (``own_key_ending``): the leg's
    upstream (``state.reading_from``) says whose credential was sent."""
    if end is None or state.reading_from is None:
        return end
    up = svc.upstreams.get(state.reading_from)
    return end if up is None else own_key_ending(up, end)


def _ending_from_event(payload: dict[str, Any], now_s: float) -> Ending:
    c = classify_stream_event(payload, now_s=now_s)
    message, code = event_error_fields(payload, "the upstream reported an error mid-stream")
    return Ending(c, message, code, error_status(payload) or EVENT_STATUS[c.type])


# How long the client's own form of the error waits after the event before it (a Gemini
# client's bare JSON, ``Dialect.broken_apart``): long enough for a client that is reading to
# have taken the event in a read of its own (a Node client's next read returns everything that
# arrived meanwhile), and nothing beside a broken stream's wait for idle_s or a retry.
APART_S = 0.2


async def _pause_apart(svc: Services) -> None:
    """The pause before the apart form. drain_s running out in it (``Lifecycle.cut``) ends the
    pause, not the ending: the event is written, and a second ending (``gateway_shutdown``) would
    follow it with another error and give the bare form the wrong one (review)."""
    try:
        await svc.sleep(APART_S)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not svc.life.shutting_down or task is None:
            raise  # the client left (handler cancellation): nothing more to write
        task.uncancel()


async def _end_with_error(
    resp: web.StreamResponse, svc: Services, state: RequestState, reader: StreamReader, end: Ending,
    translator: StreamTranslator | None,
) -> web.StreamResponse:  # fmt: skip
    state.stream_error = end.classification.type
    state.classification = end.classification
    try:
        if translator is not None:
            await resp.write(translator.broken(end))
        else:
            await resp.write(reader.broken(end, state.request_id, state.model))
        # A stream written in another framing (a Gemini JSON array) holds the event as an
        # element, which its clients read; the apart form is for SSE readers only.
        sse = state.stream_response is web.StreamResponse
        apart = state.dialect.broken_apart(end, state.request_id) if sse else b""
        if apart:
            await _pause_apart(svc)
            await resp.write(apart)
        await resp.write_eof()
    except ConnectionError:
        pass  # the client is gone as well; nothing left to tell
    return resp
