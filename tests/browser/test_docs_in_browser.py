"""The documentation site as a reader sees it: built, served on loopback, opened in Debian's
Chromium (headless, a fresh profile, nothing fetched but the site) by tests/browser/docs_check.mjs.

`make docs-check` runs it (scripts/docs-deps.sh installs Chromium and playwright-core);
`make test` does not collect it. The screenshots of the home page and of the configuration
reference land in this test's tmp directory (`make docs-check` prints where), never in the repo.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.docs.test_site_build import build_site
from tests.procs import ROOT

PREFIX = Path(os.environ.get("PLAYWRIGHT_CORE_PREFIX", ROOT / ".cache" / "playwright-core"))


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # the request lines would drown the report
        pass


@pytest.fixture
def served_site(tmp_path: Path) -> Iterator[str]:
    site = tmp_path / "site"
    done = build_site(site)
    assert done.returncode == 0, done.stdout + done.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_site_in_chromium(served_site: str, tmp_path: Path) -> None:
    chromium, node = shutil.which("chromium"), shutil.which("node")
    assert chromium and node, "Chromium and node are needed: bash scripts/docs-deps.sh"
    assert (PREFIX / "node_modules" / "playwright-core").is_dir(), "playwright-core: bash scripts/docs-deps.sh"
    shots = tmp_path / "screenshots"
    shots.mkdir()
    done = subprocess.run([node, str(Path(__file__).with_name("docs_check.mjs")), served_site, str(shots)],
                          capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PLAYWRIGHT_CORE_PREFIX": str(PREFIX), "CHROMIUM": chromium})  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    print(f"\nscreenshots: {shots}\n{json.dumps(report, indent=1)}")
    assert report["errors"] == []  # no script error, no request the page could not make
    assert report["home_title"] == "llm-gateway"
    assert report["nav_links"] >= 40 and report["nav_broken"] == []
    assert report["search_index_status"] == 200
    assert any("/errors/loop-breaker/" in href for href in report["search_results"]), report["search_results"]
    assert report["copy_buttons"] == report["code_blocks"] > 0
    assert report["copied"].strip() == report["first_block"].strip()
    assert report["reference_title"].startswith("Configuration")
    for name in ("home.png", "reference-configuration.png"):
        assert (shots / name).stat().st_size > 10_000, name
