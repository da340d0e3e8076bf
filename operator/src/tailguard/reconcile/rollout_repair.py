"""Unstick a Deployment rollout that Kubernetes' Deployment controller leaves stalled.

The controller marks each ReplicaSet with the replica count it was sized for
(``deployment.kubernetes.io/desired-replicas``). When that mark differs from the Deployment's
replicas it takes the change for a scaling event and only scales, never rolls out. With
``maxSurge: 0`` (tailguard's strategy from two replicas on: no spare GPU during a rollout), a
replica count and a pod template changed while an earlier rollout still runs can leave one active
ReplicaSet of the *older* template that already has the Deployment's replica count but a stale
mark: scaling then changes nothing, so the mark is never rewritten, and the new template never
rolls out (Kubernetes 1.37 still does this). The signature is exact, and the repair is the mark the
controller itself would have written.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailguard.k8s.cluster import ClusterAPI, Manifest
from tailguard.k8s.labels import selector_labels

DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"


@dataclass(frozen=True)
class StaleMark:
    """A ReplicaSet whose desired-replicas mark holds back its Deployment's rollout."""

    name: str
    marked: str
    wanted: int


def looks_stalled(deployment: Manifest) -> bool:
    """The controller has seen the latest spec, every pod is ready at the wanted count, and yet
    none runs the current template: a rollout that is not moving (cheap, from the Deployment)."""
    meta, spec, status = (
        deployment.get("metadata") or {},
        deployment.get("spec") or {},
        deployment.get("status") or {},
    )
    wanted = spec.get("replicas")
    if not isinstance(wanted, int) or wanted <= 0:
        return False
    if status.get("observedGeneration") != meta.get("generation"):
        return False
    ready = status.get("readyReplicas") or 0
    return bool(status.get("replicas") == ready == wanted and (status.get("updatedReplicas") or 0) < wanted)


def stale_marks(deployment: Manifest, replica_sets: list[Manifest]) -> list[StaleMark]:
    """The ReplicaSets whose stale mark stalls ``deployment``: exactly one of its ReplicaSets has
    pods, it already has the Deployment's replica count, and its mark says another."""
    uid = (deployment.get("metadata") or {}).get("uid")
    wanted = (deployment.get("spec") or {}).get("replicas")
    owned = [
        rs
        for rs in replica_sets
        if uid is None
        or any(ref.get("uid") == uid for ref in (rs.get("metadata") or {}).get("ownerReferences") or [])
    ]
    active = [rs for rs in owned if ((rs.get("spec") or {}).get("replicas") or 0) > 0]
    if len(active) != 1 or not isinstance(wanted, int):
        return []
    rs = active[0]
    meta = rs.get("metadata") or {}
    marked = (meta.get("annotations") or {}).get(DESIRED_REPLICAS)
    if marked is None or (rs.get("spec") or {}).get("replicas") != wanted or marked == str(wanted):
        return []
    return [StaleMark(str(meta.get("name")), str(marked), wanted)]


def repair_stalled_rollout(api: ClusterAPI, deployment: Manifest | None, service: str) -> list[StaleMark]:
    """Rewrite the stale marks that stall the rollout of ``deployment`` (of the service named
    ``service``); returns what was rewritten (empty when nothing was stalled)."""
    if deployment is None or not looks_stalled(deployment):
        return []
    namespace = deployment["metadata"]["namespace"]
    marks = stale_marks(deployment, api.list("apps/v1", "ReplicaSet", namespace, selector_labels(service)))
    for mark in marks:
        api.patch_metadata(
            "apps/v1",
            "ReplicaSet",
            namespace,
            mark.name,
            {"annotations": {DESIRED_REPLICAS: str(mark.wanted)}},
        )
    return marks
