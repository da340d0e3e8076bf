"""Create or patch the Deployment, Service and PodMonitor of one InferenceService."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tailguard.api import DEFAULT_VLLM_IMAGE, InferenceService
from tailguard.k8s.cluster import ClusterAPI, Manifest
from tailguard.k8s.labels import FIELD_MANAGER
from tailguard.k8s.render import render_all
from tailguard.reconcile.diff import is_subset

POD_MONITOR = ("monitoring.coreos.com/v1", "PodMonitor")


@dataclass
class ChildrenOutcome:
    """What syncing the children did, and the Deployment as the API server now has it."""

    deployment: Manifest | None = None
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)


def foreign_replica_writers(deployment: dict[str, Any] | None) -> list[str]:
    """Field managers other than tailguard that own the Deployment's ``spec.replicas``.

    An HPA or KEDA (through ``/scale``) or a hand ``kubectl scale`` shows up here.
    """
    if deployment is None:
        return []
    writers = []
    for entry in (deployment.get("metadata") or {}).get("managedFields") or []:
        fields = entry.get("fieldsV1") or {}
        if "f:replicas" in (fields.get("f:spec") or {}) and entry.get("manager") != FIELD_MANAGER:
            writers.append(str(entry.get("manager")))
    return sorted(set(writers))


def sync_children(
    isvc: InferenceService,
    api: ClusterAPI,
    *,
    from_view: bool = False,
    known_deployment: Manifest | None = None,
    default_image: str = DEFAULT_VLLM_IMAGE,
) -> ChildrenOutcome:
    """Apply every child whose live state differs from its rendering; skip writes that change nothing.

    Hand edits to fields tailguard sets (the pod template included) are reverted by the apply.
    Replicas are the exception when another field manager owns them (an HPA, KEDA): tailguard
    leaves them alone rather than fight, and the control loop reports it.

    With ``from_view``, ``known_deployment`` is the live Deployment (None: known to be absent), only
    the Deployment is synced and nothing is read: the periodic resync works from the watch-fed view.

    ``default_image`` is the operator's default vLLM image, for a spec that names none; every caller
    must pass the same one, or the callers would roll the replicas back and forth between theirs.
    """
    outcome = ChildrenOutcome()
    with_pod_monitor = not from_view and api.serves(*POD_MONITOR)
    for desired in render_all(isvc, with_pod_monitor=with_pod_monitor, default_image=default_image):
        meta = desired["metadata"]
        if from_view and desired["kind"] != "Deployment":
            continue
        if from_view:
            live = known_deployment
        else:
            live = api.get(desired["apiVersion"], desired["kind"], meta["namespace"], meta["name"])
        label = f"{desired['kind']}/{meta['name']}"
        if desired["kind"] == "Deployment" and foreign_replica_writers(live):
            desired["spec"].pop("replicas", None)
        if live is None:
            live = api.apply(desired)
            outcome.created.append(label)
        elif not is_subset(desired, live):
            live = api.apply(desired)
            outcome.updated.append(label)
        if desired["kind"] == "Deployment":
            outcome.deployment = live
    return outcome
