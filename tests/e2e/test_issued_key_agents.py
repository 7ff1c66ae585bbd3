"""Keys issued at run time, as an orchestrator uses them: two replicas (`python -m gateway
--config` twice on one real redis-server) in front of the fake upstream; the orchestrator's admin
key issues a key on one replica with curl's request, an agent uses it on the other (the `openai`
SDK, then Claude Code's `claude -p` with ANTHROPIC_API_KEY, both at stock settings), the key is
revoked, and a replica restarted afterwards still knows the keys not revoked."""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.e2e.test_claude_code import claude_bin, run_claude
from tests.fakeupstream import FakeUpstream
from tests.integration.test_state_redis import RedisServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("redis-server") is None,
                       reason="!!! ISSUED KEYS ACROSS REPLICAS NOT TESTED: redis-server is not installed !!!"),
]  # fmt: skip
__all__ = ["claude_bin"]  # fixture

ADMIN = "gk-orchestrator-0123456789"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _launch(fake: FakeUpstream, redis_url: str, tmp: Path, name: str) -> RunningGateway:
    port = free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        f"keys: [{{name: orchestrator, key: {ADMIN}, admin: true}}]\n"
        "prices: {'*': {input: 1, output: 2}}\n"
        f"state: {{backend: redis, url: '{redis_url}', timeout_ms: 500}}\n"
    )
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / f"{name}.log")


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[RunningGateway, RunningGateway, FakeUpstream, RedisServer]]:
    redis = RedisServer(free_port(), tmp_path)
    redis.start()
    with FakeUpstream.in_thread() as fake:
        gws: list[RunningGateway] = []
        try:
            gws = [_launch(fake, redis.url, tmp_path, n) for n in ("a", "b")]
            yield gws[0], gws[1], fake, redis
        finally:
            for gw in gws:
                gw.stop()
            redis.stop()


def _call(gw: RunningGateway, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(gw.base + path, method=method, headers={
        "Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"},
        data=None if body is None else json.dumps(body).encode())  # fmt: skip
    try:
        with _OPENER.open(req, timeout=10) as r:
            return int(r.status), dict(json.loads(r.read()))
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code), dict(json.loads(e.read()))


def _taken_within(check: Any, limit_s: float) -> float:
    started = time.monotonic()
    while True:
        if check():
            return time.monotonic() - started
        assert time.monotonic() - started < limit_s, "not within the limit"
        time.sleep(0.02)


def test_an_agent_run_gets_its_own_key_on_any_replica_until_it_is_revoked(
    replicas: tuple[RunningGateway, RunningGateway, FakeUpstream, RedisServer], claude_bin: Path, tmp_path: Path,
) -> None:
    a, b, fake, redis = replicas
    status, made = _call(a, "POST", "/v1/gateway/keys", {"name": "run-1", "budget": {"usd": 5, "period": "day"},
                                                          "models": ["gpt-4o-mini*", "claude-*"], "ttl_s": 600})
    assert status == 201, made
    secret = made["key"]
    assert _call(a, "POST", "/v1/gateway/keys", {"name": "run-2"})[0] == 201

    def served_on_b() -> bool:
        try:
            with openai.OpenAI(base_url=b.base + "/v1", api_key=secret) as chat:  # stock settings
                chat.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
            return True
        except openai.AuthenticationError:
            return False

    # On the first try: b reads the store for a key shaped as an issued one it does not know,
    # before it refuses it (the SDK does not retry a 401; audit: 2 runs of 3 failed).
    assert served_on_b()
    work = tmp_path / "project"
    work.mkdir()
    run = run_claude(claude_bin, b, work, "say hi", ANTHROPIC_API_KEY=secret, ANTHROPIC_AUTH_TOKEN="")
    assert run.rc == 0, run.err[-2000:]
    lines = [json.loads(x) for x in b.logs_when(lambda t: '"path":"/v1/messages"' in t).splitlines()
             if x.startswith("{") and '"event":"request"' in x]  # fmt: skip
    claude = [x for x in lines if x["path"].startswith("/v1/messages")]
    assert claude and {x.get("key") for x in claude} == {"run-1"} and all(x["status"] == 200 for x in claude)
    assert secret not in a.logs() + b.logs()
    status, own = _call(b, "GET", "/v1/gateway/keys")
    assert own["keys"][[k["name"] for k in own["keys"]].index("run-1")]["budget"]["spent_usd"] > 0

    assert _call(a, "DELETE", "/v1/gateway/keys/run-1") == (200, {"name": "run-1", "revoked": True})

    def refused_on_b() -> bool:
        try:
            with anthropic.Anthropic(base_url=b.base, api_key=secret) as claude:
                claude.messages.create(model="claude-sonnet-4-6", max_tokens=8,
                                       messages=[{"role": "user", "content": "hi"}])  # fmt: skip
            return False
        except anthropic.AuthenticationError:
            return True

    assert _taken_within(refused_on_b, 1.5) < 1.5
    # Replica b restarted: the key not revoked is known before its first request, the other is not.
    b.stop()
    b2 = _launch(fake, redis.url, tmp_path, "b2")
    try:
        status, listed = _call(b2, "GET", "/v1/gateway/keys")
        assert status == 200 and [k["name"] for k in listed["keys"] if k.get("issued")] == ["run-2"]
    finally:
        b2.stop()
