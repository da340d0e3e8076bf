"""KEDA's Prometheus scaler as vLLM production-stack ships it: waiting requests, threshold 5."""

from __future__ import annotations

import math

from tailguard.sim.fleet import Action, FleetView
from tailguard.sim.policies.base import (
    BuildContext,
    HpaBehaviour,
    Knob,
    PolicySpec,
    Settings,
    SloAndBounds,
    number,
)


class Keda:
    """KEDA's Prometheus scaler as vLLM production-stack ships it: ``sum(vllm:num_requests_waiting)``,
    threshold 5 (an AverageValue target, so replicas = ceil(total / 5)), polling 15 s, then the
    HPA's behaviour (tolerance 10%, scale-down stabilization 300 s). The 360 s cooldown applies
    only between 0 and 1 replica, which a minimum of one never reaches."""

    name = "keda"

    def __init__(
        self,
        slo: SloAndBounds,
        *,
        threshold: float = 5.0,
        tolerance: float = 0.1,
        down_window_s: float = 300.0,
    ) -> None:
        self.interval_s = 15.0
        self.threshold = threshold
        self.tolerance = tolerance
        self.behaviour = HpaBehaviour(slo, down_window_s=down_window_s)

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        total = view.prometheus.gauge_sum(now, lambda s: float(s.waiting))
        if total is None:
            return Action(self.behaviour.limit(now, current, current), reason="no metrics")
        rec = math.ceil(total / self.threshold)
        if current and abs(1.0 - total / (self.threshold * current)) <= self.tolerance:
            rec = current
        return Action(self.behaviour.limit(now, current, rec), reason=f"waiting {total:.0f}", recommended=rec)


def _make(ctx: BuildContext, settings: Settings) -> Keda:
    return Keda(
        ctx.slo,
        threshold=number(settings, "threshold"),
        tolerance=number(settings, "tolerance"),
        down_window_s=number(settings, "down_window_s"),
    )


SPEC = PolicySpec(
    name="keda",
    describe="KEDA Prometheus scaler on waiting requests (vLLM production-stack)",
    knobs=(
        Knob("threshold", 5.0, "waiting requests per replica (AverageValue)", minimum=0.0, inclusive=False),
        Knob("tolerance", 0.1, "no change while the metric is within this share of the target", maximum=1.0),
        Knob("down_window_s", 300.0, "scale-down stabilization window, seconds"),
    ),
    make=_make,
    # 30 is llm-d's KEDA recipe (start-up ÷ poll × 1.5).
    grid=tuple({"threshold": t} for t in (1.0, 5.0, 30.0)),
)
