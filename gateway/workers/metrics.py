"""One ``/metrics`` for the machine when several workers serve the port.

A scrape reaches one worker (the kernel picks it). That worker asks every other worker for its
own exposition over their private unix sockets and adds them up, so any scrape sees the totals
of the whole machine and counters never go backwards because a different worker answered.

Why not prometheus_client's multiprocess mode: it keeps every value in a shared mmap file and
takes a lock on each increment, which puts a cost on every request (the hot-path counters here
are plain dict adds; see gateway/telemetry.py), needs its directory wiped at each start, and
cannot express the circuit gauge, which is read from the state store at scrape time. Gathering
at scrape time costs nothing between scrapes; a scrape costs one local round trip per worker.

A worker that does not answer in time (stuck, busy, dead and not yet restarted) is added from
its last good snapshot: each worker writes every exposition it renders (for a scrape it serves,
or for another worker asking) to a file beside its socket before it is used, so the file holds
the highest numbers any scrape has shown of it, whichever worker served that scrape. Left out
instead, its total vanished from the sum and came back at the next scrape: a dip Prometheus
reads as a counter reset, after which ``rate``/``increase`` count its whole total again. One
file per worker, replaced whole, in the supervisor's private directory (removed at exit);
nothing is held in memory. ``llm_gateway_workers_reporting`` says how many answered this time,
``llm_gateway_workers_stale_seconds`` how old the oldest snapshot used in their place is.

A worker that has crashed and been restarted starts its counters from zero; the sum then drops
once it answers, which Prometheus's ``rate``/``increase`` read as a counter reset, as they do for
a restarted single process.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families


def _add(a: float, b: float) -> float:
    return a + b


# How each gauge merges across workers (tests hold every gauge the app registers to one). A
# gauge adds up only when it counts something of each worker's own; a state, a ratio or a
# reading of something the workers share must not, or N workers read N times too high.
GAUGE_RULES: dict[str, Callable[[float, float], float]] = {
    "llm_gateway_in_flight_requests": _add,  # each worker's own requests
    "llm_gateway_circuit_open": max,  # open for the machine if any worker's view says so
    # A share of a deployment's rate limit, as the last answer a worker got said: the lowest
    # of the workers' last readings, what an exhaustion alert needs ("< 0.1" must fire when
    # any worker saw the limit nearly spent). A worker's reading may be older than another's
    # (one that has not heard from the deployment since): the lowest errs towards the alarm.
    "llm_gateway_deployment_headroom_ratio": min,
    # Each worker reloads on its own: the file is not in force on the machine while any refused it.
    "llm_gateway_config_last_reload_successful": min,
    # Budgets and key expiries: read from config and the shared state store by every worker
    # alike (the same reading, or a newer one: the highest spend is the newest).
    **dict.fromkeys((
        "llm_gateway_budget_usd", "llm_gateway_budget_spent_usd", "llm_gateway_budget_reserved_usd",
        "llm_gateway_budget_resets_at_seconds", "llm_gateway_key_expires_at_seconds",
        "llm_gateway_budget_soft_usd",
    ), max),
}
WORKERS_REPORTING = "llm_gateway_workers_reporting"
WORKERS_STALE = "llm_gateway_workers_stale_seconds"

Key = tuple[str, tuple[tuple[str, str], ...]]


class _Family:
    __slots__ = ("doc", "name", "samples", "type")

    def __init__(self, name: str, doc: str, type_: str) -> None:
        self.name, self.doc, self.type = name, doc, type_
        self.samples: dict[Key, float] = {}  # insertion order: the first exposition's order

    def add(self, sample_name: str, labels: dict[str, str], value: float) -> None:
        key = (sample_name, tuple(labels.items()))
        found = self.samples.get(key)
        if found is None:
            self.samples[key] = value
        elif sample_name.endswith("_created"):
            self.samples[key] = min(found, value)  # the series exists since the earliest worker made it
        elif self.type == "gauge":
            rule: Callable[[float, float], float] = GAUGE_RULES.get(self.name, _add)
            self.samples[key] = rule(found, value)
        else:
            self.samples[key] = found + value

    def metric(self) -> Metric:
        m = Metric(self.name, self.doc, self.type)
        for (sample_name, labels), value in self.samples.items():
            m.add_sample(sample_name, dict(labels), value)
        return m


def merge(expositions: Sequence[str], reporting: int | None = None, stale_s: float | None = None) -> bytes:
    """Text expositions of the same metrics (one per worker) as one exposition: counters and
    histograms summed, gauges by their ``GAUGE_RULES``, ``_created`` the earliest.
    ``reporting``: also expose how many workers answered this scrape, and ``stale_s`` the age of
    the oldest snapshot added for one that did not (None: none was)."""
    families: dict[str, _Family] = {}
    for text in expositions:
        for fam in text_string_to_metric_families(text):
            found = families.get(fam.name)
            if found is None:
                found = families[fam.name] = _Family(fam.name, fam.documentation, fam.type)
            for s in fam.samples:
                found.add(s.name, s.labels, s.value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([f.metric() for f in families.values()], reporting, stale_s))
    return generate_latest(registry)


class _Fixed:
    def __init__(self, metrics: list[Metric], reporting: int | None, stale_s: float | None) -> None:
        self._metrics = metrics
        self._reporting = reporting
        self._stale_s = stale_s

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics
        if self._reporting is not None:
            doc = ("Workers that answered this scrape in time (of server.workers); one that did not "
                   "is added from its last snapshot.")  # fmt: skip
            m = Metric(WORKERS_REPORTING, doc, "gauge")
            m.add_sample(WORKERS_REPORTING, {}, float(self._reporting))
            yield m
            doc = ("Age of the oldest snapshot this scrape added for a worker that did not answer in "
                   "time (0: every worker answered, or none had one).")  # fmt: skip
            m = Metric(WORKERS_STALE, doc, "gauge")
            m.add_sample(WORKERS_STALE, {}, round(self._stale_s or 0.0, 3))
            yield m


def snapshot_of(socket_path: str) -> str:
    """Where the worker on ``socket_path`` keeps its last exposition."""
    return socket_path.removesuffix(".sock") + ".prom"


def keep(path: str, body: bytes) -> None:
    """``body`` as the last snapshot at ``path``: written whole, then renamed over the last one,
    so that a reader never finds half of one."""
    tmp = f"{path}.{threading.get_ident()}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(body)
        os.replace(tmp, path)
    except OSError:
        pass  # a full disk costs a snapshot, never the scrape


_RENDERING = threading.Lock()


def rendered(registry: CollectorRegistry, keep_at: str | None) -> bytes:
    """This worker's exposition (blocking: call it in a thread), also kept at ``keep_at``
    before it is used. One render at a time, so the file is never older than what any scrape
    has been given."""
    if keep_at is None:
        return generate_latest(registry)
    with _RENDERING:
        body = generate_latest(registry)
        keep(keep_at, body)
    return body


@dataclass(frozen=True, slots=True)
class Gathered:
    texts: list[str]  # the other workers' expositions: as they answered, else their last snapshot
    answered: int  # how many answered in time
    stale_s: float | None  # the age of the oldest snapshot used (None: none was)


async def gather(peers: Sequence[str], timeout_s: float = 2.0) -> Gathered:
    """The other workers' own expositions. One that does not answer in time (restarting,
    stuck) does not hold up the scrape: its last snapshot stands in for it (left out only
    when it has none yet)."""
    answers = await asyncio.gather(*(_fetch(path, timeout_s) for path in peers))
    texts = [a for a in answers if a is not None]
    missing = [snapshot_of(p) for p, a in zip(peers, answers, strict=True) if a is None]
    if not missing:
        return Gathered(texts, len(texts), None)
    kept = await asyncio.to_thread(_read_kept, missing)
    now = time.time()
    stale = max((max(0.0, now - mtime) for _, mtime in kept), default=None)
    return Gathered(texts + [text for text, _ in kept], len(texts), stale)


def _read_kept(paths: list[str]) -> list[tuple[str, float]]:
    out = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                out.append((f.read().decode(), os.fstat(f.fileno()).st_mtime))
        except OSError:
            continue  # none yet: it has not rendered since it started
    return out


async def _fetch(path: str, timeout_s: float) -> str | None:
    try:
        connector = aiohttp.UnixConnector(path=path)
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.get("http://worker/metrics/local") as resp,
        ):
            if resp.status != 200:
                return None
            return await resp.text()
    except (aiohttp.ClientError, OSError, TimeoutError):
        return None
