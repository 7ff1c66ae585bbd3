"""Keys turned off by the operator (``keys[].disabled``, ``teams[].disabled``): refused at once in
each API's own shape, telling the holder whom to ask, nothing sent upstream; the key keeps its
name, spend and series, and an admin key still reads its state. A reload turns it off and on on
every replica, and a stream already under way finishes. Prices are made up ($1 a prompt token,
$2 a completion token), so spend is plain to read."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from tests.fakeupstream import Stream, chunk, data_events
from tests.integration.conftest import Gateway, MakeGateway
from tests.integration.test_state_redis import REDIS, RedisServer, redis_server

__all__ = ["redis_server"]  # fixture

ALICE, BOB, ROOT = ({"Authorization": f"Bearer gk-{n}"} for n in ("alice", "bob", "root"))
MESSAGE = ("the gateway key 'alice' is turned off (it is disabled in the gateway's config); "
           "ask the gateway's operator to turn it back on")  # fmt: skip


def keys(alice_off: bool = False, team_off: bool = False, state: str = "") -> str:
    return ("prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}}\n"
            "keys:\n"
            f"  - {{name: alice, key: gk-alice, team: web, budget: {{usd: 1000000, period: day}}, "
            f"disabled: {str(alice_off).lower()}}}\n"
            "  - {name: bob, key: gk-bob, team: web}\n"
            "  - {name: root, key: gk-root, admin: true}\n"
            f"teams: [{{name: web, disabled: {str(team_off).lower()}}}]\n" + state)  # fmt: skip


async def key_view(gw: Gateway, who: dict[str, str]) -> dict[str, Any]:
    async with gw.session.get(gw.base + "/v1/gateway/keys", headers=who) as r:
        assert r.status == 200
        return {k["name"]: k for k in (await r.json())["keys"]}


async def test_a_disabled_key_is_refused_in_each_apis_shape_and_nothing_is_sent(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys(alice_off=True))
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice") as chat:  # stock settings
        with pytest.raises(openai.AuthenticationError) as e:
            await chat.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert e.value.code == "disabled_client_key" and MESSAGE in e.value.message
        with pytest.raises(openai.AuthenticationError) as e:
            await chat.responses.create(model="gpt-4o-mini", input="hi")
        assert e.value.code == "disabled_client_key"
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice") as claude:
        with pytest.raises(anthropic.AuthenticationError) as a:
            await claude.messages.create(model="claude-sonnet-4-6", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        assert MESSAGE in str(a.value) and a.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent?key=gk-alice",
                               json={"contents": [{"parts": [{"text": "hi"}]}]}) as r:  # fmt: skip
        body = await r.json()
        assert r.status == 401 and body["error"]["status"] == "UNAUTHENTICATED" and MESSAGE in body["error"]["message"]
    async with gw.session.get(gw.base + "/v1/gateway/key", headers=ALICE) as r:
        assert r.status == 401  # its holder reads nothing: the operator does
    status, headers, body = await gw.chat(headers=ALICE)
    assert status == 401 and headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"
    assert headers["x-should-retry"] == "false" and "WWW-Authenticate" in headers
    status, headers, body = await gw.responses(headers={**ALICE, "originator": "codex_exec"})
    assert status == 400 and json.loads(body)["error"]["code"] == "disabled_client_key"  # Codex stops on a 400
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_client_auth_refusals_total", reason="disabled") == 7
    # Its teammate is served; the admin reads alice's account, turned off.
    assert (await gw.chat(headers=BOB))[0] == 200
    alice = (await key_view(gw, ROOT))["alice"]
    assert alice["disabled"] == "key" and alice["budget"]["usd"] == 1000000


async def test_a_disabled_team_turns_off_each_of_its_keys(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys(team_off=True))
    for who, name in ((ALICE, "alice"), (BOB, "bob")):
        status, _, body = await gw.chat(headers=who)
        error = json.loads(body)["error"]
        assert status == 401 and error["code"] == "disabled_client_key"
        assert error["message"] == (f"the gateway key '{name}' is turned off (its team 'web' is disabled in the "
                                    "gateway's config); ask the gateway's operator to turn it back on")
    assert (await gw.chat(headers=ROOT))[0] == 200
    assert {n: k.get("disabled") for n, k in (await key_view(gw, ROOT)).items()} == {
        "alice": "team", "bob": "team", "root": None}


SLOW = Stream([chunk({"content": f"w{i} "}) for i in range(20)] + [chunk({}, "stop")], delay_s=0.03)
STREAM = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "long"}]}


@pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")
async def test_a_reload_turns_a_key_off_and_on_on_two_replicas_keeping_its_spend(
    make_gateway: MakeGateway, redis_server: RedisServer, tmp_path: Path,
) -> None:
    state = f"state: {{backend: redis, url: '{redis_server.url}'}}\n"
    a = await make_gateway(keys(state=state), real_sleep=True)
    b = await make_gateway(keys(state=state), fake=a.fake, upstreams=f"  - {{name: primary, base_url: '{a.fake.url}'}}\n",
                           real_sleep=True)  # fmt: skip
    assert (await a.chat(headers=ALICE))[0] == 200
    a.fake.script(SLOW)
    streaming = asyncio.create_task(b.chat(STREAM, headers=ALICE))
    for _ in range(300):  # until the stream has reached the upstream (polled: no event tells)
        if len(a.fake.chat_requests()) == 2:
            break
        await asyncio.sleep(0.01)

    async def reload(gw: Gateway, text: str) -> None:
        path = tmp_path / "gateway.yaml"
        path.write_text(f"upstreams:\n  - {{name: primary, base_url: '{a.fake.url}'}}\n"
                        "loop_breaker: {enabled: false}\n" + text)  # fmt: skip
        reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.key_disabled"), env={})
        assert await reloader.reload("SIGHUP")

    for gw in (a, b):
        await reload(gw, keys(alice_off=True, state=state))
    for gw in (a, b):  # refused at once on either replica, nothing sent
        status, _, body = await gw.chat(headers=ALICE)
        assert status == 401 and json.loads(body)["error"]["code"] == "disabled_client_key"
    assert not streaming.done()
    status, _, body = await streaming  # begun before: it finishes, whole
    assert status == 200 and data_events(body)[-1] == "[DONE]"
    assert len(a.fake.chat_requests()) == 2
    # Its account is kept: both requests' spend, read by the admin on the other replica; its series stay.
    for _ in range(100):
        alice = (await key_view(a, ROOT))["alice"]
        if alice["in_flight"] == 0:
            break
        await asyncio.sleep(0.02)
    assert alice["disabled"] == "key" and alice["budget"]["spent_usd"] > 0 and alice["in_flight"] == 0
    spent = alice["budget"]["spent_usd"]
    assert b.metric("llm_gateway_key_spend_usd_total", key="alice", team="web", model="gpt-4o-mini") > 0
    async with a.session.get(a.base + "/metrics") as r:
        assert 'llm_gateway_budget_spent_usd{kind="key",name="alice",period="day"}' in (await r.text())
    # Turned on again: served on both, counting on from what it had spent.
    for gw in (a, b):
        await reload(gw, keys(state=state))
    assert [(await gw.chat(headers=ALICE))[0] for gw in (a, b)] == [200, 200]
    for _ in range(100):
        alice = (await key_view(b, ROOT))["alice"]
        if alice["in_flight"] == 0:
            break
        await asyncio.sleep(0.02)
    assert "disabled" not in alice and alice["budget"]["spent_usd"] > spent
