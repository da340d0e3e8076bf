"""What the step-time curve learns from, and what it must not: windows that mix fleet sizes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailguard.policy import PolicyState

from .helpers import CONFIG, Run, healthy


def _fit_weight(state: PolicyState) -> float:
    return state.fit[0]


def test_windows_that_mix_fleet_sizes_teach_no_curve() -> None:
    run = Run(config=replace(CONFIG, max_replicas=32), replicas=14)
    run.hold(lambda n: healthy(140.0, 14), 600.0)
    floor, weight = run.state.step_floor_s, _fit_weight(run.state)
    assert floor is not None
    # The fleet fell to one replica: for a rate window the sums still hold the work of the
    # fourteen that served it, and divided by the one reporting now they put fourteen replicas'
    # batch on one step.
    run.replicas = 1
    for _ in range(4):
        run.step(healthy(140.0, 14, reporting_pods=1, ready_replicas=1))
    assert run.state.step_floor_s == floor
    assert _fit_weight(run.state) == weight
    # Once one replica served a whole window, its windows teach again.
    run.hold(lambda n: healthy(10.0, 1), 180.0)
    assert _fit_weight(run.state) > 0.9 * weight
    assert run.state.step_floor_s == pytest.approx(floor, rel=0.05)
