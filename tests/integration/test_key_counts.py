"""Token counts and a key's rules: a count is billed nothing and Anthropic limits it apart from
generation, so a count is refused only for the key's models, its ``parallel`` and a spent
budget, and takes nothing of the key's minute or budget (audit: Claude Code's two counts of a
172 KB file took 2 x (their prompt + 4,096) of a 120,000-token minute, and its turn was refused
429 and waited 70 s). The same for all three count endpoints."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.fakeupstream import Reply, anthropic_message
from tests.integration.conftest import Gateway, MakeGateway, same_minute

ALICE = {"Authorization": "Bearer gk-alice"}
PRICES = "prices: {'claude-haiku-4-5*': {input: 1, output: 5}, 'gemini-2.5-flash*': {input: 1, output: 5}}\n"
GENAI_COUNT = Path(__file__).parents[1] / "corpus" / "requests" / "genai-3.6-count-tokens.json"
# Claude Code's `claude -p "summarize @big.txt"`: the file's 172 KB in the prompt, counted twice
# before the turn (audit, Claude Code 2.1.332).
BIG = "word " * (172_000 // 5)


def keys_yaml(**alice: Any) -> str:
    extra = "".join(f", {k}: {json.dumps(v)}" for k, v in alice.items())
    return PRICES + f"keys:\n  - {{name: alice, key: gk-alice{extra}}}\n"


async def this_minute(gw: Gateway) -> dict[str, Any]:
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
        return dict((await r.json())["this_minute"])


async def test_counts_before_a_turn_take_nothing_of_the_keys_minute(make_gateway: MakeGateway) -> None:
    """The audit's case with the anthropic SDK: two counts of the file, then the turn, on a key
    of 120,000 tokens and one request a minute. Held like generations, the counts took
    2 x (49,000 + 4,096) tokens and the turn was refused 429 key_tokens_per_minute."""
    gw = await make_gateway(keys_yaml(tokens_per_minute=120_000, requests_per_minute=1,
                                      budget={"usd": 100, "period": "day"}))  # fmt: skip
    await same_minute()
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    try:
        messages: Any = [{"role": "user", "content": "summarize this file:\n" + BIG}]
        for _ in range(2):
            counted = await client.messages.count_tokens(model="claude-haiku-4-5", messages=messages)
            assert counted.input_tokens > 30_000
        before = await this_minute(gw)
        assert (before["requests"], before["tokens"]) == (0, 0)
        gw.fake.always = Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=40_000, output_tokens=100))
        answer = await client.messages.create(model="claude-haiku-4-5", max_tokens=1000, messages=messages)
        assert answer.usage.input_tokens == 40_000
        assert len(gw.fake.requests) == 3  # two counts and the turn, none refused
        minute = await this_minute(gw)
        for _ in range(100):  # the turn's settle runs after its answer
            if minute["tokens"] == 40_100:
                break
            await asyncio.sleep(0.02)
            minute = await this_minute(gw)
        assert (minute["requests"], minute["tokens"]) == (1, 40_100)  # the turn's alone
        # Its one request of the minute spent, a count is still answered; a turn is not.
        assert (await client.messages.count_tokens(model="claude-haiku-4-5", messages=messages)).input_tokens
        with pytest.raises(anthropic.RateLimitError):
            await client.messages.create(model="claude-haiku-4-5", max_tokens=10, messages=messages)
        assert gw.metric("llm_gateway_key_spend_usd_total", key="alice", team="", model="claude-haiku-4-5") \
            == pytest.approx((40_000 * 1 + 100 * 5) / 1e6)  # fmt: skip
    finally:
        await client.close()


async def test_a_count_is_refused_for_the_keys_models_its_parallel_and_a_spent_budget_only(
    make_gateway: MakeGateway,
) -> None:
    """Each of the three count endpoints: a model the key may not use (403), a spent budget
    (402, never sent) and ``parallel`` filled by a generation in flight (429) refuse a count;
    a budget only held by requests in flight does not (a count holds none of it)."""
    genai = json.loads(GENAI_COUNT.read_text())["body"]
    counts = [("/v1/messages/count_tokens", {"model": "{m}", "messages": [{"role": "user", "content": "hi"}]}),
              ("/v1/responses/input_tokens", {"model": "{m}", "input": "hi"}),
              ("/v1beta/models/{m}:countTokens", genai)]  # fmt: skip

    async def count(gw: Gateway, path: str, body: dict[str, Any], model: str) -> tuple[int, dict[str, Any]]:
        doc = json.loads(json.dumps(body).replace("{m}", model))
        async with gw.session.post(gw.base + path.replace("{m}", model), json=doc,
                                   headers={**ALICE, "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
            return r.status, await r.json()

    models = ["claude-haiku-4-5", "claude-haiku-4-5", "gemini-2.5-flash"]
    gw = await make_gateway(keys_yaml(models=["claude-*", "gemini-*"], parallel=1,
                                      budget={"usd": 0.0001, "period": "day"}))  # fmt: skip
    for (path, body), model in zip(counts, models, strict=True):
        status, _ = await count(gw, path, body, "gpt-4o-mini")
        assert status == 403, path
        # (The fake serves no /responses/input_tokens: its 404 says the count was sent.)
        assert (await count(gw, path, body, model))[0] in (200, 404), path
    sent = len(gw.fake.requests)
    assert sent == 2  # Messages' and Responses' counts (Gemini's is estimated: no Gemini upstream)
    # A turn in flight fills `parallel` (and holds $1 of worst case against a $0.0001 budget).
    answered = asyncio.Event()
    gw.fake.script(Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=1000, output_tokens=100),
                         until=answered))  # fmt: skip
    turn = asyncio.create_task(gw.messages({"model": "claude-haiku-4-5", "max_tokens": 200_000,
                                            "messages": [{"role": "user", "content": "go"}]}, headers=ALICE))
    for _ in range(500):
        if len(gw.fake.requests) > sent:
            break
        await asyncio.sleep(0.01)
    status, err = await count(gw, "/v1/messages/count_tokens", counts[0][1], "claude-haiku-4-5")
    assert status == 429 and err["error"]["type"] == "rate_limit_error"
    assert "has its 1 requests in flight" in err["error"]["message"]
    answered.set()
    await turn
    # The turn spent the budget: every count is refused, and none is sent.
    sent = len(gw.fake.requests)
    for (path, body), model in zip(counts, ["claude-haiku-4-5", "claude-haiku-4-5", "gemini-2.5-flash"],
                                   strict=True):  # fmt: skip
        for _ in range(100):  # (the settle is written just after the answer)
            status, err = await count(gw, path, body, model)
            if status != 200:
                break
            await asyncio.sleep(0.02)
        assert status == 402, path
        assert "budget" in json.dumps(err)
    assert len(gw.fake.requests) <= sent + 3  # at most the counts answered before the settle


async def test_a_count_does_not_wait_for_a_budget_held_by_a_request_in_flight(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 0.5, "period": "day"}))
    answered = asyncio.Event()
    gw.fake.script(Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=10, output_tokens=10),
                         until=answered))  # fmt: skip
    turn = asyncio.create_task(gw.messages({"model": "claude-haiku-4-5", "max_tokens": 200_000,
                                            "messages": [{"role": "user", "content": "go"}]}, headers=ALICE))
    for _ in range(500):
        if gw.fake.requests:
            break
        await asyncio.sleep(0.01)
    counted = {"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "hi"}]}
    async with gw.session.post(gw.base + "/v1/messages/count_tokens", json=counted,
                               headers={**ALICE, "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        assert r.status == 200  # the turn holds $1 of worst case > $0.50: a turn would be 429 key_budget_held
    status, _, _ = await gw.messages({"model": "claude-haiku-4-5", "max_tokens": 10,
                                      "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)
    assert status == 429
    answered.set()
    assert (await turn)[0] == 200
