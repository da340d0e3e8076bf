# Images built on this machine without a registry: a Debian base from debootstrap, the operator
# image on it, and the tier that runs that image as the chart does. See docs/testing.md.
.PHONY: docker-up docker-down base-image images test-images

CONTAINERS := PYTHONPATH=$(CURDIR)/e2e $(PY) -m containers

docker-up: venv ## start a Docker engine unless one answers (installs Debian's docker.io; log under ~/.cache/tailguard/docker)
	@$(CONTAINERS) engine-up

docker-down: ## stop the dockerd that docker-up started
	@$(CONTAINERS) engine-down

base-image: docker-up ## debootstrap a bookworm + Python 3.11 base and import it as tailguard/python-base:bookworm (cached)
	@$(CONTAINERS) base

images: base-image ## build the operator and engine stand-in images on the local base: tailguard/{operator,engine-standin}:VERSION
	@$(CONTAINERS) operator
	@$(CONTAINERS) standin

test-images: cluster-tools images ## run the operator image as the chart does against the local API server
	TAILGUARD_REQUIRE_CLUSTER=1 TAILGUARD_REQUIRE_IMAGES=1 $(BIN)/pytest e2e/containers -m images -v

.PHONY: image-vllm-cpu
image-vllm-cpu: base-image engine-env ## vLLM for CPUs + the tiny model on the local base: tailguard/engine-vllm-cpu (~6.5 GB; cached by tag)
	@$(CONTAINERS) vllm-cpu
