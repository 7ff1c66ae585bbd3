"""One upstream attempt: send, read as much as deciding needs, classify.

An attempt ends as a ``Success`` the client may be shown, or a ``Failure`` that the
retry loop may try again. For a stream, success means the first *visible* event
arrived: a stream that breaks or errors before that is a failure like any other,
so the client never sees a half-started turn.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import orjson

from gateway import jsonbody
from gateway.apis import OPENAI_CHAT, output_budget
from gateway.apis.base import Dialect, Ending, EventKind, FailedAnswer, ForeignError, StreamReader
from gateway.apis.collect import collect
from gateway.apis.gemini.wire import GeminiStreamReader
from gateway.apis.messages.wire import AnthropicStreamReader
from gateway.apis.responses.wire import ResponsesStreamReader
from gateway.errors import EVENT_STATUS, Classification, ErrorType, TransportError
from gateway.pipeline.accounting import hold_abandoned
from gateway.pipeline.outcome import (
    Failure,
    Leg,
    Outcome,
    RequestState,
    Success,
    bad_request,
    gateway_failure,
    transport_failure,
)
from gateway.policy import error_wording as words
from gateway.policy.answer_error import error_status_of
from gateway.policy.breaker import circuit_key
from gateway.policy.classify import RequestFacts, classify, classify_stream_event
from gateway.policy.error_fields import SCAN_LIMIT
from gateway.policy.foreign_reasoning import THOUGHT
from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.retry import EMPTY_STREAM, RetryPlan
from gateway.policy.retry_after import reset_at_ms
from gateway.policy.thinking_signers import mark_of, sealed_in, thought_signatures_in
from gateway.policy.tokens import BYTES_PER_TOKEN
from gateway.redaction import redact_bytes, redact_text
from gateway.routing import response_headers
from gateway.routing.headers import with_content_type
from gateway.routing.headroom import UNSTATED_WINDOW_MS
from gateway.routing.pools import ESTIMATES_RETRY_AFTER_S
from gateway.services import Services, UpstreamRuntime
from gateway.sse import EventTooLarge, error_status, event_error_fields, upstream_splitter
from gateway.state.pools import Mark, PoolSent, Taken
from gateway.translate import Translation
from gateway.upstream import BadRequestHead, BodyTooLarge, UpstreamFailure, UpstreamRequest, UpstreamResponse
from gateway.upstream.deadline import Deadline

log = logging.getLogger("gateway.decisions")

ERROR_BODY_LIMIT = 4 * 1024 * 1024  # an error's first bytes decide its class; the rest is dropped
# The most of an answer held to relay it whole (a 2xx body read before it is answered, translated
# or counted). A larger one is refused rather than cut: a cut answer served as a 200 passes for a
# complete one. Far above any model's answer (a million tokens is a few MB of JSON).
SUCCESS_BODY_LIMIT = 256 * 1024 * 1024


class ReadMode(enum.Enum):
    BUFFER = "buffer"  # read the whole success body (chat completions without streaming)
    STREAM = "stream"  # an SSE stream is expected: peek to the first visible event
    RAW = "raw"  # relay the success body untouched as it arrives (other /v1 paths)


# Read on every request as module names: on Python 3.11 (the shipped image's) reading a member
# off the enum class costs ~900 instructions more (callgrind; issue #38).
_STREAM, _RAW = ReadMode.STREAM, ReadMode.RAW
_IDLE_TIMEOUT = TransportError.IDLE_TIMEOUT
# The readers told whose reasoning an answer carries: a tuple, built once (a ``X | Y`` union in
# isinstance() makes two UnionType objects a call, on every stream: review).
_SIGNING_READERS = (AnthropicStreamReader, ResponsesStreamReader, GeminiStreamReader)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


@dataclass(slots=True)  # not frozen: see Inbound; copies are made with dataclasses.replace
class Call:
    """Where and how one client request goes upstream; the body may change (compression)."""

    up: UpstreamRuntime
    method: str
    url: str
    headers: Mapping[str, str]
    mode: ReadMode
    dialect: Dialect = OPENAI_CHAT
    strip_usage: bool = False  # the reader drops the usage chunk the gateway asked for
    track: bool = False  # collect the stream's text, so that a break can be continued
    # Set when the upstream speaks another API than the client: answers are translated back,
    # and its errors rendered in the client's API. ``dialect`` is then the upstream's.
    translation: Translation | None = None
    body: bytes = b""  # the request as first sent to this upstream
    # The model named upstream when the gateway wrote the body (translated, or under the
    # upstream's name for the model): a resent request names it again. None: the client's.
    wire_model: str | None = None
    rewritten: bool = False  # the body is the gateway's (``wire_payload`` reads it back)
    # Its first attempt was counted against the pool deployment's configured limits at the
    # pick (``PoolState.take``'s answer); any later one is counted as it goes.
    taken: Taken | None = None
    # Its latest attempt's time to the response head; None until one came. Per call, not per
    # request: the tracer places each attempt's first byte by it, also for attempts made at
    # once (``state.upstream_head_s`` is whichever came last).
    head_s: float | None = None

    def wire_payload(self) -> dict[str, Any] | None:
        """The request as sent, when the gateway wrote it: read back from ``body`` (only the
        continuation of a broken stream asks; the document is not held while the upstream
        works). An API that names the model in the URL (Gemini) gets it put back."""
        if not self.rewritten:
            return None
        doc, _ = jsonbody.loads(self.body)
        if self.wire_model is not None and "model" not in doc:
            doc["model"] = self.wire_model
        return doc  # type: ignore[no-any-return]


async def attempt(svc: Services, state: RequestState, plan: RetryPlan, call: Call, body: bytes) -> Outcome:
    if state.legs and state.reservation is not None:  # (an attempt left after the provider took it)
        refused = await hold_abandoned(svc, state)
        if refused is not None:
            return refused
    pooled = call.up.pooled and svc.pool_state is not None
    mark: Mark | None = None
    if pooled:
        ps = svc.pool_state
        assert ps is not None
        tokens = round(len(body) / BYTES_PER_TOKEN)
        taken, call.taken = call.taken, None
        scope = state.pool_model
        if taken is None and ps.takes(call.up.cfg, scope):
            # A retry or a resend of the request, or one not retried along the pool: each call
            # counts against the limits the operator set, so none goes past them.
            taken = await ps.take(call.up.cfg, scope, tokens)
            if taken is None:
                return limits_used_up(svc, call.up, ps.settling(call.up.cfg, scope, tokens))
        if (before := state.pool_sent) is not None:  # (a broken stream's: its continuation follows)
            ps.landed(before.up, before.model, before.mark)
        mark = ps.sent(call.up.cfg, scope, tokens, taken or False)
        state.pool_sent = PoolSent(call.up.cfg, scope, mark, tokens, call.dialect.api, body)
    elif state.pool_sent is not None:
        if svc.pool_state is not None:
            svc.pool_state.landed(state.pool_sent.up, state.pool_sent.model, state.pool_sent.mark)
        state.pool_sent = None  # a fallback's answer is not the deployment's
    state.attempts += 1
    left_s = plan.remaining_s()
    if plan.head_by is not None and state.first_byte_at is not None:
        plan.head_by = None  # a continuation: the client has its head, and waits for the body
        plan.head_cut = False
    token_s = first_token_s(svc, call)
    share_s = plan.head_share_s()
    # The client's head may go before the stream's first words: these are then waited for as
    # long as for any client, the share bounding only the upstream's own head.
    head_at = plan.head_before_words() if call.mode is _STREAM else None
    words_left_s = left_s
    if share_s is not None:
        # The client's head goes with the first visible event of a stream, with the whole
        # answer otherwise: both timers must leave room for the next try. Half of the client's
        # time (a fallback follows), shorter than the upstream's own timers, a timeout of this
        # attempt is the share's, not the upstream's. The request's first attempt with all the
        # client's time failed it as any timeout does: counted, or a hung pool key was never
        # left, its circuit never told (review); so is a circuit's probe, cut at half beside a
        # sibling (the key failed before). A fallback after a cut one has only what is left.
        whole = plan.last_hop and not plan.answer_in_hand and state.attempts == 1
        plan.head_cut = not (whole or plan.circuit_probe) and share_s < min(
            left_s, svc.limits.first_byte_s, left_s if token_s is None else token_s)
        left_s = min(left_s, share_s)
        plan.cut_at_s = share_s
    head_s = min(svc.limits.first_byte_s, left_s)
    if token_s is not None:
        # A stream showing nothing must not outlive the deadline.
        token_s = min(token_s, left_s if head_at is None else words_left_s)
    headers = svc.tracing.attempt_started(state, call, body)  # the call's own, plus traceparent when on
    request = UpstreamRequest(
        call.method, call.url, headers, body,
        # A stream's head counts against its first token too: it is not visible either.
        first_byte_timeout_s=max(0.001, head_s if token_s is None else min(head_s, token_s)),
    )  # fmt: skip
    # Timed only while a head cut is remembered (policy/head_cuts.py): an answer in time clears it.
    timed = bool(svc.head_cuts)
    if pooled or timed:
        t0 = svc.monotonic()
    token_first = token_s is not None and token_s < head_s
    call.head_s = None
    outcome = await _exchange(svc, state, request, call, token_s, token_first, mark, head_at)
    if mark is not None and isinstance(outcome, Failure):
        svc.pool_state.landed(call.up.cfg, state.pool_model, mark)  # type: ignore[union-attr]
    if isinstance(outcome, Failure) and call.up.secrets:
        without_own_key(outcome, call.up.secrets)
    if isinstance(outcome, Failure) and outcome.classification.type is ErrorType.AUTH \
            and not call.up.cfg.forwards_client_credentials:  # fmt: skip
        outcome = operator_key_refused(call.up, outcome)
    if pooled and isinstance(outcome, Success):
        # Time to the first visible event of a stream, to the whole answer otherwise.
        svc.pool_state.timed(call.up.cfg.name, svc.monotonic() - t0)  # type: ignore[union-attr]
    if isinstance(outcome, Failure) and outcome.classification.per_minute:
        outcome.sent_output = output_budget.asked(sent_doc(body))
    if call.translation is not None and isinstance(outcome, Failure) and outcome.own is None:
        outcome.foreign = _foreign(call, outcome, len(body))
        # Rendered as JSON in the client's API: not the upstream's text/plain or HTML any more.
        outcome.headers = with_content_type(outcome.headers, "application/json")
    svc.tracing.attempt_ended(state, call, outcome)
    if timed and isinstance(outcome, Success):
        _answered_in_time(svc, state, call, svc.monotonic() - t0)
    if plan.head_cut:
        plan.head_cut = isinstance(outcome, Failure) and outcome.classification.provider_code in _SHARE_CUTS
    if isinstance(outcome, Failure) and plan.unexplained(outcome.classification):
        state.empty_attempts.append(call.up.cfg.name)  # counted once known what it was
        return outcome
    if isinstance(outcome, Success) and outcome.chunks is not None:
        # Its body is still to come: a stream cut mid-answer is no success (leg_over counts it).
        if state.reading_from is not None:
            leg_over(svc, state)  # never relayed: nothing was seen to break
            settle_circuit(state, answered=False)
        state.reading_from = call.up.name
        return outcome
    label = outcome.classification.type.value if isinstance(outcome, Failure) else "success"
    svc.telemetry.upstream_attempts.inc((call.up.name, label))
    if isinstance(outcome, Failure) and outcome.classification.provider_code in _TIMEOUTS:
        svc.telemetry.upstream_timeouts.labels(call.up.cfg.name, outcome.classification.provider_code).inc()
    return outcome


def _answered_in_time(svc: Services, state: RequestState, call: Call, took_s: float) -> None:
    """An answer begun within the share a remembered head cut had: requests with a short head
    time may try the upstream first again (policy/head_cuts.py)."""
    if svc.head_cuts.answered(circuit_key(call.up.cfg.name, state.model), took_s):
        log.info({"request_id": state.request_id, "event": "head_cut_cleared", "upstream": call.up.cfg.name,
                  "model": state.model, "took_s": round(took_s, 3)})  # fmt: skip


def leg_over(svc: Services, state: RequestState, c: Classification | None = None, ended_by: str | None = None,
             *, relayed: bool = True) -> None:  # fmt: skip
    """The body of the attempt that answered (``state.reading_from``) has ended: whole (``c``
    None), or broken (``c``: its ending as classified, ``ended_by``: what ended it). Its attempt
    is counted now: an upstream that cuts every stream must not read as 100 % attempt success.
    A client that left, or the gateway's own cut at shutdown, is no failure of the upstream's.
    ``relayed``: the client was shown this body (not a replay set aside)."""
    upstream = state.reading_from
    if upstream is None:
        return
    state.reading_from = None
    svc.telemetry.upstream_attempts.inc((upstream, "success" if c is None else c.type.value))
    if c is not None or ended_by is not None:
        svc.tracing.leg_ended(state, c, ended_by, relayed)


def settle_circuit(
    state: RequestState, broke: Classification | None = None, *, answered: bool = True
) -> None:
    """The circuit's verdict on the request whose answer's body just ended, which ``send_one``
    left owed at its head (``state.circuit_due``): broken by the upstream as
    ``provider_unavailable`` (a cut, a stall, an overloaded event), a failed request; whole,
    or ended by anything else the upstream said, a success (it is up). Not ``answered`` (the
    client left, or drain_s cut it): neither, as for a client that leaves before the head; a
    probe's claim is given back. Called where ``leg_over`` is, once per body; the store
    hears it in the background (``SharedCircuit.settle_soon``): nothing here waits."""
    due = state.circuit_due
    if due is None:
        return
    state.circuit_due = None
    circuit, adm, model = due
    if answered:
        failed = broke is not None and broke.type is ErrorType.PROVIDER_UNAVAILABLE
        circuit.settle_soon(adm, model, failed=failed)
    else:
        circuit.abandon_soon(adm)


# The timeouts an attempt's share of the client's head time shortens (connect_s is not).
_SHARE_CUTS = frozenset({TransportError.FIRST_BYTE_TIMEOUT.value, TransportError.FIRST_TOKEN_TIMEOUT.value})

# Attempts that ended in a timeout before any answer: counted by kind.
_TIMEOUTS = frozenset({
    TransportError.CONNECT_TIMEOUT.value, TransportError.FIRST_BYTE_TIMEOUT.value,
    TransportError.FIRST_TOKEN_TIMEOUT.value,
})  # fmt: skip


def first_token_s(svc: Services, call: Call) -> float | None:
    """How long a stream may take to show something: the upstream's own limit, else the global."""
    if call.mode is not _STREAM:
        return None
    own = call.up.cfg.first_token_s
    return own if own is not None else svc.cfg.timeouts.first_token_s


def limits_used_up(svc: Services, up: UpstreamRuntime, settling: bool = False) -> Failure:
    """Nothing sent: the pool deployment's configured limits are used up until the minute's
    end, by every replica's requests (the pool sits it out until then and moves on); or
    (``settling``) its tokens are held by the estimates of calls in flight, whose answers give
    room back within moments: its wait is the short one (routing/pools.py's
    ``ESTIMATES_RETRY_AFTER_S``), not the minute's end."""
    now = svc.wall()
    wait_s = ESTIMATES_RETRY_AFTER_S if settling else 60 - now % 60
    name = up.cfg.name
    why = (f"deployment '{name}' is at its configured limits with requests in flight" if settling
           else f"deployment '{name}' used its configured limits this minute")  # fmt: skip
    c = Classification(ErrorType.RATE_LIMIT, True, wait_s, reset_at_ms(wait_s, now), "pool_rate_limited",
                       None, why)  # fmt: skip
    if settling:
        return gateway_failure(429, c, f"pool deployment '{name}' is at its configured limits (limits) with "
                               "requests in flight, whose answers give room back; try again in "
                               f"{ESTIMATES_RETRY_AFTER_S:g} s", "pool_rate_limited", final=True)  # fmt: skip
    return gateway_failure(429, c, f"pool deployment '{name}' used its configured limits (limits) this "
                           "minute", "pool_rate_limited", final=True)  # fmt: skip


def circuit_open(svc: Services, up: UpstreamRuntime, wait: float) -> Failure:
    return gateway_failure(
        503,
        _unavailable(svc, retry_after_s=wait, code="circuit_open"),
        f"upstream '{up.cfg.name}' is failing; its circuit is open",
        "circuit_open",
        final=True,
    )


async def _exchange(
    svc: Services, state: RequestState, request: UpstreamRequest, call: Call,
    token_s: float | None, token_first: bool, mark: Mark | None = None, head_at: float | None = None,
) -> Outcome:  # fmt: skip
    """``token_s``: a stream's first-token limit (None: none); ``token_first``: it is shorter
    than the head's own, so a head that does not come in time is a first-token timeout;
    ``head_at``: when a begun stream is handed to the relay without its first words."""
    mode = call.mode
    sent = svc.monotonic()
    svc.busy_poll.touch()  # the sender writes, then the loop waits for the answer
    try:
        resp = await svc.sender(request)
    except UpstreamFailure as f:
        if f.kind is TransportError.FIRST_BYTE_TIMEOUT:
            if request.written:
                _abandoned(state, {})
            if token_first and token_s is not None:
                return _first_token_timeout(svc, state, call, token_s)
        return _transport(svc, f.kind, f.evidence)
    except asyncio.CancelledError:
        # The client left (or drain_s ran out) before the answer's head: one sent whole was read
        # all the same, and a buffered answer's head comes only with the whole answer.
        if request.written:
            _abandoned(state, {})
        raise
    except BadRequestHead as e:
        # Config's headers and keys are checked at load, and the server refuses such bytes in
        # a client's own headers: what is left is the client's, decoded into a header (a Gemini
        # ?key= moved into the upstream's key header). Its mistake, not a 500; nothing was sent.
        return bad_request(f"the request cannot be sent upstream: {e}", "invalid_header")
    svc.busy_poll.touch()
    state.upstream_head_s = call.head_s = svc.monotonic() - sent
    if call.up.pooled and svc.pool_state is not None and call.up.cfg.api_key is not None:
        # (A forwarded client credential's headers tell that client's headroom, not the key's.)
        refused = round(len(request.body) / BYTES_PER_TOKEN) if resp.status == 429 else None
        _headroom(svc, call, state.pool_model, resp.headers, mark, refused)
    operator = call.up.cfg.api_key is not None  # the answer is to the gateway's own key
    try:
        if resp.status >= 400:
            facts = _facts(call, request, state)
            return _upstream_error(svc, resp.status, resp.headers, await resp.read(ERROR_BODY_LIMIT), facts,
                                   operator=operator)  # fmt: skip
        headers = response_headers(resp.headers, operator)
        ctype = resp.headers.get("Content-Type", "")
        if mode is _STREAM and ctype.startswith("text/event-stream"):
            reader = call.dialect.reader(call.strip_usage)
            reader.parsed_events.keep = call.translation is not None
            if call.track:
                reader.track()
            if isinstance(reader, _SIGNING_READERS):
                reader.signed = functools.partial(svc.signers.issued, deployment=call.up.cfg.name)
            try:
                if head_at is not None and (token_s is None or sent + token_s > head_at):
                    # Handed over at ``head_at`` without its words, the stream keeps their limit.
                    words_by = None if token_s is None else sent + token_s
                    peeked = await _peek_stream(svc, resp, headers, reader, head_at, words_by, call.dialect)
                elif token_s is None:
                    peeked = await _peek_stream(svc, resp, headers, reader)
                else:
                    # A Deadline, not an asyncio.timeout scope: the scope costs ~4.4 µs per stream
                    # on Python 3.11 (a Timeout, a timer, a getpid(2) for the running loop), this
                    # one timer ~1 µs (issue #38). Its expiry cancels the task as the scope would.
                    deadline = Deadline()
                    deadline.arm(max(0.0, token_s - (svc.monotonic() - sent)))
                    try:
                        peeked = await _peek_stream(svc, resp, headers, reader)
                    except asyncio.CancelledError:
                        if not deadline.expired():
                            raise
                        resp.close()  # abandons the upstream request: it may still be thinking
                        _abandoned(state, reader.usage)
                        return _first_token_timeout(svc, state, call, svc.monotonic() - sent)
                    finally:
                        deadline.close()
            except asyncio.CancelledError:
                _abandoned(state, reader.usage)
                raise
            except UpstreamFailure as f:
                if f.kind is _IDLE_TIMEOUT:
                    # Gone silent before its first words: the gateway leaves it as a first-token
                    # timeout does (idle_s, 120, comes before first_token_s, 300), the provider
                    # having taken it. A connection the provider broke is not counted as taken.
                    _abandoned(state, reader.usage)
                raise
            if call.translation is not None and isinstance(peeked, Success):
                peeked.translator = call.translation.stream(reader.parsed_events.take)
            return peeked
        if mode is _RAW:
            return Success(resp.status, headers, response=resp, chunks=resp.iter_chunks())
        try:
            body = await resp.read(SUCCESS_BODY_LIMIT, whole=True)
        except BodyTooLarge:
            return _too_large(state, call)
        if ctype.startswith("text/event-stream"):  # to a request for one answer: a stream is peeked above
            collected = _collected(svc, call, body)
            if isinstance(collected, Failure):
                return collected
            body, headers = collected, with_content_type(headers, "application/json")
        else:
            status = error_status_of(body)
            if status is not None:  # an error document under a 2xx (OpenRouter's, once a model started)
                facts = _facts(call, request, state)
                return _upstream_error(svc, status, resp.headers, body, facts, answered=resp.status,
                                       operator=operator)  # fmt: skip
        api = call.dialect.api
        if api == "messages" and _thought_in(body):
            _note_signed(svc, call, body)
        elif (api == "responses" and body.find(b"encrypted_content") >= 0) or (
            api == "gemini" and body.find(b"ignature") >= 0
        ):
            _note_sealed(svc, call, body)
        translated = call.translation.answer(body, call.dialect) if call.translation is not None else None
        if isinstance(translated, FailedAnswer):  # a Responses answer that failed, for another API's client
            facts = _facts(call, request, state)
            return _upstream_error(svc, translated.status, resp.headers, translated.body, facts,
                                   answered=resp.status, operator=operator)  # fmt: skip
        if translated is not None:
            body, usage = translated
            return Success(resp.status, headers, body=body, usage=usage)
        return Success(resp.status, headers, body=body)
    except UpstreamFailure as f:
        resp.close()
        return _transport(svc, f.kind)
    except BaseException:
        resp.close()  # the client left, or we are shutting down: do not leak the connection
        raise


def _thought_in(body: bytes) -> bool:
    # find(), not `in`: on every Messages answer (tests/unit/test_hot_path_costs.py).
    return body.find(b'"signature"') >= 0 or body.find(b"redacted_thinking") >= 0


def _note_signed(svc: Services, call: Call, body: bytes) -> None:
    """Whose the thinking of a Messages answer is (``policy/thinking_signers.py``)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    content = doc.get("content") if isinstance(doc, dict) else None
    for block in content if isinstance(content, list) else ():
        mark = mark_of(block) if isinstance(block, dict) and block.get("type") in THOUGHT else None
        if mark is not None:
            svc.signers.issued(mark, call.up.cfg.name)


def _note_sealed(svc: Services, call: Call, body: bytes) -> None:
    """Whose the reasoning of a Responses or Gemini answer is (``policy/thinking_signers.py``)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return
    if call.dialect.api == "responses":
        marks = sealed_in(doc)
    else:
        candidates = doc.get("candidates") if isinstance(doc, dict) else None
        first = candidates[0] if isinstance(candidates, list) and candidates else None
        content = first.get("content") if isinstance(first, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        marks = thought_signatures_in(parts) if isinstance(parts, list) else []
    for mark in marks:
        svc.signers.issued(mark, call.up.cfg.name)


def _abandoned(state: RequestState, usage: Mapping[str, int]) -> None:
    """The client (or a first-byte or first-token timeout) left an attempt the provider had
    taken (a stream's 2xx head, or a whole request written before its answer began): it read
    the prompt all the same. What its events counted so far (Anthropic's ``message_start``
    counts the prompt) is the request's; the settle estimates a prompt nothing counted, at the
    model this attempt was sent (a fallback that answered after it is another: both prompts
    were priced at the fallback's, a $15 model's at a $1 one's; review)."""
    for kind, n in usage.items():
        state.usage[kind] = state.usage.get(kind, 0) + n
    if state.key is not None:
        state.legs += (Leg(dict(usage), state.sent_model, False, True),)


async def _peek_stream(
    svc: Services, resp: UpstreamResponse, headers: list[tuple[str, str]], reader: StreamReader,
    head_at: float | None = None, words_by: float | None = None, dialect: Dialect | None = None,
) -> Outcome:
    splitter = upstream_splitter()
    held: list[bytes] = []
    chunks = resp.iter_chunks()
    received = False
    timed = None if head_at is None else _HeadTimed(chunks, svc, head_at, words_by, dialect)
    try:
        async for chunk in chunks if timed is None else timed:
            if chunk is None:
                # The client's head is due and the words have not come: the stream goes to the
                # relay as it is, the chunk being awaited with it.
                assert timed is not None
                return Success(200, headers, response=resp, chunks=timed.rest(), held=held, rest=[],
                               splitter=splitter, sse=True, reader=reader)  # fmt: skip
            received = received or bool(chunk)
            for i, raw in enumerate(events := splitter.feed(chunk)):
                kind = reader.kind(raw, committed=False)
                if kind is EventKind.ERROR:
                    resp.close()
                    assert reader.error is not None
                    return _stream_error(svc, reader.error)
                if kind is EventKind.SKIP:
                    continue
                held.append(raw)
                if kind is not EventKind.CONTENTLESS:
                    # The relay goes on with the rest of this chunk's events and this splitter,
                    # then keeps iterating `chunks`; an event in progress already past its bound
                    # is refused here, before anything is shown, as it was when the relay split
                    # this chunk's rest again (issue #38: ~20,000 instructions a stream).
                    splitter.check()
                    return Success(
                        200, headers, response=resp, chunks=chunks, held=held, rest=events[i + 1 :],
                        splitter=splitter, sse=True, reader=reader, complete=kind is EventKind.FINAL,
                    )  # fmt: skip
    except UpstreamFailure as f:
        if received or f.kind is TransportError.IDLE_TIMEOUT:
            raise  # a stall is not an answer
        # A stream head and then a cut, not one byte: counted as an empty stream below.
    except EventTooLarge:
        resp.close()
        return too_large_event()
    if not received:
        # Not one byte: some servers answer a request they reject (an overflow) this way.
        c = Classification.of(ErrorType.PROVIDER_UNAVAILABLE, provider_code=EMPTY_STREAM)
        return gateway_failure(502, c, "the upstream answered with an empty stream", EMPTY_STREAM)
    # Clean end before anything visible: the turn produced nothing, so it is worth a retry.
    return _transport(svc, TransportError.STREAM_BROKEN)


def _headroom(svc: Services, call: Call, model: str | None, headers: Mapping[str, str],
              mark: Mark | None, refused: int | None) -> None:  # fmt: skip
    """Every answer of a pool deployment tells its headroom (when it carries the headers);
    ``refused``: the tokens of a request answered 429, which the provider did not count."""
    assert svc.pool_state is not None
    if refused is not None and mark is not None:
        svc.pool_state.refused(call.up.cfg, model, mark, refused)
    room = svc.pool_state.observe(call.up.cfg, model, headers, mark, refused is not None)
    if room is None:
        return
    name, gauge, limits = call.up.cfg.name, svc.telemetry.headroom, call.up.cfg.limits
    for kind, left, limit, reset, configured in (
        ("requests", room.requests_remaining, room.requests_limit, room.requests_reset_at_ms,
         limits.requests_per_minute if limits is not None else None),
        ("tokens", room.tokens_remaining, room.tokens_limit, room.tokens_reset_at_ms,
         limits.tokens_per_minute if limits is not None else None),
    ):  # fmt: skip
        if left is not None and not limit and configured and refused is None:
            # Azure's answers state no limit: a share of the configured one, full in a minute,
            # as the strategy reads it (state/pools.py's ``_kind``); a 429's says nothing more.
            left, limit = min(left, configured), configured
            reset = reset if reset is not None else round(svc.wall() * 1000) + UNSTATED_WINDOW_MS
        if left is not None and limit:
            gauge.set(name, kind, left, limit, reset)


class _HeadTimed:
    """A stream's chunks, and None once ``at`` (on the services' clock) passes while the next
    is awaited; that read goes on, and ``rest`` yields it first, then the others, bounded by
    ``words_by`` until one holds a visible event (read apart, by a reader of its own, so the
    relay's counts nothing twice): past it, a first-token timeout, as before the head went.
    Only a client with a bounded head time pays a task per chunk read, and only until the
    first visible event."""

    def __init__(self, chunks: AsyncIterator[bytes], svc: Services, at: float, words_by: float | None,
                 dialect: Dialect | None) -> None:  # fmt: skip
        self.chunks, self.svc, self.at, self.words_by, self.dialect = chunks, svc, at, words_by, dialect
        self.pending: asyncio.Future[bytes] | None = None

    def __aiter__(self) -> _HeadTimed:
        return self

    async def __anext__(self) -> bytes | None:
        pending = self.pending = asyncio.ensure_future(anext(self.chunks))
        if not await _within(pending, self.at - self.svc.monotonic()):
            return None
        self.pending = None
        return pending.result()  # StopAsyncIteration ends the peek's loop; a failure is raised

    async def rest(self) -> AsyncIterator[bytes]:
        pending = self.pending
        if self.words_by is None or self.dialect is None:
            if pending is not None:
                try:
                    yield await pending
                except StopAsyncIteration:
                    return
            async for chunk in self.chunks:
                yield chunk
            return
        reader, splitter = self.dialect.reader(False), upstream_splitter()
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(self.chunks))
            if not await _within(pending, self.words_by - self.svc.monotonic()):
                pending.cancel()
                raise UpstreamFailure(TransportError.FIRST_TOKEN_TIMEOUT)
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            pending = None
            yield chunk
            kinds = [reader.kind(raw, committed=False) for raw in splitter.feed(chunk)]
            if any(k is not EventKind.CONTENTLESS and k is not EventKind.SKIP for k in kinds):
                break
        async for chunk in self.chunks:
            yield chunk


async def _within(pending: asyncio.Future[bytes], wait_s: float) -> bool:
    """Whether ``pending`` is done within ``wait_s``; it is cancelled with the caller."""
    try:
        await asyncio.wait((pending,), timeout=max(0.0, wait_s))
    except asyncio.CancelledError:
        pending.cancel()
        raise
    return pending.done()


def _first_token_timeout(svc: Services, state: RequestState, call: Call, after_s: float) -> Failure:
    log.info({"request_id": state.request_id, "event": "first_token_timeout", "upstream": call.up.cfg.name,
              "after_s": round(after_s, 3),
              "reason": "no visible output within timeouts.first_token_s"})  # fmt: skip
    return _transport(svc, TransportError.FIRST_TOKEN_TIMEOUT)


def _too_large(state: RequestState, call: Call) -> Failure:
    """An answer over SUCCESS_BODY_LIMIT. Not an outage (the upstream answered) and not worth
    repeating: the same request would bring the same answer, read again only to be refused, so
    it is final, and ``unknown`` keeps it off the circuit and the client's retries."""
    log.warning({"request_id": state.request_id, "event": "answer_too_large", "upstream": call.up.cfg.name,
                 "limit_bytes": SUCCESS_BODY_LIMIT})  # fmt: skip
    c = Classification.of(ErrorType.UNKNOWN, provider_code="response_too_large", evidence="body:too_large")
    message = "the upstream's answer is larger than the gateway relays whole (256 MiB)"
    return gateway_failure(502, c, message, "response_too_large", final=True)


def too_large_event() -> Failure:
    """A stream event past MAX_EVENT_BYTES before anything was shown: ``unknown`` and final,
    for the reasons an answer past its bound is (``_too_large``)."""
    c = Classification.of(ErrorType.UNKNOWN, provider_code="event_too_large", evidence="event:too_large")
    message = "the upstream sent a stream event larger than the gateway relays (64 MiB)"
    return gateway_failure(502, c, message, "event_too_large", final=True)


def _stream_error(svc: Services, payload: dict[str, Any]) -> Failure:
    # No byte has reached the client, so the error is answered as an ordinary one, made by
    # the gateway in the client's own API's envelope (the event is no HTTP body to pass on):
    # the provider's message and code, the classification, nothing internal.
    status = error_status(payload)
    c = classify_stream_event(payload, now_s=svc.wall())
    message, code = event_error_fields(payload)
    code = code or c.provider_code or c.type.value
    return gateway_failure(status or EVENT_STATUS[c.type], c, message, code)


def _facts(call: Call, request: UpstreamRequest, state: RequestState) -> RequestFacts:
    # The request's own size is evidence when the body only says "too large" (#22), and the
    # host says whose documentation applies to borrowed wording (#36); with the budget it asks,
    # what a rate limit's windows must refill before it fits (retry_after.refill_wait_s).
    return RequestFacts(round(len(request.body) / BYTES_PER_TOKEN), call.up.cfg.context_window,
                        urlsplit(call.up.cfg.base_url).hostname, state.pool_need[1] or None)  # fmt: skip


def _collected(svc: Services, call: Call, body: bytes) -> bytes | Failure:
    """A whole stream sent to a request for one answer (a server that streams whatever was
    asked), as the upstream API's buffered answer (``apis/collect.py``), translated next like
    any. Its error event is an error, and a stream without its end a cut, as for a stream
    that fails before anything of it is shown."""
    got = collect(call.dialect, body)
    if got.error is not None:
        return _stream_error(svc, got.error)
    if got.answer is None:
        return _transport(svc, TransportError.STREAM_BROKEN)
    return jsonbody.dumps(got.answer)


def _upstream_error(
    svc: Services, status: int, headers: Mapping[str, str], body: bytes, facts: RequestFacts,
    answered: int | None = None, *, operator: bool,
) -> Failure:
    """``answered``: the success status an error document came under (``policy/answer_error.py``);
    ``status`` is then the one the document names."""
    c = classify(status, _lower(headers), body, now_s=svc.wall(), request=facts)
    if answered is not None:
        c = replace(c, evidence=f"{c.evidence} body:error_in_{answered}")
    # Every SDK retries a 429; a budget error answered as 402 is not retried by anyone.
    answer = 402 if c.type is ErrorType.BUDGET else status
    relayed = response_headers(headers, operator)
    if c.type is ErrorType.CONTEXT_OVERFLOW and (status == 429 or status >= 500):
        answer = 400  # a request too big for the window fails the same way every time
        # ... and no wait is its remedy: Azure's "retry-after: 86400" to a request over its
        # tokens per minute stays with the 429 it came on.
        relayed = [(k, v) for k, v in relayed if k.lower() not in ("retry-after", "retry-after-ms")]
    return Failure(c, answer, relayed, body, upstream_status=answered or status)


def without_own_key(failure: Failure, keys: tuple[str, ...]) -> None:
    """The operator's secrets (its key, credentials among the upstream's configured headers), as
    a provider's error may quote them, out of everything about ``failure`` a client can be shown
    or the loop breaker keeps: the body relayed (and carried to a translated client's
    ``x_llm_upstream``), the provider's message a translation renders, the message of an error
    the gateway made from an event (``gateway/redaction.py``)."""
    for key in keys:
        failure.body = redact_bytes(failure.body, key)
        c, own = failure.classification, failure.own
        if c.message is not None and (message := redact_text(c.message, key)) != c.message:
            failure.classification = replace(c, message=message)
        if own is not None and (message := redact_text(own.message, key)) != own.message:
            failure.own = replace(own, message=message)


def operator_key_refused(up: UpstreamRuntime, failure: Failure) -> Failure:
    """The provider refused the credential the gateway sent (the operator's ``api_key``, or none
    at all where clients hold gateway keys): the client's own key is fine and only the operator
    can act. A 401 or 403 would tell the client's SDK and agent that theirs is bad (Claude Code
    asks the user to log in again), so it is a 502 made by the gateway; the
    provider's body stays out, since it quotes part of the refused key ("Incorrect API key
    provided: sk-abc***xyz"). The class stays ``auth`` (not retried; a pool sits the key out)."""
    was = failure.classification
    c = Classification(ErrorType.AUTH, False, None, None, was.provider_code, None, was.evidence,
                       one_model=was.one_model)
    status = failure.upstream_status or failure.status
    if 200 <= status < 300:  # an error document under a 2xx: the status it names
        status = failure.status
    # Worded by what the provider said: a place it does not serve (Gemini's "User location is not
    # supported for the API use.") or an organization to verify (OpenAI's "Your organization must
    # be verified to stream this model"), both in tests/corpus/wild.json, are not a key to fix.
    said = was.message or failure.body[:SCAN_LIMIT].decode("utf-8", "replace")
    where = f"upstream '{up.cfg.name}' ({status})"
    if words.REGION.search(said):
        out = gateway_failure(
            502, c, f"the provider does not serve the place the gateway calls {where} from, not your "
            "key: the gateway's operator must call it from a region the provider serves",
            "upstream_auth",
        )  # fmt: skip
    elif words.UNVERIFIED.search(said):
        out = gateway_failure(
            502, c, f"the provider wants the organization behind the gateway's own credentials for "
            f"{where} verified for this model, not yours: the gateway's operator must verify it",
            "upstream_auth",
        )  # fmt: skip
    else:
        out = gateway_failure(
            502, c, f"the provider refused the gateway's own credentials for {where}, not yours: "
            "the gateway's operator must fix its api_key",
            "upstream_auth",
        )  # fmt: skip
    out.upstream_status = failure.upstream_status
    out.headers.extend((k, v) for k, v in failure.headers if k.lower() == "x-upstream-request-id")
    return out


def own_key_ending(up: UpstreamRuntime, end: Ending) -> Ending:
    """An error event that ended a stream already relayed, under the rules an error before it
    is under (``without_own_key``, ``operator_key_refused``): the operator's key never
    quoted, and a refusal of the gateway's own credential not blamed on the client's."""
    cfg = up.cfg
    if end.classification.type is ErrorType.AUTH and not cfg.forwards_client_credentials:
        status = end.status or EVENT_STATUS[ErrorType.AUTH]
        said = operator_key_refused(up, Failure(end.classification, status, [], b""))
        assert said.own is not None
        return replace(end, message=said.own.message, code=said.own.code, status=said.status)
    message = end.message
    for key in up.secrets:
        message = redact_text(message, key)
    return end if message == end.message else replace(end, message=message)


def _transport(svc: Services, kind: TransportError, evidence: str | None = None) -> Failure:
    c = classify(None, {}, b"", now_s=svc.wall(), transport_error=kind)
    if evidence is not None:  # what the transport knows beyond its kind (a proxy's refusal)
        c = replace(c, evidence=f"{c.evidence} {evidence}")
    return transport_failure(kind, c)


def _unavailable(svc: Services, retry_after_s: float, code: str) -> Classification:
    return Classification(
        ErrorType.PROVIDER_UNAVAILABLE,
        retryable=True,
        retry_after_s=retry_after_s,
        reset_at_ms=reset_at_ms(retry_after_s, svc.wall()),
        provider_code=code,
    )


def _foreign(call: Call, failure: Failure, sent_bytes: int) -> ForeignError:
    """What the client's dialect needs to say an upstream's error in the client's API."""
    c = failure.classification
    limits = parse_overflow(c.message) if c.type is ErrorType.CONTEXT_OVERFLOW else None
    prompt = limits.prompt if limits is not None and limits.prompt else round(sent_bytes / BYTES_PER_TOKEN)
    limit = (limits.limit if limits is not None else None) or call.up.cfg.context_window
    return ForeignError(
        status=failure.status, classification=c, upstream_api=call.dialect.api,
        upstream_status=failure.upstream_status or failure.status, upstream_body=failure.body,
        prompt_tokens=prompt, limit_tokens=limit,
        output_tokens=failure.sent_output,
    )  # fmt: skip


def sent_doc(body: bytes) -> dict[str, Any]:
    """A request body as sent upstream, read back (only after a refusal: its ``max_tokens`` is
    the one the provider counted, which a cap may have lowered from the client's)."""
    try:
        doc = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}
