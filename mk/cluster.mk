# The local test cluster: real Kubernetes components built from their Go modules, kwok's fake GPU
# nodes and a Prometheus, all on loopback. See docs/testing.md.
.PHONY: cluster-tools cluster-up cluster-down cluster-status cluster-env prometheus-up prometheus-down \
	test-integration e2e-kind cluster-tools-clean

CLUSTER := PYTHONPATH=$(CURDIR)/e2e $(PY) -m cluster

cluster-tools: venv ## build/install the cluster's binaries into ~/.cache/tailguard (idempotent; cold ~15 min)
	@echo ">> cluster tools (cached per version under $${TAILGUARD_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/tailguard}/bin)"
	@$(CLUSTER) tools

cluster-up: cluster-tools ## start etcd, API server, controller-manager, scheduler, kwok + 4x8-GPU fake nodes
	@$(CLUSTER) up

cluster-down: ## stop the local cluster and its Prometheus (no process left behind)
	@$(CLUSTER) down

cluster-status: ## show the local cluster's components, pids and logs
	@$(CLUSTER) status

cluster-env: ## print `export KUBECONFIG=...` for the running cluster (eval "$$(make -s cluster-env)")
	@$(CLUSTER) env

prometheus-up: cluster-tools ## start a loopback Prometheus scraping the targets listed in its targets.json
	@$(CLUSTER) prometheus-up

prometheus-down: ## stop that Prometheus
	@$(CLUSTER) prometheus-down

test-integration: cluster-tools ## integration tests against a fresh local cluster (started and stopped by pytest)
	TAILGUARD_REQUIRE_CLUSTER=1 $(BIN)/pytest e2e/integration -m integration

e2e-kind: venv images kind-node-image ## the integration suite against the kind cluster built here (make kind-up; E2E_ARGS="-k ..." for pytest)
	PY=$(PY) bash e2e/kind/run.sh $(E2E_ARGS)

cluster-tools-clean: ## delete the cached cluster binaries (the next cluster-tools rebuilds them)
	rm -rf "$${TAILGUARD_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/tailguard}/bin" \
		"$${TAILGUARD_CACHE_DIR:-$${XDG_CACHE_HOME:-$$HOME/.cache}/tailguard}/build"
