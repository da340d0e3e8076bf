"""The chart's copies of generated files match their sources; a stale copy names the command that fixes it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from tailguard.k8s.rbac import CLUSTER_RULES, NAMESPACED_RULES

from .chart_files import CHART, CHART_DASHBOARD, DASHBOARD, RBAC_RULES, REPO, expected_files


@pytest.mark.parametrize("path", sorted(expected_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_generated_chart_file_is_fresh(path: Path) -> None:
    expected = expected_files()[path]
    assert path.exists(), f"{path.relative_to(REPO)} is missing: run `make chart-sync`"
    assert path.read_text(encoding="utf-8") == expected, (
        f"{path.relative_to(REPO)} is stale: run `make chart-sync`"
    )


def test_chart_holds_no_crd_the_repository_lacks() -> None:
    shipped = {p.name for p in (CHART / "crds").glob("*.yaml")}
    assert shipped == {p.name for p in (REPO / "crds").glob("*.yaml")}, "run `make chart-sync`"


def test_rbac_rules_file_is_the_code_s_rules() -> None:
    rules = yaml.safe_load(RBAC_RULES.read_text())
    assert rules == {"namespaced": NAMESPACED_RULES, "cluster": CLUSTER_RULES}


def test_dashboard_copy_is_valid_json() -> None:
    assert json.loads(CHART_DASHBOARD.read_text()) == json.loads(DASHBOARD.read_text())


def test_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == package, "the chart installs the operator version built from this tree"
