"""Circuit-breaker decisions, pure: records in, a gate out. The state lives in a store
(``gateway/state/shared.py``), so replicas share it; times are passed in.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


# A model-specific outage (one model's deployment is down) must not refuse the provider's other
# models, yet a provider-wide outage must still open fast. So there are two circuits per request:
#
#   (upstream, model)   opens after failure_threshold consecutive failures of that model
#   (upstream, *)       opens after failure_threshold consecutive failures of the upstream that
#                       span at least `distinct_models` different models
#
# Any answer that shows the provider is up resets both streaks. Records hold wall-clock epoch
# seconds because replicas share them and share no monotonic clock.

MAX_TRACKED_MODELS = 16  # the upstream-wide record only needs to know "at least N distinct"


@dataclass(frozen=True, slots=True)
class CircuitRecord:
    failures: int = 0  # consecutive provider failures
    open_until: float = 0.0  # epoch seconds; 0 = closed; in the past = half-open (one probe)
    models: frozenset[str] = frozenset()  # distinct models among the failures (upstream-wide)
    probes: int = 0  # half-open probes that failed in a row since the circuit opened


CLOSED = CircuitRecord()


def circuit_key(upstream: str, model: str | None = None) -> str:
    """The store key of a circuit. ``model=None`` is the upstream-wide circuit."""
    if model is None:
        return upstream  # upstream names never hold "/", so no model key can collide with it
    # Model names come from clients: bound the key (it lands in a store) without losing identity.
    return f"{upstream}/{model if len(model) <= 64 else model[:48] + '#' + _short_hash(model)}"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class Gate(enum.StrEnum):
    ALLOW = "allow"  # closed: send
    PROBE = "probe"  # half-open: send only if this request wins the probe claim for `key`
    REFUSE = "refuse"  # open: fail fast for `retry_in_s`


@dataclass(frozen=True, slots=True)
class Admission:
    gate: Gate
    key: str | None = None  # the circuit this decision is about (the probe's key for PROBE)
    retry_in_s: float = 0.0
    until: float = 0.0  # PROBE: the open period that ended (each period has one probe to claim)
    probes: int = 0  # PROBE: the failed probes before this one


def admit(upstream_key: str, upstream: CircuitRecord, model_key: str | None,
          model: CircuitRecord, now: float) -> Admission:
    """Decide one request from both circuits. The upstream-wide one speaks first: while it is
    open no model may be tried, and its probe is the only request that goes."""
    for key, rec in ((upstream_key, upstream), (model_key, model)):
        if key is None or rec.open_until <= 0:
            continue
        if rec.open_until > now:
            return Admission(Gate.REFUSE, key, rec.open_until - now)
        return Admission(Gate.PROBE, key, until=rec.open_until, probes=rec.probes)
    return Admission(Gate.ALLOW)


# How long a circuit stays open before its next probe. A failed probe must not blind the
# gateway to a recovered upstream for a whole open_s:
#
#   with a fallback     every period is probe_interval_s: the fallback carries the traffic, and
#                       every second on it is a second not on the primary; a probe costs one
#                       request's detour (one attempt, then the fallback), one at a time.
#   without a fallback  probe_interval_s, doubled by each failed probe, up to open_s: refused
#                       requests get a 503 either way, so probing often buys little and a
#                       long outage should cost the provider little.
#
# Jitter shortens each period by up to a fifth, so circuits that opened together (many models
# of one provider) do not probe in lockstep; it never lengthens one past the schedule.
JITTER = 0.2


def open_period_s(failed_probes: int, interval_s: float, open_s: float, *, has_fallback: bool,
                  rand: float) -> float:
    base = interval_s if has_fallback else interval_s * 2.0 ** min(failed_probes, 32)
    return min(base, open_s) * (1.0 - JITTER * rand)


def should_open(rec: CircuitRecord, threshold: int, distinct_models: int | None = None) -> bool:
    """After a failure was counted into ``rec``: does its circuit open now? ``distinct_models``
    is given for the upstream-wide circuit only."""
    if rec.open_until > 0 or rec.failures < threshold:
        return False
    return distinct_models is None or len(rec.models) >= distinct_models
