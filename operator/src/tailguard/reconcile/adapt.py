"""The one place reconcile translates for the policy: the spec into a :class:`PolicyConfig`, the
metric figures and the workload into an :class:`Observation`, milliseconds into seconds."""

from __future__ import annotations

from dataclasses import fields

from tailguard import policy
from tailguard.api import InferenceService
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.sizing import RunningSize
from tailguard.reconcile.workload import Workload

#: The engines' figures, declared once (``policy.EngineFigures``), copied one to one.
_SHARED_FIGURES = tuple(f.name for f in fields(policy.EngineFigures))


def slo_seconds(isvc: InferenceService) -> tuple[float, float | None]:
    """The p99 TTFT and (if declared) TPOT objectives, in seconds."""
    slo = isvc.spec.slo
    return slo.ttft_p99_ms / 1000.0, slo.tpot_p99_ms / 1000.0 if slo.tpot_p99_ms is not None else None


def policy_config(
    isvc: InferenceService, *, rate_window_s: float, burst_window_s: float
) -> policy.PolicyConfig:
    """The policy's view of the spec, and of the ``rate()`` windows the figures were read over."""
    autoscaling = isvc.spec.autoscaling
    ttft_s, tpot_s = slo_seconds(isvc)
    return policy.PolicyConfig(
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        ttft_slo_s=ttft_s,
        tpot_slo_s=tpot_s,
        goodput_target=isvc.spec.slo.goodput_target,
        interval_s=float(autoscaling.interval_seconds),
        scale_down_stabilization_s=float(autoscaling.scale_down_stabilization_seconds),
        max_batch_min=autoscaling.max_batch.min,
        max_batch_max=autoscaling.max_batch.max,
        max_batch_tuning=autoscaling.max_batch.enabled,
        max_batch_change_interval_s=float(autoscaling.max_batch.min_change_interval_seconds),
        rate_window_s=rate_window_s,
        burst_window_s=burst_window_s,
        schedules=tuple(
            policy.ScheduleWindow(w.name, w.start, float(w.duration_seconds), w.min_replicas, w.time_zone)
            for w in autoscaling.schedules
        ),
    )


def observation(
    figures: ServiceFigures, workload: Workload, size: RunningSize, *, metrics_ok: bool
) -> policy.Observation:
    """The policy's view of what Prometheus and the Deployment report, with the service at ``size``.

    A cycle with a failed query reports no sample time, so the policy holds rather than act on a
    partial picture.
    """
    return policy.Observation(
        **{name: getattr(figures, name) for name in _SHARED_FIGURES},
        sample_time=figures.sample_time if metrics_ok else None,
        reporting_pods=figures.reporting_pods if metrics_ok else None,
        ready_replicas=workload.ready,
        starting_replicas=workload.starting,
        pending_replicas=workload.pending,
        desired_replicas=size.replicas,
        max_batch=size.max_batch,
        rollout_in_progress=workload.rollout_in_progress,
        startup_s=workload.startup_s,
    )
