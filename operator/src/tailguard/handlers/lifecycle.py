"""The spec handler (apply a service's spec: its children and status), and the kopf handlers that keep
the inventory's copies of the managed Deployments and pods current.

InferenceServices themselves are watched by the operator's own watch (:mod:`tailguard.k8s.watch`,
fed into :mod:`tailguard.handlers.services`), not by kopf: kopf's processing of each event (every
status write of the control loop comes back as one) cost a fifth of the operator's CPU.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from tailguard.api import API_VERSION, KIND
from tailguard.k8s.cluster import ClusterAPI, Manifest, object_reference
from tailguard.k8s.labels import MANAGED_BY, MANAGED_BY_LABEL
from tailguard.k8s.render import RenderSettings
from tailguard.reconcile.inventory import Inventory
from tailguard.reconcile.service import reconcile, write_status
from tailguard.reconcile.timestamps import Clock


def configure_kopf(settings: kopf.OperatorSettings) -> None:
    """kopf's own settings for tailguard."""
    # Only warnings become Events automatically; tailguard posts its own explanatory Events.
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300


#: The finalizer kopf put on InferenceServices when tailguard had kopf timers; nothing holds it now.
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@dataclass(frozen=True)
class SpecHandlers:
    """The handlers' collaborators: the API adapter, the inventory they feed, the clock, and the
    render settings (the control loop's too, or the two would roll replicas back and forth)."""

    cluster: ClusterAPI
    inventory: Inventory
    clock: Clock
    render: RenderSettings

    def sync(self, body: Mapping[str, Any]) -> None:
        """Render and apply one InferenceService's children, write its status, post its events."""
        self.release_legacy_finalizer(body)
        result = reconcile(body, self.cluster, self.render, now=self.clock())
        # Unconditional: a status written by the control loop since the watch delivered ``body``
        # would make a conditional write fail and retry. If this overwrites a condition the loop
        # just set, the loop sees the difference at its next cycle and writes it again.
        write_status(self.cluster, body, result, conditional=False)
        for note in result.events:
            self.cluster.post_event(object_reference(dict(body)), note.type, note.reason, note.message)

    def release_legacy_finalizer(self, body: Mapping[str, Any]) -> None:
        """Take off kopf's finalizer, left by versions that had kopf timers: nobody would release
        it, and deleting the service would hang. Only if the object is unchanged since ``body``."""
        meta = body.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if KOPF_FINALIZER not in finalizers:
            return
        rest = [f for f in finalizers if f != KOPF_FINALIZER]
        self.cluster.patch_metadata(
            API_VERSION,
            KIND,
            meta["namespace"],
            meta["name"],
            {"finalizers": rest or None, "resourceVersion": meta.get("resourceVersion")},
        )

    def report_failure(self, body: Mapping[str, Any], message: str) -> None:
        """A Warning Event on the service: its spec could not be applied (yet)."""
        self.cluster.post_event(object_reference(dict(body)), "Warning", "SyncFailed", message)

    def track_deployment(self, event: kopf.RawEvent) -> None:
        """Keep the inventory's copy of a managed Deployment current."""
        body: Manifest = dict(event["object"])
        if event["type"] == "DELETED":
            self.inventory.drop_deployment(body)
        else:
            self.inventory.put_deployment(body)

    def track_pod(self, event: kopf.RawEvent) -> None:
        """Keep the inventory's copy of a vLLM pod current."""
        body: Manifest = dict(event["object"])
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

        # The watch handlers only copy an object into the inventory: async, so kopf runs them on its
        # event loop rather than handing each event to a worker thread and back.
        @kopf.on.event("apps", "v1", "deployments", labels=managed, id="track_deployment", registry=registry)
        async def track_deployment(event: kopf.RawEvent, **_: Any) -> None:
            self.track_deployment(event)

        @kopf.on.event("", "v1", "pods", labels=managed, id="track_pod", registry=registry)
        async def track_pod(event: kopf.RawEvent, **_: Any) -> None:
            self.track_pod(event)

        return registry
