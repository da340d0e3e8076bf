"""Kubernetes-style conditions: what each one says, and how a new reading merges into status."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tailguard import policy
from tailguard.api import AutoscalingMode, SLOSpec
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.timestamps import iso
from tailguard.reconcile.workload import Workload

_STATUS_TEXT = {True: "True", False: "False", None: "Unknown"}


@dataclass(frozen=True)
class ConditionUpdate:
    """A condition as computed now; the transition time is filled in by :func:`merge_conditions`."""

    type: str
    status: bool | None
    reason: str
    message: str

    @property
    def status_text(self) -> str:
        """The status as Kubernetes writes it: ``True``, ``False`` or ``Unknown``."""
        return _STATUS_TEXT[self.status]


def merge_conditions(
    current: Sequence[dict[str, Any]],
    updates: Sequence[ConditionUpdate],
    *,
    now: float,
    generation: int | None,
) -> list[dict[str, Any]]:
    """``current`` with ``updates`` applied; untouched types are kept, order is stable by type.

    A condition keeps its ``lastTransitionTime`` while its status stays the same.
    """
    by_type = {c["type"]: dict(c) for c in current}
    stamp = iso(now)
    for update in updates:
        old = by_type.get(update.type)
        kept = old is not None and old.get("status") == update.status_text
        by_type[update.type] = {
            "type": update.type,
            "status": update.status_text,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": old.get("lastTransitionTime", stamp) if kept and old else stamp,
            "observedGeneration": generation,
        }
    return [by_type[t] for t in sorted(by_type)]


def find_condition(conditions: Sequence[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of a type, if present."""
    return next((c for c in conditions if c.get("type") == type_), None)


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000.0, 1) if seconds is not None else None


def ready_condition(workload: Workload, desired: int) -> ConditionUpdate:
    """Ready: every desired replica serves; otherwise why not, most actionable cause first."""
    if workload.problems:
        return ConditionUpdate("Ready", False, "ReplicasFailing", "; ".join(workload.problems))
    if workload.pending:
        return ConditionUpdate(
            "Ready",
            False,
            "Unschedulable",
            f"{workload.pending} of {desired} replicas cannot be scheduled: {workload.unschedulable_message}",
        )
    if desired == 0:
        return ConditionUpdate("Ready", False, "ScaledToZero", "no replicas are requested")
    if workload.ready >= desired and not workload.rollout_in_progress:
        return ConditionUpdate(
            "Ready", True, "AllReplicasReady", f"{workload.ready}/{desired} replicas ready"
        )
    return ConditionUpdate(
        "Ready",
        False,
        "ReplicasStarting",
        f"{workload.ready}/{desired} replicas ready, {workload.starting} starting",
    )


def spec_valid_condition() -> ConditionUpdate:
    """InvalidSpec=False: the spec parsed and passed every rule."""
    return ConditionUpdate("InvalidSpec", False, "SpecValid", "the spec is valid")


def spec_invalid_condition(message: str) -> ConditionUpdate:
    """InvalidSpec=True, saying which fields are wrong."""
    return ConditionUpdate("InvalidSpec", True, "ValidationFailed", message)


def metrics_condition(
    figures: ServiceFigures, workload: Workload, *, metrics_ok: bool, fresh: bool, now: float
) -> ConditionUpdate:
    """MetricsAvailable: can the autoscaler see the service?"""
    if not metrics_ok:
        reason = "; ".join(figures.errors) or "query failed"
        return ConditionUpdate("MetricsAvailable", False, "PrometheusUnavailable", reason)
    if figures.sample_time is None:
        if workload.ready == 0:
            return ConditionUpdate(
                "MetricsAvailable", False, "NoReadyReplicas", "no replica is ready to report"
            )
        return ConditionUpdate(
            "MetricsAvailable", False, "NoData", "Prometheus has no vLLM series for this service"
        )
    if not fresh:
        age = now - figures.sample_time
        return ConditionUpdate("MetricsAvailable", False, "StaleData", f"newest sample is {age:.0f} s old")
    return ConditionUpdate(
        "MetricsAvailable", True, "MetricsFresh", f"{figures.reporting_pods} engine(s) reporting"
    )


def slo_condition(slo: SLOSpec, figures: ServiceFigures, *, fresh: bool) -> ConditionUpdate:
    """SLOMet: is the goodput target held (and the p99s within their SLOs)?"""
    s = figures
    if not fresh:
        return ConditionUpdate("SLOMet", None, "Unknown", "no fresh metrics")
    if s.request_rate is not None and s.request_rate == 0 and not s.running and not s.waiting:
        return ConditionUpdate("SLOMet", True, "NoTraffic", "no requests in the window")
    if s.goodput is None:
        return ConditionUpdate("SLOMet", None, "Unknown", "no finished requests to judge yet")
    ttft = f"p99 TTFT {_ms(s.p99_ttft_s)} ms (SLO {slo.ttft_p99_ms:g} ms)"
    tpot = f", p99 TPOT {_ms(s.p99_tpot_s)} ms (SLO {slo.tpot_p99_ms:g} ms)" if slo.tpot_p99_ms else ""
    text = f"goodput {s.goodput:.4f} vs target {slo.goodput_target:g}; {ttft}{tpot}"
    if s.goodput >= slo.goodput_target:
        return ConditionUpdate("SLOMet", True, "GoodputMet", text)
    return ConditionUpdate("SLOMet", False, "GoodputBelowTarget", text)


def limited_condition(
    decision: policy.Decision, writers: Sequence[str], mode: AutoscalingMode
) -> ConditionUpdate:
    """ScalingLimited: did a bound, or another writer of the replicas, shape the decision?"""
    if writers and mode is AutoscalingMode.AUTO:
        return ConditionUpdate(
            "ScalingLimited",
            True,
            "AnotherWriter",
            f"the Deployment's replicas are also set by {', '.join(writers)}; tailguard holds until "
            "it is removed (or set autoscaling.mode: Manual to hand scaling over)",
        )
    if decision.limits:
        return ConditionUpdate("ScalingLimited", True, "Limited", f"limited by {', '.join(decision.limits)}")
    return ConditionUpdate("ScalingLimited", False, "WithinLimits", "no limit bounded the last decision")


def progressing_condition(workload: Workload) -> ConditionUpdate:
    """Progressing: is a rollout or a replica start under way?"""
    if workload.rollout_in_progress:
        return ConditionUpdate(
            "Progressing", True, "RollingOut", f"{workload.updated} replicas updated so far"
        )
    if workload.starting:
        return ConditionUpdate(
            "Progressing", True, "ReplicasStarting", f"{workload.starting} replicas starting"
        )
    return ConditionUpdate("Progressing", False, "Stable", "no rollout or start in progress")
