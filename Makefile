# tailguard: every task a developer or CI runs. `make help` lists them.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
BIN := $(abspath $(VENV))/bin
export PATH := $(BIN):$(PATH)

.DEFAULT_GOAL := help
.PHONY: help venv crds generate render lint test test-unit clean

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

venv: $(VENV)/.installed ## create .venv with tailguard and its dev tools

$(VENV)/.installed: pyproject.toml
	@echo ">> installing tailguard and its dev tools into $(VENV)"
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

crds: venv ## regenerate crds/ from the pydantic models
	$(BIN)/tailguard crds --out crds

generate: crds chart-sync api-docs ## regenerate everything derived from the models: crds/, the chart's copies, docs/api.md

render: venv ## print the objects the operator creates for the 8B example
	$(BIN)/tailguard render -f examples/llama-8b-chat.yaml

lint: venv ## ruff, mypy --strict and the import-layering contracts
	$(BIN)/ruff check operator e2e
	$(BIN)/ruff format --check operator e2e
	$(BIN)/mypy operator/src/tailguard
	$(BIN)/lint-imports

test-unit: venv ## unit tests only (no cluster)
	$(BIN)/pytest operator/tests -q

test: lint cluster-tools ## lint, unit and integration tests (real API server; builds the cluster tools once)
	TAILGUARD_REQUIRE_CLUSTER=1 $(BIN)/pytest -q -m "not e2e and not engine and not images and not kind and not kind_vllm"

clean: ## remove build and test caches (keeps .venv)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache

-include mk/*.mk
