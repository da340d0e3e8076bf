"""The issue's goals on one benchmark trace, each met or missed with the measured figure and,
beside it, what the same run says about the goal's reach (the flat fleet, the lower bound, the
idealised reactive policy). Figures are printed as measured, never adjusted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailguard.sim.bench.catalogue import BenchTrace
from tailguard.sim.frontier import Point
from tailguard.sim.runner import ScenarioResult


@dataclass(frozen=True)
class Goal:
    """One goal of the issue on one trace: whether it was met, the figure, and what bounds it."""

    goal: str
    met: bool
    measured: str
    #: What the same run says about the goal's reach (the lower bound, the informed policy).
    note: str = ""

    def line(self) -> str:
        text = f"[{'met' if self.met else 'MISSED'}] {self.goal}: {self.measured}"
        return f"{text} ({self.note})" if self.note else text


def cheapest_informed(points: Sequence[Point], goodput: float) -> Point | None:
    """The informed policy's cheapest floor that reaches the target, if any does."""
    reaching = [p for p in points if p.label.startswith("informed") and p.summary.attainment >= goodput]
    return min(reaching, key=lambda p: p.summary.gpu_hours) if reaching else None


def goals(
    result: ScenarioResult,
    bench: BenchTrace,
    informed: Sequence[Point] | None = None,
    windowed: Point | None = None,
) -> list[Goal]:
    """Each goal of the issue for one trace, with what bounds it when the run can tell.

    ``informed`` are the frontier's points on this run (``--frontier``): the idealised reactive
    policy at each floor says what attainment any policy reading metrics can buy, and at what cost.
    ``windowed`` is that policy held by the declared scale-down window: what the window costs.
    The hindsight flat fleet (``result.flat``) is the yardstick of cost: the fewest fixed
    replicas that reach the target on this trace.
    """
    by = {s.policy: s for s in result.summaries}
    tg = by["tailguard"]
    goodput = result.scenario.slo.goodput
    bound = result.lower_bound_gpu_hours
    cheapest = cheapest_informed(informed, goodput) if informed else None
    reach = []
    flat = by.get("flat")
    if result.flat is not None:
        if result.flat.replicas is None:
            reach.append(f"no fixed fleet up to {result.scenario.max_replicas} replicas reaches it")
        elif flat is not None:
            reach.append(f"a flat fleet of {result.flat.replicas} reaches it at {flat.gpu_hours:.2f} GPU-h")
    if informed and cheapest is None:
        floors = [p for p in informed if p.label.startswith("informed")]
        top = max(floors, key=lambda p: p.summary.attainment)
        reach.append(f"no informed floor reaches it; best {top.summary.attainment:.4f} at {top.label}")
    elif cheapest is not None:
        reach.append(
            f"the informed policy reaches it from {cheapest.label.removeprefix('informed, ')} "
            f"at {cheapest.summary.gpu_hours:.2f} GPU-h, {cheapest.summary.gpu_hours / bound:.2f}x the bound"
        )
    out = [
        Goal(
            "attainment >= goodput target",
            tg.attainment >= goodput,
            f"{tg.attainment:.4f} vs {goodput}",
            "; ".join(reach),
        )
    ]
    if flat is not None and result.flat is not None and result.flat.replicas is not None:
        share = 0.85 if bench.slow else 1.0
        ratio = tg.gpu_hours / flat.gpu_hours
        under = "" if tg.attainment >= goodput else ", under target"
        notes = []
        if cheapest is not None:
            notes.append(
                f"the informed policy at the target needs {cheapest.summary.gpu_hours / flat.gpu_hours:.3f}x"
            )
        out.append(
            Goal(
                f"GPU-hours <= {share:g}x the hindsight flat fleet, at the target",
                ratio <= share and tg.attainment >= goodput,
                f"{ratio:.3f}x ({tg.gpu_hours:.2f} vs {flat.gpu_hours:.2f} GPU-h, "
                f"{result.flat.replicas} replicas{under})",
                "; ".join(notes),
            )
        )
    if bench.bound_goal:
        ratio = tg.gpu_hours / bound
        notes = []
        if windowed is not None:
            notes.append(
                f"held by the declared scale-down window the informed policy needs "
                f"{windowed.summary.gpu_hours / bound:.3f}x (attainment {windowed.summary.attainment:.4f})"
            )
        out.append(Goal("GPU-hours <= 1.2x lower bound", ratio <= 1.2, f"{ratio:.3f}x", "; ".join(notes)))
    if bench.key == "poisson":
        out.append(
            Goal(
                "no direction reversal on stationary Poisson",
                tg.direction_reversals == 0,
                str(tg.direction_reversals),
            )
        )
    return out
