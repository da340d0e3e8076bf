"""Fixtures of the kind tier (marker ``kind``): the chart, the operator image and the engine stand-in
running in the kind cluster built on this machine, with a Prometheus in the cluster scraping the pods.

The tier is opt-in like the image tier: it needs a Docker engine that runs privileged containers and
builds the kind node image (cached), so a plain ``pytest`` skips it with the reason. ``make
test-kind`` runs it with ``TAILGUARD_REQUIRE_KIND=1`` (then a missing engine fails it);
``TAILGUARD_KIND=1`` or ``-m kind`` runs it where it can and skips otherwise.

What the session sets up, in order (each step waits for the previous one):

1. the kind cluster (``containers.kind_node.up``), its node advertising :data:`GPUS` fake
   ``nvidia.com/gpu``; one that already exists is reused and kept, one made here is deleted at the
   end unless ``KEEP_KIND_CLUSTER=1``;
2. the operator, engine stand-in and Prometheus images, built locally (cached) and ``kind load``-ed;
3. a namespace for the InferenceService, and Prometheus from :mod:`kind.manifests` in a namespace of
   its own, finding that service's pods by DNS (a headless Service) and scraping them every
   :data:`kind.manifests.SCRAPE_INTERVAL`;
4. the chart, ``helm install``-ed with the local operator image and that Prometheus, on a short
   rate window (:data:`RATE_WINDOW`) so that a scenario takes minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from cluster import tools
from containers import base, engine, kind_node, operator_image, prometheus_image, vllm_image
from engine import env as engine_env
from kind import manifests
from lib.kube import Kube, unique_name
from lib.opt_in import OptInTier
from lib.wait import wait_for

REQUIRE_ENV: Final = "TAILGUARD_REQUIRE_KIND"
OPT_IN_ENV: Final = "TAILGUARD_KIND"
TIER: Final = OptInTier("kind", "kind", "test-kind", OPT_IN_ENV, REQUIRE_ENV)
#: The real-engine test (marker ``kind_vllm``): one replica of vLLM for CPUs in the same cluster. Its
#: own opt-in, never part of ``make test-kind``: its image is several GB (``make test-kind-vllm``).
VLLM_REQUIRE_ENV: Final = "TAILGUARD_REQUIRE_KIND_VLLM"
VLLM_TIER: Final = OptInTier(
    "kind real-engine", "kind_vllm", "test-kind-vllm", "TAILGUARD_KIND_VLLM", VLLM_REQUIRE_ENV
)

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "tailguard"
#: Fake GPUs on the kind node: enough for the service's maxReplicas, one GPU each.
GPUS: Final = 8
#: The operator's PromQL rate window: four scrapes of the engines, instead of the chart's 2 m.
RATE_WINDOW: Final = "10s"
RELEASE: Final = "tailguard"
#: The InferenceService the tier applies (Prometheus scrapes its pods).
SERVICE: Final = "chat"
ISVC: Final = ("tailguard.dev/v1alpha1", "InferenceService")
RELEASE_NAMESPACE: Final = "tailguard-system"


def unavailable_reason() -> str | None:
    """Why the tier cannot run here, or None. Starts and builds nothing."""
    if engine.running() is None:
        return "no Docker engine answers (`make docker-up` installs Debian's docker.io and starts dockerd)"
    if base.image_recipe(engine.docker_cli()) is None and os.geteuid() != 0:
        return f"{base.IMAGE} is missing and debootstrap needs root to make it"
    if not tools.HELM.installed():
        return f"helm {tools.HELM.version} is not built (`make cluster-tools`)"
    return None


def vllm_unavailable_reason() -> str | None:
    """Why the real-engine test cannot run here: the kind tier's reasons, or no engine env to build
    its image from (unless the image is built already)."""
    reason = unavailable_reason()
    if reason is None and not vllm_image.exists(vllm_image.default_tag()):
        reason = engine_env.unavailable_reason()
    return reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    TIER.skip_unless_asked(config, items, unavailable_reason)
    VLLM_TIER.skip_unless_asked(config, items, vllm_unavailable_reason)


# -------------------------------------------------------------------------------------------------
# The cluster and its images


@dataclass
class KindCluster:
    kubeconfig: Path
    kube: Kube
    created: bool
    images: dict[str, str] = field(default_factory=dict)


@pytest.fixture(scope="session")
def kind_cluster() -> Iterator[KindCluster]:
    """The kind cluster with fake GPUs on its node (made, or found and kept)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"the kind tier cannot run: {reason}", pytrace=False)
    try:
        existed = kind_node.exists()
        kubeconfig = kind_node.up(gpus=GPUS)
    except (engine.EngineError, tools.ToolError) as exc:
        pytest.fail(f"the kind cluster did not come up: {exc}", pytrace=False)
    kube = Kube(kubeconfig, tools.KUBERNETES_NODE.path("kubectl"))
    try:
        yield KindCluster(kubeconfig, kube, created=not existed)
    finally:
        if not existed and not os.environ.get("KEEP_KIND_CLUSTER"):
            kind_node.down()


@pytest.fixture(scope="session")
def kind_images(kind_cluster: KindCluster) -> dict[str, str]:
    """The locally built images the tier runs, loaded into the node's containerd."""
    try:
        images = {
            "operator": operator_image.build(),
            "standin": operator_image.build_standin(),
            "prometheus": prometheus_image.build(),
        }
        kind_node.load(list(images.values()))
    except engine.EngineError as exc:
        pytest.fail(f"building or loading the images failed: {exc}", pytrace=False)
    kind_cluster.images = images
    return images


@pytest.fixture(scope="session")
def vllm_cpu_image(kind_cluster: KindCluster) -> str:
    """vLLM for CPUs with the tiny model (``images/engine-vllm-cpu``), built when missing and loaded."""
    reason = vllm_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the real-engine image cannot be built here: {reason}", pytrace=False)
    try:
        tag = vllm_image.build()
        if not kind_node.loaded(tag):  # several GB: import only what the node lacks
            started = time.monotonic()
            kind_node.load([tag])
            print(f"kind load of {tag} took {time.monotonic() - started:.0f}s")
    except engine.EngineError as exc:
        pytest.fail(f"building or loading {vllm_image.REPOSITORY} failed: {exc}", pytrace=False)
    kind_cluster.images["vllm"] = tag
    return tag


@pytest.fixture(scope="session")
def kube(kind_cluster: KindCluster) -> Kube:
    """The admin client of the kind cluster (replaces the local cluster's ``kube`` in this tier)."""
    return kind_cluster.kube


# -------------------------------------------------------------------------------------------------
# Prometheus in the cluster


@dataclass
class ClusterPrometheus:
    """The Prometheus in the cluster; queried through the API server's service proxy."""

    kube: Kube
    namespace: str
    names: manifests.PrometheusNames

    @property
    def url(self) -> str:
        """Where pods reach it."""
        return f"http://{self.names.service}.{self.namespace}.svc.cluster.local:{manifests.PROMETHEUS_PORT}"

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (empty when the query fails)."""
        import json
        import urllib.parse

        path = (
            f"/api/v1/namespaces/{self.namespace}/services/{self.names.service}:{manifests.PROMETHEUS_PORT}"
            f"/proxy/api/v1/query?query={urllib.parse.quote(expr)}"
        )
        out = self.kube.kubectl("get", "--raw", path, check=False)
        if out.returncode != 0:
            return []
        result: list[dict[str, Any]] = json.loads(out.stdout).get("data", {}).get("result", [])
        return result

    def value(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None


@pytest.fixture(scope="session")
def apps_namespace(kube: Kube) -> Iterator[str]:
    """The namespace of the tier's InferenceService (one per session: Prometheus is configured for it)."""
    name = unique_name("tg-kind-apps")
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        f"the default ServiceAccount in {name}",
        lambda: kube.get("v1", "ServiceAccount", "default", name),
        timeout=30,
    )
    yield name
    for obj in kube.list(*ISVC, name):  # the operator may be gone: nobody else releases its finalizer
        if obj["metadata"].get("finalizers"):
            kube.patch(*ISVC, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, name)
    kube.delete("v1", "Namespace", name)


@pytest.fixture(autouse=True)
def _report_apps_namespace(request: pytest.FixtureRequest, kube: Kube, apps_namespace: str) -> None:
    """A failing test's report shows the apps namespace's objects and events (e2e/conftest.py's hook)."""
    request.node._tg_kube = kube
    request.node._tg_namespace = apps_namespace


@pytest.fixture(scope="session")
def prometheus(kube: Kube, kind_images: dict[str, str], apps_namespace: str) -> Iterator[ClusterPrometheus]:
    """Prometheus (Debian's package, as an image built here) running in the cluster, scraping the pods
    of the InferenceService :data:`SERVICE` in the apps namespace through its headless Service."""
    namespace = unique_name("tg-prometheus")
    names = manifests.PrometheusNames()
    objects = manifests.prometheus(namespace, names, kind_images["prometheus"], [(apps_namespace, SERVICE)])
    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for obj in objects:
        kube.apply(obj)
    kube.apply(manifests.metrics_service(SERVICE, apps_namespace))
    prom = ClusterPrometheus(kube, namespace, names)
    try:
        wait_for(
            "Prometheus in the cluster to be Ready",
            lambda: _deployment_available(kube, names.deployment, namespace),
            timeout=120,
            details=lambda: kube.describe_namespace(namespace) + _logs(kube, names.deployment, namespace),
        )
        wait_for(
            "Prometheus to answer through its Service",
            lambda: prom.value("vector(1)") == 1.0,
            timeout=60,
            details=lambda: kube.describe_namespace(namespace),
        )
        yield prom
    finally:
        kube.delete("v1", "Namespace", namespace)


def load_summary(kube: Kube, load_name: str, namespace: str, *, timeout: float) -> dict[str, Any]:
    """Wait for the load pod to succeed and return the summary its last log line holds (printed
    for the figures in docs/testing.md)."""

    def load_phase() -> str | None:
        phase = (kube.get("v1", "Pod", load_name, namespace) or {}).get("status", {}).get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    assert wait_for("the load pod to finish", load_phase, timeout=timeout) == "Succeeded"
    summary: dict[str, Any] = json.loads(
        kube.kubectl("logs", load_name, namespace=namespace).stdout.strip().splitlines()[-1]
    )
    print(f"load: {json.dumps(summary)}")
    return summary


def _logs(kube: Kube, deployment: str, namespace: str) -> str:
    out = kube.kubectl("logs", f"deployment/{deployment}", "--tail=20", namespace=namespace, check=False)
    return f"\n$ kubectl logs deployment/{deployment}\n{out.stdout}{out.stderr}"


def _deployment_available(kube: Kube, name: str, namespace: str) -> bool:
    dep = kube.get("apps/v1", "Deployment", name, namespace) or {}
    status = dep.get("status") or {}
    return bool(status.get("readyReplicas")) and status.get("updatedReplicas") == status.get("replicas")


# -------------------------------------------------------------------------------------------------
# The chart


@dataclass
class HelmRelease:
    kube: Kube
    name: str
    namespace: str
    installed: bool = False

    def helm(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [
            str(tools.HELM.path("helm")),
            f"--kubeconfig={self.kube.kubeconfig}",
            "--namespace",
            self.namespace,
            *args,
        ]
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
        if check:
            assert out.returncode == 0, (
                f"`helm {' '.join(args)}` exited {out.returncode}:\n{out.stderr}{out.stdout}"
            )
        return out

    @property
    def selector(self) -> str:
        return f"app.kubernetes.io/instance={self.name}"

    def operator_pods(self) -> list[dict[str, Any]]:
        return self.kube.list(
            "v1", "Pod", self.namespace, labels=f"{self.selector},app.kubernetes.io/component=operator"
        )

    def uninstall(self) -> str:
        out = self.helm("uninstall", self.name, "--wait", "--timeout", "3m").stdout
        self.installed = False
        return out


def helm_values(images: dict[str, str], prometheus_url: str) -> list[str]:
    """``--set`` arguments: the local operator image and the cluster's Prometheus on a short window."""
    repository, tag = images["operator"].rsplit(":", 1)
    values = {
        "image.repository": repository,
        "image.tag": tag,
        "image.pullPolicy": "Never",  # loaded into the node; nothing may be pulled
        "prometheus.url": prometheus_url,
        "prometheus.rateWindow": RATE_WINDOW,
        "prometheus.timeoutSeconds": "2",
    }
    return [arg for key, value in values.items() for arg in ("--set", f"{key}={value}")]


@pytest.fixture(scope="session")
def release(kube: Kube, kind_images: dict[str, str], prometheus: ClusterPrometheus) -> Iterator[HelmRelease]:
    """The chart installed as a user would (``helm install --wait``), with the images built here."""
    rel = HelmRelease(kube, RELEASE, RELEASE_NAMESPACE)
    if rel.helm("status", rel.name, check=False).returncode == 0:  # left by an interrupted run
        rel.uninstall()
    started = time.monotonic()
    rel.helm(
        "install",
        rel.name,
        str(CHART),
        "--create-namespace",
        "--wait",
        "--timeout",
        "4m",
        *helm_values(kind_images, prometheus.url),
    )
    rel.installed = True
    print(f"helm install --wait took {time.monotonic() - started:.0f}s")
    kube.invalidate_discovery()
    try:
        yield rel
    finally:
        if rel.installed:
            with contextlib.suppress(AssertionError):
                rel.uninstall()
        kube.delete("v1", "Namespace", rel.namespace)
