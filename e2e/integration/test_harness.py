"""The test ground itself: the cluster is what it claims to be, Prometheus scrapes loopback targets,
the operator also runs in-process, and two clusters coexist and stop without leftovers."""

from __future__ import annotations

import copy
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cluster import control_plane, versions
from cluster.prometheus import Prometheus
from lib.kube import Kube
from lib.operator import Identity, InProcessOperator
from lib.testbed import Testbed
from lib.wait import wait_for

pytestmark = pytest.mark.integration


def _local_only(testbed: Testbed) -> control_plane.Cluster:
    if testbed.local is None:
        pytest.skip("checks the local process cluster; this session runs against TAILGUARD_KUBECONFIG")
    return testbed.local


def test_local_cluster_runs_the_pinned_release_with_fake_gpu_nodes(testbed: Testbed, kube: Kube) -> None:
    cluster = _local_only(testbed)
    version = kube.kubectl_json("version")
    assert version["serverVersion"]["gitVersion"] == versions.KUBERNETES
    capacity = testbed.gpus_by_node()
    assert len(capacity) == testbed.pool.count
    assert set(capacity.values()) == {testbed.pool.gpus}
    for node in kube.list("v1", "Node", labels=dict([control_plane.FAKE_NODE_LABEL])):
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == testbed.pool.product
    # Loopback only: every port the harness opened is bound to 127.0.0.1.
    state = cluster.read_state()
    assert state is not None
    assert state.server.startswith("https://127.0.0.1:")
    # Idempotent: a second up() finds it running and changes nothing.
    again = cluster.up(testbed.pool)
    assert again.server == state.server
    assert again.processes == state.processes


def test_rbac_authorizer_is_on(testbed: Testbed, kube: Kube) -> None:
    out = kube.kubectl(
        "auth", "can-i", "list", "secrets", "--as=system:serviceaccount:default:default", check=False
    )
    assert out.stdout.strip() == "no"
    out = kube.kubectl("auth", "can-i", "get", "nodes", "--as=tailguard-e2e-nobody", check=False)
    assert out.stdout.strip() == "no"
    assert kube.kubectl("auth", "can-i", "get", "nodes").stdout.strip() == "yes"  # the admin is


class _Metrics(http.server.BaseHTTPRequestHandler):
    body = b'# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3\n'

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def metrics_target() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_prometheus_scrapes_a_loopback_target(prometheus: Prometheus, metrics_target: str) -> None:
    assert prometheus.url.startswith("http://127.0.0.1:")
    prometheus.set_targets([metrics_target], labels={"inference_service": "chat"})
    prometheus.wait_for_targets_up(1, timeout=30)
    result = wait_for(
        "the scraped gauge to be queryable",
        lambda: prometheus.query('vllm:num_requests_running{inference_service="chat"}'),
        timeout=15,
    )
    assert float(result[0]["value"][1]) == 3.0
    with pytest.raises(ValueError, match="loopback"):
        prometheus.set_targets(["10.0.0.1:8000"])


def test_operator_in_process_reconciles_an_example(
    kube: Kube,
    namespace: str,
    crd: dict[str, Any],
    operator_identity: Identity,
    examples: dict[str, dict[str, Any]],
) -> None:
    op = InProcessOperator(operator_identity, namespaces=[namespace])
    op.start()
    try:
        manifest = copy.deepcopy(examples["qwen-8b-dryrun"])
        kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), namespace=namespace)
        dep = wait_for(
            "the in-process operator to create the Deployment",
            lambda: kube.get("apps/v1", "Deployment", "qwen-8b-dryrun", namespace),
            timeout=30,
        )
        assert dep["spec"]["replicas"] == 2
        kube.delete("tailguard.dev/v1alpha1", "InferenceService", "qwen-8b-dryrun", namespace)
        wait_for(
            "the InferenceService to be deleted (its finalizer released)",
            lambda: (
                kube.get("tailguard.dev/v1alpha1", "InferenceService", "qwen-8b-dryrun", namespace) is None
            ),
            timeout=30,
        )
    finally:
        op.stop()


def test_a_second_cluster_runs_beside_and_leaves_nothing_behind(testbed: Testbed, tmp_path: Path) -> None:
    first = _local_only(testbed)
    second = control_plane.Cluster(tmp_path / "second")
    try:
        state = second.up(control_plane.NodePool(count=1, gpus=2), die_with_parent=True)
        first_state = first.read_state()
        assert first_state is not None
        assert not set(state.ports.values()) & set(first_state.ports.values())
        assert second.is_running()
        assert first.is_running()
    finally:
        second.down(quiet=True)
    assert not second.is_running()
    assert second._strays() == [], "processes of the second cluster survived down()"
    assert first.is_running(), "stopping the second cluster touched the first"
