"""kopf handlers: apply the spec on change, and keep the inventory the control loop reads up to date."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

import kopf
import orjson

from tailguard.api import GROUP, PLURAL, VERSION
from tailguard.k8s.cluster import ClusterAPI, object_reference
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.service import reconcile, write_status
from tailguard.reconcile.timestamps import Clock


class SlimDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base in an annotation, as kopf builds it, without copying what it then drops.

    kopf builds the essence of every object a watch delivers (to find what changed) by deep-copying
    the whole object first and then dropping its status and most of its metadata. Every status
    write of the control loop comes back through the watch, so that copy of the status and of the
    managed fields was made about once a minute per service for nothing. Here kopf builds the
    metadata's part from the metadata it keeps, and the spec is copied through JSON (the object came
    as JSON; ``copy.deepcopy`` of it cost as much again). The essence is the same. The spec
    handler's own ``field="spec"`` asks for nothing the essence lacks; a field outside the spec
    (a status field, say) takes kopf's own way.
    """

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        fields = list(extra_fields or ())
        if any(_field_path(field)[:1] != ("spec",) for field in fields):
            return super().build(body=body, extra_fields=fields)  # a field outside spec: keep all
        meta = body.get("metadata") or {}
        kept = {"metadata": {key: meta[key] for key in _ESSENTIAL_METADATA if key in meta}}
        essence = super().build(body=kopf.Body(cast(kopf.RawBody, kept)), extra_fields=None)
        rest = {key: value for key, value in body.items() if key not in _NOT_ESSENCE and value != {}}
        if rest:
            cast(dict[str, Any], essence).update(orjson.loads(orjson.dumps(rest)))
        return essence


def _field_path(field: kopf.FieldSpec) -> tuple[str, ...]:
    """A kopf field spec ("spec.replicas", or its parts) as a tuple of its parts."""
    if field is None:
        return ()
    return tuple(field.split(".")) if isinstance(field, str) else tuple(field)


#: What kopf keeps of the metadata in an essence, or reads to name its storage keys.
_ESSENTIAL_METADATA = ("name", "namespace", "labels", "annotations")
#: What kopf never keeps in an essence (nor does it keep an empty stanza).
_NOT_ESSENCE = ("apiVersion", "kind", "metadata", "status")


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """kopf's own settings for tailguard."""
    # Durable handler progress goes to annotations: our status schema has no room for kopf's.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="tailguard.dev")
    settings.persistence.diffbase_storage = SlimDiffBaseStorage(
        prefix="tailguard.dev", key="last-handled-configuration"
    )
    # Only warnings become Events automatically; tailguard posts its own explanatory Events.
    settings.posting.level = logging.WARNING
    settings.execution.max_workers = 8
    settings.watching.server_timeout = 300


@dataclass(frozen=True)
class SpecHandlers:
    """The handlers' collaborators: the API adapter, the inventory they feed, the clock, and the
    render settings (the control loop's too, or the two would roll replicas back and forth)."""

    cluster: ClusterAPI
    inventory: Inventory
    clock: Clock
    render: RenderSettings

    def sync(self, body: kopf.Body) -> None:
        """Render and apply one InferenceService's children, write its status, post its events."""
        result = reconcile(body, self.cluster, self.render, now=self.clock())
        # Unconditional: kopf's own annotation patches change the resourceVersion under every handler,
        # so a conditional write here would mostly retry. If it overwrites a condition the control
        # loop just set, the loop sees the difference at its next cycle and writes it again.
        write_status(self.cluster, body, result, conditional=False)
        for note in result.events:
            self.cluster.post_event(object_reference(dict(body)), note.type, note.reason, note.message)

    def track_service(self, event: kopf.RawEvent) -> None:
        """Keep the inventory's copy of an InferenceService current."""
        body: dict[str, Any] = dict(event["object"])
        meta: dict[str, Any] = body.get("metadata") or {}
        if event["type"] == "DELETED":
            self.inventory.drop_service((str(meta.get("namespace", "")), str(meta.get("name", ""))))
        else:
            self.inventory.put_service(body)

    def track_deployment(self, event: kopf.RawEvent) -> None:
        """Keep the inventory's copy of a managed Deployment current."""
        body: dict[str, Any] = dict(event["object"])
        if event["type"] == "DELETED":
            self.inventory.drop_deployment(body)
        else:
            self.inventory.put_deployment(body)

    def track_pod(self, event: kopf.RawEvent) -> None:
        """Keep the inventory's copy of a vLLM pod current."""
        body: dict[str, Any] = dict(event["object"])
        if event["type"] == "DELETED":
            self.inventory.drop_pod(body)
        else:
            self.inventory.put_pod(body)

    def registry(self) -> kopf.OperatorRegistry:
        """A kopf registry holding tailguard's handlers, bound to this object (no global state)."""
        registry = kopf.OperatorRegistry()
        managed = {MANAGED_BY_LABEL: MANAGED_BY}

        @kopf.on.startup(registry=registry)
        def _startup(settings: kopf.OperatorSettings, **_: Any) -> None:
            configure_kopf(settings)

        # A registry of one's own has none of kopf's default login handlers: log in as the client
        # library does (kubeconfig or in-cluster service account).
        @kopf.on.login(registry=registry)
        def _login(**kwargs: Any) -> kopf.ConnectionInfo | None:
            return kopf.login_via_client(**kwargs)

        # The ids are kopf's keys for handler progress in annotations: keep them stable.
        @kopf.on.resume(GROUP, VERSION, PLURAL, id="on_spec", registry=registry)
        @kopf.on.create(GROUP, VERSION, PLURAL, id="on_spec", registry=registry)
        @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", id="on_spec", registry=registry)
        def on_spec(body: kopf.Body, **_: Any) -> None:
            self.sync(body)

        # The watch handlers only copy an object into the inventory: async, so kopf runs them on its
        # event loop rather than handing each event to a worker thread and back (one hop per event,
        # every write of the control loop coming back as one).
        @kopf.on.event(GROUP, VERSION, PLURAL, id="track_service", registry=registry)
        async def track_service(event: kopf.RawEvent, **_: Any) -> None:
            self.track_service(event)

        @kopf.on.event("apps", "v1", "deployments", labels=managed, id="track_deployment", registry=registry)
        async def track_deployment(event: kopf.RawEvent, **_: Any) -> None:
            self.track_deployment(event)

        @kopf.on.event("", "v1", "pods", labels=managed, id="track_pod", registry=registry)
        async def track_pod(event: kopf.RawEvent, **_: Any) -> None:
            self.track_pod(event)

        return registry
