"""`python -m bench` (or `make bench`): the upstream directly, a minimal aiohttp proxy and the
gateway, measured side by side in one run; then the compression benchmark.

Each server runs in its own process; the load generator is one more. On a 2-core machine
they share cores, so absolute numbers mean little: read the ratios against the minimal proxy.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SECONDS = int(os.environ.get("BENCH_SECONDS", "3"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, path: str = "/", timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1)
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on {port}")


def pinned(core: int) -> list[str]:
    # With 2 cores, unpinned processes steal each other's core at random and the ratios
    # swing by 2x between runs; pinning gives the server under test one core of its own.
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(core)]
    return []


def spawn(args: list[str], port: int, ready_path: str = "/", core: int = 1) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*pinned(core), sys.executable, *args], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, ready_path)
    return proc


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(name: str, base: str) -> dict[str, float | str]:
    url = base + "/v1/chat/completions"
    load.throughput_and_latency(url, 8, 1)  # warm-up: connections, caches
    tput = load.throughput_and_latency(url, 32, SECONDS)
    single = load.throughput_and_latency(url, 1, SECONDS)
    ttfc = load.time_to_first_chunk(url, 300)
    return {"name": name, "rps_32": tput["rps"], "p50_ms": single["p50_ms"], "p99_ms": single["p99_ms"],
            "errors": tput["errors"] + single["errors"], **ttfc}


def median_row(samples: list[dict[str, float | str]]) -> dict[str, float | str]:
    row: dict[str, float | str] = {"name": samples[0]["name"]}
    for key in samples[0]:
        if key != "name":
            row[key] = statistics.median(float(s[key]) for s in samples)
    row["errors"] = sum(float(s["errors"]) for s in samples)
    return row


def table(rows: list[dict[str, float | str]]) -> str:
    base = next(r for r in rows if r["name"] == "minimal aiohttp proxy")
    lines = [
        "| target | req/s @32 conns | vs minimal | p50 @1 conn | Δ p50 | p99 @1 conn | stream TTFC p50 | Δ TTFC | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['rps_32']:.0f} | {float(r['rps_32']) / float(base['rps_32']):.2f}x | "
            f"{r['p50_ms']:.3f} ms | {float(r['p50_ms']) - float(base['p50_ms']):+.3f} ms | {r['p99_ms']:.3f} ms | "
            f"{r['ttfc_p50_ms']:.3f} ms | {float(r['ttfc_p50_ms']) - float(base['ttfc_p50_ms']):+.3f} ms | "
            f"{r['rss_mb']:.0f} MB |"
        )
    return "\n".join(lines)


def main() -> None:
    up_port, min_port, gw_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "gateway.yaml"
        config.write_text(f"server: {{port: {gw_port}, log_level: info}}\n"
                          f"upstreams: [{{name: bench, base_url: '{upstream}'}}]\n")
        procs = {
            "upstream directly": spawn(["-m", "bench.upstream", str(up_port)], up_port, core=0),
            "minimal aiohttp proxy": spawn(["-m", "bench.minimal_proxy", str(min_port), upstream], min_port),
            "llm-gateway": spawn(["-m", "gateway", "--config", str(config)], gw_port, "/healthz"),
        }
        ports = {"upstream directly": up_port, "minimal aiohttp proxy": min_port, "llm-gateway": gw_port}
        try:
            # Targets take turns, round after round: a noisy stretch of the shared host then
            # hits all three alike, and the medians compare like with like.
            samples: dict[str, list[dict[str, float | str]]] = {name: [] for name in ports}
            for _ in range(ROUNDS):
                for name, port in ports.items():
                    samples[name].append(measure(name, f"http://127.0.0.1:{port}"))
            rows = []
            for name in ports:
                row = median_row(samples[name])
                row["rss_mb"] = peak_rss_mb(procs[name].pid)
                rows.append(row)
        finally:
            for p in procs.values():
                p.terminate()
                p.wait(10)
    header = (f"{os.cpu_count()} cores, Python {platform.python_version()}, "
              f"load: {'wrk -t1' if load.have_wrk() else 'python aiohttp client'}, medians of {ROUNDS} interleaved rounds of {SECONDS}s; "
              f"{'proxies pinned to core 1, upstream and load to core 0' if pinned(0) else 'unpinned'}; "
              "a shared machine: compare ratios, not absolute numbers")
    report = f"{header}\n\n{table(rows)}\n"
    if any(float(r["errors"]) for r in rows):
        report += "\nWARNING: some requests failed: " + ", ".join(f"{r['name']}={r['errors']:.0f}" for r in rows) + "\n"
    print(report)
    from bench import compress_bench
    report += "\n" + compress_bench.run()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.md").write_text(report)


if __name__ == "__main__":
    main()
