"""The /metrics endpoint on loopback: negotiated format, gzip when asked, GET only."""

from __future__ import annotations

import gzip
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tailguard.handlers.metrics_server import serve_metrics
from tailguard.reconcile.telemetry import Telemetry
from tg_testing import record_step


@pytest.fixture
def served() -> Iterator[str]:
    telemetry = Telemetry()
    record_step(telemetry, ("team-a", "chat"), replicas=2, ready=2, p99_ttft_s=0.2)
    server = serve_metrics(telemetry, 0, "127.0.0.1")
    try:
        yield f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str, **headers: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
        return answer.read(), dict(answer.headers)


def test_a_plain_scrape_reads_the_text_format(served: str) -> None:
    body, headers = _get(served)
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b'tailguard_desired_replicas{namespace="team-a",inference_service="chat"} 2.0' in body


def test_prometheus_gets_openmetrics_gzipped(served: str) -> None:
    body, headers = _get(
        served,
        Accept="application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3",
        **{"Accept-Encoding": "gzip"},
    )
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = gzip.decompress(body)
    assert text.endswith(b"# EOF\n")
    assert text.count(b"# EOF") == 1
    assert b'tailguard_ready_replicas{namespace="team-a",inference_service="chat"} 2.0' in text


def test_only_get_is_answered(served: str) -> None:
    request = urllib.request.Request(served, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 405
