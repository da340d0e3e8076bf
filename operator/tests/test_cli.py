"""The ``tailguard`` command: render and crds, with exit code 2 and field names on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailguard.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_render_prints_every_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(REPO / "examples" / "llama-70b-tp4.yaml")]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Deployment", "Service", "PodMonitor"]
    assert (
        docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    )


def test_render_without_pod_monitor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "--no-pod-monitor", "-f", str(REPO / "examples" / "dry-run.yaml")]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["Deployment", "Service"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "kind: InferenceService\nmetadata: {name: a}\nspec: {model: {name: m}, slo: {goodputTarget: 2}}\n",
            "spec.slo.goodputTarget",
        ),
        (
            "kind: InferenceService\nmetadata: {name: a}\nspec: {model: {name: m}, resources: {gpus: 1}, engine: {tensorParallelSize: 2}}\n",
            "resources.gpus",
        ),
        ("kind: InferenceService\nmetadata: {name: a}\nspec: {}\n", "spec.model"),
        ("kind: InferenceService\nmetadata: {name: a\n", "not valid YAML"),
        ("kind: ConfigMap\nmetadata: {name: a}\n", "no InferenceService found"),
    ],
    ids=["bound", "cross-field", "missing", "yaml", "none"],
)
def test_render_rejects_bad_input_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert main(["render", "-f", str(path)]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert captured.out == ""
    assert "Traceback" not in captured.err


def test_render_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", "/nonexistent/file.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_crds_writes_the_file(tmp_path: Path) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    crd = yaml.safe_load((tmp_path / "tailguard.dev_inferenceservices.yaml").read_text())
    assert crd["kind"] == "CustomResourceDefinition"
