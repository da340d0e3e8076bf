"""NVIDIA Dynamo's planner: load mode (step by one on the SLA) and SLA mode (forecast and size)."""

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
    mean_per_pod,
    number,
)


class Dynamo:
    """Dynamo's planner in load mode: every 5 s, one more replica when every engine's TTFT or ITL
    is over its SLA, one fewer when every engine is under 80% of both. The per-engine estimate
    is the engine's mean TTFT and mean inter-token latency over the last minute (Dynamo
    regresses them on engine load; we use what that regression is fitted to). The ITL SLA is
    the TPOT SLO, or 50 ms when none is declared."""

    name = "dynamo"

    def __init__(
        self, slo: SloAndBounds, *, window_s: float = 60.0, interval_s: float = 5.0, down_share: float = 0.8
    ) -> None:
        self.slo = slo
        self.interval_s = interval_s
        self.window_s = window_s
        self.down_share = down_share
        self.itl_sla = slo.tpot_s if slo.tpot_s is not None else 0.05

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        prom = view.prometheus
        ttft = mean_per_pod(prom, now, self.window_s, lambda s: s.ttft_sum, lambda s: float(s.ttft[-1][1]))
        itl = mean_per_pod(prom, now, self.window_s, lambda s: s.itl_sum, lambda s: float(s.itl[-1][1]))
        engines = [p for p in ttft if p in itl]
        desired = current
        low = self.down_share
        if engines:
            if all(ttft[p] > self.slo.ttft_s or itl[p] > self.itl_sla for p in engines):
                desired = current + 1
            elif all(ttft[p] < low * self.slo.ttft_s and itl[p] < low * self.itl_sla for p in engines):
                desired = current - 1
        return Action(bounded(self.slo, desired), reason=f"{len(engines)} engines", recommended=desired)


PREDICTORS = ("constant", "moving-average", "linear")


class DynamoSla:
    """Dynamo's planner in SLA mode: every ``interval_s`` (180 s), forecast the request rate of the
    next interval from the rates of the past ones and run ``ceil(forecast / throughput)``
    replicas, with no headroom. ``throughput`` is what Dynamo's pre-deployment profiling gives:
    requests per second one replica serves at the SLA; with 0 it is taken, in hindsight, from the
    lower bound's schedule of the same trace (the 90th percentile of requests per replica over
    its windows). Predictors: ``constant`` (the last interval), ``moving-average`` (the last
    three) and ``linear`` (a least-squares line through the last four, one interval ahead).
    Dynamo's default ARIMA, Kalman and Prophet predictors are not modelled."""

    name = "dynamo-sla"

    def __init__(
        self, slo: SloAndBounds, *, throughput: float, interval_s: float = 180.0, predictor: str = "constant"
    ) -> None:
        self.slo = slo
        self.interval_s = interval_s
        self.throughput = throughput
        self.predictor = predictor
        self.rates: deque[float] = deque(maxlen=4)

    def forecast(self) -> float:
        rates = list(self.rates)
        if self.predictor == "moving-average":
            recent = rates[-3:]
            return sum(recent) / len(recent)
        if self.predictor == "linear" and len(rates) >= 2:
            n = len(rates)
            mean_x = (n - 1) / 2.0
            mean_y = sum(rates) / n
            slope = sum((i - mean_x) * (r - mean_y) for i, r in enumerate(rates)) / sum(
                (i - mean_x) ** 2 for i in range(n)
            )
            return max(0.0, mean_y + slope * (n - mean_x))
        return rates[-1]

    def step(self, now: float, view: FleetView) -> Action:
        current = view.desired
        rate = view.prometheus.counter_rate(now, self.interval_s, lambda s: s.requests_finished)
        if rate is None:
            return Action(current, reason="no metrics")
        self.rates.append(rate)
        predicted = self.forecast()
        desired = max(1, math.ceil(predicted / self.throughput))
        return Action(
            bounded(self.slo, desired),
            reason=f"forecast {predicted:.1f} req/s at {self.throughput:.1f} per replica",
            recommended=desired,
            capacity_per_replica=self.throughput,
        )


def _make_load(ctx: BuildContext, settings: Settings) -> Dynamo:
    return Dynamo(
        ctx.slo,
        window_s=number(settings, "window_s"),
        interval_s=number(settings, "interval_s"),
        down_share=number(settings, "down_share"),
    )


def _make_sla(ctx: BuildContext, settings: Settings) -> DynamoSla:
    throughput = number(settings, "throughput") or (ctx.profiled_rate or 1.0)
    return DynamoSla(
        ctx.slo,
        throughput=throughput,
        interval_s=number(settings, "interval_s"),
        predictor=str(settings["predictor"]),
    )


SPEC = PolicySpec(
    name="dynamo",
    describe="Dynamo planner, load mode (one replica at a time on the SLA)",
    knobs=(
        Knob("interval_s", 5.0, "seconds between two adjustments", minimum=0.0, inclusive=False),
        Knob(
            "window_s",
            60.0,
            "window of the per-engine mean TTFT and ITL, seconds",
            minimum=0.0,
            inclusive=False,
        ),
        Knob(
            "down_share",
            0.8,
            "scale down when every engine is under this share of both SLAs",
            minimum=0.0,
            inclusive=False,
            maximum=1.0,
        ),
    ),
    make=_make_load,
    grid=tuple({"interval_s": s} for s in (5.0, 30.0, 60.0)),
)

SLA_SPEC = PolicySpec(
    name="dynamo-sla",
    describe="Dynamo planner, SLA mode (forecast the rate, size by profiled throughput)",
    knobs=(
        Knob("predictor", "constant", "load predictor", choices=PREDICTORS),
        Knob(
            "interval_s",
            180.0,
            "seconds between two adjustments (and the rate window)",
            minimum=0.0,
            inclusive=False,
        ),
        Knob("throughput", 0.0, "req/s one replica serves at the SLA (0: profiled in hindsight)"),
    ),
    make=_make_sla,
    grid=(
        {"predictor": "constant"},
        {"predictor": "moving-average"},
        {"predictor": "linear", "interval_s": 60.0},
    ),
)
