"""`python -m bench.profile [SECONDS]`: where the gateway's CPU goes on the plain path.

The minimal aiohttp proxy and the gateway (the same config as `python -m bench`: local state,
`info` logging) in turns, round after round, CPU per request from /proc around each wrk run
(``-c32``); then py-spy (``-r 250 -f raw``, blocking, so stacks are whole) on the gateway
under the same load, one profile per case, summarised as shares of samples:

- by innermost frame (where the interpreter was),
- by the innermost of the gateway's own functions on the stack (``gateway/``: which of
  ours caused the work, what it called included),
- by component: the innermost frame of aiohttp's client (building, sending and reading
  the upstream exchange), its server or the gateway's own code on the stack; and the share
  with any frame of aiohttp's client on the stack.

Cases: the bench's one-line chat request buffered and streamed, and Claude Code's first
request (82 KB, ``tests/corpus/requests``) and Codex's (45 KB, streamed) on an upstream of
their own API. The minimal proxy is profiled too (the chat cases; it forwards nothing
else), for its share inside aiohttp's client: the least an aiohttp proxy spends there.
py-spy must be installed (``.venv/bin/pip install py-spy``); it needs ptrace rights over
the gateway.

Environment: BENCH_ROUNDS (CPU rounds, default 5), BENCH_SECONDS (per wrk run, default 3),
PROFILE_OUT (a file to write the summary to as well), PROFILE_BASELINE (another checkout,
e.g. ``git archive main``: its gateway joins the CPU rounds, for before/after), PROFILE_RAW (a directory to keep
py-spy's raw stacks in). `python -m bench.profile --summarise RAW` summarises a kept file.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import load
from bench.__main__ import cpu_s, free_port, pinned, spawn, wait_port
from bench.translation import CORPUS

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
SECONDS = int(os.environ.get("BENCH_SECONDS", "3"))
TTFC_N = 100
PY_SPY = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: str
    minimal: bool  # the minimal proxy serves it too (it forwards only chat)


def _real(name: str, stream: bool) -> str:
    real = json.loads((CORPUS / name).read_text())["body"]
    return json.dumps({**real, "stream": stream}, ensure_ascii=False, separators=(",", ":"))


CASES = [
    Case("chat, one line, buffered", "/v1/chat/completions", load.BODY, True),
    Case("chat, one line, stream", "/v1/chat/completions", load.STREAM_BODY, True),
    Case("messages: Claude Code's first request (82 KB), buffered", "/v1/messages",
         _real("claude-code-2.1.197-first.json", False), False),
    # Its answer echoes the request's tools in response.created, in_progress and completed.
    Case("responses: Codex's first request (45 KB), stream", "/v1/responses",
         _real("codex-0.169-first.json", True), False),
]

# Each sample goes to the innermost frame on its stack that belongs to one of these (the
# loop's and the standard library's frames are skipped over, so a socket write counts for
# whoever wrote); stacks with none of them are the event loop's own.
AIOHTTP_CLIENT = ("aiohttp/client.py", "aiohttp/client_reqrep.py", "aiohttp/connector.py", "aiohttp/client_proto.py")
AIOHTTP_SERVER = ("aiohttp/web_", "aiohttp/base_protocol.py")
H1_CLIENT = ("gateway/upstream/h1/", "httptools/")
NOT_OURS = ("gateway/__main__.py", "gateway/server.py")  # at the root of every stack
IDLE = ("Condition.wait (threading.py)", "wait (threading.py)")  # the log writer thread, waiting


def _component(files: list[str]) -> str:
    for f in reversed(files):
        if any(x in f for x in AIOHTTP_CLIENT):
            return "aiohttp client (session, request, connector, response parse)"
        if any(x in f for x in H1_CLIENT):
            return "h1 client (gateway/upstream/h1: pool, connection, llhttp)"
        if any(x in f for x in AIOHTTP_SERVER):
            return "aiohttp server (protocol, request, response)"
        if "gateway/" in f and not any(x in f for x in NOT_OURS):
            return "the gateway's own code (and what it calls outside aiohttp)"
    return "event loop, transports, other"


def _parse(line: str) -> tuple[list[str], int]:
    stack, _, n = line.rstrip("\n").rpartition(" ")
    return [f for f in stack.split(";") if f], int(n)


def _file(frame: str) -> str:
    # py-spy's raw frames: "function (file:line)" (or without the line with --nolineno).
    inner = frame.rsplit("(", 1)[-1].rstrip(")")
    return inner.rsplit(":", 1)[0]


def _function(frame: str) -> str:
    name, _, rest = frame.partition(" (")
    return f"{name} ({_file(frame)})" if rest else frame


def summarise(raw: str, top: int = 25) -> str:
    inner: collections.Counter[str] = collections.Counter()
    ours: collections.Counter[str] = collections.Counter()
    parts: collections.Counter[str] = collections.Counter()
    total = idle = in_client = in_h1 = 0
    for line in raw.splitlines():
        if not line.strip():
            continue
        frames, n = _parse(line)
        if not frames:
            continue  # a thread py-spy caught between frames
        fns = [_function(f) for f in frames]
        if fns[-1] in IDLE:
            idle += n
            continue
        total += n
        inner[fns[-1]] += n
        own = [f for f in fns if "gateway/" in f and not any(x in f for x in NOT_OURS)]
        ours[own[-1] if own else "(none of ours on the stack)"] += n
        files = [_file(f) for f in frames]
        parts[_component(files)] += n
        in_client += n if any(any(x in f for x in AIOHTTP_CLIENT) for f in files) else 0
        in_h1 += n if any(any(x in f for x in H1_CLIENT) for f in files) else 0
    out = [f"samples: {total} (and {idle} of the log writer thread waiting, left out)", "",
           f"inside aiohttp's client (any of its frames on the stack): {100 * in_client / total:.1f} %",
           f"inside the h1 client (gateway/upstream/h1 or httptools on the stack): {100 * in_h1 / total:.1f} %", "",
           "by component (the innermost frame of aiohttp's client, its server or the gateway on the stack):"]
    out += [f"  {100 * v / total:5.1f} %  {k}" for k, v in parts.most_common()]
    out += ["", f"by innermost frame (top {top}):"]
    out += [f"  {100 * v / total:5.1f} %  {k}" for k, v in inner.most_common(top)]
    out += ["", f"by innermost gateway/ function on the stack (top {top}):"]
    out += [f"  {100 * v / total:5.1f} %  {k}" for k, v in ours.most_common(top)]
    return "\n".join(out)


def cpu_rounds(bases: dict[str, tuple[str, int]]) -> str:
    """CPU per request of every target, round after round (a noisy stretch of the shared host
    hits all alike); the minimal proxy serves only the chat cases."""
    samples: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    rps: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    ttfc: dict[str, list[float]] = collections.defaultdict(list)
    runs = [(case, name) for case in CASES for name in bases if case.minimal or name != "minimal"]
    for case, name in runs:
        load.throughput_and_latency(bases[name][0] + case.path, 8, 1, case.body)  # warm-up
    for _ in range(ROUNDS):
        for case, name in runs:
            base, pid = bases[name]
            c0 = cpu_s(pid)
            r = load.throughput_and_latency(base + case.path, 32, SECONDS, case.body)
            samples[(case.name, name)].append((cpu_s(pid) - c0) / max(r["requests"], 1) * 1e6)
            rps[(case.name, name)].append(r["rps"])
        for name, (base, _pid) in bases.items():  # one connection, sequential: latency, not load
            ttfc[name].append(load.time_to_first_chunk(base + "/v1/chat/completions", TTFC_N)["ttfc_p50_ms"])
    names = list(bases)
    lines = [f"CPU per request (µs, /proc, wrk -t1 -c32, medians of {ROUNDS} interleaved rounds of {SECONDS}s; "
             "in brackets: vs the minimal proxy)", "",
             "| case | " + " | ".join(names) + " | req/s " + " / ".join(names) + " |",
             "| --- |" + " ---: |" * (len(names) + 1)]
    for case in CASES:
        cpu = {n: statistics.median(samples[(case.name, n)]) for n in names if samples[(case.name, n)]}
        speed = {n: statistics.median(rps[(case.name, n)]) for n in names if rps[(case.name, n)]}
        mn = cpu.get("minimal")
        cells = [("–" if n not in cpu else f"{cpu[n]:.0f}" + (f" ({cpu[n] / mn:.2f}x)" if mn and n != "minimal" else ""))
                 for n in names]
        lines.append(f"| {case.name} | " + " | ".join(cells) + " | "
                     + " / ".join(f"{speed[n]:.0f}" if n in speed else "–" for n in names) + " |")
    mn_ttfc = statistics.median(ttfc["minimal"])
    lines += ["", f"Stream time to first chunk, p50 of {TTFC_N} sequential requests per round, median of rounds: "
              + ", ".join(f"{n} {statistics.median(ttfc[n]):.3f} ms"
                          + (f" ({statistics.median(ttfc[n]) - mn_ttfc:+.3f} ms)" if n != "minimal" else "")
                          for n in names)]
    return "\n".join(lines)


def profile(base: str, pid: int, tmp: Path, seconds: int, who: str = "gateway") -> str:
    if PY_SPY is None:
        return "py-spy not installed: no profile"
    out = []
    for case in CASES:
        if who != "gateway" and not case.minimal:
            continue
        raw = tmp / "spy.txt"
        spy = subprocess.Popen([PY_SPY, "record", "-r", "250", "-f", "raw", "--nolineno", "-o", str(raw),
                                "-d", str(seconds), "-p", str(pid)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        time.sleep(0.5)
        load.throughput_and_latency(base + case.path, 32, seconds, case.body)
        spy.wait()
        if os.environ.get("PROFILE_RAW"):  # a directory to keep py-spy's raw stacks in
            (Path(os.environ["PROFILE_RAW"]) / f"spy-{who.split()[0]}-{len(out)}.txt").write_text(raw.read_text())
        summary = summarise(raw.read_text())
        if who != "gateway":  # the baseline: how much of it is aiohttp's client
            summary = summary.split("\n\nby innermost frame")[0]
        out.append(f"## {who}: {case.name}\n\n{summary}\n")
    return "\n".join(out)


def main() -> None:
    if sys.argv[1:2] == ["--summarise"]:
        print(summarise(Path(sys.argv[2]).read_text()))
        return
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 10  # 0: the CPU rounds only
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        up_port, min_port, gw_port = free_port(), free_port(), free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        cfg = tmp / "gateway.yaml"
        cfg.write_text(f"server: {{port: {gw_port}, log_level: info}}\n"
                       f"upstreams: [{{name: bench, base_url: '{upstream}', max_connections: 1000}}]\n")
        with open(tmp / "gateway.log", "wb") as log:
            procs = [spawn(["-m", "bench.upstream", str(up_port)], up_port, core=0),
                     spawn(["-m", "bench.minimal_proxy", str(min_port), upstream, "1000"], min_port),
                     spawn(["-m", "gateway", "--config", str(cfg)], gw_port, "/healthz", stdout=log)]
            try:
                bases = {"minimal": (f"http://127.0.0.1:{min_port}", procs[1].pid),
                         "gateway": (f"http://127.0.0.1:{gw_port}", procs[2].pid)}
                if os.environ.get("PROFILE_BASELINE"):
                    # Another checkout's gateway (say, main's) in the same rounds: before/after
                    # figures that one noisy stretch of the host cannot skew one way.
                    port = free_port()
                    other = tmp / "baseline.yaml"
                    other.write_text(cfg.read_text().replace(f"port: {gw_port},", f"port: {port},"))
                    procs.append(subprocess.Popen([*pinned(1), sys.executable, "-m", "gateway", "--config", str(other)],
                                                  cwd=os.environ["PROFILE_BASELINE"], stdout=log,
                                                  stderr=subprocess.STDOUT))  # fmt: skip
                    wait_port(port, "/healthz")
                    bases = {"minimal": bases["minimal"], "baseline gateway": (f"http://127.0.0.1:{port}", procs[-1].pid),
                             "gateway": bases["gateway"]}
                report = cpu_rounds(bases) + "\n\n"
                print(report, flush=True)
                if seconds > 0:
                    part = profile(bases["gateway"][0], procs[2].pid, tmp, seconds)
                    print(part, flush=True)
                    report += part + "\n"
                    part = profile(bases["minimal"][0], procs[1].pid, tmp, seconds, "minimal proxy")
                    print(part, flush=True)
                    report += part
            finally:
                for p in procs:
                    p.terminate()
                    p.wait(10)
    if os.environ.get("PROFILE_OUT"):
        Path(os.environ["PROFILE_OUT"]).write_text(report)


if __name__ == "__main__":
    main()
