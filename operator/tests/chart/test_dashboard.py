"""The Grafana dashboard: every query parses, reads metrics that exist, and the panels the issue asks for are there.

Queries are checked with the PromQL parser in :mod:`promql_check` (written for these tests; no PromQL
parser is installed). Metric names must be the operator's own (``tailguard.reconcile.telemetry``) or
vLLM's (``tailguard.contract.vllm``).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tailguard.contract.vllm import ENGINE_LABEL, MODEL_NAME_LABEL, SERVICE_LABEL, VllmMetric
from tailguard.metrics.promql import QueryScope, all_queries
from tailguard.reconcile.service_series import DECISION_LABELS, DECISIONS, SERVICE_GAUGES, SERVICE_LABELS
from tailguard.reconcile.telemetry import Telemetry

from .chart_files import DASHBOARD
from .helm_tool import require_promtool
from .promql_check import Kind, PromQLError, expand_grafana, parse

#: vLLM families exposed as histograms (``_bucket``, ``_sum`` and ``_count`` series).
VLLM_HISTOGRAMS = {
    VllmMetric.TTFT,
    VllmMetric.TPOT,
    VllmMetric.INTER_TOKEN_LATENCY,
    VllmMetric.E2E_LATENCY,
    VllmMetric.QUEUE_TIME,
    VllmMetric.PREFILL_TIME,
}


def _operator_series() -> dict[str, set[str]]:
    """Every series name the operator exposes, with the labels it carries."""
    telemetry = Telemetry()
    series: dict[str, set[str]] = {name: set(SERVICE_LABELS) for _, name, _ in SERVICE_GAUGES}
    series[f"{DECISIONS}_total"] = set(DECISION_LABELS)
    for collector in list(telemetry.loop_registry._collector_to_names):  # the one way to list label names
        labels = set(getattr(collector, "_labelnames", ()))
        for family in collector.describe():
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}[
                family.type
            ]
            for suffix in suffixes:
                series[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return series


def _vllm_series() -> dict[str, set[str]]:
    """vLLM series names, with the labels they carry once the scrape configuration added ours."""
    common = {"namespace", SERVICE_LABEL, MODEL_NAME_LABEL, ENGINE_LABEL, "pod", "instance", "job"}
    series: dict[str, set[str]] = {}
    for metric in VllmMetric:
        if metric in VLLM_HISTOGRAMS:
            series[f"{metric}_bucket"] = common | {"le"}
            series[f"{metric}_sum"] = common
            series[f"{metric}_count"] = common
        else:
            series[str(metric)] = common | (
                {"finished_reason"} if metric is VllmMetric.REQUEST_SUCCESS else set()
            )
    return series


KNOWN_SERIES = {**_vllm_series(), **_operator_series()}


def _load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def _queries() -> list[tuple[str, str]]:
    """(where, expression) for every panel target and every query variable."""
    dashboard = _load()
    found = [
        (f"panel {p['title']!r} target {t['refId']}", t["expr"])
        for p in _panels(dashboard)
        for t in p.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", _label_values_selector(variable["definition"])))
    return found


def _label_values_selector(definition: str) -> str:
    """The series selector inside Grafana's ``label_values(selector, label)``."""
    assert definition.startswith("label_values("), definition
    assert definition.endswith(")"), definition
    selector, _, label = definition[len("label_values(") : -1].rpartition(",")
    assert label.strip() in {"namespace", SERVICE_LABEL}, definition
    return selector


# --- the parser itself ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kind", "names"),
    [
        pytest.param("up", Kind.INSTANT, {"up"}, id="bare-name"),
        pytest.param(
            'vllm:num_requests_running{namespace=~"a|b", inference_service!=""}',
            Kind.INSTANT,
            {"vllm:num_requests_running"},
            id="matchers",
        ),
        pytest.param(
            '{__name__=~"vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc", inference_service!=""}',
            Kind.INSTANT,
            {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"},
            id="name-regex",
        ),
        pytest.param(
            "histogram_quantile(0.99, sum by (le) (rate(x_bucket[5m])))",
            Kind.INSTANT,
            {"x_bucket"},
            id="quantile",
        ),
        pytest.param(
            "sum(rate(x[5m])) by (job) / on(job) group_left sum(y) by (job)",
            Kind.INSTANT,
            {"x", "y"},
            id="matching",
        ),
        pytest.param("a > bool 3", Kind.INSTANT, {"a"}, id="bool"),
        pytest.param("2 ^ 3 ^ 2", Kind.SCALAR, set(), id="power-right-assoc"),
        pytest.param("-x offset 5m", Kind.INSTANT, {"x"}, id="unary-offset"),
        pytest.param("max_over_time(rate(x[1m])[10m:30s])", Kind.INSTANT, {"x"}, id="subquery"),
        pytest.param("topk(3, x)", Kind.INSTANT, {"x"}, id="aggregation-parameter"),
        pytest.param('count_values("v", x)', Kind.INSTANT, {"x"}, id="string-parameter"),
        pytest.param('label_replace(x, "a", "$1", "b", "(.*)")', Kind.INSTANT, {"x"}, id="label-replace"),
        pytest.param("x @ start()", Kind.INSTANT, {"x"}, id="at-modifier"),
        pytest.param("a or b unless c and d", Kind.INSTANT, {"a", "b", "c", "d"}, id="set-operators"),
    ],
)
def test_parser_accepts_valid_promql(query: str, kind: Kind, names: set[str]) -> None:
    parsed = parse(query)
    assert (parsed.kind, parsed.metric_names) == (kind, names)


@pytest.mark.parametrize(
    ("query", "why"),
    [
        pytest.param("sum(rate(x[5m])", "expected ')'", id="unbalanced-paren"),
        pytest.param('x{a="b"', "expected ','", id="unbalanced-brace"),
        pytest.param("rate(x)", "must be a range vector", id="rate-of-instant"),
        pytest.param("x[5m] + 1", "cannot be an operand", id="range-operand"),
        pytest.param("(x)[5m]", "needs a vector selector", id="range-on-expression"),
        pytest.param("histogram_quantile(x, y)", "must be a scalar", id="quantile-vector-phi"),
        pytest.param("rates(x[5m])", "unknown function", id="unknown-function"),
        pytest.param("sum by (le) x", "expected '('", id="aggregation-without-parens"),
        pytest.param("topk(x)", "needs a scalar parameter", id="topk-without-k"),
        pytest.param('x{a~"b"}', "unexpected character", id="bad-matcher"),
        pytest.param('x{a=~"("}', "bad regular expression", id="bad-regex"),
        pytest.param('{a!~"x"}', "does not match the empty string", id="empty-selector"),
        pytest.param("1 and 2", "instant vectors on both sides", id="set-op-on-scalars"),
        pytest.param("1 > 2", "need bool", id="scalar-comparison"),
        pytest.param("x[5 m]", "expected a duration", id="bad-duration"),
        pytest.param("x $__rate_interval", "unexpected character", id="grafana-variable-left-in"),
        pytest.param("", "empty", id="empty"),
    ],
)
def test_parser_rejects_invalid_promql(query: str, why: str) -> None:
    with pytest.raises(PromQLError, match=re.escape(why)):
        parse(query)


def test_parser_reads_every_query_the_operator_sends() -> None:
    for signal, query in all_queries(QueryScope(namespaces=("team-a",))).items():
        parsed = parse(query)
        assert parsed.kind is Kind.INSTANT, signal
        assert parsed.metric_names <= set(KNOWN_SERIES), (signal, parsed.metric_names)


# --- the dashboard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("where", "expr"), _queries(), ids=[w for w, _ in _queries()])
def test_every_query_parses_and_reads_known_metrics(where: str, expr: str) -> None:
    parsed = parse(expand_grafana(expr))
    assert parsed.kind in (Kind.INSTANT, Kind.SCALAR), f"{where}: a panel needs an instant vector"
    names = parsed.metric_names
    assert names, f"{where} reads no metric"
    unknown = names - set(KNOWN_SERIES)
    assert not unknown, f"{where} reads metrics that nothing exposes: {sorted(unknown)}"
    for selector in parsed.selectors:
        for name in selector.metric_names:
            labels = {label for label, _, _ in selector.matchers} - {"__name__"}
            assert labels <= KNOWN_SERIES[name], (
                f"{where}: {name} has no label {sorted(labels - KNOWN_SERIES[name])}"
            )
    all_labels = set().union(*(KNOWN_SERIES[n] for n in names))
    assert parsed.grouping_labels <= all_labels, f"{where} groups by labels its metrics lack"


#: The operator's own families: one series per operator (or per priority), not per service.
OPERATOR_WIDE = (
    "tailguard_loop",
    "tailguard_prometheus",
    "tailguard_inference_services",
    "tailguard_write",
    "tailguard_decisions_deferred",
)


def test_service_panels_filter_by_the_dashboard_variables() -> None:
    for where, expr in _queries():
        if where.startswith("variable") or any(family in expr for family in OPERATOR_WIDE):
            continue
        assert 'namespace=~"$namespace"' in expr, where
        assert f'{SERVICE_LABEL}=~"${SERVICE_LABEL}"' in expr, where


def test_panels_cover_what_operators_watch() -> None:
    exprs_by_title = {p["title"]: " ".join(t["expr"] for t in p.get("targets", [])) for p in _panels(_load())}

    def panel_reading(*metrics: str) -> str:
        matches = [title for title, expr in exprs_by_title.items() if all(m in expr for m in metrics)]
        assert matches, f"no panel reads {metrics}"
        return matches[0]

    panel_reading("vllm:time_to_first_token_seconds_bucket", "tailguard_slo_ttft_seconds")
    panel_reading("vllm:request_time_per_output_token_seconds_bucket", "tailguard_slo_tpot_seconds")
    panel_reading("tailguard_goodput_ratio", "tailguard_goodput_target_ratio")
    panel_reading("tailguard_desired_replicas", "tailguard_ready_replicas", "tailguard_starting_replicas")
    panel_reading("tailguard_max_num_seqs")
    panel_reading("tailguard_write_queue_depth", "tailguard_writes_in_flight")
    panel_reading("tailguard_write_latency_seconds_bucket", "tailguard_decisions_deferred_total")
    assert "reason" in panel_reading("tailguard_decisions_total").lower()
    panel_reading("tailguard_loop_duration_seconds_bucket")
    panel_reading("tailguard_prometheus_query_errors_total")


def test_dashboard_is_well_formed_for_grafana() -> None:
    dashboard = _load()
    assert 0 < len(dashboard["uid"]) <= 40
    panels = list(_panels(dashboard))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", SERVICE_LABEL} <= variables
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        assert panel.get("description"), f"panel {panel['title']!r} needs a description"


def _promtool_check_rules(tmp_path: Path, exprs: list[str]) -> subprocess.CompletedProcess[str]:
    rules = {
        "groups": [
            {"name": "check", "rules": [{"record": f"check:q{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    return subprocess.run(
        [require_promtool(), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_prometheus_own_parser_accepts_every_dashboard_query(tmp_path: Path) -> None:
    """promtool parses each query with Prometheus's real parser (as recording rules; no server needed)."""
    exprs = [
        expand_grafana(e).replace("$namespace", ".*").replace(f"${SERVICE_LABEL}", ".*")
        for _, e in _queries()
    ]
    exprs += list(all_queries(QueryScope(namespaces=("team-a",))).values())
    result = _promtool_check_rules(tmp_path, exprs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(exprs)} rules found" in result.stdout


def test_prometheus_own_parser_rejects_what_ours_rejects(tmp_path: Path) -> None:
    """The two parsers agree on a broken query, so a pass above means something."""
    result = _promtool_check_rules(tmp_path, ["sum(rate(x[5m])"])
    assert result.returncode != 0
