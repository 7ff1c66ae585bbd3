"""A stand-in for redis-py's asyncio client, as much of it as RedisStore's health needs: a
server that answers, refuses connections (``down``), or answers late (``delay_s``)."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError


class _Pool:
    async def disconnect(self, inuse_connections: bool = True) -> None:
        return None


class _Script:
    def __init__(self, server: FakeRedis, source: str) -> None:
        self.server, self.script, self.sha = server, source, str(hash(source))

    async def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        await self.server.answer()
        return 0


class FakeRedis:
    def __init__(self) -> None:
        self.down = False
        self.delay_s = 0.0
        self.error: RedisError | None = None  # what every command meets, when set
        self.pings = 0
        self.values: dict[str, bytes] = {}
        self.connection_pool = _Pool()

    async def answer(self) -> None:
        if self.down:
            raise RedisConnectionError("Connection refused")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error

    def register_script(self, source: str) -> _Script:
        return _Script(self, source)

    async def ping(self) -> bool:
        self.pings += 1
        await self.answer()
        return True

    async def get(self, key: str) -> bytes | None:
        await self.answer()
        return self.values.get(key)

    async def set(self, key: str, value: bytes, **_: Any) -> bool:
        await self.answer()
        self.values[key] = value
        return True

    async def aclose(self) -> None:
        return None
