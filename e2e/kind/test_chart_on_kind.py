"""The chart, the operator image and the engine stand-in on a kind cluster: what a user gets from
``helm install`` on a cluster with a kubelet, with real HTTP load through a Service.

The tests share the session's release and run in file order; the last one uninstalls it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import Any

import pytest

from kind import manifests
from kind.conftest import ISVC, RATE_WINDOW, SERVICE, ClusterPrometheus, HelmRelease, load_summary
from lib.kube import Kube, condition, unique_name
from lib.wait import stays, wait_for
from tailguard.contract.vllm import VllmMetric
from tailguard.k8s.labels import SERVICE_LABEL

pytestmark = pytest.mark.kind

NAME = SERVICE
INTERVAL_S = 5
STABILIZATION_S = 20
#: The burst: closed-loop connections against a service whose replicas batch 4 requests each.
BURST_WORKERS = 16
BURST_S = 150
#: The conditions docs/operations.md lists, with the reasons it documents for each.
DOCUMENTED_CONDITIONS = {
    "InvalidSpec": {"SpecValid", "ValidationFailed"},
    "Ready": {"AllReplicasReady", "ReplicasStarting", "Unschedulable", "ReplicasFailing", "ScaledToZero"},
    "MetricsAvailable": {"MetricsFresh", "PrometheusUnavailable", "NoData", "NoReadyReplicas", "StaleData"},
    "SLOMet": {"GoodputMet", "NoTraffic", "GoodputBelowTarget", "Unknown"},
    "ScalingLimited": {"WithinLimits", "Limited", "AnotherWriter"},
    "Progressing": {"RollingOut", "ReplicasStarting", "Stable"},
}


# -------------------------------------------------------------------------------------------------
# Helpers


def operator_pod(release: HelmRelease) -> dict[str, Any] | None:
    """The release's one running operator pod, when it is Ready."""
    pods = [p for p in release.operator_pods() if not p["metadata"].get("deletionTimestamp")]
    if len(pods) != 1:
        return None
    ready = condition(pods[0], "Ready")
    return pods[0] if ready and ready["status"] == "True" else None


def exec_in(kube: Kube, pod: dict[str, Any], code: str) -> str:
    """Run Python in the pod's first container (``kubectl exec``); its standard output."""
    meta = pod["metadata"]
    out = kube.kubectl("exec", meta["name"], "--", "python", "-c", code, namespace=meta["namespace"])
    return out.stdout.strip()


def events(kube: Kube, namespace: str, reason: str, name: str = NAME) -> list[dict[str, Any]]:
    found = [
        e for e in kube.list("v1", "Event", namespace)
        if (e.get("involvedObject") or {}).get("name") == name and e.get("reason") == reason
    ]  # fmt: skip
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def transition(event: dict[str, Any]) -> str:
    """``scaled 1→3`` of a Scaled event's message."""
    return str(event["message"]).split(":", 1)[0]


def status(kube: Kube, namespace: str) -> dict[str, Any]:
    return dict((kube.get(*ISVC, NAME, namespace) or {}).get("status") or {})


def decision_time(kube: Kube, namespace: str) -> float:
    """When the last decision was taken (Unix time; 0 when none)."""
    when = (status(kube, namespace).get("lastDecision") or {}).get("time")
    return dt.datetime.fromisoformat(str(when).replace("Z", "+00:00")).timestamp() if when else 0.0


def deployment(kube: Kube, namespace: str) -> dict[str, Any]:
    return kube.get("apps/v1", "Deployment", NAME, namespace) or {}


def desired(kube: Kube, namespace: str) -> int:
    return int((deployment(kube, namespace).get("spec") or {}).get("replicas") or 0)


def ready_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    pods = kube.list("v1", "Pod", namespace, labels={SERVICE_LABEL: NAME})
    return [
        p for p in pods
        if not p["metadata"].get("deletionTimestamp") and (condition(p, "Ready") or {}).get("status") == "True"
    ]  # fmt: skip


def conditions(kube: Kube, namespace: str) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status(kube, namespace).get("conditions") or []}


def get_tgis_row(kube: Kube, namespace: str) -> dict[str, str]:
    """``kubectl get tgis NAME -o wide`` as a user reads it: column name → cell (split at the header's
    column starts, which kubectl's table writer aligns)."""
    lines = kube.kubectl("get", "tgis", NAME, "-o", "wide", namespace=namespace).stdout.splitlines()
    header, row = lines[0], lines[1]
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    cells = [row[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
    return dict(zip(names, cells, strict=True))


def filled(row: dict[str, str]) -> dict[str, str] | None:
    """The row when no cell is empty or ``<none>``."""
    return row if all(v and v != "<none>" for v in row.values()) else None


# -------------------------------------------------------------------------------------------------
# The operator pod as the chart runs it


def test_operator_pod_is_ready_non_root_with_a_read_only_root(kube: Kube, release: HelmRelease) -> None:
    pod = wait_for("the operator pod to be Ready", lambda: operator_pod(release), timeout=120)
    spec = pod["spec"]
    container = spec["containers"][0]
    assert container["image"].startswith("tailguard/operator:")
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (state,) = pod["status"]["containerStatuses"]
    assert state["ready"] is True
    assert state["restartCount"] == 0, "the operator restarted: a crash at start?"
    assert state["containerID"].startswith("containerd://"), "a real container, run by the kubelet"

    # What the process itself sees, from inside the pod.
    ids = exec_in(kube, pod, "import os; print(os.getuid(), os.getgid(), os.geteuid())")
    assert ids == "65532 65532 65532"
    caps = exec_in(
        kube, pod, "print([l.split()[1] for l in open('/proc/1/status') if l.startswith('CapEff')][0])"
    )
    assert int(caps, 16) == 0, f"effective capabilities of the operator: {caps}"
    root_write = exec_in(
        kube,
        pod,
        "import errno\n"
        "try:\n    open('/opt/tailguard/probe', 'w')\n    print('written')\n"
        "except OSError as e:\n    print(errno.errorcode[e.errno])",
    )
    assert root_write == "EROFS", f"writing under / gave {root_write}, not a read-only file system"
    assert exec_in(kube, pod, "open('/tmp/probe', 'w').write('x'); print('ok')") == "ok", "/tmp is writable"
    log = kube.kubectl("logs", pod["metadata"]["name"], namespace=release.namespace).stdout
    assert "Traceback" not in log


def test_helm_test_passes(release: HelmRelease) -> None:
    # Without --logs: the chart deletes a test pod that succeeded (hook-succeeded, so that uninstall
    # leaves nothing behind), and `helm test --logs` then fails to find it.
    out = release.helm("test", release.name, "--timeout", "4m").stdout
    phases = re.findall(r"Phase:\s+(\w+)", out)
    assert phases, out
    assert set(phases) == {"Succeeded"}, out
    wait_for(
        "the succeeded test pod to be deleted (hook-succeeded)",
        lambda: (
            not release.kube.list("v1", "Pod", release.namespace, labels="app.kubernetes.io/component=test")
        ),
        timeout=60,
    )


# -------------------------------------------------------------------------------------------------
# A burst through the Service: scale-out, an operator restart in the middle, scale-in


def test_burst_scales_out_survives_an_operator_restart_and_scales_back_in(
    kube: Kube,
    apps_namespace: str,
    release: HelmRelease,
    prometheus: ClusterPrometheus,
    kind_images: dict[str, str],
) -> None:
    namespace = apps_namespace
    isvc = manifests.inference_service(
        NAME, kind_images["standin"], interval_s=INTERVAL_S, stabilization_s=STABILIZATION_S
    )
    kube.apply(isvc, namespace)

    # --- one replica, Ready through its real probes ----------------------------------------------
    wait_for(
        "one stand-in pod Ready (kubelet probes /health)",
        lambda: len(ready_pods(kube, namespace)) == 1,
        timeout=120,
        details=lambda: kube.describe_namespace(namespace),
    )
    (pod,) = ready_pods(kube, namespace)
    engine = pod["spec"]["containers"][0]
    assert engine["image"] == kind_images["standin"]
    assert engine["readinessProbe"]["httpGet"]["path"] == "/health"
    assert engine["startupProbe"]["httpGet"]["path"] == "/health"
    assert "--max-num-seqs" in engine["args"]
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == "1"
    (engine_state,) = pod["status"]["containerStatuses"]
    assert engine_state["containerID"].startswith("containerd://")
    assert engine_state["started"] is True
    engine_log = kube.kubectl("logs", pod["metadata"]["name"], namespace=namespace).stdout
    assert "simulated, not vLLM" in engine_log

    # --- the operator reads the engine through the cluster's Prometheus ---------------------------
    wait_for(
        "MetricsAvailable=True (Prometheus scrapes the pod, the operator reads it)",
        lambda: conditions(kube, namespace).get("MetricsAvailable", ("", ""))[0] == "True",
        timeout=90,
        details=lambda: json.dumps(status(kube, namespace), indent=1),
    )
    reporting = f'count(vllm:num_requests_running{{namespace="{namespace}",inference_service="{NAME}"}})'
    assert prometheus.value(reporting) == 1.0
    created = {e["message"] for e in events(kube, namespace, "Created")}
    assert any("Deployment" in m for m in created), created
    assert any("Service" in m for m in created), created
    wait_for(
        "status 1/1 and Ready=True",
        lambda: (
            status(kube, namespace).get("ready") == "1/1"
            and conditions(kube, namespace).get("Ready") == ("True", "AllReplicasReady")
        ),
        timeout=60,
        details=lambda: json.dumps(status(kube, namespace), indent=1),
    )
    deployment_uid = deployment(kube, namespace)["metadata"]["uid"]

    # --- the burst ----------------------------------------------------------------------------------
    load_name = unique_name("load")
    for obj in manifests.load_objects(
        load_name,
        namespace,
        kind_images["standin"],
        manifests.service_url(NAME, namespace),
        NAME,  # the served model name: the service's name (no servedName set)
        workers=BURST_WORKERS,
        duration_s=BURST_S,
        max_tokens=128,
    ):
        kube.apply(obj, namespace)
    first = wait_for(
        "a Scaled event for the burst",
        lambda: events(kube, namespace, "Scaled"),
        timeout=120,
        interval=0.5,
        details=lambda: json.dumps(status(kube, namespace), indent=1),
    )[0]
    # --- the operator pod dies while the new replicas start -----------------------------------------
    old = release.operator_pods()[0]
    target = desired(kube, namespace)
    ready_then = len(ready_pods(kube, namespace))
    kube.delete("v1", "Pod", old["metadata"]["name"], release.namespace)
    deleted_at = time.time()
    assert transition(first).startswith("scaled 1→"), first["message"]
    assert target >= int(transition(first).split("→")[1]) > 1
    assert ready_then < target, f"the scale-out had finished ({ready_then}/{target}) before the restart"
    assert "TTFT" in first["message"] or "queue" in first["message"], first["message"]

    new = wait_for(
        "a new operator pod Ready",
        lambda: (p := operator_pod(release)) and p["metadata"]["uid"] != old["metadata"]["uid"] and p,
        timeout=120,
        details=lambda: release.kube.describe_namespace(release.namespace),
    )
    assert new["status"]["containerStatuses"][0]["restartCount"] == 0
    print(
        f"operator pod deleted at {ready_then}/{target} replicas Ready; the new one Ready after {time.time() - deleted_at:.0f}s"
    )
    restarted_at = time.time()

    def repeats() -> int:
        return [transition(e) for e in events(kube, namespace, "Scaled")].count(transition(first))

    stays(
        f"one '{transition(first)}', one Deployment, no second Created, after the restart",
        lambda: (
            repeats() == 1
            and deployment(kube, namespace)["metadata"]["uid"] == deployment_uid
            and len(events(kube, namespace, "Created")) == len(created)
        ),
        duration=4 * INTERVAL_S,
        interval=2,
        details=lambda: str([e["message"] for e in events(kube, namespace, "Scaled")]),
    )
    # The new operator decides again (a decision newer than its start), from where the old one left.
    wait_for(
        "a decision by the new operator",
        lambda: decision_time(kube, namespace) >= restarted_at - 1,
        timeout=60,
        details=lambda: json.dumps(status(kube, namespace).get("lastDecision"), indent=1),
    )
    assert desired(kube, namespace) >= target, "the new operator undid the scale-out"

    # --- the scaled-out fleet serves -----------------------------------------------------------------
    wait_for(
        "every desired replica Ready and the status saying so",
        lambda: (
            (n := desired(kube, namespace)) > 1
            and len(ready_pods(kube, namespace)) == n
            and status(kube, namespace).get("ready") == f"{n}/{n}"
        ),
        timeout=120,
        details=lambda: kube.describe_namespace(namespace),
    )
    served_by = f'count(sum by (instance) (increase({VllmMetric.REQUEST_SUCCESS.value}{{namespace="{namespace}"}}[{RATE_WINDOW}])) > 0)'
    wait_for(
        "requests served by more than one replica (kube-proxy spreads the Service's connections)",
        lambda: (prometheus.value(served_by) or 0) >= 2,
        timeout=60,
    )
    row = wait_for(
        "kubectl get tgis -o wide with every column filled",
        lambda: filled(get_tgis_row(kube, namespace)),
        timeout=60,
        details=lambda: kube.kubectl("get", "tgis", "-o", "wide", namespace=namespace).stdout,
    )
    assert row["MODE"] == "Auto"
    assert row["MAX-BATCH"] == "4"
    assert row["SLO-MS"] == "500"
    assert row["IMAGE"] == kind_images["standin"]
    assert re.fullmatch(r"\d+/\d+", row["READY"]), row

    # --- the load ends; its summary --------------------------------------------------------------------
    summary = load_summary(kube, load_name, namespace, timeout=BURST_S + 120)
    ok = summary["outcomes"].get("ok", 0)
    assert summary["requests"] >= 100, summary
    assert ok >= 0.99 * summary["requests"], f"requests lost through the Service: {summary}"

    # --- scale-in after the window -------------------------------------------------------------------
    peak = desired(kube, namespace)
    ended = time.monotonic()
    wait_for(
        "the fleet back at minReplicas (1)",
        lambda: desired(kube, namespace) == 1,
        timeout=300,
        interval=2,
        details=lambda: json.dumps(status(kube, namespace).get("lastDecision"), indent=1),
    )
    took = time.monotonic() - ended
    print(f"back at 1 replica {took:.0f}s after the load ended (peak {peak})")
    assert took >= STABILIZATION_S - INTERVAL_S, f"scaled in {took:.0f}s after the load: inside the window"
    downs = [e for e in events(kube, namespace, "Scaled") if transition(e).startswith(f"scaled {peak}→")]
    assert downs, [e["message"] for e in events(kube, namespace, "Scaled")]
    wait_for(
        "status 1/1 after the scale-in",
        lambda: status(kube, namespace).get("ready") == "1/1" and len(ready_pods(kube, namespace)) == 1,
        timeout=90,
        details=lambda: kube.describe_namespace(namespace),
    )

    # --- status, conditions and Events as documented -------------------------------------------------
    st = status(kube, namespace)
    conds = conditions(kube, namespace)
    assert set(conds) == set(DOCUMENTED_CONDITIONS), conds
    for type_, (_, reason) in conds.items():
        assert reason in DOCUMENTED_CONDITIONS[type_], f"{type_} has undocumented reason {reason}"
    assert conds["Ready"] == ("True", "AllReplicasReady")
    assert conds["MetricsAvailable"] == ("True", "MetricsFresh")
    assert conds["InvalidSpec"] == ("False", "SpecValid")
    assert st["observedGeneration"] == kube.get(*ISVC, NAME, namespace)["metadata"]["generation"]  # type: ignore[index]
    assert st["replicas"] == 1
    assert st["maxNumSeqs"] == 4
    assert st["image"] == kind_images["standin"]
    assert st["lastDecision"]["applied"] is True
    assert st["lastScaleTime"]
    for event in events(kube, namespace, "Scaled"):
        print(f"event {event['lastTimestamp']} {event['message']}")
        assert event["type"] == "Normal"
        assert re.match(r"scaled \d+→\d+: ", event["message"]), event["message"]

    # --- deleting the service removes what the operator made ---------------------------------------
    kube.delete(*ISVC, NAME, namespace)
    wait_for(
        "the InferenceService, its Deployment and pods to be gone",
        lambda: (
            kube.get(*ISVC, NAME, namespace) is None
            and not deployment(kube, namespace)
            and not kube.list("v1", "Pod", namespace, labels={SERVICE_LABEL: NAME})
        ),
        timeout=120,
        details=lambda: kube.describe_namespace(namespace),
    )


# -------------------------------------------------------------------------------------------------
# Uninstall


def test_helm_uninstall_leaves_no_orphaned_objects(kube: Kube, release: HelmRelease) -> None:
    kinds = kube.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    listable = ",".join(k for k in kinds if k not in ("events", "events.events.k8s.io", "componentstatuses"))

    def labelled() -> list[str]:
        out = kube.kubectl("get", listable, "--all-namespaces", "-l", release.selector, "-o", "name")
        return out.stdout.split()

    before = labelled()
    assert any(o.startswith("deployment.apps/") for o in before), before
    assert any(o.startswith("clusterrole.rbac.authorization.k8s.io/") for o in before), before
    release.uninstall()
    wait_for(
        "no object of the release left, the operator pod included",
        lambda: labelled() == [],
        timeout=90,
        details=lambda: str(labelled()),
    )
    assert release.helm("status", release.name, check=False).returncode != 0, "helm still knows the release"
    # The CRD stays, as documented (deleting it would delete every InferenceService).
    assert kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "inferenceservices.tailguard.dev")
