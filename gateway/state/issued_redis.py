"""Issued keys (gateway/keys/issued.py) in Redis, where every replica reads them.

    {prefix}issued            hash: name -> "<expires_at ms> <json>" (the digest, never the key)
    {prefix}issued:v          a marker written anew at every change: replicas poll it
    {prefix}issued:n:<minute> keys issued that minute (``keys_api.issued_per_minute``)

Every one has a time to live: the hash and its marker outlive the last key's end by
``GRACE_S``, the minute's count the minute. Its own two connections, apart from the
``RedisStore``'s: an admin's call or a replica's poll never waits behind requests' operations,
and a request never waits behind them.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.keys.issued import GRACE_S, IssuedStoreDown, PutOutcome

# Forget what ended more than the grace ago; refuse a name not ended, a full set, a busy minute;
# else keep the record, and the hash and its marker until the last key's grace is over.
# KEYS: hash, marker, minute's count. ARGV: name, record, expires ms, now ms, max, per minute,
# new marker, grace ms.
_PUT = """
local now, grace = tonumber(ARGV[4]), tonumber(ARGV[8])
local latest = tonumber(ARGV[3])
local live = 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], '^(%d+) ')) or 0
  if exp + grace <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    if exp > latest then latest = exp end
    if exp > now then
      if all[i] == ARGV[1] then return 'taken' end
      live = live + 1
    end
  end
end
if live >= tonumber(ARGV[5]) then return 'full' end
local n = redis.call('INCR', KEYS[3])
if n == 1 then redis.call('EXPIRE', KEYS[3], 120) end
if n > tonumber(ARGV[6]) then return 'rate' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIREAT', KEYS[1], latest + grace)
redis.call('SET', KEYS[2], ARGV[7], 'PXAT', latest + grace)
return 'ok'
"""

# KEYS: hash, marker. ARGV: name, new marker, grace ms. The marker stays at least the grace
# after the last key goes: a replica that finds none takes the store for one that lost its data.
_DROP = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local left = redis.call('PTTL', KEYS[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', math.max(left, tonumber(ARGV[3])))
return 1
"""

# KEYS: hash, marker. ARGV: new marker, grace ms, then name, record, expires ms for each key.
_RESTORE = """
local latest = 0
for i = 3, #ARGV, 3 do
  redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
  local exp = tonumber(ARGV[i + 2])
  if exp > latest then latest = exp end
end
local grace = tonumber(ARGV[2])
redis.call('PEXPIREAT', KEYS[1], latest + grace)
redis.call('SET', KEYS[2], ARGV[1], 'PXAT', latest + grace)
return 1
"""

_FAILURES = (RedisError, OSError, TimeoutError)


class RedisIssuedStore:
    def __init__(self, client: Redis, prefix: str) -> None:
        self._r = client
        self._hash = prefix + "issued"
        self._marker = prefix + "issued:v"
        self._minute = prefix + "issued:n:"
        self._put = client.register_script(_PUT)
        self._drop = client.register_script(_DROP)
        self._restore = client.register_script(_RESTORE)
        # One call at a time: the client's pool is small (an admin's calls and the poll are off
        # the request path), and twelve issues at once got six "Too many connections", answered
        # 503 as if Redis were down (review).
        self._one = asyncio.Lock()

    async def put(self, name: str, record: bytes, expires_ms: int, now_ms: int,
                  max_issued: int, per_minute: int) -> PutOutcome:  # fmt: skip
        keys = [self._hash, self._marker, f"{self._minute}{now_ms // 60_000}"]
        args: list[str | bytes | int] = [name, record, expires_ms, now_ms, max_issued, per_minute, _marker(),
                                         int(GRACE_S * 1000)]
        try:
            async with self._one:
                got = await self._put(keys=keys, args=args)
        except _FAILURES as e:
            raise IssuedStoreDown(type(e).__name__) from None
        return _bytes(got).decode()  # type: ignore[return-value]

    async def drop(self, name: str) -> bool:
        try:
            async with self._one:
                return bool(await self._drop(keys=[self._hash, self._marker],
                                             args=[name, _marker(), int(GRACE_S * 1000)]))  # fmt: skip
        except _FAILURES as e:
            raise IssuedStoreDown(type(e).__name__) from None

    async def version(self) -> bytes | None:
        try:
            async with self._one:
                got = await self._r.get(self._marker)
        except _FAILURES as e:
            raise IssuedStoreDown(type(e).__name__) from None
        return None if got is None else _bytes(got)

    async def records(self) -> list[bytes]:
        try:
            async with self._one:
                return [_bytes(v) for v in (await self._r.hgetall(self._hash)).values()]
        except _FAILURES as e:
            raise IssuedStoreDown(type(e).__name__) from None

    async def restore(self, records: Sequence[tuple[str, bytes, int]]) -> None:
        if not records:
            return
        args: list[str | bytes | int] = [_marker(), int(GRACE_S * 1000)]
        for name, record, expires_ms in records:
            args += [name, record, expires_ms]
        try:
            async with self._one:
                await self._restore(keys=[self._hash, self._marker], args=args)
        except _FAILURES as e:
            raise IssuedStoreDown(type(e).__name__) from None

    async def close(self) -> None:
        await self._r.aclose()


def _bytes(v: bytes | str) -> bytes:
    return v.encode() if isinstance(v, str) else v  # the client decodes no answers (connect)


def _marker() -> bytes:
    return os.urandom(8).hex().encode()
