"""Kubernetes HPA on ``vllm:num_requests_running`` per pod (KServe's documented LLM example)."""

from __future__ import annotations

import math

from tailguard.sim.fleet import Action, FleetView, PodPhase
from tailguard.sim.policies.base import (
    BuildContext,
    HpaBehaviour,
    Knob,
    PolicySpec,
    Settings,
    SloAndBounds,
    number,
)


class Hpa:
    """Kubernetes HPA on a Pods metric: ``vllm:num_requests_running`` averaged per pod, target 2
    (KServe's documented LLM example); sync 15 s, tolerance 10%; pods without metrics count as 0
    when scaling up and at target when scaling down (the HPA's replica calculator)."""

    name = "hpa"

    def __init__(
        self, slo: SloAndBounds, *, target: float = 2.0, tolerance: float = 0.1, down_window_s: float = 300.0
    ) -> None:
        self.interval_s = 15.0
        self.target = target
        self.tolerance = tolerance
        self.behaviour = HpaBehaviour(slo, down_window_s=down_window_s)

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        values = view.prometheus.per_pod(now, lambda s: float(s.running))
        pods = [n for n, ph in view.pod_phases().items() if ph is not PodPhase.PENDING]
        metrics = {p: v for p, v in values.items() if p in pods}
        missing = [p for p in pods if p not in metrics]
        if not metrics:
            return Action(self.behaviour.limit(now, current, current), reason="no metrics")
        ratio = sum(metrics.values()) / len(metrics) / self.target
        if not missing:
            rec = current if abs(1.0 - ratio) <= self.tolerance else math.ceil(ratio * len(metrics))
        else:
            fill = self.target if ratio < 1.0 else 0.0
            total = sum(metrics.values()) + fill * len(missing)
            new_ratio = total / (len(metrics) + len(missing)) / self.target
            if (
                abs(1.0 - new_ratio) <= self.tolerance
                or (ratio < 1.0 < new_ratio)
                or (ratio > 1.0 > new_ratio)
            ):
                rec = current
            else:
                rec = math.ceil(new_ratio * (len(metrics) + len(missing)))
                if (new_ratio < 1.0 and rec > current) or (new_ratio > 1.0 and rec < current):
                    rec = current
        return Action(
            self.behaviour.limit(now, current, rec),
            reason=f"running/pod {ratio * self.target:.1f}",
            recommended=rec,
        )


def _make(ctx: BuildContext, settings: Settings) -> Hpa:
    return Hpa(
        ctx.slo,
        target=number(settings, "target"),
        tolerance=number(settings, "tolerance"),
        down_window_s=number(settings, "down_window_s"),
    )


SPEC = PolicySpec(
    name="hpa",
    describe="Kubernetes HPA on running requests per pod",
    knobs=(
        Knob("target", 2.0, "target vllm:num_requests_running per pod", minimum=0.0, inclusive=False),
        Knob("tolerance", 0.1, "no change while the metric is within this share of the target", maximum=1.0),
        Knob("down_window_s", 300.0, "scale-down stabilization window, seconds"),
    ),
    make=_make,
    # A replica of the benchmark's 70B profile runs about 100 requests at once at the SLO.
    grid=tuple({"target": t} for t in (8.0, 32.0, 64.0, 128.0)),
)
