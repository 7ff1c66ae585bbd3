"""The long-lived collaborators of one gateway process, built once by ``create_app``.

Nothing here is a module-level global: tests build their own with fake clocks,
sleeps and senders.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.apis.base import Dialect
from gateway.auth import ClientAuth
from gateway.config import GatewayConfig, ToolOutputsConfig, UpstreamConfig
from gateway.policy.loop_breaker import LoopBreaker
from gateway.policy.tool_outputs import ToolOutputPolicy, ToolRule
from gateway.routing import Outbound, pick_upstream, upstream_url
from gateway.state import SharedBudget, SharedCircuit, StateStore
from gateway.telemetry import Telemetry
from gateway.tracing import NO_TRACING, Tracing
from gateway.translate import Leg, NoLeg, Translations, default_translations
from gateway.upstream import Sender

_CHAINS_MAX = 1024
_LEGS_MAX = 1024


@dataclass
class UpstreamRuntime:
    cfg: UpstreamConfig
    circuit: SharedCircuit
    # Decided once per upstream rather than per request (see routing.Outbound).
    outbound: Outbound = field(init=False)
    # Dialect endpoint path -> its upstream URL (no query string): a handful of entries.
    urls: dict[str, str] = field(init=False, default_factory=dict)
    # Circuit key -> the verdict of the one request retrying that model here now (True: it
    # gave up). Other requests of the model that fail meanwhile wait for it (pipeline/chain.py).
    retrying: dict[str, asyncio.Future[bool]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.outbound = Outbound.of(self.cfg)

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
            return upstream_url(self.cfg.base_url, path, query_string)
        url = self.urls.get(path)
        if url is None:
            url = self.urls[path] = upstream_url(self.cfg.base_url, path, "")
        return url


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
    draining: bool = False
    shutting_down: bool = False  # drain_s ran out: responses still relaying are being ended
    relaying: set[asyncio.Task[Any]] = field(default_factory=set)
    models_cache: dict[str, tuple[float, bytes]] = field(default_factory=dict)  # GET /v1/models
    in_flight: int = 0
    idle: list[Callable[[], None]] = field(default_factory=list)
    # model -> its upstream chain (None: no upstream serves it). Config is frozen, so routing
    # is a pure function of the model; clients send few distinct ones.
    chains: dict[str | None, list[UpstreamRuntime] | None] = field(default_factory=dict)
    translations: Translations = field(default_factory=default_translations)
    tool_outputs: ToolOutputPolicy = field(default_factory=ToolOutputPolicy)
    tracing: Tracing = NO_TRACING  # no-op hooks unless tracing is on (gateway/tracing/)

    def chain_for(self, model: str | None) -> list[UpstreamRuntime] | None:
        """The upstream whose model globs match first, then its fallbacks (read-only list)."""
        if model in self.chains:
            return self.chains[model]
        cfg = pick_upstream(self.cfg.upstreams, model)
        chain = None
        if cfg is not None:
            chain = [self.upstreams[cfg.name], *(self.upstreams[name] for name in cfg.fallbacks)]
        if len(self.chains) < _CHAINS_MAX:  # model names come from clients
            self.chains[model] = chain
        return chain



def tool_output_policy(cfg: ToolOutputsConfig) -> ToolOutputPolicy:
    """The pure policy of the ``tool_outputs`` config, its expressions compiled once."""
    rules = tuple(ToolRule.of(r.tool, r.project, r.oversized, r.max_tokens, r.max_share) for r in cfg.rules)
    return ToolOutputPolicy(rules, cfg.upfront, cfg.max_share, cfg.max_tokens)


SERVICES = web.AppKey("llm_services", Services)
