"""The seam between tailguard and the API server: a small protocol, its real adapter and a fake.

Reconcile code depends only on :class:`ClusterAPI`; tests pass :class:`FakeCluster`.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from tailguard.k8s.transport import KeptAliveConnections

log = logging.getLogger(__name__)

#: A Kubernetes object as JSON data (the one definition; every module that handles objects uses it).
Manifest = dict[str, Any]


class ClusterAPI(Protocol):
    """What reconciliation needs from Kubernetes."""

    def apply(self, manifest: Manifest) -> Manifest:
        """Server-side apply ``manifest`` as tailguard's field manager, taking ownership of its fields."""
        ...

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        """One object, or None when it does not exist."""
        ...

    def list(
        self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]
    ) -> list[Manifest]:
        """Objects of a kind in a namespace whose labels match ``selector``."""
        ...

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the cluster serves this kind (e.g. the Prometheus Operator's PodMonitor)."""
        ...

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        status: Manifest,
        *,
        resource_version: str | None = None,
    ) -> Manifest | None:
        """Merge-patch the status subresource; the object as the write left it (``None`` if the
        adapter cannot tell).

        With ``resource_version`` the write only succeeds if the object has not changed since
        (otherwise :class:`ConflictError`), so a status computed from a stale copy never lands.
        """
        ...

    def patch_metadata(
        self, api_version: str, kind: str, namespace: str, name: str, metadata: Manifest
    ) -> Manifest | None:
        """Merge-patch metadata (labels, annotations); the object as the write left it (``None``
        if the adapter cannot tell)."""
        ...

    def post_event(self, involved: Manifest, type_: str, reason: str, message: str) -> None:
        """Record a Kubernetes Event about ``involved`` (an object reference)."""
        ...


def object_reference(obj: Manifest) -> Manifest:
    """The reference an Event points at."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
    }


def auth_headers(configuration: Any) -> dict[str, str]:
    """The headers that authenticate a request as the official client's configuration does: its
    auth settings (a bearer token, refreshed by the configuration's hook when it expires), asked
    for anew at each call."""
    return {
        str(setting["key"]): str(setting["value"])
        for setting in configuration.auth_settings().values()
        if setting.get("in") == "header" and setting.get("value")
    }


class ApiError(Exception):
    """The API server refused a request: its HTTP status, reason and answer (as the official
    client's ``ApiException`` carries them)."""

    def __init__(self, status: int, reason: str | None, body: bytes | str | None) -> None:
        text = body.decode(errors="replace") if isinstance(body, bytes) else (body or "")
        super().__init__(f"({status}) {reason}: {text[:500]}")
        self.status = status
        self.reason = reason
        self.body = text


class ConflictError(Exception):
    """The object changed since it was read (HTTP 409); read it again and recompute."""


def _key(api_version: str, kind: str, namespace: str, name: str) -> tuple[str, str, str, str]:
    return (api_version, kind, namespace, name)


def _labels_match(obj: Manifest, selector: Mapping[str, str]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def _merge(base: Manifest, patch: Mapping[str, Any]) -> Manifest:
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


class FakeCluster:
    """An in-memory :class:`ClusterAPI` for unit tests: apply replaces what tailguard owns."""

    def __init__(self, kinds: set[tuple[str, str]] | None = None) -> None:
        self.objects: dict[tuple[str, str, str, str], Manifest] = {}
        self.applied: list[Manifest] = []
        self.events: list[tuple[str, str, str, str]] = []  # (object name, type, reason, message)
        #: Every status merge-patch that went through: (namespace, name, patch).
        self.status_patches: list[tuple[str, str, Manifest]] = []
        self.kinds = kinds if kinds is not None else {("apps/v1", "Deployment"), ("v1", "Service")}

    def add(self, obj: Manifest) -> None:
        """Store an object as if another client had created it."""
        meta = obj["metadata"]
        self.objects[_key(obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])] = (
            copy.deepcopy(obj)
        )

    def apply(self, manifest: Manifest) -> Manifest:
        meta = manifest["metadata"]
        key = _key(manifest["apiVersion"], manifest["kind"], meta.get("namespace", ""), meta["name"])
        live = self.objects.get(key, {})
        merged = _merge(live, manifest)
        self.objects[key] = merged
        self.applied.append(copy.deepcopy(manifest))
        return copy.deepcopy(merged)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        obj = self.objects.get(_key(api_version, kind, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None

    def list(
        self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]
    ) -> list[Manifest]:
        return [
            copy.deepcopy(o)
            for (v, k, ns, _), o in sorted(self.objects.items())
            if (v, k, ns) == (api_version, kind, namespace) and _labels_match(o, selector)
        ]

    def serves(self, api_version: str, kind: str) -> bool:
        return (api_version, kind) in self.kinds

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        status: Manifest,
        *,
        resource_version: str | None = None,
    ) -> Manifest | None:
        key = _key(api_version, kind, namespace, name)
        obj = self.objects.setdefault(
            key, {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        )
        current = obj["metadata"].get("resourceVersion")
        if resource_version is not None and current is not None and current != resource_version:
            raise ConflictError(f"{kind} {namespace}/{name} changed since resourceVersion {resource_version}")
        obj["status"] = _merge(obj.get("status") or {}, status)
        self.status_patches.append((namespace, name, copy.deepcopy(status)))
        obj["metadata"]["resourceVersion"] = str(int(current or 0) + 1)
        return copy.deepcopy(obj)

    def patch_metadata(
        self, api_version: str, kind: str, namespace: str, name: str, metadata: Manifest
    ) -> Manifest | None:
        key = _key(api_version, kind, namespace, name)
        obj = self.objects.setdefault(
            key, {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}
        )
        current = obj["metadata"].get("resourceVersion")
        obj["metadata"] = _merge(obj.get("metadata") or {}, metadata)
        if current is not None:
            obj["metadata"]["resourceVersion"] = str(int(current) + 1)
        return copy.deepcopy(obj)

    def post_event(self, involved: Manifest, type_: str, reason: str, message: str) -> None:
        self.events.append((str(involved.get("name")), type_, reason, message))


def _written(data: bytes) -> Manifest | None:
    """The object a write answered with (``None`` if the answer is not one). Parsed with orjson: every
    status write of the control loop answers with the whole object, kept as the service's copy."""
    try:
        body = orjson.loads(data)
    except (TypeError, ValueError):
        return None
    return body if isinstance(body, dict) and "metadata" in body else None


def _drain(response: Any) -> None:
    """Read a response whose content tailguard does not need, returning its connection to the pool.

    Writes pass ``serialize=False``: the client would otherwise parse the whole object it answers
    with into a tree of wrappers, which costs more CPU than the write itself.
    """
    _ = response.data


#: Connect and read timeouts of a merge patch (seconds): a hung API server does not hold a writer.
WRITE_TIMEOUT_S = (10.0, 60.0)


def _kept_alive(configuration: Any) -> KeptAliveConnections | None:
    """The writers' kept-alive connections to the configuration's server; ``None`` (the client's
    own pool) behind a proxy, or when its TLS settings cannot be read here (the client reports
    that at its first request)."""
    try:
        return KeptAliveConnections.from_client_configuration(
            configuration, connect_timeout_s=WRITE_TIMEOUT_S[0], read_timeout_s=WRITE_TIMEOUT_S[1]
        )
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        log.warning("merge patches go through the official client's pool: %s", exc)
        return None


class KubernetesCluster:
    """:class:`ClusterAPI` over the official client's dynamic API (server-side apply)."""

    #: Seconds before a kind found missing is looked up again.
    RECHECK_MISSING_S = 300.0

    def __init__(self, field_manager: str, api_client: Any | None = None) -> None:
        import urllib3
        from kubernetes import client, dynamic

        self._write_timeout = urllib3.Timeout(connect=WRITE_TIMEOUT_S[0], read=WRITE_TIMEOUT_S[1])
        self._field_manager = field_manager
        self._api_client = api_client or client.ApiClient()
        self._dynamic = dynamic.DynamicClient(self._api_client)  # type: ignore[no-untyped-call]
        self._connections = _kept_alive(self._api_client.configuration)
        # The dynamic client's discovery cache is not thread-safe, and kopf runs sync handlers in
        # worker threads: resolve each kind once, under a lock.
        self._lock = threading.Lock()
        self._resources: dict[tuple[str, str], Any] = {}
        self._missing: dict[tuple[str, str], float] = {}

    def _resource(self, api_version: str, kind: str) -> Any:
        key = (api_version, kind)
        with self._lock:
            if key not in self._resources:
                self._resources[key] = self._dynamic.resources.get(api_version=api_version, kind=kind)
            return self._resources[key]

    def apply(self, manifest: Manifest) -> Manifest:
        meta = manifest["metadata"]
        result = self._resource(manifest["apiVersion"], manifest["kind"]).server_side_apply(
            body=manifest,
            name=meta["name"],
            namespace=meta.get("namespace"),
            field_manager=self._field_manager,
            force_conflicts=True,
        )
        out: Manifest = result.to_dict()
        return out

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            out: Manifest = self._resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None
        return out

    def list(
        self, api_version: str, kind: str, namespace: str, selector: Mapping[str, str]
    ) -> list[Manifest]:
        label_selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        result = self._resource(api_version, kind).get(namespace=namespace, label_selector=label_selector)
        items: list[Manifest] = result.to_dict().get("items", [])
        return items

    def serves(self, api_version: str, kind: str) -> bool:
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        key = (api_version, kind)
        checked = self._missing.get(key)
        if checked is not None and time.monotonic() - checked < self.RECHECK_MISSING_S:
            return False
        try:
            self._resource(api_version, kind)
        except ResourceNotFoundError:
            with self._lock:
                # A CRD installed later (the Prometheus Operator's) is found at the next recheck.
                self._dynamic.resources.invalidate_cache()
                self._missing[key] = time.monotonic()
            return False
        self._missing.pop(key, None)
        return True

    def patch_status(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        status: Manifest,
        *,
        resource_version: str | None = None,
    ) -> Manifest | None:
        body: Manifest = {"status": status}
        if resource_version is not None:
            body["metadata"] = {"resourceVersion": resource_version}
        path = self._resource(api_version, kind).path(name=name, namespace=namespace) + "/status"
        try:
            return self._merge_patch(path, body)
        except ApiError as exc:
            if exc.status == 409:
                raise ConflictError(f"{kind} {namespace}/{name} changed meanwhile") from exc
            raise

    def patch_metadata(
        self, api_version: str, kind: str, namespace: str, name: str, metadata: Manifest
    ) -> Manifest | None:
        path = self._resource(api_version, kind).path(name=name, namespace=namespace)
        return self._merge_patch(path, {"metadata": metadata})

    def _merge_patch(self, path: str, body: Manifest) -> Manifest | None:
        """A JSON merge patch with the client's credentials, without its generic request machinery
        (parameter sanitising, serialising, header negotiation): over this thread's kept-alive
        connection (:mod:`tailguard.k8s.transport`), or behind a proxy through the client's own
        pool. Raises :class:`ApiError` for an answer other than 2xx."""
        configuration = self._api_client.configuration
        headers = {
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
            "User-Agent": self._api_client.user_agent,
            **auth_headers(configuration),
        }
        payload = orjson.dumps(body)
        if self._connections is not None:
            status, reason, data = self._connections.request("PATCH", path, payload, headers)
        else:
            response = self._api_client.rest_client.pool_manager.request(
                "PATCH",
                configuration.host + path,
                body=payload,
                headers=headers,
                timeout=self._write_timeout,
            )
            status, reason, data = int(response.status), str(response.reason or ""), bytes(response.data)
        if not 200 <= status < 300:
            raise ApiError(status, reason, data)
        return _written(data)

    def post_event(self, involved: Manifest, type_: str, reason: str, message: str) -> None:
        import datetime as dt
        import uuid

        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        namespace = involved.get("namespace") or "default"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.get('name')}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v is not None},
            "type": type_,
            "reason": reason,
            "message": message[:1024],
            "source": {"component": self._field_manager},
            "reportingComponent": self._field_manager,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        _drain(self._resource("v1", "Event").create(body=event, namespace=namespace, serialize=False))
