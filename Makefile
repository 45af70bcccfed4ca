# Helios: `make test` and `make demo` both work from a fresh clone.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.helios-installed
# The CPU build of torch that lies on these machines' disk; override on other machines.
TORCH_SPEC ?= torch==2.13.0
PYTEST_WORKERS ?= 2
# make demo PORT=8080 serves the demo on another port of 127.0.0.1
PORT ?= 8000

.PHONY: setup test lint demo proto proto-check clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[production,dev]'
	@touch $(STAMP)

lint: setup
	$(PY) -m ruff check .

test: setup lint
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile -q

demo: setup
	$(PY) -m helios.demo --port $(PORT)

proto: setup
	$(PY) -m helios.proto.generate

proto-check: setup
	$(PY) -m helios.proto.generate --check

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
