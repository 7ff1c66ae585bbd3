"""`python -m bench.redis_trips`: the Redis commands a plain successful request costs with
`state: {backend: redis}`, counted by Redis itself (INFO commandstats, and MONITOR for the
keys) around 200 requests back to back and 10 requests 0.3 s apart (longer than the 200 ms
caches), for one upstream, for a pool of three deployments whose answers carry rate-limit
headers (the pool's records: one pipelined round trip per cache period), and for a pool of
three whose configured limits decide (each pick takes its request from the shared count: one
script call, one round trip, per request). Every request is one conversation's turn (the same
body), as an agent's are; for the first pool, also each request a conversation of its own
(its home claimed in the store: one round trip for each, the calls of one loop turn together).
Redis is emptied between the configs: what one left (a conversation's home, a deployment's
headroom) would decide the next one's picks.
Needs Debian's redis-server; starts its own on a free loopback port.

Commands run inside a Lua script (EVALSHA) are listed as well but are no round trip of their
own; the two HGETALLs of a circuit read are one pipelined round trip.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from bench.__main__ import free_port, spawn

BODY = b'{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'


def _cli(port: int, *args: str) -> str:
    return subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True).stdout


def _post(port: int, body: bytes = BODY) -> None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req).read()


def _trips(monitor: str) -> int:
    """Round trips in a MONITOR capture: a client's commands that Redis ran back to back (within
    0.2 ms, the commands of one pipeline or one script) are one trip."""
    last: dict[str, float] = {}
    trips = 0
    for line in monitor.splitlines()[1:]:
        head = line.split('"', 1)[0].split()
        if len(head) < 3 or head[2].startswith("lua"):
            continue  # a script's own commands ran inside its EVALSHA
        at, client = float(head[0]), head[2].rstrip("]")
        if at - last.get(client, -1.0) > 0.0002:
            trips += 1
        last[client] = at
    return trips


def _monitored(rport: int, gw: int, n: int, pause: float, new: bool = False) -> tuple[list[str], Counter[str]]:
    _cli(rport, "CONFIG", "RESETSTAT")
    # To a file, not a pipe: a pipe holds 64 KiB, and what MONITOR wrote past that while
    # nobody read it was lost when it was stopped (half the calls of 200 requests went uncounted).
    with tempfile.TemporaryFile("w+") as capture:
        mon = subprocess.Popen(["redis-cli", "-p", str(rport), "MONITOR"], stdout=capture, text=True)
        time.sleep(0.3)
        for i in range(n):
            _post(gw, BODY.replace(b'"hi"', b'"hi %d %f"' % (i, time.time())) if new else BODY)
            time.sleep(pause)
        time.sleep(0.3)
        mon.terminate()
        mon.wait(10)
        capture.seek(0)
        out = capture.read()
    stats = [line.split(",usec=")[0] for line in _cli(rport, "INFO", "commandstats").splitlines()
             if line.startswith("cmdstat_") and "monitor" not in line and "config" not in line]
    seen: Counter[str] = Counter({"round trips": _trips(out)})
    for line in out.splitlines()[1:]:
        parts = line.split('"')
        if len(parts) > 1:  # the command, and the kind of key (llm-gateway:<kind>:...)
            key = parts[3].split(":")[1] if len(parts) > 3 and ":" in parts[3] else ""
            seen[f"{parts[1]} {key}"] += 1
    return stats, seen


def main() -> None:
    rport, up, gw = free_port(), free_port(), free_port()
    tmp = Path(tempfile.mkdtemp())
    redis = subprocess.Popen(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(tmp)], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    state = f"state: {{backend: redis, url: 'redis://127.0.0.1:{rport}/0'}}\n"
    base = f"http://127.0.0.1:{up}/v1"
    configs = {
        "one upstream": f"upstreams: [{{name: bench, base_url: '{base}'}}]\n",
        "a pool of three (headroom)": "upstreams:\n" + "".join(
            f"  - {{name: key-{k}, base_url: '{base}', api_key: bench-rl-{k}}}\n" for k in "abc")
        + "pools: [{name: bench, deployments: [key-a, key-b, key-c], strategy: headroom}]\n",
        # No rate-limit headers: the configured limits decide, taken in Redis at each pick.
        "a pool of three (limits)": "upstreams:\n" + "".join(
            f"  - {{name: key-{k}, base_url: '{base}', api_key: bench-{k}, "
            "limits: {requests_per_minute: 1000000, tokens_per_minute: 100000000}}\n" for k in "abc")
        + "pools: [{name: bench, deployments: [key-a, key-b, key-c]}]\n",
    }  # fmt: skip
    upstream = spawn(["-m", "bench.upstream", str(up)], up, core=0)
    try:
        for what, upstreams in configs.items():
            _cli(rport, "FLUSHALL")
            cfg = tmp / "gateway.yaml"
            cfg.write_text(f"server: {{port: {gw}}}\n{state}{upstreams}")
            gateway = spawn(["-m", "gateway", "--config", str(cfg)], gw, "/healthz")
            try:
                for _ in range(5):
                    _post(gw)
                time.sleep(1.5)
                runs = [("back to back", 200, 0.0, False), ("0.3 s apart", 10, 0.3, False)]
                if "headroom" in what:
                    runs += [("back to back, each a new conversation", 200, 0.0, True),
                             ("0.3 s apart, each a new conversation", 10, 0.3, True)]
                for label, n, pause, new in runs:
                    stats, seen = _monitored(rport, gw, n, pause, new)
                    print(f"== {what}: {n} successful requests, {label}")
                    for line in stats:
                        print("  ", line)
                    for kind, count in seen.most_common():
                        print(f"   {count / n:.2f}/request  {kind}")
            finally:
                gateway.terminate()
                gateway.wait(10)
    finally:
        for p in (upstream, redis):
            p.terminate()
            p.wait(10)


if __name__ == "__main__":
    main()
