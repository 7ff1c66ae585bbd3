"""Fixtures for the upstream client conformance suite: each sender class, made and closed
per test, and a scripted upstream per test."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import uvloop

from gateway.config import TimeoutsConfig
from gateway.upstream import Sender
from gateway.upstream.aiohttp_sender import AiohttpSender
from gateway.upstream.h1 import H1Sender
from tests.conformance.scripted_upstream import Script, ScriptedServer

# Every Sender implementation the gateway can run on; each test runs against each of them.
SENDERS: dict[str, Any] = {"aiohttp": AiohttpSender, "h1": H1Sender}


# Every case on asyncio's own loop and on uvloop (the bench runs the gateway on both): the h1
# client's first version passed asyncio-only tests and failed every connect on uvloop, whose
# create_connection has no happy_eyeballs_delay.
def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Callable[[], Any]]:
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


# A test that records what aiohttp itself does (where it and the contract part ways): run
# for aiohttp alone, the parametrized fixture overridden, rather than skipped for the others.
AIOHTTP_ONLY = pytest.mark.parametrize("sender_cls", [AiohttpSender], ids=["aiohttp"])


@pytest.fixture(params=sorted(SENDERS))
def sender_cls(request: pytest.FixtureRequest) -> Any:
    return SENDERS[request.param]


@pytest.fixture
def sender_name(sender_cls: Any) -> str:
    return next(name for name, cls in SENDERS.items() if cls is sender_cls)


def deviates(request: pytest.FixtureRequest, sender_name: str, senders: set[str], reason: str) -> None:
    """Mark a contract the named senders are known not to keep: a strict xfail for them, so
    the test still holds every other sender to it and says when one of them starts keeping it."""
    if sender_name in senders:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


MakeSender = Callable[..., Awaitable[Sender]]


@pytest.fixture
async def make_sender(sender_cls: Any) -> AsyncIterator[MakeSender]:
    made: list[Any] = []

    async def make(*, max_connections: int = 4, connect_s: float = 2.0, idle_s: float = 2.0) -> Sender:
        # Long enough by default that a loaded machine never trips one; the timeout cases
        # pass their own short ones.
        timeouts = TimeoutsConfig(connect_s=connect_s, first_byte_s=5.0, idle_s=idle_s)
        sender = sender_cls(timeouts, max_connections)
        await sender.start()
        made.append(sender)
        return sender  # type: ignore[no-any-return]

    yield make
    for sender in made:
        await sender.close()


@pytest.fixture
async def sender(make_sender: MakeSender) -> Sender:
    return await make_sender()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Script], Awaitable[ScriptedServer]]]:
    servers: list[ScriptedServer] = []

    async def start(script: Script) -> ScriptedServer:
        server = ScriptedServer(script)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()
