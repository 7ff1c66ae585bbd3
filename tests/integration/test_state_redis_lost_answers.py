"""A Redis answer lost after its command ran, on a real redis-server: RedisStore._guard sends the
call again on a fresh connection (a restarted Redis's pooled sockets fail the same way), and
every counting call must count once.

An audit reproduced each of these behind a proxy that dropped the connection carrying an
admit's answer: a key with ``parallel: 1`` refused its own request (429 key_parallel_limit
with nothing running, then on every replica for the slot's hour), a $1000 key kept $0.0276
reserved with nothing in flight, and ``this_minute.requests`` said 2 for 1 request.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.keys.ledger import Accounts, Reservation
from gateway.keys.prices import Price, PriceTable
from gateway.keys.registry import Budget, KeySpec
from gateway.state.memory import MemoryStore
from gateway.state.redis_store import RedisStore, connect
from tests.integration.conftest import same_minute
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

PRICES = PriceTable.of({"m": Price(1_000_000, 1_000_000)})  # $1 per token: 20 in, 10 out reserve $30


class LosingConnection(Connection):
    """A connection whose next answer to a command naming ``lose`` is read from Redis (the
    command ran) and then lost with the connection, as a dropped TCP connection loses it."""

    lose: bytes | None = None
    lost = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, (bytes, str, memoryview)) else command
        sent = b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)
        cls = LosingConnection
        if cls.lose is not None and cls.lose in sent:
            cls.lose = None
            self._losing = True
        await super().send_packed_command(command, check_health)

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        answer = await super().read_response(*args, **kwargs)
        if getattr(self, "_losing", False):
            self._losing = False
            LosingConnection.lost += 1
            await self.disconnect()
            raise RedisConnectionError("Connection lost (test)")
        return answer


@pytest.fixture
async def store(redis_server: RedisServer) -> AsyncIterator[tuple[RedisStore, list[str]]]:
    client = connect(redis_server.url, 2.0)
    client.connection_pool.connection_class = LosingConnection
    fallbacks: list[str] = []
    made = RedisStore(client, MemoryStore(time.time), clock=time.time, monotonic=time.monotonic, prefix="t:",
                      timeout_s=2.0, recover_s=2.0, on_fallback=lambda _b, op: fallbacks.append(op))  # fmt: skip
    await made.check(2.0)
    LosingConnection.lost = 0
    yield made, fallbacks
    LosingConnection.lose = None
    await made.close()


def lose_next(naming: bytes) -> None:
    LosingConnection.lose = naming


async def test_an_admit_whose_answer_was_lost_counts_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    accounts = Accounts(s, PRICES, time.time)
    key = KeySpec("alice", requests_per_minute=10, parallel=1, budget=Budget(1000.0, "day"))
    await same_minute()
    lose_next(b"t:l:s:")  # the admit's script names its slot's marker
    got = await accounts.admit(key, "m", 20, 10)
    assert LosingConnection.lost == 1 and not fallbacks  # answered by Redis, on the second try
    # Counted again, the admit found its own slot in flight and refused itself.
    assert isinstance(got, Reservation)
    state = await accounts.state_of(key)
    assert state["this_minute"]["requests"] == 1 and state["in_flight"] == 1
    assert state["budget"]["reserved_usd"] == 30
    await accounts.settle(got, {"prompt": 12, "completion": 7})
    state = await accounts.state_of(key)
    assert state["in_flight"] == 0 and state["budget"]["reserved_usd"] == 0  # nothing held for a day
    assert state["budget"]["spent_usd"] == 19
    assert isinstance(await accounts.admit(key, "m", 20, 10), Reservation)  # the slot is free


async def test_a_pool_pick_whose_answer_was_lost_counts_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    lose_next(b"t:d:dep#1")
    assert await s.records_take("dep#1", 2, None, 100, 60) == (True, 1, 100, 100)
    assert LosingConnection.lost == 1 and not fallbacks
    assert await s.records_take("dep#1", 2, None, 100, 60) == (True, 2, 200, 200)  # the limit's second, not refused


async def test_a_pool_sync_whose_answer_was_lost_adds_its_sends_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    lose_next(b"t:d:s#1")
    got, _, _ = await s.records_sync(["s#1"], adds=[("s#1", {"0": 1, "0k": 50}, 120)])
    assert LosingConnection.lost == 1 and not fallbacks
    assert got == [{"0": 1.0, "0k": 50.0}]


async def test_retry_budget_calls_whose_answers_were_lost_count_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    lose_next(b"t:b:{global}:")
    assert await s.budget_add("global", 10, 0, 10) == (10, 0)
    lose_next(b"t:b:{global}:")
    assert await s.budget_reserve("global", 0, 0, 10, 1.0, 0.1) == (True, 10, 1)  # room for 1 + 10%: 2
    assert LosingConnection.lost == 2 and not fallbacks
    assert await s.budget_reserve("global", 0, 0, 10, 1.0, 0.1) == (True, 10, 2)
    assert await s.budget_add("global", 0, 0, 10) == (10, 2)


async def test_a_circuit_failure_whose_answer_was_lost_counts_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    lose_next(b"t:c:up")
    [record] = await s.circuit_fail([("up", "m")], 60)
    assert LosingConnection.lost == 1 and not fallbacks
    assert record.failures == 1 and record.models == frozenset({"m"})
    assert [r.failures for r in await s.circuit_get(["up"])] == [1]


async def test_a_repeat_whose_answer_was_lost_counts_once(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    await s.answer_put("fp", b"x", 60)
    await s.local.answer_drop("fp")  # as on another replica: only Redis has it
    lose_next(b"t:a:fp")
    assert await s.answer_take("fp") == (b"x", 1)
    assert LosingConnection.lost == 1 and not fallbacks
    assert await s.answer_take("fp") == (b"x", 2)


async def test_a_probe_claim_whose_answer_was_lost_stays_this_ones(store: tuple[RedisStore, list[str]]) -> None:
    s, fallbacks = store
    lose_next(b"t:p:up/m")
    assert await s.probe_claim("up/m", 60)  # the claim it made, not taken for another's
    assert LosingConnection.lost == 1 and not fallbacks
    assert not await s.probe_claim("up/m", 60)  # a second claim is refused
