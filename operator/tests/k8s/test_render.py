"""Renderers: what each spec becomes in the Deployment, Service and PodMonitor (table-driven)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailguard.api import DEFAULT_VLLM_IMAGE, parse_inference_service
from tailguard.k8s.render import (
    GRACE_MARGIN_S,
    RenderSettings,
    render_all,
    render_deployment,
    render_pod_monitor,
    render_service,
    vllm_image,
)
from tailguard.manifests import load_inference_services
from tg_testing import manifest

REPO = Path(__file__).resolve().parents[3]


SETTINGS = RenderSettings()


def _deployment(**spec: Any) -> dict[str, Any]:
    return render_deployment(parse_inference_service(manifest(**spec)), 2, 128, SETTINGS)


def _container(dep: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return container


def _arg(dep: dict[str, Any], flag: str) -> str | None:
    args = _container(dep)["args"]
    return args[args.index(flag) + 1] if flag in args else None


def _pod(dep: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = dep["spec"]["template"]["spec"]
    return pod


#: Each case: the spec, what to read from the rendered Deployment, and the value expected there.
CASES = [
    pytest.param(
        {},
        lambda d: _container(d)["args"][0],
        "meta-llama/Llama-3.1-8B-Instruct",
        id="model is the first argument",
    ),
    pytest.param(
        {}, lambda d: _arg(d, "--served-model-name"), "chat", id="served name defaults to resource name"
    ),
    pytest.param(
        {"model": {"name": "m/x", "servedName": "chat-v2"}},
        lambda d: _arg(d, "--served-model-name"),
        "chat-v2",
        id="served name override",
    ),
    pytest.param({}, lambda d: _arg(d, "--max-num-seqs"), "128", id="max batch given by the caller"),
    pytest.param(
        {"engine": {"maxNumBatchedTokens": 4096}},
        lambda d: _arg(d, "--max-num-batched-tokens"),
        "4096",
        id="token budget",
    ),
    pytest.param({}, lambda d: _arg(d, "--max-model-len"), None, id="no max model len by default"),
    pytest.param(
        {"engine": {"maxModelLen": 4096}}, lambda d: _arg(d, "--max-model-len"), "4096", id="max model len"
    ),
    pytest.param(
        {},
        lambda d: (_arg(d, "--port"), _container(d)["ports"][0]["containerPort"]),
        ("8000", 8000),
        id="port 8000",
    ),
    pytest.param(
        {"engine": {"tensorParallelSize": 4}, "resources": {"gpus": 4}},
        lambda d: (
            _arg(d, "--tensor-parallel-size"),
            _container(d)["resources"]["limits"]["nvidia.com/gpu"],
            _container(d)["resources"]["requests"]["nvidia.com/gpu"],
        ),
        ("4", "4", "4"),
        id="tensor parallel and gpus",
    ),
    pytest.param(
        {"engine": {"shutdownTimeoutSeconds": 60}},
        lambda d: (_arg(d, "--shutdown-timeout"), _pod(d)["terminationGracePeriodSeconds"]),
        ("60", 60 + GRACE_MARGIN_S),
        id="grace period above the drain timeout",
    ),
    pytest.param(
        {"engine": {"startupTimeoutSeconds": 1200}},
        lambda d: (
            _container(d)["startupProbe"]["failureThreshold"] * _container(d)["startupProbe"]["periodSeconds"]
        ),
        1200,
        id="startup budget covers the model load",
    ),
    pytest.param(
        {},
        lambda d: [
            _container(d)[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")
        ],
        ["/health"] * 3,
        id="probes on /health",
    ),
    pytest.param(
        {}, lambda d: _pod(d)["volumes"][0]["emptyDir"]["medium"], "Memory", id="shm is a memory emptyDir"
    ),
    pytest.param(
        {"model": {"name": "m/x", "tokenSecretRef": {"name": "hf"}}},
        lambda d: _container(d)["env"][0],
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        id="hub token from a secret",
    ),
    pytest.param(
        {"model": {"name": "m/x", "cache": {"claimName": "weights", "mountPath": "/models"}}},
        lambda d: (
            [e for e in _container(d)["env"] if e["name"] == "HF_HOME"],
            [
                v["persistentVolumeClaim"]["claimName"]
                for v in _pod(d)["volumes"]
                if "persistentVolumeClaim" in v
            ],
        ),
        ([{"name": "HF_HOME", "value": "/models"}], ["weights"]),
        id="model cache volume and HF_HOME",
    ),
    pytest.param(
        {"engine": {"extraArgs": ["--enable-prefix-caching"]}},
        lambda d: _container(d)["args"][-1],
        "--enable-prefix-caching",
        id="extra args appended",
    ),
    pytest.param(
        {"engine": {"env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}]}},
        lambda d: _container(d)["env"],
        [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
        id="user env",
    ),
    pytest.param(
        {
            "resources": {
                "nodeSelector": {"gpu": "h100"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            }
        },
        lambda d: (_pod(d)["nodeSelector"], _pod(d)["tolerations"]),
        ({"gpu": "h100"}, [{"key": "nvidia.com/gpu", "operator": "Exists"}]),
        id="placement",
    ),
    pytest.param(
        {},
        lambda d: d["spec"]["strategy"]["rollingUpdate"],
        {"maxSurge": 0, "maxUnavailable": 1},
        id="rollout never surges on scarce gpus",
    ),
    pytest.param({}, lambda d: d["spec"]["replicas"], 2, id="replicas from the caller"),
    pytest.param(
        {},
        lambda d: {k: d["metadata"]["ownerReferences"][0][k] for k in ("uid", "controller")},
        {"uid": "uid-1", "controller": True},
        id="owner reference to the inference service",
    ),
    pytest.param(
        {},
        lambda d: (
            d["spec"]["selector"]["matchLabels"],
            d["spec"]["template"]["metadata"]["labels"]["tailguard.dev/inference-service"],
        ),
        ({"tailguard.dev/inference-service": "chat"}, "chat"),
        id="selector is the service label",
    ),
]


@pytest.mark.parametrize(("spec", "read", "expected"), CASES)
def test_deployment(spec: dict[str, Any], read: Callable[[dict[str, Any]], Any], expected: Any) -> None:
    assert read(_deployment(**spec)) == expected


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


@pytest.mark.parametrize(("replicas", "expected"), [(1, (1, 0)), (2, (0, 1)), (8, (0, 1))])
def test_one_replica_alone_is_replaced_by_a_surge_pod(replicas: int, expected: tuple[int, int]) -> None:
    """Replaced in place, a single replica's spec change would leave no replica for the whole
    model load; several roll one at a time (GPUs are scarce) with the policy's spare."""
    isvc = parse_inference_service(manifest())
    rolling = render_deployment(isvc, replicas, 128, SETTINGS)["spec"]["strategy"]["rollingUpdate"]
    assert (rolling["maxSurge"], rolling["maxUnavailable"]) == expected


@pytest.mark.parametrize("pod_monitor", [True, False])
def test_render_all_renders_the_size_it_is_given(pod_monitor: bool) -> None:
    isvc = parse_inference_service(manifest())
    objects = render_all(isvc, 3, 64, RenderSettings(pod_monitor=pod_monitor))
    assert [o["kind"] for o in objects] == ["Deployment", "Service", *(["PodMonitor"] if pod_monitor else [])]
    assert (objects[0]["spec"]["replicas"], _arg(objects[0], "--max-num-seqs")) == (3, "64")


@pytest.mark.parametrize("example", sorted(p.name for p in (REPO / "examples").glob("*.yaml")))
def test_examples_render(example: str) -> None:
    for isvc in load_inference_services(REPO / "examples" / example):
        kinds = [o["kind"] for o in render_all(isvc, 1, isvc.spec.engine.max_num_seqs, SETTINGS)]
        assert kinds == ["Deployment", "Service", "PodMonitor"]


MIRROR = "registry.internal/mirror/vllm-openai:v0.33.0"


def test_an_unset_image_is_the_built_in_default() -> None:
    isvc = parse_inference_service(manifest())
    assert _container(render_all(isvc, 1, 256, SETTINGS)[0])["image"] == DEFAULT_VLLM_IMAGE
    assert vllm_image(isvc, SETTINGS) == DEFAULT_VLLM_IMAGE


def test_an_unset_image_is_the_operator_default() -> None:
    isvc = parse_inference_service(manifest())
    mirror = RenderSettings(default_image=MIRROR)
    assert _container(render_all(isvc, 1, 256, mirror)[0])["image"] == MIRROR
    assert _container(render_deployment(isvc, 1, 256, mirror))["image"] == MIRROR


def test_an_image_in_the_spec_wins_over_the_operator_default() -> None:
    isvc = parse_inference_service(manifest(engine={"image": "vllm/vllm-openai:v0.30.1"}))
    mirror = RenderSettings(default_image=MIRROR)
    assert _container(render_all(isvc, 1, 256, mirror)[0])["image"] == "vllm/vllm-openai:v0.30.1"
    assert vllm_image(isvc, mirror) == "vllm/vllm-openai:v0.30.1"


@pytest.mark.parametrize(
    ("slo", "families"),
    [
        ({"ttftP99Ms": 500, "tpotP99Ms": 50}, None),
        ({"ttftP99Ms": 800}, {"time_to_first_token"}),
        ({"ttftP99Ms": 500, "tpotP99Ms": 15}, {"inter_token_latency"}),
    ],
    ids=["SLOs at bucket edges: no flag", "TTFT between edges", "TPOT between edges"],
)
def test_an_slo_between_bucket_edges_is_made_an_edge(slo: dict[str, Any], families: set[str] | None) -> None:
    value = _arg(_deployment(slo=slo), "--custom-histogram-buckets")
    if families is None:
        assert value is None, value
        return
    assert value is not None
    buckets = json.loads(value)
    assert set(buckets) == families, buckets
    for family, bounds in buckets.items():
        ms = slo["ttftP99Ms"] if family == "time_to_first_token" else slo["tpotP99Ms"]
        assert ms / 1000 in bounds, (family, bounds)


def test_histogram_buckets_in_extra_args_win() -> None:
    own = ["--custom-histogram-buckets", '{"time_to_first_token":[0.5,0.8,1.0]}']
    args = _container(_deployment(slo={"ttftP99Ms": 800}, engine={"extraArgs": own}))["args"]
    assert args.count("--custom-histogram-buckets") == 1, args
    assert args[-2:] == own
