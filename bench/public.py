"""`python -m bench.public`: the published gateway benchmark's method ("On the Bench",
GetBusbar/benchmarking, 2026-07-25, as issue #38 quotes it), run here side by side with the
minimal aiohttp proxy (`bench/minimal_proxy.py`) and the upstream directly.

The method: the gateway pinned to N cores (``--cores``; ``server.workers: N``), the mock and
the load generator (wrk) on other cores;

- added p50 and p99 at concurrency 1: each target's percentile minus the direct-to-mock
  one, taken in the same round (rounds interleave the targets; the median of the per-round
  differences is reported);
- sustained req/s against a 20 ms mock (``x-bench-delay-ms: 20``): the concurrency steps
  up (16, 32, 64, ...) until p99 reaches 1 s or errors (non-2xx and socket errors) reach
  0.1 %; the best step within the rule counts. Unless ``--to-the-break``, stepping also stops
  once two steps in a row add under 3 % (past saturation more clients only queue);
- added time to first token on streams (the Python client, paired with the upstream
  directly on the client's own API);
- the same with a translated path: a Messages client on a chat-only upstream (its
  baseline: the mock's own ``/v1/messages``);
- with ``--scaling``: the gateway's req/s with 1, 2, 4, ... workers on as many cores, and
  each worker's share of its core (``--scaling-only``: that alone);
- memory: a fresh process of each proxy, RSS idle and under 1,500 concurrent 150 KB
  requests held by the mock for a few seconds ((RSS under load - idle RSS) / 1,500 per
  in-flight request), and per idle open stream (1,500 streams that send a token every few
  seconds).

Throughput is reported per pinned core (the minimal proxy is one process on one core). On a
machine with fewer than 8 cores it still runs, with one core each (the load and the mock
sharing one) and says that the figures are not comparable with the published table: read
the ratios against the minimal proxy there.

    python -m bench.public --quick          a few minutes
    python -m bench.public --cores 4        the published layout (needs ~8+ cores)

Writes ``bench/results/public-latest.md`` and ``bench/results/public-<UTC time>.json``; the
run ends with issue #38's goals judged against its figures. On a many-core machine without
network, ``scripts/bench-kit.sh`` packs what it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench import load, streams
from bench.__main__ import RESULTS, children, family_cpu_s, free_port, raise_fd_limit, status_kb, wait_port

MINIMAL, GATEWAY, TRANSLATED = "minimal aiohttp proxy", "llm-gateway", "llm-gateway, Messages client → chat upstream"
POLLING = "llm-gateway, busy polling"  # server.busy_poll_us (--busy-poll-us; 0 leaves it out)
DIRECT, DIRECT_MESSAGES = "mock directly (chat)", "mock directly (Messages)"
CHAT, MESSAGES = "/v1/chat/completions", "/v1/messages"
MESSAGES_BODY = '{"model":"gpt-4o-mini","max_tokens":256,"messages":[{"role":"user","content":"Hello, how are you?"}]}'
MESSAGES_STREAM_BODY = MESSAGES_BODY[:-1] + ',"stream":true}'
# Each proxied target, the mock path it is compared with, and what its client sends.
PATHS = {MINIMAL: (DIRECT, CHAT, load.BODY, load.STREAM_BODY),
         GATEWAY: (DIRECT, CHAT, load.BODY, load.STREAM_BODY),
         TRANSLATED: (DIRECT_MESSAGES, MESSAGES, MESSAGES_BODY, MESSAGES_STREAM_BODY),
         POLLING: (DIRECT, CHAT, load.BODY, load.STREAM_BODY)}
BASELINES = {DIRECT: (CHAT, load.BODY, load.STREAM_BODY), DIRECT_MESSAGES: (MESSAGES, MESSAGES_BODY, MESSAGES_STREAM_BODY)}
POOL = 12_000  # upstream connections: enough for every held request and stream
MOCK_MS = 20
P99_LIMIT_MS, ERROR_LIMIT = 1000.0, 0.001

# The published figures (added p99 at c=1, gateway on 4 cores), as issue #38 quotes them.
PUBLISHED = [("LiteLLM's Rust core", 107), ("Busbar", 116), ("agentgateway", 186), ("GoModel", 282),
             ("APISIX", 436), ("Helicone", 444), ("Bifrost", 939), ("Kong", 1277), ("Portkey", 3262),
             ("Python LiteLLM", 7996)]


@dataclass(frozen=True)
class Layout:
    load: str  # taskset lists
    mock: list[str]  # one mock process per entry
    proxy: str
    proxy_cores: int
    comparable: bool
    note: str


def layout(ncpu: int, cores: int) -> Layout:
    """Which cores run what: the proxies on the last ``cores`` (they take turns, so they
    share them), the load generator and the mock split what is left. Below 8 cores,
    one core each, the load and the mock together when need be."""
    if ncpu >= cores + 4 and ncpu >= 8:
        rest = ncpu - cores
        n_load = min(4, rest // 2)
        return Layout(load=f"0-{n_load - 1}", mock=[str(c) for c in range(n_load, rest)],
                      proxy=f"{rest}-{ncpu - 1}", proxy_cores=cores, comparable=True,
                      note=f"{ncpu} cores: load on {n_load}, the mock on {rest - n_load}, the proxies on {cores}")
    if ncpu >= 3:
        return Layout(load="0", mock=["1"], proxy="2", proxy_cores=1, comparable=False,
                      note=f"{ncpu} cores: one each (load, mock, proxy); NOT comparable with the published table")
    if ncpu == 2:
        return Layout(load="0", mock=["0"], proxy="1", proxy_cores=1, comparable=False,
                      note="2 cores: the load and the mock share core 0, the proxy on core 1; "
                           "NOT comparable with the published table: read the ratios")
    return Layout(load="", mock=[""], proxy="", proxy_cores=1, comparable=False,
                  note="1 core: nothing pinned; NOT comparable with the published table")


def pin(cores: str) -> list[str]:
    return ["taskset", "-c", cores] if cores else []


def spawn(cores: str, args: list[str], port: int, ready: str, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([*pin(cores), sys.executable, *args], cwd=Path(__file__).resolve().parents[1],
                            stdout=log.open("ab"), stderr=subprocess.STDOUT)
    wait_port(port, ready)
    return proc


def family_rss_kb(pid: int) -> int:
    return status_kb(pid, "VmRSS") + sum(status_kb(c, "VmRSS") for c in children(pid))


@dataclass
class Run:
    """What the run needs to reach each target."""
    args: argparse.Namespace
    lay: Layout
    tmp: Path
    upstream: str
    procs: dict[str, subprocess.Popen[bytes]]
    urls: dict[str, str]  # target -> base URL


def _on(loop: str) -> list[str]:
    return ["-m", "bench.on_uvloop"] if loop == "uvloop" else ["-m"]


def start_proxy(run: Run, name: str, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = run.tmp / f"{name.split(',')[0].replace(' ', '-')}.log"
    if name == MINIMAL:
        # One process: pinned to the first of the proxies' cores.
        proc = spawn(run.lay.proxy.split("-")[0], [*_on(run.args.loop), "bench.minimal_proxy", str(port),
                                                   run.upstream, str(POOL)], port, "/", log)
        return proc, f"http://127.0.0.1:{port}"
    apis = "apis: [chat], " if name == TRANSLATED else ""
    polls = f", busy_poll_us: {run.args.busy_poll_us}" if name == POLLING else ""
    cfg = run.tmp / f"gateway-{port}.yaml"
    cfg.write_text(f"server: {{host: 127.0.0.1, port: {port}, workers: {workers}, event_loop: {run.args.loop}, "
                   f"log_level: info{polls}}}\n"
                   f"upstreams: [{{name: bench, base_url: '{run.upstream}', {apis}max_connections: {POOL}}}]\n")
    # The access log goes to a real file, as it would to a log shipper's pipe.
    proc = spawn(run.lay.proxy, ["-m", "gateway", "--config", str(cfg)], port, "/healthz", log)
    if workers > 1:
        end = time.monotonic() + 30
        while len(children(proc.pid)) < workers and time.monotonic() < end:
            time.sleep(0.2)
        time.sleep(1.0)
    return proc, f"http://127.0.0.1:{port}"


def _wrk(run: Run, url: str, conns: int, secs: int, body: str, headers: dict[str, str] | None = None) -> dict[str, float]:
    threads = 1 if conns == 1 else max(1, len(cpu_list(run.lay.load)))
    return load.wrk(url, conns, secs, body, threads=threads, cores=run.lay.load, headers=headers, timeout_s=5)


def cpu_list(cores: str) -> list[int]:
    if not cores:
        return [0]
    lo, _, hi = cores.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))


def target_request(name: str) -> tuple[str, str, str]:
    """(path, body, streamed body) that ``name``'s client sends."""
    if name in BASELINES:
        return BASELINES[name]
    _, path, body, stream_body = PATHS[name]
    return path, body, stream_body


def latency_at_c1(run: Run, names: list[str]) -> dict[str, list[dict[str, float]]]:
    """wrk -c1 on each target in turns, round after round (a noisy stretch hits all alike)."""
    out: dict[str, list[dict[str, float]]] = {n: [] for n in names}
    for n in names:
        path, body, _ = target_request(n)
        _wrk(run, run.urls[n] + path, 8, 1, body)  # warm-up: connections, caches
    for _ in range(run.args.rounds):
        for n in names:
            path, body, _ = target_request(n)
            pid = run.procs[n].pid
            c0 = family_cpu_s(pid)
            r = _wrk(run, run.urls[n] + path, 1, run.args.duration, body)
            r["cpu_us"] = (family_cpu_s(pid) - c0) / max(r["requests"], 1) * 1e6
            out[n].append(r)
    return out


def passes(r: dict[str, float]) -> bool:
    bad = r["errors"] + r["socket_errors"]
    return r["p99_ms"] < P99_LIMIT_MS and bad / max(r["requests"], 1) < ERROR_LIMIT


def sustained(run: Run, names: list[str]) -> dict[str, dict[str, object]]:
    """Steps the concurrency up against the 20 ms mock until the rule breaks (or the
    throughput stops growing); the best step within the rule, per target. The targets take
    turns at each step, so a noisy stretch of a shared host hits all of them alike rather
    than whichever ran then."""
    headers = {"x-bench-delay-ms": str(MOCK_MS)}
    out: dict[str, dict[str, object]] = {n: {"best": None, "steps": []} for n in names}
    flat = dict.fromkeys(names, 0)
    going = list(names)
    for n in names:
        path, body, _ = target_request(n)
        _wrk(run, run.urls[n] + path, 16, 1, body, headers)
    conns = 16
    while going and conns <= run.args.max_conns:
        for n in list(going):
            path, body, _ = target_request(n)
            pid = run.procs[n].pid
            c0 = family_cpu_s(pid)
            r = _wrk(run, run.urls[n] + path, conns, run.args.duration, body, headers)
            r["cpu_us"] = (family_cpu_s(pid) - c0) / max(r["requests"], 1) * 1e6
            r["conns"] = conns
            r["ok"] = float(passes(r))
            steps: list[dict[str, float]] = out[n]["steps"]  # type: ignore[assignment]
            steps.append(r)
            best: dict[str, float] | None = out[n]["best"]  # type: ignore[assignment]
            if not r["ok"]:
                going.remove(n)
                continue
            flat[n] = flat[n] + 1 if best is not None and r["rps"] < best["rps"] * 1.03 else 0
            if best is None or r["rps"] > best["rps"]:
                out[n]["best"] = r
            if flat[n] >= 2 and not run.args.to_the_break:
                going.remove(n)
        conns *= 2
    return out


def ttft(run: Run, names: list[str]) -> dict[str, list[float]]:
    """Median time to the first streamed chunk, per target, in interleaved rounds."""
    out: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(run.args.rounds):
        for n in names:
            path, _, stream_body = target_request(n)
            out[n].append(load.time_to_first_chunk(run.urls[n] + path, run.args.ttft_n, stream_body)["ttfc_p50_ms"])
    return out


def scaling(run: Run) -> dict[int, dict[str, float]]:
    """The gateway's req/s with 1, 2, 4, ... workers, each on as many of the proxies' cores,
    at c=256 against the mock without delay (its ceiling, not the 20 ms rule): the
    workers' scaling, read against N x the one-worker figure."""
    path, body, _ = target_request(GATEWAY)
    first = cpu_list(run.lay.proxy)[0]
    out: dict[int, dict[str, float]] = {}
    workers = 1
    while workers <= run.lay.proxy_cores:
        lay = Layout(run.lay.load, run.lay.mock, f"{first}-{first + workers - 1}", workers, run.lay.comparable, run.lay.note)
        sub = Run(run.args, lay, run.tmp, run.upstream, run.procs, run.urls)
        proc, base = start_proxy(sub, GATEWAY, workers)
        try:
            _wrk(run, base + path, 64, 1, body)
            kids = children(proc.pid) if workers > 1 else [proc.pid]
            c0 = family_cpu_s(proc.pid)
            k0 = [family_cpu_s(k) for k in kids]
            t0 = time.monotonic()
            r = _wrk(run, base + path, 256, run.args.duration, body)
            busy = [(family_cpu_s(k) - b) / (time.monotonic() - t0) for k, b in zip(kids, k0, strict=True)]
            r["cpu_us"] = (family_cpu_s(proc.pid) - c0) / max(r["requests"], 1) * 1e6
            # Each worker's share of a core: SO_REUSEPORT spreads wrk's fixed 256 connections by
            # hash, so one worker can be full while another idles.
            r["busiest"], r["idlest"] = max(busy), min(busy)
            out[workers] = r
        finally:
            proc.terminate()
            proc.wait(10)
        workers *= 2
    return out


def scaling_lines(sc: dict[int, dict[str, float]]) -> list[str]:
    one = sc[1]["rps"]
    lines = ["The gateway's workers, each on its own core, c=256 against the mock without delay:", "",
             "| workers | req/s | vs N x one worker | CPU/request | busiest / idlest worker (share of a core) |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for w, r in sc.items():
        lines.append(f"| {w} | {r['rps']:.0f} | {r['rps'] / (one * w):.2f} | {r['cpu_us']:.0f} µs | "
                     f"{r['busiest']:.0%} / {r['idlest']:.0%} |")
    return lines


# -- memory ---------------------------------------------------------------------------------

def big_chat_body(kb: int) -> str:
    """A chat request of about ``kb`` KB: a long conversation, as an agent's later turns are."""
    turn = "The quick brown fox jumps over the lazy dog while the build runs again. " * 50  # ~3.6 KB
    messages: list[dict[str, str]] = [{"role": "system", "content": "You are a careful coding agent."}]
    while len(json.dumps(messages)) < kb * 1000:
        messages.append({"role": "user" if len(messages) % 2 else "assistant", "content": turn})
    return json.dumps({"model": "gpt-4o-mini", "messages": messages}, separators=(",", ":"))


class HeldRequest(asyncio.Protocol):
    """One request on its own connection (``Connection: close``): done when the server
    closes it; a 200 status line counts as answered."""

    def __init__(self, done: asyncio.Future[bool]) -> None:
        self.done, self.head = done, b""

    def data_received(self, data: bytes) -> None:
        if len(self.head) < 12:
            self.head += data[:12]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(self.head.startswith(b"HTTP/1.1 200"))


async def hold_requests(port: int, n: int, body: bytes, hold_ms: int, sample: object) -> dict[str, float]:
    """Sends ``n`` requests at once (ramped, so that the listen backlog holds), each held by
    the mock for ``hold_ms``; ``sample()`` (the proxy's RSS) is read every 50 ms meanwhile,
    its peak kept."""
    loop = asyncio.get_running_loop()
    request = (f"POST {CHAT} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
               f"Authorization: Bearer {load.KEY}\r\nConnection: close\r\nx-bench-delay-ms: {hold_ms}\r\n"
               f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    waits: list[asyncio.Future[bool]] = []
    peak = 0
    stop = asyncio.Event()

    async def watch() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, sample())  # type: ignore[operator]
            await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    t0 = time.monotonic()
    for i in range(n):
        done: asyncio.Future[bool] = loop.create_future()
        transport, _ = await loop.create_connection(lambda d=done: HeldRequest(d), "127.0.0.1", port)
        transport.write(request)
        waits.append(done)
        if i % 250 == 249:
            await asyncio.sleep(0.05)
    sent_s = time.monotonic() - t0
    answered = await asyncio.gather(*waits)
    stop.set()
    await watcher
    return {"peak_rss_kb": float(peak), "ok": float(sum(answered)), "sent_s": sent_s}


def memory(run: Run, name: str) -> dict[str, float]:
    """A fresh process: idle RSS after a warm-up, peak RSS under ``--inflight`` held 150 KB
    requests, then (in another fresh process) RSS per idle open stream."""
    a = run.args
    body = big_chat_body(a.body_kb).encode()
    out: dict[str, float] = {"body_bytes": float(len(body))}
    proc, base = start_proxy(run, name, 1)
    try:
        port = int(base.rsplit(":", 1)[1])
        load.wrk(base + CHAT, 8, 1, body.decode(), cores=run.lay.load)  # warm-up: the big body's path too
        time.sleep(0.5)
        out["idle_rss_kb"] = float(status_kb(proc.pid, "VmRSS"))
        # Held long enough that every request is in flight at once, after the ramp.
        hold_ms = int(1500 + a.inflight * 2)
        r = asyncio.run(hold_requests(port, a.inflight, body, hold_ms, lambda: status_kb(proc.pid, "VmRSS")))
        out.update(r)
        out["per_inflight_kib"] = (r["peak_rss_kb"] - out["idle_rss_kb"]) / a.inflight
    finally:
        proc.terminate()
        proc.wait(10)
    proc, base = start_proxy(run, name, 1)
    try:
        port = int(base.rsplit(":", 1)[1])
        load.wrk(base + CHAT, 8, 1, cores=run.lay.load)
        time.sleep(0.5)
        before = status_kb(proc.pid, "VmRSS")
        # Idle streams: a token every 2 s, open for 8 s, RSS sampled once all are open.
        stats, during = streams.run(port, a.inflight, 4, 2.0, lambda: {"rss_kb": status_kb(proc.pid, "VmRSS")})
        out["stream_idle_rss_kb"] = float(before)
        out["stream_rss_kb"] = float(during["rss_kb"])
        out["streams_complete"] = float(stats.complete)
        out["per_stream_kib"] = (during["rss_kb"] - before) / max(stats.opened, 1)
    finally:
        proc.terminate()
        proc.wait(10)
    return out


# -- report ---------------------------------------------------------------------------------

def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def targets(a: argparse.Namespace) -> list[str]:
    """The proxied targets of this run (busy polling only when asked for a window)."""
    return [n for n in PATHS if n != POLLING or a.busy_poll_us > 0]


def summarise(run: Run, c1: dict[str, list[dict[str, float]]], thr: dict[str, dict[str, object]],
              first: dict[str, list[float]], mem: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    for name in targets(run.args):
        base = PATHS[name][0]
        pairs = list(zip(c1[name], c1[base], strict=True))
        best = thr[name]["best"] or {}
        cores = 1 if name == MINIMAL else run.lay.proxy_cores
        rows[name] = {
            "added_p50_us": med([(t["p50_ms"] - d["p50_ms"]) * 1000 for t, d in pairs]),
            "added_p99_us": med([(t["p99_ms"] - d["p99_ms"]) * 1000 for t, d in pairs]),
            "p50_us": med([t["p50_ms"] * 1000 for t, _ in pairs]),
            "p99_us": med([t["p99_ms"] * 1000 for t, _ in pairs]),
            "cpu_us_c1": med([t["cpu_us"] for t, _ in pairs]),
            "added_ttft_us": med([(t - d) * 1000 for t, d in zip(first[name], first[base], strict=True)]),
            "sustained_rps": float(best.get("rps", float("nan"))),  # type: ignore[union-attr]
            "sustained_conns": float(best.get("conns", float("nan"))),  # type: ignore[union-attr]
            "sustained_p99_ms": float(best.get("p99_ms", float("nan"))),  # type: ignore[union-attr]
            "cpu_us_sustained": float(best.get("cpu_us", float("nan"))),  # type: ignore[union-attr]
            "cores": float(cores),
            **{k: v for k, v in mem.get(name, {}).items()},
        }
        rows[name]["rps_per_core"] = rows[name]["sustained_rps"] / cores
    for base in BASELINES:
        rows[base] = {"p50_us": med([d["p50_ms"] * 1000 for d in c1[base]]),
                      "p99_us": med([d["p99_ms"] * 1000 for d in c1[base]]),
                      "sustained_rps": float((thr.get(base, {}).get("best") or {}).get("rps", float("nan")))}  # type: ignore[union-attr]
    return rows


def markdown(run: Run, rows: dict[str, dict[str, float]]) -> str:
    a, lay = run.args, run.lay
    m = rows[MINIMAL]
    head = (f"{os.cpu_count()} cores, Python {platform.python_version()}, event loop {a.loop}, "
            f"wrk; {lay.note}. c=1: medians of {a.rounds} interleaved rounds of {a.duration}s; sustained: "
            f"{MOCK_MS} ms mock, the targets in turns at each step, concurrency doubled from 16 while p99 < 1 s and errors < 0.1 %"
            f"{'' if a.to_the_break else ' (or until two steps add < 3 %)'}, {a.duration}s a step."
            + (f" Busy polling: the gateway with server.busy_poll_us: {a.busy_poll_us} (off by default)."
               if a.busy_poll_us else ""))
    lines = [head, ""]
    if not lay.comparable:
        lines += ["**Not comparable with the published table** (too few cores to partition): "
                  "absolute figures only from a quiet many-core run; here, read the ratios.", ""]
    lines += ["| target | added p50 @c=1 | added p99 @c=1 | added TTFT p50 | CPU/request @c=1 | sustained req/s "
              "(at c) | cores | req/s per core | per core vs minimal |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in targets(a):
        r = rows[name]
        lines.append(f"| {name} | {r['added_p50_us']:+.0f} µs | {r['added_p99_us']:+.0f} µs | {r['added_ttft_us']:+.0f} µs | "
                     f"{r['cpu_us_c1']:.0f} µs | {r['sustained_rps']:.0f} ({r['sustained_conns']:.0f}) | {r['cores']:.0f} | "
                     f"{r['rps_per_core']:.0f} | {r['rps_per_core'] / m['rps_per_core']:.2f}x |")
    for base in BASELINES:
        lines.append(f"| {base} (p50 / p99 @c=1) | {rows[base]['p50_us']:.0f} µs | {rows[base]['p99_us']:.0f} µs | | | | | | |")
    if "per_inflight_kib" in rows[GATEWAY]:
        lines += ["", *memory_lines(a, rows)]
    lines += ["", "The published table (gateway on 4 cores, quiet host), added p99 at c=1, next to ours:", "",
              "| gateway | added p99 @c=1 |", "| --- | ---: |"]
    ours = [(f"**{n} (this run{'' if lay.comparable else ', not comparable'})**", rows[n]["added_p99_us"])
            for n in (GATEWAY, TRANSLATED, MINIMAL, POLLING) if n in rows]
    for label, us in sorted([*PUBLISHED, *ours], key=lambda x: x[1]):
        lines.append(f"| {label} | {us:,.0f} µs |")
    return "\n".join(lines) + "\n"


def goal_lines(rows: dict[str, dict[str, float]], sc: dict[int, dict[str, float]] | None = None) -> list[str]:
    """Issue #38's goals against this run's figures."""
    g, t, m = rows[GATEWAY], rows[TRANSLATED], rows[MINIMAL]
    p99 = f"{g['added_p99_us']:+.0f} µs"
    met = "yes" if g["added_p99_us"] <= 300 else "no"
    if POLLING in rows:
        polled = rows[POLLING]["added_p99_us"]
        p99 += f" (busy polling {polled:+.0f} µs)"
        if met == "no" and polled <= 300:
            met = "with busy polling"
    checks: list[tuple[str, str, bool | str]] = [
             ("added p99 at c=1 ≤ 300 µs", p99, met),
              ("one process ≥ 1.3× the minimal proxy (req/s per core)", f"{g['rps_per_core'] / m['rps_per_core']:.2f}×",
               g["rps_per_core"] >= 1.3 * m["rps_per_core"]),
              ("translated ≥ 0.9× native (sustained req/s)", f"{t['sustained_rps'] / g['sustained_rps']:.2f}× "
               f"(CPU/request {t['cpu_us_sustained'] / g['cpu_us_sustained']:.2f}× at its best step)",
               t["sustained_rps"] >= 0.9 * g["sustained_rps"])]
    if "per_inflight_kib" in g:
        checks.append(("memory per in-flight request ≤ 0.2 MiB", f"{g['per_inflight_kib'] / 1024:.3f} MiB",
                       g["per_inflight_kib"] / 1024 <= 0.2))
    if sc:
        top = max(sc)
        ratio = sc[top]["rps"] / (sc[1]["rps"] * top)
        checks.append((f"workers scale ≥ 0.9 × N (N = {top})", f"{ratio:.2f}", ratio >= 0.9))
    return ["| goal (issue #38) | this run | met |", "| --- | ---: | :---: |",
            *(f"| {goal} | {value} | {ok if isinstance(ok, str) else 'yes' if ok else 'no'} |" for goal, value, ok in checks)]


def memory_lines(a: argparse.Namespace, rows: dict[str, dict[str, float]]) -> list[str]:
    m = rows[MINIMAL]
    lines = [f"Memory, one process each: {a.inflight:,} concurrent requests of "
             f"{rows[GATEWAY].get('body_bytes', 0) / 1000:.0f} KB held in flight by the mock; {a.inflight:,} open streams "
             "idle between tokens (one every 2 s)", "",
             "| target | idle RSS | peak RSS, requests in flight | answered | per in-flight request | "
             "per idle open stream | vs minimal (request / stream) |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in (MINIMAL, GATEWAY):
        r = rows[name]
        if "per_inflight_kib" not in r:
            continue
        lines.append(f"| {name} | {r['idle_rss_kb'] / 1024:.1f} MiB | {r['peak_rss_kb'] / 1024:.1f} MiB | "
                     f"{r['ok']:.0f} / {a.inflight} | {r['per_inflight_kib'] / 1024:.3f} MiB | {r['per_stream_kib']:.1f} KiB | "
                     f"{r['per_inflight_kib'] / m['per_inflight_kib']:.2f}x / {r['per_stream_kib'] / m['per_stream_kib']:.2f}x |")
    return lines


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.public", description=__doc__.split("\n\n")[0])
    p.add_argument("--cores", type=int, default=None, help="cores (and workers) of the gateway; default 4 where "
                   "the machine has 8 or more, else 1")
    p.add_argument("--quick", action="store_true", help="shorter runs: 2 s a step, 3 rounds, fewer streams")
    p.add_argument("--duration", type=int, default=None, help="seconds per wrk run (default 5; --quick 2)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved rounds at c=1 (default 5; --quick 3)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="both proxies' event loop")
    p.add_argument("--max-conns", type=int, default=4096)
    p.add_argument("--busy-poll-us", type=int, default=300, help="also the gateway with server.busy_poll_us at "
                   "this window (default 300; 0: not)")
    p.add_argument("--to-the-break", action="store_true", help="step until the rule breaks, past saturation")
    p.add_argument("--inflight", type=int, default=1500, help="concurrent requests (and streams) for the memory figures")
    p.add_argument("--body-kb", type=int, default=150)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--scaling", action="store_true", help="also the workers' scaling: 1, 2, 4, ... workers up to --cores")
    p.add_argument("--scaling-only", action="store_true", help="only the workers' scaling (a minute)")
    p.add_argument("--memory-only", action="store_true", help="only the memory figures (a few minutes)")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    a.duration = a.duration or (2 if a.quick else 5)
    a.rounds = a.rounds or (3 if a.quick else 5)
    a.ttft_n = 60 if a.quick else 150
    ncpu = os.cpu_count() or 1
    a.cores = a.cores or (4 if ncpu >= 8 else 1)
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if not load.have_wrk():
        sys.exit("bench.public needs wrk (Debian: apt-get install wrk)")
    raise_fd_limit()
    lay = layout(os.cpu_count() or 1, a.cores)
    if lay.load:  # this process is the Python load client (time to first token, held requests)
        os.sched_setaffinity(0, cpu_list(lay.load))
    print(lay.note, flush=True)
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        up_port = free_port()
        procs: dict[str, subprocess.Popen[bytes]] = {}
        mocks = [spawn(core, ["-m", "bench.upstream", str(up_port), "--reuse-port"], up_port, "/", tmp / "mock.log")
                 for core in lay.mock]
        run = Run(a, lay, tmp, f"http://127.0.0.1:{up_port}/v1", procs, {})
        if a.scaling_only:
            try:
                print("\n".join(scaling_lines(scaling(run))))
            finally:
                for p in mocks:
                    p.terminate()
                    p.wait(10)
            return
        if a.memory_only:
            try:
                mem = {n: memory(run, n) for n in (MINIMAL, GATEWAY)}
            finally:
                for p in mocks:
                    p.terminate()
                    p.wait(10)
            print("\n".join(memory_lines(a, mem)))
            a.out.mkdir(exist_ok=True)
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            (a.out / f"public-memory-{stamp}.json").write_text(json.dumps({"layout": asdict(lay), "memory": mem}, indent=1))
            return
        try:
            for base in BASELINES:
                procs[base], run.urls[base] = mocks[0], f"http://127.0.0.1:{up_port}"
            for name in targets(a):
                procs[name], run.urls[name] = start_proxy(run, name, 1 if name == MINIMAL else lay.proxy_cores)
            names = [*BASELINES, *targets(a)]
            print("added latency at c=1 ...", flush=True)
            c1 = latency_at_c1(run, names)
            print("sustained req/s against a 20 ms mock ...", flush=True)
            thr = sustained(run, [DIRECT, *targets(a)])
            print("time to first token ...", flush=True)
            first = ttft(run, names)
        finally:
            for name in targets(a):
                if name in procs:
                    procs[name].terminate()
                    procs[name].wait(10)
        mem: dict[str, dict[str, float]] = {}
        sc: dict[int, dict[str, float]] = {}
        try:
            if a.scaling:
                print("workers' scaling ...", flush=True)
                sc = scaling(run)
            if not a.no_memory:
                print("memory ...", flush=True)
                try:
                    mem = {n: memory(run, n) for n in (MINIMAL, GATEWAY)}
                except OSError as e:  # too few descriptors for the held requests, say: keep the rest
                    print(f"memory figures skipped: {e}", flush=True)
        finally:
            for p in mocks:
                p.terminate()
                p.wait(10)
    rows = summarise(run, c1, thr, first, mem)
    text = markdown(run, rows) + ("\n" + "\n".join(scaling_lines(sc)) + "\n" if sc else "")
    text += "\n" + "\n".join(goal_lines(rows, sc)) + "\n"
    print(text)
    a.out.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    (a.out / "public-latest.md").write_text(text)
    (a.out / f"public-{stamp}.json").write_text(json.dumps({
        "method": "On the Bench (GetBusbar/benchmarking, 2026-07-25), as issue #38 quotes it",
        "cpu_count": os.cpu_count(), "python": platform.python_version(), "layout": asdict(lay),
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "rows": rows, "c1": c1, "sustained": thr, "ttft_p50_ms": first, "scaling": sc}, indent=1, default=str))


if __name__ == "__main__":
    main()
