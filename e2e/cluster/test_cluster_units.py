"""The harness's pure parts, without a cluster: version mapping, kwok stages, fake nodes, kubeconfigs, waits."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import pytest
import yaml

from cluster import control_plane, tools, versions
from cluster.prometheus import Prometheus
from lib.wait import WaitTimeoutError, stays, wait_for

POD_STAGE = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  delay:
    durationMilliseconds: 1000
    durationFrom:
      expressionFrom: '.metadata.annotations["pod-delete.stage.kwok.x-k8s.io/delay"]'
    jitterDurationMilliseconds: 5000
    jitterDurationFrom:
      expressionFrom: '.metadata.deletionTimestamp'
  next:
    delete: true
"""

NODE_STAGE = """kind: Stage
spec:
  delay:
    durationMilliseconds: 600000
    jitterDurationMilliseconds: 610000
"""


def test_staging_version_follows_the_kubernetes_minor() -> None:
    assert versions.staging_version("v1.37.2") == "v0.37.2"
    assert versions.staging_version(versions.KUBERNETES).startswith("v0.")
    with pytest.raises(ValueError, match="unexpected"):
        versions.staging_version("v2.0.0")


@pytest.mark.parametrize(
    ("package", "binary"),
    [
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("go.etcd.io/etcd/server/v3", "server"),
        ("helm.sh/helm/v3/cmd/helm", "helm"),
    ],
)
def test_go_build_names_binaries_like_go_does(package: str, binary: str) -> None:
    assert tools._default_binary_name(package) == binary


def test_pod_stages_are_shortened_and_node_stages_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TAILGUARD_KWOK_POD_DELAY_MS", raising=False)
    pod = tmp_path / "pod-delete.yaml"
    pod.write_text(POD_STAGE)
    node = tmp_path / "node-heartbeat.yaml"
    node.write_text(NODE_STAGE)
    short = yaml.safe_load(control_plane.kwok_stage_text(pod))
    assert short["spec"]["delay"] == {
        "durationMilliseconds": 100,
        "durationFrom": {"expressionFrom": '.metadata.annotations["pod-delete.stage.kwok.x-k8s.io/delay"]'},
    }
    assert control_plane.kwok_stage_text(node) == NODE_STAGE.strip()
    monkeypatch.setenv("TAILGUARD_KWOK_POD_DELAY_MS", "upstream")
    assert control_plane.kwok_stage_text(pod) == POD_STAGE.strip()


def test_fake_node_advertises_gpus_and_is_managed_by_kwok() -> None:
    pool = control_plane.NodePool(count=2, gpus=4)
    node = control_plane.fake_node(pool.names()[1], pool)
    assert node["metadata"]["name"] == "gpu-node-1"
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert node["status"]["capacity"] == node["status"]["allocatable"]
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == pool.product


def test_node_pool_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TAILGUARD_FAKE_NODES", "2")
    monkeypatch.setenv("TAILGUARD_GPUS_PER_NODE", "1")
    assert control_plane.NodePool.from_env() == control_plane.NodePool(count=2, gpus=1)


def test_free_ports_are_distinct_and_bindable() -> None:
    ports = control_plane.free_ports(6)
    assert len(set(ports)) == 6
    assert all(1024 < p < 65536 for p in ports)


def test_kubeconfig_embeds_everything() -> None:
    text = control_plane.kubeconfig_yaml(
        server="https://127.0.0.1:6443", ca=b"CA", user="admin", cert=b"CERT", key=b"KEY"
    )
    cfg = yaml.safe_load(text)
    assert cfg["current-context"] == control_plane.CLUSTER_NAME
    assert base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"]) == b"CA"
    assert base64.b64decode(cfg["users"][0]["user"]["client-key-data"]) == b"KEY"


def test_prometheus_scrapes_only_loopback(tmp_path: Path) -> None:
    prom = Prometheus(tmp_path)
    prom.set_targets(["127.0.0.1:8000", "localhost:9"])
    assert '"127.0.0.1:8000"' in prom.targets_file.read_text()
    with pytest.raises(ValueError, match="loopback"):
        prom.set_targets(["192.168.1.5:8000"])


def test_cache_root_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TAILGUARD_CACHE_DIR", str(tmp_path / "c"))
    assert tools.bin_root() == tmp_path / "c" / "bin"
    assert tools.KWOK.directory == tmp_path / "c" / "bin" / f"kwok-{versions.KWOK}"
    monkeypatch.delenv("TAILGUARD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert tools.cache_root() == tmp_path / "x" / "tailguard"


def test_wait_for_says_what_it_waited_for() -> None:
    assert wait_for("a value", lambda: 3, timeout=1) == 3
    with pytest.raises(WaitTimeoutError) as info:
        wait_for("the answer", lambda: None, timeout=0.2, interval=0.05, details=lambda: "status: {}")
    message = str(info.value)
    assert "waiting for the answer" in message
    assert "last value None" in message
    assert "status: {}" in message


def test_stays_fails_when_the_condition_stops_holding() -> None:
    values = iter([True, True, False])
    with pytest.raises(AssertionError, match="stopped holding"):
        stays("the count", lambda: next(values), duration=5, interval=0.01)


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range(tmp_path: Path) -> None:
    lo, hi = control_plane.ephemeral_range()
    assert 1024 <= lo < hi
    ports = control_plane.free_ports(6)
    assert len(set(ports)) == 6
    assert all(lo - control_plane.PORT_POOL <= p < lo for p in ports), (ports, lo)
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    unreadable = tmp_path / "missing"
    assert control_plane.ephemeral_range(unreadable) == (32768, 60999)
    (tmp_path / "range").write_text("40000\t50000\n")
    assert control_plane.ephemeral_range(tmp_path / "range") == (40000, 50000)
