"""How a request reaches one upstream of its chain when it cannot go byte for byte: in the
upstream's own API (translated) or under the upstream's name for the model. ``forward.py``
builds the plain call itself (the hot path) and asks here for the others."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway import jsonbody
from gateway.apis.base import Inbound
from gateway.jsonbody import Lenient
from gateway.pipeline.attempt import Call, ReadMode
from gateway.pipeline.outcome import Failure, RequestState, bad_request
from gateway.routing import in_api
from gateway.services import UpstreamRuntime
from gateway.translate import Leg, Translation
from gateway.translate.base import Context, Refusal, Target


@dataclass(frozen=True, slots=True)
class Sending:
    """How this request is sent, whichever upstream it goes to."""

    mode: ReadMode
    strip_usage: bool
    track: bool
    query_string: str


def leg_call(
    state: RequestState, leg: Leg, up: UpstreamRuntime, headers: dict[str, str], how: Sending,
    inbound: Inbound, payload: dict[str, Any], client_payload: dict[str, Any],
) -> Call | Failure:  # fmt: skip
    """A call on an upstream that speaks another API than the client, or another model name."""
    wire = leg.wire
    headers = in_api(headers, wire.api)  # the body is the gateway's, in the upstream's API
    if leg.translator is None:  # the client's API, under the upstream's name for the model
        url = up.url_for(wire.path, how.query_string)
        sent = leg.request(payload, inbound.model, up.cfg.stream_usage)
        assert isinstance(sent, dict)
        body = jsonbody.dumps(sent, lenient=isinstance(inbound.payload, Lenient))
        return Call(up, "POST", url, headers, how.mode, wire, how.strip_usage, how.track,
                    body=body, wire_payload=sent)  # fmt: skip
    # The client's query string belongs to its own API (Claude Code's ?beta=true): not sent on.
    url = up.url_for(wire.path, "")
    state.translated = f"{leg.client.api}->{wire.api}"
    translated = leg.request(client_payload, inbound.model, up.cfg.stream_usage)
    if isinstance(translated, Refusal):
        return bad_request(translated.message, translated.code)
    size = len(inbound.body) if client_payload is inbound.payload else None  # unchanged: its own bytes
    ctx = Context(inbound.model or "", client_payload, state.request_id, size)
    translation = Translation(leg.translator, ctx)
    body = jsonbody.dumps(translated, lenient=isinstance(inbound.payload, Lenient))
    return Call(up, "POST", url, headers, how.mode, wire, False, how.track, translation,
                body=body, wire_payload=translated)  # fmt: skip


def body_for(call: Call, payload: dict[str, Any]) -> bytes | Failure:
    """A changed client payload (compressed, asked without streaming) as this call sends it."""
    if call.translation is None:
        model = call.wire_payload.get("model") if call.wire_payload is not None else None
        sent = payload if model is None else {**payload, "model": model}
        return json.dumps(sent, ensure_ascii=False).encode()
    translated = call.translation.translator.request(payload, target_of(call))
    if isinstance(translated, Refusal):
        return bad_request(translated.message, translated.code)
    return json.dumps(translated, ensure_ascii=False).encode()


def target_of(call: Call) -> Target:
    model = call.wire_payload.get("model") if call.wire_payload is not None else None
    return Target(model if isinstance(model, str) else "", call.up.cfg.stream_usage)
