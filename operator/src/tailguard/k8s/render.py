"""Pure renderers: an InferenceService in, the Kubernetes objects that serve it out.

Nothing here talks to the API server; the same functions back ``tailguard render`` and the operator.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final

from tailguard.api import DEFAULT_VLLM_IMAGE, InferenceService
from tailguard.api.resource import API_VERSION, KIND
from tailguard.contract.vllm import CUSTOM_BUCKETS_FLAG, slo_bucket_overrides
from tailguard.k8s.cluster import Manifest
from tailguard.k8s.labels import PROMETHEUS_SERVICE_LABEL, SERVICE_LABEL, common_labels, selector_labels

HTTP_PORT: Final = 8000
PORT_NAME: Final = "http"
CONTAINER_NAME: Final = "vllm"
#: Seconds between the end of vLLM's drain and SIGKILL, for the process to exit cleanly.
GRACE_MARGIN_S: Final = 15
STARTUP_PROBE_PERIOD_S: Final = 10


@dataclass(frozen=True)
class RenderSettings:
    """What the operator adds to every rendering beyond the InferenceService itself."""

    #: The vLLM image of a spec that names none. Resolved at every rendering, never stored in the
    #: object: a new default rolls every service that names no image at its next reconcile.
    default_image: str = DEFAULT_VLLM_IMAGE
    #: Render a PodMonitor too (clusters with the Prometheus Operator).
    pod_monitor: bool = True


def owner_reference(isvc: InferenceService) -> Manifest | None:
    """The controller owner reference to the InferenceService (None before it has a uid)."""
    if not isvc.metadata.uid:
        return None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": isvc.metadata.name,
        "uid": isvc.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(isvc: InferenceService) -> Manifest:
    meta: Manifest = {
        "name": isvc.metadata.name,
        "namespace": isvc.metadata.namespace,
        "labels": common_labels(isvc.metadata.name),
    }
    owner = owner_reference(isvc)
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def vllm_args(isvc: InferenceService, max_batch: int) -> list[str]:
    """Arguments of ``vllm serve`` (the image's entrypoint), model first."""
    engine = isvc.spec.engine
    args = [
        isvc.spec.model.name,
        "--served-model-name",
        isvc.served_name,
        "--port",
        str(HTTP_PORT),
        "--max-num-seqs",
        str(max_batch),
        "--max-num-batched-tokens",
        str(engine.max_num_batched_tokens),
        "--gpu-memory-utilization",
        f"{engine.gpu_memory_utilization:g}",
        "--tensor-parallel-size",
        str(engine.tensor_parallel_size),
        "--shutdown-timeout",
        str(engine.shutdown_timeout_seconds),
    ]
    if engine.max_model_len is not None:
        args += ["--max-model-len", str(engine.max_model_len)]
    return args + _slo_buckets(isvc) + list(engine.extra_args)


def _slo_buckets(isvc: InferenceService) -> list[str]:
    """``--custom-histogram-buckets`` with each SLO that is not an edge of vLLM's default buckets
    added as one, so the share of requests within it is counted, not interpolated. Nothing when
    every SLO is an edge, or when ``extraArgs`` sets the flag (the user's buckets win)."""
    given = any(
        a == CUSTOM_BUCKETS_FLAG or a.startswith(CUSTOM_BUCKETS_FLAG + "=")
        for a in isvc.spec.engine.extra_args
    )
    slo = isvc.spec.slo
    tpot_s = slo.tpot_p99_ms / 1000.0 if slo.tpot_p99_ms is not None else None
    overrides = slo_bucket_overrides(slo.ttft_p99_ms / 1000.0, tpot_s)
    if given or not overrides:
        return []
    return [CUSTOM_BUCKETS_FLAG, json.dumps(overrides, separators=(",", ":"))]


def vllm_image(isvc: InferenceService, settings: RenderSettings) -> str:
    """The image the replicas run: ``spec.engine.image`` when set, else the operator's default."""
    return isvc.spec.engine.image or settings.default_image


def _env(isvc: InferenceService) -> list[Manifest]:
    env: list[Manifest] = []
    token = isvc.spec.model.token_secret_ref
    if token is not None:
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}}}
        )
    cache = isvc.spec.model.cache
    if cache is not None:
        env.append({"name": "HF_HOME", "value": cache.mount_path})
    for var in isvc.spec.engine.env:
        env.append(var.model_dump(mode="json", by_alias=True, exclude_none=True))
    return env


def _volumes(isvc: InferenceService) -> tuple[list[Manifest], list[Manifest]]:
    volumes: list[Manifest] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": isvc.spec.resources.shm_size}}
    ]
    mounts: list[Manifest] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    cache = isvc.spec.model.cache
    if cache is not None:
        volumes.append(
            {
                "name": "model-cache",
                "persistentVolumeClaim": {"claimName": cache.claim_name, "readOnly": cache.read_only},
            }
        )
        mounts.append({"name": "model-cache", "mountPath": cache.mount_path, "readOnly": cache.read_only})
    return volumes, mounts


def _probes(isvc: InferenceService) -> Manifest:
    http_get = {"path": "/health", "port": PORT_NAME}
    startup_failures = math.ceil(isvc.spec.engine.startup_timeout_seconds / STARTUP_PROBE_PERIOD_S)
    return {
        # The HTTP server starts only once weights are loaded: a startup probe absorbs the load time.
        "startupProbe": {
            "httpGet": http_get,
            "periodSeconds": STARTUP_PROBE_PERIOD_S,
            "failureThreshold": startup_failures,
            "timeoutSeconds": 5,
        },
        "readinessProbe": {
            "httpGet": http_get,
            "periodSeconds": 5,
            "failureThreshold": 3,
            "timeoutSeconds": 5,
        },
        "livenessProbe": {
            "httpGet": http_get,
            "periodSeconds": 15,
            "failureThreshold": 4,
            "timeoutSeconds": 10,
        },
    }


def _resources(isvc: InferenceService) -> Manifest:
    res = isvc.spec.resources
    gpus = str(res.gpus)
    return {
        "requests": {"cpu": res.cpu, "memory": res.memory, res.gpu_resource_name: gpus},
        "limits": {"memory": res.memory, res.gpu_resource_name: gpus},
    }


def rolling_update(replicas: int) -> Manifest:
    """How the Deployment replaces its pods. GPUs are scarce and a surge pod may sit Pending, so
    replace one replica at a time (the policy keeps one spare while a rollout runs). One replica
    alone is not taken down before its successor is Ready: replaced in place, a spec change
    would leave the service with no replica for the whole model load. Its surge pod waits for a
    GPU while the old one serves."""
    if replicas <= 1:
        return {"maxSurge": 1, "maxUnavailable": 0}
    return {"maxSurge": 0, "maxUnavailable": 1}


def render_deployment(
    isvc: InferenceService, replicas: int, max_batch: int, settings: RenderSettings
) -> Manifest:
    """The vLLM Deployment for ``isvc`` at ``replicas`` replicas running ``max_batch`` (--max-num-seqs)."""
    name = isvc.metadata.name
    volumes, mounts = _volumes(isvc)
    engine = isvc.spec.engine
    container: Manifest = {
        "name": CONTAINER_NAME,
        "image": vllm_image(isvc, settings),
        "args": vllm_args(isvc, max_batch),
        "ports": [{"name": PORT_NAME, "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "resources": _resources(isvc),
        "volumeMounts": mounts,
        **_probes(isvc),
    }
    env = _env(isvc)
    if env:  # the API server drops an empty list, which would read as drift
        container["env"] = env
    pod_spec: Manifest = {
        "containers": [container],
        "volumes": volumes,
        "terminationGracePeriodSeconds": engine.shutdown_timeout_seconds + GRACE_MARGIN_S,
    }
    placement = isvc.spec.resources
    if placement.node_selector:
        pod_spec["nodeSelector"] = dict(placement.node_selector)
    if placement.tolerations:
        pod_spec["tolerations"] = [
            t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in placement.tolerations
        ]
    if placement.affinity:
        pod_spec["affinity"] = placement.affinity
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(isvc),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(replicas)},
            "progressDeadlineSeconds": engine.startup_timeout_seconds + 300,
            "revisionHistoryLimit": 3,
            "template": {
                "metadata": {"labels": common_labels(name)},
                "spec": pod_spec,
            },
        },
    }


def render_service(isvc: InferenceService) -> Manifest:
    """The ClusterIP Service in front of the replicas (port ``http``, 8000)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(isvc),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(isvc.metadata.name),
            "ports": [{"name": PORT_NAME, "port": HTTP_PORT, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def render_pod_monitor(isvc: InferenceService, *, scrape_interval_s: int = 15) -> Manifest:
    """A Prometheus Operator PodMonitor that scrapes every replica's ``/metrics``.

    The relabeling copies the pod's service label into ``inference_service``, the label tailguard's
    queries group by.
    """
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": _metadata(isvc),
        "spec": {
            "selector": {"matchLabels": selector_labels(isvc.metadata.name)},
            "podMetricsEndpoints": [
                {
                    "port": PORT_NAME,
                    "path": "/metrics",
                    "interval": f"{scrape_interval_s}s",
                    "relabelings": [
                        {
                            "sourceLabels": [f"__meta_kubernetes_pod_label_{_label_name(SERVICE_LABEL)}"],
                            "targetLabel": PROMETHEUS_SERVICE_LABEL,
                        }
                    ],
                }
            ],
        },
    }


def _label_name(key: str) -> str:
    """A Kubernetes label key as Prometheus service discovery exposes it."""
    return "".join(c if c.isalnum() else "_" for c in key)


def render_all(
    isvc: InferenceService, replicas: int, max_batch: int, settings: RenderSettings
) -> list[Manifest]:
    """Every object the operator creates for ``isvc`` at the given size, in apply order."""
    objects = [render_deployment(isvc, replicas, max_batch, settings), render_service(isvc)]
    if settings.pod_monitor:
        objects.append(render_pod_monitor(isvc))
    return objects


__all__ = [
    "SERVICE_LABEL",
    "Manifest",
    "RenderSettings",
    "owner_reference",
    "render_all",
    "render_deployment",
    "render_pod_monitor",
    "render_service",
    "vllm_args",
    "vllm_image",
]
