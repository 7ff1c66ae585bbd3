"""`python -m bench.pool_pick`: what picking a pool's deployment costs per request, in µs (the
goal of issue #34: at most 10 µs), in-process, three deployments, timeit's best of 5 repeats.

    order          the strategy ranking all three views (a pick needs only the first: ``first``)
    pick           what a request pays before its first attempt: the freshness check of the
                   pool's records, a view of each deployment (sit-outs, headroom from headers
                   and from the request counts since, configured limits), the affinity table's
                   lookup (a new conversation: its home, the strategy's pick, bound there; with
                   Redis that claim is one round trip more, see bench.redis_trips) and its
                   home or the next of its rendezvous order: pipeline/pool.py does these
    headroom_of    reading one answer's rate-limit headers (OpenAI's six), per answer
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
import timeit

from multidict import CIMultiDict

from gateway.config import parse_config
from gateway.routing.headroom import headroom_of
from gateway.routing.pools import first, first_home, for_conversation, order
from gateway.state.affinity import AffinityTable
from gateway.state.memory import MemoryStore
from gateway.state.pools import PoolState

HEADERS = CIMultiDict({
    "x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9990",
    "x-ratelimit-reset-requests": "6m0s", "x-ratelimit-limit-tokens": "2000000",
    "x-ratelimit-remaining-tokens": "1999000", "x-ratelimit-reset-tokens": "30ms",
})  # fmt: skip


def _best_us(fn: object, number: int = 20_000) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6  # type: ignore[arg-type]


def run() -> str:
    cfg = parse_config(
        "upstreams:\n" + "".join(f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: {k}}}\n" for k in "abc")
        + "pools: [{name: p, deployments: [a, b, c]}]\n", env={})  # fmt: skip
    members = cfg.upstreams
    ps = PoolState(MemoryStore(time.time), time.time, time.monotonic, cache_s=3600.0)
    asyncio.run(ps.refresh("p", members, "gpt-4o-mini"))
    for up in members:
        ps.observe(up, "gpt-4o-mini", HEADERS)
        ps.sent(up, "gpt-4o-mini", 500)
    table = AffinityTable(10_000, 3600, time.monotonic)
    for i in range(10_000):
        table.bind(f"id:{i:024x}", "abc"[i % 3])
    rand = random.Random(7).random
    now_ms = time.time() * 1000
    views = [ps.view(i, up, "gpt-4o-mini", now_ms) for i, up in enumerate(members)]

    fresh = itertools.count()

    def pick(strategy: str, conversation: str | None) -> None:
        ps.fresh("p", "gpt-4o-mini")
        now = time.time() * 1000
        ready = [v for v in (ps.view(i, up, "gpt-4o-mini", now) for i, up in enumerate(members)) if v.serves_at(now)]
        if conversation is None:
            assert first(strategy, ready, rand, None)
            return
        home = table.get(conversation)
        if home is None:  # a new conversation: its home is the strategy's pick (memory: no round trip)
            home = first_home(strategy, ready, rand, conversation).name
            table.bind(conversation, home)
        assert for_conversation(ready, home, conversation)

    lines = ["| what | µs |", "| --- | ---: |"]
    for strategy in ("weighted", "least_busy", "latency", "headroom"):
        lines.append(f"| order ({strategy}) | {_best_us(lambda s=strategy: order(s, views, rand)):.2f} |")
    lines.append(f"| pick, weighted, a new conversation (rendezvous) | "
                 f"{_best_us(lambda: pick('weighted', f'id:new-{next(fresh)}')):.2f} |")
    lines.append(f"| pick, weighted, a known conversation | {_best_us(lambda: pick('weighted', f'id:{5:024x}')):.2f} |")
    lines.append(f"| pick, headroom, a known conversation | {_best_us(lambda: pick('headroom', f'id:{5:024x}')):.2f} |")
    lines.append(f"| pick, headroom, no conversation key | {_best_us(lambda: pick('headroom', None)):.2f} |")
    lines.append(f"| headroom_of (an answer's six headers) | {_best_us(lambda: headroom_of(HEADERS, time.time())):.2f} |")
    return "Pool picking, three deployments, in-process (best of 5):\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
