"""The error budget through the simulator, on an hour of a prompt-heavy bursty load (code
completion: prompts of about 2,000 tokens, outputs of about 30, bursts of five times the calm that
last well under a minute): a lower target spends no more, and no scale-down window gives up more
than half the fleet. An hour, not half of one: a run's last scale-down window keeps what a late
burst asked for, and in half an hour that end alone decided the order (seed 5: 1.94 GPU-h at 0.90
against 1.87 at 0.95)."""

from __future__ import annotations

import itertools

import pytest

from tailguard.sim import synthetic
from tailguard.sim.fleet import simulate
from tailguard.sim.oracle import SloTarget
from tailguard.sim.policies.tailguard import Tailguard
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import summarise
from tailguard.sim.runner import Scenario

CODE = synthetic.TokenMix("code", 2000, 30, input_sigma=0.6, output_sigma=0.8, input_max=8192, output_max=256)
TARGETS = (0.9, 0.95, 0.99)
SEEDS = (1, 2, 3, 4, 5, 6)


def _run(seed: int, target: float) -> tuple[float, float, list[tuple[float, int, int]]]:
    trace = synthetic.mmpp(6, 30, 3600, base_mean_s=180, burst_mean_s=40, mix=CODE, seed=seed)
    scenario = Scenario(
        trace=trace,
        profile=get_profile("h100-llama3-8b"),
        slo=SloTarget(0.5, None, target),
        max_replicas=16,
        seed=seed,
    )
    result = simulate(trace, Tailguard(scenario.policy_config()), scenario.fleet(2))
    summary = summarise(result, scenario.slo)
    return summary.gpu_hours, summary.attainment, result.scale_events


@pytest.fixture(scope="module")
def runs() -> dict[tuple[int, float], tuple[float, float, list[tuple[float, int, int]]]]:
    return {(seed, target): _run(seed, target) for seed in SEEDS for target in TARGETS}


def test_a_lower_target_spends_no_more_over_the_seeds(runs: dict) -> None:  # type: ignore[type-arg]
    totals = [sum(runs[seed, target][0] for seed in SEEDS) for target in TARGETS]
    assert totals == sorted(totals), totals


def test_a_lower_target_spends_no_more_on_any_seed_beyond_noise(runs: dict) -> None:  # type: ignore[type-arg]
    # A feedback loop is path-dependent: a smaller hold may let one burst through and pay for it
    # in the breach that follows. Allowed: 3% per run (seen: 2.6% on seed 6 at 0.90 against 0.95).
    for seed in SEEDS:
        hours = [runs[seed, target][0] for target in TARGETS]
        for lower, higher in itertools.pairwise(hours):
            assert lower <= higher * 1.03, (seed, hours)


def test_no_window_gives_up_more_than_half_the_fleet(runs: dict) -> None:  # type: ignore[type-arg]
    window = 300.0
    for key, (_, _, events) in runs.items():
        sizes = [(0.0, 2)] + [(t, new) for t, _, new in events]
        for t, new in sizes[1:]:
            at_start = [n for s, n in sizes if s <= t - window][-1:]  # the fleet as the window opened
            largest = max([n for s, n in sizes if t - window < s < t] + at_start + [new])
            assert new >= min(largest - 1, largest / 2) - 1e-9, (key, t, new, largest)
