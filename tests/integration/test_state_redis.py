"""The shared store against a real redis-server (Debian's, installed by scripts/test-deps.sh).

Two RedisStore instances play two replicas. Redis is also killed and frozen mid-test: every
operation must still return within the time bound, from local state, and the store must come
back to Redis by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.config import CircuitBreakerConfig, LoopBreakerConfig, RetryBudgetConfig
from gateway.errors import Classification, ErrorType
from gateway.policy.breaker import Gate
from gateway.policy.loop_breaker import Answer, Fingerprint, LoopBreaker
from gateway.state import MemoryStore, SharedBudget, SharedCircuit, StateMetrics
from gateway.state.redis_store import RedisStore, connect
from tests.corpus_cases import IN_SAMPLE, body_bytes
from tests.procs import free_port

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS is None,
    reason="REDIS-SERVER NOT INSTALLED: the shared-state tests need it; run `bash scripts/test-deps.sh` "
    "(make test does), which installs Debian's redis-server",
)

TIMEOUT_S = 0.05
RECOVER_S = 0.3
# A generous ceiling on one operation's wall time while Redis is down or frozen: the bound
# (past TIMEOUT_S an operation waits on while a probe with RECOVER_S asks whether Redis is
# there, RedisStore._guard) plus scheduling noise on a loaded CI machine.
BOUND_S = max(TIMEOUT_S, RECOVER_S) + 0.25


@dataclass
class RedisServer:
    port: int
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()  # more redis-server arguments (--requirepass, --maxmemory ...)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert REDIS is not None
        self.proc = subprocess.Popen(
            [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith((b"+PONG", b"-NOAUTH")):  # up, with or without a password
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.proc = None

    def flush(self) -> None:
        """Everything in it gone, as with a restart that kept nothing (or an operator's FLUSHALL)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"FLUSHALL\r\n")
            assert s.recv(16).startswith(b"+OK")

    def freeze(self) -> None:  # accepts connections (the kernel does), answers nothing
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        if server.proc is not None and server.proc.poll() is None:
            server.thaw()
        server.stop()


@dataclass
class Replica:
    store: RedisStore
    fallbacks: list[tuple[str, str]] = field(default_factory=list)

    @contextlib.contextmanager
    def bounded(self, timeout_s: float = TIMEOUT_S) -> Iterator[None]:
        """The outage's part of a test: each operation given up on after ``timeout_s``, the
        bound under test. Outside it the replica waits as long as it was made to (PATIENT_S),
        so that a loaded machine's slow answer before or after the outage is not taken for one
        (a 50 ms bound there sent an admit to local state: 2 runs in 38 of the Redis test files
        under a CPU hog)."""
        patient = self.store._timeout_s
        self._time_out_after(timeout_s)
        try:
            yield
        finally:
            self._time_out_after(patient)

    def _time_out_after(self, timeout_s: float) -> None:
        """As redis_store.connect makes the gateway's client: the store's own deadline and its
        sockets' timeouts alike, on the connections already pooled too. (The sockets' are the
        backstop: on Python 3.11 the wait_for in redis-py's send can swallow the deadline's
        cancellation when the send completes in the same loop turn, and the read goes on.)"""
        self.store._timeout_s = timeout_s
        self.store._slow_s = slow_s = max(timeout_s, self.store._recover_s)
        pool = self.store._r.connection_pool
        pool.connection_kwargs.update(socket_timeout=slow_s, socket_connect_timeout=slow_s)
        for c in (*pool._available_connections, *pool._in_use_connections):
            c.socket_timeout = c.socket_connect_timeout = slow_s


def _replica(url: str, timeout_s: float = TIMEOUT_S, clock: Callable[[], float] = time.time) -> Replica:
    fallbacks: list[tuple[str, str]] = []
    store = RedisStore(
        connect(url, timeout_s), MemoryStore(clock), clock=clock,
        monotonic=time.monotonic, prefix="t:", timeout_s=timeout_s, recover_s=RECOVER_S,
        on_fallback=lambda b, op, f=fallbacks: f.append((b, op)),  # type: ignore[misc]
    )  # fmt: skip
    return Replica(store, fallbacks)


# For what is not about the time bound: a loaded machine may take longer than 50 ms to answer.
# (The outage tests bound their replicas by TIMEOUT_S only while Redis is down: Replica.bounded.)
PATIENT_S = 2.0


@pytest.fixture
async def patient_replicas(redis_server: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    made = [_replica(redis_server.url, PATIENT_S) for _ in range(2)]
    yield made[0], made[1]
    for r in made:
        await r.store.close()


async def test_two_replicas_share_circuits(patient_replicas: tuple[Replica, Replica]) -> None:
    a, b = patient_replicas
    cfg = CircuitBreakerConfig(failure_threshold=2, open_s=30, probe_interval_s=30)
    ca = SharedCircuit(a.store, "up", cfg, time.time, cache_s=0, rand=lambda: 0.0)
    cb = SharedCircuit(b.store, "up", cfg, time.time, cache_s=0, rand=lambda: 0.0)
    for c in (ca, cb):
        adm = await c.admit("m")
        await c.record(adm, "m", failed=True)
    refused = await cb.admit("m")
    assert refused.gate is Gate.REFUSE and 29 < refused.retry_in_s <= 30
    assert (await ca.admit("other")).gate is Gate.ALLOW  # one model's outage stays its own
    assert not a.fallbacks and not b.fallbacks


async def test_the_half_open_probe_is_claimed_once_across_replicas(patient_replicas: tuple[Replica, Replica]) -> None:
    a, b = patient_replicas
    # Held for far longer than the test takes: a 0.3 s claim could expire before b's attempt
    # on a loaded machine (1 run in 5 under simulated loop stalls of up to 0.15 s).
    assert await a.store.probe_claim("up/m", 60)
    assert not await b.store.probe_claim("up/m", 60)
    assert await a.store.probe_claim("up/n", 0.1)
    await asyncio.sleep(0.4)  # a prober that died: its claim expires
    assert await b.store.probe_claim("up/n", 0.3)
    await b.store.probe_release("up/n")
    assert await a.store.probe_claim("up/n", 5)


async def _close(*budgets: SharedBudget) -> None:
    """Before the stores close: a budget's background flush (every 0.25 s while requests
    come) left out when the test's loop closed was destroyed pending, and its connection's
    ResourceWarning failed whichever later test the garbage collector ran in."""
    for budget in budgets:
        await budget.close()


async def test_two_replicas_share_the_retry_budget(patient_replicas: tuple[Replica, Replica]) -> None:
    a, b = patient_replicas
    cfg = RetryBudgetConfig(ttl_s=10, min_retries_per_s=0, percent_can_retry=20)
    ba, bb = SharedBudget(a.store, cfg, time.monotonic), SharedBudget(b.store, cfg, time.monotonic)
    try:
        for _ in range(50):
            ba.record_request()
        await ba.flush()
        await bb.flush()
        assert sum(bb.try_acquire_retry() for _ in range(20)) == 10
        await bb.flush()
        await ba.flush()
        assert not ba.try_acquire_retry()
        assert await a.store.budget_add("global", 0, 0, 10) == (50, 10)
    finally:
        await _close(ba, bb)


async def test_two_replicas_share_loop_breaker_answers_and_resets(patient_replicas: tuple[Replica, Replica]) -> None:
    a, b = patient_replicas
    # What is shared is read within windows far longer than the test; what ends is written
    # with a short one, and read after it (a 0.4 s window could end before the second
    # replica's read on a loaded machine: 1 run in 10 under simulated loop stalls).
    cfg = LoopBreakerConfig(secret="shared", window_s=60)
    la, lb = LoopBreaker(cfg, a.store, time.time), LoopBreaker(cfg, b.store, time.time)
    fp = la.fingerprint("/v1/chat/completions", b'{"model":"m"}', "Bearer k")
    assert fp == lb.fingerprint("/v1/chat/completions", b'{"model":"m"}', "Bearer k")
    answer = Answer(400, b'{"error":"bad"}', (("content-type", "application/json"),))
    await la.remember(fp, answer, Classification.of(ErrorType.UNKNOWN))
    hit = await lb.recall(fp)
    assert hit is not None and (hit.status, hit.body, hit.repeats) == (400, b'{"error":"bad"}', 1)
    assert (await la.recall(fp)).repeats == 2  # type: ignore[union-attr]  # counted across replicas
    short = LoopBreakerConfig(secret="shared", window_s=0.4)
    sa, sb = LoopBreaker(short, a.store, time.time), LoopBreaker(short, b.store, time.time)
    brief = sa.fingerprint("/v1/chat/completions", b'{"model":"brief"}', "Bearer k")
    await sa.remember(brief, answer, Classification.of(ErrorType.UNKNOWN))
    await asyncio.sleep(0.5)
    assert await sb.recall(brief) is None  # the TTL ended it in Redis
    assert (await lb.recall(fp)).repeats == 3  # type: ignore[union-attr]  # the long one still there

    reset = int((time.time() + 60) * 1000)
    await a.store.reset_set("up/m", reset)
    assert await b.store.reset_get("up/m") == reset


async def test_what_redis_holds_of_a_remembered_answer_quotes_nothing_of_the_request(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """A pydantic server's 422 quotes the input it refused (tests/corpus
    fastapi-proxy-422-role-literal: the role a Claude Code proxy sent): Redis, which whoever
    reaches it can read, held that body and the provider's message as they came. What it holds
    now is sealed with a key only the same request yields; the other replica still replays the
    answer byte for byte."""
    a, b = patient_replicas
    [case] = [c for c in IN_SAMPLE if c["name"] == "fastapi-proxy-422-role-literal"]
    body = body_bytes(case["body"])
    cfg = LoopBreakerConfig(secret="shared", window_s=60)
    la, lb = LoopBreaker(cfg, a.store, time.time), LoopBreaker(cfg, b.store, time.time)
    request = b'{"messages":[{"content":"hi","role":"user"},{"content":"be brief","role":"system"}],"model":"m"}'
    fp = la.fingerprint("/v1/messages", request, "sk-ant-client")
    said = Classification.of(ErrorType.UNKNOWN, message="Input should be 'user' or 'assistant'")
    await la.remember(fp, Answer(422, body, (("content-type", "application/json"),)), said)
    stored = await a.store._r.hget(a.store._answers + fp.name, "b")
    assert stored is not None and len(stored) > len(body)
    for quoted in (b"system", b"Input should be", b"unknown", b"literal_error", b"content-type"):
        assert quoted not in stored, quoted
    hit = await lb.recall(fp)
    assert hit is not None and (hit.status, hit.body, hit.classification) == (422, body, said)
    # Its name with another request's seal (the same bytes under another body) reads as none.
    other = lb.fingerprint("/v1/messages", request.replace(b"brief", b"terse"), "sk-ant-client")
    assert await lb.recall(Fingerprint(fp.name, other.seal)) is None
    await a.store.reset_set("up/n", int((time.time() + 0.4) * 1000))
    await asyncio.sleep(0.5)
    assert await b.store.reset_get("up/n") is None
    assert not a.fallbacks and not b.fallbacks


async def test_a_plain_request_skips_the_answer_lookup_while_no_replica_remembers_one(
    redis_server: RedisServer,
) -> None:
    # Not about the time bound: patient stores (a 50 ms one fell back to local memory on a loaded
    # machine), and the local memories' clock is the test's, so the answer outlives the steps
    # that read it however slow they are (a real 0.2 s TTL could end before b's lookup).
    wall = FakeWall()
    stores = [
        RedisStore(connect(redis_server.url, PATIENT_S), MemoryStore(wall), clock=wall,
                   monotonic=time.monotonic, prefix="m:", timeout_s=PATIENT_S, answers_cache_s=cache_s)
        for cache_s in (0.3, 30.0)
    ]  # fmt: skip
    a, b = stores
    try:
        assert a.holds_answers() and b.holds_answers()  # nothing known yet: look
        assert await b.answer_take("fp") is None
        assert not b.holds_answers()  # none remembered anywhere: the next request skips the lookup
        await a.answer_put("fp", b"x", 60)
        assert a.holds_answers()  # its own answer, in its local memory too
        assert not b.holds_answers()  # b believes its lookup for answers_cache_s (30 s here)
        assert await b.answer_take("fp") == (b"x", 1)  # a lookup still finds it
        assert await b.answer_take("other") is None
        assert b.holds_answers()  # the marker said: some answer is remembered, keep looking
        wall.t += 61  # the answer's TTL ran out (in a's memory; Redis's copy is another's to end)
        assert await a.answer_take("other") is None
        assert not a.local.holds_answers() or await a.local.answer_take("fp") is None
    finally:
        for s in stores:
            await s.close()


async def test_an_answer_put_given_up_on_gives_its_connection_back(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """Remembering an answer was a pipeline holding a script: its SCRIPT EXISTS took a pooled
    connection before the pipeline's own cleanup began, and a timeout there kept that
    connection out of the pool for good, until the garbage collector closed it with an
    "Unclosed client session" ResourceWarning (a test error under filterwarnings; a loaded
    machine's slow answer to a healthy Redis did it too: once in 38 runs of the Redis test
    files under a CPU hog)."""
    a, _ = patient_replicas
    await a.store.answer_put("warm", b"x", 10)
    pool = a.store._r.connection_pool
    with a.bounded():
        redis_server.freeze()
        try:
            await a.store.answer_put("fp", b"y", 10)  # given up on within the bound
        finally:
            redis_server.thaw()
    assert a.fallbacks == [("redis", "answer_put")]
    probe = a.store._probe  # the timeout asked one whether Redis answers: let it end
    if probe is not None:
        await probe
    kept = a.store._kept_check  # and, Redis back, whether it still holds what it did
    if kept is not None:
        await kept
    assert not pool._in_use_connections  # back in the pool (or closed), none held by the dead call
    assert await a.store.answer_take("fp") == (b"y", 1)  # local memory has it all the same


async def test_every_key_written_has_a_ttl(patient_replicas: tuple[Replica, Replica], redis_server: RedisServer) -> None:
    a, _ = patient_replicas
    await a.store.circuit_fail([("up", "m"), ("up/m", "")], 60)
    await a.store.circuit_open("up/m", time.time() + 30, 60)
    await a.store.budget_add("global", 1, 1, 10)
    await a.store.answer_put("fp", b"x", 10)
    await a.store.probe_claim("up/m", 5)
    await a.store.reset_set("up/m", int((time.time() + 5) * 1000))
    client = connect(redis_server.url, 1.0)
    try:
        keys = await client.keys("t:*")
        # The six above, the marker that some answer is remembered, and the markers of the two
        # counting calls (a call sent again after its answer was lost counts nothing more).
        assert len(keys) == 9
        assert sum(k.startswith(b"t:o:") or b":o:" in k for k in keys) == 2
        for k in keys:
            assert await client.pttl(k) > 0, k
        # But one (docs/errors/retries.md): the marker whose absence says Redis lost its data,
        # which an expiry would fake.
        await a.store._read_kept()
        assert set(await client.keys("t:*")) - set(keys) == {b"t:kept"}
        assert await client.pttl("t:kept") == -1 and len(await client.get("t:kept")) == 16
    finally:
        await client.aclose()


async def _timed_ops(store: RedisStore) -> list[float]:
    took = []
    ops = [
        store.circuit_get(["up", "up/m"]), store.circuit_fail([("up", "m")], 60), store.probe_claim("up", 5),
        store.budget_add("global", 1, 0, 10), store.answer_take("fp"), store.reset_get("up/m"),
    ]  # fmt: skip
    for op in ops:
        t = time.monotonic()
        await op
        took.append(time.monotonic() - t)
    return took


async def test_an_answer_read_late_by_a_busy_loop_is_redis_s_not_memory_s(
    patient_replicas: tuple[Replica, Replica], caplog: pytest.LogCaptureFixture
) -> None:
    """Redis answers at once, but this replica's loop is busy for 3x timeout_ms (a saturated
    process): the operation waits on and is counted in Redis, where the other replica sees it.
    Served from memory at timeout_ms, two saturated replicas let a $0.01 budget serve twice
    its worth (keys audit, 2026-11-29)."""
    a, b = patient_replicas
    caplog.set_level(logging.INFO, logger="gateway.state")
    with a.bounded():
        for n in range(1, 4):
            asyncio.get_running_loop().call_soon(time.sleep, 3 * TIMEOUT_S)  # the loop stalls
            total = await a.store.budget_add("busy", 1, 0, 30)
            assert total == (n, 0)
    assert a.fallbacks == [] and a.store.healthy
    assert await b.store.budget_add("busy", 0, 0, 30) == (3, 0)  # counted where all replicas count
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("outage", ["killed", "frozen"])
async def test_an_outage_falls_back_to_local_within_the_bound_and_recovers(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
    outage: str,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, _ = patient_replicas
    registry = CollectorRegistry()
    metrics = StateMetrics(registry, "redis")
    a.store._on_fallback = metrics.fallback  # type: ignore[method-assign]
    lb = LoopBreaker(LoopBreakerConfig(secret="s"), a.store, time.time)
    await lb.remember(Fingerprint("fp", bytes(32)), Answer(401, b"no"), Classification.of(ErrorType.AUTH))  # written to both
    assert a.store.healthy

    with a.bounded():  # from here until Redis is back, every operation within the bound
        redis_server.stop() if outage == "killed" else redis_server.freeze()
        for _ in range(3):
            assert max(await _timed_ops(a.store)) < BOUND_S
        assert not a.store.healthy
        hit = await lb.recall(Fingerprint("fp", bytes(32)))  # answered from the local copy of what this replica remembered
        assert hit is not None and hit.status == 401
        assert (await a.store.circuit_get(["up"]))[0].failures == 3  # this replica's own view
        # Said once the probe's PING has had recover_s to answer (the replica left Redis when it
        # was late, before it could tell slow from down).
        for _ in range(round(2 * RECOVER_S / 0.02)):
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            if warnings:
                break
            await asyncio.sleep(0.02)
        assert len(warnings) == 1 and isinstance(warnings[0].msg, dict)
        # Structured like every other log line: an `event`, not a sentence in `message`.
        assert warnings[0].msg["event"] == "state_store_down" and warnings[0].msg["backend"] == "redis"
        assert "127.0.0.1" not in warnings[0].getMessage()  # never the URL (it may hold a password)
        total = sum(registry.get_sample_value("llm_gateway_state_fallbacks_total", {"backend": "redis", "op": op}) or 0
                    for op in ("circuit_get", "circuit_fail", "probe_claim", "budget_add", "answer_take", "reset_get"))
        assert total >= 18

    if outage == "killed":
        redis_server.start()  # same port, empty: a restarted Redis
    else:
        redis_server.thaw()
    await asyncio.sleep(RECOVER_S + 0.05)
    deadline = time.monotonic() + 5
    while not a.store.healthy and time.monotonic() < deadline:
        await a.store.circuit_get(["up"])
        await asyncio.sleep(0.05)
    assert a.store.healthy
    back = [r.msg for r in caplog.records if r.levelno == logging.INFO][-1]
    assert isinstance(back, dict) and back["event"] == "state_store_back" and back["down_s"] >= 0
    before = len(caplog.records)
    await a.store.answer_put("after", b"y", 10)
    assert await a.store.answer_take("after") == (b"y", 1)
    assert len(caplog.records) == before  # a healthy store logs nothing


class FakeWall:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


async def test_two_replicas_share_one_probe_schedule_and_return_to_a_recovered_primary(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """Steady traffic on both replicas (each request on both at once, every 0.5 simulated s),
    an outage of 60 s, then recovery: one probe per period across both, back within 10 s."""
    a, b = patient_replicas
    wall = FakeWall()
    start, outage_s, step = wall.t, 60.0, 0.5
    cfg = CircuitBreakerConfig(failure_threshold=5, open_s=30, probe_interval_s=5)
    rand = random.Random(29).random
    circuits = [SharedCircuit(r.store, "up", cfg, wall, cache_s=0.2, has_fallback=True, rand=rand) for r in (a, b)]
    probes: list[float] = []
    allowed_after: list[float] = []

    async def request(c: SharedCircuit) -> None:
        adm = await c.admit("m")
        if adm.gate is Gate.REFUSE:
            return  # the request goes to the fallback
        down = wall.t - start < outage_s
        if adm.gate is Gate.PROBE:
            probes.append(wall.t - start)
        elif not down:
            allowed_after.append(wall.t - start)
        await c.record(adm, "m", failed=down)

    for i in range(int(100 / step)):
        wall.t = start + i * step
        await asyncio.gather(*(request(c) for c in circuits))
    assert not a.fallbacks and not b.fallbacks  # all of it through Redis
    gaps = [later - earlier for earlier, later in itertools.pairwise(probes)]
    assert len(probes) >= 10 and min(gaps) >= 0.8 * 5  # at most one probe per period, both replicas together
    assert probes[-1] - outage_s <= 5  # the probe that found the primary back came within a period
    assert allowed_after and allowed_after[0] - outage_s <= 10
    assert all(p < outage_s + 10 for p in probes)  # and, once closed, the circuit stays closed
    assert not a.fallbacks and not b.fallbacks  # all of it through Redis


async def _burst(store: RedisStore, n: int = 24) -> None:
    """Concurrent operations, as a burst of requests makes them: each holds its own pooled connection."""
    await asyncio.gather(*(
        op for i in range(n) for op in (
            store.circuit_get(["up", f"up/m{i}"]), store.budget_add("global", 1, 0, 10), store.reset_get(f"up/m{i}"),
        )
    ))  # fmt: skip


# A burst's 72 operations each open a connection of their own (three round trips with redis-py's
# handshake): 0.5 s on this 2-core host at load 8, past PATIENT_S under three more CPU hogs (9 runs
# in 30 served some from memory, the replica slow, not Redis). The restart test is about dead
# connections, which fail at once, not about time: its replicas wait for their answers.
BURST_PATIENT_S = 30.0


@pytest.fixture
async def burst_replicas(redis_server: RedisServer) -> AsyncIterator[tuple[Replica, Replica]]:
    made = [_replica(redis_server.url, BURST_PATIENT_S) for _ in range(2)]
    yield made[0], made[1]
    for r in made:
        await r.store.close()


async def test_after_a_redis_restart_the_replicas_go_back_to_redis_and_stay(
    burst_replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, b = burst_replicas
    for r in (a, b):
        await _burst(r.store)  # fills each replica's pool with connections to this Redis
    assert not a.fallbacks and not b.fallbacks

    redis_server.stop()
    redis_server.start()  # same port, empty: every pooled connection is now dead
    await asyncio.sleep(RECOVER_S)
    deadline = time.monotonic() + 10
    for r in (a, b):
        await r.store.circuit_get(["up"])
        while not r.store.healthy and time.monotonic() < deadline:  # "back", if it noticed at all
            await asyncio.sleep(0.05)
            await r.store.circuit_get(["up"])
    assert a.store.healthy and b.store.healthy
    seen = (len(a.fallbacks), len(b.fallbacks))
    warnings = len([m for m in caplog.messages if "failed" in m])
    for _ in range(5):
        await asyncio.gather(_burst(a.store), _burst(b.store))
    assert (len(a.fallbacks), len(b.fallbacks)) == seen
    assert len([m for m in caplog.messages if "failed" in m]) == warnings
    assert a.store.healthy and b.store.healthy


async def test_the_retry_budget_holds_its_bound_across_replicas(patient_replicas: tuple[Replica, Replica]) -> None:
    """Each replica decides from a view that lags (its last sync plus its own counts), so both
    may hold the whole headroom at once; the atomic confirmation in Redis, just before each
    retry is sent, lets exactly the bound through."""
    a, b = patient_replicas
    cfg = RetryBudgetConfig(ttl_s=30, min_retries_per_s=0.2, percent_can_retry=10)  # the storm
    ba, bb = SharedBudget(a.store, cfg, time.monotonic), SharedBudget(b.store, cfg, time.monotonic)
    try:
        for i in range(40):
            (ba if i % 2 else bb).record_request()
        for budget in (ba, bb, ba):
            await budget.flush()
        limit = 10  # 0.2/s x 30 s + 10 % of 40 requests: docs/errors/retries.md's bound of 40 + 10 = 50 attempts
        held = [sum(budget.hold_retry() for _ in range(30)) for budget in (ba, bb)]
        assert held == [limit, limit]  # neither sees the other's holds: 2x the bound, so far only held
        confirmed = await asyncio.gather(*(budget.confirm_retry() for budget in (ba, bb) for _ in range(limit)))
        assert not a.fallbacks and not b.fallbacks, (a.fallbacks, b.fallbacks)
        assert sum(confirmed) == limit  # what is sent: exactly the bound, across both replicas
        assert await a.store.budget_add("global", 0, 0, 30) == (40, limit)
        for budget in (ba, bb):
            await budget.flush()  # concurrent confirmations may have left an older snapshot last
        assert not ba.hold_retry() and not bb.hold_retry()  # both see it spent
        # A continuation's retry counts at once, with the lag: both synced, the bound holds.
        for budget in (ba, bb):
            budget.record_request()
            await budget.flush()
        assert ba.try_acquire_retry() is False
        assert not a.fallbacks and not b.fallbacks
    finally:
        await _close(ba, bb)


async def test_the_retry_budget_holds_its_bound_when_replicas_clocks_disagree(redis_server: RedisServer) -> None:
    """The window's second is Redis's own. With each replica's clock naming it, a replica whose
    clock ran behind read a window that ended before the other's newest bucket and confirmed
    retries the other had already spent (the same happens without skew when Redis runs a call
    made in one second after a call made in the next: 19 confirmed against 10, 1 run in 250)."""
    behind = _replica(redis_server.url, PATIENT_S, clock=lambda: time.time() - 5)
    ahead = _replica(redis_server.url, PATIENT_S)
    budgets: list[SharedBudget] = []
    try:
        cfg = RetryBudgetConfig(ttl_s=30, min_retries_per_s=0.2, percent_can_retry=10)
        bb = SharedBudget(behind.store, cfg, time.monotonic)
        ba = SharedBudget(ahead.store, cfg, time.monotonic)
        budgets += (bb, ba)
        for i in range(40):
            (bb if i % 2 else ba).record_request()
        for budget in (bb, ba):
            await budget.flush()
        limit = 10  # 0.2/s x 30 s + 10 % of 40 requests
        confirmed = [await ba.confirm_retry() for _ in range(limit)]  # the clock ahead spends it all
        confirmed += [await bb.confirm_retry() for _ in range(limit)]
        assert sum(confirmed) == limit
        assert await behind.store.budget_add("global", 0, 0, 30) == (40, limit)
        assert not behind.fallbacks and not ahead.fallbacks
    finally:
        await _close(*budgets)
        for r in (behind, ahead):
            await r.store.close()


async def test_a_burst_past_the_connection_bound_waits_for_a_connection_and_stays_on_redis(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """redis-py's own pool refuses an operation past 100 connections in use ("Too many
    connections"), which took the replica off Redis at every burst past 100 concurrent
    requests. The gateway's pool makes it wait for a connection, within its deadline."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    fallbacks: list[tuple[str, str]] = []
    store = RedisStore(
        connect(redis_server.url, PATIENT_S, max_connections=8), MemoryStore(time.time), clock=time.time,
        monotonic=time.monotonic, prefix="t:", timeout_s=PATIENT_S, max_connections=8,
        on_fallback=lambda b, op: fallbacks.append((b, op)),
    )  # fmt: skip
    try:
        await asyncio.gather(*(store.budget_add("global", 1, 0, 10) for _ in range(200)))
        assert await store.budget_add("global", 0, 0, 10) == (200, 0)  # each one counted in Redis
        assert not fallbacks and store.healthy
        pool: Any = store._r.connection_pool
        assert len(pool._in_use_connections) + len(pool._available_connections) <= 8
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    finally:
        await store.close()


async def test_a_wait_that_was_this_process_s_own_leaves_the_replica_on_redis(redis_server: RedisServer) -> None:
    """An operation that times out while Redis answers others (a saturated loop reads answers
    late; every connection may be in use) is served from memory alone: the replica stays on
    Redis. Taking it off for recover_s made a saturated gateway flap several times a second."""
    fallbacks: list[tuple[str, str]] = []
    deadline_s = 0.5  # long enough for Redis's own answers on a loaded machine
    store = RedisStore(
        connect(redis_server.url, deadline_s), MemoryStore(time.time), clock=time.time,
        monotonic=time.monotonic, prefix="t:", timeout_s=deadline_s, recover_s=RECOVER_S,
        on_fallback=lambda b, op: fallbacks.append((b, op)),
    )  # fmt: skip
    try:
        await store.budget_add("global", 0, 0, 10)  # connected, script loaded
        never = asyncio.Event()

        async def held_up() -> str:  # its answer is not read in time, as on a loop that lags
            await never.wait()
            return "remote"

        async def from_memory() -> str:
            return "memory"

        late = asyncio.create_task(store._guard("budget_add", held_up, from_memory))
        await asyncio.sleep(0)
        assert await store.budget_add("global", 1, 0, 10) == (1, 0)  # Redis answers meanwhile
        assert await late == "memory"
        assert store.healthy and fallbacks == [("redis", "budget_add")]
        assert await store.budget_add("global", 1, 0, 10) == (2, 0)  # the next one goes to Redis
        assert fallbacks == [("redis", "budget_add")]
    finally:
        await store.close()


async def test_a_replica_off_redis_finds_it_back_without_a_request_waiting(redis_server: RedisServer) -> None:
    """Once Redis is taken for down, no operation waits on it: a probe in the background finds
    it back (at once, then once per recover_s while operations come), with more time than a
    request's 50 ms. Before, the operation after each recover_s was the probe, within its 50 ms:
    a process whose loop lagged stayed off a Redis that answered."""
    store = RedisStore(
        connect(redis_server.url, TIMEOUT_S), MemoryStore(time.time), clock=time.time,
        monotonic=time.monotonic, prefix="t:", timeout_s=TIMEOUT_S, recover_s=RECOVER_S,
    )  # fmt: skip
    sent = 0
    script = store._budget

    async def counted(**kw: Any) -> Any:
        nonlocal sent
        sent += 1
        return await script(**kw)

    store._budget = counted  # type: ignore[assignment]
    try:
        await store.budget_add("global", 1, 0, 10)
        redis_server.freeze()
        deadline = time.monotonic() + 10
        while store.healthy and time.monotonic() < deadline:
            await store.budget_add("global", 1, 0, 10)  # each within its deadline, from memory
        assert not store.healthy
        sent = 0
        for _ in range(20):
            await store.budget_add("global", 0, 0, 10)
        assert sent == 0  # taken for down: answered from memory, none sent to wait on Redis
        redis_server.thaw()
        deadline = time.monotonic() + 10
        while not store.healthy and time.monotonic() < deadline:
            await store.budget_add("global", 0, 0, 10)  # from memory; the probe goes meanwhile
            await asyncio.sleep(0.01)
        assert store.healthy and sent == 0  # found back by the probe, not by a request's call
        await store.budget_add("global", 1, 0, 10)
        assert sent == 1  # and the next operation goes to Redis
    finally:
        redis_server.thaw()
        await store.close()


async def test_the_start_up_check_loads_every_script_so_no_first_request_pays_for_it(
    redis_server: RedisServer,
) -> None:
    """A request's first use of a script on a Redis that has not seen it costs NOSCRIPT, a
    load and a second call within the 50 ms deadline: a worker starting on a loaded host missed
    it and served from memory. The start-up check loads them all (Redis keeps them for every
    client, every worker)."""
    from gateway.state import redis_store

    store = RedisStore(
        connect(redis_server.url, PATIENT_S), MemoryStore(time.time), clock=time.time,
        monotonic=time.monotonic, prefix="t:", timeout_s=PATIENT_S,
    )  # fmt: skip
    other = connect(redis_server.url, PATIENT_S)
    try:
        shas = [s.sha for s in (store._budget, store._take, store._put, store._ledger_admit, store._ledger_settle)]
        assert not any(await other.script_exists(*shas))
        assert await store.check(PATIENT_S) is None
        assert all(await other.script_exists(*[store._r.register_script(s).sha for s in redis_store._SCRIPTS]))
    finally:
        await other.aclose()
        await store.close()


async def test_homes_claimed_while_redis_is_down_leave_no_second_copy(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """The memory store kept each home claimed during an outage, bounded only by idle_s:
    100,000 claims were 100,000 entries (~20 MB). The pool's table (bounded by
    affinity.max_entries) is what keeps them; the claim is the proposed home, decided here."""
    a, _ = patient_replicas
    assert await a.store.home_claim("p:id:0", "key-a", ("key-a", "key-b"), 60) == ("key-a", True, None)
    with a.bounded():
        redis_server.stop()
        for i in range(2_000):
            assert await a.store.home_claim(f"p:id:{i}", "key-b", ("key-a", "key-b"), 60) == ("key-b", True, None)
        assert not a.store.healthy
    assert len(a.store.local._homes) == 0


async def test_a_replica_with_no_traffic_finds_a_restarted_redis_by_itself(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """No operation between the outage and the check: the background watch alone brings the
    replica back within about recover_s of Redis's return, and says how long it was down. It
    did not before (an idle replica met its first request 10 s later with Redis taken for down,
    and logged down_s 16.5 for a 6 s outage; audit of Redis, 2026-11-30)."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, _ = patient_replicas
    await a.store.reset_set("up/m", int((time.time() + 60) * 1000))
    redis_server.stop()
    with a.bounded():
        await a.store.reset_get("up/m")  # meets the outage
    assert not a.store.healthy
    await asyncio.sleep(3 * RECOVER_S)  # several failed probes, no operation
    redis_server.start()
    back_at = time.monotonic()
    for _ in range(250):
        if a.store.healthy:
            break
        await asyncio.sleep(0.02)
    took = time.monotonic() - back_at
    assert a.store.healthy and took < RECOVER_S + 0.5, took
    back = [r.msg for r in caplog.records if isinstance(r.msg, dict) and r.msg.get("event") == "state_store_back"]
    assert len(back) == 1 and back[0]["down_s"] < 3 * RECOVER_S + took + 0.5


async def test_a_full_redis_keeps_the_replica_on_it_said_once_not_flapping(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """maxmemory reached under noeviction: every write refused (OOM), PINGs and reads answered.
    Each refused write took the replica off Redis, the probe's PING brought it back, and the
    next write took it off again, about every second (audit of Redis)."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, b = patient_replicas
    await a.store.circuit_fail([("up", "m")], 60)
    admin = connect(redis_server.url, 1.0)
    try:
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", "1")
        for _ in range(round(3 * RECOVER_S / 0.05)):  # three probe periods of traffic
            await a.store.budget_add("global", 1, 0, 10)  # a write: refused, counted in memory
            assert (await a.store.circuit_get(["up"]))[0].failures == 1  # a read: still Redis's
            assert a.store.healthy
            await asyncio.sleep(0.05)
        said = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
        assert [m["event"] for m in said] == ["state_store_full"], said
        assert said[0]["error"] == "OutOfMemoryError" and "noeviction" in said[0]["problem"]
        assert {op for _, op in a.fallbacks} == {"budget_add"}
        await admin.config_set("maxmemory", "0")
        await a.store.budget_add("global", 1, 0, 10)
        said = [r.msg for r in caplog.records if isinstance(r.msg, dict)]
        assert [m["event"] for m in said] == ["state_store_full", "state_store_writable"], said
        assert await b.store.budget_add("global", 0, 0, 10) == (1, 0)  # that write is in Redis
    finally:
        await admin.config_set("maxmemory", "0")
        await admin.aclose()


async def test_a_home_moves_to_the_deployment_that_answered_unless_another_replica_moved_it(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    a, b = patient_replicas
    members = ("key-a", "key-b", "key-c")
    assert await a.store.home_claim("p:id:1", "key-c", members, 60) == ("key-c", True, None)
    assert await a.store.home_move("p:id:1", "key-c", "key-b", members, 60) == ("key-b", True)
    assert await b.store.home_claim("p:id:1", "key-a", members, 60) == ("key-b", False, None)
    # Another replica's turn on the old pick moves it no further: the home set since stays.
    assert await b.store.home_move("p:id:1", "key-c", "key-a", members, 60) == ("key-b", False)
    # A first turn that moved (nothing claimed yet) claims the deployment that answered.
    assert await b.store.home_move("p:open:2", "key-a", "key-c", members, 60) == ("key-c", True)
    assert await a.store.home_claim("p:open:2", "key-a", members, 60) == ("key-c", False, None)
    # The same move made by a second replica's turn (the same sit-out met): not its move, and
    # not its break to count.
    assert await a.store.home_move("p:open:2", "key-a", "key-c", members, 60) == ("key-c", False)


async def test_a_kept_home_is_read_back_in_the_same_round_trip_and_never_written_over(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """A replica keeps the homes it serves from its own copy; another replica may have set
    another since Redis lost this one: the keep answers the store's, which it leaves as it is."""
    a, b = patient_replicas
    members = ("key-a", "key-b")
    assert await a.store.home_claim("p:id:1", "key-a", members, 60) == ("key-a", True, None)
    redis_server.flush()
    assert await b.store.home_claim("p:id:1", "key-b", members, 60) == ("key-b", True, None)
    _, _, held = await a.store.records_sync(["h:key-a/m"], homes=[("p:id:1", "key-a", 60), ("p:id:2", "key-a", 60)])
    assert held == ["key-b", "key-a"]  # p:id:2 was gone: set again, as this replica knows it
    assert await b.store.home_claim("p:id:1", "key-a", members, 60) == ("key-b", False, None)
    with a.bounded():
        redis_server.stop()
        _, _, held = await a.store.records_sync([], homes=[("p:id:1", "key-a", 60)])
    assert held == [None]  # not known: the copy stays


async def test_which_deployment_made_a_stored_object_is_shared_and_known_here_without_redis(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """A chained Responses turn may reach any replica: each finds where its previous response
    was made. A replica's own are found without a round trip, and while Redis is down."""
    a, b = patient_replicas
    await a.store.stored_put("st:1", "key-b", 60)
    assert await b.store.stored_get("st:1") == "key-b"
    assert await b.store.stored_get("st:2") is None
    with a.bounded():
        redis_server.stop()
        assert await a.store.stored_get("st:1") == "key-b"  # its own, from its memory
        await a.store.stored_put("st:3", "key-c", 60)  # made during the outage: known here
        assert await a.store.stored_get("st:3") == "key-c"


async def test_a_stored_object_made_while_redis_was_away_is_found_by_another_replica_after_the_rejoin(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer, caplog: pytest.LogCaptureFixture,
) -> None:
    """A Responses answer made while the replica took Redis for down was remembered in its
    memory alone, for good: a chained turn on another replica went to a random sibling's key
    and was answered 400 previous_response_not_found (audit of pools across replicas and
    Redis). Kept, it is written to Redis at the rejoin with what is left of its TTL; one put
    while Redis was frozen (given up on, not yet taken off) too."""
    caplog.set_level(logging.INFO, logger="gateway.state")
    a, b = patient_replicas
    with a.bounded():
        redis_server.freeze()
        try:
            await a.store.stored_put("st:frozen", "key-b", 60)  # given up on: a failed write
            for _ in range(250):  # the probe's PING, late, takes the replica off
                if not a.store.healthy:
                    break
                await asyncio.sleep(0.02)
            assert not a.store.healthy
            await a.store.stored_put("st:down", "key-c", 60)  # taken for down: its memory only
            await a.store.stored_put("st:gone", "key-a", 0.001)  # ends before the rejoin
        finally:
            redis_server.thaw()
    for _ in range(500):  # found back by the probe, then written
        if await b.store.stored_get("st:down") is not None:
            break
        await asyncio.sleep(0.02)
    assert a.store.healthy
    assert await b.store.stored_get("st:frozen") == "key-b"
    assert await b.store.stored_get("st:down") == "key-c"
    assert await b.store.stored_get("st:gone") is None
    admin = connect(redis_server.url, PATIENT_S)
    try:
        assert 50_000 < await admin.pttl("t:st:down") <= 60_000  # what was left of its TTL
    finally:
        await admin.aclose()
    said = [r.msg for r in caplog.records if isinstance(r.msg, dict)
            and r.msg.get("event") == "state_store_stored_written"]  # fmt: skip
    assert said == [{"event": "state_store_stored_written", "backend": "redis", "count": 2, "dropped": 0}]


async def test_stored_objects_kept_for_redis_are_bounded_and_wait_out_the_outage(
    redis_server: RedisServer,
) -> None:
    """At most MAX_STORED_OWED wait for Redis (the oldest dropped past it), none lost while it
    is still away, all written at the rejoin."""
    from gateway.state import redis_store

    replica = _replica(redis_server.url, PATIENT_S)
    store = replica.store
    try:
        redis_server.stop()
        with replica.bounded():
            for i in range(redis_store.MAX_STORED_OWED + 5):
                await store.stored_put(f"st:{i}", "key-a", 60)
        assert not store.healthy and len(store._stored_owed) == redis_store.MAX_STORED_OWED
        assert "st:4" not in store._stored_owed and "st:5" in store._stored_owed
        await store._write_stored()  # still down: nothing sent, nothing lost
        assert len(store._stored_owed) == redis_store.MAX_STORED_OWED
        redis_server.start()
        for _ in range(500):
            if store.healthy and not store._stored_owed:
                break
            await asyncio.sleep(0.02)
        assert store.healthy and not store._stored_owed
        other = _replica(redis_server.url, PATIENT_S)
        try:
            assert await other.store.stored_get("st:5") == "key-a"
            assert await other.store.stored_get(f"st:{redis_store.MAX_STORED_OWED + 4}") == "key-a"
            assert await other.store.stored_get("st:4") is None
        finally:
            await other.store.close()
    finally:
        await store.close()


async def test_a_stored_object_a_full_redis_refused_is_written_once_it_takes_writes(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """A full Redis keeps the replica on it (no rejoin to write back at): the write-back is
    tried every recover_s, each refused one kept, until Redis takes it."""
    a, b = patient_replicas
    admin = connect(redis_server.url, 1.0)
    try:
        await admin.config_set("maxmemory-policy", "noeviction")
        await admin.config_set("maxmemory", "1")
        await a.store.stored_put("st:full", "key-b", 60)  # refused (OOM): kept
        await asyncio.sleep(3 * RECOVER_S)  # write-backs refused meanwhile
        assert a.store.healthy and "st:full" in a.store._stored_owed
        assert await b.store.stored_get("st:full") is None
        await admin.config_set("maxmemory", "0")
        for _ in range(250):
            if not a.store._stored_owed:
                break
            await asyncio.sleep(0.02)
        assert await b.store.stored_get("st:full") == "key-b"
    finally:
        await admin.config_set("maxmemory", "0")
        await admin.aclose()


async def test_a_pool_sit_out_learnt_while_redis_was_frozen_outlives_the_rejoin(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """A 429 met while Redis did not answer sat the key out in this replica's memory only; at
    the rejoin Redis's nothing was read over it and the key called again inside its reset (2
    calls, measured): it goes back to Redis instead, for every replica."""
    from gateway.config import parse_config
    from gateway.routing.pools import SitOut
    from gateway.state.pools import PoolState

    a, b = patient_replicas
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}}}\n" for k in "xyz")
        + "pools: [{name: p, deployments: [x, y, z]}]\n", env={}).upstreams  # fmt: skip
    pa, pb = (PoolState(r.store, time.time, time.monotonic, cache_s=0) for r in (a, b))
    until = round((time.time() + 60) * 1000)
    with a.bounded():
        redis_server.freeze()
        try:
            await pa.sit_out(ups[0], "m", until, SitOut.RATE_LIMIT)  # given up on (Redis may run it on thawing)
            for _ in range(250):  # the probe's PING, late, takes the replica off
                if not a.store.healthy:
                    break
                await asyncio.sleep(0.02)
            assert not a.store.healthy
            await pa.sit_out(ups[1], "m", until, SitOut.RATE_LIMIT)  # taken for down: its memory only
        finally:
            redis_server.thaw()
    for _ in range(500):  # found back by the probe
        if a.store.healthy:
            break
        await asyncio.sleep(0.02)
    assert a.store.healthy
    for _ in range(2):  # the first read finds Redis without it; its write goes with the next
        await pa.refresh("p", ups, "m")
        assert pa.view(1, ups[1], "m", time.time() * 1000).out_until_ms == until
    await pb.refresh("p", ups, "m")
    assert [pb.view(i, up, "m", time.time() * 1000).out_until_ms for i, up in enumerate(ups)] == [until, until, 0]
    await pa.close()
    await pb.close()


async def test_the_least_size_refused_over_a_window_is_redis_s_whichever_replica_wrote_last(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """Two replicas' refusals of one deployment: Redis keeps the smaller size whichever wrote
    last (read here and written over, the larger one replaced it), and the later end."""
    a, b = patient_replicas
    now = time.time() * 1000
    assert await a.store.records_least("f:x/m", 40_000, now + 1_000, now) == (40_000, now + 1_000)
    assert await b.store.records_least("f:x/m", 60_000, now + 2_000, now) == (40_000, now + 2_000)
    assert await b.store.records_least("f:x/m", 30_000, now + 1_500, now) == (30_000, now + 2_000)
    assert await a.store.records_least("f:x/m", 50_000, now + 9_000, now + 3_000) == (50_000, now + 9_000)  # ended
    ttl = await a.store._r.pttl("t:d:f:x/m")
    assert 6_000 < ttl <= 7_000  # to its end and a second


async def test_a_size_refused_over_a_window_that_a_restarted_redis_lost_is_written_back(
    patient_replicas: tuple[Replica, Replica], redis_server: RedisServer,
) -> None:
    """Redis restarted empty: read over with its nothing, the size one replica knew was lost to
    the others, which paid the refused call again. It goes back at that replica's next read."""
    from gateway.config import parse_config
    from gateway.state.pools import OVER_WINDOW_MS, PoolState

    a, b = patient_replicas
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}}}\n" for k in "xy")
        + "pools: [{name: p, deployments: [x, y]}]\n", env={}).upstreams  # fmt: skip
    pa, pb = (PoolState(r.store, time.time, time.monotonic, cache_s=0) for r in (a, b))
    await pa.over_window(ups[0], "m", 40_000)
    redis_server.flush()
    await pa.refresh("p", ups, "m")  # Redis's nothing: written back, not read over
    await pb.refresh("p", ups, "m")
    now = time.time() * 1000
    assert pb.too_big(ups[0], "m", 40_000, now) and not pb.too_big(ups[0], "m", 39_999, now)
    assert 0 < await a.store._r.pttl("t:d:" + pa._over_key("x", "m")) <= OVER_WINDOW_MS + 1_000
    await pa.close()
    await pb.close()


async def test_an_azure_reading_read_back_from_redis_is_unknown_and_its_429_says_nothing_past_its_wait(
    patient_replicas: tuple[Replica, Replica],
) -> None:
    """Azure's answers state only what is left (tests/corpus/ratelimit/headers.json's real one).
    Read back by another replica: a 429's 0 left is the 429's wait only (read as 0 until it
    faded, its deployment got no request for 120 s: audit), an answer's 0 left ranks it last,
    what is left without a limit is unknown, and the configured limits are still taken."""
    from multidict import CIMultiDict

    from gateway.config import parse_config
    from gateway.state.pools import PoolState

    corpus = Path(__file__).parents[1] / "corpus" / "ratelimit" / "headers.json"
    real = next(c for c in json.loads(corpus.read_text())["cases"] if c["name"] == "azure-openai-chat-real")
    a, b = patient_replicas
    ups = parse_config("upstreams:\n" + "".join(
        f"  - {{name: {k}, base_url: 'http://127.0.0.1:9/v1', api_key: key-{k}, "
        "limits: {requests_per_minute: 5}}\n" for k in "xyz")
        + "pools: [{name: p, deployments: [x, y, z]}]\n", env={}).upstreams  # fmt: skip
    pa, pb = (PoolState(r.store, time.time, time.monotonic, cache_s=0) for r in (a, b))
    no_tokens = CIMultiDict({**real["headers"], "x-ratelimit-remaining-tokens": "0"})
    pa.observe(ups[0], "m", no_tokens, refused=True)  # a 429's
    pa.observe(ups[1], "m", no_tokens)  # an answer that took the last tokens
    pa.observe(ups[2], "m", CIMultiDict(real["headers"]))
    await pa.refresh("p", ups, "m")  # written
    await pb.refresh("p", ups, "m")
    now_ms = time.time() * 1000
    assert [pb.view(i, up, "m", now_ms).tokens_left for i, up in enumerate(ups)] == [None, 0.0, None]
    assert all(pb.takes(up, "m") for up in ups)
    await pa.close()
    await pb.close()
