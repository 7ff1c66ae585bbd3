"""`python -m bench.instructions [REQUESTS] [CASE ...]`: what a request costs, counted rather than timed.

CPU time per request moves by 5-15 % between runs on a shared host, more than most single
changes to the request path save. The number of machine instructions a request executes does
hardly does: valgrind's callgrind counts them, and the same code counts the same within about
1 % from run to run (timers, the collector), whoever else holds the cores. It is a proxy for CPU time, not a measure of it
(an instruction that misses the cache costs more than one that hits), so this reports
ratios and before/after, never speed.

Each case runs its proxy under ``valgrind --tool=callgrind`` (about 50× slower, so the
requests are few and sequential, one keep-alive connection), with the bench upstream
running natively. The first 300 requests warm the process up (imports, caches, the
connection pool); the counters are zeroed, REQUESTS more are sent (default 1,000), and the
count is dumped: instructions per request. Cases:

- the minimal aiohttp proxy and the gateway, a one-line chat request, buffered and streamed
  (the per-core ratio of issue #38, as instructions);
- a Messages client on a chat-only upstream, the same request as ``bench.public`` sends
  (the translated ratio), and a chat client on a Messages-only upstream;
- CASE: words of the case names (``"stream"``, ``"Messages"``): only the cases named so;
- with PROFILE_BASELINE (another checkout, e.g. ``git archive main | tar -x -C DIR``), the
  same gateway cases of that tree beside this one's: a change's before and after, exact.

Needs valgrind (``apt-get install valgrind``). The access log goes to a file, as in
``bench.public``; its writer thread's instructions count too.
"""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import load
from bench.__main__ import ROOT, free_port, wait_port
from bench.public import MESSAGES_BODY, MESSAGES_STREAM_BODY

WARM = 300
CALLGRIND_CONTROL = shutil.which("callgrind_control")


@dataclass(frozen=True)
class Case:
    name: str
    path: str
    body: str
    headers: tuple[tuple[str, str], ...]
    apis: str = ""  # the upstream's apis entry ("" for all)
    minimal: bool = False  # the minimal proxy, not the gateway


_CHAT_KEY = (("Authorization", "Bearer sk-bench"),)
_MESSAGES_KEY = (("x-api-key", "sk-bench"), ("anthropic-version", "2023-06-01"))
_RESPONSES_STREAM_BODY = '{"model":"gpt-4o-mini","input":"Hello, how are you?","stream":true}'
CASES = [
    Case("minimal proxy, chat buffered", "/v1/chat/completions", load.BODY, _CHAT_KEY, minimal=True),
    Case("minimal proxy, chat stream", "/v1/chat/completions", load.STREAM_BODY, _CHAT_KEY, minimal=True),
    Case("gateway, chat buffered", "/v1/chat/completions", load.BODY, _CHAT_KEY),
    Case("gateway, chat stream", "/v1/chat/completions", load.STREAM_BODY, _CHAT_KEY),
    Case("gateway, Messages → chat buffered", "/v1/messages", MESSAGES_BODY, _MESSAGES_KEY, "apis: [chat], "),
    Case("gateway, Messages → chat stream", "/v1/messages", MESSAGES_STREAM_BODY, _MESSAGES_KEY, "apis: [chat], "),
    # Claude Code's own path: a Messages client on a Messages upstream.
    Case("gateway, Messages native buffered", "/v1/messages", MESSAGES_BODY, _MESSAGES_KEY, "apis: [messages], "),
    Case("gateway, Messages native stream", "/v1/messages", MESSAGES_STREAM_BODY, _MESSAGES_KEY, "apis: [messages], "),
    # Codex's API: a Responses client on a Responses upstream, and on a chat-only one.
    Case("gateway, Responses native stream", "/v1/responses", _RESPONSES_STREAM_BODY, _CHAT_KEY, "apis: [responses], "),
    Case("gateway, Responses → chat stream", "/v1/responses", _RESPONSES_STREAM_BODY, _CHAT_KEY, "apis: [chat], "),
    # A chat client (opencode, Codex's chat mode) on an Anthropic Messages upstream.
    Case("gateway, chat → Messages buffered", "/v1/chat/completions", load.BODY, _CHAT_KEY, "apis: [messages], "),
    Case("gateway, chat → Messages stream", "/v1/chat/completions", load.STREAM_BODY, _CHAT_KEY, "apis: [messages], "),
]


def drive(port: int, case: Case, n: int) -> None:
    """``n`` requests one after another on one connection, each answer read to its end."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json", **dict(case.headers)}
    body = case.body.encode()
    try:
        for _ in range(n):
            conn.request("POST", case.path, body, headers)
            answer = conn.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"{case.name}: status {answer.status}")
    finally:
        conn.close()


def _summary(dump: Path) -> int:
    for line in dump.read_text(errors="replace").splitlines():
        if line.startswith("summary:"):
            return int(line.split()[1])
    raise SystemExit(f"no summary line in {dump}")


def count(case: Case, tree: Path, upstream: str, tmp: Path, n: int) -> float:
    """Instructions per request of ``case`` served by the checkout at ``tree``."""
    port = free_port()
    out = tmp / f"callgrind-{port}"
    if case.minimal:
        args = ["-m", "bench.minimal_proxy", str(port), upstream, "100"]
        ready = "/"
    else:
        cfg = tmp / f"gateway-{port}.yaml"
        cfg.write_text(f"server: {{host: 127.0.0.1, port: {port}, log_level: info}}\n"
                       f"upstreams: [{{name: bench, base_url: '{upstream}', {case.apis}max_connections: 100}}]\n")
        args = ["-m", "gateway", "--config", str(cfg)]
        ready = "/healthz"
    log = (tmp / f"proxy-{port}.log").open("wb")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *args],
                            cwd=tree, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_port(port, ready, timeout=300)
        drive(port, case, WARM)
        subprocess.run([CALLGRIND_CONTROL or "callgrind_control", "-z", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        drive(port, case, n)
        subprocess.run([CALLGRIND_CONTROL or "callgrind_control", "-d", str(proc.pid)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        dumps = sorted(tmp.glob(f"callgrind-{port}.*"))
        end = time.monotonic() + 30
        while not dumps and time.monotonic() < end:  # the dump is written between two requests' work
            time.sleep(0.2)
            dumps = sorted(tmp.glob(f"callgrind-{port}.*"))
        if not dumps:
            raise SystemExit(f"{case.name}: callgrind wrote no dump")
        return _summary(dumps[-1]) / n
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("bench.instructions needs valgrind (apt-get install valgrind)")
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 1000
    cases = [c for c in CASES if not args or any(word in c.name for word in args)]
    baseline = os.environ.get("PROFILE_BASELINE")
    trees = [("this tree", ROOT)] + ([("baseline", Path(baseline))] if baseline else [])
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    results: dict[tuple[str, str], float] = {}
    try:
        wait_port(up_port, "/v1/models")
        with tempfile.TemporaryDirectory() as d:
            for case in cases:
                for label, tree in trees:
                    if case.minimal and label == "baseline":
                        continue  # the minimal proxy is the same code in both
                    results[(case.name, label)] = count(case, tree, f"http://127.0.0.1:{up_port}/v1", Path(d), n)
                    print(f"{case.name} ({label}): {results[(case.name, label)]:,.0f} instructions per request",
                          file=sys.stderr, flush=True)  # fmt: skip
    finally:
        upstream.terminate()
        upstream.wait()
    print(report(results, [label for label, _ in trees], n))


def report(results: dict[tuple[str, str], float], labels: list[str], n: int) -> str:
    lines = [f"Instructions per request (callgrind, {n} sequential requests after {WARM} to warm up)", ""]
    head = "| case | " + " | ".join(labels) + (" | change |" if len(labels) > 1 else " |")
    lines += [head, "|" + " --- |" * (len(labels) + 1 + (len(labels) > 1))]
    for case in CASES:
        row = [results.get((case.name, label)) for label in labels]
        if all(v is None for v in row):
            continue  # not asked for this run
        cells = [f"{v:,.0f}" if v is not None else "" for v in row]
        change = ""
        if len(row) > 1 and row[0] is not None and row[1] is not None:
            change = f" {row[0] / row[1] - 1:+.2%} |"
        lines.append(f"| {case.name} | " + " | ".join(cells) + (" |" + change if len(labels) > 1 else " |"))
    here = labels[0]

    def ratio(a: str, b: str) -> str:
        x, y = results.get((a, here)), results.get((b, here))
        return f"{x / y:.3f}" if x and y else "n/a"

    lines += ["", f"minimal proxy / gateway (buffered; per-core throughput goes as this): "
                  f"{ratio('minimal proxy, chat buffered', 'gateway, chat buffered')}",
              f"gateway / translated (buffered; the translated goal goes as this): "
              f"{ratio('gateway, chat buffered', 'gateway, Messages → chat buffered')}",
              f"the same, streamed: {ratio('gateway, chat stream', 'gateway, Messages → chat stream')}"]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
