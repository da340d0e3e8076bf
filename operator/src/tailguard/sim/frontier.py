"""What any reactive policy can reach on a load that jumps: an idealised policy and its frontier.

:class:`KnownRatePolicy` is told the trace's true arrival rate (the schedule the synthetic trace was
drawn from) but acts on a change only ``delay_s`` later, as a policy reading metrics must (one
scrape at the least), and its new replicas take the fleet's cold start like anyone's. It sizes
exactly, ``ceil(rate / per_replica)``, never below ``floor`` replicas (headroom held all the
time), and scales down the moment the rate falls. No policy that learns the load from metrics can
detect a jump sooner or size for it more exactly, so sweeping the floor draws the reference for
what attainment reacting can buy per GPU-hour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tailguard.sim.fleet import Action, FleetView, simulate
from tailguard.sim.policies.tailguard import Tailguard
from tailguard.sim.report import PolicySummary, summarise
from tailguard.sim.runner import Scenario, build
from tailguard.sim.synthetic import RateFn


class KnownRatePolicy:
    """Exact sizing for the true rate, ``delay_s`` late, never below ``floor`` replicas.

    With ``down_window_s`` it scales down only to the largest size of that window, as a declared
    scale-down stabilization window makes every policy do.
    """

    def __init__(
        self,
        rate: RateFn,
        *,
        per_replica: float,
        floor: int,
        delay_s: float = 15.0,
        max_replicas: int = 32,
        down_window_s: float = 0.0,
    ) -> None:
        self.rate = rate
        self.per_replica = per_replica
        self.floor = floor
        self.delay_s = delay_s
        self.max_replicas = max_replicas
        self.down_window_s = down_window_s
        self.interval_s = 5.0
        self.name = f"informed-floor{floor}"
        self._recent: list[tuple[float, int]] = []

    def step(self, now: float, view: FleetView) -> Action:
        seen = float(self.rate(np.asarray([max(0.0, now - self.delay_s)], dtype=np.float64))[0])
        need = min(self.max_replicas, max(self.floor, math.ceil(seen / self.per_replica - 1e-9), 1))
        if self.down_window_s > 0:
            self._recent = [(t, n) for t, n in self._recent if now - t < self.down_window_s]
            self._recent.append((now, need))
            need = max(n for _, n in self._recent)
        return Action(need, reason="informed")


@dataclass(frozen=True)
class Point:
    """One policy setting on the frontier."""

    label: str
    summary: PolicySummary


def frontier(
    scenario: Scenario,
    rate: RateFn,
    bound: list[int],
    *,
    per_replica: float,
    floors: Sequence[int],
    tailguard_settings: Sequence[tuple[str, dict[str, Any]]] = (),
    baselines: Sequence[str] = ("static", "kpa"),
) -> list[Point]:
    """Attainment and GPU-hours of the informed policy at each floor, of tailguard with each
    setting (``PolicyConfig`` overrides) and of the named baselines, on one scenario."""
    points: list[Point] = []
    fleet = scenario.fleet(bound[0])
    for floor in floors:
        informed = KnownRatePolicy(
            rate, per_replica=per_replica, floor=floor, max_replicas=scenario.max_replicas
        )
        run = simulate(scenario.trace, informed, fleet)
        points.append(Point(f"informed, floor {floor}", summarise(run, scenario.slo)))
    for label, overrides in tailguard_settings:
        config = replace(scenario.policy_config(), **overrides)
        run = simulate(scenario.trace, Tailguard(config), fleet)
        points.append(Point(f"tailguard {label}".strip(), summarise(run, scenario.slo)))
    for name in baselines:
        run = simulate(scenario.trace, build(name, scenario, bound), fleet)
        points.append(Point(name, summarise(run, scenario.slo)))
    return points


def informed_with_window(scenario: Scenario, rate: RateFn, bound: list[int], *, per_replica: float) -> Point:
    """The informed policy (no floor) bound by the scenario's declared scale-down window: what the
    window alone costs a policy that knows the load."""
    window = scenario.policy_config().scale_down_stabilization_s
    informed = KnownRatePolicy(
        rate, per_replica=per_replica, floor=1, max_replicas=scenario.max_replicas, down_window_s=window
    )
    run = simulate(scenario.trace, informed, scenario.fleet(bound[0]))
    return Point(f"informed, {window:.0f} s scale-down window", summarise(run, scenario.slo))
