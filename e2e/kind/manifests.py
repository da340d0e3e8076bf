"""The objects the kind tier applies besides the chart: Prometheus, the InferenceService, the load pod."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from tailguard.k8s.labels import SERVICE_LABEL
from tailguard.k8s.render import HTTP_PORT

Manifest = dict[str, Any]

PROMETHEUS_PORT: Final = 9090
#: How often Prometheus scrapes the engines (and looks their addresses up again): the operator's
#: 10 s rate window holds five scrapes.
SCRAPE_INTERVAL: Final = "2s"
#: UID and GID of the pods the tier adds (no passwd entry needed; the stand-in image's own).
NON_ROOT: Final = 65532
LOAD_SCRIPT = Path(__file__).resolve().parent / "load.py"

_RESTRICTED_CONTAINER: Final[Manifest] = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


@dataclass(frozen=True)
class PrometheusNames:
    deployment: str = "prometheus"
    service: str = "prometheus"


def metrics_service(name: str, namespace: str) -> Manifest:
    """A headless Service over an InferenceService's pods: its DNS name lists every Ready pod's address,
    which is how Prometheus finds them here (see :func:`scrape_config`)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-metrics", "namespace": namespace},
        "spec": {
            "clusterIP": "None",
            "selector": {SERVICE_LABEL: name},
            "ports": [{"name": "http", "port": HTTP_PORT, "targetPort": "http"}],
        },
    }


def scrape_config(services: list[tuple[str, str]]) -> Manifest:
    """One job per (namespace, InferenceService): its pods, found by DNS, with the labels tailguard's
    queries group by.

    docs/operations.md's job discovers pods through the API server (``kubernetes_sd_configs``), but
    Debian's ``prometheus`` package is built without Kubernetes discovery ("field
    kubernetes_sd_configs not found"); DNS discovery of a headless Service gives the same targets
    (each Ready pod's ``/metrics``) and the labels are set per job.
    """
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "scrape_timeout": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": f"tailguard-vllm-{namespace}-{name}",
                "metrics_path": "/metrics",
                "dns_sd_configs": [
                    {
                        "names": [f"{name}-metrics.{namespace}.svc.cluster.local"],
                        "type": "A",
                        "port": HTTP_PORT,
                        "refresh_interval": SCRAPE_INTERVAL,
                    }
                ],
                "relabel_configs": [
                    {"target_label": "inference_service", "replacement": name},
                    {"target_label": "namespace", "replacement": namespace},
                ],
            }
            for namespace, name in services
        ],
    }


def prometheus(
    namespace: str, names: PrometheusNames, image: str, services: list[tuple[str, str]]
) -> list[Manifest]:
    """A one-replica Prometheus scraping the pods of ``services`` ((namespace, name) pairs), behind a
    ClusterIP Service."""
    labels = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/part-of": "tailguard-kind-tier"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "prometheus", "namespace": namespace},
            "data": {"prometheus.yml": yaml.safe_dump(scrape_config(services), sort_keys=False)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": names.deployment, "namespace": namespace, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "automountServiceAccountToken": False,  # DNS discovery: no API access
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534},
                        "containers": [
                            {
                                "name": "prometheus",
                                "image": image,
                                "imagePullPolicy": "Never",
                                "args": [
                                    "--config.file=/etc/prometheus/prometheus.yml",
                                    "--storage.tsdb.path=/prometheus",
                                    "--storage.tsdb.retention.time=2h",
                                    f"--web.listen-address=0.0.0.0:{PROMETHEUS_PORT}",
                                    "--log.level=warn",
                                ],
                                "ports": [{"name": "web", "containerPort": PROMETHEUS_PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/-/ready", "port": "web"},
                                    "periodSeconds": 2,
                                },
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "128Mi"},
                                    "limits": {"memory": "512Mi"},
                                },
                                "securityContext": _RESTRICTED_CONTAINER,
                                "volumeMounts": [
                                    {"name": "config", "mountPath": "/etc/prometheus"},
                                    {"name": "data", "mountPath": "/prometheus"},
                                ],
                            }
                        ],
                        "volumes": [
                            {"name": "config", "configMap": {"name": "prometheus"}},
                            {"name": "data", "emptyDir": {"sizeLimit": "1Gi"}},
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": names.service, "namespace": namespace, "labels": labels},
            "spec": {
                "selector": {"app.kubernetes.io/name": "prometheus"},
                "ports": [{"name": "web", "port": PROMETHEUS_PORT, "targetPort": "web"}],
            },
        },
    ]


def inference_service(name: str, image: str, *, interval_s: int, stabilization_s: int) -> Manifest:
    """One stand-in engine per replica and GPU, small enough to overload with a few connections.

    ``maxNumSeqs: 4`` (max batch held, not tuned) keeps a replica's capacity at a few requests per
    second, so a burst of a dozen closed-loop connections queues requests and breaks the 500 ms
    TTFT SLO; the decision interval and scale-down window are the shortest that keep the test
    within minutes.
    """
    return {
        "apiVersion": "tailguard.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "kind-tier/llama-8b-standin"},
            "engine": {
                "image": image,
                "maxNumSeqs": 4,
                "maxNumBatchedTokens": 2048,
                "startupTimeoutSeconds": 60,
                "shutdownTimeoutSeconds": 5,
            },
            "resources": {"gpus": 1, "cpu": "100m", "memory": "256Mi", "shmSize": "64Mi"},
            "slo": {"ttftP99Ms": 500, "goodputTarget": 0.95},
            "autoscaling": {
                "mode": "Auto",
                "minReplicas": 1,
                "maxReplicas": 4,
                "intervalSeconds": interval_s,
                "scaleDownStabilizationSeconds": stabilization_s,
                "maxBatch": {"enabled": False, "min": 4, "max": 4},
            },
        },
    }


def vllm_inference_service(name: str, image: str, model: str) -> Manifest:
    """One replica of real vLLM for CPUs (``images/engine-vllm-cpu``) serving the tiny model baked
    into its image at ``model``.

    Mode Auto between one and one replica: the operator reads the engine's metrics and decides every
    interval (which is what fills ``status.observed``), and the fleet stays one pod on a small node.
    The GPU is the node's fake ``nvidia.com/gpu``: the engine does not use it. ``extraArgs`` are part
    of what the operator renders: ``--enforce-eager`` skips torch.compile tracing (tens of seconds of
    a start on a CPU), ``--dtype float32`` is the engine tier's choice for this model on CPUs.
    """
    return {
        "apiVersion": "tailguard.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": name},
        "spec": {
            "model": {"name": model},
            "engine": {
                "image": image,
                "maxNumSeqs": 4,
                "maxNumBatchedTokens": 2048,
                "maxModelLen": 1024,
                "startupTimeoutSeconds": 600,
                "shutdownTimeoutSeconds": 5,
                "extraArgs": ["--enforce-eager", "--dtype", "float32"],
            },
            "resources": {"gpus": 1, "cpu": "500m", "memory": "4Gi", "shmSize": "256Mi"},
            "slo": {"ttftP99Ms": 2000, "goodputTarget": 0.9},
            "autoscaling": {
                "mode": "Auto",
                "minReplicas": 1,
                "maxReplicas": 1,
                "intervalSeconds": 5,
                "scaleDownStabilizationSeconds": 30,
                "maxBatch": {"enabled": False, "min": 4, "max": 4},
            },
        },
    }


def load_objects(
    name: str,
    namespace: str,
    image: str,
    service_url: str,
    model: str,
    *,
    workers: int,
    duration_s: int,
    max_tokens: int,
    max_requests: int = 20000,
) -> list[Manifest]:
    """A ConfigMap holding ``load.py`` and a pod running it once against ``service_url``.

    Bounded three ways: the script's own duration and request count, and the pod's
    ``activeDeadlineSeconds``.
    """
    args = [
        "python",
        "/load/load.py",
        service_url,
        model,
        f"--workers={workers}",
        f"--duration={duration_s}",
        f"--max-requests={max_requests}",
        f"--max-tokens={max_tokens}",
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"load.py": LOAD_SCRIPT.read_text()},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/name": "load"}},
            "spec": {
                "restartPolicy": "Never",
                "activeDeadlineSeconds": duration_s + 120,
                "securityContext": {"runAsNonRoot": True, "runAsUser": NON_ROOT, "runAsGroup": NON_ROOT},
                "containers": [
                    {
                        "name": "load",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": args[:1],
                        "args": args[1:],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"memory": "256Mi"},
                        },
                        "securityContext": _RESTRICTED_CONTAINER,
                        "volumeMounts": [{"name": "script", "mountPath": "/load"}],
                    }
                ],
                "volumes": [{"name": "script", "configMap": {"name": name}}],
            },
        },
    ]


def service_url(name: str, namespace: str) -> str:
    """The InferenceService's Service as pods reach it."""
    return f"http://{name}.{namespace}.svc.cluster.local:{HTTP_PORT}"
