"""In-sample and held-out accuracy of the classifier on the corpus, by class.

``python -m tests.corpus_accuracy`` prints what docs/errors/taxonomy.md shows between its
``accuracy:start`` / ``accuracy:end`` markers (the corpus's size, how its held-out part was
chosen, and the table) and rewrites it there with ``--write``. The sizes are generated too:
written by hand they went stale as bodies were added.
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


# How each file of tests/corpus/heldout/ was chosen (tests/corpus/README.md): a new file needs a line.
HOW_HELD_OUT = {
    "heldout.json": "split off by a hash of the name when the bodies for #22 were collected",
    "heldout_after.json": "collected after the rules were rewritten and put straight into `tests/corpus/heldout/`",
    "heldout_36.json": "split off by the same hash from the bodies collected for #36",
}


def summary() -> str:
    """The corpus's size and how its held-out part was chosen, as the page states them."""
    providers = {c["provider"] for c in IN_SAMPLE + HELD_OUT}
    by_file = Counter(c["file"] for c in HELD_OUT)
    unexplained = set(by_file) - set(HOW_HELD_OUT)
    assert not unexplained, f"say how {sorted(unexplained)} was held out in HOW_HELD_OUT"
    parts = ", ".join(f"{by_file[f]} {how}" for f, how in HOW_HELD_OUT.items() if by_file[f])
    return (f"The corpus is {len(IN_SAMPLE) + len(HELD_OUT)} real error bodies from {len(providers)} providers, "
            f"servers, gateways and CDNs, each with its source (`tests/corpus/`); {len(HELD_OUT)} of them are "
            f"held out, never used while writing the rules and only counted: {parts}.")


def section() -> str:
    """What the page holds between its markers."""
    return f"{summary()}\n\n{table()}"


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
    PAGE.write_text(f"{head}{START}\n{section()}\n{END}{tail}")


if __name__ == "__main__":
    if "--write" in sys.argv:
        _write()
    sys.stdout.write(section() + "\n")
