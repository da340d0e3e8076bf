"""Reconcile one InferenceService: validate, sync children, derive status, note events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailguard.api import (
    API_VERSION,
    KIND,
    InferenceService,
    InvalidResourceError,
    parse_inference_service,
)
from tailguard.k8s.cluster import ClusterAPI, Manifest
from tailguard.k8s.labels import POLICY_STATE_ANNOTATION, selector_labels
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.children import sync_children, sync_deployment
from tailguard.reconcile.conditions import find_condition
from tailguard.reconcile.rollout_repair import repair_stalled_rollout
from tailguard.reconcile.sizing import running_size
from tailguard.reconcile.status import (
    WORKLOAD_CONDITIONS,
    WORKLOAD_STATUS_FIELDS,
    EventNote,
    changed_fields,
    invalid_spec_status,
    workload_status,
)
from tailguard.reconcile.workload import Workload, observe_workload

#: Ready reasons that deserve a Warning Event when they appear.
_WARNED_READY_REASONS = frozenset({"Unschedulable", "ReplicasFailing"})


@dataclass(frozen=True)
class LiveChildren:
    """The live Deployment (None: absent) and pods of a service, as the watch-fed inventory has them."""

    deployment: Manifest | None
    pods: list[Manifest]


@dataclass
class ReconcileResult:
    """The status patch to write (only what changed) and the events to post."""

    status_patch: dict[str, Any] = field(default_factory=dict)
    #: Events of writes this reconcile made (children created or updated, a rollout repaired):
    #: true whether or not the status write that follows lands.
    action_events: list[EventNote] = field(default_factory=list)
    #: Events of the status it computed (a spec found invalid, a Ready reason warned of): true
    #: only once that status is written.
    status_events: list[EventNote] = field(default_factory=list)
    isvc: InferenceService | None = None
    workload: Workload | None = None

    @property
    def events(self) -> list[EventNote]:
        """Every event to post, the writes' first."""
        return [*self.action_events, *self.status_events]


def reconcile(
    body: Mapping[str, Any],
    api: ClusterAPI,
    settings: RenderSettings,
    *,
    now: float,
    live: LiveChildren | None = None,
    parsed: InferenceService | None = None,
) -> ReconcileResult:
    """Bring the children of the InferenceService ``body`` in line with its spec; idempotent.

    An invalid spec applies nothing and is reported as ``InvalidSpec=True`` with an event. With
    ``live`` (from the watch-fed inventory) nothing is read from the API server and only the
    Deployment is synced. ``parsed``: ``body`` already parsed (a valid spec), so it is not parsed
    again.
    """
    status = dict(body.get("status") or {})
    try:
        isvc = parsed if parsed is not None else parse_inference_service(body)
    except InvalidResourceError as exc:
        meta = body.get("metadata") or {}
        patch = invalid_spec_status(
            list(status.get("conditions") or []), str(exc), now=now, generation=meta.get("generation")
        )
        result = ReconcileResult(status_patch=changed_fields(status, patch))
        if result.status_patch:
            result.status_events.append(EventNote("Warning", "InvalidSpec", str(exc)))
        return result

    size = running_size(isvc)
    if live is None:
        children = sync_children(isvc, api, size, settings)
        pods = api.list("v1", "Pod", isvc.metadata.namespace, selector_labels(isvc.metadata.name))
    else:
        children = sync_deployment(isvc, api, size, settings, live.deployment)
        pods = live.pods
    result = ReconcileResult(isvc=isvc)
    for label in children.created:
        result.action_events.append(EventNote("Normal", "Created", f"created {label}"))
    for label in children.updated:
        result.action_events.append(EventNote("Normal", "Updated", f"brought {label} back to the spec"))
    for mark in repair_stalled_rollout(api, children.deployment, isvc.metadata.name):
        result.action_events.append(
            EventNote(
                "Warning",
                "RolloutStalled",
                f"ReplicaSet/{mark.name} was marked for {mark.marked} replicas where the Deployment wants "
                f"{mark.wanted}, which stalls its rollout; set the mark to {mark.wanted}",
            )
        )

    workload = observe_workload(children.deployment, pods)
    result.workload = workload
    patch = workload_status(isvc, workload, size, now=now)
    result.status_patch = changed_fields(status, patch)
    old_ready = find_condition(status.get("conditions") or [], "Ready")
    new_ready = find_condition(patch["conditions"], "Ready")
    assert new_ready is not None  # workload_status always sets it
    if (
        new_ready["reason"] in _WARNED_READY_REASONS
        and (old_ready or {}).get("reason") != new_ready["reason"]
    ):
        result.status_events.append(EventNote("Warning", new_ready["reason"], new_ready["message"]))
    return result


#: Metadata :func:`reconcile` does not read: the version, the field managers, and (apart from the
#: policy's state) the annotations, which are compared on their own.
_UNREAD_METADATA = frozenset({"resourceVersion", "managedFields", "annotations"})


def resync_finds_the_same(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Whether :func:`reconcile` finds for ``after`` what it found for ``before``, their children
    being the same: the two copies differ at most in what the autoscaler writes (its own status
    fields and conditions, the policy-state annotation) and in their version.

    A status write of the autoscaler comes back as such a copy, about once a minute per service; a
    resync that found nothing to do on the copy before it would find nothing again.
    """
    if before.get("spec") != after.get("spec") or before.get("apiVersion") != after.get("apiVersion"):
        return False
    meta_before, meta_after = before.get("metadata") or {}, after.get("metadata") or {}
    for key in (meta_before.keys() | meta_after.keys()) - _UNREAD_METADATA:
        if meta_before.get(key) != meta_after.get(key):
            return False
    if _annotations_read(meta_before) != _annotations_read(meta_after):
        return False
    status_before, status_after = before.get("status") or {}, after.get("status") or {}
    for key in WORKLOAD_STATUS_FIELDS - {"conditions"}:
        if status_before.get(key) != status_after.get(key):
            return False
    return _workload_conditions(status_before) == _workload_conditions(status_after)


def _annotations_read(meta: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in (meta.get("annotations") or {}).items() if k != POLICY_STATE_ANNOTATION}


def _workload_conditions(status: Mapping[str, Any]) -> list[Any]:
    return [c for c in status.get("conditions") or [] if c.get("type") in WORKLOAD_CONDITIONS]


def write_status(
    api: ClusterAPI, body: Mapping[str, Any], result: ReconcileResult, *, conditional: bool = True
) -> Manifest | None:
    """Merge-patch the status when something changed; if ``conditional``, only if ``body`` is still
    current. Returns the object as the write left it (``None``: nothing written, or not known).

    Raises :class:`~tailguard.k8s.cluster.ConflictError` when the object changed since it was read.
    """
    if not result.status_patch:
        return None
    meta = body["metadata"]
    return api.patch_status(
        API_VERSION,
        KIND,
        meta["namespace"],
        meta["name"],
        result.status_patch,
        resource_version=meta.get("resourceVersion") if conditional else None,
    )
