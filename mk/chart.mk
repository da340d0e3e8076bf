# The Helm chart, the operator image and the generated docs. Included by the top-level Makefile.

CHART_DIR := charts/tailguard
# helm: $(HELM) if set, else on PATH, else the per-user tool cache that `make cluster-tools` fills.
TOOL_CACHE = $(or $(TAILGUARD_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/tailguard)
HELM_BIN = $(or $(HELM),$(shell command -v helm 2>/dev/null),$(lastword $(sort $(wildcard $(TOOL_CACHE)/bin/helm-*/helm))))
IMAGE_REPO ?= ghcr.io/tailguard/operator
IMAGE_VERSION ?= $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE ?= $(IMAGE_REPO):$(IMAGE_VERSION)

.PHONY: chart-sync api-docs helm-lint test-chart chart-package image image-push

chart-sync: crds ## copy the CRDs, RBAC rules and dashboard into the chart
	$(PY) operator/tests/chart/chart_files.py

api-docs: venv ## regenerate docs/api.md from the API models
	$(PY) -m tailguard.api.reference > docs/api.md

helm-lint: ## helm lint --strict the chart (needs helm: make cluster-tools)
	@test -n "$(HELM_BIN)" || { echo "helm not found: set HELM, put helm on PATH, or run 'make cluster-tools'" >&2; exit 1; }
	$(HELM_BIN) lint --strict $(CHART_DIR)

test-chart: venv ## chart, dashboard, image and docs tests (template tests need helm)
	$(BIN)/pytest operator/tests/chart -q

chart-package: ## package the chart into out/
	@test -n "$(HELM_BIN)" || { echo "helm not found: set HELM, put helm on PATH, or run 'make cluster-tools'" >&2; exit 1; }
	$(HELM_BIN) package $(CHART_DIR) --destination out

image: ## build the operator image (needs docker with BuildKit): IMAGE=repo:tag
	DOCKER_BUILDKIT=1 docker build -f images/operator/Dockerfile \
	  --build-arg VERSION=$(IMAGE_VERSION) \
	  --build-arg REVISION=$$(git rev-parse HEAD) \
	  --build-arg SOURCE=$$(git config --get remote.origin.url || echo unknown) \
	  -t $(IMAGE) .

image-push: image ## build and push the operator image: IMAGE=repo:tag
	docker push $(IMAGE)
