"""The error budget relieves the fixed utilization margin, through the simulator: a stationary
Poisson load of 70 req/s on the 70B replica, which seven replicas serve within the target. The
fixed 93% margin asks for eight; with the budget's headroom the gain climbs past the quantile's
top while the budget lasts, and the fleet sheds the margin's replica without missing the target."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.helpers import steady_70b
from tailguard.sim.fleet import simulate
from tailguard.sim.policies.tailguard import Tailguard
from tailguard.sim.report import summarise

SECONDS = 1200.0


def _run(budget_headroom: bool) -> tuple[float, list[int]]:
    """Attainment, and the fleet at every scrape of the measured run."""
    scenario = steady_70b(SECONDS)
    config = replace(scenario.policy_config(), budget_headroom=budget_headroom)
    result = simulate(scenario.trace, Tailguard(config), scenario.fleet(scenario.lead_in_schedule[-1]))
    fleet = [row.desired for row in result.timeline if row.time >= 0.0]
    return summarise(result, scenario.slo).attainment, fleet


@pytest.mark.parametrize(
    ("budget_headroom", "expected"), [(True, 7), (False, 8)], ids=["relieved", "fixed-margin"]
)
def test_a_steady_load_with_budget_to_spare_runs_on_the_fleet_that_meets_it(
    budget_headroom: bool, expected: int
) -> None:
    attainment, fleet = _run(budget_headroom)
    assert attainment >= 0.99
    assert set(fleet[len(fleet) // 2 :]) == {expected}, fleet
