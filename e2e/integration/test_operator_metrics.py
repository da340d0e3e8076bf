"""The operator's ``/metrics`` as a real Prometheus scrapes it: the format Prometheus negotiates
(OpenMetrics), every per-service gauge written directly, a NaN and a counter among them."""

from __future__ import annotations

import math

import pytest

from cluster.prometheus import Prometheus
from lib.wait import wait_for
from tailguard.handlers.metrics_server import serve_metrics
from tailguard.reconcile.telemetry import Telemetry
from tg_testing import record_step

pytestmark = pytest.mark.integration


def _value(prometheus: Prometheus, expr: str) -> float:
    result = prometheus.query(expr)
    assert len(result) == 1, (expr, result)
    return float(result[0]["value"][1])


def test_prometheus_stores_what_the_operator_serves(prometheus: Prometheus) -> None:
    telemetry = Telemetry()
    record_step(
        telemetry, ("team-a", "chat"), replicas=3, ready=2, p99_ttft_s=0.25, goodput=0.995,
        tpot_slo_s=0.05, applied=True,
    )  # fmt: skip
    server = serve_metrics(telemetry, 0, "127.0.0.1")
    try:
        prometheus.set_targets([f"127.0.0.1:{server.server_port}"])
        prometheus.wait_for_targets_up(1, timeout=30)
        wait_for(
            "the operator's gauges to be queryable",
            lambda: prometheus.query('tailguard_desired_replicas{inference_service="chat"}'),
            timeout=15,
        )
        chat = 'namespace="team-a",inference_service="chat"'
        assert _value(prometheus, f"tailguard_desired_replicas{{{chat}}}") == 3.0
        assert _value(prometheus, f"tailguard_ready_replicas{{{chat}}}") == 2.0
        assert _value(prometheus, f"tailguard_p99_ttft_seconds{{{chat}}}") == 0.25
        assert _value(prometheus, f"tailguard_slo_tpot_seconds{{{chat}}}") == 0.05
        assert math.isnan(_value(prometheus, f"tailguard_p99_tpot_seconds{{{chat}}}")), "unmeasured: NaN"
        decisions = f'tailguard_decisions_total{{{chat},reason="Steady",action="applied"}}'
        assert _value(prometheus, decisions) == 1.0
        (target,) = prometheus.targets()
        assert target["health"] == "up", target.get("lastError")
    finally:
        server.shutdown()
        server.server_close()
