"""``POST /v1/gateway/keys``: an admin key issues a key (its secret answered once);
``DELETE /v1/gateway/keys/{name}``: an admin key revokes one it or another admin issued.

What a key may be is judged in gateway/keys/issued.py; this module reads the request, asks the
store, and answers in the gateway's own error shape. Never the secret in a log line: only the
201's body carries it.
"""

from __future__ import annotations

import math

from aiohttp import web

from gateway.errors import Classification, ErrorType
from gateway.keys.issued import IssuedKey, IssuedStoreDown, KeyRefused, new_secret, requested
from gateway.pipeline.admit import parse_json_object, read_body
from gateway.pipeline.forward import authenticate
from gateway.pipeline.outcome import STATE, Failure, bad_request, gateway_failure
from gateway.pipeline.relay import relay
from gateway.policy.retry_after import reset_at_ms
from gateway.services import SERVICES, Services


async def issue(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    refused = await _admin_only(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    assert state.key is not None and svc.issued is not None
    body = await read_body(request, svc.limits.max_body_bytes, svc.limits.idle_s, svc.limits.deadline_s)
    doc = body if isinstance(body, Failure) else parse_json_object(body)
    if isinstance(doc, Failure):
        return await relay(request, svc, state, doc)
    now = svc.wall()
    secret = new_secret()
    key = requested(doc, secret, svc.cfg, state.key.name, now)
    if isinstance(key, KeyRefused):
        return await relay(request, svc, state, _refusal(key))
    try:
        got = await svc.issued.issue(key, svc.cfg.keys_api)
    except IssuedStoreDown:
        return await relay(request, svc, state, _store_down())
    if got == "taken":
        return await relay(request, svc, state, bad_request(
            f"an issued key named '{key.name}' has not ended: revoke it first, or choose another name",
            "key_name_taken", status=409))  # fmt: skip
    if got == "full":
        return await relay(request, svc, state, bad_request(
            f"{svc.cfg.keys_api.max_issued} issued keys have not ended (keys_api.max_issued): "
            "revoke one first",
            "issued_keys_full", status=409))  # fmt: skip
    if got == "rate":
        wait = 60 - now % 60
        message = (f"{svc.cfg.keys_api.issued_per_minute} keys were issued this minute "
                   "(keys_api.issued_per_minute)")
        c = Classification(ErrorType.RATE_LIMIT, True, math.ceil(wait), reset_at_ms(wait, now),
                           "issue_rate_limited", message)  # fmt: skip
        limited = gateway_failure(429, c, message, "issue_rate_limited", final=True)
        return await relay(request, svc, state, limited)
    view = await _view(svc, key)
    # The one answer that holds the secret: no cache on the way may keep it (as OAuth's token
    # answer, RFC 6749 5.1; Pragma for an HTTP/1.0 cache).
    return web.json_response({"key": secret, **view}, status=201, headers=_NOT_STORED)


_NOT_STORED = {"Cache-Control": "no-store", "Pragma": "no-cache"}


async def revoke(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    refused = await _admin_only(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    assert state.key is not None and svc.issued is not None
    name = request.match_info["name"]
    in_file = name in {k.name for k in svc.cfg.keys}
    if in_file and name not in svc.issued.keys:
        return await relay(request, svc, state, bad_request(
            f"key '{name}' is a key of the config file: remove it there and reload", "key_in_config",
            status=409))  # fmt: skip
    # An issued key a reload gave a file key's name to is hidden, not gone: revoked all the same,
    # or it would work again once the file's key is removed (review).
    try:
        dropped = await svc.issued.revoke(name, state.key.name)
    except IssuedStoreDown:
        return await relay(request, svc, state, _store_down())
    if not dropped:
        unknown = bad_request(f"no issued key is named '{name}'", "issued_key_not_found", status=404)
        return await relay(request, svc, state, unknown)
    if in_file:
        return web.json_response({"name": name, "revoked": True,
                                  "note": "the config file's key of this name stays"})
    return web.json_response({"name": name, "revoked": True})


async def _admin_only(svc: Services, request: web.Request) -> Failure | None:
    refused = await authenticate(svc, request)
    if refused is not None:
        return refused
    key = request[STATE].key
    if key is None or not key.admin or svc.issued is None:
        return gateway_failure(403, Classification.of(ErrorType.AUTH),
                               "issuing and revoking keys needs a key with admin: true", "admin_required",
                               final=True)  # fmt: skip
    if svc.cfg.keys_api.max_issued == 0:
        return gateway_failure(501, Classification.of(ErrorType.UNKNOWN),
                               "this gateway issues no keys (keys_api.max_issued is 0)", "keys_api_off",
                               final=True)  # fmt: skip
    workers = svc.cfg.server.worker_count
    if workers > 1 and svc.cfg.state.backend == "memory":
        # Each worker is a process of its own: a key issued on one would be refused by the others.
        return gateway_failure(501, Classification.of(ErrorType.UNKNOWN),
                               f"issuing keys with server.workers {workers} needs state: {{backend: redis}}, "
                               "which every worker reads", "keys_api_off", final=True)  # fmt: skip
    return None


def _refusal(r: KeyRefused) -> Failure:
    return gateway_failure(r.status, Classification.of(ErrorType.UNKNOWN), r.message, r.code, final=True)


def _store_down() -> Failure:
    # A call that timed out after Redis ran it may have done its work: said so, not denied.
    message = ("the state store did not answer: the key may not have been issued or revoked; read "
               "GET /v1/gateway/keys, then try again")
    c = Classification(ErrorType.PROVIDER_UNAVAILABLE, True, 1.0, None, "issued_keys_unavailable", message)
    return gateway_failure(503, c, message, "issued_keys_unavailable", final=True)


async def _view(svc: Services, key: IssuedKey) -> dict[str, object]:
    """The new key as ``GET /v1/gateway/key`` shows it to its holder, and who issued it."""
    spec = next((s for s in svc.auth.ring.by_digest.values() if s.name == key.name), None)
    if spec is None or svc.accounts is None:  # a reload put a key of the file under its name meanwhile
        return {"name": key.name, **key.marks()}
    return {**await svc.accounts.state_of(spec), **key.marks()}
