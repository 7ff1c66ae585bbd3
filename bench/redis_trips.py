"""`python -m bench.redis_trips`: the Redis commands a plain successful request costs with
`state: {backend: redis}`, counted by Redis itself (INFO commandstats, MONITOR) around 200
requests back to back and 10 requests 0.3 s apart (longer than the 200 ms caches). Needs
Debian's redis-server; starts its own on a free loopback port. Commands inside a Lua script
(EVALSHA) are listed too but are no round trip of their own; the two HGETALLs of a circuit
read are one pipelined round trip.
"""
# ruff: noqa
import subprocess, sys, time, json, urllib.request, tempfile
from pathlib import Path
sys.path.insert(0, ".")
from bench.__main__ import free_port, spawn, wait_port
rport, up, gw = free_port(), free_port(), free_port()
redis = subprocess.Popen(["redis-server", "--port", str(rport), "--save", "", "--appendonly", "no", "--dir", "/tmp/perf-redis"], stdout=subprocess.DEVNULL)
time.sleep(0.5)
cfg = Path(tempfile.mkdtemp()) / "c.yaml"
cfg.write_text(f"server: {{port: {gw}}}\nstate: {{backend: redis, url: 'redis://127.0.0.1:{rport}/0'}}\n"
               f"upstreams: [{{name: bench, base_url: 'http://127.0.0.1:{up}/v1'}}]\n")
u = spawn(["-m", "bench.upstream", str(up)], up, core=0)
g = spawn(["-m", "gateway", "--config", str(cfg)], gw, "/healthz")
def cli(*a): return subprocess.run(["redis-cli", "-p", str(rport), *a], capture_output=True, text=True).stdout
def post(body):
    req = urllib.request.Request(f"http://127.0.0.1:{gw}/v1/chat/completions", data=body.encode(), headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req).read()
try:
    body = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
    for _ in range(5): post(body)
    time.sleep(1.5)
    for label, n, pause in (("back to back", 200, 0), ("0.3 s apart", 10, 0.3)):
        cli("CONFIG", "RESETSTAT")
        mon = subprocess.Popen(["redis-cli", "-p", str(rport), "MONITOR"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)
        for _ in range(n):
            post(body); time.sleep(pause)
        time.sleep(0.3); mon.terminate(); out = mon.stdout.read()
        stats = [l for l in cli("INFO", "commandstats").splitlines() if l.startswith("cmdstat_")]
        print(f"== {n} successful requests, {label}")
        for l in stats: print("  ", l.split(",usec=")[0])
        cmds = {}
        for line in out.splitlines()[1:]:
            parts = line.split('"')
            if len(parts) > 1: cmds[parts[1] + " " + (parts[3].split(":")[1] if len(parts) > 3 and ":" in parts[3] else "")] = cmds.get(parts[1] + " " + (parts[3].split(":")[1] if len(parts) > 3 and ":" in parts[3] else ""), 0) + 1
        for k, v in sorted(cmds.items(), key=lambda kv: -kv[1]): print(f"   {v/n:.2f}/request  {k}")
finally:
    g.terminate(); u.terminate(); redis.terminate()
