"""``GET /v1/models`` across every upstream: one list, each model once, by the upstream that
would serve it, in the shape the client reads.

Each upstream's list is fetched (concurrently, with its own credentials, with the client's
query: Claude Code asks ``?limit=1000``, and Anthropic lists 20 without), a model is kept
only if routing would send it to that upstream (the first whose ``models`` globs match), and
the list is written in Anthropic's shape for a client that sends ``anthropic-version``
(Claude Code's model discovery, the ``anthropic`` SDK), in Google's for one that sends a Gemini
key (``x-goog-api-key`` or ``?key=``: the google-genai SDK lists at ``/v1/models`` too), else
in OpenAI's (apis/model_list.py), whichever shape each upstream answered in (a Gemini API
upstream answers ``{"models": [...]}``, and is asked with Google's own paging rather than the
client's query). Answers are cached briefly per caller credential, query and shape, since
agents list models at every start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from gateway.apis import model_list
from gateway.pipeline.attempt import Call, ReadMode, attempt
from gateway.pipeline.outcome import STATE, Failure, Outcome, RequestState, Success
from gateway.pipeline.relay import relay
from gateway.pipeline.send import new_plan, send_one
from gateway.policy.retry import RetryPlan
from gateway.routing import outbound_headers, pick_upstream, required_for
from gateway.services import SERVICES, Services, UpstreamRuntime

Send = Callable[[Services, RequestState, RetryPlan, Call, bytes], Awaitable[Outcome]]
CACHE_S = 30.0
CACHE_ENTRIES = 1000  # one per distinct caller credential, query and shape
GOOGLE_PAGE = "pageSize=1000"  # what a Gemini API upstream is asked for: its whole list at once


async def list_models(request: web.Request, shape: str | None = None) -> web.StreamResponse | None:
    """The listing; None when no upstream answered with a list, nor failed (the plain
    passthrough then relays what the upstream did say)."""
    svc, state = request[SERVICES], request[STATE]
    shape = shape or shape_of(request)
    google = shape == model_list.GOOGLE
    # Google's paging parameters (and its ?key=) mean nothing to the upstreams asked.
    query = "" if google else request.rel_url.raw_query_string
    asked = [request.headers.get(h, "") for h in ("Authorization", "x-api-key", "api-key", "x-goog-api-key")]
    if google:
        asked.append(request.query.get("key", ""))
    key = hashlib.sha256("\n".join([*asked, query, shape]).encode()).hexdigest()
    hit = svc.models_cache.get(key)
    if hit is not None and hit[0] > svc.monotonic():
        return web.Response(body=hit[1], content_type="application/json")
    ups = list(svc.upstreams.values())
    plan = new_plan(svc, None)
    # One upstream's list is the request's answer, retried as any is; of several, each gets
    # one try, and the listing is what answered (a retry would hold all of it up).
    send = send_one if len(ups) == 1 else attempt
    outcomes = await asyncio.gather(*(_fetch(svc, request, up, plan, query, send) for up in ups))
    merged: list[dict[str, Any]] = []
    seen: set[str] = set()
    answered = has_more = False
    for up, outcome in zip(ups, outcomes, strict=True):
        found = model_list.listed(_json(outcome.body)) if isinstance(outcome, Success) else None
        if found is None:
            continue
        answered = True
        models, more = found
        has_more = has_more or more
        for mid, model in models:
            if mid in seen:
                continue
            served_by = pick_upstream(svc.cfg.upstreams, mid)
            if served_by is not None and served_by.name == up.cfg.name:
                seen.add(mid)
                merged.append(model_list.entry(model, mid, shape, up.cfg.name))
    if not answered:
        failure = next((o for o in outcomes if isinstance(o, Failure)), None)
        return await relay(request, svc, state, failure) if failure is not None else None
    body = json.dumps(model_list.listing(merged, shape, has_more)).encode()
    svc.models_cache[key] = (svc.monotonic() + CACHE_S, body)
    while len(svc.models_cache) > CACHE_ENTRIES:
        svc.models_cache.pop(next(iter(svc.models_cache)))
    state.upstream = ups[0].cfg.name if len(ups) == 1 else "all"
    return web.Response(body=body, content_type="application/json")


def shape_of(request: web.Request) -> str:
    if "anthropic-version" in request.headers:
        return model_list.ANTHROPIC
    if gemini_caller(request):
        return model_list.GOOGLE
    return model_list.OPENAI


def gemini_caller(request: web.Request) -> bool:
    """A Gemini API client: it sends its key as ``x-goog-api-key`` or ``?key=``, as no other
    API's clients do (``GET /v1/models`` and ``/v1/models/{id}`` are OpenAI's paths too)."""
    return "x-goog-api-key" in request.headers or "key" in request.query


async def _fetch(
    svc: Services, request: web.Request, up: UpstreamRuntime, plan: RetryPlan, query: str, send: Send
) -> Outcome:
    state = request[STATE]
    # A forwarded client credential goes where this upstream takes one, whatever API the
    # caller speaks: a Gemini caller's x-goog-api-key or ?key= on a chat upstream went as it
    # came, or not at all.
    given = request.query.get("key") if gemini_caller(request) else None
    headers = outbound_headers(request.headers.items(), up.outbound, state.request_id, None,
                               translated=True, query_key=given)  # fmt: skip
    headers = required_for(headers, up.cfg)
    if set(up.cfg.apis) == {"gemini"}:
        # Google's own paging, not the client's (Claude Code's ?limit=1000 is Anthropic's):
        # "If unspecified, at most 50 models will be returned per page. This method returns at
        # most 1000 models per page" (ListModelsRequest.page_size,
        # https://ai.google.dev/api/python/google/generativeai/protos/ListModelsRequest).
        query = GOOGLE_PAGE
    url = up.url_for("/v1/models", query)
    call = Call(up, "GET", url, headers, ReadMode.BUFFER)
    return await send(svc, state, plan, call, b"")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
