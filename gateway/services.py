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

from gateway.auth import ClientAuth
from gateway.config import GatewayConfig, UpstreamConfig
from gateway.policy.loop_breaker import LoopBreaker
from gateway.state import SharedBudget, SharedCircuit, StateStore
from gateway.telemetry import Telemetry
from gateway.upstream import Sender


@dataclass
class UpstreamRuntime:
    cfg: UpstreamConfig
    circuit: SharedCircuit


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


SERVICES = web.AppKey("llm_services", Services)
