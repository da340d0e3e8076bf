"""llm-d's Workload Variant Autoscaler, saturation mode (its default)."""

from __future__ import annotations

from tailguard.sim.fleet import Action, FleetView, PodPhase
from tailguard.sim.policies.base import (
    BuildContext,
    Knob,
    PolicySpec,
    Settings,
    SloAndBounds,
    bounded,
    number,
)


class Wva:
    """llm-d WVA's saturation analyzer: a replica is saturated at KV use ≥ 0.80 or queue ≥ 5; scale up
    by one when every replica is saturated or the spare capacity of the others averages under
    0.10 KV or 3 queue slots; scale down by one when at least two are unsaturated and the load
    would fit on N−1 without triggering; loop 30 s; frozen while a change is under way."""

    name = "wva"

    def __init__(
        self,
        slo: SloAndBounds,
        *,
        kv_threshold: float = 0.8,
        queue_threshold: float = 5.0,
        kv_spare: float = 0.1,
        queue_spare: float = 3.0,
        interval_s: float = 30.0,
    ) -> None:
        self.slo = slo
        self.interval_s = interval_s
        self.kv_threshold = kv_threshold
        self.queue_threshold = queue_threshold
        self.kv_spare = kv_spare
        self.queue_spare = queue_spare

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        if view.ready != current or view.count(PodPhase.STARTING) or view.count(PodPhase.PENDING):
            return Action(current, reason="change in progress")
        kv = view.prometheus.per_pod(now, lambda s: s.kv_cache_usage)
        queue = view.prometheus.per_pod(now, lambda s: float(s.waiting))
        if not kv:
            return Action(current, reason="no metrics")
        free = [p for p in kv if kv[p] < self.kv_threshold and queue.get(p, 0.0) < self.queue_threshold]
        desired = current
        if not free:
            desired = current + 1
        else:
            spare_kv = sum(self.kv_threshold - kv[p] for p in free) / len(free)
            spare_q = sum(self.queue_threshold - queue.get(p, 0.0) for p in free) / len(free)
            if spare_kv < self.kv_spare or spare_q < self.queue_spare:
                desired = current + 1
            elif len(free) >= 2 and current > 1:
                n = len(kv)
                kv_after = sum(kv.values()) / (n - 1)
                q_after = sum(queue.values()) / (n - 1)
                if (
                    self.kv_threshold - kv_after >= self.kv_spare
                    and self.queue_threshold - q_after >= self.queue_spare
                ):
                    desired = current - 1
        return Action(
            bounded(self.slo, desired),
            reason=f"{len(kv) - len(free)} of {len(kv)} saturated",
            recommended=desired,
        )


def _make(ctx: BuildContext, settings: Settings) -> Wva:
    return Wva(
        ctx.slo,
        kv_threshold=number(settings, "kv_threshold"),
        queue_threshold=number(settings, "queue_threshold"),
        kv_spare=number(settings, "kv_spare"),
        queue_spare=number(settings, "queue_spare"),
        interval_s=number(settings, "interval_s"),
    )


SPEC = PolicySpec(
    name="wva",
    describe="llm-d WVA saturation analyzer",
    knobs=(
        Knob(
            "kv_threshold",
            0.8,
            "KV-cache use at which a replica is saturated",
            minimum=0.0,
            inclusive=False,
            maximum=1.0,
        ),
        Knob(
            "queue_threshold",
            5.0,
            "waiting requests at which a replica is saturated",
            minimum=0.0,
            inclusive=False,
        ),
        Knob(
            "kv_spare",
            0.1,
            "scale up when the unsaturated replicas' mean spare KV is under this",
            maximum=1.0,
        ),
        Knob("queue_spare", 3.0, "scale up when their mean spare queue slots are under this"),
        Knob("interval_s", 30.0, "seconds between two analyses", minimum=0.0, inclusive=False),
    ),
    make=_make,
    grid=(
        {"kv_threshold": 0.6, "queue_threshold": 2.0, "queue_spare": 1.0},
        {"kv_threshold": 0.8, "queue_threshold": 5.0},
        {"kv_threshold": 0.9, "queue_threshold": 10.0},
    ),
)
