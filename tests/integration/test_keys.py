"""Keys for people and agents (issue #35): per-key models, limits, spend and budgets, answered by
the gateway in each API's envelope and never sent; spend exact against the fake's usage.

Prices here are made up to make the arithmetic plain: `gpt-4o-mini` at $1 per input token and
$2 per output token (`prices:` overrides the shipped table).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from tests.day_wall import clear_of_midnight
from tests.fakeupstream import (
    FakeUpstream,
    Reply,
    Stream,
    anthropic_head,
    anthropic_message,
    anthropic_tail,
    chat_completion,
    chunk,
    sse,
    text_delta,
)
from tests.integration.conftest import Gateway, MakeGateway, same_minute

PRICES = "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000, cache_read: 100000}}\n"
ANSWERS = Path(__file__).parents[1] / "corpus" / "answers"
ALICE = {"Authorization": "Bearer gk-alice"}


def keys_yaml(**alice: Any) -> str:
    extra = "".join(f", {k}: {json.dumps(v)}" for k, v in alice.items())
    return (PRICES + "keys:\n"
            f"  - {{name: alice, key: gk-alice, team: web{extra}}}\n"
            "  - {name: root, key: gk-root, admin: true}\n"
            "teams: [{name: web}]\n")  # fmt: skip


async def key_state(gw: Gateway, headers: dict[str, str] = ALICE) -> dict[str, Any]:
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=headers) as r:
        assert r.status == 200
        return dict(await r.json())


async def settled(gw: Gateway) -> dict[str, Any]:
    """The key's state once every reservation is settled (settling runs after the answer)."""
    for _ in range(100):
        state = await key_state(gw)
        held = sum(state.get(b, {}).get("reserved_usd", 0) for b in ("budget", "team_budget"))
        if held == 0 and state["in_flight"] == 0:
            return state
        await asyncio.sleep(0.02)
    raise AssertionError(f"never settled: {state}")


async def test_a_model_the_key_may_not_use_is_refused_in_each_apis_envelope(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(models=["claude-*"]))
    status, headers, body = await gw.chat(headers=ALICE)
    assert status == 403 and headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"
    err = json.loads(body)["error"]
    assert err["code"] == "model_not_allowed"
    assert err["message"] == "key 'alice' may not use model 'gpt-4o-mini'; it may use: claude-*"
    status, _, body = await gw.responses(headers=ALICE)
    assert status == 403 and json.loads(body)["error"]["code"] == "model_not_allowed"
    status, _, body = await gw.messages(
        {"model": "gpt-4o-mini", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)
    assert status == 403 and json.loads(body)["type"] == "error"
    assert gw.fake.requests == []
    assert (await gw.messages(headers=ALICE))[0] == 200  # claude-sonnet-4-5 is allowed
    assert gw.metric("llm_gateway_key_refusals_total", key="alice", reason="model") == 3
    # Codex stops at once on a 400 and retries a 403 five times: it gets the refusal as a 400.
    status, headers, body = await gw.responses(headers={**ALICE, "originator": "codex_exec"})
    assert status == 400 and json.loads(body)["error"]["code"] == "model_not_allowed"
    assert headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"


async def test_requests_per_minute_are_answered_by_the_gateway_with_the_minutes_end(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(requests_per_minute=2))
    await same_minute()  # a minute ending before the third let it through (200, not 429)
    for _ in range(2):
        assert (await gw.chat(headers=ALICE))[0] == 200
    status, headers, body = await gw.chat(headers=ALICE)
    assert status == 429 and headers["x-llm-error-type"] == "rate_limit"
    minute_end = (int(time.time() // 60) + 1) * 60
    assert 0 < int(headers["retry-after"]) <= 60
    assert abs(int(headers["x-llm-error-reset-at"]) / 1000 - minute_end) <= 1
    err = json.loads(body)["error"]
    assert err["code"] == "key_requests_per_minute" and "key 'alice' sent its 2 requests of this minute" in err["message"]
    assert len(gw.fake.chat_requests()) == 2
    # Another key is not held to alice's limit.
    assert (await gw.chat(headers={"Authorization": "Bearer gk-root"}))[0] == 200


async def test_parallel_requests_past_the_limit_are_refused_while_the_first_runs(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(parallel=1))
    # The first is out until the second has been answered (not for 0.4 s, with 0.15 s to get
    # it there: both guesses a loaded machine could miss).
    answered = asyncio.Event()
    gw.fake.script(Reply(200, chat_completion(), until=answered))
    first = asyncio.create_task(gw.chat(headers=ALICE))
    for _ in range(500):  # until it has reached the upstream: admitted, its slot held
        if gw.fake.chat_requests():
            break
        await asyncio.sleep(0.01)
    status, headers, body = await gw.chat(headers=ALICE)
    answered.set()
    assert status == 429 and json.loads(body)["error"]["code"] == "key_parallel_limit"
    assert headers["retry-after"] == "1"
    assert (await first)[0] == 200
    await settled_slots(gw)
    assert (await gw.chat(headers=ALICE))[0] == 200  # the slot came back


async def settled_slots(gw: Gateway) -> None:
    for _ in range(100):
        if (await key_state(gw))["in_flight"] == 0:
            return
        await asyncio.sleep(0.02)


async def test_spend_is_exact_against_the_providers_usage(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}))
    # Buffered: 12 prompt + 7 completion tokens.
    assert (await gw.chat(headers=ALICE))[0] == 200
    assert (await settled(gw))["budget"]["spent_usd"] == 12 * 1 + 7 * 2
    # Cached: 100 prompt tokens of which 80 from the cache ($0.10 each), 5 out.
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "total_tokens": 105,
             "prompt_tokens_details": {"cached_tokens": 80}}  # fmt: skip
    gw.fake.script(Reply(200, {**chat_completion(), "usage": usage}))
    assert (await gw.chat(headers=ALICE))[0] == 200
    assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(26 + 20 + 80 * 0.1 + 5 * 2)
    # Streamed: the gateway asks for the usage chunk (11 prompt tokens, one per word out).
    events = [chunk({"role": "assistant", "content": ""}), chunk({"content": "one two three"}),
              chunk({}, "stop"), {**chunk({}), "choices": [],
              "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}}]  # fmt: skip
    gw.fake.script(Stream(events))
    payload = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "count"}]}
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        await r.read()
    assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(64 + 11 + 3 * 2)
    # Translated: a Messages client on this chat upstream, the answer's usage as the fake sent it.
    status, _, _ = await gw.messages(
        {"model": "gpt-4o-mini", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)
    assert status == 200
    assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(81 + 12 + 7 * 2)
    assert gw.metric("llm_gateway_key_spend_usd_total", key="alice", team="web", model="gpt-4o-mini") == (
        pytest.approx(81 + 26))


async def test_a_rescued_request_costs_what_the_provider_answered(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}),
                            upstream_yaml=", context_window: 2000")  # fmt: skip
    gw.fake.context_limit = 2000
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: " + "log line " * 80}
            for i in range(31)]  # fmt: skip
    status, headers, _ = await gw.chat({"model": "gpt-4o-mini", "messages": msgs}, headers=ALICE)
    assert status == 200 and headers["x-llm-compressed"] == "true"
    # The overflow answered no usage; the rescue's answer did (12 + 7 tokens).
    assert (await settled(gw))["budget"]["spent_usd"] == 12 + 7 * 2


async def test_a_spent_budget_is_402_with_the_periods_end_and_never_sent(make_gateway: MakeGateway) -> None:
    wall = clear_of_midnight()
    gw = await make_gateway(keys_yaml(budget={"usd": 20, "period": "day"}), wall=wall)
    assert (await gw.chat(headers=ALICE))[0] == 200  # $26 of $20: admitted below the budget
    await settled(gw)
    status, headers, body = await gw.chat(headers=ALICE)
    assert status == 402 and headers["x-llm-error-type"] == "budget"
    assert headers["x-llm-error-retryable"] == "false" and headers["x-should-retry"] == "false"
    midnight = datetime.fromtimestamp(wall(), UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    midnight += timedelta(days=1)
    assert int(headers["x-llm-error-reset-at"]) == int(midnight.timestamp()) * 1000
    err = json.loads(body)["error"]
    assert err["code"] == "budget_exhausted"
    assert err["message"] == (f"key 'alice' spent $26.00 of its $20.00 daily budget; resets "
                              f"{midnight.strftime('%Y-%m-%dT%H:%M:%SZ')}")  # fmt: skip
    assert len(gw.fake.chat_requests()) == 1
    # Messages clients get it in Anthropic's envelope.
    status, _, body = await gw.messages(
        {"model": "gpt-4o-mini", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)
    assert status == 402 and json.loads(body)["type"] == "error"


async def test_codex_gets_the_usage_limit_it_stops_on(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 1, "period": "week"}))
    assert (await gw.chat(headers=ALICE))[0] == 200
    await settled(gw)
    codex = {**ALICE, "originator": "codex_exec", "User-Agent": "codex_exec/0.169.0"}
    status, headers, body = await gw.responses(headers=codex)
    assert status == 429 and headers["x-llm-error-type"] == "budget"
    assert headers["x-llm-error-retryable"] == "false"
    err = json.loads(body)["error"]
    assert err["type"] == "usage_limit_reached" and err["resets_at"] == int(headers["x-llm-error-reset-at"]) // 1000
    assert err["message"].count("resets ") == 1 and "(at " not in err["message"]  # the reset named once


async def test_a_team_budget_is_shared_by_its_keys(make_gateway: MakeGateway) -> None:
    text = (PRICES + "keys:\n  - {name: alice, key: gk-alice, team: web}\n  - {name: bob, key: gk-bob, team: web}\n"
            "teams: [{name: web, budget: {usd: 30, period: month}}]\n")  # fmt: skip
    gw = await make_gateway(text)
    assert (await gw.chat(headers=ALICE))[0] == 200  # $26
    await settled(gw)
    assert (await gw.chat(headers={"x-api-key": "gk-bob"}))[0] == 200  # $52: admitted below $30
    await settled(gw)  # bob's settle, seen through the team's budget (a fixed 0.1 s sleep guessed it)
    status, _, body = await gw.chat(headers=ALICE)
    assert status == 402 and "team 'web' spent $52.00 of its $30.00 monthly budget" in json.loads(body)["error"]["message"]


async def test_a_clients_requests_one_after_another_never_meet_a_parallel_limit_of_one(
    make_gateway: MakeGateway,
) -> None:
    """A request's slot came back only when its settle was written, a few milliseconds after
    its answer: a client sending its next request at once was refused (the openai SDK, stock,
    took 8 s over ten calls, sleeping its retry-after on eight refusals; measured)."""
    gw = await make_gateway(keys_yaml(parallel=1))
    statuses = [(await gw.chat(headers=ALICE))[0] for _ in range(15)]
    statuses += [(await gw.chat({"model": "gpt-4o-mini", "stream": True,
                                 "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE))[0]
                 for _ in range(15)]  # fmt: skip
    assert statuses == [200] * 30


async def test_fifty_parallel_requests_at_the_edge_overspend_by_one_reservation_at_most(
    make_gateway: MakeGateway,
) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 100, "period": "day"}))
    for _ in range(3):  # $78 spent: the edge is one request away
        assert (await gw.chat(headers=ALICE))[0] == 200
    assert (await settled(gw))["budget"]["spent_usd"] == 78
    gw.fake.always = Reply(200, chat_completion(), delay_s=0.3)  # every one in flight at once
    payload = {"model": "gpt-4o-mini", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    answers = await asyncio.gather(*(gw.chat(payload, headers=ALICE) for _ in range(50)))
    statuses = [a[0] for a in answers]
    state = await settled(gw)
    admitted = statuses.count(200)
    # Each admitted reserved its worst case (its ~17-token prompt and 10 tokens out: about $37);
    # spent plus reserved reached the budget after the first, so it alone went over.
    assert admitted == 1 and state["budget"]["spent_usd"] == 78 + 26
    assert len(gw.fake.chat_requests()) == 3 + admitted
    # The rest were refused while the budget was held, not spent: asked to try again shortly
    # (429 key_budget_held), not told to stop. Now it is spent: 402, stop.
    refused = [json.loads(a[2])["error"] for a in answers if a[0] != 200]
    assert {e["code"] for e in refused} == {"key_budget_held"} and len(refused) == 49
    assert "requests in flight hold $" in refused[0]["message"]
    status, headers, body = await gw.chat(payload, headers=ALICE)
    assert status == 402 and json.loads(body)["error"]["code"] == "budget_exhausted"


async def test_a_request_for_n_answers_reserves_n_answers_worth(make_gateway: MakeGateway) -> None:
    """`n: 10` asks for ten answers of up to max_tokens each: reserving one let 7 such requests
    spend $7.07 of a $1 budget (measured). Ten answers' worth is reserved now."""
    gw = await make_gateway(keys_yaml(budget={"usd": 500, "period": "day"}))
    gw.fake.always = Reply(200, chat_completion(), delay_s=0.3)
    payload = {"model": "gpt-4o-mini", "max_tokens": 10, "n": 10, "messages": [{"role": "user", "content": "hi"}]}
    answers = await asyncio.gather(*(gw.chat(payload, headers=ALICE) for _ in range(5)))
    # ~17 prompt tokens at $1 and 10 x 10 out at $2: ~$217 each; $500 admits the first three.
    assert [a[0] for a in answers].count(200) == 3


@pytest.mark.parametrize(("field", "value", "out"), [
    ("max_tokens", 100000.0, 100_000),  # the audit's: reserved as 4,096, served 100,000 by vLLM
    ("max_tokens", "100000", 100_000),
    ("max_completion_tokens", "10", 4096),  # llama.cpp serves its default for a string: not below it
    ("n", "3", 3 * 4096),  # three answers to a lax server
])  # fmt: skip
async def test_a_budget_named_by_a_float_or_a_string_is_reserved_as_a_lax_server_reads_it(
    make_gateway: MakeGateway, field: str, value: Any, out: int,
) -> None:
    """vLLM's pydantic reads ``100000.0`` and ``"100000"`` as 100000, llama.cpp truncates a float
    and uses its own default for a string: the reservation holds at least what either serves.
    The request goes as it came (the upstream decides)."""
    gw = await make_gateway(keys_yaml(budget={"usd": 10_000_000, "period": "day"}))
    gw.fake.always = Reply(200, chat_completion(), delay_s=0.3)
    payload = {"model": "gpt-4o-mini", field: value, "messages": [{"role": "user", "content": "hi"}]}
    answer = asyncio.ensure_future(gw.chat(payload, headers=ALICE))
    for _ in range(100):
        reserved = (await key_state(gw))["budget"]["reserved_usd"]
        if reserved:
            break
        await asyncio.sleep(0.01)
    assert (await answer)[0] == 200
    assert out * 2 < reserved < out * 2 + 100, reserved  # $2 an output token, a prompt of a few dozen
    assert gw.fake.chat_requests()[-1].json()[field] == value


async def test_tokens_per_minute_hold_under_concurrency(make_gateway: MakeGateway) -> None:
    """The minute counts the output a request asks for at admission (as OpenAI counts it), then
    what it used: 50 requests at once no longer all pass a limit each fits under."""
    gw = await make_gateway(keys_yaml(tokens_per_minute=500))
    await same_minute()
    gw.fake.always = Reply(200, chat_completion(), delay_s=0.3)
    payload = {"model": "gpt-4o-mini", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    answers = await asyncio.gather(*(gw.chat(payload, headers=ALICE) for _ in range(50)))
    statuses = [a[0] for a in answers]
    # ~130 tokens each at admission (a ~30-token prompt estimate and 100 out): three fit in 500.
    assert statuses.count(200) == 3 and statuses.count(429) == 47
    state = await settled(gw)
    assert state["this_minute"]["tokens"] == 3 * (12 + 7)  # then what the fake's usage says they used


async def test_the_key_endpoint_tells_a_key_its_state_and_an_admin_every_keys(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(requests_per_minute=10, budget={"usd": 50, "period": "month"}))
    await same_minute()  # this minute's requests are read below
    assert (await gw.chat(headers=ALICE))[0] == 200
    state = await settled(gw)
    assert state["name"] == "alice" and state["team"] == "web" and state["models"] == ["*"]
    assert state["limits"] == {"requests_per_minute": 10, "tokens_per_minute": None, "parallel": None}
    assert state["this_minute"]["requests"] == 1
    assert state["budget"]["usd"] == 50 and state["budget"]["spent_usd"] == 26 and state["budget"]["left_usd"] == 24
    assert state["budget"]["resets_at"].endswith("T00:00:00Z") and state["budget"]["resets_at"][8:10] == "01"
    async with gw.session.get(gw.base + "/v1/gateway/keys", headers=ALICE) as r:
        assert r.status == 403 and (await r.json())["error"]["code"] == "admin_required"
    async with gw.session.get(gw.base + "/v1/gateway/keys", headers={"x-api-key": "gk-root"}) as r:
        assert r.status == 200
        listed = (await r.json())["keys"]
    assert [k["name"] for k in listed] == ["alice", "root"]
    assert "gk-" not in json.dumps(listed)
    async with gw.session.get(gw.base + "/v1/gateway/key") as r:
        assert r.status == 401
    # The gateway's own namespace is never a provider's: another method or path under it was
    # forwarded upstream, key and all.
    sent = len(gw.fake.requests)
    for method, path in (("POST", "/v1/gateway/key"), ("DELETE", "/v1/gateway/keys"), ("GET", "/v1/gateway/x")):
        async with gw.session.request(method, gw.base + path, headers={"x-api-key": "gk-root"}) as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    assert len(gw.fake.requests) == sent


async def test_the_log_line_names_the_agent_session_without_keys_too(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """docs/operations/logs.md: a request that names its agent session adds ``session``. It was
    read only for a request of a gateway key: without ``keys:`` a Claude Code session's lines
    carried none (3 requests, 0 sessions logged)."""
    gw = await make_gateway()
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        await gw.chat(headers={"x-claude-code-session-id": "4f1c2a9e-0b7d-4c55-9a1e-1f2d3c4b5a69"})
        await gw.chat({"model": "gpt-4o-mini", "user": "jane.doe@example.com",
                       "messages": [{"role": "user", "content": "hi"}]})  # fmt: skip
        await gw.chat()
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [line.get("session") for line in lines] == ["4f1c2a9e-0b7d-4c55-9a1e-1f2d3c4b5a69", "***@example.com", None]


async def test_the_log_line_attributes_key_team_cost_and_session_and_says_when_unpriced(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    gw = await make_gateway(keys_yaml())
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        await gw.chat(headers={**ALICE, "session-id": "019a-codex-session"})
        await gw.chat({"model": "qwen3-coder", "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    priced, unpriced = lines
    assert priced["key"] == "alice" and priced["team"] == "web" and priced["cost_usd"] == 26
    assert priced["session"] == "019a-codex-session" and "priced" not in priced
    assert "legs" not in priced  # one part: its usage and cost_usd say it all
    assert "budget_period" not in priced and "team_budget_period" not in priced  # no budget
    assert unpriced["cost_usd"] == 0 and unpriced["priced"] is False
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="qwen3-coder", kind="prompt",
                     priced="false") == 12  # fmt: skip
    assert "gk-alice" not in caplog.text


async def test_a_request_across_midnight_is_logged_with_the_period_it_is_charged_to(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """Admitted at 23:59:59 and answered after midnight: charged to the day that ended (its
    budget's books), while its log line's ``ts`` is its end. The line names the period, so a
    day's sum of the log is the day's budget (audit: it differed)."""
    clock = [datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC).timestamp()]
    text = (PRICES + "keys:\n  - {name: alice, key: gk-alice, team: web, budget: {usd: 100, period: day}}\n"
            "teams: [{name: web, budget: {usd: 1000, period: month}}]\n")  # fmt: skip
    gw = await make_gateway(text, wall=lambda: clock[0])
    answered = asyncio.Event()
    gw.fake.script(Reply(200, chat_completion(), until=answered))
    with caplog.at_level(logging.INFO, logger="gateway.access"):
        turn = asyncio.create_task(gw.chat(headers=ALICE))
        for _ in range(500):
            if gw.fake.requests:
                break
            await asyncio.sleep(0.01)
        clock[0] = datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC).timestamp()
        answered.set()
        assert (await turn)[0] == 200
        for _ in range(100):  # settled into the day that ended: the new one spent nothing
            state = await key_state(gw)
            if state["in_flight"] == 0:
                break
            await asyncio.sleep(0.02)
        await gw.chat(headers=ALICE)  # a request of the new day, for contrast
    assert state["budget"]["spent_usd"] == 0 and state["budget"]["resets_at"] == "2026-12-01T00:00:00Z"
    across, after = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"
                     and r.msg["path"] == "/v1/chat/completions"]  # fmt: skip
    assert (across["budget_period"], across["team_budget_period"], across["cost_usd"]) == ("2026-11-29", "2026-11", 26)
    assert (after["budget_period"], after["team_budget_period"]) == ("2026-11-30", "2026-11")


async def test_flat_client_keys_keep_working_beside_named_keys(make_gateway: MakeGateway) -> None:
    gw = await make_gateway("server: {client_keys: 'gk-old-1'}\n" + keys_yaml())
    assert (await gw.chat(headers={"Authorization": "Bearer gk-old-1"}))[0] == 200
    assert (await gw.chat(headers={"x-goog-api-key": "gk-alice"}))[0] == 200
    assert (await gw.chat(headers={"Authorization": "Bearer gk-nobody"}))[0] == 401
    sent = gw.fake.chat_requests()[-1]
    assert "x-goog-api-key" not in sent.headers and "Authorization" not in sent.headers  # never upstream



async def test_the_request_span_carries_the_key_and_its_cost(make_gateway: MakeGateway) -> None:
    from gateway.live import LIVE
    from tests.spans import in_memory

    gw = await make_gateway(keys_yaml())
    tracing, exporter = in_memory()
    gw.app[LIVE].services.tracing = tracing
    assert (await gw.chat(headers=ALICE))[0] == 200
    (server,) = [s for s in exporter.get_finished_spans() if s.parent is None or s.kind.name == "SERVER"]
    attrs = dict(server.attributes or {})
    assert attrs["llm_gateway.key"] == "alice" and attrs["llm_gateway.team"] == "web"
    assert attrs["llm_gateway.cost_usd"] == 26 and attrs["llm_gateway.cost_priced"] is True
    assert "gk-alice" not in json.dumps({k: str(v) for k, v in attrs.items()})


@pytest.mark.parametrize("mode", ["open", "closed"])
async def test_a_state_store_that_does_not_answer_fails_open_or_closed_as_configured(
    make_gateway: MakeGateway, mode: str
) -> None:
    dead = "redis://127.0.0.1:1/0"  # nothing listens there: every operation falls back at once
    gw = await make_gateway(keys_yaml(budget={"usd": 100, "period": "day"}) +
                            f"state: {{backend: redis, url: '{dead}', timeout_ms: 50}}\n"
                            f"accounting: {{when_store_down: {mode}}}\n")  # fmt: skip
    status, headers, body = await gw.chat(headers=ALICE)
    if mode == "open":
        assert status == 200  # counted in this process's memory meanwhile
        # That count is this replica's alone: not shown as the key's spend (no reading was made).
        state = await key_state(gw)
        assert state["state_unavailable"]["requests"].startswith("served, counted in this replica's memory")
        assert state["budget"]["spent_usd"] is None and state["budget"]["usd"] == 100
    else:
        assert status == 503 and json.loads(body)["error"]["code"] == "accounting_unavailable"
        assert headers["x-llm-error-type"] == "provider_unavailable" and "retry-after" in headers
        assert gw.fake.requests == []
    assert gw.metric("llm_gateway_state_fallbacks_total", backend="redis", op="ledger_admit") >= 1


async def test_a_stream_the_client_left_settles_what_was_relayed(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), real_sleep=True)
    words = [chunk({"role": "assistant", "content": ""})] + [chunk({"content": f" word{i}"}) for i in range(5)]
    gw.fake.script(Stream(words, then="stall"))  # the answer goes on; the client does not wait
    payload = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        await r.content.readuntil(b"word4")
    # The client left mid-answer: the words it was shown were generated, and are paid for.
    state = await settled(gw)
    assert state["budget"]["spent_usd"] > 0 and state["in_flight"] == 0
    # and so was the prompt, though the provider's count never came: estimated from its size.
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="prompt",
                     priced="true") > 0  # fmt: skip


async def test_a_buffered_answer_without_usage_is_paid_for_all_the_same(make_gateway: MakeGateway) -> None:
    # An answer with no usage member (tests/corpus/answers/gemini-pro-function-call.json is one
    # Google sent) cost its key $0 on a native route: nothing counted its output.
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), upstream_yaml=", apis: [chat]")
    text = "one two three four five six"
    answer = {k: v for k, v in chat_completion(content=text).items() if k != "usage"}
    payload = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "count"}]}
    gw.fake.script(Reply(200, answer))
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        assert "usage" not in await r.json()  # the answer goes as it came
    state = await settled(gw)
    generated = round(len(text) / 3.5)  # the answer's text, at the estimator's rate
    prompt = gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="prompt", priced="true")
    assert prompt > 0  # as admission estimated it
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="completion",
                     priced="true") == generated  # fmt: skip
    assert state["budget"]["spent_usd"] == pytest.approx(prompt * 1 + generated * 2)
    # An answer that is only a tool call is counted from its arguments.
    call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path":"README.md"}'}}
    gw.fake.script(Reply(200, {**answer, "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": None, "tool_calls": [call]}}]}))  # fmt: skip
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
    after = await settled(gw)
    assert after["budget"]["spent_usd"] >= state["budget"]["spent_usd"] + round(20 / 3.5) * 2


@pytest.mark.parametrize("stream", [False, True])
async def test_an_estimate_of_uncounted_output_is_never_above_what_the_request_asked_for(
    make_gateway: MakeGateway, stream: bool
) -> None:
    """Text over bytes/3.5 can read above the output asked for ("word word ..." is 1.4x its
    tokens): the provider bills at most max_tokens, so the key pays no more (keys audit: a
    $0.01 budget's books showed $0.0146 for what the provider billed $0.0101)."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), upstream_yaml=", apis: [chat]")
    text = "word " * 10  # 50 bytes: 14 tokens by the estimate, for an answer capped at 10
    payload = {"model": "gpt-4o-mini", "max_tokens": 10, "stream": stream, "messages": [{"role": "user", "content": "x"}]}
    if stream:
        gw.fake.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": text}), chunk({}, "length")]))
    else:
        gw.fake.script(Reply(200, {k: v for k, v in chat_completion(content=text).items() if k != "usage"}))
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        await r.read()
    await settled(gw)
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="completion",
                     priced="true") == 10  # fmt: skip


async def test_a_stream_whose_server_counts_nothing_is_paid_for_all_the_same(make_gateway: MakeGateway) -> None:
    # llama-cpp-python 0.3 and other servers send no usage chunk, asked or not (tests/real/NOTES.md):
    # the stream ended well, and without an estimate the key paid nothing for it.
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), upstream_yaml=", apis: [chat]")
    words = [chunk({"role": "assistant", "content": ""}), chunk({"content": "one two three four five six"}),
             chunk({}, "stop")]  # fmt: skip
    payload = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "count"}]}
    gw.fake.script(Stream(words))
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        assert b"six" in await r.read()
    state = await settled(gw)
    shown = round(len(" one two three four five six".strip()) / 3.5)  # the relayed text, at the estimator's rate
    prompt = gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="prompt", priced="true")
    assert prompt > 0
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="completion",
                     priced="true") == shown  # fmt: skip
    assert state["budget"]["spent_usd"] == pytest.approx(prompt * 1 + shown * 2)
    # Translated the same way: a Messages client's stream on this chat upstream.
    gw.fake.script(Stream(words))
    async with gw.session.post(gw.base + "/v1/messages", headers={**ALICE, "anthropic-version": "2023-06-01"}, json={
            "model": "gpt-4o-mini", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "count"}]}) as r:  # fmt: skip
        assert r.status == 200
        assert b"message_stop" in await r.read()
    after = await settled(gw)
    assert after["budget"]["spent_usd"] > state["budget"]["spent_usd"] + shown * 2


async def test_paths_relayed_as_they_are_are_held_to_the_keys_rules_and_paid_for(make_gateway: MakeGateway) -> None:
    """/v1/completions, /v1/embeddings, Codex's /v1/responses/compact and the like spend the
    operator's provider keys as much as chat does: the key's models, limits and budget apply,
    and a JSON answer's usage is its cost."""
    gw = await make_gateway(keys_yaml(models=["gpt-4o-mini*"], budget={"usd": 30, "period": "day"}))
    for path in ("/v1/completions", "/v1/embeddings", "/v1/chat/completions/", "/v1/responses/compact"):
        async with gw.session.post(gw.base + path, json={"model": "claude-sonnet-4-5", "prompt": "hi"},
                                   headers=ALICE) as r:  # fmt: skip
            assert r.status == 403, path
            assert (await r.json())["error"]["code"] == "model_not_allowed"
    assert gw.fake.requests == []
    completion = {"id": "cmpl-1", "object": "text_completion", "model": "gpt-4o-mini",
                  "choices": [{"index": 0, "text": "hello", "finish_reason": "stop"}],
                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}  # fmt: skip
    for _ in range(2):
        gw.fake.script(Reply(200, completion))
        async with gw.session.post(gw.base + "/v1/completions", json={"model": "gpt-4o-mini", "prompt": "x"},
                                   headers=ALICE) as r:  # fmt: skip
            assert r.status == 200 and (await r.json())["id"] == "cmpl-1"
        state = await settled(gw)
        assert state["budget"]["spent_usd"] in (20, 40)  # its usage at the key's prices, each time
    async with gw.session.post(gw.base + "/v1/embeddings", json={"model": "gpt-4o-mini", "input": "x"},
                               headers=ALICE) as r:  # fmt: skip
        assert r.status == 402 and (await r.json())["error"]["code"] == "budget_exhausted"  # $40 of $30
    assert len(gw.fake.requests) == 2


class AnyPath(FakeUpstream):
    """The fake, answering its script at a path it does not serve as an API's (one with a
    trailing slash) and at /embeddings, which it otherwise answers itself. Whether a provider
    serves a trailing slash is not known; what the gateway makes of the answer is the point."""

    async def _answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        if self.steps and not request.path.endswith(("/completions", "/messages", "/responses")):
            return await self._play(request, self.steps.popleft())
        return await super()._answer(request, body)


@pytest.fixture
async def any_path() -> Any:
    fake = await AnyPath().start()
    yield fake
    await fake.close()


def corpus_stream(name: str) -> list[bytes]:
    """A real stream's events as its server sent them (tests/corpus/answers/): its bytes, or
    its chunks' JSON put back as ``data:`` events, then [DONE]."""
    doc = json.loads((ANSWERS / f"{name}.json").read_text())
    if "chunks" in doc:
        return [b"data: " + c.encode() + b"\n\n" for c in doc["chunks"]] + [b"data: [DONE]\n\n"]
    text = doc["stream"] if isinstance(doc["stream"], str) else doc["body"]
    return [e + b"\n\n" for e in text.encode().strip().split(b"\n\n")]


RELAYED_STREAMS = [  # the path, the upstream's own stream, its (prompt, completion) usage
    ("/v1/completions", "completions-vllm-usage.stream", (7, 10)),
    ("/v1/chat/completions/", "openai-gpt-4o-text.stream", (14, 47)),
    ("/v1/messages/", "messages-stream-sdk-text-then-tool", (377, 65)),  # message_start, message_delta
]


@pytest.mark.parametrize(("path", "answer", "usage"), RELAYED_STREAMS)
async def test_a_stream_relayed_as_it_is_is_paid_for_from_the_usage_it_carries(
    make_gateway: MakeGateway, any_path: AnyPath, path: str, answer: str, usage: tuple[int, int]
) -> None:
    """A stream on a path relayed as it is was charged $0, and its minute only the prompt's
    estimate: a budgeted key streamed completion after completion of 100,000 tokens for nothing
    (audit: five with the openai SDK's ``completions.create(stream=True)``, spent unchanged). Its
    usage, read where its API puts it, is what the key pays and what its minute counts."""
    await same_minute()
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}, tokens_per_minute=1000000),
                            fake=any_path)  # fmt: skip
    events = corpus_stream(answer)
    gw.fake.script(Stream(events, then="eof"))
    payload: dict[str, Any] = {"model": "gpt-4o-mini", "max_tokens": 100, "stream": True}
    payload.update({"prompt": "def fib(n):", "stream_options": {"include_usage": True}} if "messages" not in path
                   else {"messages": [{"role": "user", "content": "weather in Paris?"}]})  # fmt: skip
    async with gw.session.post(gw.base + path, json=payload,
                               headers={**ALICE, "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        assert await r.read() == b"".join(events)  # relayed as it came
    state = await settled(gw)
    prompt, completion = usage
    assert state["budget"]["spent_usd"] == prompt * 1 + completion * 2
    assert state["this_minute"]["tokens"] == prompt + completion


async def test_a_relayed_stream_without_a_count_pays_for_its_prompt_and_the_text_it_showed(
    make_gateway: MakeGateway,
) -> None:
    """vLLM sends a completion's usage chunk only when asked (``stream_options``): without it, the
    stream is counted as a native one that brings no count, the prompt as admitted, the answer
    from its text (``choices[].text``), never $0."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}))
    events = [e for e in corpus_stream("completions-vllm-usage.stream") if b'"usage":{' not in e]
    gw.fake.script(Stream(events, then="eof"))
    async with gw.session.post(gw.base + "/v1/completions", headers=ALICE, json={
            "model": "gpt-4o-mini", "prompt": "def fib(n):", "max_tokens": 100, "stream": True}) as r:  # fmt: skip
        assert r.status == 200 and b"NEVER" in await r.read()
    state = await settled(gw)
    shown = round(len("NEVERGONNAGIVEYOUUP") / 3.5)
    prompt = gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="prompt", priced="true")
    assert prompt > 0
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="completion",
                     priced="true") == shown  # fmt: skip
    assert state["budget"]["spent_usd"] == pytest.approx(prompt * 1 + shown * 2)


def _embeddings(n: int, prompt_tokens: int) -> dict[str, Any]:
    """An embeddings answer as the openai SDK asks for it by default (``encoding_format:
    base64``): text-embedding-3-large's 3,072 floats are 16,384 base64 characters an input, the
    list in the shape of OpenAI's API reference (the embedding object), usage last."""
    vector = base64.b64encode(struct.pack("<3072f", *([0.015625] * 3072))).decode()
    return {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": vector} for i in range(n)],
            "model": "text-embedding-3-large", "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


async def test_a_relayed_answer_of_megabytes_is_paid_for_from_its_usage_and_a_cut_one_its_prompt(
    make_gateway: MakeGateway, any_path: AnyPath
) -> None:
    """An answer past 4 MiB was not read for usage: 300 base64 embeddings (4.9 MB) charged $0
    where 100 were charged their prompt tokens (audit). Its end is kept, and its usage is there.
    One cut before its usage came is charged the prompt as admitted: the provider read it."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), fake=any_path)
    big = json.dumps(_embeddings(300, 3000)).encode()
    assert len(big) > 4 * 1024 * 1024
    gw.fake.script(Reply(200, big, headers={"Content-Type": "application/json"}))
    payload = {"model": "gpt-4o-mini", "input": ["the same line"] * 300}
    async with gw.session.post(gw.base + "/v1/embeddings", json=payload, headers=ALICE) as r:
        assert r.status == 200 and len(await r.read()) == len(big)
    state = await settled(gw)
    assert state["budget"]["spent_usd"] == 3000
    # Cut after 1 MB: no usage came, though the provider read the whole input.
    gw.fake.script(Stream([big[: 1 << 20]], then="drop", headers={"Content-Type": "application/json"}))
    async with gw.session.post(gw.base + "/v1/embeddings", json=payload, headers=ALICE) as r:
        with pytest.raises(aiohttp.ClientPayloadError):
            await r.read()
    after = await settled(gw)
    prompt = round(len(json.dumps(payload)) / 3.5)
    assert after["budget"]["spent_usd"] == pytest.approx(3000 + prompt, abs=1)


async def test_a_relayed_request_that_names_no_model_is_refused_to_a_key_whose_rules_it_would_escape(
    make_gateway: MakeGateway,
) -> None:
    """A batch names its models inside (Anthropic) or in a file (OpenAI) and is spent later at
    the provider with no usage in its answer; batch results and stored responses are the whole
    provider account's. A key with models, limits or a budget may not relay them (an admin's
    may); a model listing goes through."""
    gw = await make_gateway(keys_yaml(models=["gpt-4o-mini*"], budget={"usd": 1, "period": "day"}))
    batch = {"requests": [{"custom_id": "1", "params": {"model": "claude-opus-4-1", "max_tokens": 64000,
                                                        "messages": [{"role": "user", "content": "hi"}]}}]}
    anthropic_headers = {"anthropic-version": "2023-06-01"}
    for method, path, body in (("POST", "/v1/messages/batches", batch), ("POST", "/v1/batches", {
            "input_file_id": "file-1", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
            ("GET", "/v1/messages/batches/msgbatch_1/results", None), ("GET", "/v1/responses/resp_1", None),
            ("GET", "/v1/files", None)):  # fmt: skip
        async with gw.session.request(method, gw.base + path, json=body,
                                      headers={**ALICE, **anthropic_headers}) as r:  # fmt: skip
            assert r.status == 403, path
            err = (await r.json())["error"]
            assert err["code"] == "path_not_allowed" and "names no model" in err["message"]
    assert gw.fake.requests == []
    async with gw.session.get(gw.base + "/v1/models", headers=ALICE) as r:
        assert r.status == 200
    async with gw.session.post(gw.base + "/v1/messages/batches", json=batch,
                               headers={"Authorization": "Bearer gk-root", **anthropic_headers}) as r:  # fmt: skip
        assert r.headers["x-llm-upstream"] == "primary"  # relayed (the fake keeps no batches: its 404)
    assert [r.path for r in gw.fake.requests] == ["/v1/models", "/v1/messages/batches"]


@pytest.mark.parametrize(("method", "path"), [
    ("GET", "/v1/files"), ("DELETE", "/v1/files/file-1"), ("GET", "/v1/responses/resp_123"),
    ("GET", "/v1/messages/batches/msgbatch_1/results"), ("POST", "/v1/batches/batch_1/cancel"),
    ("POST", "/v1/files"), ("GET", "/v1/chat/completions"), ("PUT", "/v1/embeddings"),
])  # fmt: skip
async def test_a_model_named_in_a_dummy_body_does_not_let_a_limited_key_past_path_not_allowed(
    make_gateway: MakeGateway, method: str, path: str
) -> None:
    """Whether a request can be held to a key's rules is the method's and the path's to say,
    not its body's: ``curl -X GET -d '{"model":"gpt-4o-mini"}' /v1/files`` listed the
    provider account's files with the operator's key."""
    gw = await make_gateway(keys_yaml(models=["gpt-4o-mini*"], budget={"usd": 1, "period": "day"}))
    async with gw.session.request(method, gw.base + path, json={"model": "gpt-4o-mini"},
                                  headers={**ALICE, "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        assert r.status == 403
        assert (await r.json())["error"]["code"] == "path_not_allowed"
    assert gw.fake.requests == []


async def test_a_body_is_read_for_its_model_only_when_its_media_type_is_json(make_gateway: MakeGateway) -> None:
    """``text/plain; a=json`` held "json": the gateway read a model from a body its type says
    is not JSON."""
    gw = await make_gateway(keys_yaml(models=["gpt-4o-mini*"]))
    for ctype in ("text/plain; a=json", "application/jsonx", "text/json-ish"):
        async with gw.session.post(gw.base + "/v1/embeddings", data=b'{"model": "gpt-4o-mini", "input": "x"}',
                                   headers={**ALICE, "Content-Type": ctype}) as r:  # fmt: skip
            assert r.status == 403, ctype
            assert (await r.json())["error"]["code"] == "path_not_allowed"
    assert gw.fake.requests == []
    for ctype in ("application/json", "Application/JSON; charset=utf-8", "application/vnd.api+json"):
        gw.fake.script(Reply(200, {"object": "list", "data": [], "usage": {"prompt_tokens": 1, "total_tokens": 1}}))
        async with gw.session.post(gw.base + "/v1/embeddings", data=b'{"model": "gpt-4o-mini", "input": "x"}',
                                   headers={**ALICE, "Content-Type": ctype}) as r:  # fmt: skip
            assert r.status == 200, ctype
    assert len(gw.fake.requests) == 3


async def test_a_stream_left_before_its_first_words_pays_for_the_prompt_the_provider_read(
    make_gateway: MakeGateway,
) -> None:
    """The gateway holds a stream's contentless head back until its first words; a client that
    leaves then still had its prompt read by the provider (Anthropic's message_start counts
    it): the key pays for it, not $0."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), real_sleep=True)
    gw.fake.script(Stream(anthropic_head("gpt-4o-mini", input_tokens=5000), then="stall"))
    payload = {"model": "gpt-4o-mini", "max_tokens": 64, "stream": True,
               "messages": [{"role": "user", "content": "go"}]}  # fmt: skip
    with pytest.raises(asyncio.TimeoutError):
        async with gw.session.post(gw.base + "/v1/messages", json=payload,
                                   headers={**ALICE, "anthropic-version": "2023-06-01"},
                                   timeout=aiohttp.ClientTimeout(total=0.5)) as r:  # fmt: skip
            await r.read()
    state = await settled(gw)
    assert state["budget"]["spent_usd"] == 5000 * 1 + 1 * 2  # as message_start counted it (output_tokens: 1)
    # A chat stream counts its prompt only at the end: the estimate stands in for it.
    gw.fake.script(Stream([chunk({"role": "assistant", "content": ""})], then="stall"))
    chat = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "go " * 100}]}
    with pytest.raises(asyncio.TimeoutError):
        async with gw.session.post(gw.base + "/v1/chat/completions", json=chat, headers=ALICE,
                                   timeout=aiohttp.ClientTimeout(total=0.5)) as r:  # fmt: skip
            await r.read()
    after = await settled(gw)
    assert after["budget"]["spent_usd"] > state["budget"]["spent_usd"] + 50


@pytest.mark.parametrize("ends", ["client", "first_byte_timeout"])
async def test_a_buffered_request_left_before_its_answer_pays_for_the_prompt_the_provider_read(
    make_gateway: MakeGateway, ends: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A buffered answer's head comes only with the whole answer. A client that leaves before it,
    or the client's own deadline (the openai SDK's ``X-Stainless-Timeout``) ending the wait with
    a 504, leaves a request the provider was sent whole and read: its prompt is paid for, as a
    stream's left before its first words is (audit: a 300 KB prompt left after 2 s paid $0).
    Its log line says what it was charged, marked as an estimate: it has no ``usage``, and its
    ``cost_usd`` alone could not be explained (audit)."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}), real_sleep=True)
    answered = asyncio.Event()
    gw.fake.always = Reply(200, chat_completion(), until=answered)  # thinking, for as long as it takes
    chat = {"model": "gpt-4o-mini", "max_tokens": 8000, "messages": [{"role": "user", "content": "go " * 1000}]}
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            if ends == "client":
                with pytest.raises(asyncio.TimeoutError):
                    async with gw.session.post(gw.base + "/v1/chat/completions", json=chat, headers=ALICE,
                                               timeout=aiohttp.ClientTimeout(total=0.5)) as r:  # fmt: skip
                        await r.read()
            else:
                async with gw.session.post(gw.base + "/v1/chat/completions", json=chat,
                                           headers={**ALICE, "X-Stainless-Timeout": "0.5"}) as r:  # fmt: skip
                    assert r.status == 504 and (await r.json())["error"]["code"] == "upstream_timeout"
            state = await settled(gw)
    finally:
        answered.set()
    assert len(gw.fake.requests) == 1  # sent once, whole
    prompt = gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="prompt", priced="true")
    assert prompt >= len("go " * 1000) / 3.5
    assert state["budget"]["spent_usd"] == prompt  # the prompt alone: no answer came
    line = next(r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request")
    assert line["status"] == (499 if ends == "client" else 504) and "usage" not in line
    assert line["cost_usd"] == prompt
    assert line["legs"] == [{"model": "gpt-4o-mini", "usage": {"prompt": prompt}, "cost_usd": prompt,
                             "estimated": ["prompt"]}]  # fmt: skip


# Anthropic's usage of one answer: 100 plain input tokens, 1000 read from the cache, 200
# written to it, 50 out. At $1 an input token, $0.10 a cache read, $1.25 a cache write and $2
# an output token it costs 100 + 100 + 250 + 100 = $550 (a cache write priced as plain input:
# $500).
CACHED_USAGE = {"input_tokens": 100, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
                "output_tokens": 50}  # fmt: skip
CLAUDE_PRICES = ("prices: {'claude-sonnet-4-6*': {input: 1000000, output: 2000000, cache_read: 100000, "
                 "cache_write: 1250000}}\n")  # fmt: skip


def _cached_stream() -> Stream:
    head = sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {**CACHED_USAGE, "output_tokens": 1}}})  # fmt: skip
    start = sse("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}})  # fmt: skip
    return Stream([head, start, text_delta("Hello."), *anthropic_tail(output_tokens=50)])


async def test_cache_writes_cost_the_same_whatever_the_clients_api(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """On a Messages upstream, a buffered answer translated for a chat, Responses or Gemini client
    was priced from the translated document, whose usage folds the cache write into the prompt:
    $500 where the Messages client and every stream paid $550, and the log line had no
    ``cache_write``. The provider's own usage is what is priced, whatever the client's API."""
    gw = await make_gateway(CLAUDE_PRICES + "keys: [{name: alice, key: gk-alice}]\n",
                            upstream_yaml=", apis: [messages], key_header: x-api-key")
    oai = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    ant = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    gemini = "/v1beta/models/claude-sonnet-4-6:"
    gemini_body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            for stream in (False, True):
                for _ in range(4):
                    gw.fake.script(_cached_stream() if stream else Reply(200, {
                        **anthropic_message(text="Hello."), "usage": CACHED_USAGE}))  # fmt: skip
                if stream:
                    chunks = await oai.chat.completions.create(model="claude-sonnet-4-6", messages=hi, stream=True)
                    async for _ in chunks:
                        pass
                    async with ant.messages.stream(model="claude-sonnet-4-6", max_tokens=64, messages=hi) as s:
                        await s.get_final_message()
                    events = await oai.responses.create(model="claude-sonnet-4-6", input="hi", stream=True)
                    async for _ in events:
                        pass
                    path = gemini + "streamGenerateContent?alt=sse"
                else:
                    await oai.chat.completions.create(model="claude-sonnet-4-6", messages=hi)
                    await ant.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=hi)
                    await oai.responses.create(model="claude-sonnet-4-6", input="hi")
                    path = gemini + "generateContent"
                async with gw.session.post(gw.base + path, json=gemini_body,
                                           headers={"x-goog-api-key": "gk-alice"}) as r:  # fmt: skip
                    assert r.status == 200
                    await r.read()
            # A stream that comes back empty twice is probed with a buffered request, translated.
            empty = Stream([], then="eof")
            gw.fake.script(empty, empty, Reply(200, {**anthropic_message(text="Hello."), "usage": CACHED_USAGE}))
            chunks = await oai.chat.completions.create(model="claude-sonnet-4-6", messages=hi, stream=True)
            assert "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices]) == "Hello."
    finally:
        await oai.close()
        await ant.close()
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert [(line["path"].split(":")[0].rsplit("/", 1)[-1], line["stream"]) for line in lines] == [
        (p, s) for s in (False, True) for p in ("completions", "messages", "responses", "claude-sonnet-4-6")
    ] + [("completions", True)]
    for line in lines:
        assert line["usage"] == {"prompt": 1300, "completion": 50, "cache_read": 1000, "cache_write": 200}, line
        assert line["cost_usd"] == pytest.approx(550), line


async def test_attachments_named_by_reference_are_reserved_though_their_bytes_are_not_sent(
    make_gateway: MakeGateway,
) -> None:
    """50 requests at once, each with a PDF by URL, on a $0.20 budget: the provider counts 2,000
    prompt tokens each ($0.21 with the answer), but the request is a few hundred bytes, and
    reserving that admitted 12 of them: $2.52 spent. Each PDF named by reference is reserved as
    `accounting.reference_tokens.document` now: the budget is overspent by one request at most."""
    gw = await make_gateway(
        "prices: {'claude-sonnet-4-6*': {input: 100, output: 200}}\n"
        "keys: [{name: alice, key: gk-alice, budget: {usd: 0.20, period: day}}]\n",
        upstream_yaml=", apis: [messages], key_header: x-api-key")  # fmt: skip
    gw.fake.always = Reply(200, anthropic_message("claude-sonnet-4-6", input_tokens=2000, output_tokens=50),
                           delay_s=0.3)  # every one in flight at once
    client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    content: Any = [{"type": "document", "source": {"type": "url", "url": "https://example.com/annual-report.pdf"}},
                    {"type": "text", "text": "Summarise this."}]  # fmt: skip

    async def one() -> int:
        try:
            await client.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                         messages=[{"role": "user", "content": content}])  # fmt: skip
        except anthropic.APIStatusError as e:
            return e.status_code
        return 200

    try:
        statuses = await asyncio.gather(*(one() for _ in range(50)))
    finally:
        await client.close()
    state = await settled(gw)
    one_request = 2000 * 100e-6 + 50 * 200e-6  # $0.21
    assert statuses.count(200) == 1 and statuses.count(429) == 49  # the rest: held, try again shortly
    assert state["budget"]["spent_usd"] == pytest.approx(one_request)
    assert state["budget"]["spent_usd"] <= 0.20 + one_request
    assert len(gw.fake.messages_requests()) == 1


async def test_reserved_output_max_lets_a_budget_serve_agents_that_ask_for_far_more_than_they_write(
    make_gateway: MakeGateway,
) -> None:
    """Claude Code 2.1.332 asks max_tokens 128000: its worst case held a whole $2 budget, so the
    key served one of its requests at a time and refused the others (429 key_budget_held), Codex
    giving up after six (audit). ``accounting.reserved_output_max`` reserves at most that many."""
    payload = {"model": "gpt-4o-mini", "max_tokens": 128000, "messages": [{"role": "user", "content": "hi"}]}
    for extra, admitted in (("", 1), ("accounting: {reserved_output_max: 10}\n", 2)):
        gw = await make_gateway(extra + keys_yaml(budget={"usd": 100, "period": "day"}))
        gw.fake.always = Reply(200, chat_completion(), delay_s=0.3)  # both in flight at once
        answers = await asyncio.gather(*(gw.chat(payload, headers=ALICE) for _ in range(2)))
        assert [a[0] for a in answers].count(200) == admitted, (extra, [a[2][:200] for a in answers])
        # Settled at what was used either way: the answer's 9 + 12 tokens, not the reservation.
        assert (await settled(gw))["budget"]["spent_usd"] == 26 * admitted


async def test_a_chat_request_naming_both_output_budgets_reserves_the_one_sent(make_gateway: MakeGateway) -> None:
    """`max_tokens: 1` beside `max_completion_tokens: 5000` reserved one output token while the
    translation sent Anthropic `max_tokens: 5000`: 50 such requests at once, each answered with
    5,000 tokens, spent $1.25 of a $0.05 budget (audit). The largest budget is reserved now."""
    gw = await make_gateway("keys: [{name: alice, key: gk-alice, budget: {usd: 0.05, period: day}}]\n",
                            upstream_yaml=", apis: [messages], key_header: x-api-key")  # fmt: skip
    gw.fake.always = Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=10, output_tokens=5000),
                           delay_s=0.3)  # every one in flight at once
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)

    async def one() -> int:
        try:
            await client.chat.completions.create(model="claude-haiku-4-5", max_tokens=1, max_completion_tokens=5000,
                                                 messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        except openai.APIStatusError as e:
            return e.status_code
        return 200

    try:
        statuses = await asyncio.gather(*(one() for _ in range(20)))
    finally:
        await client.close()
    state = await settled(gw)
    one_request = 10 * 1e-6 + 5000 * 5e-6  # claude-haiku-4-5 at $1 in, $5 out: $0.02501
    # Each reserves 5,000 tokens out ($0.025): two fit under $0.05, the rest are held (429).
    assert statuses.count(200) == 2 and statuses.count(429) == 18, statuses
    assert [r.json()["max_tokens"] for r in gw.fake.messages_requests()] == [5000, 5000]
    assert state["budget"]["spent_usd"] == pytest.approx(2 * one_request)
    assert state["budget"]["spent_usd"] <= 0.05 + one_request


async def test_a_background_response_is_refused_to_a_key_whose_budget_it_would_escape(
    make_gateway: MakeGateway,
) -> None:
    """`background: true` is answered at once, queued and without usage, and run at the provider
    afterwards; polling it is refused to a key with rules: a $0.05 key's request for 100,000
    tokens out was recorded at $0 (audit). A key with a budget or `tokens_per_minute` is told so
    in the Responses API's shape, and nothing is sent; a key without either is served."""
    gw = await make_gateway(PRICES + "keys:\n"
                            "  - {name: alice, key: gk-alice, budget: {usd: 0.05, period: day}}\n"
                            "  - {name: bob, key: gk-bob, tokens_per_minute: 100000}\n"
                            "  - {name: carol, key: gk-carol, requests_per_minute: 100}\n"
                            "  - {name: root, key: gk-root, admin: true}\n")  # fmt: skip
    payload = {"model": "gpt-4o-mini", "input": "write a novel", "background": True, "max_output_tokens": 100000}
    for key in ("gk-alice", "gk-bob"):
        status, headers, body = await gw.responses(payload, headers={"Authorization": f"Bearer {key}"})
        assert status == 400 and headers["x-llm-error-retryable"] == "false", body
        error = json.loads(body)["error"]
        assert error["code"] == "background_not_metered" and error["type"] == "invalid_request_error"
        assert "background" in error["message"] and "without `background`" in error["message"]
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_key_refusals_total", key="alice", reason="background") == 1
    # Without background the same key is served; a key whose rules count no spend is served either way.
    assert (await gw.responses({**payload, "background": False}, headers=ALICE))[0] == 200
    assert (await gw.responses(payload, headers={"Authorization": "Bearer gk-carol"}))[0] == 200
    assert (await gw.responses(payload, headers={"Authorization": "Bearer gk-root"}))[0] == 200


async def test_a_budgeted_key_is_refused_a_model_without_a_price(make_gateway: MakeGateway) -> None:
    """A model with no price costs $0 and says so: on a key with a budget, that budget did not
    hold at all (gpt-4-turbo, o1 and every Gemini model, "priced": false, spent 0; audit). Such a
    key is refused the model, in the client's API's envelope, naming it and where its price goes;
    a key without a budget still uses it, its tokens counted unpriced."""
    gw = await make_gateway(PRICES + "keys:\n"
                            "  - {name: alice, key: gk-alice, budget: {usd: 5, period: day}}\n"
                            "  - {name: dave, key: gk-dave, team: web}\n"
                            "  - {name: bob, key: gk-bob, tokens_per_minute: 100000}\n"
                            "teams: [{name: web, budget: {usd: 100, period: month}}]\n")  # fmt: skip
    unpriced = {"model": "qwen3-coder", "messages": [{"role": "user", "content": "hi"}]}
    status, headers, body = await gw.chat(unpriced, headers=ALICE)
    assert status == 403 and headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"
    error = json.loads(body)["error"]
    assert error["code"] == "model_not_priced"
    assert "'qwen3-coder'" in error["message"] and "prices:" in error["message"] and "key 'alice'" in error["message"]
    status, _, body = await gw.chat(unpriced, headers={"Authorization": "Bearer gk-dave"})  # its team's budget
    assert status == 403 and "team 'web'" in json.loads(body)["error"]["message"]
    status, _, body = await gw.messages({**unpriced, "max_tokens": 8}, headers=ALICE)
    assert status == 403 and json.loads(body)["type"] == "error"
    async with gw.session.post(gw.base + "/v1beta/models/gemini-9-flash:generateContent",
                               json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                               headers={"x-goog-api-key": "gk-alice"}) as r:  # fmt: skip
        assert r.status == 403 and (await r.json())["error"]["status"] == "PERMISSION_DENIED"
    # Codex retries a 403 five times and stops at once on a 400.
    status, _, body = await gw.responses({"model": "qwen3-coder", "input": "hi"},
                                         headers={**ALICE, "originator": "codex_exec"})  # fmt: skip
    assert status == 400 and json.loads(body)["error"]["code"] == "model_not_priced"
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_key_refusals_total", key="alice", reason="unpriced") == 4
    # Priced, the same key is served; a key without a budget is served the unpriced model.
    assert (await gw.chat(headers=ALICE))[0] == 200
    assert (await gw.chat(unpriced, headers={"Authorization": "Bearer gk-bob"}))[0] == 200


HOUR_USAGE = {"input_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 300_000,
              "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 300_000},
              "output_tokens": 3}  # fmt: skip


async def test_one_hour_cache_writes_are_paid_at_their_own_price_whatever_the_clients_api(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """Tokens written to Anthropic's cache for an hour cost 2x the input price, and were priced at
    1.25x, the 5-minute price: a claude-sonnet-4-5 answer that cost $3.90 was logged at $3.225
    (audit; 4.6 here, at the same price). Here 300,000 written for an hour cost $1.80, whatever
    the client's API; a request asking for an hour's cache is reserved at that price too."""
    gw = await make_gateway("keys: [{name: alice, key: gk-alice, budget: {usd: 100, period: day}}]\n",
                            upstream_yaml=", apis: [messages], key_header: x-api-key")  # fmt: skip
    one = 5 * 3e-6 + 300_000 * 6e-6 + 3 * 15e-6  # $3.90006
    ant = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
    oai = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    hi = [{"role": "user", "content": "hi"}]
    head = sse("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {**HOUR_USAGE, "output_tokens": 1}}})  # fmt: skip
    start = sse("content_block_start", {"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}})  # fmt: skip
    try:
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            gw.fake.script(Reply(200, {**anthropic_message(text="Hello."), "usage": HOUR_USAGE}))
            await ant.messages.create(model="claude-sonnet-4-6", max_tokens=64, messages=hi)
            gw.fake.script(Reply(200, {**anthropic_message(text="Hello."), "usage": HOUR_USAGE}))
            await oai.chat.completions.create(model="claude-sonnet-4-6", messages=hi)
            gw.fake.script(Stream([head, start, text_delta("Hello."), *anthropic_tail(output_tokens=3)]))
            async with ant.messages.stream(model="claude-sonnet-4-6", max_tokens=64, messages=hi) as s:
                await s.get_final_message()
    finally:
        await ant.close()
        await oai.close()
    lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
    assert len(lines) == 3
    for line in lines:
        assert line["usage"]["cache_write_1h"] == 300_000 and line["cost_usd"] == pytest.approx(one, abs=1e-6), line
    assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(3 * one, abs=1e-5)
    # Reserved while in flight: its prompt at $6 (the 1-hour write), not $3.75, and 64 tokens out.
    answered = asyncio.Event()
    gw.fake.script(Reply(200, {**anthropic_message(text="Hello."), "usage": HOUR_USAGE}, until=answered))
    payload = {"model": "claude-sonnet-4-6", "max_tokens": 64, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi " * 1000, "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]}  # fmt: skip
    sent = asyncio.create_task(gw.messages(payload, headers={"x-api-key": "gk-alice"}))
    for _ in range(500):
        if len(gw.fake.messages_requests()) == 4:
            break
        await asyncio.sleep(0.01)
    held = (await key_state(gw, {"x-api-key": "gk-alice"}))["budget"]["reserved_usd"]
    answered.set()
    assert (await sent)[0] == 200
    prompt = len(json.dumps(payload).encode()) / 3.5
    assert held == pytest.approx(prompt * 6e-6 + 64 * 15e-6, rel=1e-3)


async def test_a_minute_held_by_a_request_in_flight_is_waited_out_in_seconds_by_the_openai_sdk(
    make_gateway: MakeGateway,
) -> None:
    """A request in flight holds its prompt and every output token it asks for in the minute
    until it ends. A second refused only for that was told "used its 1000 tokens of this
    minute" with the minute's end as `retry-after` (38 s) while the key had used 19 (audit):
    it is told what holds the minute now, and to try again in 2 s, which the SDK does."""
    gw = await make_gateway(keys_yaml(tokens_per_minute=1000), timeouts="{connect_s: 2, first_byte_s: 5, idle_s: 5}")
    await same_minute(margin_s=10)
    gw.fake.always = Reply(200, chat_completion(), delay_s=1.0)
    quick = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)
    patient = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice")  # the SDK's own 2 retries
    messages: Any = [{"role": "user", "content": "hi"}]
    try:
        first = asyncio.create_task(quick.chat.completions.create(model="gpt-4o-mini", max_tokens=600,
                                                                  messages=messages))  # fmt: skip
        await asyncio.sleep(0.3)
        with pytest.raises(openai.RateLimitError) as refused:
            await quick.chat.completions.create(model="gpt-4o-mini", max_tokens=600, messages=messages)
        err = refused.value
        assert err.code == "key_tokens_held" and err.response.headers["retry-after"] == "2"
        assert "used 0 of its 1000 tokens of this minute, and requests in flight hold" in err.message
        assert "try again when one has ended" in err.message
        started = time.monotonic()
        answer = await patient.chat.completions.create(model="gpt-4o-mini", max_tokens=600, messages=messages)
        assert answer.choices[0].message.content and time.monotonic() - started < 6
        await first
    finally:
        await quick.close()
        await patient.close()
    assert len(gw.fake.requests) == 2  # refusals are the gateway's own: nothing sent


async def test_a_key_being_rotated_takes_both_values_with_one_count(make_gateway: MakeGateway) -> None:
    """A person's old and new key at once (``key: [old, new]``): a session on the old one keeps
    working while the new one is handed out, and both are one key's minute and spend."""
    gw = await make_gateway(PRICES + "keys:\n"
                            "  - {name: alice, key: [gk-alice-old, gk-alice-new], requests_per_minute: 2}\n")  # fmt: skip
    await same_minute()
    old = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice-old", max_retries=0)
    new = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice-new", max_retries=0)
    try:
        await old.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        await new.messages.create(model="claude-sonnet-4-6", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as refused:
            await old.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert "key 'alice' sent its 2 requests of this minute" in refused.value.message
    finally:
        await old.close()
        await new.close()
    state = await key_state(gw, {"x-api-key": "gk-alice-new"})
    assert state["name"] == "alice" and state["this_minute"]["requests"] == 2
async def test_a_model_mapped_by_the_route_is_priced_as_the_model_the_upstream_is_sent(
    make_gateway: MakeGateway,
) -> None:
    """`model_map: {fast: claude-haiku-4-5}` and a request for `fast` was refused to a budgeted key
    (model_not_priced: `fast` has no price) though the upstream model has one (review). It is
    priced, reserved and settled as claude-haiku-4-5 now."""
    gw = await make_gateway("keys: [{name: alice, key: gk-alice, budget: {usd: 5, period: day}}]\n",
                            upstream_yaml=", apis: [messages], key_header: x-api-key, "
                                          "model_map: {fast: claude-haiku-4-5}")  # fmt: skip
    gw.fake.always = Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=1000, output_tokens=2000))
    status, _, body = await gw.chat({"model": "fast", "max_tokens": 3000,
                                     "messages": [{"role": "user", "content": "hi"}]}, headers=ALICE)  # fmt: skip
    assert status == 200, body
    assert [r.json()["model"] for r in gw.fake.messages_requests()] == ["claude-haiku-4-5"]
    # claude-haiku-4-5 at $1 in and $5 out: 1000 + 2000 tokens.
    assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(1000e-6 + 2000 * 5e-6)
    # A name the route maps to no priced model is still refused, naming the model sent.
    status, _, body = await gw.chat({"model": "qwen3-coder", "messages": [{"role": "user", "content": "hi"}]},
                                    headers=ALICE)  # fmt: skip
    assert status == 403 and json.loads(body)["error"]["code"] == "model_not_priced"


async def test_a_request_naming_no_output_limit_reserves_what_the_translation_sends(
    make_gateway: MakeGateway,
) -> None:
    """8 streamed chat requests for claude-sonnet-4-5 naming no max_tokens, at once, on a $0.50
    key: each was sent Anthropic `max_tokens: 64000` (the translation's default) while admission
    reserved 4,096 tokens out, so all 8 were served and $7.20 spent (review). The reservation is
    what is sent now: 64,000 tokens at $15 per million ($0.96) holds the whole budget, so one is
    served and the rest are held (429) until it settles. The same for Gemini's and Responses'
    requests translated to Messages (Gemini CLI and Codex name no output limit)."""
    gw = await make_gateway("keys: [{name: alice, key: gk-alice, budget: {usd: 0.5, period: day}}]\n",
                            upstream_yaml=", apis: [messages], key_header: x-api-key")  # fmt: skip
    # 100,000 tokens out: what an answer to "write a lot" may cost ($1.50), up to what was sent.
    gw.fake.always = Stream([*anthropic_head(), text_delta("word " * 50), *anthropic_tail(output_tokens=60000)],
                            delay_s=0.3)  # every one in flight at once
    client = openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice", max_retries=0)

    async def one(i: int) -> int:
        try:
            stream = await client.chat.completions.create(
                model="claude-sonnet-4-5", stream=True, messages=[{"role": "user", "content": f"write a lot {i}"}])
            async for _ in stream:
                pass
        except openai.APIStatusError as e:
            return e.status_code
        return 200

    try:
        statuses = await asyncio.gather(*(one(i) for i in range(8)))
    finally:
        await client.close()
    assert statuses.count(200) == 1 and statuses.count(429) == 7, statuses
    assert [r.json()["max_tokens"] for r in gw.fake.messages_requests()] == [64000]
    spent = (await settled(gw))["budget"]["spent_usd"]
    assert spent == pytest.approx(25 * 3e-6 + 60000 * 15e-6)  # one answer: $0.90

    # Gemini (no maxOutputTokens) and Responses (no max_output_tokens) to the same upstream.
    for path, body, headers in (
        ("/v1beta/models/claude-sonnet-4-5:streamGenerateContent?alt=sse",
         {"contents": [{"role": "user", "parts": [{"text": "write a lot"}]}]}, {"x-goog-api-key": "gk-bob"}),
        ("/v1/responses", {"model": "claude-sonnet-4-5", "input": "write a lot", "stream": True},
         {"Authorization": "Bearer gk-bob"}),
    ):
        gw = await make_gateway("keys: [{name: bob, key: gk-bob, budget: {usd: 0.5, period: day}}]\n",
                                upstream_yaml=", apis: [messages], key_header: x-api-key")  # fmt: skip
        gw.fake.always = Stream([*anthropic_head(), text_delta("words"), *anthropic_tail(output_tokens=60000)],
                                delay_s=0.3)  # fmt: skip

        async def post(gw: Gateway = gw, path: str = path, body: dict[str, Any] = body,
                       headers: dict[str, str] = headers) -> int:  # fmt: skip
            async with gw.session.post(gw.base + path, json=body, headers=headers) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(post() for _ in range(6)))
        assert statuses.count(200) == 1, (path, statuses)
        assert [r.json()["max_tokens"] for r in gw.fake.messages_requests()] == [64000], path


async def test_a_request_is_settled_at_the_price_of_the_model_that_served_it(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture,
) -> None:
    """`fast` on `cheap` (claude-haiku-4-5) with `dear` (claude-opus-4-1) as its fallback: a
    request `cheap` answered was settled at opus-4-1's $15/$75, the dearest of the chain that
    admission reserves at, $0.0765 for 100 tokens in and 1,000 out in place of haiku's $0.0051
    (review). The reservation keeps the chain's worst case; the settle takes the price of the
    model the answering upstream was sent, whichever of the chain answered."""
    cheap, dear = FakeUpstream(), FakeUpstream()
    for f in (cheap, dear):
        await f.start()
    try:
        gw = await make_gateway(
            "keys: [{name: alice, key: gk-alice, budget: {usd: 5, period: day}}]\n", fake=cheap, upstreams=(
                f"  - {{name: cheap, base_url: '{cheap.url}', apis: [messages], key_header: x-api-key, "
                "models: [fast], model_map: {fast: claude-haiku-4-5}, fallbacks: [dear]}\n"
                f"  - {{name: dear, base_url: '{dear.url}', apis: [messages], key_header: x-api-key, "
                "models: [never], model_map: {fast: claude-opus-4-1}}\n"))  # fmt: skip
        cheap.always = Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=100, output_tokens=1000))
        dear.always = Reply(200, anthropic_message("claude-opus-4-1", input_tokens=100, output_tokens=1000))
        client = anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice", max_retries=0)
        haiku, opus = 100e-6 + 1000 * 5e-6, 100 * 15e-6 + 1000 * 75e-6  # $0.0051, $0.0765
        try:
            with caplog.at_level(logging.INFO, logger="gateway.access"):
                raw = await client.messages.with_raw_response.create(
                    model="fast", max_tokens=1000, messages=[{"role": "user", "content": "hi"}])
                assert raw.headers["x-llm-upstream"] == "cheap"
                assert [r.json()["model"] for r in cheap.messages_requests()] == ["claude-haiku-4-5"]
                assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(haiku)
                # `cheap` down: `dear` answers, at its own model's price.
                cheap.always = Reply(529, {"type": "error", "error": {"type": "overloaded_error",
                                                                      "message": "Overloaded"}})  # fmt: skip
                raw = await client.messages.with_raw_response.create(
                    model="fast", max_tokens=1000, messages=[{"role": "user", "content": "hello"}])
                assert raw.headers["x-llm-upstream"] == "dear"
                assert [r.json()["model"] for r in dear.messages_requests()] == ["claude-opus-4-1"]
                assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(haiku + opus)
        finally:
            await client.close()
        lines = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"
                 and r.msg.get("path") == "/v1/messages"]  # fmt: skip
        assert [line["cost_usd"] for line in lines] == [pytest.approx(haiku), pytest.approx(opus)]
        assert gw.metric("llm_gateway_key_spend_usd_total", key="alice", team="", model="fast") \
            == pytest.approx(haiku + opus)  # fmt: skip
    finally:
        for f in (cheap, dear):
            await f.close()


async def test_a_pool_request_is_settled_at_the_price_of_the_deployment_that_served_it(
    make_gateway: MakeGateway,
) -> None:
    """A pool whose deployments map `fast` to different models: each request pays the model of
    the deployment that answered it, not the dearest deployment's (review)."""
    cheap, dear = FakeUpstream(), FakeUpstream()
    for f in (cheap, dear):
        await f.start()
    try:
        gw = await make_gateway(
            "keys: [{name: alice, key: gk-alice, budget: {usd: 5, period: day}}]\n"
            "pools:\n  - {name: fast, models: [fast], deployments: [cheap, dear]}\n", fake=cheap, upstreams=(
                f"  - {{name: cheap, base_url: '{cheap.url}', api_key: sk-a, apis: [messages], "
                "key_header: x-api-key, weight: 1000000, model_map: {fast: claude-haiku-4-5}}\n"
                f"  - {{name: dear, base_url: '{dear.url}', api_key: sk-b, apis: [messages], "
                "key_header: x-api-key, model_map: {fast: claude-opus-4-1}}\n"))  # fmt: skip
        cheap.always = Reply(200, anthropic_message("claude-haiku-4-5", input_tokens=100, output_tokens=1000))
        dear.always = Reply(200, anthropic_message("claude-opus-4-1", input_tokens=100, output_tokens=1000))
        haiku, opus = 100e-6 + 1000 * 5e-6, 100 * 15e-6 + 1000 * 75e-6
        payload = {"model": "fast", "max_tokens": 1000, "messages": [{"role": "user", "content": "hi"}]}
        status, headers, body = await gw.messages(payload, headers={"x-api-key": "gk-alice"})
        assert status == 200 and headers["x-llm-upstream"] == "cheap", body
        assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(haiku)
        cheap.always = Reply(429, {"type": "error", "error": {
            "type": "rate_limit_error", "message": "Number of request tokens has exceeded your per-minute rate limit"}},
            {"retry-after": "30"})  # fmt: skip
        status, headers, body = await gw.messages(payload, headers={"x-api-key": "gk-alice",
                                                                    "x-claude-code-session-id": "other"})  # fmt: skip
        assert status == 200 and headers["x-llm-upstream"] == "dear", body
        assert (await settled(gw))["budget"]["spent_usd"] == pytest.approx(haiku + opus)
    finally:
        for f in (cheap, dear):
            await f.close()


async def test_gemini_clis_thinking_budget_is_reserved_on_a_gemini_upstream(make_gateway: MakeGateway) -> None:
    """Gemini CLI 0.61 sends ``thinkingBudget: 8192`` and no ``maxOutputTokens``; Google bills
    thoughts as output. Admission held 4,096 tokens, so 50 such streams at once on a $0.05 key
    were 5 served and $0.10 spent (audit). Its own request now holds 4,096 + 8,192 tokens; a
    request naming ``maxOutputTokens`` holds that alone (Gemini counts thoughts inside it), and
    a chat request translated to Gemini holds the budget its effort is sent."""
    corpus = json.loads((Path(__file__).parents[1] / "corpus" / "requests" / "gemini-cli-0.61-first.json").read_text())
    body = corpus["body"]
    assert "maxOutputTokens" not in body["generationConfig"]
    assert body["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 8192
    prices = "prices: {'gemini-2.5-flash': {input: 1000000, output: 2000000}}\n"
    gw = await make_gateway(prices + "keys: [{name: alice, key: gk-alice, budget: {usd: 10000000, period: day}}]\n",
                            upstream_yaml=", apis: [gemini], api_key: AIza-upkey")  # fmt: skip
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP",
                              "index": 0}],
              "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 1, "totalTokenCount": 6}}  # fmt: skip
    gw.fake.always = Stream([answer], delay_s=0.3)

    async def output_held(path: str, payload: dict[str, Any], headers: dict[str, str]) -> float:
        """The reservation of ``payload`` in flight less its prompt's ($1 a token, estimated at
        3.5 bytes a token), in output tokens ($2 each)."""
        async def post() -> int:
            async with gw.session.post(gw.base + path, json=payload, headers=headers) as r:
                await r.read()
                return r.status

        task = asyncio.ensure_future(post())
        reserved = 0.0
        for _ in range(100):
            reserved = (await key_state(gw))["budget"]["reserved_usd"]
            if reserved:
                break
            await asyncio.sleep(0.01)
        assert await task == 200
        await settled(gw)
        return (float(reserved) - len(json.dumps(payload)) / 3.5) / 2

    gemini_headers = {"x-goog-api-key": "gk-alice"}
    assert 4096 + 8192 <= await output_held(corpus["path"], body, gemini_headers) < 4096 + 8192 + 1
    # Thinking turned off: the answer's 4,096 alone.
    off = {**body, "generationConfig": {**body["generationConfig"], "thinkingConfig": {"thinkingBudget": 0}}}
    assert 4096 <= await output_held(corpus["path"], off, gemini_headers) < 4096 + 1
    # A limit named bounds thoughts and answer together.
    capped = {**body, "generationConfig": {**body["generationConfig"], "maxOutputTokens": 1000}}
    assert 1000 <= await output_held(corpus["path"], capped, gemini_headers) < 1000 + 1
    # A chat client asking for high effort is sent thinkingBudget 24576 (chat_gemini.EFFORT_BUDGET).
    chat = {"model": "gemini-2.5-flash", "stream": True, "reasoning_effort": "high",
            "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    gw.fake.always = Stream([answer], delay_s=0.3)
    held = await output_held("/v1/chat/completions", chat, {"Authorization": "Bearer gk-alice"})
    assert 4096 + 24576 <= held < 4096 + 24576 + 1, held
    sent = [r.json() for r in gw.fake.requests]
    assert sent[-1]["generationConfig"]["thinkingConfig"]["thinkingBudget"] == 24576


SHOWN = "Once upon a time there was a gateway"  # 36 bytes: 10 tokens at 3.5 bytes each


def _cut_chat() -> Stream:
    return Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": SHOWN})], then="drop")


def _continued_chat(usage: dict[str, int]) -> Stream:
    return Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": " that counted."}),
                   chunk({}, "stop"), {**chunk({}), "choices": [], "usage": usage}])  # fmt: skip


async def test_each_leg_of_a_continued_stream_is_paid_at_its_own_price_and_its_own_prompt(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """A stream of a dear model cut and continued by a cheap one on a fallback was charged all
    at the cheap one's price, and the cut leg's prompt (a chat stream counts it only at its
    end) not at all: 571 tokens shown at $180/M cost $0.0002 (audit). The provider read and
    billed the first leg's prompt and text: each leg pays its own, at its own model's price."""
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(
            "prices: {'dear-model': {input: 3000000, output: 18000000}, "
            "'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
            "keys: [{name: alice, key: gk-alice, budget: {usd: 1000000000, period: day}}]\n",
            fake=fake, upstreams=(
                f"  - {{name: dear, base_url: '{fake.url}', apis: [chat], model_map: {{'*': dear-model}}, "
                "fallbacks: [cheap]}\n"
                f"  - {{name: cheap, base_url: '{fake.url}', apis: [chat], models: ['never-routed-here'], "
                "model_map: {'*': gpt-4o-mini}, continuation: prefix}\n"))  # fmt: skip
        fake.script(_cut_chat(), _continued_chat({"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}))
        payload = {"model": "x", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "go"}]}
        with caplog.at_level(logging.INFO, logger="gateway.access"):
            async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
                assert r.status == 200
                assert b"that counted." in await r.read()
        state = await settled(gw)
        assert [req.json()["model"] for req in fake.chat_requests()] == ["dear-model", "gpt-4o-mini"]
        # The log line says what each part was charged: its usage (40 prompt tokens reported, the
        # cut leg's estimated) did not explain its cost (audit, Claude Code on a fallback).
        (line,) = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "request"]
        first, second = line["legs"]
        assert first["model"] == "dear-model" and first["usage"]["completion"] == 10 and first["usage"]["prompt"] > 0
        assert second == {"model": "gpt-4o-mini", "usage": {"prompt": 40, "completion": 5}, "cost_usd": 40 + 10}
        assert first["cost_usd"] + second["cost_usd"] == pytest.approx(line["cost_usd"])
        prompt = gw.metric("llm_gateway_key_tokens_total", key="alice", model="x", kind="prompt", priced="true")
        first_prompt = prompt - 40  # the cut leg's, as admission estimated it
        assert first_prompt > 0
        assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="x", kind="completion",
                         priced="true") == 10 + 5  # fmt: skip
        assert state["budget"]["spent_usd"] == pytest.approx(first_prompt * 3 + 10 * 18 + 40 * 1 + 5 * 2)
    finally:
        await fake.close()


async def test_output_estimated_for_a_cut_leg_is_capped_per_leg_not_with_what_the_next_was_billed(
    make_gateway: MakeGateway,
) -> None:
    """A replay writes the whole answer again and is asked for the whole budget: its count (8 of
    10) is what the provider billed, beside the first leg's 10 shown. Capping the sum at the 10
    asked for dropped the replay's 8."""
    gw = await make_gateway(keys_yaml(budget={"usd": 1000000, "period": "day"}),
                            upstream_yaml=", apis: [chat], continuation: replay_any")  # fmt: skip
    replay = Stream([chunk({"role": "assistant", "content": ""}), chunk({"content": SHOWN + " that counted."}),
                     chunk({}, "stop"),
                     {**chunk({}), "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 8,
                                                            "total_tokens": 17}}])  # fmt: skip
    gw.fake.script(_cut_chat(), replay)
    payload = {"model": "gpt-4o-mini", "max_tokens": 10, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with gw.session.post(gw.base + "/v1/chat/completions", json=payload, headers=ALICE) as r:
        assert r.status == 200
        assert b"that counted." in await r.read()
    await settled(gw)
    assert gw.metric("llm_gateway_key_tokens_total", key="alice", model="gpt-4o-mini", kind="completion",
                     priced="true") == 10 + 8  # fmt: skip


async def _stalled_then_answered(gw: Gateway, fake: FakeUpstream, answering_model: str) -> dict[str, Any]:
    """A Messages stream whose first attempt counts a 10,000-token prompt and goes silent, and
    whose next (``answering_model``'s) answers; the key's state once it settled."""
    fake.script(Stream(anthropic_head("dear-model", input_tokens=10000), then="stall"),
                Stream([*anthropic_head(answering_model, input_tokens=10000), text_delta("Hi."),
                        *anthropic_tail(output_tokens=10)]))  # fmt: skip
    payload = {"model": "x", "max_tokens": 50, "stream": True, "messages": [{"role": "user", "content": "go"}]}
    async with gw.session.post(gw.base + "/v1/messages", json=payload,
                               headers={**ALICE, "anthropic-version": "2023-06-01"}) as r:  # fmt: skip
        assert r.status == 200
        await r.read()
    return await settled(gw)


async def test_an_attempt_abandoned_for_a_fallback_pays_its_prompt_at_its_own_models_price(
    make_gateway: MakeGateway,
) -> None:
    """A stream of a $15 model whose first token never came (its ``message_start`` counted a
    10,000-token prompt) was abandoned for a $1 fallback that answered: both prompts were priced
    at the fallback's $1 (review). Each attempt the provider took pays at the model it was sent."""
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(
            "prices: {'dear-model': {input: 15000000, output: 75000000}, "
            "'cheap-model': {input: 1000000, output: 2000000}}\n"
            "keys: [{name: alice, key: gk-alice, budget: {usd: 1000000000, period: day}}]\n",
            fake=fake, upstreams=(
                f"  - {{name: dear, base_url: '{fake.url}', apis: [messages], key_header: x-api-key, "
                "model_map: {'*': dear-model}, first_token_s: 0.3, fallbacks: [cheap]}\n"
                f"  - {{name: cheap, base_url: '{fake.url}', apis: [messages], key_header: x-api-key, "
                "models: ['never-routed-here'], model_map: {'*': cheap-model}}\n"), real_sleep=True)  # fmt: skip
        state = await _stalled_then_answered(gw, fake, "cheap-model")
        assert [req.json()["model"] for req in fake.messages_requests()] == ["dear-model", "cheap-model"]
        # The abandoned one: its prompt and the one output token message_start counted, at $15/$75.
        assert state["budget"]["spent_usd"] == pytest.approx(10000 * 15 + 1 * 75 + 10000 * 1 + 10 * 2)
    finally:
        await fake.close()


async def test_an_attempt_gone_silent_before_its_first_words_pays_its_prompt_when_retried(
    make_gateway: MakeGateway,
) -> None:
    """The same stall ended by ``idle_s`` (120 s, before ``first_token_s``'s 300 by default) rather
    than ``first_token_s``: the attempt was retried and the key paid only the retry's prompt
    (review). The provider took the first as much; it is paid at the model it was sent."""
    fake = await FakeUpstream().start()
    try:
        gw = await make_gateway(
            "prices: {'dear-model': {input: 15000000, output: 75000000}}\n"
            "keys: [{name: alice, key: gk-alice, budget: {usd: 1000000000, period: day}}]\n",
            fake=fake, upstreams=(
                f"  - {{name: dear, base_url: '{fake.url}', apis: [messages], key_header: x-api-key, "
                "model_map: {'*': dear-model}}\n"), real_sleep=True,
            timeouts="{connect_s: 2, first_byte_s: 10.0, idle_s: 0.3, first_token_s: 5}")  # fmt: skip
        state = await _stalled_then_answered(gw, fake, "dear-model")
        assert [req.json()["model"] for req in fake.messages_requests()] == ["dear-model", "dear-model"]
        assert state["budget"]["spent_usd"] == pytest.approx((10000 * 15 + 1 * 75) + (10000 * 15 + 10 * 75))
    finally:
        await fake.close()
