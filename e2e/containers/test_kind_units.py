"""The kind tier's pure parts: the capability check, the runc wrapper's rewriting, the images' recipes."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType

from containers import engine, kind_node

STATUS_WITHOUT_SYS_RESOURCE = "Name:\tx\nCapBnd:\t000001fffeffffff\n"
STATUS_FULL = "Name:\tx\nCapBnd:\t000001ffffffffff\n"


def _capfilter() -> ModuleType:
    path = str(engine.CAPFILTER_SOURCE)
    loader = importlib.machinery.SourceFileLoader("runc_capfilter", path)
    spec = importlib.util.spec_from_loader("runc_capfilter", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_missing_capabilities_reads_the_bounding_set() -> None:
    assert engine.missing_capabilities(STATUS_WITHOUT_SYS_RESOURCE, last_cap=40) == [24]
    assert engine.missing_capabilities(STATUS_FULL, last_cap=40) == []


def test_wrapper_finds_the_subcommand_after_runcs_global_options() -> None:
    mod = _capfilter()
    args = ["--root", "/run/runc", "--log", "/x/log.json", "--log-format", "json", "--systemd-cgroup"]
    cmd, rest = mod.subcommand([*args, "create", "--bundle", "/b", "--pid-file", "/p", "id"])
    assert cmd == "create"
    assert mod.option(rest, "--bundle", "-b") == "/b"
    assert mod.option(["--process=/proc.json"], "--process", "-p") == "/proc.json"
    assert mod.subcommand(["--debug", "exec", "-p", "/f", "id"])[0] == "exec"


def test_wrapper_drops_only_the_missing_capability(tmp_path: Path) -> None:
    mod = _capfilter()
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    spec = {"process": {"capabilities": {k: list(caps) for k in ("bounding", "effective", "permitted")}}}
    (tmp_path / "config.json").write_text(json.dumps(spec))
    mod.rewrite(str(tmp_path / "config.json"), {"CAP_SYS_RESOURCE"}, process_file=False)
    out = json.loads((tmp_path / "config.json").read_text())
    assert out["process"]["capabilities"]["bounding"] == ["CAP_CHOWN", "CAP_SYS_ADMIN"]
    assert out["process"]["capabilities"]["permitted"] == ["CAP_CHOWN", "CAP_SYS_ADMIN"]
    process = {"args": ["sh"], "capabilities": {"effective": list(caps)}}
    (tmp_path / "process.json").write_text(json.dumps(process))
    mod.rewrite(str(tmp_path / "process.json"), {"CAP_SYS_RESOURCE"}, process_file=True)
    assert json.loads((tmp_path / "process.json").read_text())["capabilities"]["effective"] == [
        "CAP_CHOWN",
        "CAP_SYS_ADMIN",
    ]


def test_the_wrapper_knows_the_capability_names_in_kernel_order() -> None:
    names = _capfilter().NAMES
    assert names[24] == "SYS_RESOURCE"
    assert names[21] == "SYS_ADMIN"
    assert names[40] == "CHECKPOINT_RESTORE"


def test_component_images_carry_kubeadms_names_and_one_binary_each() -> None:
    images = {i.tag: i for i in kind_node.component_images()}
    assert "registry.k8s.io/kube-apiserver:v1.37.2" in images
    assert "registry.k8s.io/etcd:3.7.3-0" in images
    pause = images[kind_node.PAUSE_IMAGE]
    assert kind_node.dockerfile_for(pause, "base").startswith("FROM scratch\n")
    proxy = images["registry.k8s.io/kube-proxy:v1.37.2"]
    text = kind_node.dockerfile_for(proxy, "tailguard/python-base:bookworm")
    assert "iptables" in text
    assert 'ENTRYPOINT ["/usr/local/bin/kube-proxy"]' in text


def test_the_cluster_config_pins_the_etcd_tag_the_node_image_carries() -> None:
    text = kind_node.CLUSTER_CONFIG.read_text()
    assert f'imageTag: "{kind_node.ETCD_TAG}"' in text
    assert "failCgroupV1: false" in text
    containerd = (kind_node.NODE_DIR / "files" / "containerd-config.toml").read_text()
    assert f'sandbox = "{kind_node.PAUSE_IMAGE}"' in containerd


def test_containerd_name_makes_docker_hub_explicit() -> None:
    assert kind_node.containerd_name("tailguard/engine-vllm-cpu:0.32.0-abc") == (
        "docker.io/tailguard/engine-vllm-cpu:0.32.0-abc"
    )
    assert kind_node.containerd_name("busybox:1") == "docker.io/library/busybox:1"
    assert kind_node.containerd_name("registry.k8s.io/etcd:3.7.3-0") == "registry.k8s.io/etcd:3.7.3-0"
    assert kind_node.containerd_name("localhost:5000/x:1") == "localhost:5000/x:1"
    assert kind_node.containerd_name("localhost/x:1") == "localhost/x:1"
