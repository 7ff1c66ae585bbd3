"""What one request carries through the pipeline, and what an upstream exchange yields.

``RequestState`` is written by the stages and read by ``stamp`` (headers) and
``observe`` (metrics, the log line). ``Success`` / ``Failure`` are the results of
an upstream exchange: failures are data, never exceptions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from aiohttp import web

from gateway.apis import OPENAI_CHAT
from gateway.apis.base import Dialect, ForeignError, StreamReader
from gateway.errors import Classification, ErrorType, TransportError
from gateway.keys.ledger import Reservation
from gateway.keys.registry import KeySpec
from gateway.sse import EventSplitter
from gateway.translate.base import StreamTranslator
from gateway.upstream import UpstreamResponse

if TYPE_CHECKING:
    from gateway.pipeline.pool import PoolTurn
    from gateway.policy.breaker import Admission
    from gateway.state.pools import PoolSent
    from gateway.state.shared import SharedCircuit


class Leg(NamedTuple):
    """One upstream stream of an answer, as counted when it ended (``relay._count_usage``), or an
    attempt abandoned after the provider took it (``attempt._abandoned``): what it used, the
    model it was sent (what it is priced at: a continuation or a fallback may be another
    upstream's, another model's), whether its completion is the gateway's estimate, and whether
    its usage went unread (left before its first words: its prompt is estimated)."""

    usage: dict[str, int]
    model: str | None
    estimated: bool
    unread: bool = False


@dataclass(init=False)
class RequestState:
    """Every field but the mutable ones reads its class-level default until a stage writes it:
    made per request, the generated ``__init__`` stored all 39 (1.04 µs warm, 2.3 in place)."""

    request_id: str
    started: float  # monotonic
    upstream: str = "none"
    model: str | None = None
    # The model the upstream last sent to was named (its ``model_map``'s, a translation's): what
    # the answer is priced at (accounting.settle). None until a send.
    sent_model: str | None = None
    stream: bool = False
    attempts: int = 0
    retries: int = 0
    fallbacks: int = 0  # upstreams left behind for the next one in the chain
    pool: str | None = None  # the pool whose deployment answered, if any
    picked: str | None = None  # why that deployment: affinity, the strategy's name, moved, ...
    holding: str | None = None  # the pool deployment this request counts as in flight on
    # What the pool's records of this request are kept under, when not its model: a request
    # relayed across a pool (routing/pools.relayed_scope). Its circuits stay its model's.
    pool_scope: str | None = None
    # The tokens a pool deployment must have left for this request, input and output (its
    # bytes / 3.5 and the max_tokens it asks): a key predicted to have fewer sits it out.
    pool_need: tuple[int, int] = (0, 0)
    # Its conversation's first turn (routing/affinity.opens_conversation): a pool claims no
    # shared home for it, its next turn does (pipeline/pool.py).
    opens_conversation: bool = False
    # The pool deployment holding the stored object this request continues (a Responses turn
    # chained by previous_response_id): it goes there only (pipeline/pool.py's stored_route).
    stored_on: str | None = None
    # The stored object this request continues when no pool deployment is known to hold it (made
    # before the gateway ran, by a direct call, or forgotten): a pool asks its deployments in turn
    # while each answers that it does not (pipeline/pool.py's send_pool).
    stored_search: str | None = None
    # The pool's answer to make of its last deployment's refusal, should a fix sent again there
    # (pipeline/forward.py) be answered: its conversation's home follows (pool.answered_fixed).
    pool_turn: PoolTurn | None = None
    # Its last call to a pool deployment, until the answer's usage corrects that deployment's
    # count by it (relay.py, once; None: no such call, or corrected).
    pool_sent: PoolSent | None = None
    keeps_answer: bool = False  # a Responses request whose answer the provider stores
    key: KeySpec | None = None  # the gateway key the caller presented (its name, its rules)
    reservation: Reservation | None = None  # what the key's limits and budget hold for it
    # More held on its budgets for the attempts left once the provider took them (``legs`` marked
    # unread), each charged its prompt besides the answer (accounting.hold_abandoned): settled
    # with ``reservation``. ``legs_held``: how many of those legs they cover.
    holds: tuple[Reservation, ...] = ()
    legs_held: int = 0
    # The refusal of its key's budgets that ended it before another attempt (hold_abandoned):
    # the key's answer, not the upstream's, which no sibling or wait changes.
    key_refusal: Failure | None = None
    cost_usd: float | None = None  # what the provider's usage cost, at the model's price
    priced: bool = True  # False: no price is known for the model (the cost is not zero, unknown)
    # The parts the key paid, each {model, usage as charged, cost_usd}, where it paid more than
    # one (a continued or fallback answer): the log line's ``legs`` (accounting.settle).
    cost_legs: tuple[dict[str, object], ...] | None = None
    session: str | None = None  # the agent's session, for attribution (never a prompt)
    from_memory: int = 0  # answered by the loop breaker: the repeats it has seen, else 0
    compressed: bool = False
    translated: str | None = None  # "messages->chat": the client's API and the upstream's
    tool_outputs_capped: int = 0  # by the opt-in proactive cap, before the first send
    tool_outputs: dict[str, Any] | None = None  # what the per-tool policy did, per stage (counts)
    compression: dict[str, Any] | None = None
    # The output budget the answer was asked with when the gateway lowered the client's: the
    # limit, what was asked and why (``pipeline/output_cap.py``).
    output_capped: dict[str, Any] | None = None
    # Parameters left out (or renamed, ``max_tokens->max_completion_tokens``) because the model
    # refuses them (``pipeline/param_fix.py``).
    params_dropped: list[str] | None = None
    # The labels of the learned fixes applied to what was sent (``ParamFix.label``): a refusal
    # whose fix is among them came back with the fix applied, and is not rescued again. Not
    # ``params_dropped``, which says what a fix did to this body (``top_k=64->40``).
    params_fixed: list[str] | None = None
    # Of those, the ones left out after a refusal, each at the cost of one more call (the limit
    # counts these: a translation's own drops, a Responses request's hosted tools, cost none).
    params_rescued: int = 0
    # Signed reasoning left out because the upstream refused it as not its own
    # (``pipeline/reasoning_fix.py``): ``thinking``, ``thinking,thinking_off``, ``encrypted_content``...
    # or, before any refusal, what that deployment refused before and ``thinking_off``.
    reasoning_dropped: str | None = None
    reasoning_rescued: bool = False  # sent once more after such a refusal (never twice)
    classification: Classification | None = None  # the final error, if the answer is one
    # The gateway settled retrying for this request (it retried, or declined because of the
    # budget, deadline or an open circuit): the client's SDK must not retry on top.
    retries_settled: bool = False
    first_byte_at: float | None = None
    # The status of a streamed head once it reached the client: what the client got, whatever
    # ends the request afterwards (the client leaving is then ended_by, not a 499).
    head_status: int | None = None
    # The upstream whose answer's body is still being read (a stream, a pass-through): its
    # attempt is counted when the body ends, by how it ended (attempt.leg_over).
    reading_from: str | None = None
    # The circuit verdict that body owes (attempt.settle_circuit): its circuit, the request's
    # admission and model. A stream cut mid-answer is a failed request, not the success its
    # head looked like, and a half-open probe proves the upstream only once its answer ended.
    circuit_due: tuple[SharedCircuit, Admission, str | None] | None = None
    upstream_head_s: float | None = None  # the last attempt's own time to its response head
    method: str = ""
    path: str = ""
    user_agent: str | None = None
    stream_error: ErrorType | None = None  # a committed stream that ended in an error event
    continued_after: str | None = None  # why a stream broke before a continuation completed it
    ended_by: str | None = None  # why a committed response ended early (reset, idle_timeout, shutdown…)
    # The client has the stream's end marker (chat's finish_reason, Gemini's finishReason: what
    # may still follow is a usage chunk and [DONE]): a failure after it ends nothing early.
    stream_complete: bool = False
    # usage["completion"] is the gateway's estimate from the text shown (no count came): a key
    # pays no more than the output the request asked for (accounting.settle).
    completion_estimated: bool = False
    after_end: str | None = None  # what broke the upstream's stream after its end marker, for the log
    usage: dict[str, int] = field(default_factory=dict)
    # The streams relayed and the attempts abandoned once the provider had taken them (the
    # client or a first-byte timeout left: after its 2xx head, or the whole request written),
    # each with its own part of ``usage``: they may be different models, priced each at its own
    # (accounting.settle). Kept only for a key that pays. A tuple: most have one or none.
    legs: tuple[Leg, ...] = ()
    # A 2xx answer relayed as it is whose usage could not be read (a stream without a count, a
    # body cut, or past what the relay keeps of it): the provider read its prompt all the same.
    answered_uncounted: bool = False
    # Attempts that came back as an empty stream (and the probe's cut of the connection the
    # server closed after one), and the retries they caused, by upstream name: what they were is
    # known only once the probe is answered (an overflow, on llama-cpp-python), so they are
    # counted when the request ends, under `empty_was` (see observe, RetryPlan.unexplained).
    empty_attempts: list[str] = field(default_factory=list)
    empty_retries: list[str] = field(default_factory=list)
    empty_was: ErrorType = ErrorType.PROVIDER_UNAVAILABLE
    dialect: Dialect = OPENAI_CHAT
    # What a stream is written through: another framing of the same events where the client
    # asked for one (a Gemini JSON-array stream, gateway/apis/gemini/array.py), or frames of
    # another protocol (the Responses API's WebSocket mode, gateway/pipeline/websocket.py).
    stream_response: Callable[..., web.StreamResponse] = web.StreamResponse
    over_websocket: bool = False  # a turn of the Responses API's WebSocket mode
    trace: Any = None  # the request's spans when tracing is on (gateway/tracing/otel.py)

    @property
    def pool_model(self) -> str | None:
        """What a pool's records of this request are kept under: its ``pool_scope``, else its model."""
        return self.model if self.pool_scope is None else self.pool_scope

    def __init__(self, request_id: str, started: float) -> None:
        self.request_id = request_id
        self.started = started
        self.usage = {}
        self.empty_attempts = []
        self.empty_retries = []


STATE = web.RequestKey("llm_state", RequestState)
# How a request that is no HTTP exchange of its own (a turn of the Responses API's WebSocket
# mode, gateway/pipeline/websocket.py) is sent an answer written at once: ``observed``'s
# ``at_once``.
AtOnce = Callable[[web.Request, web.StreamResponse], Awaitable[None]]


@dataclass(slots=True)
class Success:
    status: int
    headers: list[tuple[str, str]]
    response: UpstreamResponse | None = None  # still to be read (streams, raw passthrough)
    chunks: AsyncIterator[bytes] | None = None  # the rest of ``response``'s body
    body: bytes = b""  # the whole body when it was read already
    held: list[bytes] = field(default_factory=list)  # stream events read while peeking
    # The whole events that came with the last of ``held``, not yet classified, and the
    # splitter that split them (it holds the incomplete event after them): the relay goes on
    # from there rather than splitting those bytes again (issue #38).
    rest: Sequence[bytes] = ()
    splitter: EventSplitter | None = None
    sse: bool = False
    reader: StreamReader | None = None  # the dialect's reader that peeked at the stream
    complete: bool = False  # the peeked events already include the stream's end marker
    translator: StreamTranslator | None = None  # the upstream speaks another API than the client
    usage: dict[str, int] | None = None  # ``body``'s usage when already known (a translated answer)


@dataclass(frozen=True, slots=True)
class OwnError:
    """An error the gateway makes itself; the dialect renders it in its own envelope."""

    message: str
    code: str


@dataclass(slots=True)
class Failure:
    classification: Classification
    status: int  # what the client is answered with
    headers: list[tuple[str, str]]
    body: bytes  # the upstream's body, passed through untouched; empty for our own errors
    final: bool = False  # never retry (e.g. the circuit is open: nothing was sent)
    own: OwnError | None = None
    foreign: ForeignError | None = None  # an upstream error on a translated request
    upstream_status: int | None = None  # what the upstream answered, before any remapping
    # The output budget of the very body refused, on a per-minute overflow (its "Requested" is
    # prompt plus this): a fixed resend sends another body on the same call than ``Call.body``.
    sent_output: int | None = None


Outcome = Success | Failure


def failure_of(outcome: Outcome) -> Classification | None:
    if isinstance(outcome, Failure) and not outcome.final:
        return outcome.classification
    return None


def gateway_failure(
    status: int, c: Classification, message: str, code: str, *, final: bool = False
) -> Failure:
    """An error the gateway makes itself; its body is rendered by the request's dialect."""
    return Failure(
        classification=c,
        status=status,
        headers=[("Content-Type", "application/json")],
        body=b"",
        final=final,
        own=OwnError(message, code),
    )


def bad_request(message: str, code: str = "invalid_request", status: int = 400) -> Failure:
    return gateway_failure(status, Classification.of(ErrorType.UNKNOWN), message, code, final=True)


_TRANSPORT_MESSAGES = {
    TransportError.CONNECT: (502, "upstream_unreachable", "could not connect to the upstream"),
    TransportError.RESET: (502, "upstream_reset", "the upstream closed the connection before responding"),
    TransportError.STREAM_BROKEN: (502, "upstream_reset", "the upstream connection broke mid-response"),
    TransportError.CONNECT_TIMEOUT: (504, "upstream_timeout", "could not connect to the upstream in time"),
    TransportError.FIRST_BYTE_TIMEOUT: (504, "upstream_timeout", "the upstream did not respond in time"),
    TransportError.FIRST_TOKEN_TIMEOUT: (
        504, "upstream_timeout", "the upstream sent no output within timeouts.first_token_s",
    ),
    TransportError.IDLE_TIMEOUT: (504, "upstream_timeout", "the upstream stopped sending data"),
}


def transport_failure(kind: TransportError, c: Classification) -> Failure:
    status, code, message = _TRANSPORT_MESSAGES[kind]
    return gateway_failure(status, c, message, code)
