# The operator's own benchmark against the local control plane (see docs/benchmarks.md).
.PHONY: bench-operator
N ?= 500
bench-operator: venv ## operator scale: N InferenceServices, cycle time, queries per cycle, CPU, writes, RSS
	PYTHONPATH=e2e $(PY) e2e/bench/operator_scale.py -n $(N)

.PHONY: bench-cycle
bench-cycle: venv ## the control cycle's own CPU per service, in-process (no cluster): N services
	PYTHONPATH=e2e $(PY) e2e/bench/cycle_cpu.py -n $(N)

.PHONY: demo test-e2e
demo: cluster-tools ## the main job: local cluster, Prometheus, simulated fleet, operator; a burst and a fall, live; PNG at the end
	PYTHONPATH=e2e $(PY) e2e/demo/run.py

test-e2e: cluster-tools ## end-to-end autoscaling scenarios (simulated fleet, real API server and Prometheus)
	TAILGUARD_REQUIRE_CLUSTER=1 $(BIN)/pytest e2e/scenarios -m e2e -v
