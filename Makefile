PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install demo test lint typecheck bench schema clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "need $(PYTHON) on PATH (or make PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/monitor up --duration $${DEMO_SECONDS:-60}

test: $(STAMP)
	$(PY) -m pytest -q $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check monitor tests bench
	$(VENV)/bin/mypy

schema: $(STAMP)
	$(VENV)/bin/monitor schema --output docs/agent-event-v1.schema.json

bench: $(STAMP)
	$(PY) bench/ingest.py

clean:
	rm -rf $(VENV) .monitor .pytest_cache .mypy_cache
