"""The operator's per-service series: each step's values exported, a deleted service's removed."""

from __future__ import annotations

import math

from tailguard import policy
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.workload import Workload

KEY = ("team-a", "chat")
LABELS = {"namespace": "team-a", "inference_service": "chat"}


def _step(telemetry: Telemetry, replicas: int, *, p99_ttft_s: float | None, tpot_slo_s: float | None) -> None:
    telemetry.record_step(
        KEY,
        decision=policy.Decision(replicas, 64, True, policy.Reason.STEADY, "steady"),
        applied=False,
        workload=Workload(replicas=replicas, ready=replicas),
        figures=ServiceFigures(p99_ttft_s=p99_ttft_s),
        config=policy.PolicyConfig(tpot_slo_s=tpot_slo_s),
    )


def _value(telemetry: Telemetry, name: str, **labels: str) -> float | None:
    return telemetry.registry.get_sample_value(name, {**LABELS, **labels})


def test_every_step_exports_its_own_values() -> None:
    telemetry = Telemetry()
    _step(telemetry, 2, p99_ttft_s=0.3, tpot_slo_s=0.05)
    _step(telemetry, 3, p99_ttft_s=None, tpot_slo_s=0.05)
    assert _value(telemetry, "tailguard_desired_replicas") == 3.0
    assert _value(telemetry, "tailguard_ready_replicas") == 3.0
    p99 = _value(telemetry, "tailguard_p99_ttft_seconds")
    assert p99 is not None
    assert math.isnan(p99), "an unmeasured figure reads NaN, not the last one"
    assert _value(telemetry, "tailguard_slo_tpot_seconds") == 0.05
    assert _value(telemetry, "tailguard_decisions_total", reason="Steady", action="none") == 2.0


def test_no_tpot_series_without_a_tpot_objective() -> None:
    telemetry = Telemetry()
    _step(telemetry, 1, p99_ttft_s=0.2, tpot_slo_s=None)
    assert _value(telemetry, "tailguard_slo_tpot_seconds") is None
    assert _value(telemetry, "tailguard_slo_ttft_seconds") == 0.5


def test_a_forgotten_service_loses_its_series_and_gets_them_back_on_its_next_step() -> None:
    telemetry = Telemetry()
    _step(telemetry, 2, p99_ttft_s=0.3, tpot_slo_s=None)
    telemetry.forget(*KEY)
    assert _value(telemetry, "tailguard_desired_replicas") is None
    assert _value(telemetry, "tailguard_p99_ttft_seconds") is None
    _step(telemetry, 4, p99_ttft_s=0.3, tpot_slo_s=None)
    assert _value(telemetry, "tailguard_desired_replicas") == 4.0, "exported again, not to a removed child"
