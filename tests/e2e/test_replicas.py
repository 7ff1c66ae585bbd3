"""Two replicas sharing one real Redis, as deployed behind a load balancer.

A real `redis-server` (Debian's, from scripts/test-deps.sh) on a free loopback port, two
gateway processes (`python -m gateway --config`, each its own port, the same
`loop_breaker.secret`, `state.backend: redis`) in front of one fake upstream:

- a 503 storm through replica A opens the model's circuit, and replica B refuses the next
  request for that model at once, without an upstream call;
- a client loop that alternates between the replicas with an identical failing request
  reaches the provider once;
- Redis frozen (SIGSTOP): successes still come, each within about twice state.timeout_ms of
  normal (the wait turns suspect at timeout_ms; the probe's PING, late by timeout_ms too,
  takes the replica off Redis);
- Redis is SIGKILLed mid-test: both replicas keep answering, each request within a bound,
  and `llm_gateway_state_fallbacks_total` moves; Redis restarted, they share state again;
- Redis restarted between bursts of concurrent requests: no replica falls back to local state
  after it (the pooled connections from before the restart are not left to fail one by one).

Measured (loopback, this machine): B refuses the open model circuit in 6-25 ms with no
upstream call (A's storm: 2 requests x 2 attempts = 4 calls); 10 alternating identical 400s
cost 1 upstream call; successes take a median ~3 ms, max ~9 ms with Redis killed (no worse
than normal: connection refused is immediate), max ~400 ms with Redis frozen (the 200 ms
timeout, the probe's PING 200 ms late, then local state); the fallback counter moves by ~10 per replica.
"""

from __future__ import annotations

import itertools
import json
import re
import shutil
import statistics
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import RunningGateway, base_env, free_port, start
from tests.fakeupstream import FakeUpstream, Reply, Step
from tests.integration.test_state_redis import RedisServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("redis-server") is None,
        reason="!!! REPLICAS NOT TESTED: redis-server is not installed; run `bash scripts/test-deps.sh` !!!",
    ),
]

MAX_RETRIES = 1  # provider_unavailable.max_retries below: 2 attempts per failed request
THRESHOLD = 2  # circuit_breaker.failure_threshold
RECOVER_S = 0.5  # state.recover_s
UNAVAILABLE = Reply(
    503, {"error": {"message": "The server is overloaded", "type": "server_error", "code": None}}
)
BAD = Reply(400, {"error": {"message": "Invalid 'messages[0].role'", "type": "invalid_request_error",
                            "code": "invalid_value"}})  # fmt: skip
_n = itertools.count()
DOWN, BACK = '"event":"state_store_down"', '"event":"state_store_back"'  # in the JSON log lines


class RuleFake(FakeUpstream):
    """The fake upstream, answering by model: 'down-*' and 'wide-*' are a 503 storm, 'bad-*' a 400,
    the rest succeed."""

    def _default(self, payload: dict[str, Any]) -> Step:
        model = str(payload.get("model", ""))
        if model.startswith(("down-", "wide-")):
            return UNAVAILABLE
        if model.startswith("bad-"):
            return BAD
        return super()._default(payload)

    def calls(self, model: str) -> int:
        return sum(1 for r in self.chat_requests() if r.json().get("model") == model)


@dataclass
class Answer:
    status_code: int
    headers: dict[str, str]
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only, never a proxy


def http(method: str, url: str, data: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with _OPENER.open(req, timeout=10) as r:
            return Answer(r.status, {k.lower(): v for k, v in r.headers.items()}, r.read())
    except urllib.error.HTTPError as e:
        with e:
            return Answer(e.code, {k.lower(): v for k, v in e.headers.items()}, e.read())


@dataclass
class Cluster:
    redis: RedisServer
    a: RunningGateway
    b: RunningGateway
    fake: RuleFake

    def chat(self, gw: RunningGateway, model: str, content: str, *, body: bytes | None = None,
             key: str = "sk-client") -> tuple[Answer, float]:  # fmt: skip
        data = (
            body or json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode()
        )
        t0 = time.monotonic()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
        r = http("POST", gw.base + "/v1/chat/completions", data, headers)
        return r, time.monotonic() - t0

    def back_on_redis(self) -> None:
        """Wait out recover_s, let each replica try Redis again, and check both say they are back."""
        time.sleep(RECOVER_S + 0.2)
        for gw in (self.a, self.b):
            self.chat(gw, "gpt-4o-mini", fresh("probe"))
            logs = gw.logs_when(lambda t: t.count(BACK) == t.count(DOWN))
            assert logs.count(BACK) == logs.count(DOWN) > 0

    def circuits(self, gw: RunningGateway, upstream: str) -> dict[str, float]:
        """``llm_gateway_circuit_open`` of one upstream on this replica's /metrics, by model."""
        text = http("GET", gw.base + "/metrics").content.decode()
        return {s.labels["model"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
                if s.name == "llm_gateway_circuit_open" and s.labels["upstream"] == upstream}

    def fallbacks(self, gw: RunningGateway) -> float:
        text = http("GET", gw.base + "/metrics").content.decode()
        found = re.findall(
            r'^llm_gateway_state_fallbacks_total\{[^}]*backend="redis"[^}]*\} (\S+)$', text, re.M
        )
        assert found, "llm_gateway_state_fallbacks_total is not exported"
        return sum(float(v) for v in found)


def fresh(tag: str) -> str:
    """A new conversation: a repeat of a failed one would be answered from memory."""
    return f"{tag} #{next(_n)}"


def launch(fake: FakeUpstream, redis_url: str, tmp: Path, name: str, *, retry: str | None = None,
           threshold: int = THRESHOLD, prefix: str = "llm-gateway:") -> RunningGateway:  # fmt: skip
    port = free_port()
    config = tmp / f"{name}.yaml"
    retry = retry or f"  provider_unavailable: {{max_retries: {MAX_RETRIES}, base_delay_s: 0.02, max_delay_s: 0.05}}\n"
    config.write_text(
        f"server: {{port: {port}, drain_s: 1}}\n"
        "upstreams:\n"
        f"  - {{name: wide, base_url: '{fake.url}', models: ['wide-*']}}\n"
        f"  - {{name: primary, base_url: '{fake.url}'}}\n"
        "timeouts: {connect_s: 2, first_byte_s: 2, idle_s: 2}\n"
        "retry:\n" + retry +
        f"circuit_breaker: {{failure_threshold: {threshold}, open_s: 30, probe_interval_s: 30}}\n"
        f"state: {{backend: redis, url: '{redis_url}', timeout_ms: 200, recover_s: {RECOVER_S}, "
        f"key_prefix: '{prefix}'}}\n"
        "loop_breaker: {secret: the-replicas-share-this-secret}\n"
    )
    return start(
        [sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / f"{name}.log"
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("replicas")
    redis = RedisServer(free_port(), tmp)
    redis.start()
    with RuleFake.in_thread() as fake:
        gws: list[RunningGateway] = []
        try:
            gws = [launch(fake, redis.url, tmp, name) for name in ("a", "b")]
            yield Cluster(redis, gws[0], gws[1], fake)
        finally:
            for gw in gws:
                gw.stop()
            redis.stop()


def test_a_storm_through_one_replica_opens_the_circuit_for_the_other(cluster: Cluster) -> None:
    model = "down-storm"
    # Once a request gave up, the outage is noted for open_s: the next requests of the model
    # are one attempt each (docs/errors/loop-breaker.md), until the circuit opens.
    for i in range(THRESHOLD):
        r, _ = cluster.chat(cluster.a, model, fresh("storm"))
        assert r.status_code == 503 and r.headers["x-llm-attempts"] == str(1 + MAX_RETRIES if i == 0 else 1)
    calls = cluster.fake.calls(model)
    assert calls == (1 + MAX_RETRIES) + (THRESHOLD - 1)
    # B never saw this model fail: what it knows comes from Redis.
    r, elapsed = cluster.chat(cluster.b, model, fresh("storm"))
    assert r.status_code == 503 and r.headers["x-llm-attempts"] == "0"
    assert r.json()["error"]["code"] == "circuit_open" and r.headers["x-should-retry"] == "false"
    assert 23 <= int(r.headers["retry-after"]) <= 30  # one 30 s period, less its jitter
    assert cluster.fake.calls(model) == calls and elapsed < 0.5
    print(
        f"replicas, model circuit: {calls} upstream calls through A, then B refused in {elapsed * 1000:.1f} ms"
    )
    # One model's outage stays its own, on both replicas.
    for gw in (cluster.a, cluster.b):
        r, _ = cluster.chat(gw, "gpt-4o-mini", fresh("healthy"))
        assert r.status_code == 200
    # And both replicas' gauges say so, per model: B read it from Redis, having seen no failure.
    for gw in (cluster.a, cluster.b):
        assert cluster.circuits(gw, "primary") == {"*": 0, model: 1, "gpt-4o-mini": 0}


def test_a_storm_across_models_opens_the_upstreams_circuit_for_the_other(cluster: Cluster) -> None:
    """Failures spanning `models_to_open` (2) models are a provider outage: B then refuses
    a model nobody has asked for yet. (Its own upstream, so the other tests keep theirs.)"""
    # wide-1 twice (its own circuit opens), then wide-2 once: a streak of 3 over 2 models.
    # The second wide-1 request finds its model's outage noted: one attempt. wide-2, another
    # model during the upstream's noted outage, gets one retry (it may only have hiccupped:
    # docs/errors/loop-breaker.md), then is in the outage too.
    for model, attempts in (("wide-1", 1 + MAX_RETRIES), ("wide-1", 1), ("wide-2", 2)):
        r, _ = cluster.chat(cluster.a, model, fresh("outage"))
        assert r.status_code == 503 and r.headers["x-llm-attempts"] == str(attempts)
    sent = len(cluster.fake.chat_requests())
    r, elapsed = cluster.chat(cluster.b, "wide-3", fresh("outage"))
    assert (
        r.status_code == 503 and r.headers["x-llm-attempts"] == "0" and r.headers["x-llm-upstream"] == "wide"
    )
    assert r.json()["error"]["code"] == "circuit_open" and elapsed < 0.5
    assert len(cluster.fake.chat_requests()) == sent and cluster.fake.calls("wide-3") == 0
    print(f"replicas, upstream circuit: B refused a third model in {elapsed * 1000:.1f} ms")


def test_a_client_loop_across_replicas_reaches_the_provider_once(cluster: Cluster) -> None:
    model, content = "bad-loop", fresh("loop")
    # The same request, serialised with its keys in a different order on every other turn.
    bodies = [json.dumps({"model": model, "messages": [{"role": "user", "content": content}]}).encode(),
              json.dumps({"messages": [{"content": content, "role": "user"}], "model": model}).encode()]  # fmt: skip
    answers = []
    for i in range(10):
        gw = (cluster.a, cluster.b)[i % 2]
        r, _ = cluster.chat(gw, model, content, body=bodies[(i // 2) % 2])
        answers.append(r)
    assert cluster.fake.calls(model) == 1
    first, *repeats = answers
    assert first.status_code == 400 and first.headers["x-llm-attempts"] == "1"
    assert all(r.status_code == 400 and r.content == first.content for r in repeats)
    assert [r.headers["x-llm-from-memory"] for r in repeats] == [str(i) for i in range(1, 10)]
    assert all(r.headers["x-llm-attempts"] == "0" and r.headers["x-should-retry"] == "false" for r in repeats)
    # Another client's identical request is its own: the answer is keyed by its credential.
    r, _ = cluster.chat(cluster.b, model, content, body=bodies[0], key="sk-someone-else")
    assert r.status_code == 400 and "x-llm-from-memory" not in r.headers and cluster.fake.calls(model) == 2


def test_replicas_keep_serving_when_redis_hangs(cluster: Cluster) -> None:
    """Not in the brief's list, but the harder case: a frozen Redis accepts connections and never
    answers, so only the time bound does: state.timeout_ms (200 ms here), when the wait turns
    suspect, plus as much again for the probe's PING, whose lateness takes the replica off Redis
    and lets every waiting operation go to local state at once."""
    gws = (cluster.a, cluster.b)
    normal = [cluster.chat(gw, "gpt-4o-mini", fresh("normal"))[1] for _ in range(3) for gw in gws]
    cluster.redis.freeze()
    try:
        frozen = []
        for i in range(10):
            r, elapsed = cluster.chat(gws[i % 2], "gpt-4o-mini", fresh("redis frozen"))
            assert r.status_code == 200, r.content
            frozen.append(elapsed)
            time.sleep(0.1)  # spread over more than recover_s: Redis is tried (and waited on) again
    finally:
        cluster.redis.thaw()
    cluster.back_on_redis()
    print(f"replicas, success latency with redis frozen: max {max(frozen) * 1000:.1f} ms "
          f"(normal max {max(normal) * 1000:.1f} ms)")  # fmt: skip
    assert max(frozen) < max(normal) + 0.2 + RECOVER_S + 0.5


def test_replicas_keep_serving_when_redis_is_killed(cluster: Cluster) -> None:
    gws = (cluster.a, cluster.b)
    # Warm up, then the normal latency of a success on each replica.
    for gw in gws:
        cluster.chat(gw, "gpt-4o-mini", fresh("warm"))
    normal = [cluster.chat(gw, "gpt-4o-mini", fresh("normal"))[1] for _ in range(5) for gw in gws]
    before = [cluster.fallbacks(gw) for gw in gws]
    went_down = [gw.logs().count(DOWN) for gw in gws]

    cluster.redis.stop()  # SIGKILL
    down = []
    for i in range(20):
        r, elapsed = cluster.chat(gws[i % 2], "gpt-4o-mini", fresh("redis down"))
        assert r.status_code == 200 and r.headers["x-llm-attempts"] == "1", r.content
        down.append(elapsed)
    after = [cluster.fallbacks(gw) for gw in gws]
    print(f"replicas, success latency: normal median {statistics.median(normal) * 1000:.1f} ms "
          f"max {max(normal) * 1000:.1f} ms; redis killed median {statistics.median(down) * 1000:.1f} ms "
          f"max {max(down) * 1000:.1f} ms; state fallbacks {before} -> {after}")  # fmt: skip
    assert max(down) < max(normal) + 0.5
    assert all(a > b for a, b in zip(after, before, strict=True))
    failed = [gw.logs_when(lambda t, n=n: t.count(DOWN) > n).count(DOWN)
              for gw, n in zip(gws, went_down, strict=True)]
    assert failed == [n + 1 for n in went_down]
    # Each replica still remembers what it saw itself: a repeat through the same replica.
    content = fresh("loop while down")
    first, _ = cluster.chat(cluster.a, "bad-down", content)
    again, _ = cluster.chat(cluster.a, "bad-down", content)
    assert first.status_code == again.status_code == 400 and again.headers["x-llm-from-memory"] == "1"

    # Redis back (empty, same port): after recover_s both replicas share state again.
    cluster.redis.start()
    cluster.back_on_redis()
    # B's probe just found no answer remembered anywhere, which it believes for state.cache_ms
    # (200 ms, "how stale a replica's view of remembered loop-breaker answers may be"): on a
    # quiet host A's answer and B's repeat came within it, and B asked the provider again.
    time.sleep(0.25)
    content = fresh("loop after")
    first, _ = cluster.chat(cluster.a, "bad-after", content)
    again, _ = cluster.chat(cluster.b, "bad-after", content)
    assert first.status_code == 400 and again.headers.get("x-llm-from-memory") == "1"
    assert cluster.fake.calls("bad-after") == 1


def _burst(cluster: Cluster, n: int = 16) -> None:
    """Concurrent requests on both replicas at once: each replica holds several pooled
    Redis connections while they run."""
    jobs = [(gw, fresh("burst")) for gw in (cluster.a, cluster.b) for _ in range(n)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        for r, _ in pool.map(lambda job: cluster.chat(job[0], "gpt-4o-mini", job[1]), jobs):
            assert r.status_code == 200, r.content


def test_after_a_redis_restart_the_replicas_go_back_to_redis_and_stay(cluster: Cluster) -> None:
    gws = (cluster.a, cluster.b)
    _burst(cluster)
    cluster.redis.stop()
    cluster.redis.start()  # the same port, empty: each replica's pooled connections are dead
    time.sleep(RECOVER_S + 0.2)
    for gw in gws:
        cluster.chat(gw, "gpt-4o-mini", fresh("first after the restart"))
        back = gw.logs_when(lambda t: t.count(BACK) == _times_off(t), timeout_s=10)
        assert back.count(BACK) == _times_off(back), "a replica did not go back to Redis"
    fallbacks = [cluster.fallbacks(gw) for gw in gws]
    failed = [_failures(gw) for gw in gws]
    for _ in range(3):
        _burst(cluster)
    time.sleep(0.3)  # the retry budget's background flushes of the last burst
    after = [cluster.fallbacks(gw) for gw in gws]
    print(f"replicas, redis restarted: state fallbacks over three bursts after it {fallbacks} -> {after}")
    new = [f for gw, before in zip(gws, failed, strict=True) for f in _failures(gw)[len(before):]]
    # No stale connection sent a replica to local state with Redis up. (Only a loaded machine
    # missing state.timeout_ms may; that is the time bound's business, not this test's.)
    assert not [f for f in new if DOWN in f and '"error":"TimeoutError"' not in f], new
    if not new:
        assert after == fallbacks


def _times_off(text: str) -> int:
    """How often a replica left Redis: down, or answered later than timeout_ms (each is
    followed by BACK once it answers in time again)."""
    return text.count(DOWN) + text.count('"cause":"redis"')


def _failures(gw: RunningGateway) -> list[str]:
    """Each time the replica left Redis, and each wait of this process's own past timeout_ms
    (served from memory, said once per recover_s). Matched by the state store's log events:
    the words this matched before ('state store redis failed') left the log when its lines
    became events, and with them every failure this test was to tell apart."""
    return [line for line in gw.logs().splitlines() if DOWN in line or '"event":"state_store_slow"' in line]


def test_a_storm_split_over_two_replicas_stays_within_the_shared_retry_budget(cluster: Cluster, tmp_path: Path) -> None:
    """The issue's storm: 40 permanently failing requests at once, half through each replica,
    `budget: {ttl_s: 30, min_retries_per_s: 0.2, percent_can_retry: 10}`: docs/errors/retries.md's bound is
    40 + (6 + 4) = 50 attempts. Each retry is confirmed in Redis before it is sent."""
    retry = ("  provider_unavailable: {max_retries: 5, base_delay_s: 0.05, max_delay_s: 0.2}\n"
             "  budget: {ttl_s: 30, min_retries_per_s: 0.2, percent_can_retry: 10}\n")
    gws = [launch(cluster.fake, cluster.redis.url, tmp_path, name, retry=retry, threshold=1000, prefix="storm:")
           for name in ("storm-a", "storm-b")]  # fmt: skip
    try:
        model = "down-budget-storm"
        jobs = [(gws[i % 2], fresh("storm")) for i in range(40)]
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers = list(pool.map(lambda job: cluster.chat(job[0], model, job[1])[0], jobs))
        assert all(a.status_code == 503 for a in answers)
        attempts = cluster.fake.calls(model)
        print(f"replicas, retry budget: 40 failing requests over two replicas made {attempts} attempts (bound 50)")
        assert 40 < attempts <= 50
        assert sum(int(a.headers["x-llm-attempts"]) for a in answers) == attempts
    finally:
        for gw in gws:
            gw.stop()
