"""What a translator between two wire APIs is: pure functions of data, one direction each.

A translator carries a request from the client's API (``client``) to an upstream's API
(``upstream``) and the upstream's answer back, buffered or streamed event by event. It never
does I/O, never looks at headers and never renders errors: an upstream error on a translated
request is rendered by the client's own dialect from its classification (``apis/*/wire.py``),
the same way whatever API the upstream speaks.

Names of the APIs are the values of ``upstreams[].apis`` in the config: ``chat``,
``messages``, ``responses``. Chat completions is the hub: an API that converts to and from
chat reaches every other one through it (``translate/__init__.py`` composes two
translators), so a fourth API is one package under ``apis/`` plus its converter to chat.

What cannot be carried is either dropped by a documented rule (``cache_control`` on a chat
upstream) or refused with a ``Refusal``, which the client gets as a 400 in its own envelope,
never sent upstream: a request is never silently garbled.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from gateway.apis.base import Ending
from gateway.sse import encode_data


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request this direction cannot carry; answered 400 in the client's API."""

    message: str
    code: str = "untranslatable_request"


class Target(NamedTuple):
    """How the upstream is to be asked. (A NamedTuple: made for every translated request,
    and a frozen dataclass costs ~3x as much to make, issue #38.)"""

    model: str  # the upstream's own model name (after the route's model_map)
    stream_usage: bool = True  # a chat upstream may be asked for its usage chunk
    # The API a composed translation carries the request on to from the hub ("messages" for
    # Gemini → chat → Messages), "" when the request is sent as this translator makes it: a
    # field or part the next translator carries may be written though a chat server takes none.
    onward: str = ""
    # The upstream's configured ``context_window``: where the model's own is not known from its
    # name, what Anthropic's cap on images in a request is read from (``image_limits``).
    context_window: int | None = None
    # The most tools the upstream takes in a chat completions request, where its host is known
    # to cap them (``tool_cap.py``); None: no cap known.
    tools_max: int | None = None


@dataclass(slots=True)
class Context:
    """What answer translation needs to know about the request (one per request)."""

    requested_model: str  # what the client asked for: echoed where the client's API echoes it
    request: Mapping[str, Any]  # the client's payload as the client sent it
    request_id: str  # for ids the gateway has to make up (``msg_…``, ``resp_…``)
    # The size of ``request`` as the client sent it, when known: an estimate of the prompt
    # then needs no re-encoding of the whole request (~100 µs for Claude Code's first one).
    request_bytes: int | None = None
    # Set by the stream translator while it runs, for the log line and usage accounting.
    notes: dict[str, Any] = field(default_factory=dict)
    # The translator's estimate of the prompt's tokens, made before the send (``held``):
    # ``request`` then no longer holds the conversation it was counted from. None: count
    # from ``request`` when needed.
    input_tokens: int | None = None
    # What a composed translator's second half reads of the middle (chat) request, made
    # before the send; None: translated again from ``request`` when needed.
    inner: Context | None = None
    # The model the upstream was asked for (its request's, after the route's model_map): what
    # Claude's thinking sealed for a client names as its maker (sealed_thinking.py). None: unknown.
    upstream_model: str | None = None


def held(ctx: Context, unread: frozenset[str], input_tokens: int | None = None) -> Context:
    """``ctx`` without the top-level fields of the client's request that answer translation
    never reads (the conversation, its tools): they are most of a request's memory, and the
    context lives as long as the request does (a stream held open for minutes)."""
    request = {k: v for k, v in ctx.request.items() if k not in unread}
    return Context(ctx.requested_model, request, ctx.request_id, ctx.request_bytes, ctx.notes,
                   input_tokens, ctx.inner, ctx.upstream_model)  # fmt: skip


def input_tokens(ctx: Context, estimate: Callable[[Mapping[str, Any], int | None], int]) -> int:
    """The prompt estimate: made before the send where the context was held, else now."""
    known = ctx.input_tokens
    return known if known is not None else estimate(ctx.request, ctx.request_bytes)


# What a stream's reader already decoded, by raw event (``ParsedEvents.take``): the
# translator after it takes a document from there before decoding the event itself.
Known = Callable[[bytes], "dict[str, Any] | None"]


class StreamTranslator(Protocol):
    """One upstream stream into one client stream; stateful, one instance per stream.

    ``event`` gets every raw upstream SSE event (separator included, as ``sse.EventSplitter``
    yields it) in order, including the contentless leading ones, and returns the client's
    events for it (possibly none, possibly several), each a complete SSE event. Nothing is
    buffered beyond what the client's grammar forces (a tool call's arguments may need its
    id first, say).
    """

    def event(self, raw: bytes) -> bytes: ...

    def close(self) -> bytes:
        """The upstream stream completed: the client events its grammar still needs to be
        complete (``message_stop``, ``response.completed``…), if not already sent. Called once."""
        ...

    def broken(self, ending: Ending) -> bytes:
        """The one typed error event that ends a broken stream in the client's grammar,
        consistent with what was already emitted (Responses' ``sequence_number``, say).
        Never a completion marker."""
        ...


class Translator(Protocol):
    client: str  # the API the client speaks
    upstream: str  # the API the upstream speaks

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        """The client's request in the upstream's API (``model`` set to ``target.model``)."""
        ...

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        """What of the client's request ``request`` leaves out by a stated rule that the client
        is told of (``x-llm-params-dropped``): Responses' hosted tools on a chat upstream."""
        ...

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        """A buffered upstream success body in the client's API."""
        ...

    def stream(self, ctx: Context, known: Known | None = None) -> StreamTranslator: ...

    def held(self, ctx: Context) -> Context:
        """What answers need of ``ctx`` while the upstream works: its request without the
        fields they never read, what they would count from those counted now (``held``)."""
        ...


def option_kind(option: Any) -> str:
    """An option's ``type``, to name it in a refusal without quoting the request (a schema or
    a tool's description is the client's text)."""
    kind = option.get("type") if isinstance(option, dict) else option
    return repr(kind[:40]) if isinstance(kind, str) else "(none)"


def chat_data(doc: Mapping[str, Any]) -> bytes:
    """One chat-completions stream event (``data: …``) as the chat streams translated from
    every other API write it: orjson, or json for what only json writes (a huge int)."""
    try:
        return b"data: " + orjson.dumps(doc) + b"\n\n"
    except TypeError:  # orjson.JSONEncodeError
        return encode_data(doc)


# What the gateway writes on the end of a stream it continued after a break (the final chat
# chunk, ``message_delta``, ``response.completed``: docs/streaming.md). The splice marks the
# upstream's end; each stream translator carries the mark onto the client's.
CONTINUED = "x_llm_continued"


def continued(doc: Mapping[str, Any]) -> bool:
    """Whether an upstream event (or the response object it carries) bears the mark."""
    return doc.get(CONTINUED) is True


def wants_usage(ctx: Context) -> bool:
    """Whether a chat stream's client asked for its usage chunk (``stream_options``)."""
    options = ctx.request.get("stream_options")
    return isinstance(options, Mapping) and options.get("include_usage") is True


UNPARSED = "unparsed_arguments"  # the arguments of a call that are no JSON object: their text


def call_arguments(arguments: str) -> dict[str, Any]:
    """A past call's arguments as the object Anthropic's ``input`` and Gemini's ``args`` need,
    from chat's ``arguments`` string. Those that are no JSON object (a call cut short by
    max_tokens, a model's malformed output: ``{"command": "echo hi", ``) are the history as the
    client's API keeps it, an opaque string, which an agent replays every turn; refused, its
    session could never go on (openai-agents-python #2061, livekit/agents #6308). They go as
    their text in an object: neither provider holds a past call's arguments to its tool's
    schema (the empty object livekit/agents #6308 asked for there, fixed by #6321, is no more
    valid for a tool with required parameters). The text and not ``{}``: an empty call would
    tell the model it called the tool with nothing, which the tool's answer ("the arguments
    are not valid JSON") then contradicts; its own words show it where it went wrong, so that
    it writes the call whole."""
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):  # ("[" * 3000: nested past json's recursion, no object)
        args = None
    return args if isinstance(args, dict) else {UNPARSED: arguments}
