"""Keys that stop working at a set time (``keys[].expires_at``): a contractor's or a CI job's key
is refused from then on in each API's own shape, naming the key and the time, and nothing is sent
upstream; a reload that moves the time lets it in again."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anthropic
import openai
import pytest

from gateway.live import LIVE
from gateway.reload.reloader import Reloader
from tests.integration.conftest import MakeGateway

PAST = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
FUTURE = (datetime.now(UTC) + timedelta(days=30)).replace(microsecond=0)


def keys(alice_expires: datetime, bob_expires: datetime = FUTURE) -> str:
    return ("keys:\n"
            f"  - {{name: alice, key: gk-alice, expires_at: '{alice_expires.isoformat()}'}}\n"
            f"  - {{name: bob, key: gk-bob, expires_at: '{bob_expires.isoformat()}'}}\n")  # fmt: skip


def shown(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


async def test_an_expired_key_is_refused_in_each_apis_shape_and_nothing_is_sent(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(keys(PAST))
    message = f"the gateway key 'alice' expired at {shown(PAST)}; ask the gateway's operator for a new one"
    async with openai.AsyncOpenAI(base_url=gw.base + "/v1", api_key="gk-alice") as chat:  # stock settings
        with pytest.raises(openai.AuthenticationError) as e:
            await chat.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
        assert e.value.code == "expired_client_key" and message in e.value.message
        with pytest.raises(openai.AuthenticationError):
            await chat.responses.create(model="gpt-4o-mini", input="hi")
    async with anthropic.AsyncAnthropic(base_url=gw.base, api_key="gk-alice") as claude:
        with pytest.raises(anthropic.AuthenticationError) as a:
            await claude.messages.create(model="claude-sonnet-4-6", max_tokens=8,
                                         messages=[{"role": "user", "content": "hi"}])  # fmt: skip
        assert message in str(a.value)
    async with gw.session.post(gw.base + "/v1beta/models/gemini-2.5-flash:generateContent?key=gk-alice",
                               json={"contents": [{"parts": [{"text": "hi"}]}]}) as r:  # fmt: skip
        body = await r.json()
        assert r.status == 401 and body["error"]["status"] == "UNAUTHENTICATED" and message in body["error"]["message"]
    async with gw.session.get(gw.base + "/v1/gateway/key", headers={"Authorization": "Bearer gk-alice"}) as r:
        assert r.status == 401  # an expired key reads nothing either
    status, headers, _ = await gw.chat(headers={"Authorization": "Bearer gk-alice"})
    assert status == 401 and headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_client_auth_refusals_total", reason="expired") >= 5
    # Another key, not expired, is served, and reads when its own ends.
    assert (await gw.chat(headers={"Authorization": "Bearer gk-bob"}))[0] == 200
    async with gw.session.get(gw.base + "/v1/gateway/key", headers={"Authorization": "Bearer gk-bob"}) as r:
        assert (await r.json())["expires_at"] == shown(FUTURE)


async def test_a_reload_that_moves_the_expiry_lets_the_key_in_again(make_gateway: MakeGateway, tmp_path: Path) -> None:
    gw = await make_gateway(keys(PAST))
    alice = {"Authorization": "Bearer gk-alice"}
    assert (await gw.chat(headers=alice))[0] == 401
    path = tmp_path / "gateway.yaml"
    path.write_text(f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n"
                    "loop_breaker: {enabled: false}\n" + keys(FUTURE, PAST))  # fmt: skip
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.key_expiry"), env={})
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    assert (await gw.chat(headers=alice))[0] == 200
    status, _, body = await gw.chat(headers={"Authorization": "Bearer gk-bob"})
    assert status == 401 and json.loads(body)["error"]["code"] == "expired_client_key"


async def test_codex_is_refused_a_wrong_or_expired_key_with_a_400_it_stops_on(make_gateway: MakeGateway) -> None:
    """Codex 0.171 retries a 401 five times, as it does a 403 (6 requests in 6.6 s, audit), and
    stops at once on a 400, showing its body: a request from Codex (its ``originator``) gets the
    refusal as a 400 with the same code, words and classification; other clients keep the 401."""
    gw = await make_gateway(keys(PAST))
    message = f"the gateway key 'alice' expired at {shown(PAST)}; ask the gateway's operator for a new one"
    for key, code in (("gk-alice", "expired_client_key"), ("gk-nobody", "invalid_client_key")):
        status, headers, body = await gw.responses(headers={"Authorization": f"Bearer {key}",
                                                            "originator": "codex_exec"})  # fmt: skip
        assert status == 400, body
        assert headers["x-llm-error-type"] == "auth" and headers["x-llm-error-retryable"] == "false"
        assert "WWW-Authenticate" not in headers  # an answer of 401's alone
        assert json.loads(body)["error"]["code"] == code
    assert message in json.loads((await gw.responses(headers={"Authorization": "Bearer gk-alice",
                                                              "originator": "codex_exec"}))[2])["error"]["message"]
    status, _, _ = await gw.responses(headers={"Authorization": "Bearer gk-alice"})
    assert status == 401
    assert gw.fake.requests == []
    assert gw.metric("llm_gateway_client_auth_refusals_total", reason="expired") == 3


async def test_a_reload_that_removes_a_key_drops_its_metric_series(make_gateway: MakeGateway, tmp_path: Path) -> None:
    """Keys made per CI run and removed after left their spend, token and refusal series in
    /metrics for as long as the process lived (15 keys, 90 lines, audit)."""
    gw = await make_gateway(keys(FUTURE))
    assert (await gw.chat(headers={"Authorization": "Bearer gk-alice"}))[0] == 200
    assert (await gw.chat(headers={"Authorization": "Bearer gk-bob"}))[0] == 200
    path = tmp_path / "gateway.yaml"
    path.write_text(f"upstreams:\n  - {{name: primary, base_url: '{gw.fake.url}'}}\n"
                    "loop_breaker: {enabled: false}\n"
                    f"keys:\n  - {{name: bob, key: gk-bob, expires_at: '{FUTURE.isoformat()}'}}\n")  # fmt: skip
    reloader = Reloader(str(path), gw.app[LIVE], log=logging.getLogger("tests.key_expiry"), env={})
    assert await reloader.reload("SIGHUP", quiet_if_same=True)
    async with gw.session.get(gw.base + "/metrics") as r:
        text = (await r.read()).decode()
    assert 'key="alice"' not in text
    assert 'llm_gateway_key_tokens_total{key="bob"' in text  # a kept key keeps its totals
