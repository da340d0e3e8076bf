"""An in-memory view of every InferenceService, its Deployment and its pods, fed by watch events.

The control loop reads this view instead of the API server, so a cycle costs no reads however
many services there are; only changes are written. What the loop writes to an InferenceService
comes back at once, as the API server answered the write (:meth:`Inventory.put_written`): at
2,000 services the watch can still be delivering a service's last write when it is next due, and
a decision made from the older copy is refused as a conflict.
"""

from __future__ import annotations

import copy
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tailguard.k8s.cluster import Manifest
from tailguard.k8s.labels import SERVICE_LABEL
from tailguard.metrics.results import ServiceKey


@dataclass
class ServiceView:
    """One InferenceService as last seen, with its children."""

    body: Manifest
    deployment: Manifest | None = None
    pods: dict[str, Manifest] = field(default_factory=dict)


def _copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped object (dicts, lists, scalars), as :func:`copy.deepcopy` makes
    it but several times faster: every watch event is copied, each write of the loop coming back as
    one. Anything else is handed to :func:`copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {k: _copy(v) for k, v in value.items()}
    if kind is list:
        return [_copy(v) for v in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


#: How long an object as the operator wrote it shadows what the watch delivers. The watch delivers
#: one object's versions in order, so until it delivers the written one, each version it delivers
#: is older; should it never deliver it (a re-list after the watch expired skips versions), the
#: watch is trusted again after this long.
WRITTEN_SHADOW_S = 60.0
#: How many of a service's versions the watch delivered are remembered. A write's answer can be
#: handled after the watch has delivered it and newer versions too (the write lands, the user
#: changes the spec, both arrive before the writer's callback runs): an answer whose version the
#: watch already delivered is no newer than the copy held. Versions are opaque strings, compared
#: only for equality.
DELIVERED_KEPT = 16


def _version(obj: Manifest) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version is not None else None


def service_key(obj: Manifest) -> ServiceKey:
    """The (namespace, name) of an object."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _owner(obj: Manifest) -> ServiceKey | None:
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_LABEL)
    return (str(meta.get("namespace", "")), service) if service else None


class Inventory:
    """Latest state of what tailguard manages; event handlers write, the loop reads snapshots."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        #: Services whose copy is the answer to the operator's own write: (its version, when).
        self._written: dict[ServiceKey, tuple[str, float]] = {}
        #: The versions of each service the watch delivered lately (newest last).
        self._delivered: dict[ServiceKey, deque[str]] = {}
        self._services: dict[ServiceKey, Manifest] = {}
        self._deployments: dict[ServiceKey, Manifest] = {}
        self._pods: dict[ServiceKey, dict[str, Manifest]] = {}
        self._dirty: set[ServiceKey] = set()

    def put_service(self, body: Manifest) -> None:
        """A version of an InferenceService from the watch: kept unless it predates one written."""
        key = service_key(body)
        version = _version(body)
        if version is not None:
            delivered = self._delivered.get(key)
            if delivered is None:
                delivered = self._delivered[key] = deque(maxlen=DELIVERED_KEPT)
            delivered.append(version)
        shadow = self._written.get(key)
        if shadow is not None:
            written, at = shadow
            if version == written:
                del self._written[key]  # the watch has caught up; the copy held is this version
                return
            if self._clock() - at <= WRITTEN_SHADOW_S:
                return  # delivered before the written version, so older than it
            del self._written[key]
        self._services[key] = _copy(body)

    def put_written(self, body: Manifest) -> None:
        """An InferenceService as the API server answered the operator's write to it: newer than
        anything the watch has delivered, unless the watch delivered this very version already
        (then what it delivered since is newer, and the copy held stays). Ignored for a service no
        longer known (deleted meanwhile) and for an answer without a version or a spec.

        The answer is handed over, not copied: it was parsed for this call alone, and the caller
        keeps no reference to it (copying each answer took 4% of the operator's CPU at 500 services)."""
        key = service_key(body)
        version = _version(body)
        if key not in self._services or version is None or "spec" not in body:
            return
        if version in self._delivered.get(key, ()):
            return
        self._services[key] = body
        self._written[key] = (version, self._clock())

    def drop_service(self, key: ServiceKey) -> None:
        self._services.pop(key, None)
        self._written.pop(key, None)
        self._delivered.pop(key, None)

    def put_deployment(self, body: Manifest) -> None:
        owner = _owner(body)
        if owner is not None:
            self._deployments[owner] = _copy(body)
            self._dirty.add(owner)

    def drop_deployment(self, body: Manifest) -> None:
        owner = _owner(body)
        if owner is not None:
            self._deployments.pop(owner, None)
            self._dirty.add(owner)

    def put_pod(self, body: Manifest) -> None:
        owner = _owner(body)
        if owner is not None:
            self._pods.setdefault(owner, {})[service_key(body)[1]] = _copy(body)
            self._dirty.add(owner)

    def drop_pod(self, body: Manifest) -> None:
        owner = _owner(body)
        if owner is not None:
            self._pods.get(owner, {}).pop(service_key(body)[1], None)
            self._dirty.add(owner)

    def take_changed(self) -> set[ServiceKey]:
        """Services whose Deployment or pods changed since the last call (and forget them)."""
        changed, self._dirty = self._dirty, set()
        return changed

    def mark_changed(self, keys: set[ServiceKey]) -> None:
        """Keep services marked for the next :meth:`take_changed`."""
        self._dirty |= keys

    def keys(self) -> list[ServiceKey]:
        """Every known InferenceService, sorted."""
        return sorted(self._services)

    def body(self, key: ServiceKey) -> Manifest | None:
        """One service's object as last seen (shared, read-only), without its children: what a tick
        looks at for every service to find those due."""
        return self._services.get(key)

    def view(self, key: ServiceKey) -> ServiceView | None:
        """One service's current view, or None when it is gone.

        The objects are shared, not copied (a cycle over hundreds of services would spend most of
        its time copying): treat them as read-only. Writers replace objects, never mutate them.
        """
        body = self._services.get(key)
        if body is None:
            return None
        return ServiceView(
            body=body, deployment=self._deployments.get(key), pods=dict(self._pods.get(key, {}))
        )
