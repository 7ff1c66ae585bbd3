"""`python -m bench.opcodes [REQUESTS] [CASE ...]`: which of our functions a request's bytecodes run in.

``bench.instructions`` says how many machine instructions a request costs; most of a request's
difference between two paths (the translated one against the plain one) is the interpreter
running more bytecodes (callgrind's own self-cost diff: ``_PyEval_EvalFrameDefault`` the largest
line), and callgrind cannot say in which Python function. This counts them: the gateway runs
under a ``sys.settrace`` tracer that asks for opcode events, switched on by a signal after the
warm-up requests and off after REQUESTS more, and every opcode is counted against its code object.
The count is exact and the same from run to run (no timer, no sampling), so it names what a cut
should aim at and shows that the cut took the bytecodes out; ``bench.instructions`` then says
what that was worth. Bytecodes are not equal (a call costs more than a load), and C-level work
(orjson, dictionary look-ups, aiohttp's C parser) counts nothing here.

CASE: words of ``bench.instructions``' case names (``"chat buffered"``, ``"Messages"``); the
default is the plain chat request and the Messages client translated to chat. With two cases,
the second's per-function difference from the first is printed too.
"""

from __future__ import annotations

import collections
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from bench.__main__ import ROOT, free_port, wait_port
from bench.instructions import CASES, WARM, Case, drive

Counts = dict[tuple[str, int, str], int]


def serve(config: str, out: str) -> None:
    """The gateway, in this process, with the opcode tracer behind SIGUSR1 (on) and SIGUSR2
    (off, counts written to ``out``)."""
    counts: collections.Counter[tuple[str, int, str]] = collections.Counter()
    by_line = set(filter(None, os.environ.get("OPCODES_BY_LINE", "").split(",")))

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        # Called for each frame entered (a coroutine's again at each resumption); the frame's
        # own tracer then counts its opcodes under one key, made once here.
        code = frame.f_code
        name = code.co_qualname
        if code.co_filename == "<string>":  # a dataclass's __init__: named by its class
            owner = frame.f_locals.get("self")
            name = f"{type(owner).__qualname__}.{code.co_name}" if owner is not None else name
        key = (code.co_filename, code.co_firstlineno, name)
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False

        if name in by_line:  # OPCODES_BY_LINE: this function's opcodes by line
            def opcodes(frame: FrameType, event: str, arg: Any) -> Any:
                if event == "opcode":
                    counts[(key[0], frame.f_lineno, f"{name} line")] += 1
                return opcodes
        else:
            def opcodes(frame: FrameType, event: str, arg: Any) -> Any:
                if event == "opcode":
                    counts[key] += 1
                return opcodes

        return opcodes

    def start(*_: object) -> None:
        sys.settrace(tracer)

    def stop(*_: object) -> None:
        sys.settrace(None)
        Path(out + ".part").write_bytes(pickle.dumps(dict(counts)))
        os.replace(out + ".part", out)

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    import runpy

    sys.argv = ["gateway", "--config", config]
    runpy.run_module("gateway", run_name="__main__")


def count(case: Case, upstream: str, tmp: Path, n: int) -> Counts:
    port = free_port()
    cfg = tmp / f"gateway-{port}.yaml"
    cfg.write_text(f"server: {{host: 127.0.0.1, port: {port}, log_level: info}}\n"
                   f"upstreams: [{{name: bench, base_url: '{upstream}', {case.apis}max_connections: 100}}]\n")
    out = tmp / f"ops-{port}"
    log = (tmp / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "bench.opcodes", "--serve", str(cfg), str(out)], cwd=ROOT,
                            stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_port(port, "/healthz", timeout=120)
        drive(port, case, WARM)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)  # taken between two bytecodes of the loop, which is idle now
        drive(port, case, n)
        proc.send_signal(signal.SIGUSR2)
        end = time.monotonic() + 30
        while not out.exists() and time.monotonic() < end:
            time.sleep(0.05)
        if not out.exists():
            raise SystemExit(f"{case.name}: no counts written")
        counts: Counts = pickle.loads(out.read_bytes())
        return counts
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _short(key: tuple[str, int, str]) -> str:
    path, line, name = key
    for root in (str(ROOT) + "/", "site-packages/"):
        if root in path:
            path = path.split(root, 1)[1]
    return f"{path}:{line} {name}"


def per_request(counts: Counts, n: int) -> dict[str, float]:
    out: dict[str, float] = collections.defaultdict(float)
    for key, value in counts.items():
        out[_short(key)] += value / n
    return dict(out)


def report(names: list[str], results: list[dict[str, float]], top: int = int(os.environ.get("OPCODES_TOP", "40"))) -> str:
    lines = []
    for name, ops in zip(names, results, strict=True):
        lines += [f"{name}: {sum(ops.values()):,.0f} bytecodes per request", ""]
        for where, value in sorted(ops.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"  {value:8.1f}  {where}")
        lines.append("")
    if len(results) == 2:
        a, b = results
        lines += [f"{names[1]} minus {names[0]}: {sum(b.values()) - sum(a.values()):+,.0f} per request", ""]
        diff = sorted(((b.get(k, 0.0) - a.get(k, 0.0), k) for k in a.keys() | b.keys()), key=lambda d: -abs(d[0]))
        lines += [f"  {d:+8.1f}  {k}" for d, k in diff[:top] if abs(d) >= 0.5]
    return "\n".join(lines)


def main() -> None:
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2], sys.argv[3])
        return
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 500
    words = args or ["gateway, chat buffered", "Messages → chat buffered"]
    cases = []
    for word in words:
        found = [c for c in CASES if word in c.name and not c.minimal]
        if not found:
            raise SystemExit(f"no gateway case is named like {word!r}: {[c.name for c in CASES if not c.minimal]}")
        cases.append(found[0])
    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, "-m", "bench.upstream", str(up_port)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        wait_port(up_port, "/v1/models")
        with tempfile.TemporaryDirectory() as d:
            results = [per_request(count(c, f"http://127.0.0.1:{up_port}/v1", Path(d), n), n) for c in cases]
    finally:
        upstream.terminate()
        upstream.wait()
    print(report([c.name for c in cases], results))


if __name__ == "__main__":
    main()
