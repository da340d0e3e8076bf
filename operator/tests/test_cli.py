"""The ``tailguard`` command: render and crds, with exit code 2 and field names on bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tailguard.api import DEFAULT_VLLM_IMAGE
from tailguard.cli import build_parser, main

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
        ("kind: InferenceService\nmetadata: {name: a\n", "not valid YAML: line 3, column 1: "),
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
    assert "\n" not in captured.err.strip()  # one line, the parser's location included
    assert captured.out == ""
    assert "Traceback" not in captured.err


def test_render_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", "/nonexistent/file.yaml"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_crds_writes_the_file(tmp_path: Path) -> None:
    assert main(["crds", "--out", str(tmp_path)]) == 0
    crd = yaml.safe_load((tmp_path / "tailguard.dev_inferenceservices.yaml").read_text())
    assert crd["kind"] == "CustomResourceDefinition"


def test_crds_into_a_path_that_cannot_be_a_directory_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    assert main(["crds", "--out", str(tmp_path / "file" / "crds")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --out {tmp_path / 'file' / 'crds'}: cannot write the CRD")
    assert "\n" not in err


def test_run_without_a_cluster_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """No kubeconfig and no in-cluster service account: one line that says where it looked."""
    import kubernetes.config

    monkeypatch.setattr(kubernetes.config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "none"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_PORT", raising=False)
    with caplog.at_level("ERROR", logger="tailguard"):
        assert main(["run"]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1, errors
    assert errors[0].startswith("no Kubernetes configuration to run against")
    assert str(tmp_path / "none") in errors[0]


def _rendered_image(out: str) -> str:
    deployment = next(d for d in yaml.safe_load_all(out) if d["kind"] == "Deployment")
    image: str = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_render_takes_the_default_vllm_image_from_a_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    example = str(REPO / "examples" / "dry-run.yaml")
    monkeypatch.delenv("TAILGUARD_DEFAULT_VLLM_IMAGE", raising=False)
    assert main(["render", "-f", example]) == 0
    assert _rendered_image(capsys.readouterr().out) == DEFAULT_VLLM_IMAGE
    assert main(["render", "--default-vllm-image", "mirror.example/vllm:v1", "-f", example]) == 0
    assert _rendered_image(capsys.readouterr().out) == "mirror.example/vllm:v1"
    monkeypatch.setenv("TAILGUARD_DEFAULT_VLLM_IMAGE", "env.example/vllm:v2")
    assert main(["render", "-f", example]) == 0
    assert _rendered_image(capsys.readouterr().out) == "env.example/vllm:v2"


def test_run_takes_the_default_vllm_image_from_a_flag_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TAILGUARD_DEFAULT_VLLM_IMAGE", raising=False)
    assert build_parser().parse_args(["run"]).default_vllm_image == DEFAULT_VLLM_IMAGE
    flag = build_parser().parse_args(["run", "--default-vllm-image=mirror.example/vllm:v1"])
    assert flag.default_vllm_image == "mirror.example/vllm:v1"
    monkeypatch.setenv("TAILGUARD_DEFAULT_VLLM_IMAGE", "env.example/vllm:v2")
    assert build_parser().parse_args(["run"]).default_vllm_image == "env.example/vllm:v2"


@pytest.mark.parametrize("bad", ["", "vllm/vllm-openai: v1", "a\tb"], ids=["empty", "space", "tab"])
def test_a_malformed_default_vllm_image_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    monkeypatch.delenv("TAILGUARD_DEFAULT_VLLM_IMAGE", raising=False)
    with pytest.raises(SystemExit) as flag:
        build_parser().parse_args(["run", f"--default-vllm-image={bad}"])
    assert flag.value.code == 2
    assert "--default-vllm-image" in capsys.readouterr().err
    monkeypatch.setenv("TAILGUARD_DEFAULT_VLLM_IMAGE", bad)
    with pytest.raises(SystemExit) as env:
        build_parser().parse_args(["run"])
    assert env.value.code == 2
    assert "not an image reference" in capsys.readouterr().err


def test_render_reads_the_manifest_from_standard_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    text = (REPO / "examples" / "dry-run.yaml").read_text()
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    assert main(["render", "--no-pod-monitor", "-f", "-"]) == 0
    assert [d["kind"] for d in yaml.safe_load_all(capsys.readouterr().out)] == ["Deployment", "Service"]


def test_render_from_standard_input_names_it_in_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    bad = "kind: InferenceService\nmetadata: {name: a}\nspec: {model: {name: m}, autoscaling: {mode: Off}}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(bad))
    assert main(["render", "-f", "-"]) == 2
    err = capsys.readouterr().err
    assert "<stdin>: InferenceService a: spec.autoscaling.mode" in err
    assert "write mode: Manual" in err


def test_run_arguments_become_typed_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tailguard.cli import operator_settings

    monkeypatch.setenv("TAILGUARD_PROMETHEUS_PASSWORD", "secret")
    token = tmp_path / "token"
    token.write_text("abc\n")
    args = build_parser().parse_args(
        [
            "run",
            "-n",
            "team-a",
            "-n",
            "team-b",
            "--rate-window=90s",
            "--burst-window=20s",
            "--prometheus-url=http://prom:9090",
            f"--prometheus-token-file={token}",
            "--prometheus-username=tg",
            "--default-vllm-image=mirror.example/vllm:v1",
            "--metrics-port=0",
        ]
    )
    settings = operator_settings(args)
    assert settings.namespaces == ("team-a", "team-b")
    assert settings.scope.rate_window_s == 90.0
    assert settings.scope.burst_window_s == 20.0
    assert settings.prometheus.url == "http://prom:9090"
    assert settings.prometheus.bearer_token == "abc"
    assert settings.prometheus.basic_auth == ("tg", "secret")
    assert settings.render.default_image == "mirror.example/vllm:v1"
    assert (settings.metrics_port, settings.liveness_port) == (0, 8080)


def test_all_namespaces_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailguard.cli import operator_settings

    monkeypatch.setenv("TAILGUARD_NAMESPACES", "team-a,team-b")
    assert operator_settings(build_parser().parse_args(["run"])).namespaces == ("team-a", "team-b")
    assert operator_settings(build_parser().parse_args(["run", "-A"])).namespaces == ()
