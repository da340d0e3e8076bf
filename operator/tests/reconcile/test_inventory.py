"""The inventory keeps its own copies: what a watch handler is handed may change under it."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tailguard.reconcile.inventory import WRITTEN_SHADOW_S, Inventory

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


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _version(inventory: Inventory) -> str:
    view = inventory.view(KEY)
    assert view is not None
    return str(view.body["metadata"]["resourceVersion"])


def _at(version: int, **status: Any) -> dict[str, Any]:
    body = _service()
    body["metadata"]["resourceVersion"] = str(version)
    body["status"].update(status)
    return body


def test_a_written_object_shadows_the_older_versions_the_watch_still_delivers() -> None:
    clock = _Clock()
    inventory = Inventory(clock)
    inventory.put_service(_at(1))
    inventory.put_written(_at(3, ready="2/2"))  # the answer to the operator's own write
    inventory.put_service(_at(2))  # the watch, still delivering an earlier change
    assert _version(inventory) == "3"
    written = inventory.view(KEY)
    inventory.put_service(_at(3, ready="2/2"))  # the watch catches up: nothing to replace
    assert inventory.view(KEY) == written
    inventory.put_service(_at(4, ready="3/3"))  # and what comes after is taken again
    assert _version(inventory) == "4"


def test_a_written_version_the_watch_never_delivers_stops_shadowing_after_a_while() -> None:
    clock = _Clock()
    inventory = Inventory(clock)
    inventory.put_service(_at(1))
    inventory.put_written(_at(3))
    clock.now += WRITTEN_SHADOW_S - 1
    inventory.put_service(_at(5))  # a re-list skipped version 3: still shadowed for now
    assert _version(inventory) == "3"
    clock.now += 2
    inventory.put_service(_at(5))
    assert _version(inventory) == "5"


def test_an_answer_for_an_unknown_service_or_without_a_spec_is_not_kept() -> None:
    inventory = Inventory()
    inventory.put_written(_at(3))
    assert inventory.view(KEY) is None, "deleted meanwhile: not brought back"
    inventory.put_service(_at(1))
    bare = _at(4)
    del bare["spec"]
    inventory.put_written(bare)
    assert _version(inventory) == "1"
    inventory.put_written(_at(5))
    inventory.drop_service(KEY)
    inventory.put_service(_at(2))  # created again: nothing written shadows it
    assert _version(inventory) == "2"


def test_an_answer_the_watch_delivered_first_does_not_replace_what_came_after_it() -> None:
    """The write lands (version 2, the old spec), the user changes the spec (version 3), and the
    watch delivers both before the loop handles the write's answer: the answer is older than the
    copy held, and must neither replace it nor shadow what the watch delivers next."""
    clock = _Clock()
    inventory = Inventory(clock)
    inventory.put_service(_at(1))
    inventory.put_service(_at(2, ready="2/2"))
    changed = _at(3, ready="2/2")
    changed["spec"]["autoscaling"]["minReplicas"] = 3
    inventory.put_service(changed)
    inventory.put_written(_at(2, ready="2/2"))  # the answer, handled late
    assert _version(inventory) == "3"
    view = inventory.view(KEY)
    assert view is not None
    assert view.body["spec"]["autoscaling"]["minReplicas"] == 3
    inventory.put_service(_at(4, ready="3/3"))  # and nothing shadows what comes next
    assert _version(inventory) == "4"


def test_a_services_body_is_its_views_body_and_none_once_dropped() -> None:
    inventory = Inventory()
    inventory.put_service(_service())
    view = inventory.view(KEY)
    assert view is not None
    assert inventory.body(KEY) is view.body
    inventory.drop_service(KEY)
    assert inventory.body(KEY) is None
