"""Create or patch the Deployment, Service and PodMonitor of one InferenceService."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailguard.api import InferenceService
from tailguard.k8s.cluster import ClusterAPI, Manifest
from tailguard.k8s.render import render_all
from tailguard.reconcile.diff import is_subset

POD_MONITOR = ("monitoring.coreos.com/v1", "PodMonitor")


@dataclass
class ChildrenOutcome:
    """What syncing the children did, and the Deployment as the API server now has it."""

    deployment: Manifest | None = None
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)


def sync_children(isvc: InferenceService, api: ClusterAPI) -> ChildrenOutcome:
    """Apply every child whose live state differs from its rendering; skip writes that change nothing.

    Hand edits to fields tailguard sets (the pod template included) are reverted by the apply.
    """
    outcome = ChildrenOutcome()
    for desired in render_all(isvc, with_pod_monitor=api.serves(*POD_MONITOR)):
        meta = desired["metadata"]
        live = api.get(desired["apiVersion"], desired["kind"], meta["namespace"], meta["name"])
        label = f"{desired['kind']}/{meta['name']}"
        if live is None:
            live = api.apply(desired)
            outcome.created.append(label)
        elif not is_subset(desired, live):
            live = api.apply(desired)
            outcome.updated.append(label)
        if desired["kind"] == "Deployment":
            outcome.deployment = live
    return outcome
