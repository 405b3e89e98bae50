# Two commands matter: `make run` and `make test`. Both set up .venv first (idempotent).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test lint typecheck bench clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml client/pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements.txt
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e client -e .
	touch $(STAMP)

# The daemon creates its memory folder (RECALLD_HOME/memory or the platform data dir's) itself.
run: install
	$(BIN)/recalld serve

test: install
	$(BIN)/ruff check daemon client tests $(wildcard bench)
	$(BIN)/mypy
	$(BIN)/python -m pytest -q tests

lint: install
	$(BIN)/ruff check daemon client tests $(wildcard bench)
	$(BIN)/ruff format --check daemon client tests $(wildcard bench)

typecheck: install
	$(BIN)/mypy

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV)
