"""Generated sections of hand-written pages: a table that restates a constant of the code sits
where the prose about it is, but is written from the code, so it cannot drift from it.

A section is the text between ``<!-- generated: NAME ... -->`` and ``<!-- /generated: NAME -->``
in a page under ``docs/``; only that text is rewritten, the page around it is the author's. The
markers are HTML comments (not rendered) on lines of their own, with a blank line on each side
of the body: Markdown would otherwise read a comment and a table as one HTML block.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gateway.docs_gen.markdown import COMMAND

DOCS_DIR = Path("docs")


@dataclass(frozen=True)
class Section:
    page: str  # under docs/
    name: str
    render: Callable[[], str]  # the body: Markdown, without the markers

    @property
    def path(self) -> Path:
        return DOCS_DIR / self.page


class MissingMarkers(Exception):
    """The page, or the section's markers in it, are not there: nothing to write into."""


def opening(name: str) -> str:
    return f"<!-- generated: {name} (by `{COMMAND}` from the source; do not edit between these markers) -->"


def closing(name: str) -> str:
    return f"<!-- /generated: {name} -->"


def _span(text: str, name: str) -> re.Match[str] | None:
    # The opening marker is matched on its name only, so a reworded comment is still found.
    pattern = rf"^<!-- generated: {re.escape(name)}\b[^\n]*-->\n(?P<body>.*?)^{re.escape(closing(name))}$"
    return re.search(pattern, text, re.M | re.S)


def splice(text: str, section: Section) -> str:
    """``text`` with the section's markers holding what the source says now."""
    found = _span(text, section.name)
    if found is None:
        raise MissingMarkers(f"{section.path}: no {opening(section.name)!r} ... {closing(section.name)!r} "
                             "pair to generate into")  # fmt: skip
    body = section.render().strip("\n")
    marked = f"{opening(section.name)}\n\n{body}\n\n{closing(section.name)}"
    return text[: found.start()] + marked + text[found.end() :]


def read(root: Path, section: Section) -> str:
    path = root / section.path
    if not path.exists():
        raise MissingMarkers(f"{section.path}: no such page to generate {section.name!r} into")
    return path.read_text(encoding="utf-8")
