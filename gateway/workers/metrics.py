"""One ``/metrics`` for the machine when several workers serve the port.

A scrape reaches one worker (the kernel picks it). That worker asks every other worker for its
own exposition over their private unix sockets and adds them up, so any scrape sees the totals
of the whole machine and counters never go backwards because a different worker answered.

Why not prometheus_client's multiprocess mode: it keeps every value in a shared mmap file and
takes a lock on each increment, which puts a cost on every request (the hot-path counters here
are plain dict adds; see gateway/telemetry.py), needs its directory wiped at each start, and
cannot express the circuit gauge, which is read from the state store at scrape time. Gathering
at scrape time costs nothing between scrapes; a scrape costs one local round trip per worker.

A worker that has crashed and been restarted starts its counters from zero; the sum then drops,
which Prometheus's ``rate``/``increase`` read as a counter reset, as they do for a restarted
single process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence

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
}
WORKERS_REPORTING = "llm_gateway_workers_reporting"

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


def merge(expositions: Sequence[str], reporting: int | None = None) -> bytes:
    """Text expositions of the same metrics (one per worker) as one exposition: counters and
    histograms summed, gauges by their ``GAUGE_RULES``, ``_created`` the earliest.
    ``reporting``: also expose how many workers' numbers are in it."""
    families: dict[str, _Family] = {}
    for text in expositions:
        for fam in text_string_to_metric_families(text):
            found = families.get(fam.name)
            if found is None:
                found = families[fam.name] = _Family(fam.name, fam.documentation, fam.type)
            for s in fam.samples:
                found.add(s.name, s.labels, s.value)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed([f.metric() for f in families.values()], reporting))
    return generate_latest(registry)


class _Fixed:
    def __init__(self, metrics: list[Metric], reporting: int | None) -> None:
        self._metrics = metrics
        self._reporting = reporting

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics
        if self._reporting is not None:
            doc = "Workers whose numbers this scrape adds up (of server.workers)."
            m = Metric(WORKERS_REPORTING, doc, "gauge")
            m.add_sample(WORKERS_REPORTING, {}, float(self._reporting))
            yield m


async def gather(peers: Iterable[str], timeout_s: float = 2.0) -> list[str]:
    """The other workers' own expositions; a worker that does not answer in time (restarting,
    stuck) is left out rather than holding up the scrape."""
    answers = await asyncio.gather(*(_fetch(path, timeout_s) for path in peers))
    return [a for a in answers if a is not None]


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
