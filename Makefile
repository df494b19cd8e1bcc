PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: test lint demo clean

$(BIN)/queuemesh: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

lint: $(BIN)/queuemesh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint
	$(BIN)/pytest

demo: $(BIN)/queuemesh
	$(BIN)/queuemesh demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
