"""The request pipeline, readable in one sitting.

    authenticate  only holders of a gateway key (when keys are configured)
    admit         read the body (bounded), reject bad input with a clear 4xx
    recall        an identical request that just failed is answered from memory
    route         the pool or upstream whose model globs match, then its fallbacks; each is
                  reached in the client's API or, where it speaks another, translated
                  (``translate/``, ``legs.py``)
    send          pick a pool's deployment (affinity, strategy), attempt → classify → wait,
                  retry or move on (to a sibling, a fallback)   (pool.py, send.py, chain.py)
    probe         a stream that keeps coming back empty is asked once without streaming
    fix           what the model refuses as asked: a budget above its output limit, lowered
                  once (output_cap.py); a parameter it does not take, left out (param_fix.py);
                  reasoning another account signed, left out once (reasoning_fix.py)
    rescue        on context_overflow: compress once, send once  (the dialect's compression)
    remember      a final failure, for the loop breaker
    relay         buffered error, buffered body, raw passthrough or SSE stream; a stream
                  broken mid-answer is continued once where an upstream declares how

Everything that differs between wire APIs is the request's dialect (``apis/``).
``observe`` (outside) times and logs it; ``stamp`` (on prepare) adds the header contract.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_plus

import orjson
from aiohttp import web

from gateway import jsonbody
from gateway.apis import api_of_path, dialect_for_errors, gemini_call, gemini_resource, output_budget
from gateway.apis.base import Dialect, Inbound, Rejection, Where
from gateway.apis.common import admit_messages, model_too_long
from gateway.apis.responses.warm_ids import not_found_body
from gateway.auth import WWW_AUTHENTICATE
from gateway.errors import Classification, ErrorType
from gateway.keys.attribution import session_of
from gateway.pipeline import accounting, output_cap, param_fix, reasoning_fix
from gateway.pipeline.admit import (
    LOOKED_AGAIN,
    identify,
    is_json,
    model_of,
    parse_json_object,
    read_body,
    refuses_repeats,
)
from gateway.pipeline.asked import Asked
from gateway.pipeline.attempt import Call, ReadMode
from gateway.pipeline.chain import onward, resume_route, send_chain
from gateway.pipeline.continuation import continuable, resumer
from gateway.pipeline.legs import Sending, leg_call, resent
from gateway.pipeline.models import gemini_caller, list_models
from gateway.pipeline.outcome import (
    STATE,
    Failure,
    Outcome,
    RequestState,
    Success,
    bad_request,
    gateway_failure,
)
from gateway.pipeline.pool import (
    remember_answer,
    resend_in_pool,
    send_across,
    stored_deployment,
    stored_route,
)
from gateway.pipeline.relay import relay, rendered, shutdown_failure
from gateway.pipeline.send import InPool, Onward, Remade, Sent, note_outage, plan_for, send_one
from gateway.policy import per_minute_fit
from gateway.policy.clients import compacts_itself
from gateway.policy.loop_breaker import Answer, Fingerprint, Recalled
from gateway.policy.overflow_limits import parse_overflow
from gateway.policy.retry import RetryPlan
from gateway.policy.tokens import BYTES_PER_TOKEN, content_tokens, request_tokens
from gateway.policy.tool_outputs import Stage, Tally
from gateway.routing import UnsafePath, request_headers, required_for, upstream_url, with_added
from gateway.routing.affinity import conversation_key, opens_conversation
from gateway.routing.headers import with_content_type
from gateway.routing.pools import relayed_scope
from gateway.routing.stored import continued, continued_in_body, named_in_path, stores
from gateway.services import SERVICES, Route, Services, UpstreamRuntime
from gateway.translate import NoLeg

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Read on every request as module names: on Python 3.11 (the shipped image's) reading a member
# off the enum class costs ~900 instructions more (callgrind; issue #38).
_STREAM, _BUFFER = ReadMode.STREAM, ReadMode.BUFFER


def full_pipeline(dialect: Dialect) -> Handler:
    """The handler of a dialect's own endpoint: every guarantee applies."""

    async def handle(request: web.Request) -> web.StreamResponse:
        svc, state = request[SERVICES], request[STATE]
        state.dialect = dialect
        refused = await authenticate(svc, request)
        if refused is not None:
            return await relay(request, svc, state, refused)
        inbound = await _admit(request, svc, dialect)
        if isinstance(inbound, Failure):
            return await relay(request, svc, state, inbound)
        state.model, state.stream = inbound.model, inbound.stream
        # The log's session is every request's, not only a gateway key's: an operator without
        # keys follows an agent's session through its lines as much as one who bills it.
        state.session = session_of(request.headers, inbound.payload)
        if state.key is not None:
            refused = await accounting.admit(svc, state, request.headers, inbound)
            if refused is not None:
                return await relay(request, svc, state, refused)
        route = _route(svc, state, inbound.model)
        if isinstance(route, Failure):
            return await relay(request, svc, state, route)
        if dialect.api == "responses" and _warmed_elsewhere(svc, inbound.payload):
            # A warm-up's id, chained where the connection that made it cannot expand it: no
            # upstream holds it, and a pool would ask every key and wait out one sitting out.
            state.upstream = "none"  # none was asked (the log line and metrics say so)
            return await relay(request, svc, state, _not_held(inbound.payload["previous_response_id"]))
        if dialect.api == "responses" and svc.pool_state is not None:
            # What the provider stores is its key's alone: a chained turn goes where it was made.
            state.keeps_answer = stores(inbound.payload)
            continues = continued(inbound.payload)
            if continues is not None:
                route = await stored_route(svc, state, route, continues)
        primary = route.upstreams[0]
        fingerprint: Fingerprint | None = None
        turn: Recalled | None = None  # a repeat of a turn given up on: sent as a probe
        if svc.loop.may_recall():
            # Only when something is remembered: otherwise a success never needs the canonical
            # encoding (every key sorted, the whole body re-encoded); a failure makes it then.
            fingerprint = _fingerprint(svc, request, inbound)
            remembered = await svc.loop.recall(fingerprint)
            if remembered is not None and remembered.answers(svc.wall()):
                failing = _answered_by(state, route, remembered)
                if remembered.classification.type is ErrorType.PROVIDER_UNAVAILABLE:
                    # The client's turn is still failing on it.
                    await note_outage(svc, failing or primary, state.model)
                return await relay(request, svc, state, _from_memory(svc, state, remembered))
            turn = remembered

        capped = _cap_tool_outputs(svc, state, dialect, primary, inbound.payload)
        asked = Asked(inbound, dialect, primary.cfg.stream_usage, capped)
        del capped  # held by ``asked`` when it differs; else re-read from the bytes when needed
        mode = _STREAM if inbound.stream else _BUFFER

        track = inbound.stream and continuable(route.upstreams)
        query = forwarded_query(request, dialect)
        query_key = request.query.get(dialect.key_param) if dialect.key_param else None

        def call_for(up: UpstreamRuntime) -> Call | Failure:
            try:
                return _call_for(up)
            finally:
                # The upstream works next: nothing reads the document meanwhile (the stages
                # after the send read it again from the bytes).
                asked.drop()

        def _call_for(up: UpstreamRuntime) -> Call | Failure:
            leg = up.leg_for(svc.translations, dialect, inbound.model)
            if isinstance(leg, NoLeg):
                return bad_request(leg.message, "no_translation")
            state.translated = None  # until a translated call is made (a fallback's, say)
            capped = state.output_capped
            if capped is not None and capped["source"] != "refused":
                state.output_capped = None  # noted for another upstream of the chain
            model = leg.model or inbound.model
            prepared = payload = asked.payload()
            cfg = up.cfg
            bounded = cfg.max_output_tokens is not None or cfg.context_window is not None
            if bounded or svc.output_limits.learned:  # mostly neither: no call
                payload = output_cap.capped(svc, state, dialect, cfg, model, prepared)
            if dialect.api == "messages" and leg.translator is None:  # what this deployment refuses, left out
                payload = reasoning_fix.shaped(svc, state, cfg.name, payload, asked.body())
            elif dialect.api in reasoning_fix.SEALED and leg.translator is None:
                if dialect.api == "gemini":  # per leg: a translated one unseals or drops the seal
                    payload = reasoning_fix.gemini_passed(inbound.body, payload)
                payload = reasoning_fix.sealed_shaped(svc, state, dialect.api, cfg.name, payload)
            if leg.translator is None and leg.model is None and dialect.address(payload) is None:
                headers = request_headers(request.headers.items(), up.outbound, state.request_id)
                url = up.url_for(dialect.path, query)
                strip = asked.strip_usage
                lenient = inbound.lenient
                body = asked.body() if payload is prepared else jsonbody.dumps(payload, lenient=lenient)
                return Call(up, "POST", url, headers, mode, dialect, strip, track, body=body)
            sent = Sending(mode, asked.strip_usage, track, query, query_key)
            client_headers = request.headers.items()
            client = asked.client()
            if payload is not prepared:
                client = output_cap.capped(svc, state, dialect, up.cfg, model, client)
            def shape(translated: dict[str, Any]) -> dict[str, Any]:
                return reasoning_fix.shaped(svc, state, cfg.name, translated, None)

            return leg_call(state, leg, up, client_headers, sent, inbound, payload, client, shape)

        plan = plan_for(svc, state, request.headers)
        plan.probe = turn is not None
        if svc.pool_state is not None and any(hop.pool is not None for hop in route.hops):
            # What a pool deployment must have left for it: OpenAI meters the prompt and the
            # max_tokens asked at admission, Anthropic its input and output windows alike.
            prompt = round(len(asked.body()) / BYTES_PER_TOKEN)
            state.pool_need = (prompt, output_budget.asked(inbound.payload) or 0)
        window = primary.cfg.context_window
        plan.empty_is_final = window is not None and len(asked.body()) / BYTES_PER_TOKEN > window
        # Which conversation this is, for a pool's prompt-cache affinity (asked only if one keeps it).
        conversation = None
        if route.affinity and state.stored_on is None:  # else the stored response decides
            conversation = conversation_key(dialect.api, request.headers, inbound.payload)
            # Only a conversation known by its opening: a session id (Claude Code's, Codex's)
            # spans many requests shaped as first turns (each new task, each sub-agent's),
            # whose home is the session's and so claimed.
            if conversation is not None and conversation.startswith("open:"):
                state.opens_conversation = opens_conversation(dialect.api, inbound.payload)
        sent = await send_chain(svc, state, plan, route, call_for, conversation)
        outcome, call = sent.outcome, sent.call
        if call is not None:
            if inbound.stream and _answered_with_nothing(plan, outcome):
                # What the client asked, in its API: a translated call translates it again.
                outcome = await _probe(svc, state, plan, call, _asked_of(asked, call))
                if isinstance(outcome, Failure):
                    state.empty_was = outcome.classification.type  # what the empty streams meant
            if isinstance(outcome, Failure):  # only a refusal is fixed: a success skips the route's rest
                ahead = onward(svc, route, call.up)
                on: list[Call] = []  # the sibling that answered a fixed resend, if one did
                in_pool = _siblings(svc, state, plan, route, call, call_for, conversation, on)
                fixed = await _refused_as_sent(svc, state, plan, call, asked, outcome, ahead, in_pool, on)
                call = on[-1] if on else call
                if fixed is not outcome:  # sent again fixed: a failure of that may still move on
                    again = Sent(fixed, call)
                    sent = await resume_route(svc, state, plan, route, call_for, conversation, again)
                    fixed, call = sent.outcome, sent.call or call
                outcome = fixed
            if isinstance(outcome, Failure) and _overflowed(outcome) and svc.cfg.compression.enabled:
                # Its answer leaves the conversation's home where it was (no ``answered_fixed``):
                # the client sends the next turn whole again, which this deployment refuses as it
                # refused this one, and whose prefix the home's cache holds. Moved here, every
                # later turn was refused and compressed on the small window (review of 07eb6eb).
                moved: list[Call] = []  # the sibling that answered the rescue, if one did
                elsewhere = _siblings(svc, state, plan, route, call, call_for, conversation, moved)
                outcome = await _overflow(svc, state, request, plan, call, _asked_of(asked, call), outcome,
                                          elsewhere)  # fmt: skip
                call = moved[0] if moved else call
            asked.drop()
        await remember_answer(svc, state, call, outcome)  # before the client can chain to its id
        if svc.loop.enabled:
            await _remember(svc, state, plan, outcome, request, inbound, fingerprint, turn)
            inbound.drop()
        if not inbound.stream:
            return await relay(request, svc, state, outcome)  # only a stream is ever continued
        if isinstance(outcome, Success) and outcome.chunks is None:
            # One answer to a request that streams: the empty-stream probe's, or a server's that
            # ignores ``stream`` (sends JSON whatever was asked). The client reads a stream.
            outcome = _as_stream(state.dialect, outcome, inbound)

        def read_once() -> dict[str, Any]:
            # A continuation writes its request from it; the stream goes on without it.
            try:
                return asked.payload()
            finally:
                asked.drop()

        resume = resumer(svc, state, plan, route, call_for, read_once, conversation)
        return await relay(request, svc, state, outcome, resume)

    return handle


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other ``/v1/...`` path: routed, retried and stamped, never compressed."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = _errors_dialect(request)
    refused = await authenticate(svc, request)
    if refused is not None:
        return await relay(request, svc, state, refused)
    path, query = request.raw_path.split("?", 1)[0], forwarded_query(request, state.dialect)
    try:  # first: an absolute-URI target (``GET http://169.254.169.254/v1/models``) is refused
        upstream_url("", path, query)
    except UnsafePath as e:
        return await relay(request, svc, state, bad_request(str(e), "invalid_path"))
    if request.method == "GET" and request.path == "/v1/models":
        merged = await list_models(request)
        if merged is not None:
            return merged
    body = await read_body(request, svc.limits.max_body_bytes, svc.limits.idle_s, svc.limits.deadline_s)
    if isinstance(body, Failure):
        return await relay(request, svc, state, body)
    ctype = request.headers.get("Content-Type", "")
    payload: dict[str, Any] = {}
    model: str | None
    if request.method == "POST" and request.path == COUNT_TOKENS:
        counted = _counted(body)
        if isinstance(counted, Failure):
            return await relay(request, svc, state, counted)
        payload, model = counted.payload, counted.model
    elif state.key is None:
        peeked = model_of(body, ctype)
        if isinstance(peeked, Failure):  # a member named twice (the upstream gets these bytes)
            return await relay(request, svc, state, peeked)
        model = peeked
    else:  # the key's rules read the document: parsed once, the model taken from it
        doc = parse_json_object(body) if body and is_json(ctype) else {}
        if isinstance(doc, Failure) and refuses_repeats(doc):
            return await relay(request, svc, state, doc)
        payload = doc if isinstance(doc, dict) else {}
        named = payload.get("model")
        model = named if isinstance(named, str) else None
    path_of_gemini = gemini_resource(request.path, gemini_caller(request))
    gemini = gemini_call(request.method, request.path) or path_of_gemini
    if gemini and model is not None and model.startswith("models/"):
        # Google names a model as a resource (google-genai's caches.create sends
        # ``models/gemini-2.5-flash``): routes and a key's models name it bare, as generateContent
        # does. Read whole, it matched no ``gemini-*`` route: a 404 naming no upstream.
        model = model.removeprefix("models/")
    too_long = model_too_long(model) if model is not None else None
    if too_long is not None:  # before routing caches it
        return await relay(request, svc, state, bad_request(too_long.message, too_long.code))
    state.model = model
    if state.key is not None:
        # By method and path: a model named in the body of a request that does not use one
        # (a GET of files, a cancel) holds nothing.
        refused = accounting.unheld_path(state, request.method, request.path, state.model)
        if refused is None and request.path.rstrip("/") in accounting.COUNT_PATHS:
            refused = await accounting.admit_count(svc, state, request.headers, state.model)
        elif refused is None:
            refused = await accounting.admit_request(
                svc, state, request.headers, state.model, len(body), payload)
        if refused is not None:
            return await relay(request, svc, state, refused)
    api = api_of_path(request.path) or ("gemini" if gemini else None)
    route = _route(svc, state, state.model, api)
    if isinstance(route, Failure):
        return await relay(request, svc, state, route)

    pool = route.hops[0].pool
    holder = None  # the pool deployment holding the stored object the request names, if any
    named = named_in_path(request.path) or continued_in_body(request.path, body)
    if named is not None and svc.pool_state is not None:
        holder = stored_deployment(svc, await svc.pool_state.stored_on(named))
        if holder is not None:
            pool = holder[0]
    # A conversation made in a pool is read whole, to remember which deployment's key holds it.
    keeps = pool is not None and request.method == "POST" and request.path == "/v1/conversations"
    mode = ReadMode.BUFFER if keeps else ReadMode.RAW

    def call_for(up: UpstreamRuntime) -> Call | Outcome:
        if api is not None and api not in up.cfg.apis:
            return _not_spoken(up, api, request, body)
        headers = request_headers(request.headers.items(), up.outbound, state.request_id)
        if api is None:  # /v1/models, say: what the upstream's one API requires, if it speaks one
            headers = required_for(headers, up.cfg)
        mapped = (up.cfg.upstream_model(model) if up.cfg.model_map and model is not None
                  and request.path.removesuffix("/") in _GENERATION_PATHS else None)  # fmt: skip
        if mapped is not None and mapped != model:
            # The upstream knows the generation model by its mapped name only (a count_tokens
            # of the client's name was a count for a model never asked, or a 404).
            renamed = _with_model(payload, body, ctype, mapped)
            if renamed is not None:
                return Call(up, request.method, up.url_for(path, query), headers, mode, body=renamed,
                            wire_model=mapped, rewritten=True)  # fmt: skip
        return Call(up, request.method, up.url_for(path, query), headers, mode, body=body)

    plan = plan_for(svc, state, request.headers)
    if pool is not None:
        stored = holder[1] if holder is not None else None
        outcome = await send_across(svc, state, plan, pool, call_for, stored, keeps)
        return await relay(request, svc, state, outcome)
    call = call_for(route.upstreams[0])
    # Its limits are not the model's generation's (routing/pools.relayed_scope): a 429 here notes
    # no reset for the generation requests that follow (policy/pending_reset.py), nor theirs here.
    state.pool_scope = relayed_scope(state.model)
    outcome = await send_one(svc, state, plan, call, call.body) if isinstance(call, Call) else call
    return await relay(request, svc, state, outcome)


COUNT_TOKENS = "/v1/messages/count_tokens"


def _counted(body: bytes) -> Inbound | Failure:
    """A count_tokens body held to what ``/v1/messages`` admits of it (a JSON object within the
    depth limit, ``model`` a non-empty string, ``messages`` a list of objects), whether the
    gateway counts it or the upstream does: counted here, ``{"model": 5, "messages": {}}`` was
    answered 200, and forwarded, a body 10,000 levels deep went upstream. Not ``max_tokens``:
    count_tokens takes ``model`` and ``messages`` as required and no ``max_tokens``
    (https://platform.claude.com/docs/en/api/messages/count_tokens)."""
    doc = parse_json_object(body)
    if isinstance(doc, Failure):
        return doc
    admitted = admit_messages(body, doc)
    return bad_request(admitted.message, admitted.code) if isinstance(admitted, Rejection) else admitted


# Passed-through paths whose ``model`` is the model that generates: named as model_map says.
# Not /v1/embeddings, moderations, audio or images: their models are not the chat models a map
# such as the shipped ``"*": <served model>`` names (an embedding asked of a chat model, review).
_GENERATION_PATHS = frozenset({"/v1/messages/count_tokens", "/v1/responses/input_tokens",
                               "/v1/responses/compact", "/v1/completions", "/v1/chat/completions",
                               "/v1/responses", "/v1/messages"})  # fmt: skip


def _with_model(payload: dict[str, Any], body: bytes, ctype: str, model: str) -> bytes | None:
    """The JSON body naming ``model`` instead, or None where it is no JSON object (a form)."""
    doc = payload or (parse_json_object(body) if body and is_json(ctype) else None)
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), str):
        return None
    return json.dumps({**doc, "model": model}, ensure_ascii=False).encode()


def _not_spoken(up: UpstreamRuntime, api: str, request: web.Request, body: bytes) -> Outcome:
    """A path of an API the routed upstream does not speak. Counting tokens is answered from
    the gateway's own estimate (Claude Code asks before compacting); nothing else has a
    translation, so it is refused in words rather than with the upstream's bare 404."""
    if request.method == "POST" and request.path == COUNT_TOKENS:
        doc = parse_json_object(body)  # admitted by ``_counted``
        if isinstance(doc, Failure):
            return doc
        estimate = request_tokens(doc) + content_tokens(doc.get("system"))
        headers = [("Content-Type", "application/json"), ("x-llm-estimated", "true")]
        return Success(200, headers, body=json.dumps({"input_tokens": round(estimate)}).encode())
    spoken = ", ".join(up.cfg.apis)
    return bad_request(
        f"upstream '{up.cfg.name}' speaks {spoken}, not {api}, and {request.path} has no translation; "
        f"add '{api}' to its 'apis' if it does speak {api}",
        "no_translation", status=404,
    )  # fmt: skip


async def hello(request: web.Request) -> web.StreamResponse:
    """Claude Code's start-up probe (``HEAD /api/hello``): answered here, never forwarded."""
    return web.Response(status=200)


async def upgrade_refused(request: web.Request) -> web.StreamResponse:
    """A WebSocket upgrade of ``GET /v1/responses`` where the mode is off
    (``server.responses_websocket: false``): answered here with 426, never forwarded."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = _errors_dialect(request)
    # Forwarded, the upgrade went upstream as a plain GET: a 404, which Codex retried 7 times
    # (~6.5 s a session) before it fell back to HTTPS. A 426 is the one handshake answer
    # Codex takes for "use HTTPS" at once (codex-rs/core/src/client.rs: UPGRADE_REQUIRED →
    # FallbackToHttp). Before the key check: a refusal of the upgrade tells nothing of keys,
    # and the request that follows over HTTPS is checked (Codex's 400 for a bad key there
    # is one it shows at once; on the handshake it would retry it).
    failure = bad_request(
        "this gateway does not serve the Responses API over WebSocket; POST /v1/responses instead",
        "websocket_not_supported", status=426,
    )  # fmt: skip
    return await relay(request, svc, state, failure)


async def upgrade_unauthenticated(request: web.Request) -> web.StreamResponse:
    """A WebSocket upgrade of ``GET /v1/responses`` without a key the gateway takes: refused as
    ``POST /v1/responses`` would be, before any connection is held open for it."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = _errors_dialect(request)
    refused = await authenticate(svc, request)
    if refused is None:  # its key became good meanwhile (a reload): the client tries again
        message = "the key was not accepted when the connection opened; connect again"
        c = Classification.of(ErrorType.AUTH)
        refused = gateway_failure(401, c, message, "invalid_client_key", final=True)
    return await relay(request, svc, state, refused)


async def upgrade_draining(request: web.Request) -> web.StreamResponse:
    """A WebSocket upgrade of ``GET /v1/responses`` once the process drains (``/readyz`` says
    503): refused before the upgrade with the typed ``gateway_shutdown`` 503, as HTTP, so the
    client connects again (reaching a replica still serving) rather than open a connection
    that would be closed at once."""
    svc, state = request[SERVICES], request[STATE]
    state.dialect = _errors_dialect(request)
    return await relay(request, svc, state, shutdown_failure(svc, state))


async def not_found(request: web.Request) -> web.StreamResponse:
    svc, state = request[SERVICES], request[STATE]
    state.dialect = _errors_dialect(request)
    failure = bad_request(
        "no such endpoint; the gateway serves /v1/..., Gemini's /v1beta/..., and /healthz, /readyz, /metrics",
        "not_found",
        status=404,
    )
    return await relay(request, svc, state, failure)


# TRACE echoes the request it got, the operator's upstream credential included, once the
# gateway has put it on (RFC 9110 §9.3.8: "A client MUST NOT generate fields in a TRACE request
# containing sensitive data that might be disclosed by the response"); CONNECT asks for a tunnel,
# which the gateway never opens. Neither is forwarded.
REFUSED_METHODS = frozenset({"TRACE", "CONNECT"})
# What the forwarded /v1/... paths take, for the Allow of a refused TRACE or CONNECT.
PASSTHROUGH_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def method_not_allowed(allow: tuple[str, ...]) -> Handler:
    """A 405 in the error shape of the path's API, with ``Allow`` (RFC 9110 §15.5.6)."""

    async def refuse(request: web.Request) -> web.StreamResponse:
        svc, state = request[SERVICES], request[STATE]
        state.dialect = _errors_dialect(request)
        failure = bad_request(
            f"{request.method} is not served on this path; it takes {', '.join(allow)}",
            "method_not_allowed", status=405,
        )  # fmt: skip
        failure.headers.append(("Allow", ", ".join(allow)))
        return await relay(request, svc, state, failure)

    return refuse


def _errors_dialect(request: web.Request) -> Dialect:
    gemini = gemini_caller(request) or gemini_call(request.method, request.path)
    return dialect_for_errors(request.path, "anthropic-version" in request.headers, gemini)


def key_param_of(request: web.Request) -> str | None:
    """The query parameter ``passthrough`` takes a key in for this request (a Gemini caller's ``key``)."""
    return _errors_dialect(request).key_param


def forwarded_query(request: web.Request, dialect: Dialect) -> str:
    """The client's query string as it goes upstream: as the client encoded it, without the
    key parameter its API takes (Gemini's ``?key=``), which is a credential for the gateway,
    never for the provider. ``request.query_string`` is decoded: forwarded, the openai SDK's
    ``my+project+%231`` put a space in the upstream's request line and cut the rest at the
    ``#``, and a ``%00`` put a NUL there."""
    raw = request.rel_url.raw_query_string
    param = dialect.key_param
    if param is None or param not in request.query:
        return raw
    return "&".join(p for p in raw.split("&") if unquote_plus(p.partition("=")[0]) != param)


async def authenticate(svc: Services, request: web.Request) -> Failure | None:
    """Only holders of a gateway key may spend the operator's provider keys: in a credential
    header, or in the query parameter the request's API takes a key in (Gemini's ``key``).
    A key shaped as an issued one and not known here is looked for in the store once more
    before it is refused (``IssuedKeys.look_again``): it may have just been issued elsewhere."""
    state = request[STATE]
    param = state.dialect.key_param
    query_key = request.query.get(param) if param else None
    if query_key is not None and any(c in query_key for c in "\r\n\x00"):
        # Decoded from the URL, it may hold what no header value may (RFC 9110 §5.5), and in
        # pass-through it goes upstream in one (x-goog-api-key): a 500 or a NUL on the wire.
        return bad_request(f"the key in '?{param}=' holds a line break or NUL, which no header may carry",
                           "invalid_key_param")
    result = await identify(svc, request.headers, query_key, look=not request.get(LOOKED_AGAIN, False))
    if result.ok:
        state.key = result.key
        return None
    svc.telemetry.client_auth_refusals.labels(result.outcome).inc()
    code = ("missing_client_key" if result.outcome == "missing"
            else "expired_client_key" if result.outcome == "expired"
            else "disabled_client_key" if result.outcome == "disabled" else "invalid_client_key")  # fmt: skip
    message = result.message_for(state.dialect.api)
    if accounting.is_codex(request.headers):
        # Codex (0.171, measured) retries a 401 five times, as it does a 403: 6 requests in
        # 6.6 s, none of which a key can pass. It stops at once on a 400 and shows its body, so
        # it gets the same refusal as a 400, as a model its key may not use already does.
        return gateway_failure(400, Classification.of(ErrorType.AUTH), message, code, final=True)
    failure = gateway_failure(401, Classification.of(ErrorType.AUTH), message, code, final=True)
    failure.headers.append(("WWW-Authenticate", WWW_AUTHENTICATE))
    return failure


async def _admit(request: web.Request, svc: Services, dialect: Dialect) -> Inbound | Failure:
    body = await read_body(request, svc.limits.max_body_bytes, svc.limits.idle_s, svc.limits.deadline_s)
    if isinstance(body, Failure):
        return body
    doc = parse_json_object(body)
    if isinstance(doc, Failure):
        return doc
    inbound = dialect.admit(body, doc, Where(request.match_info, request.query))
    return bad_request(inbound.message, inbound.code) if isinstance(inbound, Rejection) else inbound


def _route(svc: Services, state: RequestState, model: str | None, api: str | None = None) -> Route | Failure:
    route = svc.chain_speaking(api) if model is None and api is not None else svc.chain_for(model)
    if route is None:
        patterns = ", ".join(p for u in svc.cfg.upstreams for p in u.models)
        shown = (model or "")[:128]
        return bad_request(
            f"no upstream is configured for model '{shown}'; configured patterns: {patterns}",
            "model_not_found",
            status=404,
        )
    state.upstream = route.upstreams[0].name
    svc.budget.record_request()
    return route


def _canonical(inbound: Inbound) -> bytes:
    # Agents resend a failed turn re-serialised (Codex reorders a map on every reconnect):
    # the same request must be recognised whatever the key order. orjson does this ~10x
    # faster than json on agent-sized bodies; json takes what orjson refuses (huge ints).
    payload = inbound.payload
    if "client_metadata" in payload:
        # A client's telemetry, never the answer's: Codex stamps each WebSocket resend of a turn
        # with its time (``x-codex-ws-stream-request-start-ms``), and no resend was known as a
        # repeat: a permanent 429 cost 33 upstream calls a turn, 9 over HTTPS (audit).
        payload = {k: v for k, v in payload.items() if k != "client_metadata"}
    try:
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        pass
    try:
        return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    except RecursionError:  # nested deeper than json writes (~990 of the 1024 levels read)
        return inbound.body


def _credential(request: web.Request) -> str:
    """What identifies the caller for the loop breaker (hashed there, never stored)."""
    h = request.headers
    # Gemini's too (a header or ?key=): without them every Gemini caller shared one
    # fingerprint, and one caller's refused key was answered to the next from memory.
    places = (*(h.get(k, "") for k in ("Authorization", "x-api-key", "api-key", "x-goog-api-key")),
              request.query.get("key", ""))  # fmt: skip
    return "\n".join(places)


def _answered_by(state: RequestState, route: Route, hit: Recalled) -> UpstreamRuntime | None:
    """Names the upstream (or pool) whose answer ``hit`` replays in ``state.upstream``, and
    returns that upstream when it is one of the route's: not the route's first, which for a pool
    is a deployment that may never have been asked. A name no longer on the route (the config
    changed), or none (remembered by a version that kept no name), names the route's first
    hop: the pool, or the upstream itself."""
    hop = route.hops[0]
    state.upstream = hop.name
    if hit.upstream is None:
        return None
    for up in route.upstreams:
        if up.cfg.name == hit.upstream:
            state.upstream = hit.upstream
            return up
    if any(h.name == hit.upstream for h in route.hops):
        state.upstream = hit.upstream  # a pool that answered itself (every deployment sat out)
    return None


def _from_memory(svc: Services, state: RequestState, hit: Recalled) -> Failure:
    state.from_memory = hit.repeats
    state.retries_settled = True  # the gateway already did what retrying could do
    c = hit.classification
    # Only a wait the provider (or an open circuit) named is passed on; the window of a
    # given-up outage is our own guess, and stamping it would only time the client's next
    # repeat to arrive just after we forget.
    named = c.retry_after_s is not None or c.reset_at_ms is not None
    wait = hit.retry_after_s(svc.wall()) if named else None
    if wait is not None:
        c = Classification(c.type, c.retryable, float(wait), round((svc.wall() + wait) * 1000),
                           c.provider_code, c.message, c.evidence)  # fmt: skip
    return Failure(c, hit.status, list(hit.headers), hit.body, final=True)


def _fingerprint(svc: Services, request: web.Request, inbound: Inbound) -> Fingerprint:
    # Of the admitted payload, whenever it is made: the stages after admission build their
    # own payloads and never change the admitted one in place (copy on write), so a failure
    # fingerprinted after them matches the repeat fingerprinted before them.
    return svc.loop.fingerprint(request.path, _canonical(inbound), _credential(request))


async def _remember(
    svc: Services, state: RequestState, plan: RetryPlan, outcome: Outcome,
    request: web.Request, inbound: Inbound, fingerprint: Fingerprint | None, turn: Recalled | None,
) -> None:  # fmt: skip
    # Only answers that cost an upstream call are worth remembering; a stream that started
    # is a Success here, so nothing after a client saw bytes is ever replayed. Nor a failure
    # the client's head time made (Gemini CLI's 504 at 57 s): the CLI's retry of it was
    # answered from memory, even once the upstream had recovered (review).
    if isinstance(outcome, Failure) and state.attempts > 0 and not plan.client_bound():
        status, body = rendered(state, outcome)
        answer = Answer(status, body, tuple(outcome.headers), state.upstream)
        fp = fingerprint if fingerprint is not None else _fingerprint(svc, request, inbound)
        await svc.loop.remember(fp, answer, outcome.classification, turn=turn)
    elif turn is not None and fingerprint is not None and isinstance(outcome, Success):
        await svc.loop.forget(fingerprint)  # the probe got through: the turn is over


def _cap_tool_outputs(
    svc: Services, state: RequestState, dialect: Dialect, up: UpstreamRuntime, payload: dict[str, Any]
) -> dict[str, Any]:
    """Before anything is sent: the per-tool projections (whenever a rule has one), the
    per-tool limits (when ``tool_outputs.upfront``), then the opt-in cap on every output."""
    policy = svc.tool_outputs
    if policy.rules or policy.upfront:
        upfront = policy.upfront
        stage = Stage("upfront", project=True, cut=upfront, exclude=upfront, window=up.cfg.context_window)
        handled, tally = dialect.tool_outputs(payload, policy, stage)
        _count_tool_outputs(svc, state, stage, tally)
        if handled is not None:
            payload = handled
            state.tool_outputs_capped += tally.cut
    limits = svc.limits
    caps = [limits.max_tool_output_tokens] if limits.max_tool_output_tokens else []
    if limits.max_tool_output_share and up.cfg.context_window:
        caps.append(max(64, int(limits.max_tool_output_share * up.cfg.context_window)))
    if not caps:
        return payload
    capped, count = dialect.cap_tool_outputs(payload, min(caps))
    if capped is None:
        return payload
    state.tool_outputs_capped += count
    return capped


def _count_tool_outputs(svc: Services, state: RequestState, stage: Stage, tally: Tally) -> None:
    """Metrics and the log line's ``tool_outputs`` (counts and reasons, never content)."""
    counter = svc.telemetry.tool_outputs
    for outcome, n in (("projected", tally.projected), ("excluded", tally.excluded), ("cut", tally.cut)):
        if n:
            counter.labels(stage.name, outcome, "none").inc(n)
    for reason, n in tally.fallbacks.items():
        counter.labels(stage.name, "kept_raw", reason).inc(n)
    if tally.changed or tally.fallbacks:
        state.tool_outputs = {**(state.tool_outputs or {}), stage.name: tally.report()}


def _answered_with_nothing(plan: RetryPlan, outcome: Outcome) -> bool:
    return isinstance(outcome, Failure) and plan.answered_with_nothing(outcome.classification)


async def _probe(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, payload: dict[str, Any]
) -> Outcome:
    """Ask once without streaming what the upstream objects to. Its error (an overflow, say)
    goes on through the pipeline like any; its answer reaches the client as a stream."""
    # The probe is not a stream: a cut is an ordinary transport failure again (a pooled
    # connection the server closed after the empty stream, say), retried as usual.
    streaming = plan.empty_is_final
    plan.empty_is_final, plan.last_code, plan.probing = False, None, True
    svc.tracing.next_attempt(state, "probe")
    try:
        return await _probe_once(svc, state, plan, call, payload)
    finally:
        plan.empty_is_final, plan.probing = streaming, False  # a rescue streams again


async def _probe_once(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, payload: dict[str, Any]
) -> Outcome:
    dialect = state.dialect  # the client's: answers are translated back before they get here
    again = resent(call, dialect.without_stream(payload))
    if isinstance(again, Failure):
        return again
    buffered, body = again
    # Its answer reaches the client as a stream (``_as_stream``), as any one answer to a stream.
    return await send_one(svc, state, plan, dataclasses.replace(buffered, mode=ReadMode.BUFFER), body)


def _as_stream(dialect: Dialect, outcome: Success, inbound: Inbound) -> Success:
    """A buffered answer in the client's API, made the stream the client asked for
    (``apis/synthesize.py``). A body that is no JSON object is relayed as it came."""
    try:
        doc = json.loads(outcome.body)
    except (ValueError, RecursionError):
        return outcome
    if not isinstance(doc, dict):
        return outcome
    # A translated answer's usage was read from the upstream's own (the client's API may have
    # no field for a count it made, Anthropic's cache writes in chat's).
    usage = outcome.usage if outcome.usage is not None else dialect.body_usage(doc)
    headers = with_content_type(outcome.headers, "text/event-stream")
    if not any(k.lower() == "cache-control" for k, _ in headers):
        headers.append(("Cache-Control", "no-cache"))
    return Success(200, headers, body=dialect.replay_as_stream(doc, inbound.payload), usage=usage)


async def _refused_as_sent(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call, asked: Asked, outcome: Outcome,
    ahead: Onward | None, in_pool: InPool | None = None, moved: list[Call] | None = None,
) -> Outcome:
    """A request the model refuses for what it asks rather than for what it says, sent again
    fixed: an output budget above the limit the refusal states (once), a parameter the model
    does not take (up to three), reasoning signed by another account (once). A model that
    refuses two things answers one at a time. A parameter left out on a pool's deployment
    (``in_pool``) goes to a sibling where that deployment refuses it as it would move a request
    on (``moved`` gets the sibling's call, whose refusal the next fix is made for)."""
    for _ in range(2 + param_fix.MAX_FIXES):
        if not isinstance(outcome, Failure):
            return outcome
        call = moved[-1] if moved else call
        again = await output_cap.rescue(svc, state, plan, call, _asked_of(asked, call), outcome, ahead,
                                        in_pool)  # fmt: skip
        if again is outcome:
            again = await param_fix.rescue(svc, state, plan, call, outcome, ahead, in_pool)
        if again is outcome:
            again = await reasoning_fix.rescue(svc, state, plan, call, outcome, ahead, in_pool)
        if again is outcome:
            return outcome
        outcome = again
    return outcome


def _warmed_elsewhere(svc: Services, payload: dict[str, Any]) -> bool:
    """Whether the turn is chained to a response the gateway made for a WebSocket ``generate:
    false`` turn (``apis/responses/warm_ids.py``). The connection that made it sends its turn
    expanded, without the id: one that still names it comes from elsewhere."""
    previous = payload.get("previous_response_id")
    return isinstance(previous, str) and svc.warm_ids.made(previous)


def _not_held(response_id: str) -> Failure:
    """OpenAI's own 400 for a previous response it does not hold, answered without a call."""
    c = Classification(ErrorType.UNKNOWN, False, provider_code="previous_response_not_found",
                       evidence="the gateway's own warm-up id, chained away from its connection")  # fmt: skip
    return Failure(c, 400, [("Content-Type", "application/json")], not_found_body(response_id), final=True)


def _client_compacts(svc: Services, request: web.Request) -> bool:
    mode = svc.cfg.compression.self_compacting_clients
    return mode == "pass_through" and compacts_itself(request.headers)


def _overflowed(outcome: Outcome) -> bool:
    return isinstance(outcome, Failure) and outcome.classification.type is ErrorType.CONTEXT_OVERFLOW


def _siblings(
    svc: Services, state: RequestState, plan: RetryPlan, route: Route, call: Call,
    call_for: Callable[[UpstreamRuntime], Call | Failure], conversation: str | None, moved: list[Call],
) -> InPool | None:  # fmt: skip
    """How a rescue of a pool deployment's refusal is sent (``pool.resend_in_pool``: ``moved``
    gets the sibling's call that answered); None: ``call``'s upstream is in no pool."""
    hop = next((h for h in route.hops if h.pool is not None and any(m is call.up for m in h.members)), None)
    if hop is None or hop.pool is None:
        return None
    pool = hop.pool

    async def send(again: Call, body: bytes, remade: Remade) -> Outcome:
        return await resend_in_pool(svc, state, plan, pool, again, body, remade, call_for, conversation,
                                    moved)  # fmt: skip

    return send


async def _overflow(
    svc: Services, state: RequestState, request: web.Request, plan: RetryPlan, call: Call,
    payload: dict[str, Any], overflow: Failure, elsewhere: InPool | None = None,
) -> Outcome:  # fmt: skip
    c = overflow.classification
    prompt = None  # the provider's count of the prompt alone, where its refusal counts more
    if c.per_minute:
        fit = per_minute_fit.fitted_output(c.message, overflow.sent_output)
        if not fit.prompt_over:  # lowering max_tokens is no compaction: every client gets it
            return await _fit_per_minute(svc, state, plan, call, payload, overflow, fit)
        # No budget fits: the prompt is too long for the window the refusal states, which the
        # compress-and-retry below reads from it as from any overflow's, calibrated by the
        # prompt alone. The retry asks no more than was sent: a cap a fixed resend met holds.
        if overflow.sent_output:
            payload = state.dialect.lower_output(payload, overflow.sent_output) or payload
        prompt = fit.prompt_tokens
    if _client_compacts(svc, request):
        state.compression = {"outcome": "passed_to_client", "reason": "the client compacts itself"}
        svc.telemetry.compressions.labels(call.up.cfg.name, "passed_to_client").inc()
        return overflow
    return await _rescue(svc, state, plan, call, payload, overflow, prompt, elsewhere)


async def _rescue(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call,
    payload: dict[str, Any], overflow: Failure, prompt_tokens: int | None = None,
    elsewhere: InPool | None = None,
) -> Outcome:  # fmt: skip
    """Exactly one compress-and-retry. A second overflow is answered with the first one: its
    numbers are about the client's own request, which is what an agent trims from. On a pool's
    deployment (``elsewhere``), a refusal that moves a request to a sibling moves the retry too,
    compressed once: kept on that key, a 429 of 20 s was waited out while a sibling was free, and
    one of an hour was the client's answer (remembered for a minute by the loop breaker)."""
    up = call.up
    counter = svc.telemetry.compressions
    message = overflow.classification.message
    excluded, removed = _exclude_oversized(svc, state, up, payload, message)
    payload = excluded if excluded is not None else payload
    result = state.dialect.compress(
        payload, error_message=message, context_window=up.cfg.context_window, removed_tokens=removed,
        prompt_tokens=prompt_tokens,
    )
    state.compression = {"outcome": result.outcome, **result.report}
    # Outputs excluded are sent even when nothing more could be removed: the one retry is theirs.
    retry = result.payload if result.payload is not None else excluded
    if retry is None:
        counter.labels(up.cfg.name, "not_applicable").inc()
        return overflow
    state.compressed = True
    again = resent(call, retry)
    if isinstance(again, Failure):
        counter.labels(up.cfg.name, "not_applicable").inc()
        return overflow
    if result.headers:  # a beta the changed body's fields need
        sent, body = again
        again = dataclasses.replace(sent, headers=with_added(sent.headers, result.headers)), body
    svc.tracing.next_attempt(state, "compress_retry")
    if elsewhere is None:
        outcome = await send_one(svc, state, plan, *again)
    else:
        added = result.headers or ()

        def compressed(base: Call) -> Call | Failure:  # a sibling's retry, compressed once
            made = resent(base, retry)
            if isinstance(made, Failure):
                return made
            sent, body = made
            headers = with_added(sent.headers, added) if added else sent.headers
            return dataclasses.replace(sent, headers=headers, body=body)

        outcome = await elsewhere(*again, compressed)
    label = "still_overflow" if _overflowed(outcome) else "applied"
    state.compression["outcome"] = label
    counter.labels(up.cfg.name, label).inc()
    return overflow if label == "still_overflow" else outcome


async def _fit_per_minute(
    svc: Services, state: RequestState, plan: RetryPlan, call: Call,
    payload: dict[str, Any], overflow: Failure, fit: per_minute_fit.Fit,
) -> Outcome:  # fmt: skip
    """The one rescue of a request over a tokens-per-minute window whose prompt fits it: its
    output budget lowered by what the refusal says is over, no turn dropped
    (``policy/per_minute_fit.py``); none when the refusal gives no numbers (Azure's), and the
    overflow is answered."""
    counter = svc.telemetry.compressions
    state.compression = {"outcome": "applied" if fit.max_tokens else "not_applicable", **fit.report}
    # Named when the client named none: the budget refused was a translation's or a cap's.
    lowered = state.dialect.lower_output(payload, fit.max_tokens, True) if fit.max_tokens else None
    again = resent(call, lowered) if lowered is not None else None
    if again is None or isinstance(again, Failure):
        state.compression["outcome"] = "not_applicable"
        counter.labels(call.up.cfg.name, "not_applicable").inc()
        return overflow
    state.compressed = True
    svc.tracing.next_attempt(state, "compress_retry")
    outcome = await send_one(svc, state, plan, *again)
    label = "still_overflow" if _overflowed(outcome) else "applied"
    state.compression["outcome"] = label
    counter.labels(call.up.cfg.name, label).inc()
    return overflow if label == "still_overflow" else outcome


def _exclude_oversized(
    svc: Services, state: RequestState, up: UpstreamRuntime, payload: dict[str, Any], message: str | None
) -> tuple[dict[str, Any] | None, float]:
    """The rescue's first step: outputs of ``exclude`` tools above their limit (a share of the
    window the provider stated, else the upstream's) replaced by the structured result, and
    the tokens that removed (compression calibrates against the request the provider counted)."""
    policy = svc.tool_outputs
    if not any(r.oversized == "exclude" for r in policy.rules):
        return None, 0.0
    window = parse_overflow(message).limit or up.cfg.context_window
    stage = Stage("rescue", project=False, cut=False, exclude=True, window=window)
    handled, tally = state.dialect.tool_outputs(payload, policy, stage)
    _count_tool_outputs(svc, state, stage, tally)
    return handled, tally.tokens_removed if handled is not None else 0.0


def _asked_of(asked: Asked, call: Call) -> dict[str, Any]:
    """What ``call``'s upstream is sent again (fixed, compressed, unstreamed) built from: the
    client's payload as prepared, or the client's own for a translated call. An untranslated
    Gemini leg's has the gateway's seal swapped, as ``_call_for`` sent it the first time: read
    raw, every resend (a compressed overflow, a lowered budget, the empty-stream probe) took
    Claude's sealed thinking to Google, which refuses it (review)."""
    if call.translation is not None:
        return asked.client()
    payload = asked.payload()
    if call.dialect.api == "gemini":  # one byte search when the request carries no seal
        payload = reasoning_fix.gemini_passed(asked.inbound.body, payload)
    return payload
