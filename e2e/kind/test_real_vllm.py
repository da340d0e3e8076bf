"""One real engine in a real pod: vLLM for CPUs serving the tiny model, as one replica of an
InferenceService in the kind cluster, read by the operator through the cluster's Prometheus.

The pod runs ``images/engine-vllm-cpu`` with the arguments the operator renders, unchanged (no
command override: the image's entrypoint is ``vllm serve``); it becomes Ready through the rendered
startup and readiness probes on vLLM's own ``/health``. A bounded load of streamed completions goes
through the InferenceService's Service; the operator's ``status.observed`` must then carry figures
that came from the engine's real ``vllm:*`` series, and Prometheus must count every request the
load saw succeed. Opt-in (``make test-kind-vllm``): the image is several GB and a CPU engine takes
minutes to start on a small machine.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from containers import vllm_image
from kind import manifests
from kind.conftest import ISVC, SERVICE, ClusterPrometheus, HelmRelease, load_summary
from lib.kube import Kube, condition, unique_name
from lib.wait import wait_for
from tailguard.api.resource import InferenceService
from tailguard.contract.vllm import VllmMetric
from tailguard.k8s.labels import SERVICE_LABEL
from tailguard.k8s.render import vllm_args

pytestmark = pytest.mark.kind_vllm

NAME = SERVICE
#: The pod's start: image already on the node, then vLLM's import, model load and warm-up on CPUs
#: shared with other work. Generous, and bounded (the rendered startup probe allows 600 s).
READY_TIMEOUT_S = 900
#: The load: two closed-loop connections, short completions, bounded in count and in time.
WORKERS = 2
MAX_REQUESTS = 40
LOAD_S = 90
MAX_TOKENS = 16


def status(kube: Kube, namespace: str) -> dict[str, Any]:
    return dict((kube.get(*ISVC, NAME, namespace) or {}).get("status") or {})


def conditions(kube: Kube, namespace: str) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(kube, namespace).get("conditions") or []}


def ready_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    pods = kube.list("v1", "Pod", namespace, labels={SERVICE_LABEL: NAME})
    return [
        p for p in pods
        if not p["metadata"].get("deletionTimestamp") and (condition(p, "Ready") or {}).get("status") == "True"
    ]  # fmt: skip


def first(pods: list[dict[str, Any]]) -> dict[str, Any] | None:
    return pods[0] if pods else None


def engine_log(kube: Kube, namespace: str) -> str:
    out = kube.kubectl("logs", f"deployment/{NAME}", "--tail=40", namespace=namespace, check=False)
    return f"\n$ kubectl logs deployment/{NAME} --tail=40\n{out.stdout}{out.stderr}"


def observed_since(kube: Kube, namespace: str, since: float) -> dict[str, Any] | None:
    """``status.observed`` when it was read after ``since`` (Unix time) and shows the load."""
    observed = status(kube, namespace).get("observed") or {}
    when = observed.get("time")
    if not when or dt.datetime.fromisoformat(str(when).replace("Z", "+00:00")).timestamp() < since:
        return None
    if (observed.get("requestRate") or 0) <= 0 or observed.get("p99TtftMs") is None:
        return None
    return dict(observed)


def test_real_vllm_replica_serves_and_the_operator_reads_its_metrics(
    kube: Kube,
    release: HelmRelease,
    prometheus: ClusterPrometheus,
    apps_namespace: str,
    vllm_cpu_image: str,
    kind_images: dict[str, str],
) -> None:
    namespace = apps_namespace
    manifest = manifests.vllm_inference_service(NAME, vllm_cpu_image, vllm_image.MODEL_PATH)
    applied_at = time.monotonic()
    kube.apply(manifest, namespace)

    # --- the pod starts with the rendered arguments and turns Ready through the real probes ----------
    pod = wait_for(
        "the vLLM pod Ready (startup and readiness probes on vLLM's /health)",
        lambda: first(ready_pods(kube, namespace)),
        timeout=READY_TIMEOUT_S,
        interval=5,
        details=lambda: kube.describe_namespace(namespace) + engine_log(kube, namespace),
    )
    ready_s = time.monotonic() - applied_at
    print(f"InferenceService applied → vLLM pod Ready in {ready_s:.0f}s")
    container = pod["spec"]["containers"][0]
    isvc = InferenceService.model_validate({**manifest, "metadata": {"name": NAME, "namespace": namespace}})
    assert container["image"] == vllm_cpu_image
    assert "command" not in container, "the image's entrypoint (vllm serve) runs, not an override"
    assert container["args"] == vllm_args(isvc, 4), "the pod must run the operator's arguments, unchanged"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    (state,) = pod["status"]["containerStatuses"]
    assert state["containerID"].startswith("containerd://")
    assert state["restartCount"] == 0, "the engine restarted" + engine_log(kube, namespace)
    log = kube.kubectl("logs", pod["metadata"]["name"], namespace=namespace).stdout
    assert "simulated" not in log
    assert "vLLM" in log, log[-3000:]
    assert vllm_image.MODEL_PATH in log, log[-3000:]

    # --- the operator sees the engine through Prometheus ---------------------------------------------
    wait_for(
        "MetricsAvailable=True (Prometheus scrapes the real engine, the operator reads it)",
        lambda: conditions(kube, namespace).get("MetricsAvailable", ("", ""))[0] == "True",
        timeout=120,
        details=lambda: json.dumps(status(kube, namespace), indent=1),
    )
    selector = f'namespace="{namespace}",inference_service="{NAME}"'
    assert prometheus.value(f"count({VllmMetric.RUNNING.value}{{{selector}}})") == 1.0

    # --- bounded completions through the Service -------------------------------------------------
    load_name = unique_name("load")
    load_started = time.time()
    for obj in manifests.load_objects(
        load_name,
        namespace,
        kind_images["standin"],
        manifests.service_url(NAME, namespace),
        isvc.served_name,
        workers=WORKERS,
        duration_s=LOAD_S,
        max_tokens=MAX_TOKENS,
        max_requests=MAX_REQUESTS,
    ):
        kube.apply(obj, namespace)
    observed = wait_for(
        "status.observed read during the load (request rate > 0, a p99 TTFT)",
        lambda: observed_since(kube, namespace, load_started),
        timeout=LOAD_S + 60,
        interval=1,
        details=lambda: json.dumps(status(kube, namespace), indent=1) + engine_log(kube, namespace),
    )
    print(f"status.observed during the load: {json.dumps(observed)}")
    assert observed["p99TtftMs"] > 0
    assert observed.get("running") is not None, observed
    assert observed.get("waiting") is not None, observed
    assert observed.get("kvCacheUsage") is not None, observed
    assert 0 <= observed["kvCacheUsage"] <= 1, observed

    summary = load_summary(kube, load_name, namespace, timeout=LOAD_S + 120)
    ok = summary["outcomes"].get("ok", 0)
    assert summary["requests"] > 0, summary
    assert ok == summary["requests"], f"requests failed through the Service: {summary}"

    # --- Prometheus counted exactly what the engine served ---------------------------------------
    served = f"sum({VllmMetric.REQUEST_SUCCESS.value}{{{selector}}})"
    assert wait_for(
        f"Prometheus to count the load's {ok} requests",
        lambda: prometheus.value(served) == float(ok) or None,
        timeout=60,
        details=lambda: f"{served} = {prometheus.value(served)}",
    )
    ttft_count = f"sum({VllmMetric.TTFT.value}_count{{{selector}}})"
    assert prometheus.value(ttft_count) == float(ok)
    # The TTFT SLO (2 s) is no edge of vLLM's default buckets: the operator asked for it as one
    # (--custom-histogram-buckets), and the engine exports it, so the share within it is counted.
    slo_edge = f'count({VllmMetric.TTFT.value}_bucket{{{selector},le="2.0"}})'
    assert prometheus.value(slo_edge) == 1.0, f"{slo_edge} = {prometheus.value(slo_edge)}"
