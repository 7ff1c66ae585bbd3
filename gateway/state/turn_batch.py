"""Calls of one Lua script made in the same event-loop turn, sent to Redis together.

Under load many requests ask for their key's admission at nearly the same moment. One
``EVALSHA`` each costs a client call, a write and a read apiece (about 40 µs of redis-py
per call); the calls of one loop turn sent as one pipeline share them. Nothing is waited
for: the batch leaves at the end of the turn in which its first call was made. Each script
still runs atomically on the server, in the order asked, so a batch admits exactly what the
same calls one by one would have.

A lone call goes as a plain ``EVALSHA``, which is cheaper than a pipeline of one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

Keys = Sequence[str]
Args = Sequence[str | int | bytes | float]


async def run_pipelined(client: Redis, script: AsyncScript, calls: Sequence[tuple[Keys, Args]]) -> list[Any]:
    """``script`` run once per (keys, args) in one pipeline; each result, or the error that
    call met, in order. A Redis restarted since the script was loaded answers NOSCRIPT to
    the calls it did not run: the script is loaded and those are sent again (only those:
    the others ran)."""
    results = await _execute(client, script, calls)
    again = [i for i, r in enumerate(results) if isinstance(r, NoScriptError)]
    if again:
        await client.script_load(script.script)
        redo = await _execute(client, script, [calls[i] for i in again])
        for i, r in zip(again, redo, strict=True):
            results[i] = r
    return results


async def _execute(client: Redis, script: AsyncScript, calls: Sequence[tuple[Keys, Args]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for keys, args in calls:
        # evalsha directly, not script(client=pipe): a pipeline that knows of scripts asks
        # SCRIPT EXISTS first, one more round trip on every execute.
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    return list(await pipe.execute(raise_on_error=False))


class TurnBatch:
    """``await batch(keys, args)``: the script's result for these keys and args, sent with
    the other calls of this loop turn."""

    def __init__(self, client: Redis, script: AsyncScript) -> None:
        self._client = client
        self._script = script
        self._waiting: list[tuple[Keys, Args, asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()  # held: a task nobody holds may vanish

    async def __call__(self, keys: Keys, args: Args) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._waiting.append((keys, args, done))
        if len(self._waiting) == 1:
            # Its first step runs after what is ready in this turn: the calls made meanwhile join.
            task = loop.create_task(self._send())
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        return await done

    async def _send(self) -> None:
        batch, self._waiting = self._waiting, []
        try:
            if len(batch) == 1:
                keys, args, _ = batch[0]
                results: list[Any] = [await self._script(keys=keys, args=args)]
            else:
                results = await run_pipelined(self._client, self._script, [(k, a) for k, a, _ in batch])
        except BaseException as e:  # the whole batch met it: each caller decides for itself
            for *_, done in batch:
                if not done.done():
                    done.set_exception(e if isinstance(e, Exception) else ConnectionError("cancelled"))
            if not isinstance(e, Exception):
                raise
            return
        for (*_, done), result in zip(batch, results, strict=True):
            if done.done():  # its caller stopped waiting (its deadline passed)
                continue
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)
