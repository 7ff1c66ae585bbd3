#!/usr/bin/env bash
# Stock clients' whole retry loops against a provider that fails for good (the slow tests
# `make test` leaves out), then, with --bench, the direct-versus-gateway table docs/errors/loop-breaker.md quotes.
#   bash scripts/retry-loops.sh            every case of tests/e2e/test_retry_loops.py and
#                                          test_gemini_cli_retries.py (~35 min)
#   bash scripts/retry-loops.sh --bench    also python -m bench.retry_loops (~20 min)
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory venv-dev
bash scripts/test-deps.sh
.venv/bin/python -m pytest -m e2e -p no:randomly -s tests/e2e/test_retry_loops.py tests/e2e/test_gemini_cli_retries.py
if [ "${1:-}" = "--bench" ]; then
  .venv/bin/python -m bench.retry_loops
fi
