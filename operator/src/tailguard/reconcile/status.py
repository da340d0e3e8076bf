"""The status tailguard writes for one InferenceService, derived from its workload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailguard.api import InferenceService
from tailguard.k8s.labels import selector_string
from tailguard.k8s.render import desired_replicas_and_batch
from tailguard.reconcile.conditions import ConditionUpdate, merge_conditions
from tailguard.reconcile.workload import Workload


@dataclass(frozen=True)
class EventNote:
    """A Kubernetes Event to post about the InferenceService."""

    type: str  # Normal or Warning
    reason: str
    message: str


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


def workload_status(
    isvc: InferenceService,
    workload: Workload,
    *,
    now: str,
    extra_conditions: tuple[ConditionUpdate, ...] = (),
) -> dict[str, Any]:
    """The status fields tailguard owns, as a camelCase dict ready to merge-patch."""
    desired, batch = desired_replicas_and_batch(isvc)
    updates = (
        ready_condition(workload, desired),
        ConditionUpdate("InvalidSpec", False, "SpecValid", "the spec is valid"),
        *extra_conditions,
    )
    current = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in isvc.status.conditions]
    return {
        "observedGeneration": isvc.metadata.generation,
        "replicas": workload.replicas,
        "readyReplicas": workload.ready,
        "pendingReplicas": workload.pending,
        "desiredReplicas": desired,
        "ready": f"{workload.ready}/{desired}",
        "labelSelector": selector_string(isvc.metadata.name),
        "maxNumSeqs": batch,
        "image": workload.image,
        "conditions": merge_conditions(current, updates, now=now, generation=isvc.metadata.generation),
    }


def invalid_spec_status(
    current_conditions: list[dict[str, Any]], message: str, *, now: str, generation: int | None
) -> dict[str, Any]:
    """Status for a spec the operator cannot act on: nothing is applied, the condition says why."""
    update = ConditionUpdate("InvalidSpec", True, "ValidationFailed", message)
    return {"conditions": merge_conditions(current_conditions, [update], now=now, generation=generation)}


def changed_fields(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The part of ``patch`` that differs from ``current`` (empty when a write would change nothing)."""
    return {k: v for k, v in patch.items() if current.get(k) != v}
