"""docs/classification.md keeps a providers x classes table of the corpus; it must not go stale.

The table is computed from tests/corpus/ here. When the corpus changes, rewrite it with
``python -m tests.unit.policy.test_classification_doc`` and commit the doc with the cases.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from gateway.errors import ErrorType

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "corpus"
DOC = ROOT / "docs" / "classification.md"
START, END = "<!-- coverage:start -->", "<!-- coverage:end -->"
CLASSES = [t.value for t in ErrorType]


def corpus_files() -> list[Path]:
    """The in-sample files and the held-out ones: the table counts the whole corpus."""
    return sorted(CORPUS.glob("*.json")) + sorted((CORPUS / "heldout").glob("*.json"))


def coverage_table() -> str:
    counts: Counter[tuple[str, str]] = Counter()
    for path in corpus_files():
        for case in json.loads(path.read_text())["cases"]:
            counts[case["provider"], case["expected"]["type"]] += 1
    providers = sorted({p for p, _ in counts}, key=str.lower)
    lines = [
        f"{len(providers)} providers, {sum(counts.values())} bodies.",
        "",
        "| provider | " + " | ".join(f"`{c}`" for c in CLASSES) + " | total |",
        "| --- |" + " ---: |" * (len(CLASSES) + 1),
    ]
    for p in providers:
        row = [counts[p, c] for c in CLASSES]
        lines.append(f"| {p} | " + " | ".join(str(n) if n else "" for n in row) + f" | {sum(row)} |")
    totals = [sum(counts[p, c] for p in providers) for c in CLASSES]
    lines.append("| **all** | " + " | ".join(str(n) for n in totals) + f" | {sum(totals)} |")
    return "\n".join(lines)


def doc_section(text: str) -> str:
    head, _, rest = text.partition(START)
    body, _, _ = rest.partition(END)
    return body.strip()


def test_coverage_table_in_the_doc_is_current() -> None:
    assert doc_section(DOC.read_text()) == coverage_table(), (
        "docs/classification.md coverage table is stale: run python -m tests.unit.policy.test_classification_doc"
    )


def test_every_case_the_doc_cites_exists() -> None:
    # Rules cite their cases by name (three or more dash-joined words in backticks); a renamed
    # or deleted case must not leave a rule without its evidence.
    names = {c["name"] for p in CORPUS.glob("*.json") for c in json.loads(p.read_text())["cases"]}
    # The doc cites in-sample cases only: a rule is never argued from a held-out body.
    cited = set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9.]+){2,})`", DOC.read_text()))
    assert cited, "the doc cites no cases"
    dangling = sorted(w for w in cited - names if not w.startswith("x-"))  # x-...: header names
    assert not dangling, dangling


def _rewrite() -> None:
    text = DOC.read_text()
    head, _, rest = text.partition(START)
    _, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{START}\n{coverage_table()}\n{END}{tail}")


if __name__ == "__main__":
    _rewrite()
    sys.stdout.write(coverage_table() + "\n")
