"""Translation between wire APIs: which translator carries a client's API to an upstream.

Each direction is one package (``messages_chat``, ``responses_chat``, ``chat_messages``,
``gemini_chat``, ``chat_gemini``, ``chat_responses``); a pair without its own is composed
through chat completions, the hub (Responses → Messages is Responses → chat → Messages, Messages → Gemini is
Messages → chat → Gemini). ``leg_for`` is the one
question the pipeline asks: how does a request in this API reach that upstream?
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway import jsonbody
from gateway.apis import DIALECT_FOR_API
from gateway.apis.base import Dialect, Ending, FailedAnswer
from gateway.config import UpstreamConfig
from gateway.sse import EventSplitter
from gateway.translate.base import Context, Known, Refusal, StreamTranslator, Target, Translator
from gateway.translate.depth import request_in
from gateway.translate.tool_cap import host_max

HUB = "chat"


@dataclass(frozen=True, slots=True)
class Leg:
    """How requests in the client's API reach one upstream: directly (``translator`` None),
    or translated into ``wire``'s API. ``model`` is the upstream's name for the requested
    model when the route maps it."""

    client: Dialect
    wire: Dialect
    translator: Translator | None
    model: str | None
    # A translated leg's target and label, made once with the leg (legs are kept per upstream
    # and model): built per request they cost ~3,700 instructions of the translated path (#38).
    target: Target | None = None
    label: str = ""

    @property
    def translated(self) -> bool:
        return self.translator is not None

    def request(
        self, payload: Mapping[str, Any], requested: str | None, stream_usage: bool
    ) -> dict[str, Any] | Refusal:
        """The payload to send (the same object when nothing changes: sent byte for byte)."""
        if self.translator is not None:
            target = self.target
            if target is None:
                target = Target(self.model or requested or "", stream_usage)
            elif target.stream_usage != stream_usage:
                target = target._replace(stream_usage=stream_usage)
            return request_in(self.translator, payload, target)
        if self.model is not None and payload.get("model") != self.model:
            return {**payload, "model": self.model}
        return payload if isinstance(payload, dict) else dict(payload)


@dataclass(slots=True)
class Translation:
    """One request's translation on one upstream: its translator and what answers need."""

    translator: Translator
    ctx: Context

    def answer(self, body: bytes, wire: Dialect) -> tuple[bytes, dict[str, int]] | FailedAnswer | None:
        """A buffered 2xx body in the client's API, and its usage as the upstream (``wire``)
        counted it, read from the upstream's document before it is translated: the client's API
        may have no field for a count (chat and Responses usage has none for Anthropic's cache
        writes, folded into the prompt there), and a count it cannot hold is still paid for.
        None when the body is not a JSON object (relayed as it came: nothing to translate); the
        error it names when it says in the upstream's terms that it failed (``Dialect.failed``)."""
        try:
            doc, lenient = jsonbody.loads(body)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        failed = wire.failed(doc)
        if failed is not None:
            return failed
        usage = wire.body_usage(doc)
        out = self.translator.answer(doc, self.ctx)
        return jsonbody.dumps(out, lenient=lenient, held=False), usage

    def stream(self, known: Known | None = None) -> StreamTranslator:
        """``known``: the upstream reader's decoded events (``ParsedEvents.take``)."""
        return self.translator.stream(self.ctx, known)


# Below this many bytes a translated request is kept whole while the upstream works: what
# dropping its conversation would save is a few KB, and what answers need of it (the prompt
# estimate) is then made only if one asks (a buffered answer with its usage never does),
# instead of before every send (issue #38).
HOLD_WHOLE_BELOW = 4096


def held_context(
    translator: Translator, requested_model: str, payload: Mapping[str, Any], request_id: str,
    size: int | None,
) -> Context:
    """The context a translated call keeps for its answer while the upstream works.
    ``size``: the bytes of ``payload`` as the client sent them; None when a stage changed the
    payload, which the request then holds whole anyway (and which has no size of its own)."""
    ctx = Context(requested_model, payload, request_id, size)
    return ctx if size is None or size < HOLD_WHOLE_BELOW else translator.held(ctx)


@dataclass(frozen=True, slots=True)
class NoLeg:
    """The upstream speaks none of the APIs this request could be carried in."""

    message: str


class Composed:
    """``first`` (client → chat) then ``second`` (chat → upstream), both ways."""

    def __init__(self, first: Translator, second: Translator) -> None:
        self.first, self.second = first, second
        self.client, self.upstream = first.client, second.upstream

    def request(self, payload: Mapping[str, Any], target: Target) -> dict[str, Any] | Refusal:
        mid = self.first.request(payload, target._replace(onward=self.upstream))
        return mid if isinstance(mid, Refusal) else self.second.request(mid, target)

    def dropped(self, payload: Mapping[str, Any]) -> tuple[str, ...]:
        return self.first.dropped(payload)  # the client's fields; the chat half's are the gateway's own

    def held(self, ctx: Context) -> Context:
        outer = self.first.held(ctx)
        outer.inner = self.second.held(self._inner(ctx))
        return outer

    def _inner(self, ctx: Context) -> Context:
        if ctx.inner is not None:
            return ctx.inner
        mid = self.first.request(ctx.request, Target(ctx.requested_model, onward=self.upstream))
        return Context(ctx.requested_model, mid if isinstance(mid, dict) else {}, ctx.request_id)

    def answer(self, doc: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
        return self.first.answer(self.second.answer(doc, self._inner(ctx)), ctx)

    def stream(self, ctx: Context, known: Known | None = None) -> StreamTranslator:
        # Only the upstream's events were read by the reader: the second one meets them.
        return _ComposedStream(self.first.stream(ctx), self.second.stream(self._inner(ctx), known))


class _ComposedStream:
    def __init__(self, first: StreamTranslator, second: StreamTranslator) -> None:
        self.first, self.second = first, second
        self.splitter = EventSplitter()

    def _through_first(self, mid: bytes) -> bytes:
        return b"".join(self.first.event(raw) for raw in self.splitter.feed(mid))

    def event(self, raw: bytes) -> bytes:
        return self._through_first(self.second.event(raw))

    def close(self) -> bytes:
        return self._through_first(self.second.close()) + self.first.close()

    def broken(self, ending: Ending) -> bytes:
        return self.first.broken(ending)


class Translations:
    """The translators the gateway has, by (client API, upstream API)."""

    def __init__(self, direct: Mapping[tuple[str, str], Translator]) -> None:
        self.table: dict[tuple[str, str], Translator] = dict(direct)
        for (c, u1), first in direct.items():
            for (u2, u), second in direct.items():
                if u1 == HUB == u2 and c != u and (c, u) not in self.table:
                    self.table[c, u] = Composed(first, second)

    def leg_for(self, client: Dialect, up: UpstreamConfig, requested: str | None) -> Leg | NoLeg:
        mapped = up.upstream_model(requested) if requested and up.model_map else None
        model = mapped if mapped != requested else None
        if client.api in up.apis:
            return Leg(client, client, None, model)
        for api in up.apis:
            translator = self.table.get((client.api, api))
            if translator is not None:
                model = model or requested
                return Leg(client, DIALECT_FOR_API[api], translator, model,
                           Target(model or "", up.stream_usage, context_window=up.context_window,
                                  tools_max=host_max(up.base_url)),
                           f"{client.api}->{api}")  # fmt: skip
        spoken = ", ".join(up.apis)
        return NoLeg(
            f"upstream '{up.name}' speaks {spoken}, and the gateway has no translation from "
            f"{client.api} to {'it' if len(up.apis) == 1 else 'any of them'}; add '{client.api}' to its "
            f"'apis' if it speaks {client.api}, or route this model to an upstream that does"
        )


def default_translations() -> Translations:
    return Translations(_builtin())


def _builtin() -> dict[tuple[str, str], Translator]:
    found: dict[tuple[str, str], Translator] = {}
    for t in _modules():
        found[t.client, t.upstream] = t
    return found


def _modules() -> list[Translator]:
    # Each direction is one module; listed here so the registry is the only place that knows them.
    from gateway.translate.chat_gemini import ChatToGemini
    from gateway.translate.chat_messages import ChatToMessages
    from gateway.translate.chat_responses import ChatToResponses
    from gateway.translate.gemini_chat import GeminiToChat
    from gateway.translate.messages_chat import MessagesToChat
    from gateway.translate.responses_chat import ResponsesToChat

    return [MessagesToChat(), ResponsesToChat(), ChatToMessages(), GeminiToChat(), ChatToGemini(),
            ChatToResponses()]

