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


def test_a_fleet_grown_before_the_relief_sheds_the_margins_replica_once_the_budget_lasts() -> None:
    """After five minutes of lead-in the gain has not yet climbed past the quantile's top: the
    load is sized at the target utilization, and the fleet the margin asks for (more than seven)
    serves it. Once the budget has lasted with room over the short and the long window, the band
    below the relieved utilization (three Poisson spreads of the window's count) lets the fleet
    shed the margin's replica: seven, within the target. Chance within what the shed fleet was
    judged to hold takes no replica back, so the fleet only ever shrinks."""
    scenario = steady_70b(2400.0, lead_s=300.0)
    config = scenario.policy_config()
    result = simulate(scenario.trace, Tailguard(config), scenario.fleet(scenario.lead_in_schedule[-1]))
    fleet = [row.desired for row in result.timeline if row.time >= 0.0]
    assert fleet[0] > 7, fleet
    assert set(fleet[-len(fleet) // 4 :]) == {7}, fleet
    assert summarise(result, scenario.slo).attainment >= 0.99
    sizes = [to for _, _, to in result.scale_events]
    assert sizes == sorted(sizes, reverse=True), result.scale_events
    shed = [
        row.action.reason
        for row in result.timeline
        if row.action is not None and "spreads of chance" in row.action.reason
    ]
    assert shed, "the reason names the shed"
