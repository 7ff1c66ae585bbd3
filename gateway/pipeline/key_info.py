"""``GET /v1/gateway/key``: the caller's own limits, spend this period and when it resets, so an
agent or its user can show "budget resets at …". ``GET /v1/gateway/keys``: the same for every
named key, for a key with ``admin: true``, those issued at run time marked ``issued: true`` with
who issued them and when. Never a key, only names."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import Classification, ErrorType
from gateway.pipeline.forward import authenticate
from gateway.pipeline.outcome import STATE, bad_request, gateway_failure
from gateway.pipeline.relay import relay
from gateway.services import SERVICES, Services


async def own_key(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    key = state.key
    if key is None:
        return await relay(request, svc, state, bad_request(
            "this gateway asks no key of its callers, so there is no key to describe", "no_client_key",
            status=404))  # fmt: skip
    if svc.accounts is None:  # only the flat server.client_keys: nothing is counted
        return web.json_response({"name": key.name, "models": list(key.models), "limits": None})
    return web.json_response({**await svc.accounts.state_of(key), **_marks(svc, key.name)})


async def all_keys(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    key = state.key
    if key is None or not key.admin or svc.accounts is None:
        failure = gateway_failure(403, Classification.of(ErrorType.AUTH),
                                  "listing every key's state needs a key with admin: true", "admin_required",
                                  final=True)  # fmt: skip
        return await relay(request, svc, state, failure)
    specs = {s.name: s for s in svc.auth.ring.by_digest.values() if s.name != "client_keys"}
    return web.json_response({"keys": [{**await svc.accounts.state_of(specs[name]), **_marks(svc, name)}
                                       for name in sorted(specs)]})  # fmt: skip


def _marks(svc: Services, name: str) -> dict[str, object]:
    """An issued key's (``issued: true``, by whom and when); nothing for a key of the file."""
    issued = svc.issued.keys.get(name) if svc.issued is not None else None
    return issued.marks() if issued is not None and all(k.name != name for k in svc.cfg.keys) else {}
