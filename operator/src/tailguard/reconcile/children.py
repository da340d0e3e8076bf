"""Create or patch the Deployment, Service and PodMonitor of one InferenceService."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tailguard.api import InferenceService
from tailguard.k8s.cluster import ClusterAPI, Manifest
from tailguard.k8s.labels import FIELD_MANAGER
from tailguard.k8s.render import RenderSettings, render_all, render_deployment
from tailguard.reconcile.diff import is_subset
from tailguard.reconcile.sizing import RunningSize

POD_MONITOR = ("monitoring.coreos.com/v1", "PodMonitor")


@dataclass
class ChildrenOutcome:
    """What syncing the children did, and the Deployment as the API server now has it."""

    deployment: Manifest | None = None
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)

    @property
    def writes(self) -> int:
        """API writes made."""
        return len(self.created) + len(self.updated)


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


def _apply_if_drifted(
    api: ClusterAPI, desired: Manifest, live: Manifest | None, outcome: ChildrenOutcome
) -> Manifest | None:
    """Apply ``desired`` when ``live`` lacks any of it; returns the object as it now stands."""
    label = f"{desired['kind']}/{desired['metadata']['name']}"
    if desired["kind"] == "Deployment" and foreign_replica_writers(live):
        desired["spec"].pop("replicas", None)  # an HPA or KEDA owns them: do not fight
    if live is None:
        outcome.created.append(label)
        return api.apply(desired)
    if not is_subset(desired, live):
        outcome.updated.append(label)
        return api.apply(desired)
    return live


def sync_children(
    isvc: InferenceService, api: ClusterAPI, size: RunningSize, settings: RenderSettings
) -> ChildrenOutcome:
    """Read every child and apply each whose live state differs from its rendering at ``size``.

    Hand edits to fields tailguard sets (the pod template included) are reverted by the apply.
    Replicas are the exception when another field manager owns them (an HPA, KEDA): tailguard
    leaves them alone rather than fight, and the control loop reports it. The PodMonitor is
    rendered only where its CRD is served.
    """
    outcome = ChildrenOutcome()
    settings = dataclasses.replace(settings, pod_monitor=settings.pod_monitor and api.serves(*POD_MONITOR))
    for desired in render_all(isvc, size.replicas, size.max_batch, settings):
        meta = desired["metadata"]
        live = api.get(desired["apiVersion"], desired["kind"], meta["namespace"], meta["name"])
        live = _apply_if_drifted(api, desired, live, outcome)
        if desired["kind"] == "Deployment":
            outcome.deployment = live
    return outcome


def sync_deployment(
    isvc: InferenceService,
    api: ClusterAPI,
    size: RunningSize,
    settings: RenderSettings,
    live: Manifest | None,
) -> ChildrenOutcome:
    """Apply the Deployment at ``size`` if ``live`` (the watch-fed copy; None: absent) differs from it.

    Reads nothing: the periodic resync and the control loop's actions work from the inventory.
    """
    outcome = ChildrenOutcome()
    desired = render_deployment(isvc, size.replicas, size.max_batch, settings)
    outcome.deployment = _apply_if_drifted(api, desired, live, outcome)
    return outcome
