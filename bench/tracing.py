"""`python -m bench.tracing` (part of `make bench`): what OpenTelemetry tracing costs.

Side by side, in interleaved rounds (the same load as `python -m bench`): the minimal aiohttp
proxy, the gateway as it was before tracing existed (the commit this branch started from,
exported with `git archive`), the gateway with tracing off, on (exporting to a live OTLP/HTTP
receiver), and on with a dead collector (nothing listens at the endpoint). The receiver is a
small aiohttp app that decodes each OTLP request and counts its spans, so the table also says
how many spans left the process. CPU per request is the whole process's, so it includes the
exporter's thread (batching, protobuf encoding, HTTP).

    BENCH_QUICK=1 python -m bench.tracing      smaller
    BENCH_TRACING_BASE=<commit>                 the "before" tree (default: merge-base with main)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from io import BytesIO
from pathlib import Path

from bench import load
from bench.__main__ import (
    MINIMAL,
    POOL,
    QUICK,
    RESULTS,
    ROOT,
    free_port,
    median_row,
    pinned,
    status_kb,
    wait_port,
)
from bench.__main__ import measure as measure_target

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3" if QUICK else "5"))
PLATEAU_S = 5 if QUICK else 15
BEFORE, OFF, ON, DEAD = "gateway before tracing", "tracing off", "tracing on (live receiver)", "tracing on (dead collector)"
SAMPLED = "tracing on, 10 % sampled (live receiver)"


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback that counts what it is sent."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests = 0
        self.spans = 0
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="otlp-receiver").start()
        self._ready.wait(10)

    def _run(self) -> None:
        from aiohttp import web
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        async def traces(request: web.Request) -> web.Response:
            msg = ExportTraceServiceRequest.FromString(await request.read())
            self.requests += 1
            self.spans += sum(len(s.spans) for r in msg.resource_spans for s in r.scope_spans)
            return web.Response(body=b"", content_type="application/x-protobuf")

        async def main() -> None:
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_post("/v1/traces", traces)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", self.port).start()
            self._ready.set()
            await asyncio.Event().wait()

        asyncio.run(main())


def before_tree(tmp: Path) -> Path:
    """The gateway's code as it was before this branch, for the "before" target."""
    base = os.environ.get("BENCH_TRACING_BASE") or subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    blob = subprocess.run(["git", "archive", base, "gateway"], cwd=ROOT, capture_output=True, check=True).stdout
    out = tmp / "before"
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out


def spawn(cwd: Path, config: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen([*pinned(1), sys.executable, "-m", "gateway", "--config", str(config)],
                                cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    wait_port(port, "/healthz")
    return proc


def main() -> None:
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        receiver = Receiver()
        up_port, min_port = free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        dead = f"http://127.0.0.1:{free_port()}"
        procs: dict[str, subprocess.Popen[bytes]] = {}
        ports: dict[str, int] = {}

        def gateway(name: str, tracing: str, cwd: Path = ROOT) -> None:
            port = free_port()
            cfg = tmp / f"gw-{port}.yaml"
            cfg.write_text(f"server: {{port: {port}, log_level: info}}\n"
                           f"upstreams: [{{name: bench, base_url: '{upstream}', max_connections: {POOL}}}]\n"
                           + tracing)
            procs[name], ports[name] = spawn(cwd, cfg, port, tmp / f"gw-{port}.log"), port

        procs["upstream"] = subprocess.Popen([*pinned(0), sys.executable, "-m", "bench.upstream", str(up_port)],
                                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_port(up_port)
        procs[MINIMAL] = subprocess.Popen(
            [*pinned(1), sys.executable, "-m", "bench.minimal_proxy", str(min_port), upstream, str(POOL)],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        wait_port(min_port)
        ports[MINIMAL] = min_port
        try:
            gateway(BEFORE, "", before_tree(tmp))
            gateway(OFF, "")
            gateway(ON, f"tracing: {{enabled: true, endpoint: 'http://127.0.0.1:{receiver.port}'}}\n")
            gateway(DEAD, f"tracing: {{enabled: true, endpoint: '{dead}'}}\n")
            gateway(SAMPLED, f"tracing: {{enabled: true, endpoint: 'http://127.0.0.1:{receiver.port}', sample_ratio: 0.1}}\n")
            names = [MINIMAL, BEFORE, OFF, ON, DEAD, SAMPLED]
            samples: dict[str, list[dict[str, float | str]]] = {n: [] for n in names}
            sent = {n: 0.0 for n in names}
            for _ in range(ROUNDS):
                for name in names:
                    row = measure_target(name, f"http://127.0.0.1:{ports[name]}", procs[name].pid)
                    samples[name].append(row)
            time.sleep(1.0)  # the exporter's last scheduled batch (5 s delay at most: flushed below)
            for name in names:
                sent[name] = _requests_served(ports[name]) if name != MINIMAL else float("nan")
            # A collector down for a long time: the queue is bounded, so memory must level off.
            dead_url = f"http://127.0.0.1:{ports[DEAD]}/v1/chat/completions"
            plateau = []
            for _ in range(4):
                served = load.throughput_and_latency(dead_url, 32, PLATEAU_S)["requests"]
                plateau.append((served, status_kb(procs[DEAD].pid, "VmRSS") / 1024))
            rows = []
            for name in names:
                row = median_row(samples[name])
                row["rss_mb"] = status_kb(procs[name].pid, "VmHWM") / 1024
                rows.append(row)
            # Stop the traced gateways (their shutdown flushes), then read what arrived.
            for name in (ON, DEAD, SAMPLED):
                procs[name].terminate()
                procs[name].wait(30)
            report = _report(rows, sent, receiver)
            report += ("\nDead collector, then 4 more runs of wrk -c32 for " f"{PLATEAU_S} s each: RSS after each "
                       + ", ".join(f"+{n:,.0f} requests {mb:.1f} MB" for n, mb in plateau) + "\n")
        finally:
            for p in procs.values():
                if p.poll() is None:
                    p.terminate()
                    p.wait(10)
    print(report, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tracing.md").write_text(report)


def _requests_served(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("llm_gateway_requests_total{"))


def _report(rows: list[dict[str, float | str]], sent: dict[str, float], receiver: Receiver) -> str:
    base = next(r for r in rows if r["name"] == MINIMAL)
    before = next(r for r in rows if r["name"] == BEFORE)
    lines = [
        f"Tracing cost: medians of {ROUNDS} interleaved rounds, {'wrk -t1' if load.have_wrk() else 'python client'}, "
        f"{'quick mode, ' if QUICK else ''}{os.cpu_count()} cores, proxies pinned to core 1; a shared host: read ratios",
        "",
        "| target | throughput vs minimal | CPU/request vs minimal | CPU/request vs before | Δ p50 @1 conn vs before "
        "| Δ stream TTFC vs before | req/s @32 | CPU µs/request | peak RSS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {float(r['rps_32']) / float(base['rps_32']):.2f}x | "
            f"{float(r['cpu_us']) / float(base['cpu_us']):.2f}x | {float(r['cpu_us']) / float(before['cpu_us']):.2f}x | "
            f"{float(r['p50_ms']) - float(before['p50_ms']):+.3f} ms | "
            f"{float(r['ttfc_p50_ms']) - float(before['ttfc_p50_ms']):+.3f} ms | {float(r['rps_32']):.0f} | "
            f"{float(r['cpu_us']):.0f} | {float(r['rss_mb']):.0f} MB |"
        )
    errors = {str(r["name"]): float(r["errors"]) for r in rows if float(r["errors"])}
    lines += [
        "",
        f"Live receiver: {receiver.spans:,} spans in {receiver.requests:,} OTLP requests for "
        f"{sent[ON] + sent[SAMPLED]:,.0f} requests to the two gateways exporting to it "
        f"({sent[ON]:,.0f} all traced, {sent[SAMPLED]:,.0f} sampled at 10 %: "
        f"{(sent[ON] + 0.1 * sent[SAMPLED]) * 2:,.0f} spans expected at two per traced request). Failed requests: "
        + (", ".join(f"{k}={v:.0f}" for k, v in errors.items()) if errors else "none") + ".",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
