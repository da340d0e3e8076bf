"""The pydantic models: defaults, bounds and cross-field rules, with errors that name the field."""

from __future__ import annotations

from typing import Any

import pytest

from tailguard.api import AutoscalingMode, InvalidResourceError, parse_inference_service
from tg_testing import manifest


def test_defaults_suit_an_8b_model_on_one_h100() -> None:
    isvc = parse_inference_service(manifest())
    assert isvc.spec.resources.gpus == 1
    assert isvc.spec.engine.tensor_parallel_size == 1
    assert isvc.spec.engine.max_num_batched_tokens == 8192
    assert isvc.spec.engine.image is None, "unset: the operator's default image applies"
    assert isvc.spec.autoscaling.mode is AutoscalingMode.AUTO
    assert isvc.spec.slo.ttft_p99_ms == 500
    assert isvc.spec.slo.tpot_p99_ms is None
    assert isvc.served_name == "chat"


INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("goodput above one", {"slo": {"goodputTarget": 1.5}}, "spec.slo.goodputTarget"),
    ("goodput zero", {"slo": {"goodputTarget": 0}}, "spec.slo.goodputTarget"),
    ("negative ttft", {"slo": {"ttftP99Ms": -1}}, "spec.slo.ttftP99Ms"),
    ("zero tpot", {"slo": {"tpotP99Ms": 0}}, "spec.slo.tpotP99Ms"),
    ("min above max", {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}}, "spec.autoscaling.minReplicas"),
    (
        "batch bounds reversed",
        {"autoscaling": {"maxBatch": {"min": 64, "max": 32}}},
        "autoscaling.maxBatch.min",
    ),
    ("tp above gpus", {"engine": {"tensorParallelSize": 4}, "resources": {"gpus": 2}}, "resources.gpus"),
    ("unknown mode", {"autoscaling": {"mode": "Sometimes"}}, "spec.autoscaling.mode"),
    ("unknown field", {"engine": {"maxBatch": 3}}, "spec.engine.maxBatch"),
    ("max seqs outside tuning bounds", {"engine": {"maxNumSeqs": 8}}, "engine.maxNumSeqs"),
    ("token budget below max batch", {"engine": {"maxNumBatchedTokens": 256}}, "engine.maxNumBatchedTokens"),
    ("bad memory quantity", {"resources": {"memory": "lots"}}, "spec.resources.memory"),
    ("interval too short", {"autoscaling": {"intervalSeconds": 1}}, "spec.autoscaling.intervalSeconds"),
    ("empty image", {"engine": {"image": ""}}, "spec.engine.image"),
    ("image with a space", {"engine": {"image": "vllm/vllm-openai: v1"}}, "spec.engine.image"),
]


@pytest.mark.parametrize(("spec", "field"), [(s, f) for _, s, f in INVALID], ids=[i for i, _, _ in INVALID])
def test_invalid_specs_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidResourceError) as raised:
        parse_inference_service(manifest(**spec))
    assert any(field in str(error) for error in raised.value.errors), raised.value.errors


def test_missing_model_is_reported_with_its_path() -> None:
    obj = manifest()
    del obj["spec"]["model"]
    with pytest.raises(InvalidResourceError) as raised:
        parse_inference_service(obj)
    assert [e.path for e in raised.value.errors] == ["spec.model"]


def test_bad_name_is_reported() -> None:
    obj = manifest()
    obj["metadata"]["name"] = "Not_A_DNS_Label"
    with pytest.raises(InvalidResourceError, match=r"metadata\.name"):
        parse_inference_service(obj)


def test_camel_case_round_trip() -> None:
    isvc = parse_inference_service(manifest(slo={"ttftP99Ms": 300, "tpotP99Ms": 40}))
    dumped = isvc.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert dumped["spec"]["slo"] == {"ttftP99Ms": 300.0, "tpotP99Ms": 40.0, "goodputTarget": 0.99}
    assert parse_inference_service(dumped) == isvc


@pytest.mark.parametrize("written", ["Manual", "Off"], ids=["manual", "quoted-off"])
def test_manual_mode_is_written_manual_or_quoted_off(written: str) -> None:
    isvc = parse_inference_service(manifest(autoscaling={"mode": written}))
    assert isvc.spec.autoscaling.mode is AutoscalingMode.MANUAL


def test_a_bare_off_read_by_yaml_as_false_says_what_to_write() -> None:
    import yaml

    obj = manifest()
    obj["spec"]["autoscaling"] = yaml.safe_load("mode: Off")
    assert obj["spec"]["autoscaling"] == {"mode": False}, "YAML 1.1 reads a bare Off as false"
    with pytest.raises(InvalidResourceError) as raised:
        parse_inference_service(obj)
    (error,) = raised.value.errors
    assert error.path == "spec.autoscaling.mode"
    assert "write mode: Manual" in str(error)
