"""``server.workers: N`` as an operator runs it: ``python -m gateway --config`` starts a supervisor
and N worker processes on one port, in front of the fake upstream; requests on fresh
connections (as many clients open them) land on every worker, and every scrape of ``/metrics``
shows the whole machine's numbers, whichever worker answers it."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.corpus_cases import IN_SAMPLE
from tests.fakeupstream import FakeUpstream, Reply, Stream, chunk
from tests.procs import RunningProcess, base_env, free_port, start

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}


def launch(fake: FakeUpstream, tmp: Path, workers: int = 2, extra_yaml: str = "",
           port: int | None = None) -> RunningProcess:  # fmt: skip
    port = port or free_port()
    config = tmp / "gateway.yaml"
    config.write_text(
        f"server: {{port: {port}, drain_s: 5, workers: {workers}}}\n"
        f"upstreams: [{{name: primary, base_url: '{fake.url}'}}]\n" + extra_yaml
    )
    gw = start([sys.executable, "-m", "gateway", "--config", str(config)], base_env(), port, tmp / "gateway.log")
    # /readyz answered from one worker: wait until every one has said it started.
    gw.logs_when(lambda text: len(_started(text)) >= workers, timeout_s=30)
    return gw


@pytest.fixture
def workers(upstream: FakeUpstream, tmp_path: Path) -> Iterator[RunningProcess]:
    gw = launch(upstream, tmp_path)
    yield gw
    gw.stop()


def _lines(text: str) -> list[dict[str, object]]:
    # A line being written while the test reads the file may be there only in part.
    complete = text[: text.rfind("\n") + 1]
    return [json.loads(line) for line in complete.splitlines() if line.startswith("{")]


def _started(text: str) -> list[dict[str, object]]:
    return [d for d in _lines(text) if d.get("event") == "started"]


def post(gw: RunningProcess, body: dict[str, object]) -> tuple[int, dict[str, str], bytes]:
    """One request on a connection of its own (urllib opens one per request)."""
    req = urllib.request.Request(gw.base + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json", "authorization": "Bearer sk-client"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def scrape(gw: RunningProcess) -> str:
    with urllib.request.urlopen(gw.base + "/metrics", timeout=10) as r:
        return r.read().decode()


def value(exposition: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", exposition, re.M)
    assert found, f"{sample} not in the exposition"
    return float(found.group(1))


def worker_counts(gw: RunningProcess) -> list[float]:
    """Each worker's own count of answered requests, from its private socket."""
    run_dir = next(d for d in _lines(gw.logs()) if d.get("event") == "workers_started")["metrics_sockets"]
    counts = []
    for path in sorted(Path(str(run_dir)).glob("w*.sock")):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            s.sendall(b"GET /metrics/local HTTP/1.0\r\nHost: w\r\n\r\n")
            raw = b"".join(iter(lambda s=s: s.recv(65536), b""))  # type: ignore[misc]
        text = raw.decode().partition("\r\n\r\n")[2]
        counts.append(sum(float(m) for m in re.findall(r"^llm_gateway_requests_total\{.*\} (\S+)$", text, re.M)))
    return counts


SERIES = 'llm_gateway_requests_total{error_type="none",model="gpt-4o-mini",status="200",upstream="primary"}'


def test_every_worker_serves_and_every_scrape_counts_the_whole_machine(
    upstream: FakeUpstream, workers: RunningProcess
) -> None:
    for _ in range(40):
        assert post(workers, CHAT)[0] == 200
    per_worker = worker_counts(workers)
    assert len(per_worker) == 2 and sum(per_worker) == 40
    assert min(per_worker) > 0, per_worker  # the kernel spread the connections over both
    for _ in range(6):  # each scrape on a fresh connection: either worker may answer it
        text = scrape(workers)
        assert value(text, SERIES) == 40
        assert value(text, "llm_gateway_workers_reporting") == 2
        assert value(text, "llm_gateway_in_flight_requests") == 0
        assert value(text, 'llm_gateway_request_duration_seconds_count{model="gpt-4o-mini",upstream="primary"}') == 40
        assert value(text, 'llm_gateway_upstream_attempts_total{outcome="success",upstream="primary"}') == 40
    assert len(upstream.chat_requests()) == 40


def test_a_worker_too_slow_for_a_scrape_is_counted_from_its_last_snapshot(
    upstream: FakeUpstream, workers: RunningProcess
) -> None:
    """A stopped worker (SIGSTOP: as one stuck for seconds) cannot answer the scrape's worker
    within 2 s. Left out, the machine's counters fell by its share and came back at the next
    scrape: a reset to Prometheus. Its last numbers stand in, and the scrape says so."""
    for _ in range(40):
        assert post(workers, CHAT)[0] == 200
    assert sum(worker_counts(workers)) == 40  # each worker rendered (and kept) its numbers
    stuck = int(str(_started(workers.logs())[0]["pid"]))
    os.kill(stuck, signal.SIGSTOP)
    try:
        text = None
        for _ in range(20):  # a scrape on a connection the kernel gave the stopped worker waits
            try:
                with urllib.request.urlopen(workers.base + "/metrics", timeout=4) as r:
                    text = r.read().decode()
                break
            except (TimeoutError, urllib.error.URLError):
                continue
        assert text is not None, "no scrape reached the running worker"
        assert value(text, SERIES) == 40
        assert value(text, "llm_gateway_workers_reporting") == 1
        assert value(text, "llm_gateway_workers_stale_seconds") > 0
    finally:
        os.kill(stuck, signal.SIGCONT)
    text = scrape(workers)
    assert value(text, SERIES) == 40 and value(text, "llm_gateway_workers_reporting") == 2
    assert value(text, "llm_gateway_workers_stale_seconds") == 0


def test_a_worker_that_dies_is_restarted_on_the_same_port(upstream: FakeUpstream, workers: RunningProcess) -> None:
    victim = int(str(_started(workers.logs())[0]["pid"]))
    os.kill(victim, signal.SIGKILL)
    text = workers.logs_when(lambda t: len(_started(t)) >= 3, timeout_s=30)
    exited = [d for d in _lines(text) if d.get("event") == "worker_exited"]
    assert exited and exited[0]["pid"] == victim and exited[0]["restart"] is True
    statuses = [post(workers, CHAT)[0] for _ in range(20)]
    assert statuses == [200] * 20
    assert min(worker_counts(workers)) > 0
    assert value(scrape(workers), "llm_gateway_workers_reporting") == 2


def test_sigterm_drains_every_worker_and_exits_0(workers: RunningProcess) -> None:
    assert post(workers, CHAT)[0] == 200
    pids = [int(str(d["pid"])) for d in _started(workers.logs())]
    run_dir = next(d for d in _lines(workers.logs()) if d.get("event") == "workers_started")["metrics_sockets"]
    assert workers.stop(signal.SIGTERM) == 0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    assert not Path(str(run_dir)).exists()
    stopped = [d for d in _lines(workers.logs()) if d.get("event") == "stopped"]
    assert len(stopped) == 2


def test_while_one_worker_drains_a_stream_new_connections_are_answered(upstream: FakeUpstream,
                                                                       tmp_path: Path) -> None:  # fmt: skip
    """The supervisor held every worker's socket until the last worker exited: connections the
    kernel gave an exited worker's socket waited unanswered, then were reset (audit: 6 of 8
    `curl -m 1` got nothing, and 2 of 3 /readyz probes hung)."""
    gw = launch(upstream, tmp_path, workers=3)
    try:
        # 4 s of stream, inside drain_s (5 s)
        upstream.script(Stream([chunk({"content": f"w{i}"}) for i in range(16)] + [chunk({}, "stop")], delay_s=0.25))
        result: dict[str, bytes] = {}

        def read_stream() -> None:
            with urllib.request.urlopen(urllib.request.Request(
                    gw.base + "/v1/chat/completions", json.dumps({**CHAT, "stream": True}).encode(),
                    {"content-type": "application/json"}), timeout=20) as r:  # fmt: skip
                result["body"] = r.read()

        reader = threading.Thread(target=read_stream)
        reader.start()
        deadline = time.monotonic() + 5
        while not upstream.chat_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # the stream is in flight
        os.kill(gw.proc.pid, signal.SIGTERM)  # the supervisor, as an orchestrator sends it
        gw.logs_when(lambda text: sum(d.get("event") == "stopped" for d in _lines(text)) >= 2, timeout_s=10)
        assert gw.proc.poll() is None  # one worker still drains the stream
        answers = []
        for _ in range(8):  # each on a connection of its own, which the kernel may give any socket
            status, headers, _ = post_within(gw, 2.0)
            answers.append(status)
        assert answers == [200] * 8
        readyz = [_status(gw.base + "/readyz", 2.0) for _ in range(3)]
        assert readyz == [503] * 3
        reader.join(20)
        assert result["body"].rstrip().endswith(b"data: [DONE]")
        assert gw.proc.wait(20) == 0
    finally:
        gw.stop()


def post_within(gw: RunningProcess, timeout_s: float) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(gw.base + "/v1/chat/completions", json.dumps(CHAT).encode(),
                                 {"content-type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _status(url: str, timeout_s: float) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_workers_left_by_a_killed_supervisor_drain_and_exit(workers: RunningProcess) -> None:
    pids = [int(str(d["pid"])) for d in _started(workers.logs())]
    os.kill(workers.proc.pid, signal.SIGKILL)  # the supervisor only, not the group
    workers.proc.wait(5)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in pids):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in pids)
    assert workers.logs().count('"event":"supervisor_gone"') == 2


def test_a_port_already_served_is_refused(upstream: FakeUpstream, workers: RunningProcess, tmp_path: Path) -> None:
    # SO_REUSEPORT would let a second gateway join the first one's port: it must say no instead.
    port = int(workers.base.rsplit(":", 1)[1])
    config = tmp_path / "second.yaml"
    config.write_text(f"server: {{port: {port}, workers: 2}}\nupstreams: [{{name: p, base_url: '{upstream.url}'}}]\n")
    second = subprocess.run([sys.executable, "-m", "gateway", "--config", str(config)], env=base_env(),
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert second.returncode == 2
    assert second.stderr.splitlines()[-1] == f"llm-gateway: cannot listen on 127.0.0.1:{port}: address already in use"
    assert "Traceback" not in second.stderr
    assert post(workers, CHAT)[0] == 200


AUTH_401 = next(c for c in IN_SAMPLE if c["name"] == "openai-401-invalid-key")


def test_on_redis_a_repeat_on_another_worker_is_answered_from_memory(
    upstream: FakeUpstream, tmp_path: Path
) -> None:
    from tests.integration.test_state_redis import RedisServer

    redis = RedisServer(free_port(), tmp_path)
    redis.start()
    gw = None
    try:
        # Patient: a fingerprint Redis did not answer within timeout_ms (50 ms by default, which a
        # loaded host's workers miss) is kept in that worker's memory, and the other worker's
        # repeat went upstream.
        gw = launch(upstream, tmp_path, extra_yaml=f"state: {{backend: redis, url: '{redis.url}', timeout_ms: 2000}}\n")
        upstream.script(*[Reply(AUTH_401["status"], AUTH_401["body"])] * 64)
        # The kernel spreads fresh connections by hash: 8 of them all on one worker happens once
        # in ~128 runs, so ask on until both workers have answered some (at most 48 requests).
        answers = [post(gw, CHAT) for _ in range(8)]
        while min(worker_counts(gw)) == 0 and len(answers) < 48:
            answers.append(post(gw, CHAT))
        assert min(worker_counts(gw)) > 0
        assert [status for status, _, _ in answers] == [401] * len(answers)
        # One call upstream: every repeat, whichever worker its connection reached, was
        # recognised by the fingerprint all workers share (the supervisor's secret).
        assert len(upstream.chat_requests()) == 1
        assert sum("x-llm-from-memory" in h for _, h, _ in answers) == len(answers) - 1
    finally:
        if gw is not None:
            gw.stop()
        redis.stop()


def test_a_worker_restarted_after_a_refused_reload_runs_the_config_in_force(
    upstream: FakeUpstream, workers: RunningProcess, tmp_path: Path
) -> None:
    # A refused file "changes nothing" (docs/operations/lifecycle.md): a worker restarted after
    # it starts from the config the others run, not from the bad file, and the gateway serves on.
    config = tmp_path / "gateway.yaml"
    good = config.read_text()
    config.write_text(good + "fallback: [other]\n")
    os.kill(workers.proc.pid, signal.SIGHUP)
    workers.logs_when(lambda t: t.count('"event":"config_reload_refused"') >= 2, timeout_s=15)
    victim = int(str(_started(workers.logs())[0]["pid"]))
    os.kill(victim, signal.SIGKILL)
    text = workers.logs_when(lambda t: len(_started(t)) >= 3, timeout_s=30)
    exited = [d for d in _lines(text) if d.get("event") == "worker_exited"]
    assert [d["pid"] for d in exited] == [victim]
    assert [post(workers, CHAT)[0] for _ in range(10)] == [200] * 10
    assert workers.proc.poll() is None
    # A good file loaded later reaches the restarted worker too, and the next restart runs it.
    config.write_text(good.replace("drain_s: 5", "drain_s: 4"))
    os.kill(workers.proc.pid, signal.SIGHUP)
    text = workers.logs_when(lambda t: t.count('"event":"config_reloaded"') >= 2, timeout_s=15)
    assert all("server.drain_s" in d["changed"] for d in _lines(text) if d.get("event") == "config_reloaded")
