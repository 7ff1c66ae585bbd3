"""At start-up the gateway raises its soft limit on open files to the hard one: each client
and upstream connection is a descriptor, and a soft limit of 1024 was reached by a few hundred
clients (every other client then failed). The hard limit is left as it is."""

from __future__ import annotations

import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")

PROBE = """
import resource
from gateway.listening import raise_open_files_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
got = raise_open_files_limit()
print(got, *resource.getrlimit(resource.RLIMIT_NOFILE), hard)
"""


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    # In a child: the test process keeps its own limits.
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    got, soft, hard, was_hard = (int(n) for n in out.split())
    assert hard == was_hard  # never touched
    if hard == resource.RLIM_INFINITY:
        assert soft == got >= 256
    else:
        assert soft == got == hard > 256
