"""The operator's own Prometheus metrics: what it decided, why, and how its loop is doing.

Names are a contract with the Grafana dashboard and the docs; change them deliberately.
"""

from __future__ import annotations

import contextlib
import math

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from tailguard import policy
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.workload import Workload

SERVICE_LABELS = ("namespace", "inference_service")
_LOOP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
#: A refresh may wait out a backlog of more urgent writes for a minute or more.
_WRITE_BUCKETS = (*_LOOP_BUCKETS, 60.0, 120.0, 300.0)

#: The per-service gauges: attribute, metric name, help.
SERVICE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("desired_replicas", "tailguard_desired_replicas", "Replicas the autoscaler wants."),
    ("ready_replicas", "tailguard_ready_replicas", "Replicas ready to serve."),
    ("starting_replicas", "tailguard_starting_replicas", "Replicas scheduled but not ready yet."),
    ("pending_replicas", "tailguard_pending_replicas", "Replicas that cannot be scheduled (no free GPU)."),
    ("max_num_seqs", "tailguard_max_num_seqs", "Max batch (--max-num-seqs) in force."),
    ("p99_ttft", "tailguard_p99_ttft_seconds", "Observed p99 time to first token."),
    ("slo_ttft", "tailguard_slo_ttft_seconds", "Declared p99 TTFT objective."),
    ("p99_tpot", "tailguard_p99_tpot_seconds", "Observed p99 time per output token."),
    ("slo_tpot", "tailguard_slo_tpot_seconds", "Declared p99 TPOT objective."),
    ("goodput", "tailguard_goodput_ratio", "Estimated fraction of requests meeting every SLO."),
    ("goodput_target", "tailguard_goodput_target_ratio", "Declared goodput target."),
)


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
            "Time one control cycle took: the Prometheus reading and every decision, up to queuing "
            "their writes (made in the background: tailguard_write_latency_seconds).",
            buckets=_LOOP_BUCKETS,
            registry=r,
        )
        self.loop_phase = Histogram(
            "tailguard_loop_phase_seconds",
            "Time of each phase of a control cycle: read (Prometheus) and decide (decisions, writes queued).",
            ["phase"],
            buckets=_LOOP_BUCKETS,
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
        self.writes = Counter(
            "tailguard_api_writes",
            "Writes the control loop made to the API server: status, policy state, Deployments, Events.",
            registry=r,
        )
        self.write_queue_depth = Gauge(
            "tailguard_write_queue_depth",
            "Services with a write queued and not started, by priority (act, status, refresh).",
            ["priority"],
            registry=r,
        )
        self.writes_in_flight = Gauge(
            "tailguard_writes_in_flight",
            "Services whose write to the API server has started and not landed.",
            registry=r,
        )
        self.write_latency = Histogram(
            "tailguard_write_latency_seconds",
            "Time from a write being queued to its landing (the wait for a writer, then its API calls).",
            ["priority"],
            buckets=_WRITE_BUCKETS,
            registry=r,
        )
        self.writes_coalesced = Counter(
            "tailguard_writes_coalesced",
            "Queued writes replaced by a newer write for the same service before they started.",
            registry=r,
        )
        self.decisions_deferred = Counter(
            "tailguard_decisions_deferred",
            "Ticks at which a due decision was put off because the service's previous write had not landed.",
            registry=r,
        )
        self.services = Gauge(
            "tailguard_inference_services", "InferenceServices the loop manages.", registry=r
        )
        self.service_gauges = {
            attribute: Gauge(name, text, SERVICE_LABELS, registry=r)
            for attribute, name, text in SERVICE_GAUGES
        }
        # Each service's series, looked up once: ``labels()`` validates and locks at every call,
        # a dozen calls per decision. Created on first use, as ``labels()`` would create them.
        self._series: dict[tuple[str, str], dict[str, Gauge]] = {}
        self._decision_series: dict[tuple[str, str], dict[tuple[str, str], Counter]] = {}

    def gauge(self, attribute: str) -> Gauge:
        """One per-service gauge by its attribute name in :data:`SERVICE_GAUGES`."""
        return self.service_gauges[attribute]

    def record_step(
        self,
        key: tuple[str, str],
        *,
        decision: policy.Decision,
        applied: bool,
        workload: Workload,
        figures: ServiceFigures,
        config: policy.PolicyConfig,
    ) -> None:
        """Export one step's figures and decision for service ``key`` (namespace, name)."""
        reason, action = str(decision.reason_code), "applied" if applied else "none"
        counters = self._decision_series.setdefault(key, {})
        counter = counters.get((reason, action))
        if counter is None:
            counter = counters[reason, action] = self.decisions.labels(*key, reason, action)
        counter.inc()
        values: dict[str, float | None] = {
            "desired_replicas": decision.replicas,
            "ready_replicas": workload.ready,
            "starting_replicas": workload.starting,
            "pending_replicas": workload.pending,
            "max_num_seqs": decision.max_batch,
            "p99_ttft": figures.p99_ttft_s,
            "slo_ttft": config.ttft_slo_s,
            "p99_tpot": figures.p99_tpot_s,
            "slo_tpot": config.tpot_slo_s,
            "goodput": figures.goodput,
            "goodput_target": config.goodput_target,
        }
        series = self._series.setdefault(key, {})
        for attribute, value in values.items():
            if value is None and attribute == "slo_tpot":
                continue  # no TPOT objective declared: no series
            gauge = series.get(attribute)
            if gauge is None:
                gauge = series[attribute] = self.service_gauges[attribute].labels(*key)
            gauge.set(value if value is not None else math.nan)

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's series so dashboards do not show ghosts."""
        self._series.pop((namespace, name), None)
        self._decision_series.pop((namespace, name), None)
        for gauge in self.service_gauges.values():
            with contextlib.suppress(KeyError):
                gauge.remove(namespace, name)
