"""The rate schedules behind the synthetic traces, the idealised reactive policy and the spread
of a benchmark over seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailguard.sim import synthetic
from tailguard.sim.frontier import KnownRatePolicy
from tailguard.sim.report import PolicySummary, spread


@pytest.mark.parametrize("seed", [1, 2, 3], ids=["seed 1", "seed 2", "seed 3"])
def test_mmpp_rate_is_the_schedule_the_trace_was_drawn_from(seed: int) -> None:
    trace = synthetic.mmpp(40, 100, 3600, base_mean_s=480, burst_mean_s=240, seed=seed)
    rate = synthetic.mmpp_rate(40, 100, 3600, base_mean_s=480, burst_mean_s=240, seed=seed)
    minutes = np.arange(0.0, 3600.0, 60.0)
    expected = rate(minutes + 30.0)
    counts, _ = np.histogram(trace.arrival_s, bins=np.append(minutes, 3600.0))
    # Whole minutes inside one state: the arrivals match its rate within Poisson noise.
    seconds = rate(np.arange(0.0, 3600.0)).reshape(60, 60)
    steady = np.all(seconds == seconds[:, :1], axis=1)
    observed = counts[steady] / 60.0
    assert np.all(np.abs(observed - expected[steady]) < 5 * np.sqrt(expected[steady] / 60.0) + 0.5)


def test_step_rate_switches_at_the_step() -> None:
    rate = synthetic.step_rate(40, 80, 3600)
    assert list(rate(np.asarray([0.0, 1799.0, 1800.0, 3599.0]))) == [40, 40, 80, 80]


class _View:
    pass


@pytest.mark.parametrize(
    ("now", "floor", "expected"),
    [(100.0, 0, 4), (1810.0, 0, 4), (1816.0, 0, 8), (100.0, 6, 6), (1900.0, 6, 8)],
    ids=["calm", "jump not seen yet", "jump seen one scrape later", "floor holds", "need above floor"],
)
def test_informed_sizes_exactly_and_late(now: float, floor: int, expected: int) -> None:
    policy = KnownRatePolicy(synthetic.step_rate(40, 80, 3600), per_replica=10.0, floor=floor, delay_s=15.0)
    assert policy.step(now, _View()).replicas == expected  # type: ignore[arg-type]


def _summary(policy: str, attainment: float, gpu_hours: float, reversals: int) -> PolicySummary:
    return PolicySummary(
        policy, 100, 0, attainment, 0.1, 0.5, None, None, gpu_hours, 3.0, 4, 2, reversals, 0, 0.0
    )


def test_spread_gives_mean_min_max_and_each_seed() -> None:
    rows = spread(
        [[_summary("tailguard", 0.99, 10.0, 0)], [_summary("tailguard", 0.97, 14.0, 2)]], [10.0, 10.0]
    )
    assert rows["tailguard"]["attainment"] == pytest.approx((0.98, 0.97, 0.99))
    assert rows["tailguard"]["gpu_hours"] == pytest.approx((12.0, 10.0, 14.0))
    assert rows["tailguard"]["x_bound"] == pytest.approx((1.2, 1.0, 1.4))
    assert rows["tailguard"]["reversals"] == (1.0, 0.0, 2.0, 0.0, 2.0)
    assert math.isnan(rows["lower bound"]["attainment"][0])


def test_diurnal_and_constant_rates_are_the_schedules_of_their_traces() -> None:
    rate = synthetic.diurnal_rate(70, amplitude=0.6, period_s=3600)
    assert list(rate(np.asarray([0.0, 1800.0]))) == pytest.approx([28.0, 112.0])
    trace = synthetic.diurnal(70, 3600, amplitude=0.6, period_s=3600, seed=2)
    counts, _ = np.histogram(trace.arrival_s, bins=np.arange(0.0, 3601.0, 600.0))
    expected = [float(np.mean(rate(np.arange(t, t + 600.0)))) * 600 for t in range(0, 3600, 600)]
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected))
    assert list(synthetic.constant_rate(70)(np.asarray([0.0, 99.0]))) == [70.0, 70.0]


def test_informed_held_by_a_scale_down_window_keeps_the_largest_size_of_the_window() -> None:
    policy = KnownRatePolicy(
        synthetic.step_rate(80, 40, 3600), per_replica=10.0, floor=1, down_window_s=300.0
    )
    assert policy.step(1700.0, _View()).replicas == 8  # type: ignore[arg-type]
    assert policy.step(1900.0, _View()).replicas == 8  # type: ignore[arg-type]  # the fall, within the window
    assert policy.step(2001.0, _View()).replicas == 4  # type: ignore[arg-type]  # the 8 left the window
