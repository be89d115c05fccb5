PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test check lint typecheck bench schema config-docs clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	@# byte-compiled once, on every core: otherwise the test processes that start together
	@# each compile the same dependencies on first import
	$(PY) -m compileall -q -j 0 $(VENV)/lib monitor tests bench >/dev/null || echo "(some files did not byte-compile: imported uncompiled)"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/monitor up --duration $${DEMO_SECONDS:-60}

# The suite mostly waits on brokers, servers and timeouts, so it runs in TEST_WORKERS processes
# (pytest-xdist), each with its own broker and Postgres (or databases on DATABASE_URL's server).
# `loadgroup` keeps the tests that share an expensive module fixture (marked xdist_group) in one
# process. The tests that bound a latency (marked `timing`) run after it, alone on the machine;
# that run collects only the files that hold them.
# tests/assert_cache.py writes pytest's rewritten test modules first, so that the processes
# do not each rewrite them.
TEST_WORKERS ?= 4
TIMING_FILES = $(shell grep -rl 'mark\.timing' tests)

test: $(STAMP)
	$(PY) -m tests.assert_cache
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup -m "not timing" $(PYTEST_ARGS)
	$(PY) -m pytest -q -m timing $(PYTEST_ARGS) $(TIMING_FILES)

# The inner loop: lint, types and the tests that need no broker or Postgres (marked by
# tests/conftest.py), slow statistical cases left to `make test`.
check: lint
	$(PY) -m tests.assert_cache
	$(PY) -m pytest -q -n 2 -m "not stack and not slow and not timing" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check monitor tests bench
	$(VENV)/bin/ruff format --check monitor tests bench
	$(VENV)/bin/mypy

schema: $(STAMP)
	$(VENV)/bin/monitor schema --output docs/agent-event-v1.schema.json

# docs/configuration.md from the declarations of Settings (tests/cli/test_config.py: not stale)
config-docs: $(STAMP)
	$(VENV)/bin/monitor config --markdown --output docs/configuration.md

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) .monitor .pytest_cache .mypy_cache
