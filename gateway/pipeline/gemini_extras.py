"""The Gemini API's endpoints besides content generation, which the full pipeline serves
(``apis/gemini``): ``models.countTokens``, ``models.list`` and ``models.get``; and the
JSON-array framing of a ``streamGenerateContent`` asked without ``alt=sse`` (``json_array_or``).

``countTokens`` goes to the routed upstream when it speaks Gemini (its count is exact; the
body as the client sent it, at the upstream's name for the model); on any other upstream it
is answered from the gateway's own estimate of the translated request
(``x-llm-estimated: true``, as Messages' count_tokens is answered on an upstream that cannot
count). The model list comes from the upstreams' own lists in Google's shape
(``pipeline/models.py``), and one model from routing.

Gemini CLI asks ``countTokens`` before it compresses a long conversation; google-genai's
``client.models.count_tokens`` and ``client.models.list`` call these.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from gateway.apis import GEMINI, model_list
from gateway.apis.common import model_too_long
from gateway.apis.gemini.array import JsonArrayStream, as_array, wants_array
from gateway.apis.gemini.fields import field
from gateway.apis.gemini.wire import model_path
from gateway.pipeline import accounting, reasoning_fix
from gateway.pipeline.admit import parse_json_object, read_body
from gateway.pipeline.attempt import Call, ReadMode
from gateway.pipeline.forward import Handler, authenticate, not_found
from gateway.pipeline.models import gemini_caller, list_models
from gateway.pipeline.outcome import STATE, Failure, Outcome, RequestState, Success, bad_request
from gateway.pipeline.pool import send_across
from gateway.pipeline.relay import relay
from gateway.pipeline.send import plan_for, send_one
from gateway.policy.tokens import request_tokens, text_tokens
from gateway.routing import UnsafePath, outbound_headers
from gateway.services import SERVICES, Services, UpstreamRuntime
from gateway.translate import NoLeg
from gateway.translate.base import Refusal, Target
from gateway.translate.gemini_chat.request import to_chat

# The routes, under both API versions the clients use.
COUNT_PATHS = ("/v1beta/models/{model}:countTokens", "/v1/models/{model}:countTokens")


async def count_tokens(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    state.dialect = GEMINI
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    model = request.match_info["model"]
    if ":" in model:  # a method's path (models/m:generateContent) asked with GET: no such endpoint
        return await not_found(request)
    too_long = model_too_long(model)
    if too_long is not None:  # before routing caches it
        return await relay(request, svc, state, bad_request(too_long.message, too_long.code))
    state.model = model
    refused = await accounting.admit_count(svc, state, request.headers, model)
    if refused is not None:
        return await relay(request, svc, state, refused)
    unknown = _unrouted(svc, model)
    if unknown is not None:
        return await relay(request, svc, state, unknown)
    body = await read_body(request, svc.limits.max_body_bytes, svc.limits.idle_s, svc.limits.deadline_s)
    if isinstance(body, Failure):
        return await relay(request, svc, state, body)
    doc = parse_json_object(body)
    if isinstance(doc, Failure):
        return await relay(request, svc, state, doc)
    # Google refuses a signature it did not issue: the gateway's seal is swapped, as on
    # generateContent (a conversation that moved from a Claude route to this one).
    counted = await _counted_upstream(request, svc, state, model, reasoning_fix.gemini_count_body(body, doc))
    if counted is not None:
        return await relay(request, svc, state, counted)
    # CountTokensRequest: ``contents`` alone, or a whole ``generateContentRequest`` (with its
    # system instruction and tools, which count too).
    asked = field(doc, "generateContentRequest")
    asked = asked if isinstance(asked, dict) else doc
    total = estimate(asked, _onward(svc, model))
    headers = [("Content-Type", "application/json"), ("x-llm-estimated", "true")]
    answer = Success(200, headers, body=json.dumps({"totalTokens": total}).encode())
    return await relay(request, svc, state, answer)


async def _counted_upstream(
    request: web.Request, svc: Services, state: RequestState, model: str, body: bytes
) -> Outcome | None:
    """A Gemini upstream counts the request itself (its own tokenizer, the exact number);
    None when the model is routed to an upstream of another API (the estimate answers)."""
    route = svc.chain_for(model)
    if route is None:
        return None
    pool = route.hops[0].pool
    plan = plan_for(svc, state, request.headers)
    if pool is not None:
        if not any("gemini" in up.cfg.apis for up in pool.members):
            return None
        # A deployment that does not count (another API, a path it refuses) answers with the
        # estimate's "not counted here": None below.
        outcome = await send_across(
            svc, state, plan, pool, lambda up: _count_call(request, state, up, model, body) or _NOT_COUNTED
        )
        return None if outcome is _NOT_COUNTED else outcome
    call = _count_call(request, state, route.upstreams[0], model, body)
    return None if call is None else await send_one(svc, state, plan, call, body)


# send_across's answer for a deployment that cannot count: the caller then estimates.
_NOT_COUNTED = Success(204, [])


def _count_call(request: web.Request, state: RequestState, up: UpstreamRuntime, model: str,
                body: bytes) -> Call | None:  # fmt: skip
    if "gemini" not in up.cfg.apis:
        return None
    name = up.cfg.upstream_model(model) if up.cfg.model_map else model
    try:
        url = up.url_for(model_path(name, "countTokens"), "")
    except UnsafePath:
        return None
    headers = outbound_headers(request.headers.items(), up.outbound, state.request_id, "gemini",
                               query_key=request.query.get("key"))  # fmt: skip
    return Call(up, "POST", url, headers, ReadMode.BUFFER, GEMINI, body=body)


def _onward(svc: Services, model: str) -> str:
    """The API the routed upstream is sent the request in after chat (``Target.onward``): a
    PDF goes on to Claude or OpenAI's Responses as a document, and to a chat server as a note."""
    route = svc.chain_for(model)
    if route is None:
        return ""
    leg = route.upstreams[0].leg_for(svc.translations, GEMINI, model)
    return "" if isinstance(leg, NoLeg) or leg.wire.api == "chat" else leg.wire.api


def estimate(request: dict[str, Any], onward: str = "") -> int:
    """The prompt tokens of a Gemini request, as the gateway estimates any prompt: of the chat
    request it is translated to for the routed upstream (``onward``: what goes on from chat,
    so a PDF Claude reads counts by its pages, policy/tokens.py, and the note a chat server
    gets instead as that note); of its bytes when it cannot be translated."""
    chat = to_chat({**request, "stream": False}, Target("", onward=onward))
    if isinstance(chat, Refusal):
        return max(1, round(text_tokens(json.dumps(request))))
    return max(1, round(request_tokens(chat)))


async def list_gemini_models(request: web.Request) -> web.StreamResponse:
    """``GET /v1beta/models``: the upstreams' models in Google's shape, else the configured
    model names (those without a glob) when no upstream answers with a list."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = GEMINI
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    listed = await list_models(request, shape=model_list.GOOGLE)
    if listed is not None:
        return listed
    named = [m for u in svc.cfg.upstreams for m in u.models if not any(c in m for c in "*?[")]
    models = [model_list.gemini_model(m) for m in dict.fromkeys(named)]
    return web.json_response(model_list.listing(models, model_list.GOOGLE, False))


async def get_gemini_model(request: web.Request) -> web.StreamResponse:
    """``GET /v1beta/models/{model}``: the model as the Gemini API describes one, when routed."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = GEMINI
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    model = request.match_info["model"]
    if ":" in model:  # a method's path (models/m:generateContent) asked with GET: no such endpoint
        return await not_found(request)
    too_long = model_too_long(model)
    if too_long is not None:  # before routing caches it
        return await relay(request, svc, state, bad_request(too_long.message, too_long.code))
    state.model = model
    unknown = _unrouted(svc, model)
    if unknown is not None:
        return await relay(request, svc, state, unknown)
    route = svc.chain_for(model)
    window = route.upstreams[0].cfg.context_window if route is not None else None
    return web.json_response(model_list.gemini_model(model, window))


def gemini_or(other: Handler, gemini: Handler) -> Handler:
    """``GET /v1/models`` and ``/v1/models/{id}`` are OpenAI's paths and the google-genai
    SDK's: a caller with a Gemini key gets the Gemini answer, anyone else ``other``."""

    async def either(request: web.Request) -> web.StreamResponse:
        return await (gemini if gemini_caller(request) else other)(request)

    return either


def json_array_or(sse: Handler) -> Handler:
    """The content-generation handler, with a stream asked without ``alt=sse`` framed as the
    JSON array Google answers it with: a stream through :class:`JsonArrayStream` (element by
    element, as the events come), an answer written at once (an error, a replayed stream)
    rewritten before it is sent (the observing wrapper sends what is not yet prepared)."""

    async def either(request: web.Request) -> web.StreamResponse:
        if not wants_array(request.match_info.get("method", ""), request.query.get("alt")):
            return await sse(request)
        request[STATE].stream_response = JsonArrayStream
        response = await sse(request)
        if isinstance(response, web.Response) and not response.prepared and isinstance(response.body, bytes):
            response.body = as_array(response.body, response.content_type)
            response.content_type = "application/json"
        return response

    return either


def _unrouted(svc: Services, model: str) -> Failure | None:
    if svc.chain_for(model) is not None:
        return None
    return bad_request(f"models/{model[:128]} is not found: no upstream is configured for it",
                       "model_not_found", status=404)  # fmt: skip
