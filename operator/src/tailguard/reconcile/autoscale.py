"""One autoscaling step for one service: the decision, and the status patch and events that carry it.

Pure apart from calling :func:`tailguard.policy.decide` (itself pure): the loop does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailguard import policy
from tailguard.api import AutoscalingMode, InferenceService
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.adapt import observation
from tailguard.reconcile.conditions import (
    ConditionUpdate,
    find_condition,
    limited_condition,
    merge_conditions,
    metrics_condition,
    progressing_condition,
    slo_condition,
)
from tailguard.reconcile.sizing import RunningSize, running_size
from tailguard.reconcile.status import EventNote, conditions_moved, figures_moved, observed_status
from tailguard.reconcile.timestamps import in_turn, iso, seconds_since
from tailguard.reconcile.workload import Workload

#: The observed figures, and the decision's message, are rewritten at least this often.
OBSERVED_REFRESH_S = 60.0


@dataclass(frozen=True)
class AutoscaleInput:
    """Everything one step needs, read by the loop."""

    isvc: InferenceService
    workload: Workload
    figures: ServiceFigures
    #: The policy's view of the spec (``adapt.policy_config``, over the figures' rate windows).
    config: policy.PolicyConfig
    #: Field managers other than tailguard that own the Deployment's replicas
    #: (``children.foreign_replica_writers``): while any does, tailguard only advises.
    writers: list[str]
    #: The policy's state from the last step, or None when nothing was recorded (cautious start).
    state: policy.PolicyState | None
    now: float
    metrics_ok: bool
    #: The conditions in status as they stand (camelCase dicts, as read).
    conditions: list[dict[str, Any]]


@dataclass
class AutoscaleResult:
    """What the loop must write and post."""

    decision: policy.Decision
    state: policy.PolicyState
    #: The policy's view of the spec the decision was made under.
    config: policy.PolicyConfig
    #: The size the Deployment runs at after this step (applied when ``apply``).
    size: RunningSize
    status_patch: dict[str, Any] = field(default_factory=dict)
    events: list[EventNote] = field(default_factory=list)
    apply: bool = False
    persist_state: bool = False
    #: The status patch says something new (the decision, a condition, a figure quoted that moved),
    #: rather than only refreshing the observed figures on their periodic turn.
    news: bool = False

    @property
    def state_json(self) -> str:
        """The state as stored in the policy-state annotation (serialized only when written)."""
        return self.state.to_json()


def is_fresh(inp: AutoscaleInput, config: policy.PolicyConfig) -> bool:
    """Every query answered and the newest sample young enough to act on."""
    sample = inp.figures.sample_time
    return inp.metrics_ok and sample is not None and inp.now - sample <= config.max_metric_age_s


def _action(
    decision: policy.Decision, current: RunningSize, target: RunningSize, now: float
) -> tuple[dict[str, Any], list[EventNote]]:
    """The status fields and Events of an applied change from ``current`` to ``target``."""
    patch: dict[str, Any] = {"desiredReplicas": target.replicas, "maxNumSeqs": target.max_batch}
    events = []
    if target.replicas != current.replicas:
        patch["lastScaleTime"] = iso(now)
        events.append(
            EventNote("Normal", "Scaled", f"scaled {current.replicas}→{target.replicas}: {decision.reason}")
        )
    if target.max_batch != current.max_batch:
        patch["lastMaxBatchChangeTime"] = iso(now)
        events.append(
            EventNote(
                "Normal",
                "MaxBatchChanged",
                f"max batch {current.max_batch}→{target.max_batch}: {decision.reason}",
            )
        )
    return patch, events


def _last_decision(decision: policy.Decision, *, applied: bool, now: float) -> dict[str, Any]:
    return {
        "time": iso(now),
        "replicas": decision.replicas,
        "maxNumSeqs": decision.max_batch,
        "reason": str(decision.reason_code),
        "message": decision.reason,
        "limits": list(decision.limits),
        "applied": applied,
    }


def _transition_events(current: list[dict[str, Any]], updates: list[ConditionUpdate]) -> list[EventNote]:
    """Warnings for conditions that just turned bad: metrics lost, another writer appeared."""
    events = []
    for update in updates:
        before = find_condition(current, update.type)
        if before is not None and before.get("status") == update.status_text:
            continue
        if update.type == "MetricsAvailable" and update.status is False:
            events.append(EventNote("Warning", update.reason, f"holding size: {update.message}"))
        if update.type == "ScalingLimited" and update.reason == "AnotherWriter":
            events.append(EventNote("Warning", "AnotherWriter", update.message))
    return events


def _refresh_due(isvc: InferenceService, observed_at: str | None, now: float) -> bool:
    """Whether the observed block is due its periodic refresh: once a minute, in the service's own
    turn (so that hundreds of services do not all refresh in one cycle) and not within half a
    minute of the last write; at once when a turn was missed."""
    interval_s = float(isvc.spec.autoscaling.interval_seconds)
    age = seconds_since(observed_at, now)
    if age >= OBSERVED_REFRESH_S + interval_s:
        return True
    key = (isvc.metadata.namespace, isvc.metadata.name)
    return age >= OBSERVED_REFRESH_S / 2 and in_turn(key, now, interval_s, OBSERVED_REFRESH_S)


def autoscale(inp: AutoscaleInput) -> AutoscaleResult:
    """Decide for one service and say what to write; applies nothing itself.

    Status is written when the decision or a condition changes, when a figure its messages quote
    moves materially, and at least every :data:`OBSERVED_REFRESH_S`; otherwise not at all.
    """
    isvc = inp.isvc
    mode = isvc.spec.autoscaling.mode
    status = isvc.status
    current = running_size(isvc)  # DryRun and Manual: where the spec puts the service
    config = inp.config
    obs = observation(inp.figures, inp.workload, current, metrics_ok=inp.metrics_ok)
    decision, new_state = policy.decide(config, inp.state or policy.PolicyState(), obs, inp.now)

    writers = inp.writers
    changes_replicas = decision.valid and decision.replicas != current.replicas
    # Never start a max-batch change (a restart of every replica) during another rollout.
    changes_batch = (
        decision.valid and decision.max_batch != current.max_batch and not inp.workload.rollout_in_progress
    )
    act = mode is AutoscalingMode.AUTO and not writers and (changes_replicas or changes_batch)
    target = RunningSize(
        decision.replicas if changes_replicas else current.replicas,
        decision.max_batch if changes_batch else current.max_batch,
    )
    result = AutoscaleResult(
        decision=decision, state=new_state, config=config, size=target if act else current, apply=act
    )
    result.persist_state = act or inp.state is None

    patch: dict[str, Any] = {}
    if act:
        patch, result.events = _action(decision, current, target, inp.now)
        patch["ready"] = f"{inp.workload.ready}/{target.replicas}"

    last = status.last_decision
    summary = (decision.replicas, decision.max_batch, str(decision.reason_code), act)
    previous = (last.replicas, last.max_num_seqs, last.reason, last.applied) if last else None
    observed_due = _refresh_due(isvc, status.observed.time if status.observed else None, inp.now)
    reason_moved = figures_moved(last.message if last else None, decision.reason)
    result.news = summary != previous or act or reason_moved
    if result.news or observed_due:
        patch["lastDecision"] = _last_decision(decision, applied=act, now=inp.now)
        patch["observed"] = observed_status(inp.figures, now=inp.now)
        advice_changed = previous is None or (previous[0], previous[1]) != summary[:2]
        if (
            mode is AutoscalingMode.DRY_RUN
            and advice_changed
            and (decision.replicas != current.replicas or decision.max_batch != current.max_batch)
        ):
            result.events.append(
                EventNote(
                    "Normal",
                    "DryRunDecision",
                    f"would set replicas {current.replicas}→{decision.replicas}, "
                    f"max batch {current.max_batch}→{decision.max_batch}: {decision.reason}",
                )
            )

    fresh = is_fresh(inp, config)
    updates = [
        metrics_condition(inp.figures, inp.workload, metrics_ok=inp.metrics_ok, fresh=fresh, now=inp.now),
        slo_condition(isvc.spec.slo, inp.figures, fresh=fresh),
        limited_condition(decision, writers, mode),
        progressing_condition(inp.workload),
    ]
    merged = merge_conditions(inp.conditions, updates, now=inp.now, generation=isvc.metadata.generation)
    # Messages quote live figures: rewritten when they move materially, or with the observed block.
    moved = conditions_moved(inp.conditions, merged)
    result.news = result.news or moved
    if moved or ("observed" in patch and merged != inp.conditions):
        patch["conditions"] = merged
        result.events.extend(_transition_events(inp.conditions, updates))
    result.status_patch = patch
    return result
