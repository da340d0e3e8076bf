"""What the replicas are doing, read from the Deployment and its pods."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from tailguard.k8s.cluster import Manifest
from tailguard.k8s.render import CONTAINER_NAME
from tailguard.reconcile.timestamps import seconds_since

#: Container waiting reasons that will not fix themselves, with what they usually mean.
_STUCK_REASONS = {
    "CreateContainerConfigError": "a referenced Secret or ConfigMap is missing",
    "ImagePullBackOff": "the image cannot be pulled",
    "ErrImagePull": "the image cannot be pulled",
    "InvalidImageName": "the image name is invalid",
    "CrashLoopBackOff": "vLLM keeps exiting; see the pod log",
}


@dataclass(frozen=True)
class Workload:
    """Replica counts and problems of one InferenceService's pods."""

    replicas: int = 0
    ready: int = 0
    updated: int = 0
    #: Pods the scheduler cannot place (not capacity: e.g. no free GPU).
    pending: int = 0
    #: Pods scheduled but not ready yet (loading the model): capacity on the way.
    starting: int = 0
    rollout_in_progress: bool = False
    unschedulable_message: str = ""
    problems: tuple[str, ...] = field(default_factory=tuple)
    #: The vLLM container's image in the pod template (None without a Deployment).
    image: str | None = None
    #: Median seconds from a pod's creation to Ready over the live Ready pods (None without any):
    #: the start-up horizon the policy holds capacity for.
    startup_s: float | None = None


def _is_unschedulable(pod: Manifest) -> tuple[bool, str]:
    if (pod.get("status") or {}).get("phase") != "Pending":
        return False, ""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return True, str(cond.get("message") or cond.get("reason") or "")
    return False, ""


def _is_ready(pod: Manifest) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def startup_seconds(pod: Manifest) -> float | None:
    """Seconds from the pod's creation to its Ready condition (None when not Ready or unreadable)."""
    created = (pod.get("metadata") or {}).get("creationTimestamp")
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            ready_at = cond.get("lastTransitionTime")
            if not created or not ready_at:
                return None
            # seconds_since(a, t) - seconds_since(b, t) is b - a for any t.
            took = seconds_since(created, 0.0) - seconds_since(ready_at, 0.0)
            return took if 0.0 <= took < 86400.0 else None
    return None


def _stuck(pod: Manifest) -> list[str]:
    found = []
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        reason = waiting.get("reason", "")
        if reason in _STUCK_REASONS:
            detail = waiting.get("message") or _STUCK_REASONS[reason]
            found.append(f"pod {pod['metadata']['name']}: {reason}: {detail}")
    return found


def _template_image(deployment: Manifest) -> str | None:
    pod_spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in pod_spec.get("containers") or []:
        if container.get("name") == CONTAINER_NAME and container.get("image"):
            return str(container["image"])
    return None


def observe_workload(deployment: Manifest | None, pods: Sequence[Manifest]) -> Workload:
    """Summarise the Deployment's status and its live pods (terminating pods are ignored)."""
    if deployment is None:
        return Workload()
    status = deployment.get("status") or {}
    spec = deployment.get("spec") or {}
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    pending = 0
    message = ""
    problems: list[str] = []
    starting = 0
    for pod in live:
        unschedulable, why = _is_unschedulable(pod)
        if unschedulable:
            pending += 1
            message = message or why
        elif not _is_ready(pod):
            starting += 1
        problems.extend(_stuck(pod))
    desired = int(spec.get("replicas") or 0)
    updated = int(status.get("updatedReplicas") or 0)
    generation_seen = int(status.get("observedGeneration") or 0) >= int(
        (deployment.get("metadata") or {}).get("generation") or 0
    )
    rollout = not generation_seen or updated < desired or int(status.get("replicas") or 0) > desired
    startups = [t for t in (startup_seconds(p) for p in live) if t is not None]
    return Workload(
        replicas=int(status.get("replicas") or 0),
        ready=int(status.get("readyReplicas") or 0),
        updated=updated,
        pending=pending,
        starting=starting,
        rollout_in_progress=rollout,
        unschedulable_message=message,
        problems=tuple(sorted(problems)),
        image=_template_image(deployment),
        startup_s=statistics.median(startups) if startups else None,
    )
