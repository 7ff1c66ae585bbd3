"""bench.public's pure parts: which cores run what, and the published rule for a step."""

from bench.public import cpu_list, layout, passes


def test_many_cores_partition_load_mock_and_proxy_without_overlap() -> None:
    lay = layout(16, 4)
    load, mock, proxy = set(cpu_list(lay.load)), {int(c) for c in lay.mock}, set(cpu_list(lay.proxy))
    assert lay.comparable and lay.proxy_cores == 4
    assert proxy == {12, 13, 14, 15}
    assert load and mock and not (load & mock) and not ((load | mock) & proxy)


def test_two_cores_run_one_each_and_say_not_comparable() -> None:
    lay = layout(2, 4)
    assert not lay.comparable and lay.proxy_cores == 1
    assert lay.proxy == "1" and lay.load == "0" and lay.mock == ["0"]
    assert "NOT comparable" in lay.note


def test_a_step_passes_under_one_second_p99_and_a_tenth_of_a_percent_errors() -> None:
    ok = {"p99_ms": 999.0, "errors": 0.0, "socket_errors": 9.0, "requests": 10_000.0}
    assert passes(ok)
    assert not passes({**ok, "socket_errors": 10.0})  # 0.1 % breaks the rule
    assert not passes({**ok, "p99_ms": 1000.0})
