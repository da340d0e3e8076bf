"""The operations guide and the concepts page stay true to the code they describe."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tailguard.contract.vllm import SERVICE_LABEL as PROMETHEUS_SERVICE_LABEL
from tailguard.k8s.labels import SERVICE_LABEL
from tailguard.k8s.render import PORT_NAME, render_pod_monitor
from tailguard.policy.types import Limit

from .chart_files import CHART, REPO
from .helm_tool import require_promtool
from .promql_check import parse

DOCS = REPO / "docs"
OPERATIONS = DOCS / "operations.md"
RECONCILE = REPO / "operator" / "src" / "tailguard" / "reconcile"


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = re.search(r"^#{2,3} ", text[start + len(heading) :], flags=re.MULTILINE)
    return text[start : start + len(heading) + following.start()] if following else text[start:]


def _blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def _conditions_in_code() -> set[tuple[str, str]]:
    """(type, reason) of every condition the operator sets, read from the reconcile sources."""
    found: set[tuple[str, str]] = set()
    pattern = re.compile(r'ConditionUpdate\(\s*"(\w+)",\s*(?:True|False|None|[\w.]+),\s*"(\w+)"', re.DOTALL)
    for source in RECONCILE.glob("*.py"):
        found |= set(pattern.findall(source.read_text()))
    return found


def _events_in_code() -> set[str]:
    found: set[str] = set()
    for source in RECONCILE.glob("*.py"):
        found |= set(re.findall(r'EventNote\(\s*"(?:Normal|Warning)",\s*"(\w+)"', source.read_text()))
    for source in (RECONCILE.parent / "handlers").glob("*.py"):  # the spec handler's own Events
        found |= set(re.findall(r'"(?:Normal|Warning)",\s*"(\w+)"', source.read_text()))
    return found


def test_every_condition_reason_has_a_troubleshooting_row() -> None:
    table = _section(OPERATIONS.read_text(), "### By condition")
    conditions = _conditions_in_code()
    assert len(conditions) >= 15, "the source scan found too few conditions"
    rows_by_type: dict[str, str] = {}
    current = ""
    for row in re.findall(r"^\|(.*)\|$", table, flags=re.MULTILINE):
        first = row.split("|")[0].strip().strip("`")
        current = first or current
        rows_by_type[current] = rows_by_type.get(current, "") + row
    for type_, reason in sorted(conditions):
        assert f"`{reason}`" in rows_by_type.get(type_, ""), f"condition {type_}/{reason} is not in the guide"


def test_every_event_reason_is_listed() -> None:
    table = _section(OPERATIONS.read_text(), "### By Event")
    events = _events_in_code()
    assert {"Scaled", "MaxBatchChanged", "InvalidSpec", "SyncFailed"} <= events
    metrics_warnings = {reason for type_, reason in _conditions_in_code() if type_ == "MetricsAvailable"} - {
        "MetricsFresh"
    }
    for reason in sorted(events | metrics_warnings | {"Unschedulable", "ReplicasFailing"}):
        assert f"`{reason}`" in table, f"Event {reason} is not in the guide"


def test_every_limit_is_explained() -> None:
    table = _section(OPERATIONS.read_text(), "### By condition")
    for limit in Limit:
        assert f"`{limit.value}`" in table, f"limit {limit.value} is not in the guide"


def test_plain_prometheus_scrape_config_adds_the_label_the_pod_monitor_adds() -> None:
    section = _section(OPERATIONS.read_text(), "### Without the Prometheus Operator")
    (config,) = [yaml.safe_load(b) for b in _blocks(section, "yaml")]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "tailguard-vllm")
    monitor = render_pod_monitor(_any_service())["spec"]["podMetricsEndpoints"][0]
    (pod_monitor_relabel,) = monitor["relabelings"]
    relabels = job["relabel_configs"]
    copies = [r for r in relabels if r.get("target_label") == PROMETHEUS_SERVICE_LABEL]
    assert [r["source_labels"] for r in copies] == [pod_monitor_relabel["sourceLabels"]]
    assert pod_monitor_relabel["targetLabel"] == PROMETHEUS_SERVICE_LABEL
    assert pod_monitor_relabel["sourceLabels"][0].endswith(re.sub(r"\W", "_", SERVICE_LABEL))
    assert any(r.get("target_label") == "namespace" for r in relabels)
    port = next(r for r in relabels if r["source_labels"] == ["__meta_kubernetes_pod_container_port_name"])
    assert port["regex"] == PORT_NAME == monitor["port"]
    assert job["metrics_path"] == monitor["path"]


def test_plain_prometheus_scrape_config_is_valid_for_prometheus(tmp_path: Path) -> None:
    section = _section(OPERATIONS.read_text(), "### Without the Prometheus Operator")
    (block,) = _blocks(section, "yaml")
    config = tmp_path / "prometheus.yml"
    config.write_text(block)
    result = subprocess.run(
        [require_promtool(), "check", "config", "--syntax-only", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if "field kubernetes_sd_configs not found" in result.stdout + result.stderr:
        pytest.skip("this promtool is built without Kubernetes service discovery (Debian's is)")
    assert result.returncode == 0, result.stdout + result.stderr


def _any_service() -> Any:
    from tailguard.api import parse_inference_service

    return parse_inference_service({"metadata": {"name": "chat"}, "spec": {"model": {"name": "m"}}})


def test_promql_in_the_docs_parses() -> None:
    blocks = _blocks(OPERATIONS.read_text(), "promql")
    assert blocks
    for block in blocks:
        parse(block)
    inline_queries = re.findall(r"`((?:absent|rate)\(\w[^`]*)`", OPERATIONS.read_text())
    assert inline_queries
    for inline in inline_queries:
        parse(inline)


def test_values_in_the_guide_exist_in_the_chart() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def has(path: str) -> bool:
        node: Any = values
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    text = OPERATIONS.read_text()
    named = set(
        re.findall(
            r"`((?:image|rbac|prometheus|serviceMonitor|dashboard|operator|podSecurityContext|serviceAccount|vllm)\.[\w.]+)`",
            text,
        )
    )
    assert named
    for path in sorted(named):
        assert has(path.rstrip(".*").removesuffix(".")), f"docs name a value the chart lacks: {path}"
    (example,) = [yaml.safe_load(b) for b in _blocks(_section(text, "### Credentials and TLS"), "yaml")]

    def keys(node: Any, prefix: str = "") -> list[str]:
        if not isinstance(node, dict):
            return []
        return [p for k, v in node.items() for p in [f"{prefix}{k}", *keys(v, f"{prefix}{k}.")]]

    for path in keys(example):
        assert has(path), f"the credentials example sets {path}, which the chart lacks"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    prose = re.sub(r"`[^`\n]*`", "", page.read_text())  # code spans hold regexes, not links
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", prose):
        assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
