"""kopf handlers: apply the spec on change, and keep the inventory the control loop reads up to date."""

from __future__ import annotations

from typing import Any

import kopf

from tailguard.api import DEFAULT_VLLM_IMAGE, GROUP, PLURAL, VERSION
from tailguard.k8s.cluster import ClusterAPI, object_reference
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.loop import iso
from tailguard.reconcile.service import reconcile, write_status


class Wiring:
    """What the handlers need; set once by :func:`tailguard.handlers.main.run_operator` or a test."""

    cluster: ClusterAPI | None = None
    inventory: Inventory = Inventory()
    clock: Any = None
    default_image: str = DEFAULT_VLLM_IMAGE


def configure(cluster: ClusterAPI, inventory: Inventory, clock: Any, *, default_image: str) -> None:
    """Set the API adapter, the shared inventory, the clock and the default vLLM image before kopf starts.

    ``default_image`` must be the control loop's too, or the two would roll replicas back and forth.
    """
    Wiring.cluster, Wiring.inventory, Wiring.clock = cluster, inventory, clock
    Wiring.default_image = default_image


def _sync(body: kopf.Body) -> None:
    cluster = Wiring.cluster
    assert cluster is not None, "configure() must run before the handlers"
    result = reconcile(body, cluster, now=iso(Wiring.clock()), default_image=Wiring.default_image)
    # Unconditional: kopf's own annotation patches change the resourceVersion under every handler,
    # so a conditional write here would mostly retry. If it overwrites a condition the control
    # loop just set, the loop sees the difference at its next cycle and writes it again.
    write_status(cluster, body, result, conditional=False)
    for note in result.events:
        cluster.post_event(object_reference(dict(body)), note.type, note.reason, note.message)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_spec(body: kopf.Body, **_: Any) -> None:
    """Render and apply the children whenever the spec is new or changed."""
    _sync(body)


@kopf.on.event(GROUP, VERSION, PLURAL)
def track_service(event: kopf.RawEvent, **_: Any) -> None:
    """Keep the inventory's copy of each InferenceService current."""
    body: dict[str, Any] = dict(event["object"])
    meta: dict[str, Any] = body.get("metadata") or {}
    if event["type"] == "DELETED":
        Wiring.inventory.drop_service((str(meta.get("namespace", "")), str(meta.get("name", ""))))
    else:
        Wiring.inventory.put_service(body)


@kopf.on.event("apps", "v1", "deployments", labels={MANAGED_BY_LABEL: MANAGED_BY})
def track_deployment(event: kopf.RawEvent, **_: Any) -> None:
    """Keep the inventory's copy of each managed Deployment current."""
    body: dict[str, Any] = dict(event["object"])
    if event["type"] == "DELETED":
        Wiring.inventory.drop_deployment(body)
    else:
        Wiring.inventory.put_deployment(body)


@kopf.on.event("", "v1", "pods", labels={MANAGED_BY_LABEL: MANAGED_BY})
def track_pod(event: kopf.RawEvent, **_: Any) -> None:
    """Keep the inventory's copy of each vLLM pod current."""
    body: dict[str, Any] = dict(event["object"])
    if event["type"] == "DELETED":
        Wiring.inventory.drop_pod(body)
    else:
        Wiring.inventory.put_pod(body)
