#!/usr/bin/env bash
# Installs the trace backend tests/trace exports to: Arize Phoenix from PyPI, into its own
# virtualenv (.venv-trace) so that its many dependencies never meet the gateway's. Skipped when
# it is already there. PHOENIX_VERSION pins it (measured with 20.26.1).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
if [ -x .venv-trace/bin/phoenix ] && .venv-trace/bin/python -c 'import phoenix' >/dev/null 2>&1; then
  exit 0
fi
test -x .venv-trace/bin/python || "$PY" -m venv .venv-trace
.venv-trace/bin/python -m pip install -q --upgrade pip
.venv-trace/bin/python -m pip install -q "arize-phoenix==${PHOENIX_VERSION:-20.26.1}"
