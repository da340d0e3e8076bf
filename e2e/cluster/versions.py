"""Pinned versions of every component of the local test cluster.

Bumping a version here makes the next `make cluster-tools` build it into a fresh cache directory;
the old one stays until removed by hand (`make cluster-tools-clean`).
"""

from __future__ import annotations

from typing import Final

#: k8s.io/kubernetes release: kube-apiserver, kube-controller-manager, kube-scheduler.
#: Its staging modules (k8s.io/api, ...) are pinned to the matching v0.Y.Z.
KUBERNETES: Final = "v1.37.2"

#: sigs.k8s.io/kwok: fake nodes and the pod lifecycle on them (stands in for kubelets).
KWOK: Final = "v0.8.0"

#: helm.sh/helm/v3 (cmd/helm), for the chart tests.
HELM: Final = "v3.22.0"

#: go.etcd.io/etcd/server/v3, the etcd line Kubernetes 1.37 is built against. Debian's etcd-server
#: (3.4) is usable with TAILGUARD_ETCD=system but slows every watch (see tools.locate_etcd).
ETCD: Final = "v3.7.3"

# The kind tier (make kind-up; see docs/testing.md). The node runs the same Kubernetes release.

#: sigs.k8s.io/kind: creates the cluster from the node image built here.
KIND: Final = "v0.33.0"

#: github.com/containerd/containerd/v2: kubelet 1.36+ refuses containerd 1.x (Debian 12 has 1.6).
#: The 2.2 line still supports cgroup v1 hosts, as the project's machines are.
CONTAINERD: Final = "v2.2.9"

#: github.com/coredns/coredns, the version kubeadm v1.37 deploys.
COREDNS: Final = "v1.14.6"

#: The pod sandbox image's program (written here, see tools.build_pause); bumped when it changes.
PAUSE: Final = "1.0"

#: Debian packages installed by `make cluster-tools` when the binary is missing.
DEBIAN_PACKAGES: Final = {"prometheus": "prometheus", "openssl": "openssl"}

#: The Go toolchain the builds were verified with; an older one may fail on the modules' `go` line.
GO_MIN: Final = (1, 26)


def staging_version(kubernetes: str = KUBERNETES) -> str:
    """The staging modules' version for a Kubernetes release: v1.37.2 -> v0.37.2."""
    major, minor, patch = kubernetes.lstrip("v").split(".", 2)
    if major != "1":
        raise ValueError(f"unexpected Kubernetes version {kubernetes!r}")
    return f"v0.{minor}.{patch}"
