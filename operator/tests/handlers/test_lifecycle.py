"""The spec handler and the kopf handlers: bound to their collaborators explicitly, registered on a
registry of their own."""

from __future__ import annotations

import inspect

import kopf

from tailguard.handlers.lifecycle import KOPF_FINALIZER, SpecHandlers
from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL, SERVICE_LABEL
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.inventory import Inventory
from tg_testing import manifest

MIRROR = "registry.internal/mirror/vllm-openai:v0.33.0"
ISVC = ("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")


def _handlers(cluster: FakeCluster, inventory: Inventory) -> SpecHandlers:
    return SpecHandlers(
        cluster=cluster, inventory=inventory, clock=lambda: 1_767_225_600.0, render=RenderSettings(MIRROR)
    )


def test_sync_renders_with_the_given_settings_and_writes_status() -> None:
    cluster = FakeCluster()
    _handlers(cluster, Inventory()).sync(manifest())
    deployment = cluster.objects[("apps/v1", "Deployment", "team-a", "chat")]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == MIRROR
    status = cluster.objects[ISVC]["status"]
    assert status["image"] == MIRROR
    assert [e[2] for e in cluster.events] == ["Created", "Created"]


def test_sync_takes_off_the_finalizer_older_versions_left_and_keeps_others() -> None:
    cluster = FakeCluster()
    body = manifest()
    body["metadata"]["finalizers"] = ["example.com/backup", KOPF_FINALIZER]
    cluster.add(body)
    _handlers(cluster, Inventory()).sync(cluster.objects[ISVC])
    assert cluster.objects[ISVC]["metadata"]["finalizers"] == ["example.com/backup"]

    body["metadata"]["finalizers"] = [KOPF_FINALIZER]
    cluster.add(body)
    _handlers(cluster, Inventory()).sync(cluster.objects[ISVC])
    assert "finalizers" not in cluster.objects[ISVC]["metadata"]


def test_sync_leaves_other_finalizers_alone() -> None:
    cluster = FakeCluster()
    body = manifest()
    body["metadata"]["finalizers"] = ["example.com/backup"]
    cluster.add(body)
    _handlers(cluster, Inventory()).sync(cluster.objects[ISVC])
    assert cluster.objects[ISVC]["metadata"]["finalizers"] == ["example.com/backup"]


def test_a_failure_is_reported_as_a_warning_event_on_the_service() -> None:
    cluster = FakeCluster()
    _handlers(cluster, Inventory()).report_failure(manifest(), "applying the spec failed (boom)")
    assert cluster.events == [("chat", "Warning", "SyncFailed", "applying the spec failed (boom)")]


def _child(kind: str, name: str) -> dict[str, object]:
    labels = {MANAGED_BY_LABEL: MANAGED_BY, SERVICE_LABEL: "chat"}
    return {"kind": kind, "metadata": {"namespace": "team-a", "name": name, "labels": labels}}


def test_watch_events_of_children_feed_the_inventory() -> None:
    inventory = Inventory()
    inventory.put_service(manifest())
    handlers = _handlers(FakeCluster(), inventory)
    handlers.track_deployment(kopf.RawEvent(type="ADDED", object=_child("Deployment", "chat")))  # type: ignore[typeddict-item]
    handlers.track_pod(kopf.RawEvent(type="ADDED", object=_child("Pod", "chat-0")))  # type: ignore[typeddict-item]
    view = inventory.view(("team-a", "chat"))
    assert view is not None
    assert view.deployment is not None
    assert list(view.pods) == ["chat-0"]
    handlers.track_pod(kopf.RawEvent(type="DELETED", object=_child("Pod", "chat-0")))  # type: ignore[typeddict-item]
    handlers.track_deployment(kopf.RawEvent(type="DELETED", object=_child("Deployment", "chat")))  # type: ignore[typeddict-item]
    view = inventory.view(("team-a", "chat"))
    assert view is not None
    assert view.deployment is None
    assert view.pods == {}


def test_each_operator_gets_its_own_registry_with_stable_handler_ids() -> None:
    first = _handlers(FakeCluster(), Inventory()).registry()
    second = _handlers(FakeCluster(), Inventory()).registry()
    assert first is not second
    assert list(first._changing.get_all_handlers()) == [], "InferenceServices have the operator's own watch"
    watch_ids = {str(h.id) for h in first._watching.get_all_handlers()}
    assert watch_ids == {"track_deployment", "track_pod"}


def test_watch_handlers_run_on_the_event_loop() -> None:
    """kopf hands a sync handler to a worker thread for every event; the watch handlers only copy
    an object into the inventory, so they are coroutines and run in place."""
    registry = _handlers(FakeCluster(), Inventory()).registry()
    watching = registry._watching.get_all_handlers()
    assert [str(h.id) for h in watching if not inspect.iscoroutinefunction(h.fn)] == []


async def test_the_registered_watch_handlers_feed_the_inventory() -> None:
    inventory = Inventory()
    inventory.put_service(manifest())
    registry = _handlers(FakeCluster(), inventory).registry()
    (track,) = [h for h in registry._watching.get_all_handlers() if str(h.id) == "track_deployment"]
    await track.fn(event=kopf.RawEvent(type="ADDED", object=_child("Deployment", "chat")))  # type: ignore[typeddict-item]
    view = inventory.view(("team-a", "chat"))
    assert view is not None
    assert view.deployment is not None
