"""The operator's own API paths against a real API server, authenticated as the operator's
ServiceAccount: merge patches over the writers' kept-alive connections, and the list-and-watch
of InferenceServices."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes import config

from lib.kube import Kube
from lib.operator import Identity
from tailguard.k8s import cluster as cluster_module
from tailguard.k8s.cluster import ApiError, ConflictError, KubernetesCluster, Manifest
from tailguard.k8s.watch import ApiEndpoint, ListWatch, resource_path

pytestmark = pytest.mark.integration

ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


def _service(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}},
    }


def _cluster(identity: Identity) -> KubernetesCluster:
    client = config.new_client_from_config(config_file=str(identity.kubeconfig))  # type: ignore[no-untyped-call]
    return KubernetesCluster("tailguard-test", api_client=client)


@pytest.mark.parametrize("path", ["kept-alive connections", "the client's pool (behind a proxy)"])
def test_merge_patches_answer_the_object_and_refuse_a_stale_version(
    kube: Kube,
    operator_identity: Identity,
    namespace: str,
    crd: dict[str, Any],
    path: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if path.startswith("the client's pool"):
        monkeypatch.setattr(cluster_module, "_kept_alive", lambda _configuration: None)
    kube.apply(_service("chat", namespace))
    cluster = _cluster(operator_identity)
    written = cluster.patch_status(*ISVC, namespace, "chat", {"desiredReplicas": 3})
    assert written is not None
    assert written["status"]["desiredReplicas"] == 3
    version = written["metadata"]["resourceVersion"]
    again = cluster.patch_status(*ISVC, namespace, "chat", {"desiredReplicas": 4}, resource_version=version)
    assert again is not None
    assert again["status"]["desiredReplicas"] == 4
    with pytest.raises(ConflictError):
        cluster.patch_status(*ISVC, namespace, "chat", {"desiredReplicas": 5}, resource_version=version)
    live = kube.get(*ISVC, "chat", namespace)
    assert live is not None
    assert live["status"]["desiredReplicas"] == 4

    marked = cluster.patch_metadata(*ISVC, namespace, "chat", {"annotations": {"example.com/a": "1"}})
    assert marked is not None
    assert marked["metadata"]["annotations"]["example.com/a"] == "1"
    with pytest.raises(ApiError) as gone:
        cluster.patch_status(*ISVC, namespace, "absent", {"desiredReplicas": 1})
    assert gone.value.status == 404
    assert "not found" in gone.value.body


class _Sink:
    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.changes: list[tuple[str, str, Any]] = []
        self.news = asyncio.Event()

    def listed(self, objects: list[Manifest]) -> None:
        assert all(o["kind"] == "InferenceService" for o in objects)
        self.lists.append(sorted(o["metadata"]["name"] for o in objects))
        self.news.set()

    def changed(self, event_type: str, obj: Manifest) -> None:
        self.changes.append(
            (event_type, obj["metadata"]["name"], (obj.get("status") or {}).get("desiredReplicas"))
        )
        self.news.set()


async def _until(sink: _Sink, done: Any, timeout: float = 20.0) -> None:
    async def wait() -> None:
        while not done():
            sink.news.clear()
            await sink.news.wait()

    await asyncio.wait_for(wait(), timeout)


async def test_the_watch_lists_then_delivers_changes_as_the_operator(
    kube: Kube, operator_identity: Identity, namespace: str, crd: dict[str, Any]
) -> None:
    kube.apply(_service("first", namespace))
    cluster = _cluster(operator_identity)
    endpoint = ApiEndpoint.from_client_configuration(cluster._api_client.configuration)
    sink = _Sink()
    watch = ListWatch(
        endpoint, resource_path("tailguard.dev", "v1alpha1", "inferenceservices", namespace), sink,
        api_version=ISVC[0], kind=ISVC[1],
    )  # fmt: skip
    task = asyncio.create_task(watch.run())
    try:
        await _until(sink, lambda: sink.lists)
        assert sink.lists == [["first"]]
        kube.apply(_service("second", namespace))
        await asyncio.to_thread(cluster.patch_status, *ISVC, namespace, "first", {"desiredReplicas": 2})
        kube.delete(*ISVC, "second", namespace)
        await _until(sink, lambda: ("DELETED", "second", None) in sink.changes)
        assert ("ADDED", "second", None) in sink.changes
        assert ("MODIFIED", "first", 2) in sink.changes
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await endpoint.client.aclose()
