"""``make demo``: the whole loop on this machine, with a burst and a fall, shown live and drawn at the end.

It brings up (or reuses) the local control plane, a real Prometheus, the simulated fleet and the
operator (as its own ServiceAccount), applies ``demo.yaml``, plays a load profile, prints a live
table, writes ``out/demo/timeline.png`` and ``timeline.csv``, and stops everything it started.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

from cluster import control_plane, tools
from cluster.prometheus import Prometheus
from lib.fleet import scrape_configs, start_fleet
from lib.kube import Kube, load_yaml_documents
from lib.operator import OperatorProcess, provision_identity
from lib.wait import wait_for

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")
#: (seconds from start, requests per second): steady, a burst of about 4x, then a fall.
PROFILE = [(0, 10.0), (60, 45.0), (160, 4.0), (330, 4.0)]


def rate_at(t: float) -> float:
    current = PROFILE[0][1]
    for start, rate in PROFILE:
        if t >= start:
            current = rate
    return current


def live_figures(metrics_url: str, namespace: str, name: str) -> dict[str, float]:
    """The operator's own per-service gauges, refreshed every cycle (status refreshes once a minute)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(metrics_url, timeout=3).read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("namespace") == namespace and sample.labels.get("inference_service") == name:
                out[sample.name] = sample.value
    return out


def row(kube: Kube, namespace: str, name: str, t: float, rate: float, metrics_url: str) -> dict[str, Any]:
    obj = kube.get(*ISVC, name, namespace) or {}
    status = obj.get("status") or {}
    decision = status.get("lastDecision") or {}
    live = live_figures(metrics_url, namespace, name)

    def ms(key: str) -> float | None:
        value = live.get(key)
        return round(value * 1000.0, 1) if value is not None and value == value else None

    goodput = live.get("tailguard_goodput_ratio")
    return {
        "t": round(t),
        "load_rps": rate,
        "ready": status.get("readyReplicas", 0),
        "desired": int(live.get("tailguard_desired_replicas", status.get("desiredReplicas", 0))),
        "max_batch": status.get("maxNumSeqs"),
        "p99_ttft_ms": ms("tailguard_p99_ttft_seconds"),
        "slo_ms": (obj.get("spec") or {}).get("slo", {}).get("ttftP99Ms"),
        "goodput": goodput if goodput is not None and goodput == goodput else None,
        "decision": decision.get("message", ""),
    }


def print_row(r: dict[str, Any]) -> None:
    def fmt(v: Any, spec: str) -> str:
        return format(v, spec) if isinstance(v, int | float) else "-"

    print(
        f"{r['t']:>5}s  load {r['load_rps']:>5.1f}/s  replicas {r['ready']}/{r['desired']}  "
        f"max batch {fmt(r['max_batch'], 'd'):>4}  p99 TTFT {fmt(r['p99_ttft_ms'], '.0f'):>5} ms "
        f"(SLO {fmt(r['slo_ms'], '.0f')})  goodput {fmt(r['goodput'], '.3f'):>5}  {r['decision'][:70]}",
        flush=True,
    )


def draw(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = [r["t"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    top.plot(t, [r["load_rps"] for r in rows], color="grey", label="load (req/s)")
    top.set_ylabel("req/s")
    right = top.twinx()
    right.step(t, [r["desired"] for r in rows], where="post", color="tab:blue", label="desired replicas")
    right.step(t, [r["ready"] for r in rows], where="post", color="tab:green", label="ready replicas")
    right.set_ylabel("replicas")
    top.legend(loc="upper left")
    right.legend(loc="upper right")
    top.set_title("tailguard demo: load, replicas and the tail")
    bottom.plot(t, [r["p99_ttft_ms"] for r in rows], color="tab:red", label="p99 TTFT (ms)")
    bottom.axhline(rows[0]["slo_ms"] or 500, color="black", linestyle="--", label="SLO")
    bottom.set_ylabel("ms")
    bottom.set_xlabel("seconds")
    bottom.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(REPO / "out" / "demo"))
    parser.add_argument("--every", type=float, default=5.0, help="seconds between table rows")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    found = tools.locate()

    print("== starting the local control plane (fake GPU nodes) ==", flush=True)
    cluster = control_plane.Cluster()
    started_cluster = not cluster.is_running()
    cluster.up()
    kube = Kube(cluster.kubeconfig, found.kubectl)
    kube.kubectl("apply", "--server-side", "--force-conflicts", f"-f={REPO / 'crds'}")
    wait_for(
        "the InferenceService CRD",
        lambda: kube.kubectl("get", "crd", "inferenceservices.tailguard.dev", check=False).returncode == 0,
        timeout=30,
    )
    kube.invalidate_discovery()
    manifest = load_yaml_documents(HERE / "demo.yaml")[0]
    namespace, name = manifest["metadata"]["namespace"], manifest["metadata"]["name"]
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    # A run right after another must not apply onto the earlier run's service while it is deleted.
    wait_for(
        "the previous run's InferenceService and pods to be gone",
        lambda: (
            kube.get(*ISVC, name, namespace) is None
            and not kube.list("v1", "Pod", namespace, labels={"tailguard.dev/inference-service": name})
        ),
        timeout=180,
    )

    print("== starting the simulated vLLM fleet and Prometheus ==", flush=True)
    fleet, _ = start_fleet(cluster.kubeconfig, namespace, out / "targets.json", seed=3)
    prom = Prometheus(out / "prometheus")
    prom.start(scrape_configs(fleet.sd_file), interval="1s", die_with_parent=True)

    print("== starting the operator as its own ServiceAccount ==", flush=True)
    identity = provision_identity(kube, out / "identity")
    operator = OperatorProcess(
        identity, out / "operator.log", prometheus_url=prom.url, extra_args=["--rate-window=10s"]
    )
    rows: list[dict[str, Any]] = []
    try:
        operator.start()
        kube.apply(manifest)
        wait_for("the first replica to serve", lambda: fleet.fleet.ready_pods(namespace, name), timeout=120)
        print(f"== playing the load: {PROFILE} (req/s from second t) ==", flush=True)
        origin = time.monotonic()
        end = PROFILE[-1][0]
        while (t := time.monotonic() - origin) < end:
            rate = rate_at(t)
            with fleet.lock:
                fleet.fleet.set_rate(namespace, name, rate)
            r = row(kube, namespace, name, t, rate, operator.metrics_url)
            rows.append(r)
            print_row(r)
            time.sleep(args.every)
    finally:
        operator.stop()
        fleet.stop.set()
        prom.stop()
        kube.delete(*ISVC, name, namespace)
        if started_cluster:
            cluster.down(quiet=True)
    with open(out / "timeline.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    draw(rows, out / "timeline.png")
    print(f"== done: {out / 'timeline.png'}, {out / 'timeline.csv'}, operator log {out / 'operator.log'} ==")
    return 0


if __name__ == "__main__":
    sys.exit(main())
