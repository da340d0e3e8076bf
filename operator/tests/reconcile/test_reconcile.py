"""Reconcile against the in-memory cluster: create, idempotence, hand-edit revert, status, bad specs."""

from __future__ import annotations

from typing import Any

from tailguard.k8s.cluster import FakeCluster
from tailguard.reconcile.service import reconcile, write_status
from tg_testing import manifest

NOW = "2026-01-01T00:00:00Z"


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
    result = reconcile(manifest(), cluster, now=NOW)
    assert sorted(k[1] for k in cluster.objects) == ["Deployment", "Service"]
    assert [e.reason for e in result.events] == ["Created", "Created"]
    assert result.status_patch["labelSelector"] == "tailguard.dev/inference-service=chat"
    assert result.status_patch["desiredReplicas"] == 1
    assert _conditions(result.status_patch)["InvalidSpec"] == ("False", "SpecValid")


def test_second_reconcile_writes_nothing() -> None:
    cluster = FakeCluster()
    body = manifest()
    first = reconcile(body, cluster, now=NOW)
    body["status"] = first.status_patch
    applied = len(cluster.applied)
    second = reconcile(body, cluster, now="2026-01-01T00:01:00Z")
    assert len(cluster.applied) == applied, "no apply when nothing drifted"
    assert second.status_patch == {}
    assert second.events == []


def test_pod_monitor_only_where_the_crd_exists() -> None:
    cluster = FakeCluster(
        kinds={("apps/v1", "Deployment"), ("v1", "Service"), ("monitoring.coreos.com/v1", "PodMonitor")}
    )
    reconcile(manifest(), cluster, now=NOW)
    assert "PodMonitor" in {k[1] for k in cluster.objects}


def test_hand_edit_of_the_template_is_reverted() -> None:
    cluster = FakeCluster()
    reconcile(manifest(), cluster, now=NOW)
    key = ("apps/v1", "Deployment", "team-a", "chat")
    cluster.objects[key]["spec"]["template"]["spec"]["containers"][0]["args"][6] = "999"
    result = reconcile(manifest(), cluster, now=NOW)
    assert [e.reason for e in result.events] == ["Updated"]
    assert cluster.objects[key]["spec"]["template"]["spec"]["containers"][0]["args"][6] == "256"


def test_scale_in_mode_off_follows_spec_replicas() -> None:
    cluster = FakeCluster()
    reconcile(manifest(autoscaling={"mode": "Off"}), cluster, now=NOW)
    reconcile(manifest(autoscaling={"mode": "Off"}, replicas=3), cluster, now=NOW)
    assert cluster.objects[("apps/v1", "Deployment", "team-a", "chat")]["spec"]["replicas"] == 3


def test_pending_pods_are_reported_unschedulable_with_an_event() -> None:
    cluster = FakeCluster()
    body = manifest(autoscaling={"mode": "Off"}, replicas=2)
    reconcile(body, cluster, now=NOW)
    cluster.add(_pod("chat-a", ready=True))
    cluster.add(_pod("chat-b", unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu."))
    result = reconcile(body, cluster, now=NOW)
    assert result.status_patch["pendingReplicas"] == 1
    assert _conditions(result.status_patch)["Ready"] == ("False", "Unschedulable")
    assert any(e.type == "Warning" and "Insufficient nvidia.com/gpu" in e.message for e in result.events)


def test_missing_secret_is_a_condition_not_a_crash() -> None:
    cluster = FakeCluster()
    reconcile(manifest(), cluster, now=NOW)
    cluster.add(_pod("chat-a", waiting="CreateContainerConfigError"))
    result = reconcile(manifest(), cluster, now=NOW)
    ready = next(c for c in result.status_patch["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "ReplicasFailing"
    assert "Secret" in ready["message"]


def test_invalid_spec_applies_nothing_and_says_why() -> None:
    cluster = FakeCluster()
    result = reconcile(manifest(autoscaling={"minReplicas": 3, "maxReplicas": 1}), cluster, now=NOW)
    assert cluster.objects == {}
    assert _conditions(result.status_patch)["InvalidSpec"] == ("True", "ValidationFailed")
    assert result.events[0].type == "Warning"
    assert "minReplicas" in result.events[0].message


def test_status_is_written_only_when_changed() -> None:
    cluster = FakeCluster()
    body = manifest()
    result = reconcile(body, cluster, now=NOW)
    write_status(cluster, body, result)
    assert (
        cluster.objects[("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")]["status"]["ready"]
        == "0/1"
    )


def test_transition_time_kept_while_status_unchanged() -> None:
    cluster = FakeCluster()
    body = manifest()
    first = reconcile(body, cluster, now=NOW)
    body["status"] = first.status_patch
    cluster.add(_pod("chat-a", ready=False))
    second = reconcile(body, cluster, now="2026-01-01T00:05:00Z")
    conditions = second.status_patch.get("conditions", first.status_patch["conditions"])
    assert all(c["lastTransitionTime"] == NOW for c in conditions)


def test_resync_leaves_replicas_owned_by_another_writer_alone() -> None:
    cluster = FakeCluster()
    reconcile(manifest(), cluster, now=NOW)
    key = ("apps/v1", "Deployment", "team-a", "chat")
    cluster.objects[key]["spec"]["replicas"] = 5
    cluster.objects[key]["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "subresource": "scale",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        }
    ]
    result = reconcile(manifest(), cluster, now=NOW)
    assert cluster.objects[key]["spec"]["replicas"] == 5
    assert result.events == []


def test_fields_the_api_server_drops_are_not_drift() -> None:
    from tailguard.reconcile.diff import is_subset

    assert is_subset({"env": [], "nodeSelector": {}, "a": 1}, {"a": 1})
    assert not is_subset({"env": [{"name": "X"}]}, {})
    assert not is_subset({"a": 1}, {"a": 2})
