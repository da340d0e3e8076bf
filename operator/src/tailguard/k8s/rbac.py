"""The permissions the operator needs: one list, rendered for the chart, the tests and the docs.

Least privilege: no access to Secrets (a missing hub token shows up in pod status instead), no
cluster-admin verbs, read-only on what tailguard only watches.
"""

from __future__ import annotations

from typing import Any, Final

from tailguard.api.resource import GROUP, PLURAL

_READ: Final = ["get", "list", "watch"]
_WRITE: Final = ["get", "list", "watch", "create", "patch", "update", "delete"]

#: Rules needed in every namespace tailguard manages.
NAMESPACED_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", "list", "watch", "patch", "update"]},
    {"apiGroups": [GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch", "update"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": _WRITE},
    # Only to rewrite a stale desired-replicas mark that stalls a rollout (reconcile.rollout_repair).
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": _WRITE},
    {"apiGroups": [""], "resources": ["pods"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["monitoring.coreos.com"], "resources": ["podmonitors"], "verbs": _WRITE},
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": _READ},
]

#: Rules only a cluster-scoped role can hold (discovery of CRDs and namespaces).
CLUSTER_RULES: Final[list[dict[str, Any]]] = [
    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": _READ},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": _READ},
]

OPERATOR_RULES: Final[list[dict[str, Any]]] = NAMESPACED_RULES + CLUSTER_RULES


def cluster_role(name: str) -> dict[str, Any]:
    """A ClusterRole granting the operator everything it needs cluster-wide."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tailguard"}},
        "rules": OPERATOR_RULES,
    }


def namespaced_role(name: str, namespace: str) -> dict[str, Any]:
    """A Role granting the operator what it needs inside one namespace."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "tailguard"},
        },
        "rules": NAMESPACED_RULES,
    }
