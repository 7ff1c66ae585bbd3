"""A stand-in for redis-py's asyncio client, as much of it as RedisStore's health needs: a
server that answers, refuses connections (``down``), or answers late (``delay_s``)."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError


class _Pool:
    def __init__(self) -> None:
        self.connection_kwargs: dict[str, Any] = {"host": "127.0.0.1", "port": 6379, "db": 0}

    async def disconnect(self, inuse_connections: bool = True) -> None:
        return None


class _Script:
    def __init__(self, server: FakeRedis, source: str) -> None:
        self.server, self.script, self.sha = server, source, str(hash(source))

    async def __call__(self, keys: Any = (), args: Any = ()) -> Any:
        await self.server.answer(write=True)
        return 0


class _Pipeline:
    """Commands queued, then run in turn by ``execute`` (as many as RedisStore pipelines here)."""

    def __init__(self, server: FakeRedis) -> None:
        self.server = server
        self.calls: list[Any] = []

    def set(self, key: str, value: bytes, nx: bool = False, **_: Any) -> None:
        self.calls.append(("set", key, value, nx))

    def get(self, key: str) -> None:
        self.calls.append(("get", key))

    async def execute(self) -> list[Any]:
        await self.server.answer(write=any(c[0] == "set" for c in self.calls))
        out: list[Any] = []
        for name, key, *rest in self.calls:
            if name == "get":
                out.append(self.server.values.get(key))
            elif rest[1] and key in self.server.values:
                out.append(None)
            else:
                self.server.values[key] = rest[0]
                out.append(True)
        return out


class FakeRedis:
    def __init__(self) -> None:
        self.down = False
        self.delay_s = 0.0
        self.error: RedisError | None = None  # what every command meets, when set
        self.write_error: RedisError | None = None  # what every write meets (a full Redis), when set
        self.pings = 0
        self.ping_delays: list[float] = []  # each PING's own delay, in turn, before ``delay_s``'s
        self.values: dict[str, bytes] = {}
        self.connection_pool = _Pool()

    async def answer(self, *, write: bool = False) -> None:
        if self.down:
            raise RedisConnectionError("Connection refused")
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.error is not None:
            raise self.error
        if write and self.write_error is not None:
            raise self.write_error

    def pipeline(self, transaction: bool = True) -> _Pipeline:
        return _Pipeline(self)

    def register_script(self, source: str) -> _Script:
        return _Script(self, source)

    async def ping(self) -> bool:
        self.pings += 1
        if self.ping_delays and not self.down:
            await asyncio.sleep(self.ping_delays.pop(0))
            return True
        await self.answer()
        return True

    async def get(self, key: str) -> bytes | None:
        await self.answer()
        return self.values.get(key)

    async def set(self, key: str, value: bytes, **_: Any) -> bool:
        await self.answer(write=True)
        self.values[key] = value
        return True

    async def aclose(self) -> None:
        return None
