"""``GET /v1/models`` across every upstream: one list, each model once, by the upstream that
would serve it.

With one upstream this is the plain passthrough. With several, each upstream's list is
fetched (concurrently, with its own credentials), a model is kept only if routing would
send it to that upstream (the first whose ``models`` globs match), and the merged list
keeps the first answering upstream's envelope (OpenAI's ``{"object": "list", "data"}`` or
Anthropic's ``{"data", "has_more", "first_id", "last_id"}``). Answers are cached briefly per
caller credential, since agents list models at every start.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

from aiohttp import web

from gateway.pipeline.attempt import Call, ReadMode, attempt
from gateway.pipeline.outcome import STATE, Failure, Outcome, Success
from gateway.pipeline.relay import relay
from gateway.pipeline.send import new_plan
from gateway.policy.retry import RetryPlan
from gateway.routing import pick_upstream, request_headers, required_for
from gateway.services import SERVICES, Services, UpstreamRuntime

CACHE_S = 30.0
CACHE_ENTRIES = 1000  # one per distinct caller credential


async def list_models(request: web.Request) -> web.StreamResponse | None:
    """The merged list, or None when the plain passthrough should answer (one upstream)."""
    svc, state = request.app[SERVICES], request[STATE]
    if len(svc.upstreams) < 2 or request.query_string:
        return None
    key = hashlib.sha256(
        "\n".join(request.headers.get(h, "") for h in ("Authorization", "x-api-key", "api-key")).encode()
    ).hexdigest()
    hit = svc.models_cache.get(key)
    if hit is not None and hit[0] > svc.monotonic():
        return web.Response(body=hit[1], content_type="application/json")
    ups = list(svc.upstreams.values())
    plan = new_plan(svc, None)
    outcomes = await asyncio.gather(*(_fetch(svc, request, up, plan) for up in ups))
    merged: list[Any] = []
    seen: set[str] = set()
    envelope: dict[str, Any] | None = None
    for up, outcome in zip(ups, outcomes, strict=True):
        doc = _json(outcome.body) if isinstance(outcome, Success) else None
        if doc is None:
            continue
        envelope = envelope if envelope is not None else doc
        for model in doc["data"]:
            mid = model.get("id") if isinstance(model, dict) else None
            if not isinstance(mid, str) or mid in seen:
                continue
            served_by = pick_upstream(svc.cfg.upstreams, mid)
            if served_by is not None and served_by.name == up.cfg.name:
                seen.add(mid)
                merged.append(model)
    if envelope is None:
        failure = next((o for o in outcomes if isinstance(o, Failure)), None)
        return await relay(request, svc, state, failure) if failure is not None else None
    body = json.dumps(_with_data(envelope, merged)).encode()
    svc.models_cache[key] = (svc.monotonic() + CACHE_S, body)
    while len(svc.models_cache) > CACHE_ENTRIES:
        svc.models_cache.pop(next(iter(svc.models_cache)))
    state.upstream = "all"
    return web.Response(body=body, content_type="application/json")


async def _fetch(svc: Services, request: web.Request, up: UpstreamRuntime, plan: RetryPlan) -> Outcome:
    state = request[STATE]
    headers = required_for(request_headers(request.headers.items(), up.outbound, state.request_id), up.cfg)
    call = Call(up, "GET", up.cfg.base_url + "/models", headers, ReadMode.BUFFER)
    return await attempt(svc, state, plan, call, b"")


def _json(body: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("data"), list) else None


def _with_data(envelope: dict[str, Any], data: list[Any]) -> dict[str, Any]:
    out = {**envelope, "data": data}
    if "first_id" in envelope:  # Anthropic's pagination fields describe the merged page now
        out["first_id"] = data[0].get("id") if data else None
        out["last_id"] = data[-1].get("id") if data else None
        out["has_more"] = False
    return out
