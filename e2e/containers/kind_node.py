"""A kind cluster made entirely on this machine: ``make kind-node-image``, ``kind-up``, ``kind-down``.

No registry is reachable here, so the node image and every image the cluster runs are built locally:

* the binaries come from their Go modules (``cluster.tools``): kind, kubelet/kubeadm/kubectl/kube-proxy
  and the control plane at the pinned Kubernetes release, containerd 2, etcd, CoreDNS, and a pause
  program of our own;
* the control-plane, kube-proxy, etcd and CoreDNS images are each one binary on the local Debian
  base (``containers.base``; kube-proxy adds Debian's iptables), pause is its static binary alone;
  they are saved into one archive that the node image carries and imports into containerd at boot;
* the node image (``images/kind-node/Dockerfile``) is that base with Debian's systemd, runc and CNI
  plugins, and the binaries above.

Everything is cached: the node image carries a label with the hash of its recipe (versions, the
binaries' build stamps, the files under ``images/kind-node``, the base image), and a second build with
the same recipe does nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cluster import tools, versions
from containers import base, engine
from containers.engine import EngineError, Progress, say

REPO = Path(__file__).resolve().parents[2]
NODE_DIR = REPO / "images" / "kind-node"
NODE_REPOSITORY = "tailguard/kind-node"
RECIPE_LABEL = "dev.tailguard.kind-node.recipe"
CLUSTER_CONFIG = REPO / "e2e" / "kind" / "tailguard-cluster.yaml"
#: The sandbox image containerd's configuration names (images/kind-node/files/containerd-config.toml).
PAUSE_IMAGE = f"tailguard.local/pause:{versions.PAUSE}"
#: etcd's image tag as kubeadm spells them; the cluster configuration sets it (kubeadm's default
#: for v1.37 is 3.7.0-0, the build here is the pinned ETCD).
ETCD_TAG = versions.ETCD.lstrip("v") + "-0"
GPUS_DEFAULT = 8


def node_image() -> str:
    return os.environ.get("TAILGUARD_KIND_NODE_IMAGE") or f"{NODE_REPOSITORY}:{versions.KUBERNETES}"


def cluster_name() -> str:
    return os.environ.get("TAILGUARD_KIND_CLUSTER", "tailguard")


def state_dir() -> Path:
    return tools.cache_root() / "kind" / cluster_name()


def kubeconfig() -> Path:
    return state_dir() / "kubeconfig"


@dataclass(frozen=True)
class ComponentImage:
    """One image of the cluster: a binary on a base, run as ``entrypoint``."""

    tag: str
    binary: Path
    dest: str
    base: str  # "debian" (the local base) or "scratch"
    packages: tuple[str, ...] = ()


def component_images() -> list[ComponentImage]:
    k8s = versions.KUBERNETES
    cp = tools.KUBERNETES
    node = tools.KUBERNETES_NODE
    return [
        ComponentImage(f"registry.k8s.io/{b}:{k8s}", cp.path(b), f"/usr/local/bin/{b}", "debian")
        for b in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ] + [
        # kube-proxy programs Services with iptables (Debian's, nft backend, as the node's).
        ComponentImage(
            f"registry.k8s.io/kube-proxy:{k8s}",
            node.path("kube-proxy"),
            "/usr/local/bin/kube-proxy",
            "debian",
            ("iptables", "conntrack"),
        ),
        ComponentImage(
            f"registry.k8s.io/etcd:{ETCD_TAG}", tools.ETCD.path("etcd"), "/usr/local/bin/etcd", "debian"
        ),
        ComponentImage(
            f"registry.k8s.io/coredns/coredns:{versions.COREDNS}",
            tools.COREDNS.path("coredns"),
            "/coredns",
            "debian",
        ),
        ComponentImage(PAUSE_IMAGE, tools.PAUSE.path("pause"), "/pause", "scratch"),
    ]


def dockerfile_for(image: ComponentImage, base_image: str) -> str:
    lines = [f"FROM {'scratch' if image.base == 'scratch' else base_image}"]
    if image.packages:
        lines.append(
            "RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
            f"--no-install-recommends {' '.join(image.packages)} && apt-get clean && rm -rf /var/lib/apt/lists/*"
        )
    lines += [
        f"COPY {image.binary.name} {image.dest}",
        "LABEL dev.tailguard.built-locally=true",
        f'ENTRYPOINT ["{image.dest}"]',
    ]
    return "\n".join(lines) + "\n"


NODE_COMPONENTS = (
    tools.KUBERNETES,
    tools.KUBERNETES_NODE,
    tools.ETCD,
    tools.CONTAINERD,
    tools.COREDNS,
    tools.PAUSE,
)


def ensure_binaries(progress: Progress = say) -> None:
    """Build what the node image and ``kind`` need (cached; cold, the Go builds take many minutes)."""
    names = ["kubernetes", "etcd", "kubernetes-node", "containerd", "coredns", "pause", "kind"]
    tools.ensure_components(names, progress=progress)


def recipe(base_id: str) -> str:
    """Hash of everything the node image is made of; the image carries it as a label."""
    h = hashlib.sha256()
    h.update(base_id.encode())
    for component in (*NODE_COMPONENTS, tools.KIND):
        h.update(f"{component.name}-{component.version}".encode())
        h.update((component.directory / ".complete").read_bytes())
    for path in sorted(p for p in NODE_DIR.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(NODE_DIR)).encode())
        h.update(path.read_bytes())
    for image in component_images():
        h.update(dockerfile_for(image, "base").encode())
    return h.hexdigest()[:16]


def _docker(*args: str, check: bool = True, capture: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([engine.docker_cli(), *args], capture_output=capture, text=True, check=False)
    if check and out.returncode != 0:
        raise EngineError(
            f"docker {' '.join(args)} failed:\n{(out.stdout or '')[-3000:]}{(out.stderr or '')[-3000:]}"
        )
    return out


def image_label(image: str, label: str) -> str | None:
    out = _docker(
        "image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', image, check=False
    )
    return out.stdout.strip() if out.returncode == 0 else None


def _build(context: Path, tag: str, log: Path, extra: list[str] | None = None) -> None:
    cmd = [engine.build_cli(), "build", "--progress=plain", "-t", tag, *(extra or []), str(context)]
    with open(log, "a") as fh:
        fh.write(f"\n$ {' '.join(cmd)}\n")
        fh.flush()
        rc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ, DOCKER_BUILDKIT="1")
        ).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise EngineError(f"building {tag} failed (exit {rc}); {log}:\n{tail}")


def build(force: bool = False, no_cache: bool = False, progress: Progress = say) -> str:
    """The node image, built unless one with the same recipe exists. Returns its name.

    ``force`` builds even so; ``no_cache`` also makes Docker redo every step (fresh Debian packages).
    """
    engine.ensure(progress)
    ensure_binaries(progress)
    base_image = base.ensure(progress=progress)
    base_id = _docker("image", "inspect", "--format", "{{.Id}}", base_image).stdout.strip()
    want = recipe(base_id)
    name = node_image()
    if not (force or no_cache) and image_label(name, RECIPE_LABEL) == want:
        progress(f"{name}: current (recipe {want})")
        return name
    started = time.monotonic()
    logs = tools.cache_root() / "images"
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / "kind-node-build.log"
    log.write_text(f"kind node image {name}, recipe {want}\n")
    progress(f"building {name} (recipe {want}; log {log})")
    with tempfile.TemporaryDirectory(prefix="kind-node-") as tmp:
        work = Path(tmp)
        tags: list[str] = []
        for image in component_images():
            ctx = work / "img" / image.tag.replace("/", "_").replace(":", "_")
            ctx.mkdir(parents=True)
            shutil.copy2(image.binary, ctx / image.binary.name)
            (ctx / "Dockerfile").write_text(dockerfile_for(image, base_image))
            progress(f"  image {image.tag}")
            _build(ctx, image.tag, log, ["--no-cache"] if no_cache else [])
            tags.append(image.tag)
        node = work / "node"
        node.mkdir()
        shutil.copytree(NODE_DIR / "files", node / "files", symlinks=True)
        shutil.copy2(NODE_DIR / "Dockerfile", node / "Dockerfile")
        (node / "bin").mkdir()
        for component in (tools.KUBERNETES_NODE, tools.CONTAINERD):
            for binary in component.binaries:
                if binary != "kube-proxy":
                    shutil.copy2(component.path(binary), node / "bin" / binary)
        (node / "version").write_text(versions.KUBERNETES + "\n")
        progress(f"  saving {len(tags)} images for the node's containerd")
        _docker("save", "-o", str(node / "images.tar"), *tags)
        progress(f"  node image {name}")
        _build(
            node,
            name,
            log,
            ["--build-arg", f"BASE_IMAGE={base_image}", "--label", f"{RECIPE_LABEL}={want}"]
            + (["--no-cache"] if no_cache else []),
        )
    size = int(_docker("image", "inspect", "--format", "{{.Size}}", name).stdout.strip())
    progress(f"{name}: built in {time.monotonic() - started:.0f}s, {size / 1e6:.0f} MB")
    return name


# --------------------------------------------------------------------------------------------------
# The cluster


def kind() -> str:
    tools.ensure_components(["kind"])
    return str(tools.KIND.path("kind"))


def _kind(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([kind(), *args], capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise EngineError(f"kind {' '.join(args)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out


def exists() -> bool:
    return cluster_name() in _kind("get", "clusters").stdout.split()


def control_plane() -> str:
    return f"{cluster_name()}-control-plane"


def node_running() -> bool:
    out = _docker("inspect", "--format", "{{.State.Running}}", control_plane(), check=False)
    return out.stdout.strip() == "true"


def _kubectl(*args: str) -> subprocess.CompletedProcess[str]:
    kubectl = tools.KUBERNETES_NODE.path("kubectl")
    return subprocess.run(
        [str(kubectl), f"--kubeconfig={kubeconfig()}", *args], capture_output=True, text=True, check=False
    )


def gpu_capacity() -> str:
    out = _kubectl("get", "node", control_plane(), "-o", r"jsonpath={.status.allocatable.nvidia\.com/gpu}")
    return out.stdout.strip() if out.returncode == 0 else ""


def set_fake_gpus(count: int, timeout_s: float = 60.0, progress: Progress = say) -> None:
    """Advertise ``count`` nvidia.com/gpu on the node (kept by the node's tailguard-fake-gpus unit)."""
    count = max(count, 0)
    _docker("exec", control_plane(), "sh", "-c", f"echo {count} > /etc/tailguard/fake-gpus")
    want = str(count) if count else ""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gpu_capacity() == want:
            progress(f"{control_plane()}: {count} nvidia.com/gpu allocatable")
            return
        time.sleep(1)
    raise EngineError(f"the node did not advertise {count} nvidia.com/gpu within {timeout_s:.0f}s")


def up(gpus: int | None = None, progress: Progress = say) -> Path:
    """Create the cluster (or find it running); returns its kubeconfig."""
    started = time.monotonic()
    engine.ensure_privileged(progress)
    image = build(progress=progress)
    state_dir().mkdir(parents=True, exist_ok=True)
    if gpus is None:
        gpus = int(os.environ.get("TAILGUARD_KIND_GPUS", GPUS_DEFAULT))
    if exists() and not node_running():
        # e.g. after dockerd restarted: a kind node does not survive a restart of its systemd
        progress(f"kind cluster {cluster_name()} exists but its node is not running; recreating it")
        down(progress)
    if exists():
        progress(f"kind cluster {cluster_name()} exists; reusing it")
        kubeconfig().write_text(_kind("get", "kubeconfig", "--name", cluster_name()).stdout)
    else:
        progress(f"kind create cluster {cluster_name()} from {image}")
        t0 = time.monotonic()
        out = subprocess.run(
            [
                kind(),
                "create",
                "cluster",
                "--name",
                cluster_name(),
                "--image",
                image,
                "--config",
                str(CLUSTER_CONFIG),
                "--kubeconfig",
                str(kubeconfig()),
                "--wait",
                "180s",
                "--retain",  # a failed node stays for inspection (make kind-down removes it)
            ],
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise EngineError(
                f"kind create cluster failed (exit {out.returncode}); the node stays for inspection: "
                f"docker exec -it {control_plane()} journalctl -u kubelet -u containerd; "
                "make kind-down removes it"
            )
        progress(f"kind create cluster took {time.monotonic() - t0:.0f}s")
    set_fake_gpus(gpus, progress=progress)
    progress(f"kind cluster {cluster_name()} up in {time.monotonic() - started:.1f}s")
    return kubeconfig()


def down(progress: Progress = say) -> bool:
    if not exists():
        progress(f"no kind cluster {cluster_name()}")
        return False
    _kind("delete", "cluster", "--name", cluster_name())
    kubeconfig().unlink(missing_ok=True)
    progress(f"deleted kind cluster {cluster_name()}")
    return True


def loaded(image: str) -> bool:
    """Whether the node's containerd holds ``image`` under its name with the engine's image ID.

    ``kind load`` cannot tell (no crictl in the node) and imports every time, which for a
    several-GB image is minutes; kind's import names each image by its ID too, which is the check.
    """
    image_id = _docker("image", "inspect", "-f", "{{.Id}}", image, check=False).stdout.strip()
    listed = _docker("exec", control_plane(), "ctr", "-n", "k8s.io", "images", "ls", "-q", check=False)
    names = set(listed.stdout.split())
    return bool(image_id) and image_id in names and containerd_name(image) in names


def containerd_name(image: str) -> str:
    """The name containerd lists for a Docker image reference: Docker Hub's host made explicit."""
    if "/" not in image:
        return f"docker.io/library/{image}"
    host = image.split("/", 1)[0]
    return image if "." in host or ":" in host or host == "localhost" else f"docker.io/{image}"


def load(images: list[str], progress: Progress = say) -> None:
    """``kind load docker-image`` of locally built images into the cluster's node."""
    progress(f"kind load docker-image {' '.join(images)}")
    _kind("load", "docker-image", "--name", cluster_name(), *images)


def describe() -> str:
    return json.dumps({"cluster": cluster_name(), "image": node_image(), "kubeconfig": str(kubeconfig())})
