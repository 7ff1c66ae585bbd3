# Two commands a newcomer needs: `make run` and `make test`. Both build .venv on the way.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CONFIG ?= config/gateway.yaml

# `make run` and `make test` started together (two terminals in a fresh clone) must not
# both create and pip-install into the same .venv. Set-up therefore runs in a sub-make
# that holds an exclusive flock(1) on .venv.lock; the sub-make re-checks the stamps once it
# has the lock, so whoever waited finds the work done. Without flock (util-linux; not on
# macOS) set-up simply runs unserialised, as before.
FLOCK  := $(shell command -v flock 2>/dev/null)
LOCKED := $(if $(FLOCK),$(FLOCK) $(VENV).lock) $(MAKE) --no-print-directory

.PHONY: run test test-real test-trace test-deploy lint bench bench-public bench-instructions clean venv venv-dev _locked-runtime _locked-dev docs docs-gen docs-serve docs-check

# The only entry points to set-up; the stamp targets below are built under the lock.
venv:
	@$(LOCKED) _locked-runtime
venv-dev:
	@$(LOCKED) _locked-dev
# (Phony goals with an empty recipe, so an up-to-date .venv prints nothing.)
_locked-runtime: $(BIN)/.runtime
	@:
_locked-dev: $(BIN)/.dev
	@:

$(BIN)/.runtime: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# Only the dev extras, not `pip install -e '.[dev]'`: that would reinstall the gateway
# itself and pull the package from under a `make run` that is already starting.
$(BIN)/.dev: $(BIN)/.runtime
	$(BIN)/python -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["dev"]))' > $(VENV)/dev-requirements.txt
	$(BIN)/python -m pip install -q -r $(VENV)/dev-requirements.txt
	touch $@

run: venv
	$(BIN)/python -m gateway --config $(CONFIG)

# The suite needs real servers (Prometheus, wrk-free); scripts/test-deps.sh installs them.
test: venv-dev
	bash scripts/test-deps.sh
	$(BIN)/python -m ruff check gateway tests bench
	$(BIN)/python -m mypy
	$(BIN)/python -m pytest

# The gateway in front of a real inference server (llama-cpp-python + SmolLM2-135M, 1,024-token
# window), driven by the openai SDK. Separate from `make test` because the server is compiled
# on first use (several minutes; cached under .cache/). scripts/real-deps.sh installs it into
# .venv-real, apart from .venv, so `make test` never sees its dependencies.
test-real: venv-dev
	bash scripts/real-deps.sh
	$(BIN)/python -m pytest tests/real

# Traces received by a real backend: Arize Phoenix from PyPI (about 1 GB with its
# dependencies), installed by scripts/trace-deps.sh into .venv-trace, apart from .venv. The
# in-memory tracing tests (tests/integration/test_tracing.py) are part of `make test`.
test-trace: venv-dev
	bash scripts/trace-deps.sh
	$(BIN)/python -m pytest tests/trace -p no:randomly

# The image from deploy/Dockerfile built and run with podman: one container checked as a
# deployer would, then two replicas and Redis in containers with a real Prometheus scraping
# both. scripts/deploy-deps.sh installs podman and makes the base images from Debian packages.
test-deploy: venv-dev
	bash scripts/deploy-deps.sh
	$(BIN)/python -m pytest tests/container -p no:cacheprovider --override-ini addopts="--strict-markers -ra" -s

# The documentation site (mkdocs.yml, docs/), strictly: a broken link or anchor fails the build.
# The mkdocs packages are in the dev extra, so `make test` builds it too (tests/docs/).
# NO_MKDOCS_2_WARNING: Material's notice about its successor, printed on every build.
docs: venv-dev
	$(BIN)/python -m gateway.docs_gen --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

# Rewrites docs/reference/ (configuration, metrics, errors) from the source.
docs-gen: venv
	$(BIN)/python -m gateway.docs_gen

# On 8001: 8000 is where the quick start's local chat server (vLLM, config/examples/local-vllm.yaml) listens.
docs-serve: venv-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs serve --strict --dev-addr 127.0.0.1:8001

# The built site in a real headless Chromium (Debian's, installed by scripts/docs-deps.sh):
# search, navigation, code copy; screenshots under $(DOCS_CHECK_OUT), not in the repo.
DOCS_CHECK_OUT ?= /tmp/llm-gateway-docs-check
docs-check: venv-dev
	bash scripts/docs-deps.sh
	$(BIN)/python -m pytest tests/browser --basetemp=$(DOCS_CHECK_OUT) -o addopts="--strict-markers -ra"
	@echo "screenshots: $(DOCS_CHECK_OUT)/test_the_site_in_chromium0/screenshots"

bench: venv-dev
	$(BIN)/python -m bench
	$(BIN)/python -m bench.faults
	$(BIN)/python -m bench.tracing
	$(BIN)/python -m bench.translation
	$(BIN)/python -m bench.workers
	$(BIN)/python -m bench.pool_pick
	$(BIN)/python -m bench.public $(if $(filter-out 0,$(BENCH_QUICK)),--quick)

# The published gateway benchmark's method alone (bench/public.py), a few minutes.
bench-public: venv-dev
	$(BIN)/python -m bench.public --quick

# Instructions per request under valgrind (bench/instructions.py): ratios that do not move with
# the host's load, for before/after on a shared machine. About 6 minutes; needs valgrind.
bench-instructions: venv-dev
	$(BIN)/python -m bench.instructions

clean:
	rm -rf $(VENV) $(VENV).lock $(VENV)-real .pytest_cache .mypy_cache .ruff_cache site
