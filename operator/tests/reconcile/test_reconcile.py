"""Reconcile against the in-memory cluster: create, idempotence, hand-edit revert, status, bad specs."""

from __future__ import annotations

from typing import Any

from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.service import ReconcileResult, reconcile, write_status
from tailguard.reconcile.timestamps import iso
from tg_testing import manifest

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z
SETTINGS = RenderSettings()
DEPLOYMENT = ("apps/v1", "Deployment", "team-a", "chat")
ISVC = ("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")


def _sync(body: dict[str, Any], cluster: FakeCluster, now: float = NOW) -> ReconcileResult:
    return reconcile(body, cluster, SETTINGS, now=now)


def _max_batch_arg(deployment: dict[str, Any]) -> str:
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index("--max-num-seqs") + 1]


def _pod(name: str, *, ready: bool = False, unschedulable: str = "", waiting: str = "") -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    phase = "Running"
    if unschedulable:
        phase = "Pending"
        conditions = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    if waiting:
        status["containerStatuses"] = [{"name": "vllm", "state": {"waiting": {"reason": waiting}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"tailguard.dev/inference-service": "chat"},
        },
        "status": status,
    }


def _conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_first_reconcile_creates_children_and_reports() -> None:
    cluster = FakeCluster()
    result = _sync(manifest(), cluster)
    assert sorted(k[1] for k in cluster.objects) == ["Deployment", "Service"]
    assert [e.reason for e in result.events] == ["Created", "Created"]
    assert result.status_patch["labelSelector"] == "tailguard.dev/inference-service=chat"
    assert result.status_patch["desiredReplicas"] == 1
    assert _conditions(result.status_patch)["InvalidSpec"] == ("False", "SpecValid")


def test_second_reconcile_writes_nothing() -> None:
    cluster = FakeCluster()
    body = manifest()
    first = _sync(body, cluster)
    body["status"] = first.status_patch
    applied = len(cluster.applied)
    second = _sync(body, cluster, NOW + 60)
    assert len(cluster.applied) == applied, "no apply when nothing drifted"
    assert second.status_patch == {}
    assert second.events == []


def test_pod_monitor_only_where_the_crd_exists() -> None:
    cluster = FakeCluster(
        kinds={("apps/v1", "Deployment"), ("v1", "Service"), ("monitoring.coreos.com/v1", "PodMonitor")}
    )
    _sync(manifest(), cluster)
    assert "PodMonitor" in {k[1] for k in cluster.objects}


def test_hand_edit_of_the_template_is_reverted() -> None:
    cluster = FakeCluster()
    _sync(manifest(), cluster)
    args = cluster.objects[DEPLOYMENT]["spec"]["template"]["spec"]["containers"][0]["args"]
    args[args.index("--max-num-seqs") + 1] = "999"
    assert _max_batch_arg(cluster.objects[DEPLOYMENT]) == "999"
    result = _sync(manifest(), cluster)
    assert [e.reason for e in result.events] == ["Updated"]
    assert _max_batch_arg(cluster.objects[DEPLOYMENT]) == "256"


def test_scale_in_mode_manual_follows_spec_replicas() -> None:
    cluster = FakeCluster()
    _sync(manifest(autoscaling={"mode": "Manual"}), cluster)
    assert cluster.objects[DEPLOYMENT]["spec"]["replicas"] == 1
    _sync(manifest(autoscaling={"mode": "Manual"}, replicas=3), cluster)
    assert cluster.objects[DEPLOYMENT]["spec"]["replicas"] == 3


def test_pending_pods_are_reported_unschedulable_with_an_event() -> None:
    cluster = FakeCluster()
    body = manifest(autoscaling={"mode": "Manual"}, replicas=2)
    _sync(body, cluster)
    cluster.add(_pod("chat-a", ready=True))
    cluster.add(_pod("chat-b", unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
    result = _sync(body, cluster)
    assert result.status_patch["pendingReplicas"] == 1
    assert _conditions(result.status_patch)["Ready"] == ("False", "Unschedulable")
    assert any(e.type == "Warning" and "Insufficient nvidia.com/gpu" in e.message for e in result.events)


def test_missing_secret_is_a_condition_not_a_crash() -> None:
    cluster = FakeCluster()
    _sync(manifest(), cluster)
    cluster.add(_pod("chat-a", waiting="CreateContainerConfigError"))
    result = _sync(manifest(), cluster)
    ready = next(c for c in result.status_patch["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ReplicasFailing"
    assert "Secret" in ready["message"]


def test_invalid_spec_applies_nothing_and_says_why() -> None:
    cluster = FakeCluster()
    result = _sync(manifest(autoscaling={"minReplicas": 3, "maxReplicas": 1}), cluster)
    assert cluster.objects == {}
    assert _conditions(result.status_patch)["InvalidSpec"] == ("True", "ValidationFailed")
    assert result.events[0].type == "Warning"
    assert "minReplicas" in result.events[0].message


def test_status_is_written_only_when_changed() -> None:
    cluster = FakeCluster()
    body = manifest()
    write_status(cluster, body, _sync(body, cluster))
    assert len(cluster.status_patches) == 1
    assert cluster.objects[ISVC]["status"]["ready"] == "0/1"
    body["status"] = cluster.objects[ISVC]["status"]
    body["metadata"]["resourceVersion"] = cluster.objects[ISVC]["metadata"]["resourceVersion"]
    unchanged = _sync(body, cluster, NOW + 30)
    write_status(cluster, body, unchanged)
    assert unchanged.status_patch == {}
    assert len(cluster.status_patches) == 1, "nothing changed: nothing written"


def test_transition_time_kept_while_status_unchanged() -> None:
    cluster = FakeCluster()
    body = manifest()
    first = _sync(body, cluster)
    body["status"] = first.status_patch
    cluster.add(_pod("chat-a", ready=False))
    second = _sync(body, cluster, NOW + 300)
    assert "conditions" in second.status_patch, "a starting replica changes the Ready message"
    ready = next(c for c in second.status_patch["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["message"]) == ("False", "0/1 replicas ready, 1 starting")
    assert {c["lastTransitionTime"] for c in second.status_patch["conditions"]} == {iso(NOW)}


def test_resync_leaves_replicas_owned_by_another_writer_alone() -> None:
    cluster = FakeCluster()
    _sync(manifest(), cluster)
    key = ("apps/v1", "Deployment", "team-a", "chat")
    cluster.objects[key]["spec"]["replicas"] = 5
    cluster.objects[key]["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "subresource": "scale",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        }
    ]
    result = _sync(manifest(), cluster)
    assert cluster.objects[key]["spec"]["replicas"] == 5
    assert result.events == []


def test_fields_the_api_server_drops_are_not_drift() -> None:
    from tailguard.reconcile.diff import is_subset

    assert is_subset({"env": [], "nodeSelector": {}, "a": 1}, {"a": 1})
    assert not is_subset({"env": [{"name": "X"}]}, {})
    assert not is_subset({"a": 1}, {"a": 2})
