"""A capacity raise read while the step-time curve is still at its prior stands for the load a
replica served, not for a share of whatever the curve learns later. Through the simulator: a
conversation day around 60 req/s on 8B replicas, p99 TTFT 500 ms, whose lead-in raised the
correction to 1.21 in its second minute (23.9 req/s served where the prior promised 19.7). The
curve then learned about 25 req/s, about what a replica finishes at a full batch; multiplied by
the raise the hour was sized with 31.5, and the ramp broke the SLO at each replica it crossed
(0.9693, where a flat fleet of four reaches the target)."""

from __future__ import annotations

import re

from tailguard.sim.bench.other import OtherSetting, scenario_of
from tailguard.sim.oracle import met
from tailguard.sim.runner import run

CONVERSATION_DAY = OtherSetting(
    "chat-diurnal-60", "h100-llama3-8b", "chat", "diurnal --rate 60", "--slo-ttft-ms 500"
)
_CAPACITY = re.compile(r"capacity ([0-9.]+) req/s per replica \(bound")


def test_a_conversation_day_is_sized_at_what_a_replica_serves() -> None:
    scenario = scenario_of(CONVERSATION_DAY, seed=3)
    result = run(scenario, ["tailguard"], progress=False)
    (measured,) = result.runs
    capacities = [
        float(found.group(1))
        for row in measured.timeline
        if row.action is not None and (found := _CAPACITY.search(row.action.reason)) is not None
    ]
    assert capacities, "every decision names the capacity it sized with"
    # a replica finishes about 25 req/s at a full batch; the compounded raise read up to 31.5
    assert max(capacities) < 27.0, max(capacities)
    good = met(measured.ttft, measured.tpot, scenario.slo)
    assert good.mean() >= scenario.slo.goodput
