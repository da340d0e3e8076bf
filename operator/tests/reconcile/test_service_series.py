"""Every service's gauges, written directly: the same samples prometheus_client's exposition gives,
in the Prometheus text format and in OpenMetrics, for any Accept header a scraper sends."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from tailguard.reconcile.service_series import (
    DECISION_LABELS,
    DECISIONS,
    DECISIONS_HELP,
    SERVICE_GAUGES,
    ServiceDecisions,
    ServiceSeries,
)
from tailguard.reconcile.telemetry import Telemetry
from tg_testing import record_step

Sample = tuple[str, tuple[tuple[str, str], ...], str]

ACCEPT_HEADERS = {
    "none": None,
    "text-0.0.4": "text/plain;version=0.0.4",
    "text-1.0.0": "text/plain;version=1.0.0;escaping=allow-utf-8",
    "prometheus-2": "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;"
    "version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "prometheus-3": "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,*/*;q=0.1",
}


def _samples(text: bytes, content_type: str) -> set[Sample]:
    """Every sample of an exposition, values as text (NaN compares equal to itself so)."""
    parse = parse_openmetrics if content_type.startswith("application/openmetrics-text") else parse_text
    return {
        (s.name, tuple(sorted(s.labels.items())), repr(float(s.value)))
        for family in parse(text.decode())
        for s in family.samples
    }


def _telemetry() -> Telemetry:
    """Three services in the states a scrape meets: measured, unmeasured (NaN), odd label values."""
    telemetry = Telemetry()
    steps = [
        (("team-a", "chat"), 3, 0.31, 0.05),
        (("team-b", "code"), 1, None, None),
        (("we\\ird", 'na"me\n'), 2_000_000, math.inf, 0.1),
    ]
    for key, replicas, p99, tpot_slo in steps:
        record_step(
            telemetry, key, replicas=replicas, ready=replicas, p99_ttft_s=p99, goodput=0.995,
            tpot_slo_s=tpot_slo,
        )  # fmt: skip
    return telemetry


@pytest.mark.parametrize("accept", ACCEPT_HEADERS.values(), ids=ACCEPT_HEADERS.keys())
def test_the_direct_exposition_has_the_samples_prometheus_client_writes(accept: str | None) -> None:
    telemetry = _telemetry()
    encoder, expected_type = choose_encoder(accept or "")
    text, content_type = telemetry.exposition(accept)
    assert content_type == expected_type
    expected = _samples(encoder(telemetry.registry), content_type)
    got = _samples(text, content_type)
    assert got == expected, f"missing: {sorted(expected - got)[:3]}; extra: {sorted(got - expected)[:3]}"
    names = {name for name, _, _ in got}
    assert {name for _, name, _ in SERVICE_GAUGES} <= names, "every service gauge is in the text"
    assert "tailguard_api_writes_total" in names, "and the loop's own metrics"


def test_a_forgotten_service_has_no_line_left() -> None:
    telemetry = _telemetry()
    telemetry.forget("team-a", "chat")
    text, _ = telemetry.exposition(None)
    assert b"team-a" not in text, "neither a gauge nor a decision counter of a deleted service"
    assert b"team-b" in text


def test_a_service_without_a_value_has_no_sample_of_it() -> None:
    series = ServiceSeries()
    series.set(("ns", "svc"), {"desired_replicas": 2.0})
    text = series.render().decode()
    assert 'tailguard_desired_replicas{namespace="ns",inference_service="svc"} 2.0\n' in text
    assert "tailguard_ready_replicas{" not in text
    assert "# TYPE tailguard_ready_replicas gauge" in text, "the family is described even so"


@pytest.mark.parametrize("accept", ACCEPT_HEADERS.values(), ids=ACCEPT_HEADERS.keys())
def test_the_decision_counters_read_as_a_prometheus_client_counter(accept: str | None) -> None:
    """Against a real ``Counter`` fed the same decisions: the same families, samples and counts
    (creation times differ by when each was made, so only their presence is compared)."""
    steps = [
        (("team-a", "chat"), "Steady", "none"),
        (("team-a", "chat"), "Steady", "none"),
        (("team-a", "chat"), "LoadRising", "applied"),
        (("we\\ird", 'na"me\n'), "SLOBreach", "applied"),
    ]
    reference_registry = CollectorRegistry()
    reference = Counter(DECISIONS, DECISIONS_HELP, DECISION_LABELS, registry=reference_registry)
    ours = ServiceDecisions(lambda: 1_800_000_000.0)
    ours_registry = CollectorRegistry()
    ours_registry.register(ours)
    for key, reason, action in steps:
        reference.labels(*key, reason, action).inc()
        ours.inc(key, reason, action)
    encoder, content_type = choose_encoder(accept or "")
    openmetrics = content_type.startswith("application/openmetrics-text")
    text = ours.render(openmetrics=openmetrics) + (b"# EOF\n" if openmetrics else b"")

    def counted(samples: set[Sample]) -> set[Sample]:
        return {(n, labels, value if n.endswith("_total") else "-") for n, labels, value in samples}

    expected = counted(_samples(encoder(reference_registry), content_type))
    assert counted(_samples(text, content_type)) == expected
    assert counted(_samples(encoder(ours_registry), content_type)) == expected, "and through the registry"
    assert ("tailguard_decisions_total", (("action", "none"), ("inference_service", "chat"),
            ("namespace", "team-a"), ("reason", "Steady")), "2.0") in expected  # fmt: skip
    ours.forget(("team-a", "chat"))
    assert b"team-a" not in ours.render(openmetrics=openmetrics)
