"""The control cycle's own CPU, in-process: N services, Prometheus answers as real JSON, steady load.

Run with ``make bench-cycle`` (``N=500`` by default). No cluster: the control loop runs against the
in-memory cluster and an HTTP Prometheus reader whose transport answers every query with a JSON
document as Prometheus would (one series per service, or per bucket read), so the reading costs what
it costs against a real Prometheus apart from the network. The load wobbles by a few percent from
cycle to cycle and moves by half every fourth cycle, so some decisions write and most do not.
Every status write is fed back into the inventory as a new object, as the watch would, so specs
are re-parsed where they would be.

It reports the process CPU (``time.process_time``, every thread) per steady cycle, the loop's ticks
up to the next cycle included, per service, and the writes per cycle. The loop makes its writes in
the background; each cycle here waits for them to land before the next, so their CPU is counted
with the cycle that queued them, and the cycle's own wall time (until it returns, writes queued) is
reported apart. What it leaves out, and ``make bench-operator`` includes: kopf's watches, the API
client's HTTP and TLS, and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tailguard.contract.vllm import TPOT_BUCKETS_S, TTFT_BUCKETS_S
from tailguard.handlers.main import GC_THRESHOLDS
from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.render import RenderSettings
from tailguard.metrics.prometheus import FakePrometheus, HttpPrometheus, PrometheusSettings
from tailguard.metrics.promql import QueryScope, Signal, all_queries
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.loop import ControlLoop, CycleReport
from tailguard.reconcile.service import reconcile
from tailguard.reconcile.telemetry import Telemetry

NAMESPACE = "tg-cycle"
START = 1_800_000_000.0
INTERVAL_S = 15.0
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")
TTFT_SLO_S, TPOT_SLO_S = 0.5, 0.05  # every service's SLOs


def manifest(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "tailguard.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": f"svc-{i:04d}", "namespace": NAMESPACE, "uid": f"uid-{i}", "generation": 1},
        "spec": {
            "model": {"name": "bench/model"},
            "slo": {"ttftP99Ms": round(TTFT_SLO_S * 1000), "tpotP99Ms": round(TPOT_SLO_S * 1000)},
            "autoscaling": {"mode": "DryRun", "minReplicas": 1, "maxReplicas": 8},
        },
    }


def series(name: str, value: float, at: float, **labels: str) -> dict[str, Any]:
    return {
        "metric": {"namespace": NAMESPACE, "inference_service": name, **labels},
        "value": [at, repr(value)],
    }


def answers(rates: list[float], at: float) -> dict[Signal, list[dict[str, Any]]]:
    """Every query's result for services at ``rates`` req/s: 3% of first tokens slow, TPOT fine."""
    out: dict[Signal, list[dict[str, Any]]] = {signal: [] for signal in Signal}
    for i, rate in enumerate(rates):
        name = f"svc-{i:04d}"
        for le in TTFT_BUCKETS_S:
            share = 0.0 if le < 0.05 else 0.97 if le < 1.0 else 1.0
            out[Signal.TTFT_BUCKETS].append(series(name, rate * share, at, le=repr(le)))
        out[Signal.TTFT_BUCKETS].append(series(name, rate, at, le="+Inf"))
        for le in TPOT_BUCKETS_S:
            share = 0.0 if le < 0.01 else 0.995 if le < 0.05 else 1.0
            out[Signal.TPOT_BUCKETS].append(series(name, rate * 180 * share, at, le=repr(le)))
        out[Signal.TPOT_BUCKETS].append(series(name, rate * 180, at, le="+Inf"))
        for signal, value in (
            (Signal.REQUEST_RATE, rate),
            (Signal.REQUEST_RATE_BURST, rate),
            (Signal.PROMPT_TOKEN_RATE, rate * 200),
            (Signal.GENERATION_TOKEN_RATE, rate * 180),
            (Signal.RUNNING, rate * 1.5),
            (Signal.WAITING, 0.0),
            (Signal.KV_CACHE_USAGE, 0.3),
            (Signal.PREEMPTION_RATE, 0.0),
            (Signal.ITL_MEAN, 0.012),
            (Signal.QUEUE_TIME_MEAN, 0.004),
            (Signal.PREFILL_TIME_MEAN, 0.016),
            (Signal.REPORTING_PODS, 1.0),
            (Signal.LAST_SAMPLE, at - 5),
        ):
            out[signal].append(series(name, value, at))
    return out


class JsonPrometheus:
    """An httpx transport answering ``/api/v1/query`` with the current cycle's JSON documents: every
    full query, and the latency histograms narrowed to the services' SLO edges with their p99s, as
    Prometheus would compute them (``FakePrometheus`` derives them from the full buckets)."""

    def __init__(self, scope: QueryScope) -> None:
        narrowed = all_queries(scope, {Signal.TTFT_BUCKETS: [TTFT_SLO_S], Signal.TPOT_BUCKETS: [TPOT_SLO_S]})
        self.full = all_queries(scope)
        self.texts = set(self.full.values()) | set(narrowed.values())
        self.documents: dict[str, bytes] = {}
        self.sizes: dict[str, int] = {}
        #: Series in each answer served since the last ``set``.
        self.served: list[int] = []

    def set(self, results: dict[Signal, list[dict[str, Any]]]) -> None:
        table = FakePrometheus({self.full[s]: result for s, result in results.items() if s in self.full})
        self.documents = {}
        for text in self.texts:
            result = table.answer(text)
            document = {"status": "success", "data": {"resultType": "vector", "result": result}}
            self.documents[text] = json.dumps(document).encode()
            self.sizes[text] = len(result)
        self.served = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        form = dict(httpx.QueryParams(request.content.decode()))
        self.served.append(self.sizes[form["query"]])
        return httpx.Response(200, content=self.documents[form["query"]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--services", type=int, default=500)
    parser.add_argument("--cycles", type=int, default=12, help="steady cycles measured (after 4 warm-up)")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "out" / "bench-cycle"))
    args = parser.parse_args()
    gc.set_threshold(*GC_THRESHOLDS)  # as the operator process runs
    rng = random.Random(1)
    scope = QueryScope()
    transport = JsonPrometheus(scope)
    prometheus = HttpPrometheus(
        PrometheusSettings(url="http://prometheus.invalid"), transport=httpx.MockTransport(transport)
    )
    cluster, inventory = FakeCluster(), Inventory()
    render = RenderSettings()
    loop = ControlLoop(
        inventory=inventory,
        cluster=cluster,
        prometheus=prometheus,
        scope=scope,
        telemetry=Telemetry(),
        post_event=lambda namespace, name, note: None,
        render=render,
    )
    base = [rng.uniform(0.5, 8.0) for _ in range(args.services)]
    for i in range(args.services):
        body = manifest(i)
        body["status"] = reconcile(body, cluster, render, now=START - 60).status_patch
        body["metadata"]["resourceVersion"] = "1"
        cluster.add(body)
        inventory.put_service(body)
        deployment = cluster.get("apps/v1", "Deployment", NAMESPACE, f"svc-{i:04d}")
        assert deployment is not None
        deployment["status"] = {
            "replicas": 1,
            "readyReplicas": 1,
            "updatedReplicas": 1,
            "observedGeneration": 1,
        }
        deployment["metadata"]["generation"] = 1
        inventory.put_deployment(deployment)

    def feed_back() -> None:
        """Deliver what the cycle wrote to the inventory, as watch events would."""
        for namespace, name, _ in cluster.status_patches:
            live = cluster.get(*ISVC, namespace, name)
            view = inventory.view((namespace, name))
            if live is not None and view is not None:
                body = copy.deepcopy(view.body)
                body["status"] = live["status"]
                body["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
                inventory.put_service(body)
        cluster.status_patches.clear()

    async def cycle(now: float) -> tuple[CycleReport, float]:
        """One cycle, and the writes it queued landed; the cycle's own wall time. Then the loop's
        ticks until the next (one a second, as the operator runs it): they find no decision due,
        and resync the services whose periodic resync has come."""
        started = time.perf_counter()
        report = await loop.run_once(now)
        returned = time.perf_counter() - started
        await loop.flush()
        for tick in range(1, round(INTERVAL_S / loop.tick_s)):
            await loop.run_once(now + tick * loop.tick_s)
            await loop.flush()
        return report, returned

    rows = []
    for k in range(4 + args.cycles):
        now = START + INTERVAL_S * k
        step = 1.5 if k % 4 == 3 else 1.0  # every fourth cycle the load moves materially
        base = [b * step if k % 8 == 3 else b / step for b in base] if step != 1.0 else base
        transport.set(answers([b * rng.uniform(0.97, 1.03) for b in base], now))
        started = time.process_time()
        report, wall = asyncio.run(cycle(now))
        cpu = time.process_time() - started
        feed_back()
        if k >= 4:
            rows.append(
                {
                    "cycle": k,
                    "decided": report.decided,
                    "writes": report.writes,
                    "cpu_s": cpu,
                    "cycle_wall_s": wall,
                }
            )
    n = args.services
    cpu = sum(r["cpu_s"] for r in rows) / len(rows)
    result = {
        "services": n,
        "cycles": len(rows),
        "mean_cycle_cpu_s": round(cpu, 4),
        "cpu_per_service_ms": round(cpu / n * 1000, 3),
        "max_cycle_cpu_s": round(max(r["cpu_s"] for r in rows), 4),
        "writes_per_cycle": round(sum(r["writes"] for r in rows) / len(rows), 1),
        # Read and decide, until the writes are queued (they land in the background).
        "mean_cycle_wall_s": round(sum(r["cycle_wall_s"] for r in rows) / len(rows), 4),
        "series_per_reading": sum(transport.served),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"result-{n}.json").write_text(json.dumps({**result, "rows": rows}, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
