"""Fixtures for the tiers that need a cluster (markers ``integration`` and ``e2e``).

The session gets one cluster (see ``lib/testbed.py`` for fresh / reused / any-kubeconfig), each test
its own namespace, and, when it asks for ``operator``, a ``tailguard run`` subprocess authenticated as
the operator's ServiceAccount with the chart's RBAC. Without the cluster binaries these tests are
skipped with the reason, unless ``TAILGUARD_REQUIRE_CLUSTER`` is set (CI): then they fail.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster.prometheus import Prometheus
from lib import testbed as testbed_mod
from lib.kube import Kube, load_yaml_documents, unique_name
from lib.operator import Identity, OperatorProcess, provision_identity
from lib.wait import wait_for

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "crds"
EXAMPLES_DIR = REPO / "examples"
CLUSTER_MARKERS = ("integration", "e2e", "images")
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


def _needs_cluster(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(m) for m in CLUSTER_MARKERS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not any(_needs_cluster(i) for i in items):
        return
    reason = testbed_mod.cluster_unavailable_reason()
    if reason is None or os.environ.get(testbed_mod.REQUIRE_ENV):
        return  # with TAILGUARD_REQUIRE_CLUSTER the session fixture fails with the reason instead
    skip = pytest.mark.skip(reason=f"{reason} (TAILGUARD_REQUIRE_CLUSTER=1 turns this skip into a failure)")
    for item in items:
        if _needs_cluster(item):
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """On a failure, attach what a person would look at: the namespace's objects and events, the operator log."""
    report = yield
    if report.when == "call" and report.failed:
        kube: Kube | None = getattr(item, "_tg_kube", None)
        namespace: str | None = getattr(item, "_tg_namespace", None)
        if kube is not None and namespace is not None:
            with contextlib.suppress(Exception):
                report.sections.append(
                    ("tailguard: namespace " + namespace, kube.describe_namespace(namespace))
                )
        op: OperatorProcess | None = getattr(item, "_tg_operator", None)
        if op is not None:
            report.sections.append((f"tailguard: operator log {op.log_file}", op.log_tail(80)))
    return report


# -------------------------------------------------------------------------------------------------
# Session


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testbed_mod.Testbed]:
    """The session's cluster. Its logs and the operator's are kept under $TAILGUARD_ARTIFACTS_DIR when
    set, else under pytest's temporary directory (pytest keeps the last three runs)."""
    reason = testbed_mod.cluster_unavailable_reason()
    if reason is not None:
        pytest.fail(f"{testbed_mod.REQUIRE_ENV} is set but the cluster cannot start: {reason}", pytrace=False)
    artifacts = os.environ.get("TAILGUARD_ARTIFACTS_DIR")
    if artifacts:  # kept after the run (CI uploads it); pytest's own temp dirs are pruned
        workdir = Path(artifacts).expanduser() / time.strftime("testbed-%Y%m%d-%H%M%S")
    else:
        workdir = tmp_path_factory.mktemp("testbed")
    bed = testbed_mod.start(workdir)
    try:
        yield bed
    finally:
        testbed_mod.stop(bed)


@pytest.fixture(scope="session")
def kube(testbed: testbed_mod.Testbed) -> Kube:
    """The admin client of the session's cluster."""
    return testbed.kube


@pytest.fixture(scope="session")
def crd(kube: Kube) -> dict[str, Any]:
    """The InferenceService CRD from crds/, applied and Established."""
    files = sorted(CRD_DIR.glob("*.yaml"))
    assert files, f"no CRD in {CRD_DIR}"
    kube.kubectl("apply", "--server-side", "--force-conflicts", *(f"-f={f}" for f in files))
    name = load_yaml_documents(files[0])[0]["metadata"]["name"]

    def established() -> dict[str, Any] | None:
        obj = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
        conds = {c["type"]: c["status"] for c in ((obj or {}).get("status") or {}).get("conditions") or []}
        return obj if conds.get("Established") == "True" else None

    obj = wait_for(f"CRD {name} to be Established", established, timeout=30)
    kube.invalidate_discovery()
    return obj


@pytest.fixture(scope="session")
def operator_identity(kube: Kube, testbed: testbed_mod.Testbed) -> Identity:
    """ServiceAccount tailguard-system/tailguard-operator bound to tailguard.k8s.rbac's ClusterRole."""
    return provision_identity(kube, testbed.workdir / "operator")


@pytest.fixture(scope="session")
def examples() -> dict[str, dict[str, Any]]:
    """The manifests in examples/, by metadata.name."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for doc in load_yaml_documents(path):
            out[doc["metadata"]["name"]] = doc
    return out


# -------------------------------------------------------------------------------------------------
# Per test


def _namespace_name(request: pytest.FixtureRequest) -> str:
    return unique_name("tg-" + request.node.name.replace("test_", "", 1))


def _delete_namespace(kube: Kube, name: str, timeout: float = 90) -> None:
    """Delete, and wait until its pods are gone, so the next test sees every GPU free again.

    The namespace itself finishes terminating in the background (a few more seconds).
    """
    kube.delete("v1", "Namespace", name)
    wait_for(
        f"the pods of namespace {name} to be deleted (they hold GPUs)",
        lambda: not kube.list("v1", "Pod", name),
        timeout=timeout,
        details=lambda: kube.describe_namespace(name),
    )


@pytest.fixture
def namespace(kube: Kube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (and waited for) afterwards."""
    name = _namespace_name(request)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "labels": {"tailguard.dev/e2e": "true"}},
        }
    )
    request.node._tg_kube = kube
    request.node._tg_namespace = name
    wait_for(
        f"the default ServiceAccount in {name}",
        lambda: kube.get("v1", "ServiceAccount", "default", name),
        timeout=30,
    )
    yield name
    _strip_leftover_finalizers(kube, name)
    _delete_namespace(kube, name)


def _strip_leftover_finalizers(kube: Kube, namespace: str) -> None:
    """Without a running operator nobody removes kopf's finalizer and the namespace never goes away."""
    with contextlib.suppress(Exception):
        for obj in kube.list(*ISVC, namespace):
            if obj["metadata"].get("finalizers"):
                kube.patch(*ISVC, obj["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace)


@pytest.fixture(scope="module")
def operator_process(
    crd: dict[str, Any],
    operator_identity: Identity,
    testbed: testbed_mod.Testbed,
    request: pytest.FixtureRequest,
) -> Iterator[OperatorProcess]:
    """One ``tailguard run`` (all namespaces) per test module, as the operator's ServiceAccount."""
    log = testbed.workdir / "operator-logs" / f"{request.node.name.replace('/', '_')}.log"
    op = OperatorProcess(operator_identity, log)
    op.start()
    yield op
    op.stop()


@pytest.fixture
def operator(
    operator_process: OperatorProcess, namespace: str, kube: Kube, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """The module's operator, running, for one test (which may stop, kill or restart it).

    Teardown deletes the test's InferenceServices while the operator runs (so it releases its
    finalizers and the namespace can go), and fails the test if the API server refused the operator
    anything during it: the RBAC the chart ships must be enough.
    """
    op = operator_process
    if not op.running:
        op.start()
    offset = len(op.log_text())
    request.node._tg_operator = op
    yield op
    if not op.running:
        op.start()
    for obj in kube.list(*ISVC, namespace):
        kube.delete(*ISVC, obj["metadata"]["name"], namespace)
    wait_for(
        f"the operator to finish deleting the InferenceServices in {namespace}",
        lambda: not kube.list(*ISVC, namespace),
        timeout=30,
        details=lambda: op.log_tail(),
    )
    refused = op.forbidden_lines(since=offset)
    assert not refused, (
        f"the API server refused the operator ({op.identity.username}) with the chart's RBAC; "
        f"missing permissions in tailguard.k8s.rbac? Log {op.log_file}:\n" + "\n".join(refused[:20])
    )


@pytest.fixture
def prometheus(testbed: testbed_mod.Testbed, request: pytest.FixtureRequest) -> Iterator[Prometheus]:
    """A Prometheus on loopback for one test, scraping (every second) what ``set_targets`` lists;
    ``reload(scrape_configs)`` swaps in a whole configuration."""
    prom = Prometheus(testbed.workdir / "prometheus" / request.node.name.replace("/", "_"))
    prom.start(die_with_parent=True)
    yield prom
    prom.stop()
