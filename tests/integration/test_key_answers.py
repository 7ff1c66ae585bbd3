"""What a request that asks for many answers reserves of its key's budget and minute: every
answer it may be billed, on one replica's memory and on a real redis-server shared by two.
/v1/completions' ``best_of`` and a list of prompts were reserved one answer: 40 requests at once
with ``best_of: 20`` spent $40 of a $2 budget (audit). Prices as the audit's: $100 per million
tokens in, $1,000 out, so one answer of 100 tokens holds $0.10."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.day_wall import clear_of_midnight
from tests.fakeupstream import Reply
from tests.integration.conftest import Gateway, MakeGateway, same_minute
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

__all__ = ["redis_server"]  # fixture

ALICE = {"Authorization": "Bearer gk-alice"}
MODEL = "gpt-3.5-turbo-instruct"
BACKENDS = ["memory", pytest.param("redis", marks=pytest.mark.skipif(REDIS is None, reason="needs redis-server"))]


def completion(answers: int) -> dict[str, Any]:
    """A /v1/completions answer in the shape of OpenAI's API reference (the completion
    object), its usage counting every answer generated, as the audit's upstream did."""
    return {"id": "cmpl-1", "object": "text_completion", "created": 1700000000, "model": MODEL,
            "choices": [{"index": 0, "text": "hello", "logprobs": None, "finish_reason": "length"}],
            "usage": {"prompt_tokens": answers, "completion_tokens": 100 * answers,
                      "total_tokens": 101 * answers}}  # fmt: skip


async def replicas(make_gateway: MakeGateway, request: pytest.FixtureRequest, backend: str,
                   key: dict[str, Any]) -> tuple[Gateway, Gateway]:  # fmt: skip
    """Two gateways sharing a redis-server, or one on its own memory (named twice)."""
    state = ""
    if backend == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        state = f"state: {{backend: redis, url: '{server.url}', timeout_ms: 2000}}\n"
    extra = "".join(f", {k}: {json.dumps(v)}" for k, v in key.items())
    config = ("prices: {'*': {input: 100, output: 1000}}\n"
              f"keys:\n  - {{name: alice, key: gk-alice{extra}}}\n" + state)  # fmt: skip
    wall = clear_of_midnight()  # a day's budget, read within one day
    a = await make_gateway(config, wall=wall)
    if backend == "memory":
        return a, a
    return a, await make_gateway(config, fake=a.fake, wall=wall)


async def complete(gw: Gateway, payload: dict[str, Any]) -> tuple[int, str]:
    async with gw.session.post(gw.base + "/v1/completions", json=payload, headers=ALICE) as r:
        body = await r.json()
        return r.status, body.get("error", {}).get("code", "")


async def reserved_while_in_flight(gw: Gateway, payload: dict[str, Any]) -> float:
    answer = asyncio.ensure_future(complete(gw, payload))
    reserved = 0.0
    for _ in range(100):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
            reserved = (await r.json())["budget"]["reserved_usd"]
        if reserved:
            break
        await asyncio.sleep(0.01)
    assert (await answer)[0] == 200
    return float(reserved)


@pytest.mark.parametrize(("prompt", "asks", "answers"), [
    ("hi", {"best_of": 20}, 20),  # the audit's
    (["hi"] * 20, {}, 20),  # the audit's: a list of strings, one answer each
    ([[5303], [5303], [5303]], {"n": 2, "best_of": 4}, 12),  # token arrays; best_of above n
    ([5303, 5303], {"n": 3}, 3),  # one prompt as token ids
])  # fmt: skip
@pytest.mark.parametrize("backend", BACKENDS)
async def test_every_answer_a_completion_may_be_billed_is_reserved(
    make_gateway: MakeGateway, request: pytest.FixtureRequest, backend: str,
    prompt: Any, asks: dict[str, int], answers: int,
) -> None:  # fmt: skip
    a, _ = await replicas(make_gateway, request, backend, {"budget": {"usd": 1000, "period": "day"}})
    a.fake.always = Reply(200, completion(answers), delay_s=0.3)
    payload = {"model": MODEL, "prompt": prompt, "max_tokens": 100, **asks}
    reserved = await reserved_while_in_flight(a, payload)
    # $0.10 an answer, and a prompt of a few dozen bytes at $100 per million.
    assert answers * 0.1 < reserved < answers * 0.1 + 0.01, reserved
    assert a.fake.requests[-1].json() == payload  # sent as it came


@pytest.mark.parametrize("prompt", [{"prompt": "hi", "best_of": 20}, {"prompt": ["hi"] * 20}])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_burst_of_best_of_requests_spends_at_most_the_last_one_past_the_budget(
    make_gateway: MakeGateway, request: pytest.FixtureRequest, backend: str, prompt: dict[str, Any],
) -> None:
    """The audit's run: 40 at once against $2, split across the replicas. Each may be billed
    20 answers ($2), so the first admitted holds the whole budget; the others are asked to try
    again (429 key_budget_held), and what is spent is that one request."""
    a, b = await replicas(make_gateway, request, backend, {"budget": {"usd": 2, "period": "day"}})
    a.fake.always = Reply(200, completion(20), delay_s=0.3)
    payload = {"model": MODEL, "max_tokens": 100, **prompt}
    got = await asyncio.gather(*(complete(gw, payload) for gw in [a, b] * 20))
    assert sorted(got).count((200, "")) == 1, got
    assert {code for status, code in got if status != 200} == {"key_budget_held"}
    for _ in range(200):
        async with b.session.get(b.base + "/v1/gateway/key", headers=ALICE) as r:
            budget = (await r.json())["budget"]
        if not budget["reserved_usd"]:
            break
        await asyncio.sleep(0.02)
    assert budget["spent_usd"] == pytest.approx(20 * 0.0001 + 2000 * 0.001)  # its usage: $2.002


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_minutes_tokens_count_every_answer_asked_for(
    make_gateway: MakeGateway, request: pytest.FixtureRequest, backend: str,
) -> None:
    """``tokens_per_minute`` takes the output of every answer too: two requests of 20 answers
    of 100 tokens at once do not fit 3,000 a minute."""
    await same_minute()
    a, b = await replicas(make_gateway, request, backend, {"tokens_per_minute": 3000})
    a.fake.always = Reply(200, completion(20), delay_s=0.3)
    payload = {"model": MODEL, "prompt": "hi", "max_tokens": 100, "best_of": 20}
    first = asyncio.ensure_future(complete(a, payload))
    await asyncio.sleep(0.1)
    assert await complete(b, payload) == (429, "key_tokens_held")
    assert await first == (200, "")
