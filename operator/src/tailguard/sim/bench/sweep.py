"""Fair yardsticks: every policy's (GPU-hours, attainment) frontier over its own knob.

A peer at its documented default can be a strawman on a trace (HPA's target of 2 running
requests per pod keeps a 70B fleet at several times the lower bound). Each policy of
``catalogue.SWEPT`` is run at every setting of its registry grid; tailguard's grid sweeps its
goodput target. Against each peer setting, the ratio printed is tailguard's GPU-hours at its
cheapest setting that reaches at least the attainment that peer setting reached, over the peer's
GPU-hours: below 1 tailguard buys the same attainment for less. The attainment compared is capped
at the goodput target: above it a peer buys what the SLO does not ask for (a peer at 1.0000 and
tailguard at 0.9993 both meet a 0.99 target). No interpolation: a tailguard frontier that never
reaches the (capped) attainment gives no ratio and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tailguard.sim import policies as registry
from tailguard.sim.fleet import simulate
from tailguard.sim.policies.base import Setting, Settings, label
from tailguard.sim.report import PolicySummary, summarise
from tailguard.sim.runner import FlatFleet, Scenario, context


@dataclass(frozen=True)
class SweepPoint:
    policy: str
    label: str
    settings: Settings
    summary: PolicySummary


@dataclass(frozen=True)
class Ratio:
    """tailguard against one peer setting: the peer's point and tailguard's cheapest match."""

    peer: SweepPoint
    tailguard: SweepPoint | None

    @property
    def ratio(self) -> float | None:
        if self.tailguard is None:
            return None
        return self.tailguard.summary.gpu_hours / self.peer.summary.gpu_hours


def _one(
    scenario: Scenario, bound: Sequence[int], flat: FlatFleet | None, name: str, settings: Settings
) -> SweepPoint:
    spec = registry.get(name)
    scaler = spec.build(context(scenario, bound, flat), settings)
    run = simulate(scenario.trace, scaler, scenario.fleet(bound[0]))
    return SweepPoint(
        name, label(spec.settings(settings), spec), dict(settings), summarise(run, scenario.slo)
    )


def sweep(
    scenario: Scenario,
    bound: Sequence[int],
    flat: FlatFleet | None,
    policies: Sequence[str],
    *,
    jobs: int = 1,
) -> list[SweepPoint]:
    """Every policy of ``policies`` at every setting of its grid, and at its defaults where the grid
    does not hold them (a peer's documented default is always on its frontier's chart)."""
    tasks: list[tuple[str, dict[str, Setting]]] = []
    for name in policies:
        spec = registry.get(name)
        grid = [dict(s) for s in spec.grid]
        if not any(spec.settings(s) == spec.defaults() for s in grid) and not any(
            k.derived for k in spec.knobs
        ):
            grid.insert(0, {})
        tasks.extend((name, s) for s in grid)
    if jobs <= 1:
        return [_one(scenario, bound, flat, name, s) for name, s in tasks]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(_one, scenario, list(bound), flat, name, s) for name, s in tasks]
        return [f.result() for f in futures]


def pareto(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    """The points no other point beats on both GPU-hours and attainment, cheapest first."""
    ordered = sorted(points, key=lambda p: (p.summary.gpu_hours, -p.summary.attainment))
    out: list[SweepPoint] = []
    best = -1.0
    for point in ordered:
        if point.summary.attainment > best:
            out.append(point)
            best = point.summary.attainment
    return out


def ratios(
    points: Sequence[SweepPoint], goodput: float = 1.0, ours: str = "tailguard"
) -> dict[str, list[Ratio]]:
    """Per peer, each of its frontier points against tailguard's cheapest point that reaches that
    attainment, capped at ``goodput``."""
    mine = [p for p in points if p.policy == ours]
    out: dict[str, list[Ratio]] = {}
    for peer in dict.fromkeys(p.policy for p in points if p.policy != ours):
        for point in pareto([p for p in points if p.policy == peer]):
            wanted = min(point.summary.attainment, goodput)
            reaching = [m for m in mine if m.summary.attainment >= wanted]
            match = min(reaching, key=lambda m: m.summary.gpu_hours) if reaching else None
            out.setdefault(peer, []).append(Ratio(point, match))
    return out


def worst(entries: Sequence[Ratio]) -> Ratio:
    """The peer setting where tailguard compares worst (no match counts as worst)."""
    return max(entries, key=lambda r: float("inf") if r.ratio is None else r.ratio)


def at_target(
    points: Sequence[SweepPoint], peer: str, goodput: float, ours: str = "tailguard"
) -> tuple[SweepPoint | None, SweepPoint | None]:
    """The cheapest setting of ``peer`` and of ``ours`` that reach the target (``None`` where none)."""

    def cheapest(policy: str) -> SweepPoint | None:
        reaching = [p for p in points if p.policy == policy and p.summary.attainment >= goodput]
        return min(reaching, key=lambda p: p.summary.gpu_hours) if reaching else None

    return cheapest(peer), cheapest(ours)
