"""The agent versions scripts/test-deps.sh installs: a test that installs one itself (its
.cache prefix missing, as in a fresh worktree) takes the same version, never npm's newest,
whose behaviour the tests do not describe (an unpinned Claude Code 2.1.197 failed one)."""

from __future__ import annotations

import os
import re
from pathlib import Path

DEPS = Path(__file__).resolve().parents[2] / "scripts" / "test-deps.sh"


def pinned(variable: str) -> str:
    """``variable``'s version: the environment's, else test-deps.sh's default (``X="${X:-1.2.3}"``)."""
    if os.environ.get(variable):
        return os.environ[variable]
    found = re.search(rf'^{re.escape(variable)}="\$\{{{re.escape(variable)}:-([^}}]+)\}}"', DEPS.read_text(), re.M)
    if found is None:
        raise LookupError(f"{variable} is not pinned in {DEPS}")
    return found.group(1)
