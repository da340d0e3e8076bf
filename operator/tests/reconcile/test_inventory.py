"""The inventory keeps its own copies: what a watch handler is handed may change under it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tailguard.reconcile.inventory import Inventory

KEY = ("team-a", "chat")


def _service() -> dict[str, Any]:
    return {
        "metadata": {"name": "chat", "namespace": "team-a", "annotations": {"a": "1"}},
        "spec": {"autoscaling": {"minReplicas": 1, "schedules": [{"name": "day", "minReplicas": 2}]}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "ready": "1/1", "goodput": 0.99},
    }


def test_a_stored_service_is_a_deep_copy() -> None:
    inventory = Inventory()
    body = _service()
    inventory.put_service(body)
    body["metadata"]["annotations"]["a"] = "2"
    body["spec"]["autoscaling"]["schedules"][0]["minReplicas"] = 9
    body["status"]["conditions"].append({"type": "Other", "status": "False"})
    view = inventory.view(KEY)
    assert view is not None
    assert view.body == _service()
    assert view.body is not body


def test_values_that_are_not_json_are_copied_too() -> None:
    inventory = Inventory()
    body = _service()
    stamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    body["metadata"]["creationTimestamp"] = stamp
    body["metadata"]["ownerReferences"] = ({"name": "x", "extra": ["a"]},)
    inventory.put_service(body)
    body["metadata"]["ownerReferences"][0]["extra"].append("b")
    view = inventory.view(KEY)
    assert view is not None
    assert view.body["metadata"]["creationTimestamp"] == stamp
    assert view.body["metadata"]["ownerReferences"] == ({"name": "x", "extra": ["a"]},)


def test_deployments_and_pods_are_copied_and_mark_their_service_changed() -> None:
    inventory = Inventory()
    inventory.put_service(_service())
    labels = {"tailguard.dev/inference-service": "chat"}
    deployment = {
        "metadata": {"name": "chat", "namespace": "team-a", "labels": labels},
        "spec": {"replicas": 2},
    }
    pod = {
        "metadata": {"name": "chat-0", "namespace": "team-a", "labels": labels},
        "status": {"phase": "Running"},
    }
    inventory.put_deployment(deployment)
    inventory.put_pod(pod)
    deployment["spec"]["replicas"] = 5
    pod["status"]["phase"] = "Failed"
    view = inventory.view(KEY)
    assert view is not None
    assert view.deployment is not None
    assert view.deployment["spec"]["replicas"] == 2
    assert view.pods["chat-0"]["status"]["phase"] == "Running"
    assert inventory.take_changed() == {KEY}
