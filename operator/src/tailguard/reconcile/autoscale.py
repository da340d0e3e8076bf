"""One autoscaling step for one service: observation in, decision, status, events and state out.

Pure apart from calling :func:`tailguard.policy.decide` (itself pure): the loop does the I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tailguard import policy
from tailguard.api import AutoscalingMode, InferenceService
from tailguard.k8s.render import desired_replicas_and_batch
from tailguard.metrics.signals import ServiceSignals
from tailguard.reconcile.children import foreign_replica_writers
from tailguard.reconcile.conditions import ConditionUpdate, merge_conditions
from tailguard.reconcile.inventory import Key
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.workload import Workload

#: How often the observed figures in status are refreshed when nothing else changed.
OBSERVED_REFRESH_S = 60.0


@dataclass(frozen=True)
class AutoscaleInput:
    """Everything one step needs, read by the loop."""

    isvc: InferenceService
    workload: Workload
    signals: ServiceSignals
    deployment: dict[str, Any] | None
    #: The policy's state from the last step, or None when nothing was recorded (cautious start).
    state: policy.PolicyState | None
    now: float
    now_iso: str
    metrics_ok: bool
    #: The ``rate()`` window of the queries behind ``signals``, in seconds.
    rate_window_s: float


@dataclass
class AutoscaleResult:
    """What the loop must write and post."""

    decision: policy.Decision
    state: policy.PolicyState
    status_patch: dict[str, Any] = field(default_factory=dict)
    events: list[EventNote] = field(default_factory=list)
    apply: bool = False
    persist_state: bool = False

    @property
    def state_json(self) -> str:
        """The state as stored in the policy-state annotation (serialized only when written)."""
        return self.state.to_json()


def policy_config(
    isvc: InferenceService, *, rate_window_s: float = policy.PolicyConfig.rate_window_s
) -> policy.PolicyConfig:
    """The policy's view of the spec (and of the window the rates are read over)."""
    spec = isvc.spec
    return policy.PolicyConfig(
        min_replicas=spec.autoscaling.min_replicas,
        max_replicas=spec.autoscaling.max_replicas,
        ttft_slo_s=spec.slo.ttft_p99_ms / 1000.0,
        tpot_slo_s=spec.slo.tpot_p99_ms / 1000.0 if spec.slo.tpot_p99_ms is not None else None,
        goodput_target=spec.slo.goodput_target,
        interval_s=float(spec.autoscaling.interval_seconds),
        scale_down_stabilization_s=float(spec.autoscaling.scale_down_stabilization_seconds),
        # Burst memory stays off: after a breach, scale-down waits for the declared window only.
        burst_hold_s=float(spec.autoscaling.scale_down_stabilization_seconds),
        max_batch_min=spec.autoscaling.max_batch.min,
        max_batch_max=spec.autoscaling.max_batch.max,
        max_batch_tuning=spec.autoscaling.max_batch.enabled,
        max_batch_change_interval_s=float(spec.autoscaling.max_batch.min_change_interval_seconds),
        rate_window_s=rate_window_s,
        schedules=tuple(
            policy.ScheduleWindow(w.name, w.start, float(w.duration_seconds), w.min_replicas, w.time_zone)
            for w in spec.autoscaling.schedules
        ),
    )


def is_fresh(inp: AutoscaleInput, config: policy.PolicyConfig) -> bool:
    """Every query answered and the newest sample young enough to act on."""
    sample = inp.signals.sample_time
    return inp.metrics_ok and sample is not None and inp.now - sample <= config.max_metric_age_s


def observation(inp: AutoscaleInput, replicas: int, batch: int) -> policy.Observation:
    """The policy's view of what Prometheus and the Deployment report.

    A cycle with a failed query reports no sample time, so the policy holds rather than act on a
    partial picture.
    """
    s, w = inp.signals, inp.workload
    return policy.Observation(
        sample_time=s.sample_time if inp.metrics_ok else None,
        p99_ttft_s=s.p99_ttft_s,
        p99_tpot_s=s.p99_tpot_s,
        ttft_within_slo=s.ttft_within_slo,
        tpot_within_slo=s.tpot_within_slo,
        goodput=s.goodput,
        request_rate=s.request_rate,
        prompt_token_rate=s.prompt_token_rate,
        generation_token_rate=s.generation_token_rate,
        running=s.running,
        waiting=s.waiting,
        kv_cache_usage=s.kv_cache_usage,
        preemption_rate=s.preemption_rate,
        itl_mean_s=s.itl_mean_s,
        reporting_pods=s.reporting_pods if inp.metrics_ok else None,
        ready_replicas=w.ready,
        starting_replicas=w.starting,
        pending_replicas=w.pending,
        desired_replicas=replicas,
        max_batch=batch,
        rollout_in_progress=w.rollout_in_progress,
    )


def _ms(seconds: float | None) -> float | None:
    return round(seconds * 1000.0, 1) if seconds is not None else None


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def observed_status(signals: ServiceSignals, now_iso: str) -> dict[str, Any]:
    """The ``status.observed`` block, rounded so that noise does not cause writes."""
    return {
        "time": now_iso,
        "p99TtftMs": _ms(signals.p99_ttft_s),
        "p99TpotMs": _ms(signals.p99_tpot_s),
        "goodput": _round(signals.goodput, 4),
        "requestRate": _round(signals.request_rate, 3),
        "running": _round(signals.running, 1),
        "waiting": _round(signals.waiting, 1),
        "kvCacheUsage": _round(signals.kv_cache_usage, 3),
        "preemptionRate": _round(signals.preemption_rate, 3),
    }


def metrics_condition(inp: AutoscaleInput, fresh: bool) -> ConditionUpdate:
    """MetricsAvailable: can the autoscaler see the service?"""
    if not inp.metrics_ok:
        return ConditionUpdate(
            "MetricsAvailable",
            False,
            "PrometheusUnavailable",
            "; ".join(inp.signals.errors) or "query failed",
        )
    if inp.signals.sample_time is None:
        if inp.workload.ready == 0:
            return ConditionUpdate(
                "MetricsAvailable", False, "NoReadyReplicas", "no replica is ready to report"
            )
        return ConditionUpdate(
            "MetricsAvailable", False, "NoData", "Prometheus has no vLLM series for this service"
        )
    if not fresh:
        age = inp.now - inp.signals.sample_time
        return ConditionUpdate("MetricsAvailable", False, "StaleData", f"newest sample is {age:.0f} s old")
    return ConditionUpdate(
        "MetricsAvailable", True, "MetricsFresh", f"{inp.signals.reporting_pods} engine(s) reporting"
    )


def slo_condition(inp: AutoscaleInput, fresh: bool) -> ConditionUpdate:
    """SLOMet: is the goodput target held (and the p99s within their SLOs)?"""
    slo = inp.isvc.spec.slo
    s = inp.signals
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


def _limited_condition(
    decision: policy.Decision, writers: list[str], mode: AutoscalingMode
) -> ConditionUpdate:
    if writers and mode is AutoscalingMode.AUTO:
        return ConditionUpdate(
            "ScalingLimited",
            True,
            "AnotherWriter",
            f"the Deployment's replicas are also set by {', '.join(writers)}; tailguard holds until "
            "it is removed (or set autoscaling.mode: Off to hand scaling over)",
        )
    if decision.limits:
        return ConditionUpdate("ScalingLimited", True, "Limited", f"limited by {', '.join(decision.limits)}")
    return ConditionUpdate("ScalingLimited", False, "WithinLimits", "no limit bounded the last decision")


def _progressing_condition(workload: Workload) -> ConditionUpdate:
    if workload.rollout_in_progress:
        return ConditionUpdate(
            "Progressing", True, "RollingOut", f"{workload.updated} replicas updated so far"
        )
    if workload.starting:
        return ConditionUpdate(
            "Progressing", True, "ReplicasStarting", f"{workload.starting} replicas starting"
        )
    return ConditionUpdate("Progressing", False, "Stable", "no rollout or start in progress")


def _essence(conditions: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (c.get("type"), c.get("status"), c.get("reason"), c.get("observedGeneration")) for c in conditions
    ]


def _condition_status(conditions: list[dict[str, Any]], type_: str) -> str | None:
    return next((str(c.get("status")) for c in conditions if c.get("type") == type_), None)


def autoscale(inp: AutoscaleInput) -> AutoscaleResult:
    """Decide for one service and say what to write; applies nothing itself."""
    isvc = inp.isvc
    mode = isvc.spec.autoscaling.mode
    status = isvc.status
    replicas, batch = desired_replicas_and_batch(isvc)
    if mode is not AutoscalingMode.AUTO:
        # DryRun advises from where the spec puts the service.
        replicas, batch = isvc.spec.replicas, isvc.spec.engine.max_num_seqs
    config = policy_config(isvc, rate_window_s=inp.rate_window_s)
    obs = observation(inp, replicas, batch)
    decision, new_state = policy.decide(config, inp.state or policy.PolicyState(), obs, inp.now)
    fresh = is_fresh(inp, config)

    writers = foreign_replica_writers(inp.deployment)
    changes_replicas = decision.valid and decision.replicas != replicas
    changes_batch = decision.valid and decision.max_batch != batch
    if changes_batch and inp.workload.rollout_in_progress:
        changes_batch = False  # never start a restart during another rollout
    act = mode is AutoscalingMode.AUTO and not writers and (changes_replicas or changes_batch)
    result = AutoscaleResult(decision=decision, state=new_state)
    result.apply = act
    result.persist_state = act or inp.state is None

    patch: dict[str, Any] = {}
    new_replicas = decision.replicas if changes_replicas else replicas
    new_batch = decision.max_batch if changes_batch else batch
    if act:
        patch["desiredReplicas"] = new_replicas
        patch["maxNumSeqs"] = new_batch
        patch["ready"] = f"{inp.workload.ready}/{new_replicas}"
        if changes_replicas:
            patch["lastScaleTime"] = inp.now_iso
            result.events.append(
                EventNote("Normal", "Scaled", f"scaled {replicas}→{new_replicas}: {decision.reason}")
            )
        if changes_batch:
            patch["lastMaxBatchChangeTime"] = inp.now_iso
            result.events.append(
                EventNote("Normal", "MaxBatchChanged", f"max batch {batch}→{new_batch}: {decision.reason}")
            )

    last = status.last_decision
    summary = (decision.replicas, decision.max_batch, str(decision.reason_code), act)
    previous = (last.replicas, last.max_num_seqs, last.reason, last.applied) if last else None
    observed_due = (
        status.observed is None
        or status.observed.time is None
        or _age(status.observed.time, inp.now) >= OBSERVED_REFRESH_S
    )
    if summary != previous or observed_due or act:
        patch["lastDecision"] = {
            "time": inp.now_iso,
            "replicas": decision.replicas,
            "maxNumSeqs": decision.max_batch,
            "reason": str(decision.reason_code),
            "message": decision.reason,
            "limits": list(decision.limits),
            "applied": act,
        }
        patch["observed"] = observed_status(inp.signals, inp.now_iso)
        if (
            mode is AutoscalingMode.DRY_RUN
            and summary[:2] != (previous or (None, None))[:2]
            and (decision.replicas != replicas or decision.max_batch != batch)
        ):
            result.events.append(
                EventNote(
                    "Normal",
                    "DryRunDecision",
                    f"would set replicas {replicas}→{decision.replicas}, "
                    f"max batch {batch}→{decision.max_batch}: {decision.reason}",
                )
            )

    current = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in status.conditions]
    updates = [
        metrics_condition(inp, fresh),
        slo_condition(inp, fresh),
        _limited_condition(decision, writers, mode),
        _progressing_condition(inp.workload),
    ]
    merged = merge_conditions(current, updates, now=inp.now_iso, generation=isvc.metadata.generation)
    # Messages carry live figures; they are refreshed with the observed block, not every cycle.
    if _essence(merged) != _essence(current) or (merged != current and "observed" in patch):
        patch["conditions"] = merged
        for update in updates:
            before = _condition_status(current, update.type)
            if before == update.status_text:
                continue
            if update.type == "MetricsAvailable" and update.status is False:
                result.events.append(EventNote("Warning", update.reason, f"holding size: {update.message}"))
            if update.type == "ScalingLimited" and update.reason == "AnotherWriter":
                result.events.append(EventNote("Warning", "AnotherWriter", update.message))
    result.status_patch = patch
    return result


def _age(timestamp: str, now: float) -> float:
    import datetime as dt

    try:
        then = dt.datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return math.inf
    return now - then


def record_telemetry(
    telemetry: Telemetry,
    key: Key,
    isvc: InferenceService,
    workload: Workload,
    signals: ServiceSignals,
    result: AutoscaleResult,
) -> None:
    """Export one step's figures and decision on the operator's ``/metrics``."""
    labels = key
    decision = result.decision
    telemetry.decisions.labels(
        *labels, str(decision.reason_code), "applied" if result.apply else "none"
    ).inc()
    telemetry.desired_replicas.labels(*labels).set(decision.replicas)
    telemetry.ready_replicas.labels(*labels).set(workload.ready)
    telemetry.starting_replicas.labels(*labels).set(workload.starting)
    telemetry.pending_replicas.labels(*labels).set(workload.pending)
    telemetry.max_num_seqs.labels(*labels).set(decision.max_batch)
    slo = isvc.spec.slo
    telemetry.slo_ttft.labels(*labels).set(slo.ttft_p99_ms / 1000.0)
    telemetry.goodput_target.labels(*labels).set(slo.goodput_target)
    if slo.tpot_p99_ms is not None:
        telemetry.slo_tpot.labels(*labels).set(slo.tpot_p99_ms / 1000.0)
    for gauge, value in (
        (telemetry.p99_ttft, signals.p99_ttft_s),
        (telemetry.p99_tpot, signals.p99_tpot_s),
        (telemetry.goodput, signals.goodput),
    ):
        gauge.labels(*labels).set(value if value is not None else math.nan)
