# The operator's own benchmark against the local control plane (see docs/benchmarks.md).
.PHONY: bench-operator
N ?= 500
bench-operator: venv ## operator scale: N InferenceServices, cycle time, queries per cycle, RSS
	PYTHONPATH=e2e $(PY) e2e/bench/operator_scale.py -n $(N)
