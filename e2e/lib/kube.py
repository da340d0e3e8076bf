"""A small client for the tests: the official Python client's dynamic API plus kubectl, both bound to
one kubeconfig, never to the environment's current context."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from tailguard.k8s.cluster import Manifest

FIELD_MANAGER = "tailguard-e2e"


class KubectlError(AssertionError):
    """kubectl exited non-zero where success was expected; carries its stderr."""


class Kube:
    """Clients for one cluster: ``dynamic`` (dicts in, dicts out) and :meth:`kubectl`."""

    def __init__(self, kubeconfig: Path, kubectl: Path) -> None:
        from kubernetes import config, dynamic

        self.kubeconfig = kubeconfig
        self.kubectl_path = kubectl
        self.api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        self.dynamic = dynamic.DynamicClient(self.api_client)  # type: ignore[no-untyped-call]

    # dynamic API -----------------------------------------------------------------------------------
    def resource(self, api_version: str, kind: str) -> Any:
        return self.dynamic.resources.get(api_version=api_version, kind=kind)

    def invalidate_discovery(self) -> None:
        """Forget cached discovery (after a CRD was installed)."""
        self.dynamic.resources.invalidate_cache()

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> Manifest | None:
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            out: Manifest = self.resource(api_version, kind).get(name=name, namespace=namespace).to_dict()
        except NotFoundError:
            return None
        return out

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        *,
        labels: Mapping[str, str] | str | None = None,
        fields: str | None = None,
    ) -> list[Manifest]:
        selector = (
            labels
            if isinstance(labels, str) or labels is None
            else ",".join(f"{k}={v}" for k, v in labels.items())
        )
        result = self.resource(api_version, kind).get(
            namespace=namespace, label_selector=selector, field_selector=fields
        )
        items: list[Manifest] = result.to_dict().get("items", [])
        for item in items:  # list items lack these two; fill them for uniform handling
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    def apply(self, manifest: Manifest, namespace: str | None = None) -> Manifest:
        """Server-side apply (as field manager ``tailguard-e2e``), forcing conflicts."""
        meta = manifest.setdefault("metadata", {})
        if namespace is not None and self.resource(manifest["apiVersion"], manifest["kind"]).namespaced:
            meta["namespace"] = namespace
        out: Manifest = (
            self.resource(manifest["apiVersion"], manifest["kind"])
            .server_side_apply(
                body=manifest,
                name=meta["name"],
                namespace=meta.get("namespace"),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
            )
            .to_dict()
        )
        return out

    def create(self, manifest: Manifest, namespace: str | None = None) -> Manifest:
        out: Manifest = (
            self.resource(manifest["apiVersion"], manifest["kind"])
            .create(body=manifest, namespace=namespace or manifest.get("metadata", {}).get("namespace"))
            .to_dict()
        )
        return out

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Manifest,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> Manifest:
        """A JSON merge patch."""
        resource = self.resource(api_version, kind)
        if subresource:
            resource = getattr(resource, "subresources", {})[subresource]
        out: Manifest = resource.patch(
            body=patch, name=name, namespace=namespace, content_type="application/merge-patch+json"
        ).to_dict()
        return out

    def delete(
        self,
        api_version: str,
        kind: str,
        name: str,
        namespace: str | None = None,
        *,
        propagation: str = "Background",
    ) -> bool:
        """Delete; False when it was already gone."""
        from kubernetes.dynamic.exceptions import NotFoundError

        try:
            self.resource(api_version, kind).delete(
                name=name, namespace=namespace, body={"propagationPolicy": propagation}
            )
        except NotFoundError:
            return False
        return True

    # kubectl -----------------------------------------------------------------------------------------
    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        namespace: str | None = None,
        timeout: float = 60,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster; with ``check`` a failure raises :class:`KubectlError`."""
        cmd = [str(self.kubectl_path), f"--kubeconfig={self.kubeconfig}"]
        if namespace:
            cmd.append(f"--namespace={namespace}")
        cmd += list(args)
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        out = subprocess.run(cmd, input=input, capture_output=True, text=True, timeout=timeout, env=env)
        if check and out.returncode != 0:
            raise KubectlError(
                f"`kubectl {' '.join(args)}` exited {out.returncode}:\n{out.stderr}{out.stdout}"
            )
        return out

    def kubectl_json(self, *args: str, namespace: str | None = None) -> Manifest:
        data: Manifest = json.loads(self.kubectl(*args, "-o", "json", namespace=namespace).stdout)
        return data

    def apply_yaml(
        self, text: str, namespace: str | None = None, *, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` (client-side, as a user would run it)."""
        return self.kubectl("apply", "-f", "-", input=text, namespace=namespace, check=check)

    # diagnostics ---------------------------------------------------------------------------------------
    def describe_namespace(self, namespace: str) -> str:
        """What a person would look at when a test in ``namespace`` fails."""
        parts = []
        for args in (
            ("get", "inferenceservices,deployments,replicasets,pods,services", "-o", "wide"),
            ("get", "events", "--sort-by=.lastTimestamp"),
        ):
            out = self.kubectl(*args, namespace=namespace, check=False)
            parts.append(f"$ kubectl -n {namespace} {' '.join(args)}\n{out.stdout}{out.stderr}")
        return "\n".join(parts)


def load_yaml_documents(path: Path) -> list[Manifest]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def dump_yaml(objs: Iterable[Manifest]) -> str:
    return yaml.safe_dump_all(list(objs), sort_keys=False)


def unique_name(prefix: str, max_len: int = 63) -> str:
    """A DNS-1123 label from ``prefix`` with a random suffix."""
    base = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-") or "t"
    suffix = secrets.token_hex(3)
    return f"{base[: max_len - len(suffix) - 1].rstrip('-')}-{suffix}"


def condition(obj: Manifest | None, type_: str) -> Manifest | None:
    """The status condition of ``type_``, or None."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def owner_uids(obj: Manifest) -> set[str]:
    return {ref["uid"] for ref in obj.get("metadata", {}).get("ownerReferences") or []}
