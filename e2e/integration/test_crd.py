"""The CRD in crds/ as a real API server serves it: schema, CEL rules, printer columns, explain, /scale.

No operator runs here: these are the promises the CRD alone makes to a user with kubectl.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from lib.kube import Kube, unique_name
from lib.wait import wait_for

pytestmark = pytest.mark.integration

ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


def minimal(name: str = "chat", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": {"name": name},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, **spec},
    }


@pytest.fixture(scope="module")
def shared_namespace(kube: Kube, crd: dict[str, Any]) -> Iterator[str]:
    """One namespace for this module's many small cases (nothing here runs pods)."""
    name = unique_name("tg-crd")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("v1", "Namespace", name)


def test_crd_is_established_and_discoverable(kube: Kube, crd: dict[str, Any]) -> None:
    conditions = {c["type"]: c for c in crd["status"]["conditions"]}
    assert conditions["Established"]["status"] == "True"
    assert conditions["NamesAccepted"]["status"] == "True", conditions["NamesAccepted"].get("message")
    out = kube.kubectl("api-resources", "--api-group=tailguard.dev", "-o", "wide").stdout
    row = next(line for line in out.splitlines() if line.startswith("inferenceservices"))
    assert "tgis" in row.split(), row
    assert "tailguard.dev/v1alpha1" in row
    assert "true" in row.split(), f"expected namespaced: {row}"


@pytest.mark.parametrize(
    "example", ["llama-8b-chat", "llama-70b", "qwen-8b-dryrun", "llama-8b-weekday-peaks"]
)
def test_examples_pass_server_side_validation(
    kube: Kube, shared_namespace: str, examples: dict[str, dict[str, Any]], example: str
) -> None:
    out = kube.kubectl(
        "apply",
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(examples[example]),
        namespace=shared_namespace,
    )
    applied = json.loads(out.stdout)
    # The structural schema's defaults are filled in by the API server itself, except the vLLM image:
    # left unset, so that the operator's default (its --default-vllm-image) applies.
    assert "image" not in applied["spec"]["engine"]
    assert applied["spec"]["resources"]["gpuResourceName"] == "nvidia.com/gpu"
    assert applied["spec"]["autoscaling"]["intervalSeconds"] == 15


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return mutate


def _drop(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = obj
        for key in parents:
            node = node[key]
        del node[leaf]

    return mutate


def _both(*mutations: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        for m in mutations:
            m(obj)

    return mutate


# (id, mutation of a valid manifest, text the error must contain: the field, then what is wrong)
INVALID: list[tuple[str, Callable[[dict[str, Any]], None], tuple[str, ...]]] = [
    ("zero-gpus", _set("spec.resources.gpus", 0), ("spec.resources.gpus", "greater than or equal to 1")),
    (
        "unknown-mode",
        _set("spec.autoscaling.mode", "Sometimes"),
        ("spec.autoscaling.mode", "Unsupported value"),
    ),
    (
        "min-above-max-replicas",
        _both(_set("spec.autoscaling.minReplicas", 5), _set("spec.autoscaling.maxReplicas", 2)),
        ("spec.autoscaling.minReplicas", "must not exceed autoscaling.maxReplicas"),
    ),
    (
        "max-batch-min-above-max",
        _both(
            _set("spec.autoscaling.maxBatch", {"min": 300, "max": 200}), _set("spec.engine.maxNumSeqs", 250)
        ),
        ("spec.autoscaling.maxBatch.min", "must not exceed"),
    ),
    (
        "max-num-seqs-outside-max-batch",
        _set("spec.engine.maxNumSeqs", 8),
        ("spec.engine.maxNumSeqs", "must lie within autoscaling.maxBatch"),
    ),
    (
        "fewer-gpus-than-tensor-parallel",
        _both(_set("spec.engine.tensorParallelSize", 4), _set("spec.resources.gpus", 2)),
        ("spec.resources.gpus", "at least engine.tensorParallelSize"),
    ),
    ("tiny-max-model-len", _set("spec.engine.maxModelLen", 8), ("spec.engine.maxModelLen", "at least 16")),
    ("zero-ttft-slo", _set("spec.slo.ttftP99Ms", 0), ("spec.slo.ttftP99Ms", "greater than 0")),
    (
        "goodput-above-one",
        _set("spec.slo.goodputTarget", 1.5),
        ("spec.slo.goodputTarget", "less than or equal to 1"),
    ),
    ("model-missing", _drop("spec.model"), ("spec.model", "Required value")),
    ("empty-model-name", _set("spec.model.name", ""), ("spec.model.name", "at least 1")),
    (
        "memory-not-a-quantity",
        _set("spec.resources.memory", "lots"),
        ("spec.resources.memory", "should match"),
    ),
    ("negative-replicas", _set("spec.replicas", -1), ("spec.replicas", "greater than or equal to 0")),
    (
        "interval-too-short",
        _set("spec.autoscaling.intervalSeconds", 1),
        ("spec.autoscaling.intervalSeconds", "5"),
    ),
    (
        "bad-toleration-operator",
        _set("spec.resources.tolerations", [{"key": "k", "operator": "Maybe"}]),
        ("spec.resources.tolerations[0].operator", "Unsupported value"),
    ),
    (
        "relative-cache-path",
        _set("spec.model.cache", {"claimName": "c", "mountPath": "cache"}),
        ("spec.model.cache.mountPath",),
    ),
    ("unknown-field", _set("spec.engine.maxBatchSize", 64), ('unknown field "spec.engine.maxBatchSize"',)),
    (
        "image-with-a-space",
        _set("spec.engine.image", "vllm/vllm-openai: v1"),
        ("spec.engine.image", "should match"),
    ),
    ("name-too-long", _set("metadata.name", "n" * 53), ("metadata.name must be at most 52 characters",)),
    (
        "schedule-above-max-replicas",
        _set(
            "spec.autoscaling.schedules",
            [{"name": "peak", "start": "0 8 * * *", "duration": "2h", "minReplicas": 9}],
        ),
        ("spec.autoscaling.schedules", "must not exceed autoscaling.maxReplicas"),
    ),
    (
        "schedule-names-repeated",
        _set(
            "spec.autoscaling.schedules",
            [{"name": "peak", "start": "0 8 * * *", "duration": "2h", "minReplicas": 1}] * 2,
        ),
        ("spec.autoscaling.schedules[1]", "Duplicate value"),
    ),
    (
        "schedule-with-four-cron-fields",
        _set(
            "spec.autoscaling.schedules",
            [{"name": "peak", "start": "0 8 * *", "duration": "2h", "minReplicas": 1}],
        ),
        ("spec.autoscaling.schedules[0].start", "should match"),
    ),
    (
        "schedule-duration-in-days",
        _set(
            "spec.autoscaling.schedules",
            [{"name": "peak", "start": "0 8 * * *", "duration": "1d", "minReplicas": 1}],
        ),
        ("spec.autoscaling.schedules[0].duration", "should match"),
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), [pytest.param(m, e, id=i) for i, m, e in INVALID])
def test_invalid_manifest_is_rejected_naming_the_field(
    kube: Kube, shared_namespace: str, mutate: Callable[[dict[str, Any]], None], expected: tuple[str, ...]
) -> None:
    manifest = minimal(unique_name("bad"))
    mutate(manifest)
    out = kube.apply_yaml(yaml.safe_dump(manifest), namespace=shared_namespace, check=False)
    assert out.returncode != 0, f"the API server accepted an invalid manifest:\n{yaml.safe_dump(manifest)}"
    for text in expected:
        assert text in out.stderr, f"expected {text!r} in kubectl's error:\n{out.stderr}"
    assert kube.get(*ISVC, manifest["metadata"]["name"], shared_namespace) is None


def test_printer_columns(kube: Kube, shared_namespace: str) -> None:
    name = unique_name("cols")
    kube.apply(minimal(name, slo={"ttftP99Ms": 750}), namespace=shared_namespace)
    out = kube.kubectl("get", "inferenceservices", name, namespace=shared_namespace).stdout
    header, row = out.splitlines()[:2]
    assert header.split() == ["NAME", "MODE", "READY", "MAX-BATCH", "P99-TTFT-MS", "SLO-MS", "GOODPUT", "AGE"]
    assert row.split()[:2] == [name, "Auto"]
    assert "750" in row.split()
    wide = kube.kubectl("get", "tgis", name, "-o", "wide", namespace=shared_namespace).stdout
    assert wide.splitlines()[0].split()[-1] == "REASON", "the Reason column is priority 1: only in -o wide"
    # The category lets `kubectl get tailguard` list every tailguard kind.
    assert name in kube.kubectl("get", "tailguard", namespace=shared_namespace).stdout


def test_kubectl_explain_shows_the_schema_descriptions(kube: Kube, crd: dict[str, Any]) -> None:
    out = kube.kubectl("explain", "inferenceservice.spec.autoscaling.mode").stdout
    flat = " ".join(out.split())  # kubectl wraps descriptions at the terminal width
    assert "FIELD: mode <string>" in flat
    assert "ENUM: Auto DryRun Manual Off" in flat, out
    assert "Auto: tailguard sets replicas and max batch" in flat, out
    fields = kube.kubectl("explain", "tgis.spec", "--recursive").stdout
    for name in ("model", "engine", "resources", "slo", "autoscaling", "replicas", "ttftP99Ms", "maxBatch"):
        assert name in fields, f"{name} missing from kubectl explain --recursive:\n{fields}"


def test_scale_subresource_sets_spec_replicas(kube: Kube, shared_namespace: str) -> None:
    name = unique_name("scale")
    # "Off", quoted, is the former name of Manual: the API server still takes it.
    kube.apply(minimal(name, replicas=1, autoscaling={"mode": "Off"}), namespace=shared_namespace)
    kube.kubectl("scale", f"inferenceservice/{name}", "--replicas=3", namespace=shared_namespace)
    obj = kube.get(*ISVC, name, shared_namespace)
    assert obj is not None
    assert obj["spec"]["replicas"] == 3
    scale = kube.kubectl_json(
        "get", f"inferenceservice/{name}", "--subresource=scale", namespace=shared_namespace
    )
    assert scale["kind"] == "Scale"
    assert scale["spec"]["replicas"] == 3
    # Above the schema's maximum is refused through /scale too.
    out = kube.kubectl(
        "scale", f"inferenceservice/{name}", "--replicas=1001", namespace=shared_namespace, check=False
    )
    assert out.returncode != 0
    assert "spec.replicas" in out.stderr


def test_status_is_a_subresource(kube: Kube, shared_namespace: str) -> None:
    """A status sent with the spec is dropped: only the operator, through /status, writes it."""
    name = unique_name("status")
    manifest = copy.deepcopy(minimal(name))
    manifest["status"] = {"readyReplicas": 7}
    kube.kubectl("create", "-f", "-", input=json.dumps(manifest), namespace=shared_namespace)
    obj = kube.get(*ISVC, name, shared_namespace)
    assert obj is not None
    assert (obj.get("status") or {}).get("readyReplicas") is None
    kube.patch(*ISVC, name, {"status": {"readyReplicas": 2}}, shared_namespace, subresource="status")
    wait_for(
        "status.readyReplicas written through /status",
        lambda: (
            ((kube.get(*ISVC, name, shared_namespace) or {}).get("status") or {}).get("readyReplicas") == 2
        ),
        timeout=10,
    )
