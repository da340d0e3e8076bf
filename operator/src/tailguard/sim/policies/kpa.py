"""Knative's KPA: concurrency over a stable and a panic window."""

from __future__ import annotations

import math
from collections import deque

from tailguard.sim.fleet import Action, FleetView
from tailguard.sim.policies.base import (
    BuildContext,
    Knob,
    PolicySpec,
    Settings,
    SloAndBounds,
    bounded,
    number,
)


class Kpa:
    """Knative's KPA: desired = observed concurrency / (per-pod target 100 × utilization 0.7); stable
    window 60 s, panic window 6 s (10%), panic when the panic window asks for ≥ 2× the ready pods,
    no scale-down while panicking (and for a stable window after), rates 1000× up and 2× down,
    tick 2 s. Concurrency is running + waiting from the same Prometheus samples as everyone."""

    name = "kpa"

    def __init__(
        self,
        slo: SloAndBounds,
        *,
        target: float = 100.0,
        utilization: float = 0.7,
        stable_s: float = 60.0,
        panic_s: float = 6.0,
        panic_threshold: float = 2.0,
    ) -> None:
        self.slo = slo
        self.interval_s = 2.0
        self.target = target * utilization
        self.stable_s = stable_s
        self.panic_s = panic_s
        self.panic_threshold = panic_threshold
        self.samples: deque[tuple[float, float]] = deque()
        self.panic_since: float | None = None
        self.max_panic = 0

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        conc = view.prometheus.gauge_sum(now, lambda s: float(s.running + s.waiting))
        if conc is None:
            return Action(current, reason="no metrics")
        self.samples.append((now, conc))
        while self.samples and now - self.samples[0][0] > self.stable_s:
            self.samples.popleft()
        stable = sum(v for _, v in self.samples) / len(self.samples)
        recent = [v for t, v in self.samples if now - t <= self.panic_s] or [conc]
        panic = sum(recent) / len(recent)
        ready = max(1, view.ready)
        desired_stable = math.ceil(stable / self.target)
        desired_panic = math.ceil(panic / self.target)
        over = (panic / self.target) / ready >= self.panic_threshold
        if over:
            self.panic_since = now
        elif self.panic_since is not None and now - self.panic_since > self.stable_s:
            self.panic_since = None
            self.max_panic = 0
        if self.panic_since is not None:
            desired = max(desired_panic, self.max_panic, current)
            self.max_panic = desired
        else:
            desired = desired_stable
        recommended = desired
        desired = min(desired, math.ceil(1000.0 * ready))
        desired = max(desired, math.floor(ready / 2.0))
        desired = bounded(self.slo, desired)
        mode = "panic" if self.panic_since is not None else "stable"
        return Action(desired, reason=f"{mode} concurrency {stable:.0f}", recommended=recommended)


def _make(ctx: BuildContext, settings: Settings) -> Kpa:
    return Kpa(
        ctx.slo,
        target=number(settings, "target"),
        utilization=number(settings, "utilization"),
        stable_s=number(settings, "stable_s"),
        panic_s=number(settings, "panic_s"),
        panic_threshold=number(settings, "panic_threshold"),
    )


SPEC = PolicySpec(
    name="kpa",
    describe="Knative KPA on concurrency (running + waiting)",
    knobs=(
        Knob("target", 100.0, "per-pod concurrency target", minimum=0.0, inclusive=False),
        Knob(
            "utilization",
            0.7,
            "share of the target the pods are sized to",
            minimum=0.0,
            inclusive=False,
            maximum=1.0,
        ),
        Knob("stable_s", 60.0, "stable window, seconds", minimum=0.0, inclusive=False),
        Knob("panic_s", 6.0, "panic window, seconds", minimum=0.0, inclusive=False),
        Knob(
            "panic_threshold",
            2.0,
            "panic when the panic window asks for this many times the ready pods",
            minimum=1.0,
        ),
    ),
    make=_make,
    grid=(
        *({"target": t} for t in (50.0, 100.0, 200.0)),
        {"target": 100.0, "panic_threshold": 3.0},
    ),
)
