"""An in-memory view of every InferenceService, its Deployment and its pods, fed by watch events.

The control loop reads this view instead of the API server, so a cycle costs no reads however
many services there are; only changes are written.
"""

from __future__ import annotations

import copy
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


def _key(obj: Manifest) -> ServiceKey:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


def _owner(obj: Manifest) -> ServiceKey | None:
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(SERVICE_LABEL)
    return (str(meta.get("namespace", "")), service) if service else None


class Inventory:
    """Latest state of what tailguard manages; event handlers write, the loop reads snapshots."""

    def __init__(self) -> None:
        self._services: dict[ServiceKey, Manifest] = {}
        self._deployments: dict[ServiceKey, Manifest] = {}
        self._pods: dict[ServiceKey, dict[str, Manifest]] = {}
        self._dirty: set[ServiceKey] = set()

    def put_service(self, body: Manifest) -> None:
        self._services[_key(body)] = _copy(body)

    def drop_service(self, key: ServiceKey) -> None:
        self._services.pop(key, None)

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
            self._pods.setdefault(owner, {})[_key(body)[1]] = _copy(body)
            self._dirty.add(owner)

    def drop_pod(self, body: Manifest) -> None:
        owner = _owner(body)
        if owner is not None:
            self._pods.get(owner, {}).pop(_key(body)[1], None)
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
