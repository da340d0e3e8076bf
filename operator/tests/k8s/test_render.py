"""Renderers: what each spec becomes in the Deployment, Service and PodMonitor (table-driven)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailguard.api import DEFAULT_VLLM_IMAGE, parse_inference_service
from tailguard.k8s.render import (
    render_all,
    render_deployment,
    render_pod_monitor,
    render_service,
    vllm_image,
)
from tailguard.manifests import load_inference_services
from tg_testing import manifest

REPO = Path(__file__).resolve().parents[3]


def _deployment(**spec: Any) -> dict[str, Any]:
    return render_deployment(parse_inference_service(manifest(**spec)), replicas=2, max_num_seqs=128)


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return container


def _arg(dep: dict[str, Any], flag: str) -> str | None:
    args = _container(dep)["args"]
    return args[args.index(flag) + 1] if flag in args else None


CASES: list[tuple[str, dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
    (
        "model is the first argument",
        {},
        lambda d: _container(d)["args"][0] == "meta-llama/Llama-3.1-8B-Instruct",
    ),
    ("served name defaults to resource name", {}, lambda d: _arg(d, "--served-model-name") == "chat"),
    (
        "served name override",
        {"model": {"name": "m/x", "servedName": "chat-v2"}},
        lambda d: _arg(d, "--served-model-name") == "chat-v2",
    ),
    ("max batch given by the caller", {}, lambda d: _arg(d, "--max-num-seqs") == "128"),
    (
        "token budget",
        {"engine": {"maxNumBatchedTokens": 4096}},
        lambda d: _arg(d, "--max-num-batched-tokens") == "4096",
    ),
    ("no max model len by default", {}, lambda d: _arg(d, "--max-model-len") is None),
    ("max model len", {"engine": {"maxModelLen": 4096}}, lambda d: _arg(d, "--max-model-len") == "4096"),
    (
        "port 8000",
        {},
        lambda d: _arg(d, "--port") == "8000" and _container(d)["ports"][0]["containerPort"] == 8000,
    ),
    (
        "tensor parallel and gpus",
        {"engine": {"tensorParallelSize": 4}, "resources": {"gpus": 4}},
        lambda d: (
            _arg(d, "--tensor-parallel-size") == "4"
            and _container(d)["resources"]["limits"]["nvidia.com/gpu"] == "4"
            and _container(d)["resources"]["requests"]["nvidia.com/gpu"] == "4"
        ),
    ),
    (
        "grace period above the drain timeout",
        {"engine": {"shutdownTimeoutSeconds": 60}},
        lambda d: (
            _arg(d, "--shutdown-timeout") == "60"
            and d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 60
        ),
    ),
    (
        "startup budget covers the model load",
        {"engine": {"startupTimeoutSeconds": 1200}},
        lambda d: (
            _container(d)["startupProbe"]["failureThreshold"] * _container(d)["startupProbe"]["periodSeconds"]
            >= 1200
        ),
    ),
    (
        "probes on /health",
        {},
        lambda d: all(
            _container(d)[p]["httpGet"]["path"] == "/health"
            for p in ("startupProbe", "readinessProbe", "livenessProbe")
        ),
    ),
    (
        "shm is a memory emptyDir",
        {},
        lambda d: d["spec"]["template"]["spec"]["volumes"][0]["emptyDir"]["medium"] == "Memory",
    ),
    (
        "hub token from a secret",
        {"model": {"name": "m/x", "tokenSecretRef": {"name": "hf"}}},
        lambda d: (
            _container(d)["env"][0]
            == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
        ),
    ),
    (
        "model cache volume and HF_HOME",
        {"model": {"name": "m/x", "cache": {"claimName": "weights", "mountPath": "/models"}}},
        lambda d: (
            {"name": "HF_HOME", "value": "/models"} in _container(d)["env"]
            and any(
                v.get("persistentVolumeClaim", {}).get("claimName") == "weights"
                for v in d["spec"]["template"]["spec"]["volumes"]
            )
        ),
    ),
    (
        "extra args appended",
        {"engine": {"extraArgs": ["--enable-prefix-caching"]}},
        lambda d: _container(d)["args"][-1] == "--enable-prefix-caching",
    ),
    (
        "user env",
        {"engine": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}},
        lambda d: _container(d)["env"] == [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
    ),
    (
        "placement",
        {
            "resources": {
                "nodeSelector": {"gpu": "h100"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            }
        },
        lambda d: (
            d["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "h100"}
            and d["spec"]["template"]["spec"]["tolerations"]
            == [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        ),
    ),
    (
        "rollout never surges on scarce gpus",
        {},
        lambda d: d["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1},
    ),
    ("replicas from the caller", {}, lambda d: d["spec"]["replicas"] == 2),
    (
        "owner reference to the inference service",
        {},
        lambda d: (
            d["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
            and d["metadata"]["ownerReferences"][0]["controller"]
        ),
    ),
    (
        "selector is the service label",
        {},
        lambda d: (
            d["spec"]["selector"]["matchLabels"] == {"tailguard.dev/inference-service": "chat"}
            and d["spec"]["template"]["metadata"]["labels"]["tailguard.dev/inference-service"] == "chat"
        ),
    ),
]


@pytest.mark.parametrize(("spec", "check"), [(s, c) for _, s, c in CASES], ids=[i for i, _, _ in CASES])
def test_deployment(spec: dict[str, Any], check: Callable[[dict[str, Any]], bool]) -> None:
    assert check(_deployment(**spec))


def test_service_selects_the_pods_on_port_http() -> None:
    svc = render_service(parse_inference_service(manifest()))
    assert svc["spec"]["selector"] == {"tailguard.dev/inference-service": "chat"}
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_pod_monitor_relabels_the_service_name() -> None:
    pm = render_pod_monitor(parse_inference_service(manifest()))
    endpoint = pm["spec"]["podMetricsEndpoints"][0]
    assert endpoint["port"] == "http"
    assert endpoint["path"] == "/metrics"
    assert endpoint["relabelings"][0] == {
        "sourceLabels": ["__meta_kubernetes_pod_label_tailguard_dev_inference_service"],
        "targetLabel": "inference_service",
    }


@pytest.mark.parametrize(
    ("mode", "status", "expected"),
    [
        ("Off", {"desiredReplicas": 5, "maxNumSeqs": 64}, (1, 256)),
        ("DryRun", {"desiredReplicas": 5, "maxNumSeqs": 64}, (1, 256)),
        ("Auto", {}, (1, 256)),
        ("Auto", {"desiredReplicas": 3, "maxNumSeqs": 64}, (3, 64)),
        ("Auto", {"desiredReplicas": 99}, (4, 256)),
    ],
    ids=[
        "off-uses-spec",
        "dryrun-uses-spec",
        "auto-starts-from-spec",
        "auto-uses-last-decision",
        "auto-clamped-to-max",
    ],
)
def test_replicas_and_batch_by_mode(mode: str, status: dict[str, Any], expected: tuple[int, int]) -> None:
    obj = manifest(autoscaling={"mode": mode})
    obj["status"] = status
    deployment = render_all(parse_inference_service(obj), with_pod_monitor=False)[0]
    assert (deployment["spec"]["replicas"], _arg(deployment, "--max-num-seqs")) == (
        expected[0],
        str(expected[1]),
    )


@pytest.mark.parametrize("example", sorted(p.name for p in (REPO / "examples").glob("*.yaml")))
def test_examples_render(example: str) -> None:
    for isvc in load_inference_services(REPO / "examples" / example):
        kinds = [o["kind"] for o in render_all(isvc)]
        assert kinds == ["Deployment", "Service", "PodMonitor"]


MIRROR = "registry.internal/mirror/vllm-openai:v0.33.0"


def test_an_unset_image_is_the_built_in_default() -> None:
    isvc = parse_inference_service(manifest())
    assert _container(render_all(isvc)[0])["image"] == DEFAULT_VLLM_IMAGE
    assert vllm_image(isvc) == DEFAULT_VLLM_IMAGE


def test_an_unset_image_is_the_operator_default() -> None:
    isvc = parse_inference_service(manifest())
    deployment = render_all(isvc, default_image=MIRROR)[0]
    assert _container(deployment)["image"] == MIRROR
    direct = render_deployment(isvc, replicas=1, max_num_seqs=256, default_image=MIRROR)
    assert _container(direct)["image"] == MIRROR


def test_an_image_in_the_spec_wins_over_the_operator_default() -> None:
    isvc = parse_inference_service(manifest(engine={"image": "vllm/vllm-openai:v0.30.1"}))
    assert _container(render_all(isvc, default_image=MIRROR)[0])["image"] == "vllm/vllm-openai:v0.30.1"
    assert vllm_image(isvc, MIRROR) == "vllm/vllm-openai:v0.30.1"
