# A kind cluster built entirely on this machine (node image, control-plane images, kind itself from
# their Go modules and Debian packages). Opt-in: not part of `make test` or CI. See docs/testing.md.
.PHONY: kind-tools kind-node-image kind-up kind-down kind-env test-kind

KIND_HARNESS := PYTHONPATH=$(CURDIR)/e2e $(PY) -m containers

kind-tools: venv ## build kind, containerd 2, kubelet/kubeadm, CoreDNS and pause from their Go modules (cached)
	@$(KIND_HARNESS) kind-tools

kind-node-image: docker-up base-image kind-tools ## build the kind node image tailguard/kind-node (cached by recipe)
	@$(KIND_HARNESS) kind-node-image

kind-up: kind-node-image ## create the kind cluster `tailguard` (or find it) with fake nvidia.com/gpu; prints KUBECONFIG
	@$(KIND_HARNESS) kind-up

kind-down: venv ## delete the kind cluster `tailguard`
	@$(KIND_HARNESS) kind-down

kind-env: venv ## print `export KUBECONFIG=...` for the kind cluster
	@$(KIND_HARNESS) kind-env

test-kind: cluster-tools images kind-node-image ## the kind tier: helm install, Prometheus in the cluster, a burst through the Service (KIND_ARGS for pytest)
	TAILGUARD_REQUIRE_KIND=1 $(BIN)/pytest e2e/kind -m kind -v $(KIND_ARGS)

.PHONY: test-kind-vllm
test-kind-vllm: cluster-tools images image-vllm-cpu kind-node-image ## one real vLLM (CPU) replica in kind, read through Prometheus (image ~6.5 GB; KIND_ARGS for pytest)
	TAILGUARD_REQUIRE_KIND_VLLM=1 $(BIN)/pytest e2e/kind -m kind_vllm -v $(KIND_ARGS)
