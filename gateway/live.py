"""Which :class:`Services` new requests get, and the older ones still finishing theirs.

A reload builds a whole new Services and swaps this one reference: a request reads it once,
at its start (pipeline/observe.py), so requests and streams already running finish on the
config they started with. What a replaced Services alone used (a connection pool, a retry
budget's flush timer, a tracer) is closed once its last request has ended, never while some
older or newer Services still uses the same object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.services import Lifecycle, Services


class Closable(Protocol):
    async def close(self) -> None: ...


# The next Services for a config, given the current one (whose parts it may keep), and what
# of it the gateway must close once no Services uses it.
Build = Callable[[GatewayConfig, Services], Awaitable[tuple[Services, Sequence[Closable]]]]


class Live:
    def __init__(self, first: Services, owned: Sequence[Closable], build: Build) -> None:
        self.services = first
        self.life: Lifecycle = first.life
        self._build = build
        # Every Services not yet retired (the current one included), by id, with what it owns.
        self._generations: dict[int, tuple[Services, Sequence[Closable]]] = {id(first): (first, owned)}
        self._closing: set[asyncio.Task[None]] = set()

    async def replace(self, cfg: GatewayConfig) -> Services:
        """Builds the Services of ``cfg`` and makes it the one new requests get."""
        new, owned = await self._build(cfg, self.services)
        old = self.services
        new.life = self.life
        self._generations[id(new)] = (new, owned)
        self.services = new
        self.life.reconfigured()
        if old.serving == 0:
            self._retire(old)
        else:
            old.retired = lambda: self._retire(old)
        return new

    @property
    def generations(self) -> int:
        """How many Services still serve requests (1 but while a replaced one finishes)."""
        return len(self._generations)

    def _retire(self, old: Services) -> None:
        old.retired = None
        _, owned = self._generations.pop(id(old))
        in_use = {id(c) for _, cs in self._generations.values() for c in cs}
        dropped = _distinct(c for c in owned if id(c) not in in_use)
        if dropped:
            task = asyncio.get_running_loop().create_task(_close_all(dropped))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """At shutdown: everything every Services owns, once each."""
        owned = _distinct(c for _, cs in self._generations.values() for c in cs)
        self._generations.clear()
        await _close_all(owned)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def _distinct(items: Iterable[Closable]) -> list[Closable]:
    seen: dict[int, Closable] = {}
    for c in items:
        seen.setdefault(id(c), c)
    return list(seen.values())


async def _close_all(items: Sequence[Closable]) -> None:
    # One failing close must not keep the others open.
    await asyncio.gather(*(c.close() for c in items), return_exceptions=True)


LIVE = web.AppKey("llm_live", Live)
