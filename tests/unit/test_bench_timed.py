"""bench.timed: functions timed in place, counts reset after each dump (issue #38)."""

from __future__ import annotations

import sys
import types

import pytest

from bench.timed import Timings


def test_a_wrapped_function_is_counted_and_timed_until_the_dump_resets_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("timed_target")
    module.double = lambda x: 2 * x  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "timed_target", module)
    timings = Timings()
    timings.wrap("timed_target:double")
    assert [module.double(i) for i in range(3)] == [0, 2, 4]  # type: ignore[attr-defined]
    timings.dump()
    assert "timed timed_target:double: 3 calls" in capsys.readouterr().err
    module.double(5)  # type: ignore[attr-defined]
    timings.dump()  # counting goes on after a dump, from zero
    assert "timed timed_target:double: 1 calls" in capsys.readouterr().err
