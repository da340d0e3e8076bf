"""The operator's own Prometheus metrics: what it decided, why, and how its loop is doing.

Names are a contract with the Grafana dashboard and the docs; change them deliberately.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

SERVICE_LABELS = ("namespace", "inference_service")


class Telemetry:
    """All operator metrics, in one registry (a fresh one per test)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.decisions = Counter(
            "tailguard_decisions",
            "Autoscaling decisions, by reason code and whether they changed anything.",
            [*SERVICE_LABELS, "reason", "action"],
            registry=r,
        )
        self.loop_duration = Histogram(
            "tailguard_loop_duration_seconds",
            "Time one control cycle took: every query, decision and write.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.loop_phase = Histogram(
            "tailguard_loop_phase_seconds",
            "Time of each phase of a control cycle: read (Prometheus) and act (decide and write).",
            ["phase"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.queries = Counter(
            "tailguard_prometheus_queries",
            "PromQL queries sent to Prometheus, by signal.",
            ["signal"],
            registry=r,
        )
        self.query_errors = Counter(
            "tailguard_prometheus_query_errors",
            "PromQL queries that failed (unreachable, timeout, error answer), by signal.",
            ["signal"],
            registry=r,
        )
        self.services = Gauge(
            "tailguard_inference_services", "InferenceServices the loop manages.", registry=r
        )
        self.desired_replicas = Gauge(
            "tailguard_desired_replicas", "Replicas the autoscaler wants.", SERVICE_LABELS, registry=r
        )
        self.ready_replicas = Gauge(
            "tailguard_ready_replicas", "Replicas ready to serve.", SERVICE_LABELS, registry=r
        )
        self.starting_replicas = Gauge(
            "tailguard_starting_replicas", "Replicas scheduled but not ready yet.", SERVICE_LABELS, registry=r
        )
        self.pending_replicas = Gauge(
            "tailguard_pending_replicas",
            "Replicas that cannot be scheduled (no free GPU).",
            SERVICE_LABELS,
            registry=r,
        )
        self.max_num_seqs = Gauge(
            "tailguard_max_num_seqs", "Max batch (--max-num-seqs) in force.", SERVICE_LABELS, registry=r
        )
        self.p99_ttft = Gauge(
            "tailguard_p99_ttft_seconds", "Observed p99 time to first token.", SERVICE_LABELS, registry=r
        )
        self.slo_ttft = Gauge(
            "tailguard_slo_ttft_seconds", "Declared p99 TTFT objective.", SERVICE_LABELS, registry=r
        )
        self.p99_tpot = Gauge(
            "tailguard_p99_tpot_seconds", "Observed p99 time per output token.", SERVICE_LABELS, registry=r
        )
        self.slo_tpot = Gauge(
            "tailguard_slo_tpot_seconds", "Declared p99 TPOT objective.", SERVICE_LABELS, registry=r
        )
        self.goodput = Gauge(
            "tailguard_goodput_ratio",
            "Estimated fraction of requests meeting every SLO.",
            SERVICE_LABELS,
            registry=r,
        )
        self.goodput_target = Gauge(
            "tailguard_goodput_target_ratio", "Declared goodput target.", SERVICE_LABELS, registry=r
        )

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's series so dashboards do not show ghosts."""
        for gauge in (
            self.desired_replicas,
            self.ready_replicas,
            self.starting_replicas,
            self.pending_replicas,
            self.max_num_seqs,
            self.p99_ttft,
            self.slo_ttft,
            self.p99_tpot,
            self.slo_tpot,
            self.goodput,
            self.goodput_target,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name)
