"""The flat fleet sized on the lead-in alone (``runner.lead_in_flat``): the yardstick a user who
sized the fleet from the hour before would set, beside the hindsight flat fleet."""

from __future__ import annotations

import numpy as np

from tailguard.sim import synthetic
from tailguard.sim.bench.runs import lead_in_flat_line
from tailguard.sim.oracle import SloTarget
from tailguard.sim.profiles import get_profile
from tailguard.sim.report import PolicySummary
from tailguard.sim.runner import LeadInFlat, Scenario, flat_fleet, lead_in_flat
from tailguard.sim.trace import Trace

SLO = SloTarget(0.5, None, 0.99)


def _busy_lead_in_then_calm(lead_rate: float, rate: float) -> Scenario:
    calm = synthetic.poisson(rate, 600.0, mix=synthetic.CODE, seed=1)
    busy = synthetic.poisson(lead_rate, 600.0, mix=synthetic.CODE, seed=2)
    before = Trace("busy", busy.arrival_s - 600.0, busy.input_tokens, busy.output_tokens)
    trace = Trace("calm", calm.arrival_s, calm.input_tokens, calm.output_tokens, before)
    return Scenario(trace, get_profile("h100-llama3-8b"), SLO, max_replicas=8, seed=1, warmup_s=600.0)


def test_a_fleet_sized_on_a_busier_lead_in_meets_the_calmer_trace_with_more_replicas() -> None:
    scenario = _busy_lead_in_then_calm(lead_rate=30.0, rate=4.0)
    found = lead_in_flat(scenario, [1])
    hindsight, _ = flat_fleet(scenario, [1])
    assert found is not None
    assert found.replicas is not None
    assert found.summary is not None
    assert hindsight.replicas is not None
    assert found.replicas > hindsight.replicas
    assert found.summary.attainment >= SLO.goodput
    assert np.isclose(
        found.summary.gpu_hours, found.replicas * 600.0 / 3600.0, rtol=0.02
    )  # the trace counts, not its lead-in


def test_no_lead_in_no_yardstick() -> None:
    trace = synthetic.poisson(4.0, 120.0, mix=synthetic.CODE, seed=1)
    assert lead_in_flat(Scenario(trace, get_profile("h100-llama3-8b"), SLO), [1]) is None


def test_the_line_says_what_the_fleet_reached_and_tailguards_ratio() -> None:
    summary = PolicySummary("flat", 100, 0, 0.9836, 0.1, 0.5, None, None, 14.0, 14.0, 14, 0, 0, 0, 0.0)
    line = lead_in_flat_line(LeadInFlat(14, summary), 0.99, 15.03)
    assert line == (
        "flat fleet sized on the lead-in: 14 replicas, on the trace 0.9836 (under the target 0.99) "
        "at 14.00 GPU-h; tailguard 1.07x it"
    )
    assert "none within the bounds" in lead_in_flat_line(LeadInFlat(None, None), 0.99, 15.0)
