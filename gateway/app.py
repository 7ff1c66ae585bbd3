"""Builds the aiohttp application: every stage of the pipeline is listed here, in order.

    observe  (around each route) request id, in-flight gauge, timing, metrics, log line
      forward (handlers)         admit → route → send with retries → rescue → relay
    stamp    (as the head leaves) the x-llm-* header contract, also for streams

Clocks, sleep, randomness, the metrics registry and the upstream sender are all
injectable: tests pass fakes instead of monkeypatching.

Each config gets a Services of its own (``_generation``); a reload (gateway/reload/) builds
the next one from the running one and swaps it in (gateway/live.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from aiohttp import web, web_response
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.apis import DIALECTS, GEMINI, OPENAI_RESPONSES
from gateway.apis.responses.warm_ids import WarmIds
from gateway.auth import FLAT_KEY_NAME, ClientAuth
from gateway.busy_poll import busy_poll
from gateway.config import GatewayConfig, PoolConfig
from gateway.keys.issued import IssuedKeys, IssuedStore, MemoryIssuedStore
from gateway.keys.ledger import Accounts
from gateway.keys.prices import Price, PriceTable
from gateway.keys.references import ReferenceTokens
from gateway.live import LIVE, Build, Closable, Live
from gateway.pipeline import accounting, forward, gemini_extras, issue_keys, key_info, websocket
from gateway.pipeline.admit import KeyParam, expect_continue
from gateway.pipeline.observe import observed, unobserved
from gateway.policy.breaker import CircuitState
from gateway.policy.loop_breaker import LoopBreaker
from gateway.redaction import upstream_secrets
from gateway.services import Lifecycle, PoolRuntime, Services, UpstreamRuntime, tool_output_policy
from gateway.state import SharedBudget, SharedCircuit, StateMetrics, StateStore, build_store
from gateway.state.affinity import AffinityTable
from gateway.state.pools import PoolState, record_id, record_key
from gateway.telemetry import Telemetry
from gateway.tracing import Tracing, build_tracing
from gateway.upstream import Sender, StartableSender, new_sender, pool_size
from gateway.workers import metrics as workers_metrics

PEERS = web.AppKey("peers", tuple[str, ...])
SNAPSHOT: web.AppKey[str | None] = web.AppKey("snapshot")  # where this worker keeps its last exposition

# What every response's Server header says. aiohttp's default, `Python/3.11 aiohttp/3.14.5`,
# tells anyone which versions' known flaws to try. aiohttp sets it on every response it sends
# (web_response.StreamResponse._prepare_headers: setdefault(Server, SERVER_SOFTWARE), read per
# response), streams and its own 400s and 500s included: replacing that module constant once
# costs nothing per request and reaches responses no hook of ours sees (malformed HTTP).
SERVER = "llm-gateway"


def create_app(
    cfg: GatewayConfig,
    *,
    sender: Sender | None = None,
    registry: CollectorRegistry | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
    rand: Callable[[], float] = random.random,
    tracing: Tracing | None = None,
    peers: Sequence[str] = (),
    snapshot: str | None = None,
) -> web.Application:
    """``peers``: the private sockets of the other workers of this machine (server.workers),
    whose metrics ``/metrics`` adds to this process's own; ``snapshot``: where this worker
    keeps its last exposition for them (gateway/workers/metrics.py)."""
    web_response.SERVER_SOFTWARE = SERVER  # type: ignore[attr-defined]  # imported there from aiohttp.http
    telemetry = Telemetry(
        registry if registry is not None else CollectorRegistry(),
        configured_models=[m for u in cfg.upstreams for m in u.models], wall=wall,
    )
    state_metrics = StateMetrics(telemetry.registry, cfg.state.backend)
    # Circuits and remembered answers are shared by replicas, so they run on wall-clock time.
    store = build_store(cfg, clock=wall, monotonic=monotonic, on_fallback=state_metrics.fallback,
                        on_wait=state_metrics.waited, on_lost=state_metrics.store_lost)  # fmt: skip
    issued = IssuedKeys(_issued_store(cfg), wall, shared=cfg.state.backend != "memory", monotonic=monotonic)
    kit = _Kit(telemetry, store, state_metrics, Lifecycle(), monotonic, wall, sleep, rand, sender, tracing,
               issued)
    svc, owned, fresh = _generation(cfg, kit, None)
    _in_force(svc)
    live = Live(svc, owned, _next_generation(kit))
    issued.on_change = lambda: _issued_in_force(live.services, issued)
    telemetry.in_flight.set_function(lambda: kit.life.in_flight)
    # aiohttp's own cap sits above ours so that our reader, not aiohttp, answers the 413.
    app = web.Application(client_max_size=cfg.server.max_body_bytes + 1)
    app[LIVE] = live
    app[PEERS] = tuple(peers)
    app[SNAPSHOT] = snapshot
    if fresh is not None:
        app.on_startup.append(_start(fresh))
    app.on_startup.append(lambda _app: issued.start())  # a restarted replica's issued keys, before it serves
    app.on_cleanup.append(_close(live, store, issued))

    app.router.add_get("/healthz", unobserved(healthz))
    app.router.add_get("/readyz", unobserved(readyz))
    app.router.add_get("/metrics", unobserved(metrics))
    # Every route below is observed (request id, timing, metrics, the log line); the last
    # one catches every path, so no request escapes it.
    for dialect in DIALECTS:
        pipeline = forward.full_pipeline(dialect)
        handler = observed(gemini_extras.json_array_or(pipeline) if dialect is GEMINI else pipeline)
        expect = expect_continue(_key_param(dialect.key_param))
        for path in dialect.paths:
            app.router.add_post(path, handler, expect_handler=expect)
    app.router.add_route("HEAD", "/api/hello", observed(forward.hello))
    app.router.add_route("HEAD", "/", observed(forward.hello))  # what current Claude Code probes instead
    for path in gemini_extras.COUNT_PATHS:
        app.router.add_post(path, observed(gemini_extras.count_tokens),
                            expect_handler=expect_continue(_key_param(GEMINI.key_param)))  # fmt: skip
    app.router.add_get("/v1beta/models", observed(gemini_extras.list_gemini_models))
    app.router.add_get("/v1beta/models/{model}", observed(gemini_extras.get_gemini_model))
    # OpenAI's paths too: a caller with a Gemini key (the google-genai SDK) gets Gemini's answer.
    app.router.add_get("/v1/models", observed(gemini_extras.gemini_or(forward.passthrough,
                                                                      gemini_extras.list_gemini_models)))
    app.router.add_get("/v1/models/{model}", observed(gemini_extras.gemini_or(forward.passthrough,
                                                                              gemini_extras.get_gemini_model)))
    # The Responses API's WebSocket mode: the connection is no request, each of its turns is.
    turn_pipeline = websocket.turn_handler(forward.full_pipeline(OPENAI_RESPONSES))
    turn = observed(turn_pipeline, at_once=websocket.answered_at_once)  # its answers are frames
    refused, unauthenticated = observed(forward.upgrade_refused), observed(forward.upgrade_unauthenticated)
    draining = observed(forward.upgrade_draining)
    responses_get = websocket.serve(observed(forward.passthrough), refused, unauthenticated, draining, turn)
    app.router.add_get("/v1/responses", responses_get)
    app.router.add_get("/v1/gateway/key", observed(key_info.own_key))
    app.router.add_get("/v1/gateway/keys", observed(key_info.all_keys))
    app.router.add_post("/v1/gateway/keys", observed(issue_keys.issue))
    app.router.add_delete("/v1/gateway/keys/{name}", observed(issue_keys.revoke))
    # The gateway's own namespace: another method or path under it is never a provider's.
    # TRACE and CONNECT first on every catch-all: the router tries the longest prefix's
    # resource first, so one route on "/" alone would leave /v1/... forwarding them.
    refused = observed(forward.method_not_allowed(forward.PASSTHROUGH_METHODS))
    for catch_all in ("/v1/gateway/{tail:.*}", "/v1/{tail:.*}", "/{tail:.*}"):
        for method in sorted(forward.REFUSED_METHODS):
            app.router.add_route(method, catch_all, refused)
    app.router.add_route("*", "/v1/gateway/{tail:.*}", observed(forward.not_found))
    app.router.add_route("*", "/v1/{tail:.*}", observed(forward.passthrough),
                         expect_handler=expect_continue(forward.key_param_of))  # fmt: skip
    app.router.add_route("*", "/{tail:.*}", observed(forward.not_found))
    return app


def _key_param(param: str | None) -> KeyParam:
    """A route whose API is fixed: its key parameter, whatever the request."""
    return lambda request: param


@dataclass(frozen=True)
class _Kit:
    """What every Services of the process shares, whatever a reload changes: the metrics
    (series go on), the state store (spend, limits, circuits), the lifecycle, the clocks."""

    telemetry: Telemetry
    store: StateStore
    state_metrics: StateMetrics
    life: Lifecycle
    monotonic: Callable[[], float]
    wall: Callable[[], float]
    sleep: Callable[[float], Awaitable[None]]
    rand: Callable[[], float]
    sender: Sender | None  # the caller's (tests): every Services', never closed here
    tracing: Tracing | None  # the caller's, else built from the config
    issued: IssuedKeys  # keys issued at run time: kept through every reload


def _generation(
    cfg: GatewayConfig, kit: _Kit, previous: Services | None
) -> tuple[Services, list[Closable], StartableSender | None]:
    """The Services of ``cfg``; what it owns (to close once no Services uses it); a sender
    built for it, to start before it serves. From ``previous``, what the new config would build
    the same is kept: the connection pool, the retry budget's counts, the loop breaker's key,
    the tracer, pools' affinity and load."""
    telemetry, store = kit.telemetry, kit.store
    telemetry.configure(cfg.upstreams, (d for p in cfg.pools for d in p.deployments))
    telemetry.retain_keys(_key_names(cfg, kit.issued))
    fresh = None
    if kit.sender is not None:
        sender: Sender = kit.sender
    elif previous is not None and _sender_fit(previous.cfg) == _sender_fit(cfg):
        sender = previous.sender
    else:
        sender = fresh = new_sender(cfg)
    upstreams = {}
    for u in cfg.upstreams:
        pool = cfg.pool_of(u.name)
        circuit = SharedCircuit(
            store, u.name, cfg.circuit_breaker, kit.wall,
            distinct_models=cfg.circuit_breaker.models_to_open,
            cache_s=cfg.state.cache_ms / 1000, on_change=_circuit_gauge(telemetry, u.name),
            # Siblings carry a pool deployment's traffic as a fallback would.
            has_fallback=bool(u.fallbacks or (pool and (len(pool.deployments) > 1 or pool.fallbacks))),
            rand=kit.rand, probe_ttl_s=_probe_ttl_s(cfg),
        )  # fmt: skip
        upstreams[u.name] = UpstreamRuntime(u, circuit)
    pool_state = previous.pool_state if previous is not None else None
    if pool_state is None and cfg.pools:
        pool_state = PoolState(store, kit.wall, kit.monotonic, cache_s=cfg.state.cache_ms / 1000)
    if pool_state is not None:
        # Its own derivation: the loop breaker's key is also made from the secret, and neither
        # digest should be computable from the other's.
        # Only the operator's secret: a drawn one (server.workers) is its replica's alone, and
        # every replica must name a conversation alike to find its home.
        secret = cfg.loop_breaker.shared_secret
        pool_state.home_key = hashlib.sha256(b"affinity\0" + secret.encode()).digest() if secret else None
    pools = {}
    for p in cfg.pools:
        members = tuple(upstreams[d] for d in p.deployments)
        renamed = _renamed(previous.pools.get(p.name) if previous is not None else None, members,
                           record_key(cfg.loop_breaker.shared_secret))  # fmt: skip
        pools[p.name] = PoolRuntime(p, members, _affinity(p, kit.monotonic, previous, pool_state, renamed),
                                    renamed)
    if previous is not None and previous.cfg.retry.budget == cfg.retry.budget:
        budget = previous.budget
    else:
        budget = SharedBudget(store, cfg.retry.budget, kit.monotonic)
    if previous is not None and _loop_fit(previous.cfg) == _loop_fit(cfg):
        loop = previous.loop
    else:
        loop = LoopBreaker(cfg.loop_breaker, store, kit.wall, no_hint_window_s=cfg.circuit_breaker.open_s,
                           on_event=kit.state_metrics.loop_event, routes=_routes_digest(cfg))  # fmt: skip
    if previous is not None and previous.cfg.loop_breaker.secret == cfg.loop_breaker.secret:
        warm_ids = previous.warm_ids  # a warm-up id minted before the reload is known after it
    else:
        warm_ids = WarmIds.keyed(cfg.loop_breaker.secret)
    if kit.tracing is not None:
        tracing = kit.tracing
    elif previous is not None and previous.cfg.tracing == cfg.tracing:
        tracing = previous.tracing
    else:
        tracing = build_tracing(cfg.tracing, kit.monotonic)
    tracing.know_secrets(_own_secrets(cfg))
    if previous is not None and previous.cfg.server.busy_poll_us == cfg.server.busy_poll_us:
        polling = previous.busy_poll  # its window, adapted to the traffic so far, carries on
    else:
        # On the real clock, not kit.monotonic: it times the loop itself, and a test's frozen
        # clock would keep it polling for ever.
        polling = busy_poll(cfg.server.busy_poll_us)
    svc = Services(
        cfg=cfg,
        sender=sender,
        telemetry=telemetry,
        budget=budget,
        store=store,
        loop=loop,
        upstreams=upstreams,
        monotonic=kit.monotonic,
        wall=kit.wall,
        sleep=kit.sleep,
        rand=kit.rand,
        auth=ClientAuth.from_config(cfg, kit.issued.keys.values()),
        life=kit.life,
        tool_outputs=tool_output_policy(cfg.tool_outputs),
        tracing=tracing,
        pools=pools,
        accounts=_accounts(cfg, store, kit.wall, previous) if cfg.keys else None,
        pool_state=pool_state,
        busy_poll=polling,
        issued=kit.issued,
        warm_ids=warm_ids,
    )
    owned: list[Closable] = [budget, tracing]
    if pool_state is not None:
        owned.append(pool_state)  # its sends not yet reported go to the other replicas at shutdown
    if kit.sender is None:
        owned.append(sender)  # type: ignore[arg-type]  # new_sender's, so a StartableSender
    return svc, owned, fresh


def _next_generation(kit: _Kit) -> Build:
    async def build(cfg: GatewayConfig, previous: Services) -> tuple[Services, Sequence[Closable]]:
        svc, owned, fresh = _generation(cfg, kit, previous)
        if fresh is not None:
            await fresh.start()  # before any request can reach it
            _issued_in_force(svc, kit.issued)  # a key issued or revoked meanwhile
        _in_force(svc)  # built: nothing refuses it now
        return svc, owned

    return build


def _in_force(svc: Services) -> None:
    """``svc``'s pools are the ones in force: what a request of an older config that waited
    for a reset checks before it picks again (pipeline/pool.py)."""
    if svc.pool_state is not None:
        svc.pool_state.in_force({name: p.member_cfgs for name, p in svc.pools.items()},
                                record_key(svc.cfg.loop_breaker.shared_secret),
                                {name: p.members for name, p in svc.pools.items()})  # fmt: skip


def _issued_in_force(svc: Services, issued: IssuedKeys) -> None:
    """The keys issued at run time as they are now, in ``svc``'s ring: at each change the store
    tells of, and after a reload's awaits (a change meanwhile reached the Services it replaced)."""
    svc.auth = ClientAuth.from_config(svc.cfg, issued.keys.values())
    svc.telemetry.retain_keys(_key_names(svc.cfg, issued))


def _key_names(cfg: GatewayConfig, issued: IssuedKeys) -> list[str]:
    return [k.name for k in cfg.keys] + list(issued.keys)


def _issued_store(cfg: GatewayConfig) -> IssuedStore:
    if cfg.state.backend == "memory":
        return MemoryIssuedStore()
    from gateway.state.issued_redis import RedisIssuedStore  # only deployments with redis pay it
    from gateway.state.redis_store import connect

    assert cfg.state.url is not None  # the config validator guarantees it
    # An admin's call and the poll wait as long as a store's operation may: they are off the
    # request path, and a slow answer beats a refused issue.
    timeout_s = max(cfg.state.timeout_ms / 1000, cfg.state.recover_s)
    return RedisIssuedStore(connect(cfg.state.url, timeout_s, max_connections=1), cfg.state.key_prefix)


def _sender_fit(cfg: GatewayConfig) -> object:
    """What a sender is built from: equal, the running one serves the new config as well."""
    return cfg.server.upstream_client, cfg.server.upstream_proxy, cfg.timeouts, pool_size(cfg)


def _loop_fit(cfg: GatewayConfig) -> object:
    return cfg.loop_breaker, cfg.circuit_breaker.open_s, _routes_digest(cfg)


def _routes_digest(cfg: GatewayConfig) -> bytes:
    """Where requests go and with what credentials: a remembered failure is the answer of one
    such setup, and a reload that changes it (the operator's fix for that failure) must not be
    answered from memory. The same on every replica that loaded the same file."""
    parts = [u.model_dump_json() for u in cfg.upstreams] + [p.model_dump_json() for p in cfg.pools]
    return hashlib.sha256("\n".join(parts).encode()).digest()


def _accounts(cfg: GatewayConfig, store: StateStore, wall: Callable[[], float],
              previous: Services | None) -> Accounts:  # fmt: skip
    prices = PriceTable.of({glob: Price(p.input, p.output, p.cache_read, p.cache_write, p.cache_write_1h,
                                        web_search=p.web_search)
                            for glob, p in cfg.prices.items()})  # fmt: skip
    refs = cfg.accounting.reference_tokens
    accounts = Accounts(store, prices, wall, default_max_tokens=cfg.accounting.default_max_tokens,
                        reserved_output_max=cfg.accounting.reserved_output_max,
                        reserved_searches=cfg.accounting.reserved_searches,
                        closed_when_store_down=cfg.accounting.when_store_down == "closed",
                        references=ReferenceTokens(refs.document, refs.image),
                        on_soft_limit=accounting.soft_limit_line)  # fmt: skip
    if previous is not None and previous.accounts is not None:
        # What the store last answered stays shown through a reload made during its outage.
        accounts.readings = previous.accounts.readings
    return accounts


def _own_secrets(cfg: GatewayConfig) -> tuple[str, ...]:
    """The keys the config holds (upstreams' credential headers too): what content capture must
    never put in a span."""
    keys = {secret for u in cfg.upstreams for secret in upstream_secrets(u.api_key, u.headers)}
    keys.update(cfg.server.client_keys)
    keys.update(k for named in cfg.keys for k in named.key or ())
    return tuple(sorted(keys))


def _renamed(before: PoolRuntime | None, members: tuple[UpstreamRuntime, ...],
             key: bytes | None = None) -> dict[str, str]:  # fmt: skip
    """The deployments of a pool that a reload renamed: an old name gone, a new one added with
    the same key, base URL and headers (one each way; ``record_id``). A rename that tidies a
    config is the same key, and the same prompt cache: taken for a removal, every conversation
    homed there moved. One with another ``OpenAI-Project`` is another project's cache and
    limits."""
    if before is None:
        return {}
    names = {m.cfg.name for m in members}
    gone = {record_id(m.cfg, key): m.cfg.name for m in before.members if m.cfg.name not in names}
    added = [(record_id(m.cfg, key), m.cfg.name) for m in members if m.cfg.name not in before.names]
    counts = Counter(rid for rid, _ in added)
    return {gone[rid]: name for rid, name in added
            if rid is not None and rid in gone and counts[rid] == 1}  # fmt: skip


def _affinity(
    pool: PoolConfig, clock: Callable[[], float], previous: Services | None, pool_state: PoolState | None,
    renamed: Mapping[str, str],
) -> AffinityTable | None:
    a = pool.affinity
    if not a.enabled:
        return None
    before = previous.pools.get(pool.name) if previous is not None else None
    if before is None or before.affinity is None:
        shared = pool_state if pool_state is not None and pool_state.shared else None
        return AffinityTable(a.max_entries, a.idle_s, clock, pool.name, shared)
    # Conversations stay on the deployment that holds their cache across a reload, a weight
    # changed or a key added to the pool included; one whose deployment was removed moves, and
    # the break is counted ("removed"). Its conversations are claimed again from the store
    # (shared): another replica may move them before a later reload puts the deployment back.
    table = before.affinity if before.cfg.affinity == a else before.affinity.resized(a.max_entries, a.idle_s)
    table.renamed(renamed)
    table.removed(set(before.cfg.deployments) - set(pool.deployments) - set(renamed))
    return table


def _probe_ttl_s(cfg: GatewayConfig) -> float:
    """How long a probe's claim is held: the longest a probe waits for its answer to start
    (connect, then head or first token), with a margin; longer only if its replica died. A
    streamed probe decides when its body ends: one that outlasts this lets one more request
    probe, where a verdict at the head let every request through."""
    t = cfg.timeouts
    return t.connect_s + max(t.first_byte_s, t.first_token_s or 0.0) + 30.0


def _circuit_gauge(telemetry: Telemetry, upstream: str) -> Callable[[str | None, CircuitState], None]:
    gauge = telemetry.circuit_open

    def on_change(model: str | None, state: CircuitState) -> None:
        # This replica's own transitions, at once; a scrape re-reads the shared state anyway.
        gauge.set(upstream, telemetry.circuit_label(model), 1 if state is CircuitState.OPEN else 0)

    return on_change


async def _read_circuits(svc: Services) -> None:
    """The circuit gauge from the state store, as of this scrape (see CircuitGauge)."""
    t = svc.telemetry
    for name, up in svc.upstreams.items():
        states = await up.circuit.refusing()
        t.circuit_open.replace(name, ((t.circuit_label(m), 1.0 if r else 0.0) for m, r in states))


def _start(sender: StartableSender) -> Callable[[web.Application], Awaitable[None]]:
    async def start(app: web.Application) -> None:
        await sender.start()

    return start


def _close(live: Live, store: StateStore, issued: IssuedKeys) -> Callable[[web.Application], Awaitable[None]]:
    async def close(app: web.Application) -> None:
        await live.close()  # senders, retry budgets (their last flush), tracers
        await issued.close()
        await store.close()

    return close


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    if request.app[LIVE].life.draining:
        return web.json_response({"status": "draining"}, status=503)
    return web.json_response({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    body = await _own_metrics(request.app)
    peers = request.app[PEERS]
    if peers:
        others = await workers_metrics.gather(peers)
        # Parsing and rendering every worker's exposition is pure Python: on the loop, a
        # scrape of ~24k series froze the worker's requests for 1.4-2.7 s (probe p99 14 ms ->
        # ~1 s at one scrape every 5 s). In a thread the loop keeps its turns of the GIL.
        merge = workers_metrics.merge
        body = await asyncio.to_thread(merge, [body.decode(), *others.texts], reporting=1 + others.answered,
                                       stale_s=others.stale_s)  # fmt: skip
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _read_budgets(svc: Services) -> None:
    """The budget and key-expiry gauges, as of this scrape (see BudgetGauges). While the
    shared store does not answer, a read comes from this replica's memory, which holds no
    other replica's spend: the last good reading stays instead (a budget alert must not
    resolve because Redis went away; the store's own fallbacks metric says it did)."""
    specs = [s for s in svc.auth.ring.by_digest.values() if s.name != FLAT_KEY_NAME]
    # The file's keys only: every issued key ends by design (keys_api.default_ttl_s), so its end
    # is no news, and LLMGatewayKeyExpiresSoon would fire for every agent run's key.
    files = {k.name for k in svc.cfg.keys}
    expiries = [(s.name, s.expires_at) for s in specs if s.expires_at is not None and s.name in files]
    readings: list[tuple[str, str, str, float, float, float, float]] | None = []
    if svc.accounts is not None:  # None: the store did not answer (found down before or during the read)
        readings = await svc.accounts.budget_readings(specs) if svc.store.healthy else None
    softs: dict[tuple[str, str, str], float] = {}
    for s in specs:
        for kind, name, b in (("key", s.name, s.budget), ("team", s.team, s.team_budget)):
            if b is not None and b.soft_usd is not None and name:
                softs[(kind, name, b.period)] = b.soft_usd
    svc.telemetry.budgets.replace(readings, expiries, [(*k, soft) for k, soft in softs.items()])


async def _own_metrics(app: web.Application) -> bytes:
    svc = app[LIVE].services
    await _read_circuits(svc)
    await _read_budgets(svc)
    # Rendering takes 120-300 ms at 10-20k series: in a thread, as merging is (above). With
    # workers it is also kept, for a scrape this worker is too slow to answer.
    return await asyncio.to_thread(workers_metrics.rendered, svc.telemetry.registry, app[SNAPSHOT])


def private_app(app: web.Application) -> web.Application:
    """What a worker serves to the other workers of its machine, on its unix socket only."""

    async def local_metrics(request: web.Request) -> web.Response:
        return web.Response(body=await _own_metrics(app), headers={"Content-Type": CONTENT_TYPE_LATEST})

    private = web.Application()
    private.router.add_get("/metrics/local", local_metrics)
    return private
