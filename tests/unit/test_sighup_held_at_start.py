"""SIGHUP is held from the gateway's first line: its default action ends a process, and it was
held only once ``main``'s imports had run (~0.3 s), so a reload sent just after a start (a
sidecar, ``systemctl reload``) ended the gateway with exit 129 and no word (audit).

Each entry point runs in a fresh interpreter with an import hook that notes, when
``gateway.config`` (the first heavy import) is imported, whether SIGHUP is blocked then."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import importlib.abc, runpy, signal, sys
seen = []
class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "gateway.config" and not seen:
            seen.append(signal.SIGHUP in signal.pthread_sigmask(signal.SIG_BLOCK, []))
sys.meta_path.insert(0, Hook())
how, sys.argv = sys.argv[1], ["llm-gateway", "--version"]
try:
    if how == "python -m gateway":
        runpy.run_module("gateway", run_name="__main__", alter_sys=True)
    else:  # the console script's entry point (pyproject.toml)
        from gateway.cli import run
        run()
except SystemExit:
    pass
print("held" if seen == [True] else f"not held: {seen}")
"""


@pytest.mark.parametrize("how", ["python -m gateway", "llm-gateway"])
def test_sighup_is_held_before_the_gateway_imports_its_config(how: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, how], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.splitlines()[-1] == "held", out.stdout + out.stderr


def test_the_console_script_enters_where_sighup_is_held() -> None:
    assert 'llm-gateway = "gateway.cli:run"' in (ROOT / "pyproject.toml").read_text()
