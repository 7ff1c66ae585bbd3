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


def test_goal_lines_judge_each_goal_from_the_rows() -> None:
    from bench.public import GATEWAY, MINIMAL, TRANSLATED, goal_lines

    rows = {
        MINIMAL: {"rps_per_core": 3000.0},
        GATEWAY: {"added_p99_us": 250.0, "rps_per_core": 4000.0, "sustained_rps": 16000.0, "cpu_us_sustained": 200.0,
                  "per_inflight_kib": 171.0},
        TRANSLATED: {"sustained_rps": 12000.0, "cpu_us_sustained": 260.0},
    }
    scaling = {1: {"rps": 5000.0}, 2: {"rps": 9800.0}, 4: {"rps": 19000.0}}
    table = "\n".join(goal_lines(rows, scaling))
    assert "| added p99 at c=1 ≤ 300 µs | +250 µs | yes |" in table
    assert "| one process ≥ 1.3× the minimal proxy (req/s per core) | 1.33× | yes |" in table
    assert "| translated ≥ 0.9× native (sustained req/s) | 0.75× (CPU/request 1.30× at its best step) | no |" in table
    assert "| memory per in-flight request ≤ 0.2 MiB | 0.167 MiB | yes |" in table
    assert "| workers scale ≥ 0.9 × N (N = 4) | 0.95 | yes |" in table


def test_busy_polling_is_a_target_of_its_own_and_judged_beside_the_default() -> None:
    from bench.public import GATEWAY, MINIMAL, POLLING, TRANSLATED, goal_lines, parse, targets

    assert POLLING in targets(parse([]))  # on by default in the bench, at 300 µs
    assert POLLING not in targets(parse(["--busy-poll-us", "0"]))
    rows = {
        MINIMAL: {"rps_per_core": 3000.0},
        GATEWAY: {"added_p99_us": 420.0, "rps_per_core": 4000.0, "sustained_rps": 16000.0, "cpu_us_sustained": 200.0},
        TRANSLATED: {"sustained_rps": 15000.0, "cpu_us_sustained": 210.0},
        POLLING: {"added_p99_us": 280.0},
    }
    table = "\n".join(goal_lines(rows))
    assert "| added p99 at c=1 ≤ 300 µs | +420 µs (busy polling +280 µs) | with busy polling |" in table
    rows[GATEWAY]["added_p99_us"] = 290.0
    assert "| added p99 at c=1 ≤ 300 µs | +290 µs (busy polling +280 µs) | yes |" in "\n".join(goal_lines(rows))


# wrk 4.1.0's --latency block (Debian's wrk), as it printed it here against the bench mock
# holding each request 1.2 s, and one of the device run's steps: a unit of one letter is
# padded with a space, which once read every p99 of a second or more as missing.
WRK_SECONDS = (
    "  Latency Distribution\n"
    "     50%    1.23s \n"
    "     75%    1.23s \n"
    "     90%    1.23s \n"
    "     99%    1.23s \n"
    "  8 requests in 3.02s, 3.68KB read\n"
)
WRK_MILLIS = """  Latency Distribution
     50%   36.19ms
     75%   60.01ms
     90%  120.55ms
     99%  200.74ms
"""


def test_wrk_percentiles_read_seconds_as_well_as_milliseconds() -> None:
    from bench.load import percentiles_ms

    assert percentiles_ms(WRK_SECONDS) == {"50": 1230.0, "99": 1230.0}
    assert percentiles_ms(WRK_MILLIS) == {"50": 36.19, "99": 200.74}
    assert not passes({"p99_ms": percentiles_ms(WRK_SECONDS)["99"], "errors": 0.0, "socket_errors": 0.0,
                       "requests": 8.0})
