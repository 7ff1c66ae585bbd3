"""Two replicas on one real Redis share one key's budget (issue #35): what one replica spent,
the other refuses past. `python -m gateway --config` twice, `state.backend: redis`, in front
of one fake upstream; prices made up ($1 a token in, $2 out: the fake's answer costs $26)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.fakeupstream import FakeUpstream
from tests.integration.test_state_redis import RedisServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("redis-server") is None,
                       reason="!!! KEY REPLICAS NOT TESTED: redis-server is not installed !!!"),
]  # fmt: skip

KEY = "gk-shared-0123456789"
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _config(fake: FakeUpstream, redis_url: str, port: int, disabled: bool = False) -> str:
    return (
        f"server: {{port: {port}, drain_s: 1}}\n"
        f"upstreams: [{{name: fake, base_url: '{fake.url}', api_key: sk-operator}}]\n"
        # gpt-4o-mini has a shipped price, which a bare '*' (tried after the shipped table) leaves be.
        "prices: {'gpt-4o-mini*': {input: 1000000, output: 2000000}, '*': {input: 1000000, output: 2000000}}\n"
        f"keys: [{{name: team-bot, key: {KEY}, budget: {{usd: 60, period: month}}, "
        f"disabled: {str(disabled).lower()}}}]\n"
        f"state: {{backend: redis, url: '{redis_url}', timeout_ms: 500}}\n"
    )


def _launch(fake: FakeUpstream, redis_url: str, tmp: Path, name: str) -> RunningGateway:
    port = free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(_config(fake, redis_url, port))
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / f"{name}.log")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RunningGateway, RunningGateway, FakeUpstream]]:
    redis = RedisServer(free_port(), tmp_path)
    (tmp_path / "redis.url").write_text(redis.url)
    redis.start()
    with FakeUpstream.in_thread() as fake:
        gws: list[RunningGateway] = []
        try:
            gws = [_launch(fake, redis.url, tmp_path, n) for n in ("a", "b")]
            yield gws[0], gws[1], fake
        finally:
            for gw in gws:
                gw.stop()
            redis.stop()


def _chat(gw: RunningGateway) -> int:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(gw.base + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    try:
        with _OPENER.open(req, timeout=10) as r:
            r.read()
            return int(r.status)
    except urllib.error.HTTPError as e:
        with e:
            return int(e.code)


def _spent(gw: RunningGateway) -> dict[str, Any]:
    req = urllib.request.Request(gw.base + "/v1/gateway/key", headers={"x-api-key": KEY})
    for _ in range(100):
        with _OPENER.open(req, timeout=10) as r:
            budget = dict(json.loads(r.read())["budget"])
        if budget["reserved_usd"] == 0:
            return budget
        time.sleep(0.02)
    raise AssertionError(budget)


def test_a_budget_spent_through_one_replica_is_refused_by_the_other(
    pair: tuple[RunningGateway, RunningGateway, FakeUpstream],
) -> None:
    a, b, fake = pair
    assert _chat(a) == 200 and _spent(a)["spent_usd"] == 26
    assert _chat(b) == 200 and _spent(b)["spent_usd"] == 52  # B counts on from what A spent
    assert _chat(a) == 200 and _spent(b)["spent_usd"] == 78  # admitted below $60, the last one
    assert _chat(b) == 402 and _chat(a) == 402
    assert len(fake.chat_requests()) == 3
    assert "state_store_down" not in a.logs() + b.logs()


def _reload(gw: RunningGateway, tmp: Path, name: str, fake: FakeUpstream, disabled: bool, times: int) -> None:
    port = int(gw.base.rsplit(":", 1)[1])
    (tmp / f"{name}.yaml").write_text(_config(fake, (tmp / "redis.url").read_text(), port, disabled))
    os.kill(gw.proc.pid, signal.SIGHUP)
    gw.logs_when(lambda t: t.count('"config_reloaded"') >= times, timeout_s=30)


def test_a_key_a_reload_disables_is_refused_by_both_replicas_and_keeps_its_spend(
    pair: tuple[RunningGateway, RunningGateway, FakeUpstream], tmp_path: Path,
) -> None:
    """`disabled: true` and a SIGHUP to each replica: the key is refused on both, nothing sent;
    turned on again, it counts on from what it had spent."""
    a, b, fake = pair
    assert _chat(a) == 200 and _spent(b)["spent_usd"] == 26
    for gw, name in ((a, "a"), (b, "b")):
        _reload(gw, tmp_path, name, fake, disabled=True, times=1)
    assert [_chat(a), _chat(b)] == [401, 401]
    assert len(fake.chat_requests()) == 1
    for gw, name in ((a, "a"), (b, "b")):
        _reload(gw, tmp_path, name, fake, disabled=False, times=2)
    assert _chat(b) == 200 and _spent(a)["spent_usd"] == 52
    assert KEY not in a.logs() + b.logs()
