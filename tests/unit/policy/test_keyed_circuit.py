"""The pure decisions of the keyed circuits (policy/breaker.py), from tables."""

import pytest

from gateway.policy.breaker import (
    CLOSED,
    Admission,
    CircuitRecord,
    Gate,
    admit,
    circuit_key,
    open_period_s,
    should_open,
)

UP, MODEL = circuit_key("p"), circuit_key("p", "m")
NOW = 1000.0

OPEN = CircuitRecord(failures=5, open_until=NOW + 30)
HALF = CircuitRecord(failures=5, open_until=NOW - 1)
STREAK = CircuitRecord(failures=3)


@pytest.mark.parametrize(("upstream", "model", "expected"), [
    (CLOSED, CLOSED, Admission(Gate.ALLOW)),
    (STREAK, STREAK, Admission(Gate.ALLOW)),                 # failing, not yet open
    (CLOSED, OPEN, Admission(Gate.REFUSE, MODEL, 30.0)),
    (OPEN, CLOSED, Admission(Gate.REFUSE, UP, 30.0)),
    (OPEN, HALF, Admission(Gate.REFUSE, UP, 30.0)),          # upstream-wide speaks first
    (HALF, OPEN, Admission(Gate.PROBE, UP, until=NOW - 1)),  # its probe is the one request
    (CLOSED, HALF, Admission(Gate.PROBE, MODEL, until=NOW - 1)),
    (CircuitRecord(open_until=NOW), CLOSED, Admission(Gate.PROBE, UP, until=NOW)),  # the boundary is half-open
    (CLOSED, CircuitRecord(open_until=NOW - 1, probes=3), Admission(Gate.PROBE, MODEL, until=NOW - 1, probes=3)),
])
def test_admit(upstream: CircuitRecord, model: CircuitRecord, expected: Admission) -> None:
    assert admit(UP, upstream, MODEL, model, NOW) == expected


def test_admit_without_a_model_sees_only_the_upstream() -> None:
    assert admit(UP, CLOSED, None, OPEN, NOW) == Admission(Gate.ALLOW)


@pytest.mark.parametrize(("rec", "distinct", "opens"), [
    (CircuitRecord(failures=4), None, False),
    (CircuitRecord(failures=5), None, True),                          # a model's own streak
    (CircuitRecord(failures=9, open_until=NOW), None, False),         # already open: no re-open
    (CircuitRecord(failures=5, models=frozenset({"a"})), 2, False),   # one model failing: its own
    (CircuitRecord(failures=5, models=frozenset({"a", "b"})), 2, True),  # provider-wide
    (CircuitRecord(failures=4, models=frozenset({"a", "b"})), 2, False),
    (CircuitRecord(failures=5, models=frozenset({"a", "b"})), 3, False),
])
def test_should_open(rec: CircuitRecord, distinct: int | None, opens: bool) -> None:
    assert should_open(rec, 5, distinct) is opens


def test_keys_are_bounded_and_distinct() -> None:
    long_a, long_b = "x" * 200 + "a", "x" * 200 + "b"
    assert circuit_key("p", long_a) != circuit_key("p", long_b)
    assert len(circuit_key("p", long_a)) < 80
    assert circuit_key("p", "gpt-4o") == "p/gpt-4o"
    assert circuit_key("p") not in {circuit_key("p", m) for m in ("", "*", "p")}


@pytest.mark.parametrize(("failed_probes", "has_fallback", "period"), [
    (0, True, 5.0), (1, True, 5.0), (7, True, 5.0),         # a fallback carries the traffic: short, always
    (0, False, 5.0), (1, False, 10.0), (2, False, 20.0),    # alone: grows with each failed probe ...
    (3, False, 30.0), (50, False, 30.0),                    # ... up to open_s
])
def test_open_period_schedule(failed_probes: int, has_fallback: bool, period: float) -> None:
    assert open_period_s(failed_probes, 5.0, 30.0, has_fallback=has_fallback, rand=0.0) == period
    jittered = open_period_s(failed_probes, 5.0, 30.0, has_fallback=has_fallback, rand=1.0)
    assert jittered == pytest.approx(period * 0.8)  # jitter only ever shortens a period


def test_the_interval_never_exceeds_open_s() -> None:
    assert open_period_s(0, 5.0, 0.5, has_fallback=True, rand=0.0) == 0.5
