"""Label and annotation keys tailguard puts on what it manages."""

from __future__ import annotations

from typing import Final

from tailguard.contract import vllm as contract

SERVICE_LABEL: Final = "tailguard.dev/inference-service"
#: The Prometheus label that carries the InferenceService name (set by the PodMonitor's relabeling).
PROMETHEUS_SERVICE_LABEL: Final = contract.SERVICE_LABEL
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "tailguard"
FIELD_MANAGER: Final = "tailguard"
#: Annotation on the InferenceService holding the autoscaling policy's durable state (JSON).
POLICY_STATE_ANNOTATION: Final = "tailguard.dev/policy-state"


def selector_labels(name: str) -> dict[str, str]:
    """Labels that select one InferenceService's pods (immutable on the Deployment)."""
    return {SERVICE_LABEL: name}


def common_labels(name: str) -> dict[str, str]:
    """Labels on every object tailguard creates for one InferenceService."""
    return {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": "inference-server",
        MANAGED_BY_LABEL: MANAGED_BY,
        SERVICE_LABEL: name,
    }


def selector_string(name: str) -> str:
    """The pod selector as the ``/scale`` subresource wants it: a string."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(name).items()))
