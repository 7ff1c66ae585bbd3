"""Reference pages generated from the gateway's own source, so that they cannot drift from it.

``python -m gateway.docs_gen`` writes them under ``docs/reference/``; ``--check`` only compares
and exits 1, naming each stale page with a diff, when one differs from what the source says:

- ``configuration.md``: every config key, from the pydantic models of ``gateway/config.py``;
- ``metrics.md``: every metric the app registers;
- ``errors.md``: every error code the gateway makes;
- ``prices.md``: the prices the gateway ships (``gateway/keys/prices.py``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

PAGES_DIR = Path("docs/reference")


def _configuration() -> str:
    from gateway.docs_gen import configuration

    return configuration.render()


def _metrics() -> str:
    from gateway.docs_gen import metrics

    return metrics.render()


def _errors() -> str:
    from gateway.docs_gen import errors

    return errors.render()


def _prices() -> str:
    from gateway.docs_gen import prices

    return prices.render()


# Page file name -> what renders it (imported when rendered: the metrics page builds the app).
PAGES: dict[str, Callable[[], str]] = {
    "configuration.md": _configuration,
    "metrics.md": _metrics,
    "errors.md": _errors,
    "prices.md": _prices,
}


def render_all() -> dict[str, str]:
    return {name: render() for name, render in PAGES.items()}


def write(root: Path) -> list[Path]:
    """Write every page under ``root``; the paths whose content changed."""
    changed = []
    for name, text in render_all().items():
        path = root / PAGES_DIR / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def stale(root: Path) -> list[str]:
    """One diff per page under ``root`` that is missing or differs from what the source says."""
    out = []
    for name, text in render_all().items():
        path = root / PAGES_DIR / name
        old = path.read_text(encoding="utf-8") if path.exists() else ""
        if old != text:
            where = str(PAGES_DIR / name)
            diff = difflib.unified_diff(old.splitlines(), text.splitlines(), f"{where} (committed)",
                                        f"{where} (from the source)", lineterm="", n=1)  # fmt: skip
            out.append("\n".join(diff))
    return out
