"""The operator's own Prometheus metrics: what it decided, why, and how its loop is doing.

Names are a contract with the Grafana dashboard and the docs; change them deliberately.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from tailguard import policy
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.service_series import ServiceDecisions, ServiceSeries
from tailguard.reconcile.workload import Workload

_LOOP_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
#: A refresh may wait out a backlog of more urgent writes for a minute or more.
_WRITE_BUCKETS = (*_LOOP_BUCKETS, 60.0, 120.0, 300.0)


_TEXT = "text/plain;"
_OPENMETRICS_1 = "application/openmetrics-text; version=1.0.0;"
_EOF = b"# EOF\n"


class _Forward:
    """A registry seen as one collector of another (no names described: its own are checked)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()


class Telemetry:
    """All operator metrics: the loop's own in :attr:`loop_registry`, every service's gauges in
    :attr:`series`, and both in :attr:`registry` (a fresh one per test)."""

    def __init__(self) -> None:
        self.loop_registry = CollectorRegistry()
        self.series = ServiceSeries()
        self.decisions = ServiceDecisions(time.time)
        self.registry = CollectorRegistry()
        self.registry.register(_Forward(self.loop_registry))
        self.registry.register(self.series)
        self.registry.register(self.decisions)
        r = self.loop_registry
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
        self.decisions.inc(key, str(decision.reason_code), "applied" if applied else "none")
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
        self.series.set(
            key,
            {
                attribute: value if value is not None else math.nan  # unmeasured: NaN, not the last
                for attribute, value in values.items()
                if value is not None or attribute != "slo_tpot"  # no TPOT objective: no series
            },
        )

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """Every metric as the text a scrape with this ``Accept`` header asks for, and its content
        type: the loop's metrics through prometheus_client, every service's gauges and decision
        counters written directly (:meth:`ServiceSeries.render`, :meth:`ServiceDecisions.render`).
        A format other than the Prometheus text format and OpenMetrics 1.0 goes all the way through
        prometheus_client."""
        encoder, content_type = choose_encoder(accept or "")
        if content_type.startswith(_TEXT):
            return encoder(self.loop_registry) + self.series.render() + self.decisions.render(
                openmetrics=False
            ), content_type
        if content_type.startswith(_OPENMETRICS_1) and (text := encoder(self.loop_registry)).endswith(_EOF):
            services = self.series.render() + self.decisions.render(openmetrics=True)
            return text[: -len(_EOF)] + services + _EOF, content_type
        return encoder(self.registry), content_type

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted service's series so dashboards do not show ghosts."""
        self.series.forget((namespace, name))
        self.decisions.forget((namespace, name))
