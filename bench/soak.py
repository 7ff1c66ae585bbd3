"""Soak: many mixed requests through the gateway (success, stream, 429-then-success,
400), with its RSS and open file descriptors sampled all along. wrk drives it (a Lua
script rotates the four kinds and stops after exactly N responses)."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.load import BODY, STREAM_BODY

BAD_BODY = '{"model":"gpt-4o-mini","messages":"not a list"}'


def _script(n: int) -> str:
    def q(s: str) -> str:
        return "'" + s.replace("'", "\\'") + "'"

    lua = f"""
local json = {{["Content-Type"] = "application/json"}}
local limited = {{["Content-Type"] = "application/json", ["x-bench-429"] = "1"}}
local reqs = {{}}
local threads = {{}}
function setup(thread) table.insert(threads, thread) end
function init(args)
  reqs[1] = wrk.format("POST", nil, json, {q(BODY)})
  reqs[2] = wrk.format("POST", nil, json, {q(STREAM_BODY)})
  reqs[3] = wrk.format("POST", nil, limited, {q(BODY)})
  reqs[4] = wrk.format("POST", nil, json, {q(BAD_BODY)})
  sent, got, s200, s400, sother = 0, 0, 0, 0, 0
end
function request()
  sent = sent + 1
  return reqs[(sent % 4) + 1]
end
function response(status, headers, body)
  got = got + 1
  if status == 200 then s200 = s200 + 1 elseif status == 400 then s400 = s400 + 1 else sother = sother + 1 end
  if got >= {n} then wrk.thread:stop() end
end
function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    io.write(string.format("SOAK got=%d s200=%d s400=%d sother=%d\\n", t:get("got"), t:get("s200"), t:get("s400"), t:get("sother")))
  end
end
"""
    path = Path(tempfile.gettempdir()) / "llm-gateway-soak.lua"
    path.write_text(lua)
    return str(path)


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def answered(metrics_url: str) -> float:
    """Requests the gateway has answered so far (llm_gateway_requests_total, all series)."""
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("llm_gateway_requests_total{"))


def run(url: str, pid: int, n: int, max_s: int) -> dict[str, float | str]:
    """Drive ``n`` mixed requests at ``url`` (the gateway, pid ``pid``); bounded by ``max_s``."""
    if shutil.which("wrk") is None:
        return {"skipped": "wrk not installed"}
    metrics = url.split("/v1/", 1)[0] + "/metrics"
    samples: list[tuple[float, int, int]] = []
    fds_before = _fds(pid)
    start_count = answered(metrics)
    pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
    t0 = time.monotonic()
    # The script stops sending after n answers, but wrk itself only ends at -d: once the
    # gateway has counted n more answers, SIGINT makes it print its summary and exit.
    wrk = subprocess.Popen([*pin, "wrk", "-t1", "-c32", f"-d{max_s}s", "-s", _script(n), url],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while wrk.poll() is None:
        samples.append((time.monotonic(), _rss_kb(pid), _fds(pid)))
        if answered(metrics) - start_count >= n:
            time.sleep(0.2)
            wrk.send_signal(signal.SIGINT)
            break
        time.sleep(0.25)
    out, _ = wrk.communicate(timeout=30)
    wall = time.monotonic() - t0
    time.sleep(1.0)  # let closed client connections go
    fds_after = _fds(pid)
    m = re.search(r"SOAK got=(\d+) s200=(\d+) s400=(\d+) sother=(\d+)", out)
    got, s200, s400, sother = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
    errors = re.search(r"Socket errors: (.*)", out)
    # Warm-up: the first fifth of the run (pools fill, caches and allocator arenas settle).
    steady = [s for s in samples if s[0] - t0 >= wall / 5]
    rss = [s[1] for s in steady] or [0]
    fds = [s[2] for s in steady] or [0]
    return {
        "requests": got, "ok_200": s200, "bad_400": s400, "other": sother, "wall_s": wall,
        "socket_errors": errors.group(1) if errors else "none",
        "rss_after_warmup_mb": rss[0] / 1024, "rss_max_mb": max(rss) / 1024, "rss_end_mb": rss[-1] / 1024,
        "rss_growth_pct": 100 * (rss[-1] - rss[0]) / rss[0] if rss[0] else float("nan"),
        "fds_before": fds_before, "fds_after_warmup": fds[0], "fds_end": fds[-1], "fds_max_during": max(fds),
        "fds_after": fds_after,
    }
