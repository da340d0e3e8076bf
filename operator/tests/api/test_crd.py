"""The CRD generated from the models: structure, validations, subresources, freshness of crds/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tailguard.api import parse_inference_service
from tailguard.api.crd import build_crd
from tailguard.cli import crd_yaml

REPO = Path(__file__).resolve().parents[3]


def _version() -> dict[str, Any]:
    version: dict[str, Any] = build_crd()["spec"]["versions"][0]
    return version


def _walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for name, sub in (schema.get("properties") or {}).items():
        found += _walk(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        found += _walk(schema["items"], f"{path}[]")
    return found


def test_crds_directory_is_fresh() -> None:
    written = (REPO / "crds" / "tailguard.dev_inferenceservices.yaml").read_text()
    assert written == crd_yaml(), "crds/ is stale: run `make crds`"


def test_schema_is_structural() -> None:
    root = _version()["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        assert not {"$ref", "anyOf", "allOf"} & node.keys(), path
        assert node.get("additionalProperties") is not False, path
        if path.startswith(".spec") or path.startswith(".status"):
            assert "type" in node, f"{path} has no type"
        if isinstance(node.get("exclusiveMinimum"), bool):
            assert "minimum" in node, path


def test_every_spec_field_is_described_for_kubectl_explain() -> None:
    root = _version()["schema"]["openAPIV3Schema"]
    nodes = _walk(root["properties"]["spec"], ".spec")
    undocumented = [p for p, n in nodes if not n.get("description") and not p.endswith("[]")]
    assert undocumented == []


def test_subresources_and_short_name() -> None:
    crd = build_crd()
    version = _version()
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.labelSelector",
    }
    assert "isvc" not in crd["spec"]["names"]["shortNames"]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert status["labelSelector"]["type"] == "string"


def test_cross_field_rules_are_cel_validations() -> None:
    spec = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = {v["rule"] for v in spec["x-kubernetes-validations"]}
    assert "self.autoscaling.minReplicas <= self.autoscaling.maxReplicas" in rules
    assert "self.resources.gpus >= self.engine.tensorParallelSize" in rules
    assert all(v["message"] and v["fieldPath"].startswith(".") for v in spec["x-kubernetes-validations"])


def test_bounds_and_enums_reach_the_schema() -> None:
    spec = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    goodput = spec["slo"]["properties"]["goodputTarget"]
    assert goodput["minimum"] == 0
    assert goodput["exclusiveMinimum"] is True
    assert goodput["maximum"] == 1
    assert spec["autoscaling"]["properties"]["mode"]["enum"] == ["Auto", "DryRun", "Manual", "Off"]
    assert spec["autoscaling"]["default"] == {}, "nested defaults apply only under an object default"


def test_engine_image_has_no_schema_default() -> None:
    """A schema default would be written into every stored object and shadow the operator's default."""
    engine = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["engine"]
    image = engine["properties"]["image"]
    assert "default" not in image
    assert "image" not in engine.get("required", [])
    assert image["pattern"] == r"^\S+$"


def test_printer_columns_cover_mode_ready_batch_ttft_goodput_age() -> None:
    names = [c["name"] for c in _version()["additionalPrinterColumns"]]
    assert names[:7] == ["Mode", "Ready", "Max-Batch", "P99-TTFT-ms", "SLO-ms", "Goodput", "Age"]


_valid_specs = st.fixed_dictionaries(
    {"model": st.fixed_dictionaries({"name": st.from_regex(r"[a-z]{1,8}/[a-z0-9-]{1,12}", fullmatch=True)})},
    optional={
        "replicas": st.integers(0, 1000),
        "slo": st.fixed_dictionaries(
            {},
            optional={
                "ttftP99Ms": st.floats(1, 600000),
                "tpotP99Ms": st.floats(1, 60000),
                "goodputTarget": st.floats(0.01, 1),
            },
        ),
        "resources": st.fixed_dictionaries({"gpus": st.integers(1, 8)}),
    },
)


@settings(max_examples=60, deadline=None)
@given(spec=_valid_specs)
def test_valid_specs_round_trip_through_yaml(spec: dict[str, Any]) -> None:
    obj = {"apiVersion": "tailguard.dev/v1alpha1", "kind": "InferenceService", "metadata": {"name": "m"}}
    isvc = parse_inference_service({**obj, "spec": spec})
    text = yaml.safe_dump(isvc.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert parse_inference_service(yaml.safe_load(text)) == isvc
