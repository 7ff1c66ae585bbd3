"""The documentation site builds with no warning: `mkdocs build --strict`, as `make docs` runs it.

mkdocs.yml's `validation:` makes a link to a missing page or anchor a warning, so a renamed
heading or a moved page fails here, in `make test`, not on a reader's screen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.procs import ROOT, base_env


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    # NO_MKDOCS_2_WARNING: Material's notice about its successor, printed on every build, is not
    # a warning about these docs.
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=base_env(NO_MKDOCS_2_WARNING="1"))  # fmt: skip


def test_the_site_builds_strictly_with_no_warning(tmp_path: Path) -> None:
    done = build_site(tmp_path / "site")
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "WARNING" not in log, log
    for page in ("index.html", "quick-start/index.html", "reference/configuration/index.html",
                 "search/search_index.json"):
        assert (tmp_path / "site" / page).is_file(), page


def test_every_page_under_docs_is_in_the_navigation() -> None:
    import yaml

    nav = (ROOT / "mkdocs.yml").read_text()
    listed = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            listed.add(node)
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    # mkdocs.yml uses no custom YAML tags, so the safe loader reads it.
    walk(yaml.safe_load(nav)["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - listed == set()
