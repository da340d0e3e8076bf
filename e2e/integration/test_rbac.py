"""The operator runs with the chart's RBAC, not cluster-admin, and the tests notice a missing permission."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from lib.kube import Kube
from lib.operator import Identity, OperatorProcess, provision_identity
from lib.testbed import Testbed
from lib.wait import wait_for

pytestmark = pytest.mark.integration


def _can(kube: Kube, identity: Identity, verb: str, resource: str, namespace: str | None = None) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={identity.username}"]
    args += [f"--namespace={namespace}"] if namespace else ["--all-namespaces"]
    out = kube.kubectl(*args, check=False)
    return out.stdout.strip() == "yes"


def test_operator_identity_has_what_it_needs_and_no_more(
    kube: Kube, operator_identity: Identity, namespace: str, crd: dict[str, Any]
) -> None:
    granted = [
        ("patch", "inferenceservices.tailguard.dev"),
        ("patch", "inferenceservices.tailguard.dev/status"),
        ("create", "deployments.apps"),
        ("delete", "services"),
        ("watch", "pods"),
        ("create", "events"),
    ]
    refused = [
        ("get", "secrets"),
        ("create", "pods"),
        ("delete", "namespaces"),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
        ("create", "inferenceservices.tailguard.dev"),
        ("*", "*"),
    ]
    for verb, resource in granted:
        assert _can(kube, operator_identity, verb, resource, namespace), f"operator may not {verb} {resource}"
    for verb, resource in refused:
        assert not _can(kube, operator_identity, verb, resource, namespace), f"operator may {verb} {resource}"
    # The kubeconfig the tests give the operator really authenticates as that ServiceAccount.
    who = Kube(operator_identity.kubeconfig, kube.kubectl_path).kubectl_json("auth", "whoami")
    assert who["status"]["userInfo"]["username"] == operator_identity.username


def test_a_missing_permission_shows_up_as_a_refusal_in_the_operator_log(
    kube: Kube,
    namespace: str,
    crd: dict[str, Any],
    testbed: Testbed,
    examples: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """Guards the guard: the ``operator`` fixture fails a test on such lines; they must be detectable."""
    from tailguard.k8s.rbac import OPERATOR_RULES

    rules = [r for r in OPERATOR_RULES if "services" not in r.get("resources", [])]
    assert len(rules) == len(OPERATOR_RULES) - 1
    short = provision_identity(kube, tmp_path, name="tailguard-operator-without-services", rules=rules)
    op = OperatorProcess(short, tmp_path / "operator.log", namespaces=[namespace])
    try:
        op.start()
        manifest = copy.deepcopy(examples["qwen-8b-dryrun"])
        kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), namespace=namespace)
        lines = wait_for(
            "the operator to log an RBAC refusal for services",
            lambda: [line for line in op.forbidden_lines() if "services" in line],
            timeout=60,
            details=op.log_tail,
        )
        assert short.username.split(":")[-1] in lines[0]
    finally:
        op.stop()
        for obj in kube.list("tailguard.dev/v1alpha1", "InferenceService", namespace):
            kube.patch(
                "tailguard.dev/v1alpha1",
                "InferenceService",
                obj["metadata"]["name"],
                {"metadata": {"finalizers": None}},
                namespace,
            )
        kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", short.service_account)
        kube.delete("rbac.authorization.k8s.io/v1", "ClusterRole", short.cluster_role)
