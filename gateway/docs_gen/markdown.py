"""What every generated page shares: its first line, and table cells."""

from __future__ import annotations

COMMAND = "python -m gateway.docs_gen"


def generated_header() -> str:
    """The page's first line: generated, by which command (an HTML comment: not rendered)."""
    return f"<!-- Generated from the source by `{COMMAND}`; do not edit: change the source, rerun it. -->"


def cell(text: str) -> str:
    """``text`` as one table cell: a pipe outside a code span would end the cell, a newline the row."""
    parts = text.replace("\n", " ").split("`")
    # A pipe outside a code span is escaped (the even parts); the type column writes a union's
    # pipes outside its code spans for that reason, and code spans are left as they are.
    return "`".join(p.replace("|", "\\|") if i % 2 == 0 else p for i, p in enumerate(parts))
