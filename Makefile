PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The AWS SAM CLI lives in a virtualenv of its own: its pinned dependencies must not meet the
# project's. tests/test_packaging.py runs `sam build` and `sam validate` with it.
SAM_VENV := .sam-venv
SAM_CLI_VERSION := 1.170.0
SAM_STAMP := $(SAM_VENV)/aws-sam-cli-$(SAM_CLI_VERSION)

.PHONY: test lint sam demo fuzz clean

$(BIN)/queuemesh: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $@

sam: $(SAM_STAMP)

$(SAM_STAMP):
	rm -rf $(SAM_VENV)
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet 'aws-sam-cli==$(SAM_CLI_VERSION)'
	touch $@

lint: $(BIN)/queuemesh
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint sam
	$(BIN)/pytest

demo: $(BIN)/queuemesh
	$(BIN)/queuemesh demo

# 100,000 generated Kinesis events through the decoder and the handler (load/fuzz.py); a few
# minutes, not part of `make test`.
fuzz: $(BIN)/queuemesh
	$(BIN)/python -m load.fuzz

clean:
	rm -rf $(VENV) $(SAM_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
