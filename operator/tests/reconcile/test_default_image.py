"""The operator's default vLLM image: used where a spec names none, never flapping, rolled out on change."""

from __future__ import annotations

from typing import Any

from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.render import RenderSettings
from tailguard.metrics.prometheus import FakePrometheus
from tailguard.metrics.promql import QueryScope
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.loop import ControlLoop
from tailguard.reconcile.service import reconcile
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry
from tg_testing import manifest, run_cycle

from .test_loop import NOW, answers, load

MIRROR = "registry.internal/mirror/vllm-openai:v0.33.0"
NEWER = "registry.internal/mirror/vllm-openai:v0.34.0"
PINNED = "vllm/vllm-openai:v0.30.1"
DEPLOYMENT = ("apps/v1", "Deployment", "team-a", "chat")
ISO = NOW - 3600.0


def _image(cluster: FakeCluster) -> str:
    image: str = cluster.objects[DEPLOYMENT]["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_a_spec_without_an_image_runs_the_operator_default_and_reports_it() -> None:
    cluster = FakeCluster()
    result = reconcile(manifest(), cluster, RenderSettings(default_image=MIRROR), now=ISO)
    assert _image(cluster) == MIRROR
    assert result.status_patch["image"] == MIRROR


def test_an_unchanged_default_writes_nothing() -> None:
    cluster = FakeCluster()
    body = manifest()
    body["status"] = reconcile(body, cluster, RenderSettings(default_image=MIRROR), now=ISO).status_patch
    applied = len(cluster.applied)
    again = reconcile(body, cluster, RenderSettings(default_image=MIRROR), now=ISO)
    assert len(cluster.applied) == applied
    assert again.status_patch == {}
    assert again.events == []


def test_a_new_default_rolls_the_services_that_name_no_image() -> None:
    cluster = FakeCluster()
    body = manifest()
    body["status"] = reconcile(body, cluster, RenderSettings(default_image=MIRROR), now=ISO).status_patch
    result = reconcile(body, cluster, RenderSettings(default_image=NEWER), now=ISO)
    assert _image(cluster) == NEWER
    assert [e.reason for e in result.events] == ["Updated"]
    assert result.status_patch["image"] == NEWER


def test_a_pinned_image_ignores_the_default() -> None:
    cluster = FakeCluster()
    body = manifest(engine={"image": PINNED})
    body["status"] = reconcile(body, cluster, RenderSettings(default_image=MIRROR), now=ISO).status_patch
    assert _image(cluster) == PINNED
    applied = len(cluster.applied)
    result = reconcile(body, cluster, RenderSettings(default_image=NEWER), now=ISO)
    assert len(cluster.applied) == applied
    assert result.events == []
    assert _image(cluster) == PINNED


class _Operator:
    """The spec handler's reconcile and the control loop, both given the same default image."""

    def __init__(self, prometheus: FakePrometheus, **spec: Any) -> None:
        self.cluster = FakeCluster()
        self.inventory = Inventory()
        self.events: list[EventNote] = []
        self.loop = ControlLoop(
            inventory=self.inventory,
            cluster=self.cluster,
            prometheus=prometheus,
            scope=QueryScope(),
            telemetry=Telemetry(),
            post_event=lambda ns, name, note: self.events.append(note),
            render=RenderSettings(default_image=MIRROR),
        )
        body = manifest(**spec)
        body["status"] = reconcile(
            body, self.cluster, RenderSettings(default_image=MIRROR), now=ISO
        ).status_patch
        deployment = self.cluster.objects[DEPLOYMENT]
        deployment["metadata"]["generation"] = 1
        deployment["status"] = {
            "replicas": 1,
            "readyReplicas": 1,
            "updatedReplicas": 1,
            "observedGeneration": 1,
        }
        self.inventory.put_service(body)
        self.inventory.put_deployment(deployment)
        self.inventory.put_pod(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": "chat-0",
                    "namespace": "team-a",
                    "labels": {"tailguard.dev/inference-service": "chat"},
                },
                "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            }
        )

    def run(self, now: float) -> None:
        run_cycle(self.loop, now)


def test_the_periodic_resync_does_not_reapply_the_default_image() -> None:
    operator = _Operator(FakePrometheus(), autoscaling={"mode": "Manual"})
    applied = len(operator.cluster.applied)
    for tick in range(4):
        operator.run(NOW + 31 * tick)
    assert len(operator.cluster.applied) == applied, "a service without an image must not flap"
    assert [note.reason for note in operator.events] == []
    assert _image(operator.cluster) == MIRROR


def test_a_scale_up_keeps_the_default_image() -> None:
    breach = load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1)
    operator = _Operator(FakePrometheus(answers(breach)), autoscaling={"maxReplicas": 8})
    operator.run(NOW)
    deployment = operator.cluster.objects[DEPLOYMENT]
    assert deployment["spec"]["replicas"] > 1
    assert _image(operator.cluster) == MIRROR
