# Two commands a newcomer needs: `make run` and `make test`. Both build .venv on the way.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

.PHONY: run test lint bench clean

$(BIN)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

$(BIN)/.dev: $(BIN)/.runtime
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

run: $(BIN)/.runtime
	$(BIN)/python -m gateway --config $(CONFIG)

# The suite needs real servers (Prometheus, wrk-free); scripts/test-deps.sh installs them.
test: $(BIN)/.dev
	bash scripts/test-deps.sh
	$(BIN)/python -m ruff check gateway tests bench
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest

bench: $(BIN)/.dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
