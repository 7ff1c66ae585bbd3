"""`python -m bench.calls [N [TOP]]`: Python calls per request (cProfile, deterministic), native vs
translated, for each case of ``bench.translation``; then the functions the translated
requests call that the native ones do not (or call more often), per request.

Client, gateway and upstream run in one process and one event loop, so every count is
exact and the client's and upstream's own calls are the same on both sides: the difference
is what the gateway does more for a translated request. Timings here are cProfile's and
inflated; read calls, not time (the wrk bench times it).
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import statistics
import sys
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

from bench import upstream as fake
from bench.translation import CASES, NATIVE, Case, config
from gateway.app import create_app
from gateway.config import parse_config
from gateway.server import make_runner


async def _serve(app: web.Application, runner: web.AppRunner | None = None) -> tuple[web.AppRunner, int]:
    runner = runner or web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def _counts(prof: cProfile.Profile) -> Counter[str]:
    stats = pstats.Stats(prof)
    out: Counter[str] = Counter()
    for (file, line, name), (_cc, nc, *_rest) in stats.stats.items():  # type: ignore[attr-defined]
        out[f"{file.split('site-packages/')[-1].split('wt-perf/')[-1]}:{line}({name})"] += nc
    return out


async def measure(n: int) -> list[tuple[Case, bool, float, float, float, Counter[str], Counter[str]]]:
    up_app = web.Application()
    up_app.router.add_post("/v1/chat/completions", fake.chat)
    up_app.router.add_post("/v1/messages", fake.messages)
    up_app.router.add_post("/v1/responses", fake.responses)
    up_app.router.add_post("/v1beta/models/{rest}", fake.gemini)
    up_runner, up_port = await _serve(up_app)
    cfg = parse_config(config(0, f"http://127.0.0.1:{up_port}/v1"))
    gw_runner, gw_port = await _serve(create_app(cfg), make_runner(create_app(cfg)))
    base = f"http://127.0.0.1:{gw_port}"
    out = []
    async with aiohttp.ClientSession() as s:
        async def run(case: Case, model: str, stream: bool, count: int) -> None:
            body, url = case.body(model, stream), case.url(base, model, stream)
            headers = {"Content-Type": "application/json", **case.credential(model)}
            for _ in range(count):
                async with s.post(url, data=body, headers=headers) as r:
                    await r.read()
                    assert r.status == 200, r.status

        for case in CASES:
            for stream in (False, True):
                got: dict[str, Counter[str]] = {}
                cpu: dict[str, list[float]] = {NATIVE: [], case.model: []}
                for _ in range(5):  # interleaved: the host's noise hits both alike
                    for model in (NATIVE, case.model):
                        t0 = time.process_time()
                        await run(case, model, stream, n // 5)
                        cpu[model].append((time.process_time() - t0) / (n // 5) * 1e6)
                for model in (NATIVE, case.model):
                    await run(case, model, stream, 50)  # warm-up: caches, pools
                    prof = cProfile.Profile()
                    prof.enable()
                    await run(case, model, stream, n)
                    prof.disable()
                    got[model] = _counts(prof)
                nat, tr = got[NATIVE], got[case.model]
                diff = statistics.median(t - n_ for n_, t in zip(cpu[NATIVE], cpu[case.model], strict=True))
                out.append((case, stream, sum(nat.values()) / n, sum(tr.values()) / n, diff, nat, tr))
    await gw_runner.cleanup()
    await up_runner.cleanup()
    return out


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = asyncio.run(measure(n))
    print("| client API | upstream API | mode | calls/request native | translated | Δ calls "
          "| Δ CPU µs/request (one process, no profiler) |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for case, stream, nat, tr, diff, _, _ in rows:
        print(f"| {case.label} | {case.upstream_label} | {'stream' if stream else 'buffered'} "
              f"| {nat:.0f} | {tr:.0f} | {tr - nat:+.0f} | {diff:+.0f} |")
    for case, stream, _, _, _, natc, trc in rows:
        more: dict[str, Any] = {k: (v - natc.get(k, 0)) / n for k, v in trc.items() if v > natc.get(k, 0)}
        print(f"\n{case.label} -> {case.upstream_label} {'stream' if stream else 'buffered'}: calls per request "
              "the translated path makes beyond the native one")
        for k, v in sorted(more.items(), key=lambda kv: -kv[1])[:top]:
            print(f"  {v:6.1f}  {k}")


if __name__ == "__main__":
    main()
