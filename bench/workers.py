"""`python -m bench.workers` (part of `make bench`): what `server.workers: N` buys on this machine,
and what its metrics cost.

1. Throughput of the gateway with 1 worker and with one per core, the minimal aiohttp proxy
   (one process) as the reference, all unpinned (a worker per core needs every core), rounds
   interleaved; CPU per request summed over the supervisor and its workers.
2. How evenly SO_REUSEPORT spread the connections: each worker's own request count.
3. A `/metrics` scrape, one process against N (the scraped worker gathers the others').
4. Why not prometheus_client's multiprocess mode: the cost of one counter increment in it,
   against the gateway's own hot-path counter and prometheus_client's default mode.
"""

from __future__ import annotations

import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import load
from bench.__main__ import QUICK, ROOT, ROUNDS, SECONDS, children, family_cpu_s, free_port, wait_port

CORES = len(os.sched_getaffinity(0))
CONNECTIONS = 64


def spawn(args: list[str], port: int, ready: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    out = log.open("wb") if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    wait_port(port, ready)
    return proc


def gateway(tmp: Path, upstream: str, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cfg = tmp / f"gateway-{workers}.yaml"
    cfg.write_text(f"server: {{port: {port}, workers: {workers}}}\n"
                   f"upstreams: [{{name: bench, base_url: '{upstream}', max_connections: 1000}}]\n")  # fmt: skip
    proc = spawn(["-m", "gateway", "--config", str(cfg)], port, "/healthz", tmp / f"gateway-{workers}.log")
    if workers > 1:  # /healthz answered by one: wait for all
        deadline = time.monotonic() + 30
        while len(children(proc.pid)) < workers and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)
    return proc, port


def measure(base: str, pid: int) -> dict[str, float]:
    url = base + "/v1/chat/completions"
    load.throughput_and_latency(url, 8, 1)
    c0 = family_cpu_s(pid)
    r = load.wrk(url, CONNECTIONS, SECONDS) if load.have_wrk() else load.throughput_and_latency(url, CONNECTIONS, SECONDS)
    return {"rps": r["rps"], "cpu_us": (family_cpu_s(pid) - c0) / max(r["requests"], 1) * 1e6,
            "p99_ms": r["p99_ms"], "errors": r["errors"]}  # fmt: skip


def own_counts(log: Path) -> list[float]:
    """Each worker's own count of answered requests, from its private socket (named in the
    supervisor's start-up line)."""
    found = re.search(r'"metrics_sockets":"([^"]+)"', log.read_text())
    counts = []
    for path in sorted(Path(found.group(1)).glob("w*.sock")) if found else []:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(path))
            s.sendall(b"GET /metrics/local HTTP/1.0\r\nHost: w\r\n\r\n")
            raw = b"".join(iter(lambda s=s: s.recv(65536), b""))  # type: ignore[misc]
        counts.append(sum(float(v) for v in re.findall(r"^llm_gateway_requests_total\{.*\} (\S+)$", raw.decode(), re.M)))
    return counts


def scrape_ms(port: int, n: int = 50) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


INCREMENT = """
import os, sys, tempfile, timeit
mode = sys.argv[1]
if mode == "multiprocess":
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp()
from prometheus_client import CollectorRegistry, Counter
from gateway.telemetry import LoopCounter
r = CollectorRegistry()
if mode == "loop":
    c = LoopCounter("x", "x", ["a", "b"], r)
    labels = ("1", "2")
    f = lambda: c.inc(labels)
else:
    child = Counter("x", "x", ["a", "b"], registry=r).labels("1", "2")
    f = child.inc
n = 200_000
print(min(timeit.repeat(f, number=n, repeat=5)) / n * 1e9)
"""


def increment_ns(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", INCREMENT, mode], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def run(tmp: Path) -> str:
    up_port, min_port = free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    procs = [spawn(["-m", "bench.upstream", str(up_port)], up_port, "/")]
    try:
        procs.append(spawn(["-m", "bench.minimal_proxy", str(min_port), upstream, "1000"], min_port, "/"))
        targets = {"minimal aiohttp proxy (1 process)": (procs[-1], min_port)}
        for n in sorted({1, CORES}):
            proc, port = gateway(tmp, upstream, n)
            procs.append(proc)
            targets[f"llm-gateway, workers: {n}"] = (proc, port)
        samples: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for _ in range(ROUNDS):
            for name, (proc, port) in targets.items():
                samples[name].append(measure(f"http://127.0.0.1:{port}", proc.pid))
        med = {name: {k: statistics.median(s[k] for s in rows) for k in rows[0]} for name, rows in samples.items()}
        one = med["llm-gateway, workers: 1"]
        lines = [
            f"Workers: {CORES} cores, load wrk -t1 -c{CONNECTIONS} pinned to core 0, servers unpinned, "
            f"medians of {ROUNDS} interleaved rounds of {SECONDS}s{' (quick mode)' if QUICK else ''}",
            "",
            "| target | req/s | vs workers: 1 | CPU µs/request (all its processes) | p99 | errors |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for name, m in med.items():
            lines.append(f"| {name} | {m['rps']:.0f} | {m['rps'] / one['rps']:.2f}x | {m['cpu_us']:.0f} | "
                         f"{m['p99_ms']:.2f} ms | {sum(s['errors'] for s in samples[name]):.0f} |")  # fmt: skip
        if CORES > 1:
            counts = own_counts(tmp / f"gateway-{CORES}.log")
            share = ", ".join(f"{c / sum(counts):.0%}" for c in counts) if counts and sum(counts) else "-"
            lines += ["", f"Requests per worker (SO_REUSEPORT's spread of wrk's {CONNECTIONS} connections, "
                          f"whole run): {share}"]  # fmt: skip
        scrapes = {name: scrape_ms(port) for name, (_, port) in targets.items() if "gateway" in name}
        lines += ["", "A `/metrics` scrape (median of 50, idle): " + "; ".join(
            f"{name.split(', ')[1]}: {ms:.2f} ms" for name, ms in scrapes.items())]
        inc = {mode: increment_ns(mode) for mode in ("loop", "default", "multiprocess")}
        lines += ["", "One labelled counter increment (best of 5 × 200,000): the gateway's hot-path counter "
                      f"{inc['loop']:.0f} ns; prometheus_client default mode {inc['default']:.0f} ns; "
                      f"prometheus_client multiprocess mode {inc['multiprocess']:.0f} ns "
                      f"({inc['multiprocess'] / inc['loop']:.1f}x the gateway's; ~6 increments per request)"]  # fmt: skip
        return "\n".join(lines) + "\n"
    finally:
        for p in procs:
            p.terminate()
            p.wait(15)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        report = run(Path(tmp))
    print(report, flush=True)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "workers.md").write_text(report)


if __name__ == "__main__":
    main()
