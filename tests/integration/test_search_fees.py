"""Web searches' fees through the gateway (gateway/keys/prices.py ``FEES``): a Responses request
declaring OpenAI's ``web_search`` tool reserves its searches where an upstream takes it in its
own API, and pays each ``web_search_call`` of the answer; a route that only translates it (the
Responses-to-chat translation drops hosted tools; Codex declares ``web_search`` on every
request) reserves none. Tokens are free here, so what is held and spent is the fees alone."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from tests.fakeupstream import (
    Reply,
    Seq,
    Stream,
    anthropic_head,
    chat_completion,
    response_object,
    responses_deltas,
    responses_head,
    sse,
    text_delta,
)
from tests.integration.conftest import Gateway, MakeGateway

ALICE = {"Authorization": "Bearer gk-alice"}
KEYS = ("prices: {'gpt-5*': {input: 0, output: 0, web_search: 1.0}}\n"
        "keys: [{name: alice, key: gk-alice, budget: {usd: 100, period: day}}]\n")  # fmt: skip
SEARCHED = {c["name"]: c["body"] for c in json.loads(
    (Path(__file__).parents[1] / "corpus" / "usage" / "server_tools.json").read_text())["cases"]}  # fmt: skip
OUTPUT = SEARCHED["openai-responses-web-search-output"]["output"]
REQUEST = {"model": "gpt-5", "input": "latest news about AI", "tools": [{"type": "web_search"}], "max_tool_calls": 3}


async def _budget(gw: Gateway) -> dict[str, Any]:
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
        return dict((await r.json())["budget"])


async def _held_while_in_flight(gw: Gateway, request: dict[str, Any] = REQUEST) -> float:
    answer = asyncio.ensure_future(gw.responses(request, headers=ALICE))
    for _ in range(200):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
            state = await r.json()
        if state["in_flight"]:
            break
        await asyncio.sleep(0.01)
    held = float(state["budget"]["reserved_usd"])
    status, _, _ = await answer
    assert status == 200
    return held


async def test_a_native_route_reserves_the_declared_searches_and_pays_each_call(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYS, ", apis: [responses]")
    gw.fake.always = Reply(200, {**response_object("gpt-5"), "output": OUTPUT}, delay_s=0.3)
    assert await _held_while_in_flight(gw) == 3.0  # max_tool_calls: 3, at $1 a search
    for _ in range(100):
        budget = await _budget(gw)
        if budget["spent_usd"]:
            break
        await asyncio.sleep(0.02)
    assert budget["spent_usd"] == 1.0 and budget["reserved_usd"] == 0  # the answer's one web_search_call


async def test_a_search_tool_with_no_bound_reserves_accounting_reserved_searches(make_gateway: MakeGateway) -> None:
    """Codex declares ``web_search`` on every request and names no bound: 5 searches held on each
    turn refused a $0.10 key's second concurrent ``codex exec`` 429 ``key_budget_held`` six
    times, and it died, with $0.0855 left (audit). One is held by default; the setting says how
    many; a bound the request names is held as it stands."""
    unbounded = {k: v for k, v in REQUEST.items() if k != "max_tool_calls"}
    for extra, request, held in (("", unbounded, 1.0), ("accounting: {reserved_searches: 4}\n", unbounded, 4.0),
                                 ("accounting: {reserved_searches: 0}\n", unbounded, 0.0),
                                 ("accounting: {reserved_searches: 0}\n", REQUEST, 3.0)):  # fmt: skip
        gw = await make_gateway(KEYS + extra, ", apis: [responses]")
        gw.fake.always = Reply(200, {**response_object("gpt-5"), "output": OUTPUT}, delay_s=0.3)
        assert await _held_while_in_flight(gw, request) == held, extra


async def _spent(gw: Gateway, headers: dict[str, str] = ALICE) -> float:
    for _ in range(100):
        async with gw.session.get(gw.base + "/v1/gateway/key", headers=headers) as r:
            budget = (await r.json())["budget"]
        if budget["spent_usd"] or not budget["reserved_usd"]:
            return float(budget["spent_usd"])
        await asyncio.sleep(0.02)
    raise AssertionError(budget)


async def test_a_cut_responses_stream_pays_the_searches_it_streamed(make_gateway: MakeGateway) -> None:
    """A search was counted only from response.completed, which a cut stream never gets: 3
    searches Codex had already received were never charged (audit)."""
    gw = await make_gateway(KEYS, ", apis: [responses]")
    seq = Seq()
    head = responses_head("gpt-5", seq=seq)
    searched = seq("response.output_item.done", output_index=1, item=OUTPUT[0])
    gw.fake.script(Stream([*head, searched, *responses_deltas(("Found", " it"), start_seq=seq.n + 1)], then="drop"))
    status, _, body = await gw.responses({**REQUEST, "stream": True}, headers=ALICE)
    assert status == 200 and b"web_search_call" in body
    assert await _spent(gw) == 1.0  # its one search, at $1; tokens are free here


async def test_a_cut_messages_stream_pays_the_searches_it_streamed(make_gateway: MakeGateway) -> None:
    """Anthropic states the searches only in message_delta's usage, at the end."""
    gw = await make_gateway("prices: {'claude-*': {input: 0, output: 0, web_search: 1.0}}\n"
                            "keys: [{name: alice, key: gk-alice, budget: {usd: 100, period: day}}]\n",
                            ", apis: [messages], key_header: x-api-key")  # fmt: skip
    events = SEARCHED["anthropic-web-search-stream"]["events"]
    gw.fake.script(Stream([*anthropic_head(), *(sse(e["type"], e) for e in events[2:]), text_delta("Found", 3)],
                          then="drop"))  # fmt: skip
    headers = {"x-api-key": "gk-alice", "anthropic-version": "2023-06-01"}
    status, _, body = await gw.messages({"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True,
                                         "messages": [{"role": "user", "content": "news?"}],
                                         "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
                                        headers=headers)  # fmt: skip
    assert status == 200 and b"server_tool_use" in body
    assert await _spent(gw, headers) == 1.0


async def test_a_route_that_only_translates_reserves_no_search(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(KEYS, ", apis: [chat]")
    gw.fake.always = Reply(200, chat_completion("gpt-5"), delay_s=0.3)
    assert await _held_while_in_flight(gw) == 0.0




async def test_a_token_count_reserves_no_search(make_gateway: MakeGateway) -> None:
    """``/v1/messages/count_tokens`` (relayed as it is) declares the tools it counts and searches
    nothing: it held the searches' fees all the same while in flight, and a count beside it was
    refused 429 ``key_budget_held`` (review)."""
    gw = await make_gateway("prices: {'claude-*': {input: 0, output: 0, web_search: 1.0}}\n"
                            "keys: [{name: alice, key: gk-alice, budget: {usd: 2, period: day}}]\n",
                            ", apis: [messages], key_header: x-api-key")  # fmt: skip
    gw.fake.always = Reply(200, {"input_tokens": 12}, delay_s=0.5)
    headers = {"x-api-key": "gk-alice", "anthropic-version": "2023-06-01"}
    searching = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "news?"}],
                 "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]}
    plain = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "hi"}]}

    async def count(body: dict[str, Any]) -> int:
        async with gw.session.post(gw.base + "/v1/messages/count_tokens", json=body, headers=headers) as r:
            return r.status

    first = asyncio.ensure_future(count(searching))
    await asyncio.sleep(0.2)  # admitted, and waiting on the upstream
    assert await count(plain) == 200  # $3 of searches held of $2 refused it
    assert await first == 200
