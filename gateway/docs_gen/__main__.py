"""``python -m gateway.docs_gen [--check] [--root DIR]``: write, or check, the reference pages and the
generated sections of hand-written ones."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gateway.docs_gen import PAGES_DIR, stale, write
from gateway.docs_gen.markdown import COMMAND
from gateway.docs_gen.sections import MissingMarkers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=f"Generate {PAGES_DIR}/*.md from the source.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    parser.add_argument("--root", type=Path, default=Path("."), help="the repository root (default: .)")
    args = parser.parse_args(argv)
    if args.check:
        diffs = stale(args.root)
        for diff in diffs:
            print(diff)
        if diffs:
            print(f"\n{len(diffs)} generated page(s) or section(s) out of date; run `{COMMAND}` and commit "
                  "the result.", file=sys.stderr)  # fmt: skip
            return 1
        print(f"{PAGES_DIR} and the generated sections: up to date")
        return 0
    try:
        written = write(args.root)
    except MissingMarkers as e:
        print(e, file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
