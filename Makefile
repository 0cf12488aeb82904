# recur: `make demo` runs the main job end to end, `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit services venv clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev,spark,otel]"
	touch $(STAMP)

venv: $(STAMP)

services:
	scripts/ensure-services.sh

# The demo needs no browser: every service but chromium and prometheus (the UI and dashboard tests').
demo: venv
	scripts/ensure-services.sh rabbit management redis postgres
	$(BIN)/recur demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

test: venv services lint
	$(BIN)/pytest -n 2 --dist loadgroup

unit: venv
	$(BIN)/pytest tests/unit

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
