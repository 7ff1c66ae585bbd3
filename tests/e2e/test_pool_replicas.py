"""Two replicas of a pool on one real Redis (issue #34): what one replica learns of a key, the
other acts on. A real `redis-server` (Debian's, from scripts/test-deps.sh) on a free port, two
gateway processes (`python -m gateway --config`, `state.backend: redis`) in front of one fake
upstream playing three keys of one provider.

- a 429 that replica A met keeps replica B off that key until its reset;
- a key refused with a 401 through A is not tried by B;
- neither costs B a call to learn it.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.fakeupstream import FakeUpstream
from tests.integration.test_state_redis import RedisServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("redis-server") is None,
        reason="!!! POOL REPLICAS NOT TESTED: redis-server is not installed; run `bash scripts/test-deps.sh` !!!",
    ),
]

KEYS = ("sk-a", "sk-b", "sk-c")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only


@dataclass
class Pair:
    a: RunningGateway
    b: RunningGateway
    fake: FakeUpstream


def _launch(fake: FakeUpstream, redis_url: str, tmp: Path, name: str) -> RunningGateway:
    port = free_port()
    config = tmp / f"{name}.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        "upstreams:\n"
        + "".join(f"  - {{name: key-{k[-1]}, base_url: '{fake.url}', api_key: {k}}}\n" for k in KEYS)
        + "pools:\n  - {name: gpt, models: ['*'], deployments: [key-a, key-b, key-c]}\n"
        "timeouts: {connect_s: 2, first_byte_s: 5, idle_s: 5}\n"
        f"state: {{backend: redis, url: '{redis_url}', timeout_ms: 200}}\n"
        "loop_breaker: {secret: the-replicas-share-this-secret}\n"
    )
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / f"{name}.log")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    redis = RedisServer(free_port(), tmp_path)
    redis.start()
    with FakeUpstream.in_thread() as fake:
        gws: list[RunningGateway] = []
        try:
            gws = [_launch(fake, redis.url, tmp_path, name) for name in ("a", "b")]
            yield Pair(gws[0], gws[1], fake)
        finally:
            for gw in gws:
                gw.stop()
            redis.stop()


def _chat(gw: RunningGateway, text: str) -> tuple[int, dict[str, str]]:
    body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(gw.base + "/v1/chat/completions", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with _OPENER.open(req, timeout=10) as r:
        r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}


def _until_met(pair: Pair, key: str) -> None:
    """New conversations through A until one was sent to ``key`` (a weighted pick: a few)."""
    for i in range(60):
        status, _ = _chat(pair.a, f"a conversation of its own #{i}")
        assert status == 200
        if pair.fake.calls_by_key().get(key, 0):
            return
    raise AssertionError(f"replica A never picked {key} in 60 conversations")


def test_a_rate_limit_seen_by_one_replica_keeps_the_other_off_that_key(pair: Pair) -> None:
    pair.fake.keys.limited_until("sk-b", time.time() + 3600)
    _until_met(pair, "sk-b")
    assert pair.fake.calls_by_key()["sk-b"] == 1
    time.sleep(0.4)  # past state.cache_ms (200 ms): B reads the pool's records afresh
    for i in range(30):
        status, headers = _chat(pair.b, f"replica b's own conversation #{i}")
        assert status == 200 and headers["x-llm-upstream"] != "key-b"
        assert headers["x-llm-attempts"] == "1"  # no attempt was spent learning it
    assert pair.fake.calls_by_key()["sk-b"] == 1


def test_a_key_refused_through_one_replica_is_not_tried_by_the_other(pair: Pair) -> None:
    pair.fake.keys.revoke("sk-c")
    _until_met(pair, "sk-c")
    time.sleep(0.4)
    for i in range(30):
        status, headers = _chat(pair.b, f"another conversation #{i}")
        assert status == 200 and headers["x-llm-upstream"] != "key-c"
    assert pair.fake.calls_by_key()["sk-c"] == 1
    assert '"reason":"auth"' in pair.a.logs()
