"""How a request reaches one upstream of its chain when it cannot go byte for byte: in the
upstream's own API (translated) or under the upstream's name for the model. ``forward.py``
builds the plain call itself (the hot path) and asks here for the others."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from gateway import jsonbody
from gateway.apis.base import Dialect, Inbound
from gateway.apis.messages import binding as messages_binding
from gateway.apis.messages import effort as messages_effort
from gateway.pipeline.attempt import Call, ReadMode
from gateway.pipeline.outcome import Failure, RequestState, bad_request
from gateway.policy.foreign_reasoning import loop_unthought
from gateway.routing import UnsafePath, outbound_headers
from gateway.routing.headers import with_added
from gateway.services import UpstreamRuntime
from gateway.translate import Leg, Translation, held_context
from gateway.translate.base import Refusal, Target
from gateway.translate.depth import request_in
from gateway.translate.tool_cap import host_max


@dataclasses.dataclass(slots=True)
class Sending:
    """How this request is sent, whichever upstream it goes to. (Made for every translated
    request: a slotted dataclass costs ~2,400 instructions to make on Python 3.11, a
    NamedTuple ~3,400, issue #38.)"""

    mode: ReadMode
    strip_usage: bool
    track: bool
    query_string: str
    query_key: str | None = None  # the credential a Gemini client sent as ``?key=``


def leg_call(
    state: RequestState, leg: Leg, up: UpstreamRuntime, client_headers: Iterable[tuple[str, str]],
    how: Sending, inbound: Inbound, payload: dict[str, Any], client_payload: dict[str, Any],
    shape: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Call | Failure:  # fmt: skip
    """A call on an upstream that speaks another API than the client, under another model
    name, or in an API that names the model in the URL (Gemini). ``shape``: what a request
    translated into Messages goes through before it is sent (``reasoning_fix.shaped``)."""
    wire = leg.wire
    # The body is the gateway's, in the upstream's API; the client's credential moves to where
    # that API takes one when the API changes or it came as Gemini's ?key=.
    headers = outbound_headers(client_headers, up.outbound, state.request_id, wire.api,
                               translated=leg.translator is not None, query_key=how.query_key)  # fmt: skip
    lenient = inbound.lenient
    if leg.translator is None:  # the client's API, under the upstream's name for the model
        sent = leg.request(payload, inbound.model, up.cfg.stream_usage)
        assert isinstance(sent, dict)
        where = addressed(up, wire, sent, how.query_string)
        if isinstance(where, Failure):
            return where
        url, body_payload = where
        # Unchanged, the client's own bytes go (a Gemini client's body has no model or stream).
        body = inbound.body if sent is inbound.held else _dumped(body_payload, lenient)
        if isinstance(body, Failure):
            return body
        return Call(up, "POST", url, headers, how.mode, wire, how.strip_usage, how.track,
                    body=body, wire_model=_model(sent), rewritten=sent is not inbound.held)  # fmt: skip
    state.translated = leg.label or f"{leg.client.api}->{wire.api}"
    translated = leg.request(client_payload, inbound.model, up.cfg.stream_usage)
    if isinstance(translated, Refusal):
        return refused_here(state, translated)
    if shape is not None and wire.api == "messages":
        translated = shape(translated)
    dropped = leg.translator.dropped(client_payload)
    if dropped:  # told as the parameters a model refused are (x-llm-params-dropped)
        noted = state.params_dropped or []
        state.params_dropped = noted + [label for label in dropped if label not in noted]
    # The client's query string belongs to its own API (Claude Code's ?beta=true): not sent on.
    where = addressed(up, wire, translated, "")
    if isinstance(where, Failure):
        return where
    url, body_payload = where
    size = inbound.size if client_payload is inbound.held else None  # unchanged: its own bytes
    ctx = held_context(leg.translator, inbound.model or "", client_payload, state.request_id, size)
    ctx.upstream_model = wire_model = _model(translated)
    translation = Translation(leg.translator, ctx)
    body = _dumped(body_payload, lenient)
    if isinstance(body, Failure):
        return body
    sent_headers = _with_betas(headers, wire, translated) if wire.api == "messages" else headers
    # Every field by position, up to ``rewritten``: keywords make a class call build a dict of
    # them (~2,000 instructions on 3.11, issue #38).
    return Call(up, "POST", url, sent_headers, how.mode, wire, False, how.track, translation, body,
                wire_model, True)  # fmt: skip


def refused_here(state: RequestState, refusal: Refusal) -> Failure:
    """A request its translation refuses (a field the upstream's API has no place for): no
    provider saw it, so before any attempt it is the gateway's own refusal (``upstream="none"``,
    which no upstream alert counts: docs/operations/alerts.md), not a 400 under the name of an
    upstream that was never asked. After one (a fallback's leg), the request reached that one."""
    if state.attempts == 0:
        state.upstream = "none"
    return bad_request(refusal.message, refusal.code)


def addressed(
    up: UpstreamRuntime, wire: Dialect, payload: dict[str, Any], query: str
) -> tuple[str, dict[str, Any]] | Failure:
    """The URL ``payload`` goes to on ``up`` in ``wire``'s API, and the body it is sent."""
    address = wire.address(payload)
    if address is None:
        return up.url_for(wire.path, query), payload
    try:
        return up.url_for(address.path, address.query), address.payload
    except UnsafePath:  # a model name with a slash: no path segment can hold it
        return bad_request(f"the model name {str(payload.get('model'))[:128]!r} cannot be put in a "
                           f"{wire.api} URL", "invalid_model")  # fmt: skip


def resent(call: Call, payload: dict[str, Any]) -> tuple[Call, bytes] | Failure:
    """A changed client payload (compressed, asked without streaming) as this call sends it,
    and the call at the URL that payload goes to (Gemini's method follows the stream flag)."""
    if call.translation is None:
        model = call.wire_model
        sent = payload if model is None else {**payload, "model": model}
        if _went_off(call, sent):
            sent = loop_unthought(sent) or sent
    else:
        translated = request_in(call.translation.translator, payload, target_of(call))
        if isinstance(translated, Refusal):
            return bad_request(translated.message, translated.code)
        sent = translated
        if _went_off(call, sent):
            sent = loop_unthought(sent) or sent
        betas = _with_betas(call.headers, call.dialect, sent)
        if betas is not call.headers:
            call = dataclasses.replace(call, headers=betas)
    address = call.dialect.address(sent)
    if address is None:
        body = _dumped(sent, lenient=False)
        return body if isinstance(body, Failure) else (call, body)
    where = addressed(call.up, call.dialect, sent, "")
    if isinstance(where, Failure):
        return where
    url, body_payload = where
    body = _dumped(body_payload, lenient=False)
    if isinstance(body, Failure):
        return body
    return dataclasses.replace(call, url=url, wire_model=_model(sent), rewritten=True), body


def _went_off(call: Call, sent: Mapping[str, Any]) -> bool:
    """Whether ``call`` went to a Messages upstream without the thinking ``sent`` asks for: a
    loop ``reasoning_fix.shaped`` asked without thinking, which a compressed or unstreamed
    request of it goes on without too. (A top-level ``thinking`` is an object; a block's is text.)"""
    if call.dialect.api != "messages" or "thinking" not in sent or not call.body:
        return False
    return not any(mark in call.body for mark in (b'"thinking":{', b'"thinking": {'))


def _with_betas(headers: Mapping[str, str], wire: Dialect, payload: Mapping[str, Any]) -> Mapping[str, str]:
    """``headers`` with the betas a translated Messages body's fields need (``block_binding``:
    ``apis/messages/binding.py``; Opus 4.5's effort: ``apis/messages/effort.py``) joined to the
    betas already there; the same object when none is needed."""
    if wire.api != "messages":
        return headers
    needed = (*messages_binding.betas(payload), *messages_effort.betas(payload))
    return with_added(headers, needed) if needed else headers


def _dumped(payload: Mapping[str, Any], lenient: bool) -> bytes | Failure:
    """``payload`` as the bytes to send. A document nested between the depth orjson writes
    (255) and the one it reads (1024) is written by json, whose recursion gives out at about
    990 levels: refused as admission refuses deeper ones, where it was a 500."""
    try:
        return jsonbody.dumps(payload, lenient=lenient)
    except RecursionError:
        return bad_request("the request body is nested too deeply", "invalid_json")


def target_of(call: Call) -> Target:
    cfg = call.up.cfg
    return Target(call.wire_model or "", cfg.stream_usage, context_window=cfg.context_window,
                  tools_max=host_max(cfg.base_url))


def _model(payload: dict[str, Any]) -> str | None:
    model = payload.get("model")
    return model if isinstance(model, str) else None
