# The fleet simulator and its benchmark (operator/src/tailguard/sim).
.PHONY: bench bench-quick bench-seeds bench-frontier bench-lever bench-other bench-queue simulate-example

BENCH_OUT ?= out/bench
BENCH_JOBS ?= 2

bench: venv ## every policy on the benchmark traces: flat fleet, ratios and goals (see docs/benchmarks.md for the time)
	$(PY) -m tailguard.sim.bench --out $(BENCH_OUT) --plots docs/img --frontier

bench-quick: venv ## the benchmark on the stationary trace only (the no-flapping goal and the speed figure)
	$(PY) -m tailguard.sim.bench --out $(BENCH_OUT) --traces poisson

bench-seeds: venv ## tailguard, KPA and static over seeds 1-3 (mean and spread) and the frontier under jumps
	$(PY) -m tailguard.sim.bench --out $(BENCH_OUT)-seeds --seeds 1,2,3 --policies tailguard,kpa,static \
		--frontier --no-speed

bench-frontier: venv ## every policy swept over its knob on every trace; tailguard's GPU-hours at each peer's attainment
	$(PY) -m tailguard.sim.bench --out $(BENCH_OUT)-frontier --plots docs/img --sweep --jobs $(BENCH_JOBS) \
		--policies tailguard,static --no-speed

bench-lever: venv ## tailguard with and without max-batch tuning, side by side, where the cap matters (~3 min)
	$(PY) -m tailguard.sim.bench.lever --jobs $(BENCH_JOBS)

bench-other: venv ## tailguard on twenty-two settings off the benchmark: other rates, profiles, mixes, shapes (seed 1, ~3.5 min on 2 cores)
	$(PY) -m tailguard.sim.bench.other --jobs $(BENCH_JOBS)

bench-queue: venv ## the prefill queue model's p99 TTFT against one simulated replica's, on three mixes (seconds)
	$(PY) -m tailguard.sim.bench.queue --mix code --profile h100-llama3-8b --rates 2,6,8,10,12
	$(PY) -m tailguard.sim.bench.queue --mix long-context --profile h100-llama3.1-8b-128k --rates 0.1,0.2,0.3 \
		--duration-s 1200
	$(PY) -m tailguard.sim.bench.queue --mix chat --profile h100x2-llama3-70b-fp8 --rates 4,8,10

simulate-example: venv ## a 20-minute bursty trace through every policy, outputs in out/simulate
	$(PY) -m tailguard.sim --synthetic bursty --rate 30 --peak-rate 80 --duration-s 1200 \
		--profile h100-llama3-8b --slo-ttft-ms 500 --slo-tpot-ms 50 --out out/simulate
