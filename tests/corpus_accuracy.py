"""In-sample and held-out accuracy of the classifier on the corpus, by class.

``python -m tests.corpus_accuracy`` prints the table docs/errors/taxonomy.md shows (between its
``accuracy:start`` / ``accuracy:end`` markers) and rewrites it there with ``--write``.
Only counts are printed for the held-out bodies: which of them fail is never shown, so
the rules cannot be tuned on them by accident (see tests/corpus/README.md).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from gateway.errors import ErrorType
from tests.corpus_cases import HELD_OUT, IN_SAMPLE, classify_case

PAGE = Path(__file__).resolve().parents[1] / "docs" / "errors" / "taxonomy.md"
START, END = "<!-- accuracy:start -->", "<!-- accuracy:end -->"


def score(cases: list[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """(right, total) per expected class."""
    right: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for case in cases:
        want = case["expected"]["type"]
        total[want] += 1
        right[want] += classify_case(case).type.value == want
    return right, total


def _cell(right: int, total: int) -> str:
    return f"{right}/{total}" if total else "–"


def table() -> str:
    (ri, ti), (rh, th) = score(IN_SAMPLE), score(HELD_OUT)
    lines = ["| class | in-sample (rules written on these) | held-out (never looked at) |", "| --- | ---: | ---: |"]
    for t in ErrorType:
        lines.append(f"| `{t.value}` | {_cell(ri[t.value], ti[t.value])} | {_cell(rh[t.value], th[t.value])} |")
    all_i, all_h = sum(ri.values()), sum(rh.values())
    n_i, n_h = sum(ti.values()), sum(th.values())
    lines.append(f"| **all** | {all_i}/{n_i} ({100 * all_i / n_i:.0f}%) | {all_h}/{n_h} ({100 * all_h / n_h:.0f}%) |")
    return "\n".join(lines)


def readme_section(text: str) -> str:
    _, _, rest = text.partition(START)
    body, _, _ = rest.partition(END)
    return body.strip()


def _write() -> None:
    text = PAGE.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    PAGE.write_text(f"{head}{START}\n{table()}\n{END}{tail}")


if __name__ == "__main__":
    if "--write" in sys.argv:
        _write()
    sys.stdout.write(table() + "\n")
