"""The cluster a test session runs against: a fresh local one, a reused one, or any kubeconfig.

* default: a private local cluster under the session's temporary directory, stopped at the end;
* ``TAILGUARD_REUSE_CLUSTER=1``: the cluster of ``make cluster-up`` when it is running (left running),
  else a private one as above;
* ``TAILGUARD_KUBECONFIG=path``: that cluster (kind, a real one). Unless ``TAILGUARD_FAKE_NODES=0``,
  the locally built kwok runs on this machine against it and adds the fake GPU nodes, so the same
  tests see the same capacity; both are removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cluster import control_plane, tools
from cluster.control_plane import FAKE_NODE_LABEL, GPU_RESOURCE, KWOK_ANNOTATION, NodePool
from lib.kube import Kube
from lib.wait import wait_for

REQUIRE_ENV = "TAILGUARD_REQUIRE_CLUSTER"


def cluster_unavailable_reason() -> str | None:
    """Why the integration tier cannot run here, or None when it can."""
    if os.environ.get("TAILGUARD_KUBECONFIG"):
        kubeconfig = Path(os.environ["TAILGUARD_KUBECONFIG"]).expanduser()
        if not kubeconfig.is_file():
            return f"TAILGUARD_KUBECONFIG={kubeconfig} does not exist"
        return None
    gaps = tools.missing()
    if gaps:
        return "local cluster binaries missing (" + "; ".join(gaps) + "); run `make cluster-tools`"
    return None


@dataclass
class Testbed:
    """What the session fixture hands to tests."""

    __test__ = False  # not a test class, despite the name

    kubeconfig: Path
    kube: Kube
    workdir: Path
    pool: NodePool
    kind: str  # "local", "reused" or "external"
    local: control_plane.Cluster | None = None
    _kwok: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def total_gpus(self) -> int:
        """GPUs the fake (or, with TAILGUARD_FAKE_NODES=0, real) nodes advertise in total."""
        nodes = self.kube.list("v1", "Node")
        return sum(int((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0)) for n in nodes)

    def gpus_by_node(self) -> dict[str, int]:
        """Allocatable GPUs of every node that has any."""
        out = {}
        for n in self.kube.list("v1", "Node"):
            gpus = int((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0))
            if gpus > 0:
                out[n["metadata"]["name"]] = gpus
        return out

    def gpu_node_names(self) -> list[str]:
        return [
            n["metadata"]["name"]
            for n in self.kube.list("v1", "Node")
            if int((n.get("status") or {}).get("allocatable", {}).get(GPU_RESOURCE, 0)) > 0
        ]

    def logs_hint(self) -> str:
        if self.local is not None:
            return f"control-plane logs: {self.local.logs_dir}"
        return f"cluster from {self.kubeconfig}"


def start(workdir: Path) -> Testbed:
    """Bring up (or attach to) the session's cluster."""
    workdir.mkdir(parents=True, exist_ok=True)
    pool = NodePool.from_env()
    external = os.environ.get("TAILGUARD_KUBECONFIG")
    if external:
        return _attach(Path(external).expanduser(), workdir, pool)
    found = tools.locate()
    if os.environ.get("TAILGUARD_REUSE_CLUSTER") == "1":
        shared = control_plane.Cluster()
        if shared.is_running():
            shared.ensure_nodes(pool)
            return Testbed(
                shared.kubeconfig, Kube(shared.kubeconfig, found.kubectl), workdir, pool, "reused", shared
            )
    local = control_plane.Cluster(workdir / "cluster")
    local.up(pool, die_with_parent=True)
    return Testbed(local.kubeconfig, Kube(local.kubeconfig, found.kubectl), workdir, pool, "local", local)


def stop(bed: Testbed) -> None:
    if bed.kind == "local" and bed.local is not None:
        bed.local.down(quiet=True)
    elif bed.kind == "external":
        _detach(bed)


def _kubectl_for_external() -> Path:
    try:
        return tools.locate().kubectl
    except tools.ToolError:
        here = tools._venv_kubectl()
        if here is None:
            raise
        return here


def _attach(kubeconfig: Path, workdir: Path, pool: NodePool) -> Testbed:
    kube = Kube(kubeconfig, _kubectl_for_external())
    bed = Testbed(kubeconfig, kube, workdir, pool, "external")
    if os.environ.get("TAILGUARD_FAKE_NODES") == "0":
        return bed
    if not tools.KWOK.installed():
        raise tools.ToolError(f"kwok {tools.KWOK.version} is not built; run `make cluster-tools`")
    stages = sorted((tools.KWOK.directory / "stages").glob("*.yaml"))
    config = workdir / "kwok.yaml"
    config.write_text("\n---\n".join(control_plane.kwok_stage_text(s) for s in stages) + "\n")
    log = open(workdir / "kwok.log", "w")  # noqa: SIM115 (lives as long as the process)
    bed._kwok = subprocess.Popen(
        [
            str(tools.KWOK.path("kwok")),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION[0]}={KWOK_ANNOTATION[1]}",
            f"--cidr={control_plane.POD_CIDR}",
            "--node-ip=127.0.0.1",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    for name in pool.names():
        # No taint: tailguard's pods must land here untouched. Only pods asking for GPUs are sure
        # to, since the real nodes of a kind cluster advertise none.
        kube.kubectl("apply", "-f", "-", input=json.dumps(control_plane.fake_node(name, pool)))
    selector = f"{FAKE_NODE_LABEL[0]}={FAKE_NODE_LABEL[1]}"

    def ready() -> bool:
        nodes = kube.list("v1", "Node", labels=selector)
        return len(nodes) >= pool.count and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
            for n in nodes
        )

    wait_for(f"{pool.count} fake GPU nodes Ready (kwok log: {workdir / 'kwok.log'})", ready, timeout=60)
    return bed


def _detach(bed: Testbed) -> None:
    if bed._kwok is None:
        return
    bed.kube.kubectl("delete", "nodes", "-l", f"{FAKE_NODE_LABEL[0]}={FAKE_NODE_LABEL[1]}", check=False)
    control_plane.stop_process_group(bed._kwok.pid)
    with contextlib.suppress(subprocess.TimeoutExpired):
        bed._kwok.wait(5)
    bed._kwok = None
