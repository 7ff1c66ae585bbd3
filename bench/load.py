"""Load generation: wrk for throughput and latency percentiles, a Python client for
streaming time-to-first-chunk (wrk cannot see inside a response)."""

from __future__ import annotations

import asyncio
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

import aiohttp

BODY = '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello, how are you?"}]}'
STREAM_BODY = BODY[:-1] + ',"stream":true}'
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
# Every request carries a gateway key, as an agent's does: the rows with named keys (keys:)
# count it against its limits and budget; every other target passes it on or ignores it.
KEY = "gk-bench-0123456789abcdef"
BEARER = {"Authorization": f"Bearer {KEY}"}
HEADERS = {"Content-Type": "application/json", **BEARER}
# A Gemini API client (Gemini CLI, google-genai) sends its key in this header instead.
GOOGLE = {"x-goog-api-key": KEY}


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def _script(body: str, headers: dict[str, str] | None = None, credential: dict[str, str] = BEARER) -> str:
    extra = "".join(f"wrk.headers['{k}'] = '{v}'\n" for k, v in {**credential, **(headers or {})}.items())
    tag = zlib.crc32((body + extra).encode())
    path = Path(tempfile.gettempdir()) / f"llm-gateway-bench-{tag:08x}.lua"
    # A Lua long string: real agent requests hold quotes and backslashes.
    path.write_text(f"wrk.method = 'POST'\nwrk.body = [==[{body}]==]\nwrk.headers['Content-Type'] = 'application/json'\n"
                    f"{extra}")
    return str(path)


def wrk(url: str, connections: int, seconds: int, body: str = BODY, *, threads: int = 1, cores: str = "0",
        headers: dict[str, str] | None = None, timeout_s: float | None = None,
        credential: dict[str, str] = BEARER) -> dict[str, float]:
    """One wrk run pinned to ``cores``: req/s, p50/p99 (ms), non-2xx answers and socket errors
    (connect, read, write, timeout) counted together as ``errors``. ``credential``: the key's
    header (a bearer token unless told)."""
    pin = ["taskset", "-c", cores] if shutil.which("taskset") and cores else []
    more = ["--timeout", f"{timeout_s}s"] if timeout_s else []
    out = subprocess.run(
        [*pin, "wrk", f"-t{max(1, min(threads, connections))}", f"-c{connections}", f"-d{seconds}s", "--latency",
         *more, "-s", _script(body, headers, credential), url],
        capture_output=True, text=True, check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    lat = percentiles_ms(out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    done = re.search(r"(\d+) requests in", out)
    return {"rps": rps, "requests": float(done.group(1)) if done else rps * seconds, "p50_ms": lat.get("50", float("nan")), "p99_ms": lat.get("99", float("nan")),
            "errors": float(errors.group(1)) if errors else 0.0,
            "socket_errors": float(sum(int(x) for x in sock.groups())) if sock else 0.0}


def percentiles_ms(out: str) -> dict[str, float]:
    """wrk's ``--latency`` p50 and p99 in ms. wrk pads a one-letter unit with a space
    ("1.23s "), so a latency of a second or more ends in one."""
    found = re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s|m|h)\s*$", out, re.M)
    return {p: float(v) * _UNITS[u] for p, v, u in found}


async def _python_load(url: str, connections: int, seconds: float, body: str = BODY,
                       credential: dict[str, str] = BEARER) -> dict[str, float]:
    headers = {"Content-Type": "application/json", **credential}
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=connections)) as s:
        async def worker() -> None:
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                async with s.post(url, data=body, headers=headers) as r:
                    await r.read()
                latencies.append((time.perf_counter() - t0) * 1000)
        await asyncio.gather(*(worker() for _ in range(connections)))
    q = statistics.quantiles(latencies, n=100)
    return {"rps": len(latencies) / seconds, "requests": float(len(latencies)), "p50_ms": q[49], "p99_ms": q[98], "errors": 0.0}


def throughput_and_latency(url: str, connections: int, seconds: int, body: str = BODY,
                           credential: dict[str, str] = BEARER) -> dict[str, float]:
    if have_wrk():
        return wrk(url, connections, seconds, body, credential=credential)
    return asyncio.run(_python_load(url, connections, seconds, body, credential))


async def _first_chunk(url: str, n: int, body: str = STREAM_BODY) -> list[float]:
    out: list[float] = []
    async with aiohttp.ClientSession() as s:
        for i in range(n + 20):
            t0 = time.perf_counter()
            async with s.post(url, data=body, headers=HEADERS) as r:
                await r.content.readany()
                first = (time.perf_counter() - t0) * 1000
                await r.read()
            if i >= 20:  # warm-up
                out.append(first)
    return out


def time_to_first_chunk(url: str, n: int, body: str = STREAM_BODY) -> dict[str, float]:
    samples = asyncio.run(_first_chunk(url, n, body))
    q = statistics.quantiles(samples, n=100)
    return {"ttfc_p50_ms": q[49], "ttfc_p99_ms": q[98]}


Side = tuple[str, str, dict[str, str]]  # URL, body, the key's header


async def _first_chunk_pairs(sides: tuple[Side, Side], n: int) -> tuple[list[float], list[float]]:
    out: tuple[list[float], list[float]] = ([], [])
    async with aiohttp.ClientSession() as s:
        for i in range(n + 20):
            for side in ((0, 1) if i % 2 == 0 else (1, 0)):
                url, body, credential = sides[side]
                t0 = time.perf_counter()
                async with s.post(url, data=body, headers={"Content-Type": "application/json", **credential}) as r:
                    await r.content.readany()
                    first = (time.perf_counter() - t0) * 1000
                    await r.read()
                if i >= 20:  # warm-up
                    out[side].append(first)
    return out


def first_chunk_delta(url: str, bodies: tuple[str, str], n: int, *,
                      sides: tuple[Side, Side] | None = None) -> dict[str, float]:
    """Time to the first chunk of two requests taken in turns on one connection (the order
    alternating), so that both see the same moments of a noisy host: the medians of each and
    the median of the per-pair differences (second minus first). ``sides``, when given, are
    the two requests whole (URL, body, key header: a Gemini client against a chat one) and
    ``url`` and ``bodies`` are not read."""
    pair = sides or ((url, bodies[0], BEARER), (url, bodies[1], BEARER))
    a, b = asyncio.run(_first_chunk_pairs(pair, n))
    return {"a_ms": statistics.median(a), "b_ms": statistics.median(b),
            "delta_ms": statistics.median(y - x for x, y in zip(a, b, strict=True))}
