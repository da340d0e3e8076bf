"""Operator scale benchmark: one operator, many InferenceServices, a real API server and Prometheus.

Run with ``make bench-operator`` (``N=500`` by default). It starts (or reuses) the local control
plane, creates N InferenceServices in mode DryRun with ``replicas: 0`` (no GPUs needed), serves
vLLM metrics for one simulated engine per service through the fleet, points a real Prometheus at
them, runs ``tailguard run`` as a subprocess, and reads from the operator's own ``/metrics``:
control-cycle time, Prometheus queries per cycle, and the process's resident memory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from cluster.control_plane import Cluster, free_ports
from cluster.prometheus import Prometheus
from tailguard.fleet.model import PodFleet
from tailguard.fleet.server import FleetServer
from tailguard.sim.profiles import get_profile

REPO = Path(__file__).resolve().parents[2]
NAMESPACE = "tg-scale"


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    binary = shutil.which("kubectl") or str(REPO / ".venv" / "bin" / "kubectl")
    out = subprocess.run(
        [binary, f"--kubeconfig={kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def manifests(n: int) -> str:
    docs = []
    for i in range(n):
        docs.append(
            {
                "apiVersion": "tailguard.dev/v1alpha1",
                "kind": "InferenceService",
                "metadata": {"name": f"svc-{i:04d}", "namespace": NAMESPACE},
                "spec": {
                    "model": {"name": "bench/model"},
                    "replicas": 0,
                    "slo": {"ttftP99Ms": 500},
                    "autoscaling": {"mode": "DryRun", "minReplicas": 1, "maxReplicas": 4},
                },
            }
        )
    return yaml.safe_dump_all(docs)


def synthetic_pods(n: int) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {
                "name": f"svc-{i:04d}-0",
                "namespace": NAMESPACE,
                "labels": {"tailguard.dev/inference-service": f"svc-{i:04d}"},
            },
            "spec": {"containers": [{"args": ["bench/model", "--max-num-seqs", "256"]}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        }
        for i in range(n)
    ]


def scrape(url: str) -> dict[str, float]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        values[name] = values.get(name, 0.0) + float(value)
    return values


def total(values: dict[str, float], prefix: str) -> float:
    return sum(v for k, v in values.items() if re.match(rf"^{re.escape(prefix)}(\{{|$)", k))


def rss_mib(pid: int) -> tuple[float, float]:
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
    )
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def handled(kubeconfig: Path) -> int:
    """InferenceServices whose spec the operator has applied (its status carries the generation)."""
    items = json.loads(kubectl(kubeconfig, "get", "inferenceservices", "-n", NAMESPACE, "-o", "json"))[
        "items"
    ]
    return sum(
        1
        for i in items
        if (i.get("status") or {}).get("observedGeneration") == (i.get("metadata") or {}).get("generation")
    )


def status_writes(kubeconfig: Path) -> dict[str, float]:
    """The API server's count of InferenceService status patches by HTTP code, and of Events posted
    (``apiserver_request_total``): a 409 is a conditional status write refused as a conflict."""
    text = kubectl(kubeconfig, "get", "--raw", "/metrics")
    counts: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels, _, value = line.rpartition(" ")
        if (
            'resource="inferenceservices"' in labels
            and 'subresource="status"' in labels
            and 'verb="PATCH"' in labels
        ):
            code = labels.split('code="', 1)[1].split('"', 1)[0]
            counts[f"status_{code}"] = counts.get(f"status_{code}", 0.0) + float(value)
        elif 'resource="events"' in labels and 'verb="POST"' in labels:
            counts["events"] = counts.get("events", 0.0) + float(value)
    return counts


def counts_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted(set(before) | set(after))}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", "--services", type=int, default=int(os.environ.get("N", "500")))
    parser.add_argument(
        "--measure-s", type=float, default=120.0, help="how long to measure once all services are seen"
    )
    parser.add_argument(
        "--settle-s", type=float, default=60.0, help="wait after the first reconciles, for kopf to drain"
    )
    parser.add_argument(
        "--wave-timeout-s", type=float, default=900.0, help="how long the first reconciles may take"
    )
    parser.add_argument(
        "--scrape-interval",
        default="5s",
        help="how often Prometheus scrapes each simulated engine (the chart's PodMonitor uses 30s)",
    )
    parser.add_argument(
        "--sample-s",
        type=float,
        default=15.0,
        help="how often the benchmark reads the operator's /metrics while measuring (the chart's "
        "ServiceMonitor: 30 s); each read renders every service's series and counts as operator CPU",
    )
    parser.add_argument("--out", default=str(REPO / "out" / "bench-operator"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    cluster = Cluster()
    cluster.up()
    kube = cluster.kubeconfig
    kubectl(kube, "apply", "--server-side", "-f", str(REPO / "crds"))
    kubectl(
        kube, "wait", "--for=condition=Established", "crd/inferenceservices.tailguard.dev", "--timeout=60s"
    )
    # Services left by an earlier run (one stopped before its clean-up, on a kept cluster) would be
    # counted with the new ones, and a namespace still terminating would swallow them: delete it
    # and wait until it is gone.
    subprocess.run(
        [shutil.which("kubectl") or str(REPO / ".venv/bin/kubectl"), f"--kubeconfig={kube}", "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait", "--timeout=600s"],
        capture_output=True, check=False,
    )  # fmt: skip
    subprocess.run(
        [
            shutil.which("kubectl") or str(REPO / ".venv/bin/kubectl"),
            f"--kubeconfig={kube}",
            "create",
            "namespace",
            NAMESPACE,
        ],
        capture_output=True,
        check=False,
    )

    work = Path(tempfile.mkdtemp(prefix="tg-bench-"))
    fleet = PodFleet(get_profile("h100-llama3-8b"), seed=1)
    for i in range(args.services):
        fleet.set_rate(NAMESPACE, f"svc-{i:04d}", 0.2)
    pods = synthetic_pods(args.services)
    server = FleetServer(
        fleet, host="127.0.0.1", port=0, sd_file=work / "targets.json", list_pods=lambda: pods
    )
    threading.Thread(target=server.serve, daemon=True).start()
    prom = Prometheus(work / "prometheus")
    scrape_configs = [
        {
            "job_name": "fleet",
            "scrape_interval": args.scrape_interval,
            "scrape_timeout": "5s",
            "file_sd_configs": [{"files": [str(work / "targets.json")], "refresh_interval": "5s"}],
        }
    ]
    prom_url = prom.start(scrape_configs, interval="5s", die_with_parent=True)
    operator: subprocess.Popen[bytes] | None = None
    try:
        print(f"[bench] creating {args.services} InferenceServices", flush=True)
        at_start = status_writes(kube)
        kubectl(kube, "apply", "--server-side", "-f", "-", stdin=manifests(args.services))
        metrics_port, liveness_port = free_ports(2)
        env = {**os.environ, "KUBECONFIG": str(kube)}
        log = open(out / "operator.log", "wb")  # noqa: SIM115 - closed with the process
        operator = subprocess.Popen(
            [
                str(REPO / ".venv" / "bin" / "tailguard"), "run", "--all-namespaces",
                "--prometheus-url", prom_url, "--metrics-port", str(metrics_port),
                "--liveness-port", str(liveness_port), "--listen-address", "127.0.0.1",
            ],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(5)
            try:
                values = scrape(metrics_url)
            except OSError:
                continue
            seen = total(values, "tailguard_inference_services")
            decided = total(values, "tailguard_decisions_total")
            print(f"[bench] operator sees {seen:.0f} services, {decided:.0f} decisions so far", flush=True)
            # A service is decided for once its spec handler has reconciled it (below).
            if seen >= args.services:
                break
        else:
            raise RuntimeError("the operator did not see every service within 10 minutes")
        # Steady state only: the first reconcile of every service (render, apply, status) runs on
        # kopf's handler threads for minutes at N=500 and would be counted against the loop.
        started = time.monotonic()
        while (done := handled(kube)) < args.services:
            if time.monotonic() - started > args.wave_timeout_s:
                raise RuntimeError(
                    f"only {done} of {args.services} services reconciled in {args.wave_timeout_s:.0f} s"
                )
            print(f"[bench] {done} of {args.services} services through their first reconcile", flush=True)
            time.sleep(10)
        wave_s = time.monotonic() - started
        print(f"[bench] first reconciles done after {wave_s:.0f} s more", flush=True)
        while total(scrape(metrics_url), "tailguard_decisions_total") < args.services:
            if time.monotonic() - started > args.wave_timeout_s + 120:
                raise RuntimeError("not every reconciled service was decided for within two minutes")
            time.sleep(5)
        # kopf still works through the wave's own events (annotations, status) for a while.
        time.sleep(args.settle_s)
        before = scrape(metrics_url)
        api_before = status_writes(kube)
        cpu_before, load_before = cpu_seconds(operator.pid), os.getloadavg()[0]
        # The writes are made in the background: their queue is sampled while measuring, at a
        # scraper's pace (every 5 s, a sixth of the operator's CPU went to rendering /metrics).
        depths: list[float] = []
        measured_until = time.monotonic() + args.measure_s
        while (left := measured_until - time.monotonic()) > 0:
            time.sleep(min(args.sample_s, left))
            with contextlib.suppress(OSError):
                depths.append(total(scrape(metrics_url), "tailguard_write_queue_depth"))
        after = scrape(metrics_url)
        api_after = status_writes(kube)
        cpu = cpu_seconds(operator.pid) - cpu_before
        load = (load_before + os.getloadavg()[0]) / 2
        cycles = total(after, "tailguard_loop_duration_seconds_count") - total(
            before, "tailguard_loop_duration_seconds_count"
        )
        seconds = total(after, "tailguard_loop_duration_seconds_sum") - total(
            before, "tailguard_loop_duration_seconds_sum"
        )
        decisions = total(after, "tailguard_decisions_total") - total(before, "tailguard_decisions_total")
        writes = total(after, "tailguard_api_writes_total") - total(before, "tailguard_api_writes_total")
        rss, peak = rss_mib(operator.pid)

        def phase(name: str, part: str) -> float:
            key = f'tailguard_loop_phase_seconds_{part}{{phase="{name}"}}'
            return after.get(key, 0.0) - before.get(key, 0.0)

        def write_latency(priority: str) -> float | None:
            """Mean seconds from queued to landed of the writes of ``priority`` that landed."""

            def part(name: str) -> float:
                key = f'tailguard_write_latency_seconds_{name}{{priority="{priority}"}}'
                return after.get(key, 0.0) - before.get(key, 0.0)

            return round(part("sum") / part("count"), 3) if part("count") else None

        def delta(prefix: str) -> float:
            return total(after, prefix) - total(before, prefix)

        result = {
            "services": args.services,
            "measured_s": args.measure_s,
            "metrics_read_every_s": args.sample_s,
            "cycles": cycles,
            "decisions": decisions,
            # Status, policy-state, Deployment and Event writes of the loop: bounded by the status
            # refresh (at least once a minute per service) and by figures that move materially.
            "writes": writes,
            "writes_per_service_per_minute": round(writes / args.services / (args.measure_s / 60), 3),
            "mean_cycle_s": seconds / cycles if cycles else None,
            "mean_read_s": phase("read", "sum") / cycles if cycles else None,
            "mean_decide_s": phase("decide", "sum") / cycles if cycles else None,
            # The background writes: services with a write queued (sampled every 5 s), the wait
            # from queued to landed by priority, decisions put off behind a write in flight, and
            # queued writes replaced by a newer one.
            "write_queue_depth_mean": round(sum(depths) / len(depths), 1) if depths else None,
            "write_queue_depth_max": max(depths) if depths else None,
            "write_latency_s": {p: write_latency(p) for p in ("act", "status", "refresh")},
            "decisions_deferred": delta("tailguard_decisions_deferred_total"),
            # The API server's side: status patches landed (200) and refused as conflicts (409),
            # and Events posted, from the services' creation to the measurement, and during it.
            "api_before_measuring": counts_between(at_start, api_before),
            "api_while_measuring": counts_between(api_before, api_after),
            "first_reconciles_s": round(wave_s),
            "prometheus_query_errors": {
                "before_measuring": total(before, "tailguard_prometheus_query_errors_total"),
                "while_measuring": delta("tailguard_prometheus_query_errors_total"),
            },
            "writes_coalesced": delta("tailguard_writes_coalesced_total"),
            # The operator's own CPU (every thread: kopf's watches, the loop, /metrics) per cycle,
            # and its share of one core: what the cycle costs apart from waiting for a core.
            "cpu_per_cycle_s": round(cpu / cycles, 3) if cycles else None,
            # The same per service and decision interval (15 s): what one service costs.
            "cpu_per_service_ms": round(cpu / (args.measure_s / 15.0) / args.services * 1000, 3),
            "cpu_cores_used": round(cpu / args.measure_s, 3),
            "machine_load_average": round(load, 2),
            # Over the whole run: a window boundary can fall between a cycle's queries and its end.
            "queries_per_cycle": total(after, "tailguard_prometheus_queries_total")
            / max(1.0, total(after, "tailguard_loop_duration_seconds_count")),
            "rss_mib": round(rss, 1),
            "peak_rss_mib": round(peak, 1),
        }
        (out / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2), flush=True)
        ok = (result["mean_cycle_s"] or 99) <= 2.0 and peak <= 250
        print(
            f"[bench] targets: cycle ≤ 2 s, RSS ≤ 250 MiB, queries per cycle constant -> {'met' if ok else 'MISSED'}"
        )
        return 0
    finally:
        if operator is not None:
            operator.terminate()
            try:
                operator.wait(timeout=30)
            except subprocess.TimeoutExpired:
                operator.kill()
        server.stop.set()
        prom.stop()
        subprocess.run(
            [shutil.which("kubectl") or str(REPO / ".venv/bin/kubectl"), f"--kubeconfig={kube}", "delete", "namespace", NAMESPACE, "--wait=false"],
            capture_output=True, check=False,
        )  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
