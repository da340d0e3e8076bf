# The engine tier: the metric contract against a real vLLM (CPU build) and a real Prometheus.
# The engine stack lives in its own cached virtualenv, never in $(VENV). See docs/engine-contract.md.
.PHONY: engine-env engine-env-check engine-env-clean test-engine

ENGINE_ENV := PYTHONPATH=$(CURDIR)/e2e $(PY) e2e/engine/env.py

engine-env: venv ## install torch + vLLM for CPUs into a cached venv outside the repo (cold ~6 min, ~7 GB)
	@$(ENGINE_ENV) install

engine-env-check: venv ## show that the cached engine env loads (versions, compiled extension)
	@$(ENGINE_ENV) check

engine-env-clean: ## delete every cached engine env (the next engine-env reinstalls)
	@$(ENGINE_ENV) clean

test-engine: engine-env ## real vLLM CPU servers + Prometheus vs the operator's queries (~5 min warm)
	TAILGUARD_REQUIRE_ENGINE=1 $(BIN)/pytest e2e/engine -m engine -v
