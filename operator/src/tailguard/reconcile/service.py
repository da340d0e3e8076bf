"""Reconcile one InferenceService: validate, sync children, derive status, note events."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tailguard.api import (
    API_VERSION,
    DEFAULT_VLLM_IMAGE,
    KIND,
    InferenceService,
    InvalidResourceError,
    parse_inference_service,
)
from tailguard.k8s.cluster import ClusterAPI
from tailguard.k8s.labels import selector_labels
from tailguard.reconcile.children import sync_children
from tailguard.reconcile.status import EventNote, changed_fields, invalid_spec_status, workload_status
from tailguard.reconcile.workload import Workload, observe_workload


@dataclass
class ReconcileResult:
    """The status patch to write (only what changed) and the events to post."""

    status_patch: dict[str, Any] = field(default_factory=dict)
    events: list[EventNote] = field(default_factory=list)
    isvc: InferenceService | None = None
    workload: Workload | None = None


def reconcile(
    body: Mapping[str, Any],
    api: ClusterAPI,
    *,
    now: str,
    view: tuple[dict[str, Any] | None, list[dict[str, Any]]] | None = None,
    default_image: str = DEFAULT_VLLM_IMAGE,
) -> ReconcileResult:
    """Bring the children of the InferenceService ``body`` in line with its spec; idempotent.

    An invalid spec applies nothing and is reported as ``InvalidSpec=True`` with an event. With
    ``view`` (the live Deployment and pods, from the watch-fed inventory) nothing is read from the
    API server and only the Deployment is synced. ``default_image`` is the operator's default vLLM
    image, for a spec that names none.
    """
    status = dict(body.get("status") or {})
    try:
        isvc = parse_inference_service(body)
    except InvalidResourceError as exc:
        meta = body.get("metadata") or {}
        patch = invalid_spec_status(
            list(status.get("conditions") or []), str(exc), now=now, generation=meta.get("generation")
        )
        result = ReconcileResult(status_patch=changed_fields(status, patch))
        if result.status_patch:
            result.events.append(EventNote("Warning", "InvalidSpec", str(exc)))
        return result

    if view is None:
        children = sync_children(isvc, api, default_image=default_image)
        pods = api.list("v1", "Pod", isvc.metadata.namespace, selector_labels(isvc.metadata.name))
    else:
        children = sync_children(
            isvc, api, from_view=True, known_deployment=view[0], default_image=default_image
        )
        pods = view[1]
    result = ReconcileResult(isvc=isvc)
    for label in children.created:
        result.events.append(EventNote("Normal", "Created", f"created {label}"))
    for label in children.updated:
        result.events.append(EventNote("Normal", "Updated", f"brought {label} back to the spec"))

    workload = observe_workload(children.deployment, pods)
    result.workload = workload
    patch = workload_status(isvc, workload, now=now)
    result.status_patch = changed_fields(status, patch)
    old_ready = _condition_reason(status, "Ready")
    new_ready = _condition_reason(patch, "Ready")
    if new_ready != old_ready and new_ready in {"Unschedulable", "ReplicasFailing"}:
        message = next(c["message"] for c in patch["conditions"] if c["type"] == "Ready")
        result.events.append(EventNote("Warning", new_ready, message))
    return result


def _condition_reason(status: Mapping[str, Any], type_: str) -> str | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == type_:
            return str(cond.get("reason"))
    return None


def write_status(
    api: ClusterAPI, body: Mapping[str, Any], result: ReconcileResult, *, conditional: bool = True
) -> None:
    """Merge-patch the status when something changed; if ``conditional``, only if ``body`` is still current.

    Raises :class:`~tailguard.k8s.cluster.ConflictError` when the object changed since it was read.
    """
    if not result.status_patch:
        return
    meta = body["metadata"]
    api.patch_status(
        API_VERSION,
        KIND,
        meta["namespace"],
        meta["name"],
        result.status_patch,
        resource_version=meta.get("resourceVersion") if conditional else None,
    )
