"""`python -m bench` (or `make bench`): the upstream directly, a minimal aiohttp proxy and the
gateway, measured side by side in one run (the gateway also with its state in a real Redis,
when redis-server is installed, translating the chat client to a Messages-only upstream, and
translating a Messages and a Responses client to a chat-only upstream, and on aiohttp's client
instead of its own);
then how the cost grows (thousands of open streams, a long mixed soak) and the compression
benchmark. `make bench` then runs `bench.faults` and `bench.translation`.

Each server runs in its own process; the load generator is one more. On a 2-core machine
they share cores, so absolute numbers mean little: read the ratios against the minimal
proxy. CPU time per request (from /proc, around each wrk run) is the steadiest figure on a
shared host: it does not move when another process steals the core, only when the code
does.

    make bench                  full run (about 15 minutes)
    make bench BENCH_QUICK=1    the same tables, smaller (a few minutes)

Environment: BENCH_SECONDS, BENCH_ROUNDS (throughput), BENCH_STREAMS (e.g. "1000,5000"),
BENCH_STREAM_S (how long each stream trickles), BENCH_SOAK (requests), BENCH_LOOPS
("asyncio,uvloop": the side-by-side table once per event loop, both proxies on the same
one; uvloop only when installed - it is a dev extra), BENCH_QUICK.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from bench import load

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
SECONDS = int(os.environ.get("BENCH_SECONDS", "2" if QUICK else "4"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3" if QUICK else "5"))
TTFC_N = 100 if QUICK else 300
STREAMS = [int(x) for x in os.environ.get("BENCH_STREAMS", "1000" if QUICK else "1000,5000").split(",") if x]
STREAM_S = float(os.environ.get("BENCH_STREAM_S", "6" if QUICK else "30"))
TOKEN_INTERVAL_S = 0.2
SOAK = int(os.environ.get("BENCH_SOAK", "10000" if QUICK else "100000"))
POOL = 12_000  # both proxies: enough upstream connections for every open stream

MINIMAL, GATEWAY, DIRECT = "minimal aiohttp proxy", "llm-gateway", "upstream directly"
# The same gateway with its state in a real Redis (Debian's redis-server, when installed), and
# with the chat client translated to an upstream that speaks only Anthropic Messages.
ON_REDIS, TRANSLATED = "llm-gateway, state: redis", "llm-gateway, translated (chat → Messages upstream)"
ON_AIOHTTP = "llm-gateway, upstream_client: aiohttp"
# A pool of three deployments (three keys of the one upstream, whose answers carry rate-limit
# headers for them), picked by each strategy that reads something different.
POOL_WEIGHTED, POOL_HEADROOM = "llm-gateway, pool of 3 (weighted)", "llm-gateway, pool of 3 (headroom)"
# A named key with limits and a budget on every request (reserve, then settle), state in this
# process or in Redis: what accounting costs against the same gateway without keys.
KEYED, KEYED_REDIS = "llm-gateway, a key with limits and a budget", "llm-gateway, a key with limits and a budget, state: redis"
KEY_YAML = (f"keys: [{{name: bench, key: {load.KEY}, requests_per_minute: 100000000, "
            "tokens_per_minute: 10000000000, parallel: 100000, budget: {usd: 1000000000, period: month}}]\n")
# Agents' own APIs on a chat-only upstream: Claude Code's and Codex's path to a local server.
FROM_MESSAGES = "llm-gateway, translated (Messages client → chat upstream)"
FROM_RESPONSES = "llm-gateway, translated (Responses client → chat upstream)"
PROMPT = [{"role": "user", "content": "Hello, how are you?"}]
# What each target is sent (path, body, streamed body); every other target the chat request.
REQUESTS = {
    FROM_MESSAGES: ("/v1/messages", {"model": "gpt-4o-mini", "max_tokens": 256, "messages": PROMPT}),
    FROM_RESPONSES: ("/v1/responses", {"model": "gpt-4o-mini", "input": PROMPT[0]["content"]}),
}


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


def spawn(args: list[str], port: int, ready_path: str = "/", core: int = 1,
          stdout: int | object = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*pinned(core), sys.executable, *args], cwd=ROOT,
                            stdout=stdout, stderr=subprocess.STDOUT)  # type: ignore[arg-type]
    wait_port(port, ready_path)
    return proc


def raise_fd_limit() -> int:
    # Thousands of open streams need two descriptors each in a proxy; children inherit this.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return want


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The pids of a process's children (the gateway's workers), from /proc."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def family_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its children."""
    return cpu_s(pid) + sum(cpu_s(c) for c in children(pid))


def measure(name: str, base: str, pid: int) -> dict[str, float | str]:
    path, body, stream_body = "/v1/chat/completions", load.BODY, load.STREAM_BODY
    if name in REQUESTS:
        path, doc = REQUESTS[name]
        body, stream_body = json.dumps(doc), json.dumps({**doc, "stream": True})
    url = base + path
    load.throughput_and_latency(url, 8, 1, body)  # warm-up: connections, caches
    c0 = cpu_s(pid)
    tput = load.throughput_and_latency(url, 32, SECONDS, body)
    cpu_us = (cpu_s(pid) - c0) / max(tput["requests"], 1) * 1e6
    single = load.throughput_and_latency(url, 1, SECONDS, body)
    ttfc = load.time_to_first_chunk(url, TTFC_N, stream_body)
    return {"name": name, "rps_32": tput["rps"], "cpu_us": cpu_us, "p50_ms": single["p50_ms"],
            "p99_ms": single["p99_ms"], "errors": tput["errors"] + single["errors"], **ttfc}


def median_row(samples: list[dict[str, float | str]]) -> dict[str, float | str]:
    row: dict[str, float | str] = {"name": samples[0]["name"]}
    for key in samples[0]:
        if key != "name":
            row[key] = statistics.median(float(s[key]) for s in samples)
    row["errors"] = sum(float(s["errors"]) for s in samples)
    return row


def table(rows: list[dict[str, float | str]]) -> str:
    base = next(r for r in rows if r["name"] == MINIMAL)
    lines = [
        "| target | throughput vs minimal | CPU/request vs minimal | Δ p50 @1 conn | Δ stream TTFC "
        "| req/s @32 conns | CPU µs/request | p50 @1 conn | p99 @1 conn | stream TTFC p50 | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {float(r['rps_32']) / float(base['rps_32']):.2f}x | "
            f"{float(r['cpu_us']) / float(base['cpu_us']):.2f}x | "
            f"{float(r['p50_ms']) - float(base['p50_ms']):+.3f} ms | "
            f"{float(r['ttfc_p50_ms']) - float(base['ttfc_p50_ms']):+.3f} ms | "
            f"{r['rps_32']:.0f} | {r['cpu_us']:.0f} | {r['p50_ms']:.3f} ms | {r['p99_ms']:.3f} ms | "
            f"{r['ttfc_p50_ms']:.3f} ms | {r['rss_mb']:.0f} MB |"
        )
    return "\n".join(lines)


def in_flight(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("llm_gateway_in_flight_requests "):
            return float(line.split()[1])
    return float("nan")


Fresh = Callable[[str], tuple[subprocess.Popen[bytes], int]]


def streams_table(fresh: Fresh) -> str:
    from bench import streams

    count = max(1, int(STREAM_S / TOKEN_INTERVAL_S))
    rows = []
    for n in STREAMS:
        for name in (MINIMAL, GATEWAY):
            # A fresh, warmed-up process per measurement: what an earlier run left in the
            # allocator or the upstream pool would flatter or blur the per-stream figures.
            proc, port = fresh(name)
            try:
                load.throughput_and_latency(f"http://127.0.0.1:{port}/v1/chat/completions", 8, 1)
                pid = proc.pid
                before_kb, c0 = status_kb(pid, "VmRSS"), cpu_s(pid)
                stats, during = streams.run(port, n, count, TOKEN_INTERVAL_S,
                                            lambda pid=pid: {"rss_kb": status_kb(pid, "VmRSS"),
                                                             "fds": len(os.listdir(f"/proc/{pid}/fd"))})
                cpu = cpu_s(pid) - c0
                time.sleep(0.5)
                gauge = in_flight(port) if name == GATEWAY else float("nan")
            finally:
                proc.terminate()
                proc.wait(10)
            rows.append((n, name, stats, during, before_kb, cpu, gauge))
    lines = [
        f"Concurrent streams: each trickles one token every {TOKEN_INTERVAL_S * 1000:.0f} ms for "
        f"{count * TOKEN_INTERVAL_S:.0f} s ({count + 2} chunks + [DONE]), all held open at once",
        "",
        "| streams | target | RSS per open stream | RSS vs minimal | CPU per 1,000 relayed chunks | CPU vs minimal "
        "| complete / opened | dropped | in-flight gauge after | open fds during | wall |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(n, name): (stats, during, before_kb, cpu) for n, name, stats, during, before_kb, cpu, _ in rows}
    for n, name, stats, during, before_kb, cpu, gauge in rows:
        per_stream_kb = (during["rss_kb"] - before_kb) / max(stats.opened, 1)
        cpu_k = cpu / max(stats.events, 1) * 1000 * 1000  # ms per 1,000 chunks
        m_stats, m_during, m_before, m_cpu = by[(n, MINIMAL)]
        m_kb = (m_during["rss_kb"] - m_before) / max(m_stats.opened, 1)
        m_cpu_k = m_cpu / max(m_stats.events, 1) * 1e6
        lines.append(
            f"| {n} | {name} | {per_stream_kb:.1f} KiB | {per_stream_kb / m_kb if m_kb > 0 else float('nan'):.2f}x | "
            f"{cpu_k:.1f} ms | {cpu_k / m_cpu_k if m_cpu_k else float('nan'):.2f}x | "
            f"{stats.complete} / {n} | {n - stats.complete} | {'-' if gauge != gauge else f'{gauge:.0f}'} | "
            f"{during['fds']:.0f} | {during['wall_s']:.0f} s |"
        )
    return "\n".join(lines)


def soak_table(pid: int, port: int) -> str:
    from bench import soak

    r = soak.run(f"http://127.0.0.1:{port}/v1/chat/completions", pid, SOAK, max_s=900)
    if "skipped" in r:
        return f"Soak: skipped ({r['skipped']})"
    flat = abs(float(r["rss_growth_pct"])) <= 10
    return "\n".join([
        f"Soak: {SOAK:,} mixed requests through the gateway (¼ each: success, stream, 429 then success "
        "after the gateway's retry, 400 for a bad body), wrk -c32; RSS and open fds sampled every 0.25 s, "
        "the first fifth of the run counted as warm-up. Idle after: the upstream keep-alive pool "
        "(one connection per client connection, 30 s keep-alive) is still open",
        "",
        "| requests | 200 / 400 / other | RSS after warm-up | RSS max | RSS at end | growth after warm-up "
        "| fds after warm-up / at end / max | fds idle before / after | wall |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {r['requests']:,} | {r['ok_200']:,} / {r['bad_400']:,} / {r['other']:,} | "
        f"{r['rss_after_warmup_mb']:.1f} MB | {r['rss_max_mb']:.1f} MB | {r['rss_end_mb']:.1f} MB | "
        f"{float(r['rss_growth_pct']):+.1f} % ({'flat' if flat else 'NOT flat'}) | "
        f"{r['fds_after_warmup']} / {r['fds_end']} / {r['fds_max_during']} | {r['fds_before']} / {r['fds_after']} | "
        f"{r['wall_s']:.0f} s |",
        *([f"\nsocket errors: {r['socket_errors']}"] if r["socket_errors"] != "none" else []),
    ])


def have_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


LOOPS = [x for x in os.environ.get("BENCH_LOOPS", "asyncio,uvloop").split(",") if x == "asyncio" or
         (x == "uvloop" and have_uvloop())]


def main() -> None:
    fd_limit = raise_fd_limit()
    report = ""
    with tempfile.TemporaryDirectory() as tmp:
        for loop in LOOPS:
            # The first loop's processes also serve the growth measurements (streams, soak).
            report += run_loop(loop, Path(tmp), fd_limit, growth=loop == LOOPS[0])
    from bench import compress_bench

    report += "\n" + compress_bench.run(50 if QUICK else 200)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "latest.md").write_text(report)


def run_loop(loop: str, tmp: Path, fd_limit: int, growth: bool) -> str:
    up_port, min_port, gw_port = free_port(), free_port(), free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    config = tmp / f"gateway-{loop}.yaml"
    # Both proxies on the row's loop: the gateway's own choice (server.event_loop) set to it.
    config.write_text(f"server: {{port: {gw_port}, event_loop: {loop}, log_level: info}}\n"
                      f"upstreams: [{{name: bench, base_url: '{upstream}', max_connections: {POOL}}}]\n"
                      # The soak sends 25 % 429s: let every one be retried (the default budget is 20 %).
                      "retry: {budget: {percent_can_retry: 50}}\n")
    # Both proxies run on the same event loop; the upstream always on asyncio's own.
    on = ["-m", "bench.on_uvloop"] if loop == "uvloop" else ["-m"]
    variants: dict[str, tuple[int, Path]] = {}
    # The same gateway on aiohttp's client (server.upstream_client: aiohttp): what the h1 client saves.
    port = free_port()
    cfg = tmp / f"gateway-{loop}-aiohttp-client.yaml"
    cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},")
                   .replace("log_level: info}", "log_level: info, upstream_client: aiohttp}"))
    variants[ON_AIOHTTP] = (port, cfg)
    redis: subprocess.Popen[bytes] | None = None
    if shutil.which("redis-server"):
        redis_port, port = free_port(), free_port()
        redis = subprocess.Popen([*pinned(0), "redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                                 stdout=subprocess.DEVNULL)  # fmt: skip
        cfg = tmp / f"gateway-{loop}-redis.yaml"
        cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},")
                       + f"state: {{backend: redis, url: 'redis://127.0.0.1:{redis_port}/0'}}\n")
        variants[ON_REDIS] = (port, cfg)
        port = free_port()
        cfg = tmp / f"gateway-{loop}-keyed-redis.yaml"
        cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},") + KEY_YAML
                       + f"state: {{backend: redis, url: 'redis://127.0.0.1:{redis_port}/1'}}\n")
        variants[KEYED_REDIS] = (port, cfg)
    port = free_port()
    cfg = tmp / f"gateway-{loop}-keyed.yaml"
    cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},") + KEY_YAML)
    variants[KEYED] = (port, cfg)
    for name, strategy in ((POOL_WEIGHTED, "weighted"), (POOL_HEADROOM, "headroom")):
        port = free_port()
        cfg = tmp / f"gateway-{loop}-pool-{strategy}.yaml"
        members = "".join(f"  - {{name: key-{k}, base_url: '{upstream}', api_key: bench-rl-{k}, "
                          f"max_connections: {POOL}}}\n" for k in "abc")  # fmt: skip
        cfg.write_text(f"server: {{port: {port}, event_loop: {loop}, log_level: info}}\nupstreams:\n{members}"
                       "retry: {budget: {percent_can_retry: 50}}\n"
                       f"pools: [{{name: bench, deployments: [key-a, key-b, key-c], strategy: {strategy}}}]\n")
        variants[name] = (port, cfg)
    port = free_port()
    cfg = tmp / f"gateway-{loop}-translated.yaml"
    cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},")
                   .replace("max_connections:", "apis: [messages], max_connections:"))
    variants[TRANSLATED] = (port, cfg)
    for name in (FROM_MESSAGES, FROM_RESPONSES):
        port = free_port()
        cfg = tmp / f"gateway-{loop}-{port}.yaml"
        cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},")
                       .replace("max_connections:", "apis: [chat], max_connections:"))
        variants[name] = (port, cfg)
    # The gateway's access log goes to a real file, as it would to a log shipper's pipe.
    with open(tmp / f"gateway-{loop}.log", "wb") as gw_log:
        procs = {
            DIRECT: spawn(["-m", "bench.upstream", str(up_port)], up_port, core=0),
            MINIMAL: spawn([*on, "bench.minimal_proxy", str(min_port), upstream, str(POOL)], min_port),
            GATEWAY: spawn([*on, "gateway", "--config", str(config)], gw_port, "/healthz", stdout=gw_log),
        }
        ports = {DIRECT: up_port, MINIMAL: min_port, GATEWAY: gw_port}
        for name, (port, cfg) in variants.items():
            procs[name] = spawn([*on, "gateway", "--config", str(cfg)], port, "/healthz", stdout=gw_log)
            ports[name] = port
        try:
            # Targets take turns, round after round: a noisy stretch of the shared host then
            # hits all three alike, and the medians compare like with like.
            samples: dict[str, list[dict[str, float | str]]] = {name: [] for name in ports}
            for _ in range(ROUNDS):
                for name, port in ports.items():
                    samples[name].append(measure(name, f"http://127.0.0.1:{port}", procs[name].pid))
            rows = []
            for name in ports:
                row = median_row(samples[name])
                row["rss_mb"] = status_kb(procs[name].pid, "VmHWM") / 1024
                rows.append(row)
            header = (
                f"Event loop: {loop} (both proxies). {os.cpu_count()} cores, Python {platform.python_version()}, "
                f"{'quick mode, ' if QUICK else ''}load: {'wrk -t1' if load.have_wrk() else 'python aiohttp client'}, "
                f"medians of {ROUNDS} interleaved rounds of {SECONDS}s; "
                f"{'proxies pinned to core 1, upstream and load to core 0' if pinned(0) else 'unpinned'}; "
                "a shared machine: compare ratios, not absolute numbers"
            )
            report = f"{header}\n\n{table(rows)}\n"
            if any(float(r["errors"]) for r in rows):
                report += "\nWARNING: some requests failed: " + ", ".join(
                    f"{r['name']}={r['errors']:.0f}" for r in rows) + "\n"
            print(report, flush=True)
            if growth:
                def fresh(name: str) -> tuple[subprocess.Popen[bytes], int]:
                    port = free_port()
                    if name == MINIMAL:
                        return spawn([*on, "bench.minimal_proxy", str(port), upstream, str(POOL)], port), port
                    cfg = tmp / f"gateway-{loop}-{port}.yaml"
                    cfg.write_text(config.read_text().replace(f"port: {gw_port},", f"port: {port},"))
                    return spawn([*on, "gateway", "--config", str(cfg)], port, "/healthz", stdout=gw_log), port

                part = streams_table(fresh) + f"\n\n(open-file limit raised to {fd_limit})\n"
                print(part, flush=True)
                report += "\n" + part
                proc, port = fresh(GATEWAY)
                try:
                    part = soak_table(proc.pid, port) + "\n"
                finally:
                    proc.terminate()
                    proc.wait(10)
                print(part, flush=True)
                report += "\n" + part
        finally:
            for p in procs.values():
                p.terminate()
                p.wait(10)
            if redis is not None:
                redis.terminate()
                redis.wait(10)
    return report + "\n"


if __name__ == "__main__":
    main()
