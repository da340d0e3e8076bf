"""The spec handlers: bound to their collaborators explicitly, registered on a registry of their own."""

from __future__ import annotations

import inspect

import kopf

from tailguard.api import GROUP, PLURAL, VERSION
from tailguard.handlers.lifecycle import SlimDiffBaseStorage, SpecHandlers
from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.inventory import Inventory
from tg_testing import manifest

MIRROR = "registry.internal/mirror/vllm-openai:v0.33.0"


def _handlers(cluster: FakeCluster, inventory: Inventory) -> SpecHandlers:
    return SpecHandlers(
        cluster=cluster, inventory=inventory, clock=lambda: 1_767_225_600.0, render=RenderSettings(MIRROR)
    )


def test_sync_renders_with_the_given_settings_and_writes_status() -> None:
    cluster = FakeCluster()
    _handlers(cluster, Inventory()).sync(kopf.Body(manifest()))
    deployment = cluster.objects[("apps/v1", "Deployment", "team-a", "chat")]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == MIRROR
    status = cluster.objects[("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")]["status"]
    assert status["image"] == MIRROR
    assert [e[2] for e in cluster.events] == ["Created", "Created"]


def test_watch_events_feed_the_inventory() -> None:
    inventory = Inventory()
    handlers = _handlers(FakeCluster(), inventory)
    handlers.track_service(kopf.RawEvent(type="ADDED", object=manifest()))  # type: ignore[typeddict-item]
    assert inventory.keys() == [("team-a", "chat")]
    handlers.track_service(kopf.RawEvent(type="DELETED", object=manifest()))  # type: ignore[typeddict-item]
    assert inventory.keys() == []


def test_each_operator_gets_its_own_registry_with_stable_handler_ids() -> None:
    first = _handlers(FakeCluster(), Inventory()).registry()
    second = _handlers(FakeCluster(), Inventory()).registry()
    assert first is not second
    ids = {str(h.id) for h in first._changing.get_all_handlers()}  # kopf's ids key handler progress
    assert ids == {"on_spec", "on_spec/spec"}  # kopf suffixes the field of the update handler
    watch_ids = {str(h.id) for h in first._watching.get_all_handlers()}
    assert watch_ids == {"track_service", "track_deployment", "track_pod"}


def test_watch_handlers_run_on_the_event_loop() -> None:
    """kopf hands a sync handler to a worker thread for every event; the watch handlers only copy
    an object into the inventory, so they are coroutines and run in place."""
    registry = _handlers(FakeCluster(), Inventory()).registry()
    watching = registry._watching.get_all_handlers()
    assert [str(h.id) for h in watching if not inspect.iscoroutinefunction(h.fn)] == []
    assert [
        str(h.id) for h in registry._changing.get_all_handlers() if inspect.iscoroutinefunction(h.fn)
    ] == [], "the spec handler makes blocking API calls: it stays in kopf's worker threads"


async def test_the_registered_watch_handlers_feed_the_inventory() -> None:
    inventory = Inventory()
    registry = _handlers(FakeCluster(), inventory).registry()
    (track,) = [h for h in registry._watching.get_all_handlers() if str(h.id) == "track_service"]
    await track.fn(event=kopf.RawEvent(type="ADDED", object=manifest()))  # type: ignore[typeddict-item]
    assert inventory.keys() == [("team-a", "chat")]


def _watched_body() -> dict[str, object]:
    """An InferenceService as a watch delivers it after a few writes: status, managed fields, kopf's
    and tailguard's own annotations beside a user's."""
    body = manifest()
    meta = body["metadata"]
    meta.update(
        uid="0d6c",
        resourceVersion="4711",
        generation=3,
        creationTimestamp="2026-11-27T00:00:00Z",
        labels={"team": "a"},
        annotations={
            "example.com/owner": "search",
            "tailguard.dev/last-handled-configuration": '{"spec": {}}',
            "tailguard.dev/policy-state": '{"version": 1}',
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        managedFields=[{"manager": "tailguard", "operation": "Update", "fieldsV1": {"f:status": {}}}],
    )
    body["status"] = {"desiredReplicas": 2, "conditions": [{"type": "Ready", "status": "True"}]}
    return body


class _Uncopyable:
    """A status entry that fails the test if anything deep-copies it."""

    def __deepcopy__(self, memo: object) -> _Uncopyable:
        raise AssertionError("the status was deep-copied to build the diff base")


def test_the_slim_diff_base_builds_the_essence_kopf_builds() -> None:
    kwargs = {"prefix": "tailguard.dev", "key": "last-handled-configuration"}
    body = kopf.Body(_watched_body())  # type: ignore[arg-type]
    slim = SlimDiffBaseStorage(**kwargs).build(body=body)
    assert slim == kopf.AnnotationsDiffBaseStorage(**kwargs).build(body=body)
    assert slim["spec"] == _watched_body()["spec"]
    assert "status" not in slim
    assert "managedFields" not in slim.get("metadata", {})
    # The registry's handlers ask for their fields (the spec handler: "spec"); the essence is kopf's,
    # and nothing outside it is copied on the way.
    fields = (
        _handlers(FakeCluster(), Inventory())
        .registry()
        ._changing.get_extra_fields(resource=kopf.Resource(GROUP, VERSION, PLURAL))
    )
    assert fields, "the spec handler watches a field: the slim path must take it"
    expected = kopf.AnnotationsDiffBaseStorage(**kwargs).build(body=body, extra_fields=fields)
    assert SlimDiffBaseStorage(**kwargs).build(body=body, extra_fields=fields) == expected
    uncopyable = _watched_body()
    uncopyable["status"] = {"conditions": [_Uncopyable()]}
    slim_of_uncopyable = SlimDiffBaseStorage(**kwargs).build(
        body=kopf.Body(uncopyable),
        extra_fields=fields,  # type: ignore[arg-type]
    )
    assert slim_of_uncopyable == expected
    # A field outside the spec asked for by a handler is kept, as kopf keeps it.
    with_status = SlimDiffBaseStorage(**kwargs).build(body=body, extra_fields=["status.desiredReplicas"])
    assert with_status.get("status") == {"desiredReplicas": 2}
