"""A pool's conversations across reloads on two replicas sharing a real redis-server: two gateway
processes (``python -m gateway --config``, one file, each its own port) reloaded with SIGHUP,
in front of one fake provider playing the pool's keys, driven by the real SDKs.

A conversation's home is decided once and held in Redis: a weight raised or a deployment added
moves no live conversation (9 of 40 Claude Code-like sessions moved before, uncounted, and a
replica meeting a conversation first after the reload picked by the new weights), and a
removed deployment moves each of its conversations once, to the same new home on both
replicas, counted once as ``removed``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.fake.responses import response_object
from gateway.fake.responses_rules import seal
from tests.fakeupstream import FakeUpstream, Reply
from tests.integration.test_state_redis import REDIS, RedisServer
from tests.procs import RunningProcess, base_env, free_port, start

pytestmark = pytest.mark.skipif(REDIS is None, reason="needs redis-server (scripts/test-deps.sh)")

KEYS = ("a", "b", "c", "d")


@dataclass
class Replicas:
    a: RunningProcess
    b: RunningProcess
    fake: FakeUpstream
    config: Path
    fake_url: str
    redis: RedisServer
    reloads: int = 0

    def write(self, deployments: str = "key-a, key-b, key-c", weights: dict[str, int] | None = None) -> None:
        upstreams = "".join(
            f"  - {{name: key-{k}, base_url: '{self.fake_url}/v1', api_key: sk-{k}, apis: [chat, messages, responses]"
            f"{f', weight: {(weights or {})[k]}' if k in (weights or {}) else ''}}}\n" for k in KEYS
        )  # fmt: skip
        self.config.write_text(
            "server: {host: 127.0.0.1, port: '${GW_PORT}', drain_s: 1}\n"
            f"upstreams:\n{upstreams}"
            f"pools:\n  - {{name: main, models: ['m-*'], deployments: [{deployments}]}}\n"
            "timeouts: {connect_s: 2, first_byte_s: 10, idle_s: 10}\n"
            # Patient: a loaded test machine may take longer than the default 50 ms to answer,
            # and a claim Redis did not answer in time is decided in this replica's memory.
            f"state: {{backend: redis, url: '{self.redis.url}', timeout_ms: 2000}}\n"
            "loop_breaker: {secret: the-replicas-share-this-secret}\n"
        )

    def reload(self, deployments: str, weights: dict[str, int] | None = None) -> None:
        self.write(deployments, weights)
        self.reloads += 1
        for gw in (self.a, self.b):
            os.kill(gw.proc.pid, signal.SIGHUP)
        for gw in (self.a, self.b):
            log = gw.logs_when(lambda text: text.count('"config_reloaded"') >= self.reloads, 10)
            assert log.count('"config_reloaded"') >= self.reloads, log[-2000:]


def _gateway(config: Path, tmp: Path, name: str) -> RunningProcess:
    port = free_port()
    return start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(GW_PORT=str(port)), port,
                 tmp / f"{name}.log", ready_path="/healthz")  # fmt: skip


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Replicas]:
    redis = RedisServer(free_port(), tmp_path)
    redis.start()
    with FakeUpstream.in_thread() as fake:
        pair = Replicas(None, None, fake, tmp_path / "gateway.yaml", fake.url, redis)  # type: ignore[arg-type]
        pair.write()
        gws: list[RunningProcess] = []
        try:
            gws = [_gateway(pair.config, tmp_path, name) for name in ("a", "b")]
            pair.a, pair.b = gws
            yield pair
        finally:
            for gw in gws:
                gw.stop()
            redis.stop()


def _breaks(gw: RunningProcess) -> dict[str, float]:
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(gw.base + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return {s.labels["reason"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "llm_gateway_affinity_breaks_total" and s.value}  # fmt: skip


def test_a_weight_raised_or_a_deployment_added_moves_no_conversation_on_either_replica(replicas: Replicas) -> None:
    clients = [anthropic.Anthropic(base_url=gw.base, api_key="unused", max_retries=0) for gw in (replicas.a, replicas.b)]
    sessions = [str(uuid.uuid5(uuid.NAMESPACE_URL, f"session-{i}")) for i in range(40)]
    served: dict[str, list[str]] = {s: [] for s in sessions}

    def turn(replica: int, session: str) -> str:
        r = clients[replica].messages.with_raw_response.create(
            model="m-1", max_tokens=10, messages=[{"role": "user", "content": "hello " + session}],
            extra_headers={"X-Claude-Code-Session-Id": session})  # fmt: skip
        return r.headers["x-llm-upstream"]

    for t in range(3):
        for i, s in enumerate(sessions):
            # The first half alternates between the replicas; the second is served by A alone.
            served[s].append(turn((i + t) % 2 if i < 20 else 0, s))
    homes = {s: v[0] for s, v in served.items()}
    assert all(set(v) == {homes[s]} for s, v in served.items())
    assert len(set(homes.values())) == 3
    replicas.reload("key-a, key-b, key-c, key-d", {"b": 3})
    for t in range(3, 6):
        for i, s in enumerate(sessions):
            # B meets the second half for the first time now, after the reload.
            served[s].append(turn((i + t) % 2 if i < 20 else 1, s))
    moved = {s: v for s, v in served.items() if set(v) != {homes[s]}}
    assert moved == {}
    assert _breaks(replicas.a) == _breaks(replicas.b) == {}
    # The new weight and the added deployment take new conversations.
    new = {turn(1, f"new-{i}") for i in range(40)}
    assert {"key-b", "key-d"} <= new


def test_a_removed_deployment_moves_each_of_its_conversations_once_and_counts_it_once(replicas: Replicas) -> None:
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    # Keyed by the opening message (no session header): a hash of the first user turn.
    opening = [f"conversation {i}: fix the failing test" for i in range(30)]
    served: dict[str, list[str]] = {o: [] for o in opening}

    def turn(replica: int, first: str, t: int) -> str:
        return _answered_turn(clients[replica], first, t)

    for t in range(3):
        for i, o in enumerate(opening):
            served[o].append(turn((i + t) % 2, o, t))
    homes = {o: v[0] for o, v in served.items()}
    on_c = [o for o, h in homes.items() if h == "key-c"]
    assert on_c and all(set(v) == {homes[o]} for o, v in served.items())
    replicas.reload("key-a, key-b")
    for t in range(3, 6):
        for i, o in enumerate(opening):
            served[o].append(turn((i + t) % 2, o, t))
    for o, v in served.items():
        if homes[o] == "key-c":  # one new home, the same on both replicas from the move on
            assert len(set(v[3:])) == 1 and v[3] != "key-c", v
        else:
            assert set(v) == {homes[o]}, v
    a, b = _breaks(replicas.a), _breaks(replicas.b)
    assert set(a) | set(b) == {"removed"}
    assert a.get("removed", 0) + b.get("removed", 0) == len(on_c)


def test_a_removal_that_reached_one_replica_first_moves_each_conversation_once(replicas: Replicas) -> None:
    """A rolling reload: A loads a pool without key-b and with key-d while B still serves the old
    one, as a ConfigMap reaches pods one after another. A moves each conversation homed on key-b,
    once; B, whose config still has key-b and lacks key-d, keeps serving key-b until its own
    reload, and must not claim the conversation back from a home it does not know. Before, B's
    keep read key-d back, B found it outside its pool and claimed key-b again in Redis (a
    ``removed`` break), and A moved it to key-d again (another): 10 breaks for the 8
    conversations on key-b, Redis's home flipped at every keep."""
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    opening = [f"conversation {i}: update the changelog" for i in range(30)]
    served = {o: [_answered_turn(clients[t % 2], o, t) for t in range(3)] for o in opening}  # A, B, A
    on_b = [o for o, v in served.items() if v[0] == "key-b"]
    assert on_b and all(len(set(v)) == 1 for v in served.values())
    replicas.write("key-a, key-c, key-d")
    os.kill(replicas.a.proc.pid, signal.SIGHUP)
    assert '"config_reloaded"' in replicas.a.logs_when(lambda text: '"config_reloaded"' in text, 10)
    moved = {o: _answered_turn(clients[0], o, 3) for o in on_b}
    assert "key-b" not in moved.values() and "key-d" in moved.values()
    time.sleep(10.5)  # past each replica's keep of its homes (state/affinity.py's _KEEP_EVERY_S)
    for t in (4, 5):  # B: the first turn keeps the home, the next reads what Redis holds
        for o in on_b:
            assert _answered_turn(clients[1], o, t) in ("key-b", moved[o])
    for t in (6, 7):
        for o in on_b:
            assert _answered_turn(clients[0], o, t) == moved[o]
    os.kill(replicas.b.proc.pid, signal.SIGHUP)
    assert '"config_reloaded"' in replicas.b.logs_when(lambda text: '"config_reloaded"' in text, 10)
    for t in range(8, 12):
        for o in on_b:
            assert _answered_turn(clients[t % 2], o, t) == moved[o]
    a, b = _breaks(replicas.a), _breaks(replicas.b)
    assert a.get("removed", 0) + b.get("removed", 0) == len(on_b), (a, b, len(on_b))


def test_a_home_removed_then_re_added_is_the_same_on_both_replicas(replicas: Replicas) -> None:
    """Audit (pools on reload, 2026-11-30): conversations homed on key-b, their turns on both
    replicas (A, B, A); a reload without key-b and a turn on B alone (B moved each to a new home); a
    reload with key-b back: A, which met no turn in between, served key-b every turn and B the
    new home (Redis's), each alternation a prompt-cache miss."""
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    opening = [f"conversation {i}: rename the module" for i in range(24)]
    # A, B, A: each replica knows each home as claimed (a first turn is only held).
    served = {o: [_answered_turn(clients[t % 2], o, t) for t in range(3)] for o in opening}
    on_b = [o for o, v in served.items() if v[0] == "key-b"]
    assert on_b and all(len(set(v)) == 1 for v in served.values())
    replicas.reload("key-a, key-c")
    for o in on_b:
        served[o].append(_answered_turn(clients[1], o, 3))
    replicas.reload("key-a, key-b, key-c")
    for o in on_b:
        after = [_answered_turn(clients[t % 2], o, t) for t in range(4, 8)]
        assert set(after) == {served[o][3]} != {"key-b"}, (served[o], after)


def test_a_first_turn_a_sibling_answered_is_homed_there_on_both_replicas(replicas: Replicas) -> None:
    """Audit (pools, 2026-11-30), with Redis and two replicas: a conversation's first turn met a
    429 on its pick and a sibling answered; its next turns, once the pick's reset came, went
    back to the pick on either replica (it proposed the same rendezvous pick), a key that never
    held the conversation."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    first = "fix the failing test in the parser, please"
    key = conversation_key("chat", {}, {"messages": [{"role": "user", "content": first}]})
    assert key is not None
    picked = _rendezvous([Deployment(i, f"key-{n}") for i, n in enumerate("abc")], key)[0].name
    replicas.fake.keys.limited_until("sk-" + picked[-1], time.time() + 1.5)

    def turn(replica: int, t: int) -> str:
        return _answered_turn(clients[replica], first, t)

    answered = turn(0, 0)
    assert answered != picked
    time.sleep(2.0)  # the pick's reset: it may serve again
    assert [turn(t % 2, t) for t in range(1, 5)] == [answered] * 4
    assert replicas.fake.calls_by_key()["sk-" + picked[-1]] == 1  # the 429 only
    assert _breaks(replicas.a) == _breaks(replicas.b) == {}


def test_a_first_turn_its_pick_sat_out_for_keeps_its_home_on_both_replicas(replicas: Replicas) -> None:
    """Audit (pools across replicas, 2026-11-30): a conversation that opened while the first of
    its rendezvous order sat out (another conversation's 429) was answered by the next, held
    on that replica alone; once the reset came, its second turn on the other replica proposed
    the first and went there, away from its cache (6 conversations of 30 under ``weighted``)."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    deployments = [Deployment(i, f"key-{n}") for i, n in enumerate("abc")]

    def pick(first: str) -> str:
        key = conversation_key("chat", {}, {"messages": [{"role": "user", "content": first}]})
        assert key is not None
        return _rendezvous(deployments, key)[0].name

    first = "fix the failing test in the parser, please"
    limited = pick(first)
    other = next(o for i in range(100) if pick(o := f"rename the module, take {i}") == limited)
    replicas.fake.keys.limited_until("sk-" + limited[-1], time.time() + 1.5)
    assert _answered_turn(clients[0], other, 0) != limited  # its 429 sits the key out, on both replicas
    answered = _answered_turn(clients[0], first, 0)  # opens while it sits out
    assert answered != limited
    time.sleep(2.5)  # its reset (retry-after: 2): it may serve again
    assert [_answered_turn(clients[t % 2], first, t) for t in range(1, 5)] == [answered] * 4  # from B first
    assert replicas.fake.calls_by_key()["sk-" + limited[-1]] == 1  # the other conversation's 429 only
    assert _breaks(replicas.a) == _breaks(replicas.b) == {}


def test_a_chained_responses_turn_goes_to_the_key_that_stored_its_previous_one_from_either_replica(
    replicas: Replicas,
) -> None:
    """Audit (pools, 2026-11-30): a stored response is its key's project's; each chained turn
    went to a key the strategy picked and the provider answered 400 previous_response_not_found
    (the fake plays each key as a project of its own)."""
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    for run in range(3):
        previous = None
        served = []
        for t in range(6):
            r = clients[(run + t) % 2].responses.with_raw_response.create(
                model="m-1", input=f"run {run} turn {t}", previous_response_id=previous)  # type: ignore[arg-type]
            previous = r.parse().id
            served.append(r.headers["x-llm-upstream"])
        assert len(set(served)) == 1, served


def test_a_home_another_replica_moved_after_redis_lost_it_is_followed_by_both(replicas: Replicas) -> None:
    """Fault left open by the audits (pools across replicas): A served a conversation's first
    turns (its home claimed in Redis), Redis lost the home (flushed), and B, meeting the
    conversation for the first time, claimed the home while its key answered 429 (the first
    such turn moved it there, the rest found the key sitting out): B's turns went to the new
    home, A's to its own copy of the old one, every turn alternating between two keys (each a
    prompt-cache miss; measured: every turn on A of 4 conversations of 4, for 36 s, to the end
    of the run). A's copy follows Redis's from its next keep (at most every 10 s), read back in
    the round trip the keep rides on."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    deployments = [Deployment(i, f"key-{n}") for i, n in enumerate("abc")]

    def first(session: str) -> str:
        key = conversation_key("chat", {"session-id": session}, {})
        assert key is not None
        return _rendezvous(deployments, key)[0].name

    sessions = [s for s in (f"session {i}" for i in range(100)) if first(s) == "key-a"][:4]

    def turn(replica: int, session: str, t: int) -> str:
        messages: list[dict[str, str]] = [{"role": "user", "content": "fix the test"}]
        for k in range(t):
            messages += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"go on {k}"}]
        r = clients[replica].chat.completions.with_raw_response.create(
            model="m-1", messages=messages, max_tokens=10, extra_headers={"session-id": session})  # type: ignore[arg-type]
        return str(r.headers["x-llm-upstream"])

    assert [turn(0, s, t) for s in sessions for t in range(2)] == ["key-a"] * 2 * len(sessions)
    claimed = time.monotonic()  # A's claims: its second turns
    replicas.redis.flush()
    # Long enough for B's four turns on a loaded host (2 s was not), then waited out.
    reset = time.time() + 5
    replicas.fake.keys.limited_until("sk-a", reset)
    homes = {s: turn(1, s, 2) for s in sessions}  # B: the first meets key-a's 429, which sits it out
    assert "key-a" not in homes.values()
    time.sleep(max(0.0, reset - time.time()) + 0.5)  # key-a's reset: it may serve again
    served: dict[str, list[str]] = {s: [] for s in sessions}
    t = 3
    # A's first keep comes with its first turn 10 s after its claim and is read back with a later
    # round trip: 8 rounds begun after those 10 s leave the last 4 past it. Counted from the
    # claims, not from the test's start: a loaded host's first turns took seconds of it, and the
    # last rounds came before A's keep (1 run in 10 under load).
    after_keep = 0
    while after_keep < 8 or t < 9:
        after_keep += time.monotonic() - claimed >= 10.0
        for s in sessions:
            served[s].append(turn(t % 2, s, t))
        t += 1
        time.sleep(0.3)
    assert all(v[-4:] == [homes[s]] * 4 for s, v in served.items()), (homes, served)


def test_a_move_after_a_rate_limit_is_followed_by_the_other_replica_from_its_next_turn(replicas: Replicas) -> None:
    """Fault (workers of 4 sharing Redis, audit): B's turn met the home's 429 and moved the
    conversation to a sibling; A, which knew the conversation and read the home sitting out with
    its pool's records (another conversation's request), kept its own copy and sent the next
    turns it served back to the old key once it served again, for up to 10 s: two keys
    alternating (``bbbb!ccbbbccbcbc``), each change a cache write. A reads the home back at the
    conversation's next turn there, before using it."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    deployments = [Deployment(i, f"key-{n}") for i, n in enumerate("abc")]

    def first(session: str) -> str:
        key = conversation_key("chat", {"session-id": session}, {})
        assert key is not None
        return _rendezvous(deployments, key)[0].name

    session = next(s for s in (f"session {i}" for i in range(100)) if first(s) == "key-a")
    other = next(s for s in (f"other {i}" for i in range(100)) if first(s) != "key-a")

    def turn(replica: int, session: str, t: int) -> str:
        messages: list[dict[str, str]] = [{"role": "user", "content": "fix the test"}]
        for k in range(t):
            messages += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"go on {k}"}]
        r = clients[replica].chat.completions.with_raw_response.create(
            model="m-1", messages=messages, max_tokens=10, extra_headers={"session-id": session})  # type: ignore[arg-type]
        return str(r.headers["x-llm-upstream"])

    assert [turn(r, session, t) for t, r in ((0, 0), (1, 1), (2, 0))] == ["key-a"] * 3  # both know it
    reset = time.time() + 2
    replicas.fake.keys.limited_until("sk-a", reset)
    moved = turn(1, session, 3)  # B: key-a answers 429, a sibling answers, the home moves there
    assert moved != "key-a"
    time.sleep(0.3)  # past A's last read of the pool's records (state.cache_ms)
    turn(0, other, 1)  # A reads key-a sitting out with its pool's records
    time.sleep(max(0.0, reset - time.time()) + 0.3)  # key-a serves again; A's keep is 10 s away
    assert [turn(t % 2, session, t) for t in range(4, 8)] == [moved] * 4
    assert _breaks(replicas.a).get("rate_limit", 0) + _breaks(replicas.b).get("rate_limit", 0) \
        + _breaks(replicas.a).get("failed", 0) + _breaks(replicas.b).get("failed", 0) == 1  # fmt: skip


def test_one_move_met_on_both_replicas_is_one_break(replicas: Replicas) -> None:
    """Fault (audit): each replica whose turn met the home sitting out moved the conversation to
    the same sibling, and each counted the break: 3 moves read as 6. The replica that finds the
    move made already in Redis counts nothing."""
    from gateway.routing.affinity import conversation_key
    from gateway.routing.pools import Deployment, _rendezvous

    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    deployments = [Deployment(i, f"key-{n}") for i, n in enumerate("abc")]

    def first(session: str) -> str:
        key = conversation_key("chat", {"session-id": session}, {})
        assert key is not None
        return _rendezvous(deployments, key)[0].name

    session = next(s for s in (f"session {i}" for i in range(100)) if first(s) == "key-a")

    def turn(replica: int, t: int) -> str:
        messages: list[dict[str, str]] = [{"role": "user", "content": "fix the test"}]
        for k in range(t):
            messages += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"go on {k}"}]
        r = clients[replica].chat.completions.with_raw_response.create(
            model="m-1", messages=messages, max_tokens=10, extra_headers={"session-id": session})  # type: ignore[arg-type]
        return str(r.headers["x-llm-upstream"])

    assert [turn(r, t) for t, r in ((0, 0), (1, 1), (2, 0))] == ["key-a"] * 3  # both know it
    replicas.fake.keys.limited_until("sk-a", time.time() + 10)
    moved = turn(1, 3)  # B: key-a answers 429, the sibling answers: B moves the home
    assert moved != "key-a"
    time.sleep(0.3)  # past A's last read of the pool's records (state.cache_ms)
    assert turn(0, 4) == moved  # A: key-a sits out, the same sibling answers, the home is there already
    breaks = [_breaks(gw) for gw in (replicas.a, replicas.b)]
    assert sum(sum(b.values()) for b in breaks) == 1, breaks


def test_a_chained_turn_whose_mapping_redis_lost_is_answered_on_the_other_replica(replicas: Replicas) -> None:
    """Audit (pools, 2026-11-30): Redis lost the response -> key mappings (flushed here, a restart
    that kept nothing alike), and a chained turn on the replica that had not made its previous
    response went to the key the strategy picked: 25 of 40 were answered 400
    previous_response_not_found through a pool of two keys. Each key is now asked in turn."""
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    for run in range(12):
        previous = clients[0].responses.create(model="m-1", input=f"run {run}").id
        replicas.redis.flush()
        r = clients[1].responses.with_raw_response.create(model="m-1", input=f"run {run} again",
                                                          previous_response_id=previous)  # fmt: skip
        assert r.parse().status == "completed" and 1 <= int(r.headers["x-llm-attempts"]) <= 3


def test_a_turn_answered_after_the_reasoning_retry_moves_the_home_on_both_replicas(replicas: Replicas) -> None:
    """Audit (Codex over keys of different organizations): the home limited for a moment, the
    sibling refused the home's reasoning and answered the request sent again without it; the
    home stayed, and the next turns went back to it after its reset (from either replica),
    refused again for the sibling's reasoning. The move is the store's: a replica meeting the
    conversation next claims the new home (one that knows it reads the store's at its next keep)."""
    fake = replicas.fake
    fake.orgs = {f"sk-{k}": f"org-{k}" for k in KEYS}
    answered: list[str] = []

    def answer(payload: dict[str, Any]) -> Reply:
        key = fake._key or ""
        answered.append(key)
        org = fake.orgs.get(key, "")
        done = response_object("m-1", text=f"Fine, says {org}.", rid=f"resp_{org}_{len(answered)}")
        thought = {"id": f"rs_{org}_{len(answered)}", "type": "reasoning", "summary": [],
                   "encrypted_content": seal(org, str(len(answered)))}  # fmt: skip
        return Reply(200, {**done, "output": [thought, *done["output"]]})

    fake.always = answer
    session = {"session-id": str(uuid.uuid4())}  # as Codex names its session
    clients = [openai.OpenAI(base_url=gw.base + "/v1", api_key="unused", max_retries=0, default_headers=session)
               for gw in (replicas.a, replicas.b)]  # fmt: skip
    asked: list[Any] = []
    served = []
    for turn in range(1, 6):
        if turn == 3:
            fake.keys.limited_until(answered[-1], time.time() + 1.5)
        if turn == 4:
            time.sleep(2.0)  # the old home's reset
        asked.append({"role": "user", "content": f"Turn {turn}: how are you?"})
        r = clients[turn == 4].responses.with_raw_response.create(  # B meets it at turn 4
            model="m-1", input=asked, include=["reasoning.encrypted_content"], store=False)
        served.append(r.headers["x-llm-upstream"])
        asked += [i.model_dump(exclude_none=True) for i in r.parse().output]
    home, moved = served[0], served[2]
    assert served == [home, home, moved, moved, moved] and moved != home
    # The home: turns 1 and 2 and the 429; the sibling: turn 3 refused and answered, turn 4
    # refused and answered too (B learns for itself whose reasoning the key refuses), turn 5.
    assert fake.calls_by_key() == {"sk-" + home[-1]: 3, "sk-" + moved[-1]: 5}
    assert {**_breaks(replicas.a), **_breaks(replicas.b)} == {"failed": 1}


def _answered_turn(client: openai.OpenAI, first: str, t: int) -> str:
    """Turn ``t`` of a conversation opened by ``first`` (its history grown by a step a turn):
    the upstream that answered it."""
    messages: list[dict[str, str]] = [{"role": "user", "content": first}]
    for k in range(t):
        messages += [{"role": "assistant", "content": f"step {k}"}, {"role": "user", "content": f"go on {k}"}]
    r = client.chat.completions.with_raw_response.create(model="m-1", messages=messages, max_tokens=10)
    return str(r.headers["x-llm-upstream"])
