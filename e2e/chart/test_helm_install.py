"""The Helm chart installed into the test cluster, and the operator running with the chart's RBAC only.

The chart is installed with ``helm install`` as the cluster admin, the way a platform team installs it,
scoped to one namespace of InferenceServices. The operator Deployment's pod cannot run here (the
nodes are kwok's; on a real cluster the image would be pulled), so ``tailguard run`` from this tree
runs on the test machine with a token of the chart's ServiceAccount: every request it makes is
authorized by the Roles the chart created, not by cluster-admin and not by a hand-made role.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster import tools
from lib import testbed as testbed_mod
from lib.kube import Kube, unique_name
from lib.operator import Identity, OperatorProcess, request_token, token_kubeconfig
from lib.wait import wait_for

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tailguard"
DASHBOARD = REPO / "docs" / "dashboard.json"
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


def _helm() -> str:
    found = tools.locate().helm
    if found is not None:
        return str(found)
    reason = "helm is not built; run `make cluster-tools`"
    if os.environ.get(testbed_mod.REQUIRE_ENV):
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass
class Release:
    name: str
    namespace: str
    managed_namespace: str
    kube: Kube

    @property
    def fullname(self) -> str:
        return f"{self.name}-tailguard"

    def helm(self, *args: str, timeout: float = 180) -> str:
        cmd = [_helm(), f"--kubeconfig={self.kube.kubeconfig}", "--namespace", self.namespace, *args]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        assert out.returncode == 0, (
            f"`helm {' '.join(args)}` exited {out.returncode}:\n{out.stderr}{out.stdout}"
        )
        return out.stdout

    def can_i(self, verb: str, resource: str, namespace: str | None = None, *, subresource: str = "") -> bool:
        """``kubectl auth can-i`` as the chart's ServiceAccount."""
        args = [
            "auth",
            "can-i",
            verb,
            resource,
            f"--as=system:serviceaccount:{self.namespace}:{self.fullname}",
        ]
        args += [f"--namespace={namespace}"] if namespace else []
        args += [f"--subresource={subresource}"] if subresource else []
        out = self.kube.kubectl(*args, check=False)
        return out.stdout.strip() == "yes"


@pytest.fixture
def managed_namespace(kube: Kube) -> Iterator[str]:
    """The one namespace the chart lets the operator manage (the test's own namespace holds the release)."""
    name = unique_name("tg-chart-apps")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    for obj in kube.list(*ISVC, name):  # nobody is left to release a finalizer
        if obj["metadata"].get("finalizers"):
            kube.patch(*ISVC, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, name)
    kube.delete("v1", "Namespace", name)
    wait_for(
        f"namespace {name} to be gone",
        lambda: kube.get("v1", "Namespace", name) is None,
        timeout=90,
        details=lambda: kube.describe_namespace(name),
    )


@pytest.fixture
def release(kube: Kube, namespace: str, managed_namespace: str) -> Iterator[Release]:
    """The chart installed as release tg-<random> in the test's namespace, uninstalled afterwards."""
    rel = Release(unique_name("tg", max_len=20), namespace, managed_namespace, kube)
    rel.helm(
        "install",
        rel.name,
        str(CHART),
        "--set",
        "rbac.scope=Namespaces",
        "--set",
        f"rbac.namespaces={{{managed_namespace}}}",
        "--set",
        "prometheus.url=http://127.0.0.1:9",
        "--set",
        "dashboard.enabled=true",
    )
    kube.invalidate_discovery()
    try:
        yield rel
    finally:
        rel.helm("uninstall", rel.name, "--wait")


def _identity(release: Release, directory: Path) -> Identity:
    """A kubeconfig holding a TokenRequest token of the chart's ServiceAccount."""
    token = request_token(release.kube, release.namespace, release.fullname, seconds=3600)
    path = directory / f"{release.fullname}.kubeconfig"
    path.write_text(token_kubeconfig(release.kube.kubeconfig, token, user=release.fullname))
    path.chmod(0o600)
    return Identity(release.namespace, release.fullname, f"{release.fullname}-cluster", path)


def _service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": ISVC[0],
        "kind": ISVC[1],
        "metadata": {"name": name},
        "spec": {
            "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
            "resources": {"gpus": 1},
            "slo": {"ttftP99Ms": 500, "tpotP99Ms": 50, "goodputTarget": 0.99},
            "autoscaling": {"mode": "Auto", "minReplicas": 1, "maxReplicas": 2, "intervalSeconds": 5},
        },
    }


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _exposed_series(url: str) -> set[str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _dashboard_operator_series() -> set[str]:
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    return {name for e in exprs for name in re.findall(r"\b(tailguard_[a-z_]+)\b", e)}


def test_chart_installs_namespaced_rbac_that_is_enough_to_run_the_operator(
    kube: Kube, release: Release, testbed: testbed_mod.Testbed, request: pytest.FixtureRequest
) -> None:
    # --- install: what the chart created --------------------------------------------------------
    deployment = kube.get("apps/v1", "Deployment", release.fullname, release.namespace)
    assert deployment is not None
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "inferenceservices.tailguard.dev")
    assert crd is not None, "the chart's crds/ were not installed"
    assert kube.get("v1", "ConfigMap", f"{release.fullname}-dashboard", release.namespace) is not None

    # --- the RBAC is the least privilege the docs promise ---------------------------------------
    apps = release.managed_namespace
    assert release.can_i("create", "deployments.apps", apps)
    assert release.can_i("patch", "inferenceservices.tailguard.dev", apps, subresource="status")
    assert release.can_i("list", "customresourcedefinitions.apiextensions.k8s.io")
    assert not release.can_i("get", "secrets", apps), "the operator must not read Secrets"
    assert not release.can_i("create", "deployments.apps", release.namespace), "only the listed namespace"
    assert not release.can_i("list", "inferenceservices.tailguard.dev", "default")

    # --- run the operator as the chart's ServiceAccount, watching the listed namespace ------------
    unlisted = _service("not-mine")
    kube.apply(unlisted, release.namespace)
    identity = _identity(release, testbed.workdir)
    log = testbed.workdir / "operator-logs" / f"{request.node.name}.log"
    op = OperatorProcess(identity, log, namespaces=[apps], prometheus_url="http://127.0.0.1:9")
    request.node._tg_operator = op
    op.start()
    try:
        kube.apply(_service("chat"), apps)

        def reconciled() -> dict[str, Any] | None:
            obj = kube.get(*ISVC, "chat", apps)
            conds = _conditions(obj)
            done = obj and (obj.get("status") or {}).get("observedGeneration") and "Ready" in conds
            return obj if done and "MetricsAvailable" in conds else None

        obj = wait_for(
            "InferenceService chat reconciled by the chart-scoped operator (status and the loop's conditions)",
            reconciled,
            timeout=90,
            details=op.log_tail,
        )
        # Prometheus is unreachable on purpose: the service holds its size and says why.
        assert _conditions(obj)["MetricsAvailable"]["reason"] == "PrometheusUnavailable"
        child = kube.get("apps/v1", "Deployment", "chat", apps)
        assert child is not None
        assert child["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
        assert kube.get("v1", "Service", "chat", apps) is not None
        wait_for(
            "tailguard's Events about chat",
            lambda: [e for e in kube.list("v1", "Event", apps) if e["involvedObject"]["name"] == "chat"],
            timeout=30,
        )

        # Every operator metric the dashboard reads is exposed by the running operator.
        wanted = _dashboard_operator_series()
        assert wanted, "the dashboard reads no operator metric"
        exposed = wait_for(
            "the operator's /metrics to expose every series the dashboard reads",
            lambda: s if wanted <= (s := _exposed_series(op.metrics_url)) else None,
            timeout=30,
            details=lambda: f"missing: {sorted(wanted - _exposed_series(op.metrics_url))}",
        )
        assert wanted <= exposed

        # The service outside the chart's namespaces is left alone.
        time.sleep(2)
        outside = kube.get(*ISVC, "not-mine", release.namespace)
        assert not (outside or {}).get("status"), "an InferenceService outside rbac.namespaces was reconciled"
        assert kube.get("apps/v1", "Deployment", "not-mine", release.namespace) is None

    finally:
        # Delete while the operator runs, so that it can let go of what it holds.
        kube.delete(*ISVC, "chat", apps)
        with contextlib.suppress(AssertionError):
            wait_for(
                "InferenceService chat to be deleted",
                lambda: kube.get(*ISVC, "chat", apps) is None,
                timeout=30,
            )
        op.stop()
    refused = op.forbidden_lines()
    assert not refused, "the chart's RBAC refused the operator something:\n" + "\n".join(refused[:20])
