"""Reference pages generated from the gateway's own source, so that they cannot drift from it.

``python -m gateway.docs_gen`` writes them under ``docs/reference/``; ``--check`` only compares
and exits 1, naming each stale page with a diff, when one differs from what the source says:

- ``configuration.md``: every config key, from the pydantic models of ``gateway/config.py``;
- ``metrics.md``: every metric the app registers;
- ``errors.md``: every error code the gateway makes;
- ``prices.md``: the prices the gateway ships (``gateway/keys/prices.py``).

It also writes the generated sections of hand-written pages (``sections.py``): the translation
pages' tables of default budgets, effort budgets and finish reasons (``translation.py``).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

from gateway.docs_gen.sections import MissingMarkers, Section, read, splice

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


def all_sections() -> tuple[Section, ...]:
    from gateway.docs_gen import translation

    return translation.SECTIONS


def _spliced(root: Path) -> dict[Path, tuple[str, str]]:
    """Each page holding sections: (its text, its text with every section as the source says).
    Raises MissingMarkers for a page or a pair of markers that is not there."""
    out: dict[Path, tuple[str, str]] = {}
    for section in all_sections():
        old, new = out.get(section.path) or (read(root, section),) * 2
        out[section.path] = (old, splice(new, section))
    return out


def write(root: Path) -> list[Path]:
    """Write every page under ``root``; the paths whose content changed."""
    changed = []
    for name, text in render_all().items():
        path = root / PAGES_DIR / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    for where, (old, new) in _spliced(root).items():
        if old != new:
            (root / where).write_text(new, encoding="utf-8")
            changed.append(root / where)
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
    try:
        spliced = _spliced(root)
    except MissingMarkers as e:
        return [*out, str(e)]
    for page, (old, new) in spliced.items():
        if old != new:
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), f"{page} (committed)",
                                        f"{page} (from the source)", lineterm="", n=1)  # fmt: skip
            out.append("\n".join(diff))
    return out
