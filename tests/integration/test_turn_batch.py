"""Lua calls of one loop turn sent together (gateway/state/turn_batch.py), on a real
redis-server: one pipeline per turn, every call's own result, each script run exactly once,
also when Redis lost its script cache or a caller stops waiting."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.state.redis_store import connect
from gateway.state.turn_batch import TurnBatch
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
__all__ = ["redis_server"]  # fixture

# Counts its calls; each returns the count it made and its own argument back.
COUNTING = "local n = redis.call('INCR', KEYS[1]); return {n, ARGV[1]}"


class Counted:
    """The client, counting the pipelines it opens and the lone EVALSHAs it sends."""

    def __init__(self, client: Redis) -> None:
        self.client = client
        self.pipelines = 0
        self.lone = 0
        real_pipeline, real_evalsha = client.pipeline, client.evalsha

        def pipeline(*a: Any, **k: Any) -> Any:
            self.pipelines += 1
            return real_pipeline(*a, **k)

        async def evalsha(*a: Any, **k: Any) -> Any:
            self.lone += 1
            return await real_evalsha(*a, **k)

        client.pipeline = pipeline  # type: ignore[method-assign]
        client.evalsha = evalsha  # type: ignore[method-assign]


def batch_on(server: RedisServer) -> tuple[TurnBatch, Counted]:
    client = connect(server.url, 1.0)
    counted = Counted(client)
    return TurnBatch(client, client.register_script(COUNTING)), counted


async def test_the_calls_of_one_turn_go_in_one_pipeline_and_each_gets_its_own_answer(
    redis_server: RedisServer,
) -> None:
    batch, counted = batch_on(redis_server)
    await counted.client.script_load(COUNTING)
    answers = await asyncio.gather(*(batch(["c"], [str(i)]) for i in range(50)))
    assert [a[1] for a in answers] == [str(i).encode() for i in range(50)]
    assert sorted(a[0] for a in answers) == list(range(1, 51))  # each ran once, atomically
    assert counted.pipelines == 1 and counted.lone == 0
    assert int(await counted.client.get("c")) == 50
    await counted.client.aclose()


async def test_a_lone_call_is_a_plain_evalsha_and_calls_of_later_turns_are_new_batches(
    redis_server: RedisServer,
) -> None:
    batch, counted = batch_on(redis_server)
    assert (await batch(["c"], ["x"]))[0] == 1
    assert counted.pipelines == 0
    await asyncio.gather(batch(["c"], ["y"]), batch(["c"], ["z"]))
    await asyncio.gather(batch(["c"], ["y"]), batch(["c"], ["z"]))
    assert counted.pipelines == 2 and int(await counted.client.get("c")) == 5
    await counted.client.aclose()


async def test_a_redis_that_lost_its_scripts_runs_each_call_once_after_loading_again(
    redis_server: RedisServer,
) -> None:
    batch, counted = batch_on(redis_server)
    await batch(["c"], ["load"])  # loaded by the lone call
    await counted.client.script_flush()  # what a restarted Redis has: no scripts
    answers = await asyncio.gather(*(batch(["c"], [str(i)]) for i in range(10)))
    assert sorted(a[0] for a in answers) == list(range(2, 12))
    assert int(await counted.client.get("c")) == 11  # none twice, none lost
    await counted.client.aclose()


async def test_a_caller_that_stops_waiting_leaves_the_others_their_answers(redis_server: RedisServer) -> None:
    batch, counted = batch_on(redis_server)
    impatient = asyncio.create_task(batch(["c"], ["gone"]))
    others = [asyncio.create_task(batch(["c"], [str(i)])) for i in range(5)]
    await asyncio.sleep(0)  # all asked in this turn
    impatient.cancel()
    answers = await asyncio.gather(*others)
    assert [a[1] for a in answers] == [str(i).encode() for i in range(5)]
    with pytest.raises(asyncio.CancelledError):
        await impatient
    await counted.client.aclose()


async def test_a_redis_that_is_gone_fails_every_caller_of_the_batch(redis_server: RedisServer) -> None:
    batch, counted = batch_on(redis_server)
    await batch(["c"], ["warm"])
    redis_server.stop()
    results = await asyncio.gather(*(batch(["c"], [str(i)]) for i in range(5)), return_exceptions=True)
    assert all(isinstance(r, (ConnectionError, OSError)) or "Connection" in type(r).__name__ for r in results), results
    await counted.client.aclose()
