PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The AWS SAM CLI lives in a virtualenv of its own: its pinned dependencies must not meet the
# project's. tests/integration/test_packaging.py runs `sam build` and `sam validate` with it.
SAM_VENV := .sam-venv
SAM_CLI_VERSION := 1.170.0
SAM_STAMP := $(SAM_VENV)/aws-sam-cli-$(SAM_CLI_VERSION)

.PHONY: test unit lint sam demo fuzz clean

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

# The unit tier alone, in seconds: pure tests, run with moto made unimportable (tests/unit).
unit: $(BIN)/queuemesh
	QUEUEMESH_NO_MOTO=1 $(BIN)/pytest tests/unit

# Every tier: unit (no moto), then integration (moto, loopback servers, builds) and end-to-end
# (the local stack, the demo, the browser).
test: lint sam unit
	$(BIN)/pytest tests/integration tests/e2e

demo: $(BIN)/queuemesh
	$(BIN)/queuemesh demo

# 100,000 generated Kinesis events through the decoder and the handler (load/fuzz.py); a few
# minutes, not part of `make test`.
fuzz: $(BIN)/queuemesh
	$(BIN)/python -m load.fuzz

clean:
	rm -rf $(VENV) $(SAM_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
