"""Fixtures of the end-to-end scenarios: a real Prometheus, the simulated fleet, the autoscaling operator.

Scenario time is wall time, on a faster cadence: the operator decides every 5 s (the shortest
interval the API allows) instead of the default 15 s, Prometheus scrapes every second and the
operator's ``rate()`` window is 10 s instead of 2 m, so a scenario that would take minutes on the
production cadence takes tens of seconds here. The fleet, Prometheus and the operator all read the
same wall clock, so they agree on it. Where a scenario speaks of production time (five minutes of
steady load) it counts decision intervals: 20 intervals are five minutes at the default 15 s.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.prometheus import Prometheus
from lib import testbed as testbed_mod
from lib.fleet import scrape_configs, start_fleet
from lib.kube import Kube
from lib.operator import Identity, OperatorProcess
from lib.wait import wait_for
from tailguard.fleet.server import FleetServer
from tailguard.sim.synthetic import TokenMix

ISVC = ("tailguard.dev/v1alpha1", "InferenceService")
RATE_WINDOW = "10s"


class FleetHandle:
    """The fleet serving one test's namespace, with the load under the test's control."""

    def __init__(self, server: FleetServer, namespace: str) -> None:
        self.server = server
        self.namespace = namespace

    def set_rate(self, service: str, rate: float) -> None:
        with self.server.lock:
            self.server.fleet.set_rate(self.namespace, service, rate)

    def set_mix(self, service: str, mix: TokenMix) -> None:
        with self.server.lock:
            self.server.fleet.set_mix(self.namespace, service, mix)

    def ready_engines(self, service: str) -> int:
        with self.server.lock:
            return len(self.server.fleet.ready_pods(self.namespace, service))

    def max_batches(self, service: str) -> set[int]:
        """The ``--max-num-seqs`` of every engine serving ``service``."""
        with self.server.lock:
            return self.server.fleet.max_batches(self.namespace, service)


@pytest.fixture
def fleet(testbed: testbed_mod.Testbed, namespace: str, tmp_path: Path) -> Iterator[FleetHandle]:
    """Simulated vLLM engines behind the namespace's Ready pods (8B on H100 profile)."""
    server, thread = start_fleet(testbed.kubeconfig, namespace, tmp_path / "fleet-targets.json", seed=11)
    yield FleetHandle(server, namespace)
    server.stop.set()
    thread.join(timeout=10)


@pytest.fixture
def prometheus(fleet: FleetHandle, tmp_path: Path) -> Iterator[Prometheus]:
    """A real Prometheus scraping the fleet every second through file discovery."""
    prom = Prometheus(tmp_path / "prometheus")
    prom.start(scrape_configs(fleet.server.sd_file), interval="1s", die_with_parent=True)
    yield prom
    prom.stop()


class PrometheusGate:
    """A loopback HTTP proxy in front of Prometheus that a test can close (unreachable) or slow down."""

    def __init__(self, upstream: str) -> None:
        import http.server
        import urllib.request

        self.upstream = upstream
        self.open = True
        self.delay_s = 0.0
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                if not gate.open:
                    self.close_connection = True
                    self.connection.close()  # as if nothing listened: the client sees a dropped connection
                    return
                if gate.delay_s:
                    time.sleep(gate.delay_s)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                req = urllib.request.Request(gate.upstream + self.path, data=body, method=method)
                if self.headers.get("Content-Type"):
                    req.add_header("Content-Type", self.headers["Content-Type"])
                with urllib.request.urlopen(req, timeout=10) as resp:
                    data = resp.read()
                    self.send_response(resp.status)
                    self.send_header("Content-Type", resp.headers.get("Content-Type", "application/json"))
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        class Server(http.server.ThreadingHTTPServer):
            # The operator sends a reading's queries at once (17 of them): with socketserver's
            # default backlog of 5 some connections were dropped, the reading failed, and the
            # decisions waited for the next (the step scenario then missed its deadline).
            request_queue_size = 64
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def prometheus_gate(prometheus: Prometheus) -> Iterator[PrometheusGate]:
    """What the operator reaches Prometheus through."""
    gate = PrometheusGate(prometheus.url)
    yield gate
    gate.close()


@pytest.fixture
def autoscaler(
    crd: dict[str, Any],
    operator_identity: Identity,
    namespace: str,
    kube: Kube,
    testbed: testbed_mod.Testbed,
    prometheus_gate: PrometheusGate,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """``tailguard run`` as its ServiceAccount, reading the test's Prometheus through the gate."""
    log = testbed.workdir / "operator-logs" / f"{request.node.name}.log"
    op = OperatorProcess(
        operator_identity,
        log,
        prometheus_url=prometheus_gate.url,
        extra_args=[f"--rate-window={RATE_WINDOW}", "--prometheus-timeout=2"],
    )
    request.node._tg_operator = op
    op.start()
    yield op
    if op.running:
        for obj in kube.list(*ISVC, namespace):
            kube.delete(*ISVC, obj["metadata"]["name"], namespace)
        with contextlib.suppress(AssertionError):
            wait_for(
                f"InferenceServices in {namespace} to go", lambda: not kube.list(*ISVC, namespace), timeout=30
            )
    op.stop()
    refused = op.forbidden_lines()
    assert not refused, "the API server refused the operator something:\n" + "\n".join(refused[:20])
