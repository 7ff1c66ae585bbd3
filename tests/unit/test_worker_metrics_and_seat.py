"""The pure parts of server.workers: one exposition out of every worker's, what a worker's
config changes, and how a seat travels to a worker process."""

from __future__ import annotations

import asyncio
import os
import time

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import GatewayConfig
from gateway.errors import ErrorType
from gateway.logs import LineWriter
from gateway.telemetry import Telemetry
from gateway.workers.metrics import gather, keep, merge, rendered, snapshot_of
from gateway.workers.seat import ENV, WorkerSeat, worker_config


def _worker(requests: int, in_flight: int, circuit: float, latencies: list[float]) -> tuple[str, Telemetry]:
    t = Telemetry(CollectorRegistry(), ["gpt-4o"])
    t.init_upstream("primary")
    for _ in range(requests):
        t.requests.inc(("primary", "gpt-4o", "200", "none"))
    for s in latencies:
        t.request_duration.observe(("primary", "gpt-4o"), s)
    t.retries.labels("primary", ErrorType.RATE_LIMIT.value).inc(requests)
    t.in_flight.set(in_flight)
    t.circuit_open.set("primary", "gpt-4o", circuit)
    return generate_latest(t.registry).decode(), t


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}  # fmt: skip


def test_merged_exposition_adds_counters_histograms_and_in_flight_and_takes_the_open_circuit() -> None:
    a, _ = _worker(3, 2, 0.0, [0.02, 7.0])
    b, _ = _worker(5, 1, 1.0, [0.02, 0.3, 700.0])
    merged = _samples(merge([a, b], reporting=2).decode())
    req = ("llm_gateway_requests_total",
           (("error_type", "none"), ("model", "gpt-4o"), ("status", "200"), ("upstream", "primary")))  # fmt: skip
    assert merged[req] == 8
    assert merged[("llm_gateway_retries_total", (("error_type", "rate_limit"), ("upstream", "primary")))] == 8
    assert merged[("llm_gateway_in_flight_requests", ())] == 3
    assert merged[("llm_gateway_circuit_open", (("model", "gpt-4o"), ("upstream", "primary")))] == 1
    assert merged[("llm_gateway_circuit_open", (("model", "*"), ("upstream", "primary")))] == 0
    dur = (("model", "gpt-4o"), ("upstream", "primary"))
    assert merged[("llm_gateway_request_duration_seconds_count", dur)] == 5
    assert merged[("llm_gateway_request_duration_seconds_sum", dur)] == 0.02 + 7.0 + 0.02 + 0.3 + 700.0
    assert merged[("llm_gateway_request_duration_seconds_bucket", (("le", "0.025"), *dur))] == 2
    assert merged[("llm_gateway_request_duration_seconds_bucket", (("le", "10.0"), *dur))] == 4
    assert merged[("llm_gateway_request_duration_seconds_bucket", (("le", "+Inf"), *dur))] == 5
    assert merged[("llm_gateway_workers_reporting", ())] == 2


def test_created_is_the_earliest_and_series_only_one_worker_has_are_kept() -> None:
    a, ta = _worker(1, 0, 0.0, [])
    b, tb = _worker(1, 0, 0.0, [])
    tb.requests.inc(("primary", "gpt-4o", "429", "rate_limit"))
    key = ("primary", "gpt-4o", "200", "none")
    ta.requests._values[key][1] = 100.0
    tb.requests._values[key][1] = 50.0
    a, b = generate_latest(ta.registry).decode(), generate_latest(tb.registry).decode()
    merged = _samples(merge([a, b]).decode())
    labels = (("error_type", "none"), ("model", "gpt-4o"), ("status", "200"), ("upstream", "primary"))
    assert merged[("llm_gateway_requests_created", labels)] == 50.0
    limited = (("error_type", "rate_limit"), ("model", "gpt-4o"), ("status", "429"), ("upstream", "primary"))
    assert merged[("llm_gateway_requests_total", limited)] == 1
    assert ("llm_gateway_workers_reporting", ()) not in merged


def test_one_exposition_merges_to_itself() -> None:
    a, _ = _worker(4, 1, 1.0, [0.5])
    assert _samples(merge([a]).decode()) == _samples(a)
    # and the text keeps the metric families' order, HELP and TYPE lines
    assert [line for line in merge([a]).decode().splitlines() if line.startswith("# TYPE")] == [
        line for line in a.splitlines() if line.startswith("# TYPE")
    ]


CFG = GatewayConfig.model_validate({"upstreams": [{"name": "p", "base_url": "http://127.0.0.1:9/v1"}]})


def test_a_worker_on_local_state_gets_its_share_of_the_retry_floor_and_the_supervisors_secret() -> None:
    seat = WorkerSeat(1, 4, (5,), "/tmp/x", "ab" * 32)
    cfg = worker_config(CFG, seat)
    assert cfg.retry.budget.min_retries_per_s == CFG.retry.budget.min_retries_per_s / 4
    assert cfg.retry.budget.percent_can_retry == CFG.retry.budget.percent_can_retry
    assert cfg.loop_breaker.secret == "ab" * 32
    # Drawn for this replica alone: not what pools' conversations are named by in Redis, which
    # every replica must compute alike (app.py; review of the leak fixes).
    assert cfg.loop_breaker.shared_secret is None
    assert cfg.upstreams == CFG.upstreams


def test_a_worker_on_redis_keeps_the_shared_budget_and_a_configured_secret() -> None:
    redis = CFG.model_copy(update={
        "state": CFG.state.model_copy(update={"backend": "redis", "url": "redis://127.0.0.1:6379"}),
        "loop_breaker": CFG.loop_breaker.model_copy(update={"secret": "configured"}),
    })  # fmt: skip
    cfg = worker_config(redis, WorkerSeat(0, 2, (5,), "/tmp/x", "ab" * 32))
    assert cfg.retry.budget == redis.retry.budget
    assert cfg.loop_breaker.secret == cfg.loop_breaker.shared_secret == "configured"


def test_a_seat_travels_through_the_environment() -> None:
    seat = WorkerSeat(2, 3, (7, 8), "/tmp/run", None)
    assert WorkerSeat.from_env({ENV: seat.to_env()}) == seat
    assert WorkerSeat.from_env({}) is None
    assert seat.name == "3/3" and seat.peers() == ["/tmp/run/w0.sock", "/tmp/run/w1.sock"]


def test_workers_auto_is_one_per_usable_core() -> None:
    cfg = GatewayConfig.model_validate({**CFG.model_dump(), "server": {"workers": "auto"}})
    assert cfg.server.worker_count == len(os.sched_getaffinity(0))


def test_with_other_writers_each_write_is_whole_lines_of_at_most_pipe_buf() -> None:
    r, w = os.pipe()
    writer = LineWriter(w, flush_s=60, atomic_bytes=512)
    lines = [(b"x" * n) + b"\n" for n in (100, 300, 200, 700, 50, 50)]
    writes: list[bytes] = []
    writer._write_all = writes.append  # type: ignore[method-assign]
    for line in lines:
        writer.write(line)
    writer.flush()
    writer.close()
    os.close(r)
    os.close(w)
    assert b"".join(writes) == b"".join(lines)
    assert all(chunk.endswith(b"\n") for chunk in writes)
    assert all(len(chunk) <= 512 for chunk in writes if chunk.count(b"\n") > 1)
    assert [len(c) for c in writes] == [402, 201, 701, 102]  # 101+301 | 201 | 701 (alone: longer than the limit) | 51+51


def test_a_deployments_headroom_is_the_lowest_any_worker_last_read_never_a_sum() -> None:
    """A share of the deployment's limit, read from its answers' headers by whichever worker
    got them: summed, 2 workers read 1.998 where each read ~1, and an alert on headroom < 0.1
    never fired. The lowest is what an exhaustion alert needs."""
    _, ta = _worker(0, 0, 0.0, [])
    _, tb = _worker(0, 0, 0.0, [])
    ta.headroom.set("acct-1", "requests", 997, 1000, None)
    tb.headroom.set("acct-1", "requests", 50, 1000, None)
    ta.headroom.set("acct-1", "tokens", 40, 100, None)
    tb.headroom.set("acct-2", "tokens", 80, 100, None)  # a deployment only one worker has heard from
    a, b = generate_latest(ta.registry).decode(), generate_latest(tb.registry).decode()
    for merged in (_samples(merge([a, b]).decode()), _samples(merge([b, a]).decode())):
        ratio = "llm_gateway_deployment_headroom_ratio"
        assert merged[(ratio, (("deployment", "acct-1"), ("kind", "requests")))] == 0.05
        assert merged[(ratio, (("deployment", "acct-1"), ("kind", "tokens")))] == 0.4
        assert merged[(ratio, (("deployment", "acct-2"), ("kind", "tokens")))] == 0.8


def test_every_gauge_the_app_exposes_has_a_rule_for_merging_workers() -> None:
    """A gauge is a sum across workers only when it counts something per worker; a ratio, a
    state or a per-deployment reading summed reads N times too high."""
    from gateway.docs_gen.metrics import registered, registry_of_app
    from gateway.workers.metrics import GAUGE_RULES

    gauges = {m.name for m in registered(registry_of_app()) if m.type == "gauge"}
    assert gauges and gauges <= set(GAUGE_RULES), gauges - set(GAUGE_RULES)
    assert GAUGE_RULES["llm_gateway_in_flight_requests"](2, 3) == 5  # each worker's own requests


async def _peer(path: str, text: str, delay_s: float = 0.0) -> web.AppRunner:
    """A worker's private socket answering /metrics/local with ``text`` after ``delay_s``."""

    async def local(request: web.Request) -> web.Response:
        await asyncio.sleep(delay_s)
        return web.Response(text=text)

    app = web.Application()
    app.router.add_get("/metrics/local", local)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, path).start()
    return runner


async def test_a_worker_slow_to_answer_a_scrape_is_added_from_its_last_snapshot(tmp_path) -> None:
    """A worker that does not answer in time was left out: requests_total read 400 -> 196 ->
    400, a counter reset to Prometheus (rate() then counted its whole total again). Its last
    good numbers are used instead, and the scrape says how many answered and how stale."""
    me, _ = _worker(100, 0, 0.0, [])
    quick, _ = _worker(100, 0, 0.0, [])
    slow_then, _ = _worker(90, 0, 0.0, [])  # what the slow one said when it last answered
    slow_now, _ = _worker(100, 0, 0.0, [])
    paths = [str(tmp_path / f"w{i}.sock") for i in (1, 2, 3)]
    keep(snapshot_of(paths[1]), slow_then.encode())
    os.utime(snapshot_of(paths[1]), (time.time() - 30, time.time() - 30))
    runners = [await _peer(paths[0], quick), await _peer(paths[1], slow_now, delay_s=1.0)]
    try:
        got = await gather(paths, timeout_s=0.3)  # paths[2]: no such worker, nor any snapshot of it
    finally:
        for r in runners:
            await r.cleanup()
    assert got.answered == 1 and len(got.texts) == 2 and 29 < (got.stale_s or 0) < 60
    merged = _samples(merge([me, *got.texts], reporting=1 + got.answered, stale_s=got.stale_s).decode())
    req = ("llm_gateway_requests_total",
           (("error_type", "none"), ("model", "gpt-4o"), ("status", "200"), ("upstream", "primary")))  # fmt: skip
    assert merged[req] == 290  # never below what an earlier scrape showed of the slow worker
    assert merged[("llm_gateway_workers_reporting", ())] == 2  # who answered this time
    assert 29 < merged[("llm_gateway_workers_stale_seconds", ())] < 60


def test_a_snapshot_is_replaced_whole_and_only_one_per_worker_is_kept(tmp_path) -> None:
    registry = Telemetry(CollectorRegistry(), ["gpt-4o"]).registry
    path = str(tmp_path / "w0.prom")
    body = rendered(registry, path)
    with open(path, "rb") as f:
        assert f.read() == body == rendered(registry, None)
    rendered(registry, path)
    assert sorted(os.listdir(tmp_path)) == ["w0.prom"]  # no temporary file left behind
    assert snapshot_of(str(tmp_path / "w0.sock")) == path
    merged = _samples(merge([body.decode()], reporting=1).decode())
    assert merged[("llm_gateway_workers_stale_seconds", ())] == 0  # every worker answered


def test_the_model_label_bound_is_per_worker_and_the_reference_says_so() -> None:
    """Each worker admits the first MAX_MODELS names it sees: on N workers the machine's
    exposition holds up to N x MAX_MODELS of them (and one name may be a label on one worker,
    `other` on another). Sharing the admitted names would cost every request a round trip."""
    from gateway.docs_gen.metrics import render
    from gateway.telemetry import MAX_MODELS

    texts = []
    for w in range(2):
        t = Telemetry(CollectorRegistry(), [])
        for i in range(MAX_MODELS + 50):
            t.requests.inc(("primary", t.model_label(f"w{w}-m{i}"), "200", "none"))
        texts.append(generate_latest(t.registry).decode())
    merged = _samples(merge(texts, reporting=2).decode())
    models = {dict(labels)["model"] for name, labels in merged if name == "llm_gateway_requests_total"}
    assert len(models - {"other"}) == 2 * MAX_MODELS
    assert f"first {MAX_MODELS} others seen by each worker" in render()
