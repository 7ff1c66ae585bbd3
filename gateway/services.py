"""The collaborators of one gateway process: one :class:`Services` per config, built by
``create_app`` and again at each reload (gateway/reload/), and the :class:`Lifecycle` they all
share. A request takes the Services of its start once (``request[SERVICES]``, set by observe),
so it finishes on that config whatever a reload swaps in meanwhile.

Nothing here is a module-level global: tests build their own with fake clocks,
sleeps and senders.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from aiohttp import web

from gateway.apis.base import Dialect
from gateway.apis.responses.warm_ids import WarmIds
from gateway.auth import ClientAuth
from gateway.busy_poll import NO_BUSY_POLL, BusyPoll, NoBusyPoll
from gateway.config import GatewayConfig, PoolConfig, ToolOutputsConfig, UpstreamConfig
from gateway.keys.issued import IssuedKeys
from gateway.keys.ledger import Accounts
from gateway.policy.head_cuts import HeadCuts
from gateway.policy.loop_breaker import LoopBreaker
from gateway.policy.output_limit import OutputLimits
from gateway.policy.refused_param import ParamFixes
from gateway.policy.thinking_signers import Signers
from gateway.policy.tool_outputs import ToolOutputPolicy, ToolRule
from gateway.redaction import upstream_secrets
from gateway.routing import Outbound, pick_upstream, upstream_url, with_fixed_query
from gateway.state import SharedBudget, SharedCircuit, StateStore
from gateway.state.affinity import AffinityTable
from gateway.state.pools import PoolState
from gateway.telemetry import Telemetry
from gateway.tracing import NO_TRACING, Tracing
from gateway.translate import Leg, NoLeg, Translations, default_translations
from gateway.upstream import Sender

_CHAINS_MAX = 1024
_LEGS_MAX = 1024
_URLS_MAX = 1024


@dataclass
class UpstreamRuntime:
    cfg: UpstreamConfig
    circuit: SharedCircuit
    # Decided once per upstream rather than per request (see routing.Outbound).
    outbound: Outbound = field(init=False)
    # What an error from it must not show a client: its api_key and the credentials among its
    # configured headers (gateway/redaction.py).
    secrets: tuple[str, ...] = field(init=False)
    # Endpoint path -> its upstream URL (no query string of the client's): a handful of entries,
    # and one per model on a Gemini upstream (its path names the model).
    urls: dict[str, str] = field(init=False, default_factory=dict)
    # Its configured ``query``, encoded, and the names it replaces in a client's.
    fixed_query: str = field(init=False)
    fixed_names: frozenset[str] = field(init=False)
    # Circuit key -> the verdict of the one request retrying that model here now (True: it
    # gave up). Other requests of the model that fail meanwhile wait for it (pipeline/chain.py).
    retrying: dict[str, asyncio.Future[bool]] = field(init=False, default_factory=dict)

    # cfg.name, read on every request as a plain attribute (see Limits).
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.outbound = Outbound.of(self.cfg)
        self.secrets = upstream_secrets(self.cfg.api_key, self.cfg.headers)
        self.name = self.cfg.name
        self.fixed_query = urlencode(self.cfg.query, quote_via=quote)
        self.fixed_names = frozenset(self.cfg.query)

    # (client API, requested model) -> how such requests reach this upstream.
    legs: dict[tuple[str, str | None], Leg | NoLeg] = field(init=False, default_factory=dict)

    def leg_for(self, translations: Translations, client: Dialect, model: str | None) -> Leg | NoLeg:
        key = (client.api, model)
        leg = self.legs.get(key)
        if leg is None:
            leg = translations.leg_for(client, self.cfg, model)
            if len(self.legs) < _LEGS_MAX:  # model names come from clients
                self.legs[key] = leg
        return leg

    def url_for(self, path: str, query_string: str) -> str:
        if query_string:
            query_string = with_fixed_query(query_string, self.fixed_query, self.fixed_names)
            return upstream_url(self.cfg.base_url, path, query_string)
        url = self.urls.get(path)
        if url is None:
            url = upstream_url(self.cfg.base_url, path, self.fixed_query)
            if len(self.urls) < _URLS_MAX:  # a Gemini path holds a model name, which comes from clients
                self.urls[path] = url
        return url

    # A deployment of a pool: its answers' rate-limit headers and what is sent there are
    # counted (gateway/state/pools.py). Set by the pools that list it.
    pooled: bool = field(init=False, default=False)


@dataclass
class PoolRuntime:
    cfg: PoolConfig
    members: tuple[UpstreamRuntime, ...]
    affinity: AffinityTable | None  # None: affinity is off for this pool
    # A reload's renames: a deployment's old name -> its new one, the same key where it was sent
    # (its conversations' homes follow it: ``app._renamed``).
    renamed: Mapping[str, str] = field(default_factory=dict)
    member_cfgs: tuple[UpstreamConfig, ...] = field(init=False)
    circuits: tuple[SharedCircuit, ...] = field(init=False)
    names: tuple[str, ...] = field(init=False)  # its deployments' names, in its config's order

    def __post_init__(self) -> None:
        self.member_cfgs = tuple(m.cfg for m in self.members)
        self.names = tuple(m.cfg.name for m in self.members)
        self.circuits = tuple(m.circuit for m in self.members)
        for m in self.members:
            m.pooled = True


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a route: a plain upstream, or a pool whose deployments are picked per request."""

    members: tuple[UpstreamRuntime, ...]
    pool: PoolRuntime | None = None

    @property
    def name(self) -> str:
        return self.pool.cfg.name if self.pool is not None else self.members[0].cfg.name


@dataclass(frozen=True, slots=True)
class Route:
    """Where a model's requests go: its pool or upstream, then its fallbacks, in order."""

    hops: tuple[Hop, ...]
    # Every upstream the request may reach, in route order (a pool's in config order): what
    # applies to the whole route (continuation, the first upstream's window) reads these.
    upstreams: tuple[UpstreamRuntime, ...]

    affinity: bool  # some pool of the route keeps conversations on their deployment

    @classmethod
    def of(cls, hops: list[Hop]) -> Route:
        affinity = any(h.pool is not None and h.pool.affinity is not None for h in hops)
        return cls(tuple(hops), tuple(m for h in hops for m in h.members), affinity)


class LongLived(Protocol):
    """A connection that outlives requests (a WebSocket), told when the process drains or its
    config is replaced: either may end it."""

    def reconsider(self) -> None: ...


@dataclass
class Lifecycle:
    """What belongs to the process rather than to one config, so a reload keeps it: the
    requests in flight, and the shutdown that drains them (server.py)."""

    draining: bool = False
    shutting_down: bool = False  # drain_s ran out: the requests still in flight are being ended
    handling: set[asyncio.Task[Any]] = field(default_factory=set)  # the tasks of those requests
    in_flight: int = 0
    arrived: float = float("-inf")  # when the last request came (monotonic): a drain waits for a lull
    idle: list[Callable[[], None]] = field(default_factory=list)
    settling: set[asyncio.Task[Any]] = field(default_factory=set)  # keys' spend being written
    # Open WebSocket connections (the Responses API's mode, pipeline/websocket.py): no request
    # themselves, so in_flight counts only their turns; a drain or a reload tells each.
    connections: set[LongLived] = field(default_factory=set)

    def start_draining(self) -> None:
        """SIGTERM: ``/readyz`` answers 503, answers close their connections, and each open
        WebSocket closes (at once when idle, else after its turn)."""
        self.draining = True
        self.reconfigured()

    def reconfigured(self) -> None:
        """Each open WebSocket asks whether it may go on (a reload may have turned its mode off)."""
        for connection in list(self.connections):
            connection.reconsider()

    def cut(self) -> int:
        """``drain_s`` ran out: every request still in flight is cancelled, and the cancellation
        is answered where it lands (observe, the relay) with the typed ``gateway_shutdown``
        error: a 503 before the answer began, the stream's error event after. Returns how many."""
        self.shutting_down = True
        tasks = list(self.handling)
        for task in tasks:
            task.cancel()
        return len(tasks)


@dataclass(frozen=True, slots=True)
class Limits:
    """The config's numbers that every request reads, copied once per config. On Python 3.11
    (the shipped image's) reading a field of a pydantic model costs ~360 instructions more than
    a slot's: BaseModel's ``__getattr__`` keeps the interpreter from caching the lookup (#38)."""

    max_body_bytes: int  # server.max_body_bytes
    idle_s: float  # timeouts.idle_s
    deadline_s: float  # retry.deadline_s
    first_byte_s: float  # timeouts.first_byte_s
    retries_per_upstream: int  # fallback.retries_per_upstream
    max_tool_output_tokens: int | None  # compression.max_tool_output_tokens
    max_tool_output_share: float | None  # compression.max_tool_output_share

    @classmethod
    def of(cls, cfg: GatewayConfig) -> Limits:
        return cls(cfg.server.max_body_bytes, cfg.timeouts.idle_s, cfg.retry.deadline_s,
                   cfg.timeouts.first_byte_s, cfg.fallback.retries_per_upstream,
                   cfg.compression.max_tool_output_tokens, cfg.compression.max_tool_output_share)  # fmt: skip


@dataclass
class Services:
    cfg: GatewayConfig
    sender: Sender
    telemetry: Telemetry
    budget: SharedBudget
    store: StateStore
    loop: LoopBreaker
    upstreams: dict[str, UpstreamRuntime]
    monotonic: Callable[[], float]
    wall: Callable[[], float]  # epoch seconds, for reset-at stamps and HTTP dates
    sleep: Callable[[float], Awaitable[None]]
    rand: Callable[[], float]
    auth: ClientAuth
    life: Lifecycle = field(default_factory=Lifecycle)
    # Requests that started on this config and are not done; once a reload has replaced it,
    # ``retired`` is called when the last one ends (its own connections may then be closed).
    serving: int = 0
    retired: Callable[[], None] | None = None
    models_cache: dict[str, tuple[float, bytes]] = field(default_factory=dict)  # GET /v1/models
    # model -> its route (None: nothing serves it). Config is frozen, so routing is a pure
    # function of the model; clients send few distinct ones.
    chains: dict[str | None, Route | None] = field(default_factory=dict)
    pools: dict[str, PoolRuntime] = field(default_factory=dict)
    accounts: Accounts | None = None  # set when named keys are configured (keys:)
    issued: IssuedKeys | None = None  # keys issued at run time (gateway/keys/issued.py)
    pool_state: PoolState | None = None  # set when the config has pools
    translations: Translations = field(default_factory=default_translations)
    tool_outputs: ToolOutputPolicy = field(default_factory=ToolOutputPolicy)
    tracing: Tracing = NO_TRACING  # no-op hooks unless tracing is on (gateway/tracing/)
    busy_poll: BusyPoll | NoBusyPoll = NO_BUSY_POLL  # server.busy_poll_us (gateway/busy_poll.py)
    # Each (upstream, model)'s output limit, configured or stated (gateway/pipeline/output_cap.py).
    output_limits: OutputLimits = field(default_factory=OutputLimits)
    # The parameters each (upstream, model) refused and can do without (gateway/pipeline/param_fix.py).
    param_fixes: ParamFixes = field(default_factory=ParamFixes)
    # Which deployment issued each thinking signature relayed, and whose each refused
    # (gateway/policy/thinking_signers.py, gateway/pipeline/reasoning_fix.py).
    signers: Signers = field(default_factory=Signers)
    # The ids of the WebSocket mode's ``generate: false`` responses (gateway/apis/responses/warm_ids.py).
    warm_ids: WarmIds = field(default_factory=lambda: WarmIds.keyed(None))
    limits: Limits = field(init=False)  # read from cfg
    # Upstreams that sent no head within a short-budget client's share lately (policy/head_cuts.py).
    head_cuts: HeadCuts = field(init=False)

    def __post_init__(self) -> None:
        self.limits = Limits.of(self.cfg)
        self.head_cuts = HeadCuts(self.monotonic)

    def chain_for(self, model: str | None) -> Route | None:
        """The first pool whose model globs match, else the first upstream outside every pool
        whose globs match; then its fallbacks, each an upstream or a pool."""
        if model in self.chains:
            return self.chains[model]
        route = None
        pool = self._pool_for(model)
        if pool is not None:
            route = Route.of([self._hop(pool.cfg.name), *map(self._hop, pool.cfg.fallbacks)])
        else:
            pooled = {d for p in self.cfg.pools for d in p.deployments}
            cfg = pick_upstream((u for u in self.cfg.upstreams if u.name not in pooled), model)
            if cfg is not None:
                route = Route.of([self._hop(cfg.name), *map(self._hop, cfg.fallbacks)])
        if len(self.chains) < _CHAINS_MAX:  # model names come from clients
            self.chains[model] = route
        return route

    def chain_speaking(self, api: str) -> Route | None:
        """For a request that names no model (a stored response fetched by id, a GET on a
        path that only takes POST): the first upstream outside every pool that speaks ``api``,
        else what ``chain_for(None)`` picks. Sent to the first upstream whatever it spoke, a
        Responses path met a Messages upstream and was told to add the API to it."""
        pooled = {d for p in self.cfg.pools for d in p.deployments}
        for u in self.cfg.upstreams:
            if u.name not in pooled and api in u.apis:
                return Route.of([self._hop(u.name), *map(self._hop, u.fallbacks)])
        return self.chain_for(None)

    def _pool_for(self, model: str | None) -> PoolRuntime | None:
        if not self.pools:
            return None
        if not model:  # the first upstream, as without pools, unless every upstream is pooled
            pooled = {d for p in self.cfg.pools for d in p.deployments}
            if any(u.name not in pooled for u in self.cfg.upstreams):
                return None
            return next(iter(self.pools.values()))
        matches = (p for p in self.pools.values() if any(fnmatchcase(model, g) for g in p.cfg.models))
        return next(matches, None)

    def _hop(self, name: str) -> Hop:
        pool = self.pools.get(name)
        if pool is not None:
            return Hop(pool.members, pool)
        return Hop((self.upstreams[name],))



def tool_output_policy(cfg: ToolOutputsConfig) -> ToolOutputPolicy:
    """The pure policy of the ``tool_outputs`` config, its expressions compiled once."""
    rules = tuple(ToolRule.of(r.tool, r.project, r.oversized, r.max_tokens, r.max_share) for r in cfg.rules)
    return ToolOutputPolicy(rules, cfg.upfront, cfg.max_share, cfg.max_tokens)


# The Services a request started on (set by observe); the app's current ones: app[LIVE].
SERVICES = web.RequestKey("llm_services", Services)
