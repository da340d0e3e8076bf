"""The peers' rules on hand-built views, and the lower bound."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailguard.sim import synthetic
from tailguard.sim.engine import Engine, EngineSnapshot
from tailguard.sim.fleet import FleetConfig, PodPhase
from tailguard.sim.oracle import SloTarget, lower_bound
from tailguard.sim.policies import SloAndBounds
from tailguard.sim.policies.hpa import Hpa
from tailguard.sim.policies.keda import Keda
from tailguard.sim.policies.kpa import Kpa
from tailguard.sim.policies.wva import Wva
from tailguard.sim.profiles import get_profile
from tailguard.sim.prometheus import ModelledPrometheus

SLO = SloAndBounds(ttft_s=0.5, tpot_s=None, goodput=0.99, min_replicas=1, max_replicas=32)
EMPTY = Engine(get_profile("h100-llama3-8b")).snapshot()


class View:
    """A stand-in for FleetView with gauges set per pod."""

    def __init__(
        self, pods: dict[str, EngineSnapshot], *, desired: int | None = None, starting: int = 0
    ) -> None:
        self.prometheus = ModelledPrometheus()
        self.prometheus.scrape(100.0, list(pods.items()))
        self.desired = desired if desired is not None else len(pods)
        self.ready = len(pods)
        self._starting = starting
        self._pods = pods

    @property
    def rollout_in_progress(self) -> bool:
        return False

    def count(self, phase: PodPhase) -> int:
        return self._starting if phase is PodPhase.STARTING else 0

    def pod_phases(self) -> dict[str, PodPhase]:
        phases = {name: PodPhase.READY for name in self._pods}
        phases.update({f"new-{i}": PodPhase.STARTING for i in range(self._starting)})
        return phases


def pods(n: int, **gauges: float) -> dict[str, EngineSnapshot]:
    return {f"p{i}": replace(EMPTY, **gauges) for i in range(n)}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("running", "n", "expected"),
    [(2, 4, 4), (2.1, 4, 4), (4, 4, 8), (1, 4, 4), (20, 2, 6)],
    ids=["on target", "inside tolerance", "double", "half (stabilized)", "rate limited"],
)
def test_hpa_replica_rule(running: float, n: int, expected: int) -> None:
    hpa = Hpa(SLO)
    assert hpa.step(100.0, View(pods(n, running=running))).replicas == expected  # type: ignore[arg-type]


def test_hpa_counts_missing_pods_as_zero_when_scaling_up() -> None:
    hpa = Hpa(SLO)
    view = View(pods(2, running=4), desired=4, starting=2)
    # 2 pods at 4 (ratio 2) plus 2 without metrics at 0: average 2 on target -> hold.
    assert hpa.step(100.0, view).replicas == 4  # type: ignore[arg-type]


def test_keda_scales_to_waiting_over_five() -> None:
    keda = Keda(SLO)
    assert keda.step(100.0, View(pods(2, waiting=20))).replicas == 6  # type: ignore[arg-type]


def test_kpa_panics_on_a_doubling_and_never_scales_down_then() -> None:
    kpa = Kpa(SLO)
    view = View(pods(2, running=200, waiting=100))
    up = kpa.step(100.0, view).replicas  # type: ignore[arg-type]
    assert up >= 8
    assert kpa.panic_since is not None
    calm = View(pods(up, running=1), desired=up)
    assert kpa.step(102.0, calm).replicas == up  # type: ignore[arg-type]


def test_wva_adds_one_when_saturated_and_freezes_while_starting() -> None:
    wva = Wva(SLO)
    assert wva.step(100.0, View(pods(3, kv_cache_usage=0.9))).replicas == 4  # type: ignore[arg-type]
    assert wva.step(100.0, View(pods(3, kv_cache_usage=0.9), desired=4, starting=1)).replicas == 4  # type: ignore[arg-type]


def test_wva_removes_one_only_when_it_would_still_fit() -> None:
    wva = Wva(SLO)
    assert wva.step(100.0, View(pods(4, kv_cache_usage=0.1))).replicas == 3  # type: ignore[arg-type]
    assert wva.step(100.0, View(pods(4, kv_cache_usage=0.55))).replicas == 4  # type: ignore[arg-type]


def test_lower_bound_grows_with_the_load() -> None:
    trace = synthetic.step(10, 60, 240, at_s=120, seed=1)
    counts = lower_bound(
        trace,
        FleetConfig(get_profile("h100-llama3-8b")),
        SloTarget(0.5, None, 0.99),
        window_s=60,
        min_replicas=1,
        max_replicas=8,
    )
    assert counts[0] == 1
    assert counts[-1] >= 2


def test_the_lower_bounds_first_window_is_warmed_by_the_lead_in() -> None:
    """Empty engines fill for a while: without a lead-in the first window of a steady 70 req/s
    looks cheaper than the rest; warmed by the lead-in it needs what the steady state needs."""
    trace = synthetic.poisson(70, 360, mix=synthetic.CHAT, seed=3)
    config = FleetConfig(get_profile("h100x2-llama3-70b-fp8"))
    slo = SloTarget(1.0, 0.1, 0.99)
    cold = lower_bound(trace, config, slo, window_s=60, min_replicas=1, max_replicas=16)
    warm = lower_bound(
        trace, config, slo, window_s=60, min_replicas=1, max_replicas=16, lead_in=trace.lead_in(120)
    )
    assert cold[0] < cold[1]
    assert warm[0] == warm[1] == cold[1]
    assert warm[1:] == cold[1:]
