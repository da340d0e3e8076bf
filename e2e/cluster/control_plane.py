"""A real Kubernetes control plane as local processes on loopback, with kwok's fake GPU nodes.

``Cluster(state_dir).up()`` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok, creates the fake nodes, waits until the cluster is usable and writes an admin kubeconfig;
``down()`` stops every process it started (whole process groups) and forgets the data. Everything
lives in one state directory::

    <state>/state.json        ports, pids and commands of the running components
    <state>/kubeconfig        admin (system:masters) kubeconfig
    <state>/logs/<name>.log   one log per component
    <state>/pki/              CA, serving and client certificates, service-account keys
    <state>/run/              component kubeconfigs and configuration files
    <state>/etcd/             etcd's data (removed by down)

Ports are picked free at start and recorded, so two clusters with two state directories run side
by side. Only the standard library is used, so the harness runs before any virtualenv exists.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from cluster import pki as pki_mod
from cluster import tools as tools_mod

T = TypeVar("T")

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
CLUSTER_NAME = "tailguard-e2e"
GPU_RESOURCE = "nvidia.com/gpu"
KWOK_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
#: Label every fake node carries; tests select on it.
FAKE_NODE_LABEL = ("tailguard.dev/fake-node", "true")

#: Tries at starting with freshly picked ports when one was taken in between.
PORT_ATTEMPTS = 3

#: Component start order; down stops them in reverse.
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


class ClusterError(RuntimeError):
    """The cluster could not be started, or a wait ran out; the message says what and where to look."""


def default_state_dir() -> Path:
    explicit = os.environ.get("TAILGUARD_CLUSTER_DIR")
    return Path(explicit).expanduser() if explicit else tools_mod.cache_root() / "cluster"


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


@dataclass(frozen=True)
class NodePool:
    """A set of identical fake GPU nodes."""

    count: int = 4
    gpus: int = 8
    cpu: str = "96"
    memory: str = "1Ti"
    pods: int = 110
    prefix: str = "gpu-node"
    product: str = "NVIDIA-H100-80GB-HBM3"

    @classmethod
    def from_env(cls) -> NodePool:
        """``TAILGUARD_FAKE_NODES`` and ``TAILGUARD_GPUS_PER_NODE`` override the 4 x 8 default."""
        return cls(count=_env_int("TAILGUARD_FAKE_NODES", 4), gpus=_env_int("TAILGUARD_GPUS_PER_NODE", 8))

    def names(self) -> list[str]:
        return [f"{self.prefix}-{i}" for i in range(self.count)]


def fake_node(name: str, pool: NodePool) -> dict[str, Any]:
    """A Node object kwok will manage: Ready, schedulable, advertising ``pool.gpus`` GPUs."""
    resources = {
        "cpu": pool.cpu,
        "memory": pool.memory,
        "pods": str(pool.pods),
        "ephemeral-storage": "2Ti",
        GPU_RESOURCE: str(pool.gpus),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION[0]: KWOK_ANNOTATION[1], "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                FAKE_NODE_LABEL[0]: FAKE_NODE_LABEL[1],
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": f"kwok-gpu-{pool.gpus}x",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": pool.product,
                "nvidia.com/gpu.count": str(pool.gpus),
            },
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources},
    }


# --------------------------------------------------------------------------------------------------
# Small utilities


#: Where the kernel takes the local ports of outgoing connections from (Linux's default range).
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: How many ports below that range :func:`free_ports` picks from.
PORT_POOL = 8000


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (32768-60999 when it cannot be read)."""
    try:
        lo, hi = (int(v) for v in path.read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return lo, hi


def free_ports(n: int, *, rng: random.Random | None = None) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now (held open together so they differ).

    They are taken from the :data:`PORT_POOL` ports just below the kernel's ephemeral range, not
    from it: a component binds its port a second or two after it was picked, and on a machine
    busy with outgoing connections (thousands a second from a benchmark's Prometheus) a port
    picked in the ephemeral range was taken by some ``connect()`` in between ("Address already in
    use"). Ports outside that range are only ever taken by an explicit bind. Falls back to ports
    the kernel picks when the pool has too few free ones.
    """
    lo, _ = ephemeral_range()
    pool = list(range(max(1024, lo - PORT_POOL), lo))
    (rng or random.SystemRandom()).shuffle(pool)
    socks: list[socket.socket] = []
    try:
        for port in pool:
            if len(socks) == n:
                break
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        while len(socks) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_until(
    what: str,
    probe: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.25,
    hint: Callable[[], str] | None = None,
) -> T:
    """Poll ``probe`` until it returns something other than None/False; explain a timeout."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = probe()
            if value is not None and value is not False:
                return value
        except ClusterError:
            raise
        except Exception as exc:  # a probe failing is just "not yet"
            last_error = exc
        if time.monotonic() >= deadline:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            if last_error is not None:
                msg += f" (last error: {last_error!r})"
            if hint is not None:
                msg += f"\n{hint()}"
            raise ClusterError(msg)
        time.sleep(interval)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours still "exists"; treat it as dead.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join(f"    {line}" for line in text[-lines:])


def _die_with_parent() -> None:
    """preexec hook: the child gets SIGTERM when the process that started it dies (Linux only)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def stop_process_group(pid: int, *, grace: float = 10.0) -> None:
    """SIGTERM the process group led by ``pid``, then SIGKILL what is left after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _pid_alive(pid):
        time.sleep(0.1)
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, 0)


class Api:
    """A minimal HTTPS client for the API server (standard library only)."""

    def __init__(self, server: str, ca: Path, cert: Path, key: Path) -> None:
        self.server = server.rstrip("/")
        self._ctx = ssl.create_default_context(cafile=str(ca))
        self._ctx.load_cert_chain(str(cert), str(key))

    def request(
        self, method: str, path: str, body: dict[str, Any] | None = None, *, timeout: float = 10
    ) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            status = exc.code
        try:
            parsed = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            parsed = {"raw": raw.decode(errors="replace")}
        return status, parsed if isinstance(parsed, dict) else {"items": parsed}

    def get_text(self, path: str, *, timeout: float = 5) -> tuple[int, str]:
        req = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(req, context=self._ctx, timeout=timeout) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")


def _https_ok(url: str, timeout: float = 2) -> bool:
    """GET ``url`` without verifying the (self-signed) certificate; True on 200."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _http_ok(url: str, timeout: float = 2) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def kwok_stage_text(path: Path) -> str:
    """One of kwok's upstream stages, with the pod stages' delays shortened for tests.

    Upstream waits 1 s plus up to 5 s of jitter before each pod transition and lets a deleted pod
    linger until its grace period ends; tests want pods Ready and gone in a fraction of a second.
    The per-pod annotations (``pod-ready.stage.kwok.x-k8s.io/delay`` ...) still override the
    default, and ``TAILGUARD_KWOK_POD_DELAY_MS`` sets it (``upstream`` keeps kwok's own).
    """
    text = path.read_text().strip()
    setting = os.environ.get("TAILGUARD_KWOK_POD_DELAY_MS", "100")
    if not path.name.startswith("pod-") or setting == "upstream":
        return text
    delay = int(setting)
    text = re.sub(r"(\n\s+)durationMilliseconds: \d+", rf"\g<1>durationMilliseconds: {delay}", text)
    text = re.sub(r"\n\s+jitterDurationMilliseconds: \d+", "", text)
    # pod-delete: the jitter "until the deletion timestamp" is the whole grace period.
    text = re.sub(r"\n\s+jitterDurationFrom:\n\s+expressionFrom: '\.metadata\.deletionTimestamp'", "", text)
    return text


def kubeconfig_yaml(
    *,
    server: str,
    ca: bytes,
    user: str,
    cert: bytes | None = None,
    key: bytes | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> str:
    """A one-context kubeconfig with everything embedded (YAML written by hand: stdlib only)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    creds = []
    if cert is not None and key is not None:
        creds += [f"    client-certificate-data: {b64(cert)}", f"    client-key-data: {b64(key)}"]
    if token is not None:
        creds.append(f"    token: {json.dumps(token)}")
    ns = f"\n    namespace: {json.dumps(namespace)}" if namespace else ""
    return "\n".join(
        [
            "apiVersion: v1",
            "kind: Config",
            "clusters:",
            f"- name: {CLUSTER_NAME}",
            "  cluster:",
            f"    server: {server}",
            f"    certificate-authority-data: {b64(ca)}",
            "users:",
            f"- name: {user}",
            "  user:",
            *creds,
            "contexts:",
            f"- name: {CLUSTER_NAME}",
            "  context:",
            f"    cluster: {CLUSTER_NAME}",
            f"    user: {user}{ns}",
            f"current-context: {CLUSTER_NAME}",
            "",
        ]
    )


# --------------------------------------------------------------------------------------------------
# The cluster


@dataclass
class State:
    """What ``state.json`` records about a running cluster."""

    server: str
    ports: dict[str, int]
    processes: dict[str, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    ready_seconds: float = 0.0


class Cluster:
    """One local control plane, identified by its state directory."""

    def __init__(self, state_dir: Path | None = None, *, log: Callable[[str], None] | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self._log = log or (lambda msg: print(f"[cluster] {msg}", flush=True))

    # paths -----------------------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    @property
    def pki(self) -> pki_mod.PKI:
        return pki_mod.PKI(self.state_dir / "pki")

    def log_of(self, component: str) -> Path:
        return self.logs_dir / f"{component}.log"

    # state -----------------------------------------------------------------------------------------
    def read_state(self) -> State | None:
        try:
            raw = json.loads(self.state_file.read_text())
        except (OSError, json.JSONDecodeError):
            return None
        return State(**raw)

    def _write_state(self, state: State) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
        tmp.replace(self.state_file)

    def api(self, state: State | None = None) -> Api:
        state = state or self.read_state()
        if state is None:
            raise ClusterError(f"no cluster recorded in {self.state_dir}; run `make cluster-up`")
        p = self.pki
        return Api(state.server, p.ca_cert, p.client_cert("admin"), p.client_key("admin"))

    def _alive(self, state: State) -> dict[str, bool]:
        out = {}
        for name, proc in state.processes.items():
            pid = int(proc["pid"])
            cmd = _cmdline(pid)
            out[name] = _pid_alive(pid) and bool(cmd) and cmd[0] == proc["cmd"][0]
        return out

    def is_running(self) -> bool:
        """Every component's process is alive and the API server answers /readyz."""
        state = self.read_state()
        if state is None or set(state.processes) != set(COMPONENTS):
            return False
        if not all(self._alive(state).values()):
            return False
        try:
            status, _ = self.api(state).request("GET", "/readyz", timeout=3)
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False
        return status == 200

    # lifecycle -------------------------------------------------------------------------------------
    def up(
        self, pool: NodePool | None = None, *, timeout: float = 120, die_with_parent: bool = False
    ) -> State:
        """Start the cluster, or reuse the one already running here. Returns its state."""
        pool = pool or NodePool.from_env()
        if self.is_running():
            state = self.read_state()
            assert state is not None
            self._log(f"already running ({state.server}); kubeconfig: {self.kubeconfig}")
            self.ensure_nodes(pool)
            return state
        if self.state_file.exists() or self._strays():
            self._log("found a partial cluster; stopping it first")
            self.down(quiet=True)

        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                return self._start(pool, timeout=timeout, die_with_parent=die_with_parent)
            except ClusterError as exc:
                # Ports are picked free, then bound by the components a moment later; another
                # cluster starting at the same time can take one in between. Pick again.
                if "address already in use" not in str(exc) or attempt == PORT_ATTEMPTS:
                    raise
                self._log(f"a port was taken while starting (attempt {attempt}); retrying with new ports")
        raise AssertionError("unreachable")

    def _start(self, pool: NodePool, *, timeout: float, die_with_parent: bool) -> State:
        started = time.monotonic()
        tools = tools_mod.locate()
        for d in (self.logs_dir, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        p = pki_mod.ensure(self.state_dir / "pki", tools.openssl, SERVICE_IP)
        names = ("etcd", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
        ports = dict(zip(names, free_ports(len(names)), strict=True))
        state = State(
            server=f"https://127.0.0.1:{ports['kube-apiserver']}", ports=ports, started_at=time.time()
        )
        self._write_state(state)
        try:
            self._start_etcd(tools, state, die_with_parent)
            self._start_apiserver(tools, p, state, die_with_parent)
            self._write_kubeconfigs(p, state)
            self._start_controllers(tools, p, state, die_with_parent)
            self._wait_ready(state, pool, timeout=timeout)
        except BaseException:
            self._log(f"start failed; logs are in {self.logs_dir}")
            self.down(quiet=True, keep_logs=True)
            raise
        state.nodes = asdict(pool)
        state.ready_seconds = round(time.monotonic() - started, 1)
        self._write_state(state)
        self._log(f"ready in {state.ready_seconds}s: {state.server}")
        self._log(f"export KUBECONFIG={self.kubeconfig}")
        return state

    def _spawn(self, state: State, name: str, cmd: Sequence[str], die_with_parent: bool) -> None:
        log = self.log_of(name)
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        with open(log, "w") as fh:
            fh.write(f"# {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.Popen(
                list(cmd),
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=self.run_dir,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,
            )
        state.processes[name] = {"pid": proc.pid, "cmd": list(cmd), "log": str(log)}
        self._write_state(state)

    def _check_alive(self, state: State, name: str) -> None:
        pid = int(state.processes[name]["pid"])
        if not _pid_alive(pid):
            raise ClusterError(
                f"{name} exited during start-up; last lines of {self.log_of(name)}:\n{_tail(self.log_of(name))}"
            )

    def _wait_component(self, state: State, name: str, probe: Callable[[], bool], timeout: float) -> None:
        def check() -> bool:
            self._check_alive(state, name)
            return probe()

        wait_until(
            f"{name} to report healthy",
            check,
            timeout=timeout,
            hint=lambda: f"last lines of {self.log_of(name)}:\n{_tail(self.log_of(name))}",
        )

    def _start_etcd(self, tools: tools_mod.Tools, state: State, dwp: bool) -> None:
        data = self.state_dir / "etcd"
        if data.exists():
            import shutil

            shutil.rmtree(data)
        client = f"http://127.0.0.1:{state.ports['etcd']}"
        peer = f"http://127.0.0.1:{state.ports['etcd-peer']}"
        cmd = [
            str(tools.etcd),
            "--name=tailguard-e2e",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=tailguard-e2e={peer}",
            "--initial-cluster-state=new",
            # A test cluster: losing the last writes on a crash is fine, fsync latency is not.
            "--unsafe-no-fsync",
            "--snapshot-count=50000",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ]
        self._spawn(state, "etcd", cmd, dwp)
        self._wait_component(state, "etcd", lambda: _http_ok(f"{client}/health"), timeout=30)

    def _start_apiserver(self, tools: tools_mod.Tools, p: pki_mod.PKI, state: State, dwp: bool) -> None:
        cmd = [
            str(tools.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{state.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The kubernetes Service cannot point at a loopback address; nothing in-cluster calls it.
            "--endpoint-reconciler-type=none",
            f"--secure-port={state.ports['kube-apiserver']}",
            f"--tls-cert-file={p.serving_cert}",
            f"--tls-private-key-file={p.serving_key}",
            f"--client-ca-file={p.ca_cert}",
            # Fills the requestheader CA in kube-system/extension-apiserver-authentication, which the
            # controller-manager and scheduler read; no client holds the allowed name.
            f"--requestheader-client-ca-file={p.ca_cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--service-account-key-file={p.sa_pub}",
            f"--service-account-signing-key-file={p.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=Node,RBAC",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction",
            f"--cert-dir={self.run_dir / 'kube-apiserver'}",
            "--profiling=false",
            "--event-ttl=1h",
            "--v=1",
        ]
        self._spawn(state, "kube-apiserver", cmd, dwp)
        api = self.api(state)

        def ready() -> bool:
            status, _ = api.request("GET", "/readyz", timeout=3)
            return status == 200

        self._wait_component(state, "kube-apiserver", ready, timeout=90)

    def _write_kubeconfigs(self, p: pki_mod.PKI, state: State) -> None:
        ca = p.ca_cert.read_bytes()
        for who in pki_mod.CLIENTS:
            text = kubeconfig_yaml(
                server=state.server,
                ca=ca,
                user=who,
                cert=p.client_cert(who).read_bytes(),
                key=p.client_key(who).read_bytes(),
            )
            path = self.kubeconfig if who == "admin" else self.run_dir / f"{who}.kubeconfig"
            path.write_text(text)
            path.chmod(0o600)

    def _start_controllers(self, tools: tools_mod.Tools, p: pki_mod.PKI, state: State, dwp: bool) -> None:
        kcm_kc = self.run_dir / "kube-controller-manager.kubeconfig"
        sched_kc = self.run_dir / "kube-scheduler.kubeconfig"
        self._spawn(
            state,
            "kube-controller-manager",
            [
                str(tools.kube_controller_manager),
                f"--kubeconfig={kcm_kc}",
                f"--authentication-kubeconfig={kcm_kc}",
                f"--authorization-kubeconfig={kcm_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={state.ports['kube-controller-manager']}",
                f"--cert-dir={self.run_dir / 'kube-controller-manager'}",
                f"--client-ca-file={p.ca_cert}",
                f"--root-ca-file={p.ca_cert}",
                f"--service-account-private-key-file={p.sa_key}",
                f"--cluster-signing-cert-file={p.ca_cert}",
                f"--cluster-signing-key-file={p.ca_key}",
                f"--cluster-name={CLUSTER_NAME}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--use-service-account-credentials=true",
                "--controllers=*",
                # Fake nodes never fail; on a busy 2-core machine kwok's lease renewals can run
                # late, and the default grace would mark nodes NotReady and evict test pods.
                "--node-monitor-grace-period=300s",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            dwp,
        )
        self._spawn(
            state,
            "kube-scheduler",
            [
                str(tools.kube_scheduler),
                f"--kubeconfig={sched_kc}",
                f"--authentication-kubeconfig={sched_kc}",
                f"--authorization-kubeconfig={sched_kc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={state.ports['kube-scheduler']}",
                f"--cert-dir={self.run_dir / 'kube-scheduler'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
            dwp,
        )
        stages = sorted(tools.kwok_stages.glob("*.yaml"))
        if not stages:
            raise ClusterError(f"no kwok stages in {tools.kwok_stages}; rebuild with `make cluster-tools`")
        kwok_config = self.run_dir / "kwok.yaml"
        kwok_config.write_text("\n---\n".join(kwok_stage_text(s) for s in stages) + "\n")
        self._spawn(
            state,
            "kwok",
            [
                str(tools.kwok),
                f"--config={kwok_config}",
                f"--kubeconfig={self.run_dir / 'kwok.kubeconfig'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION[0]}={KWOK_ANNOTATION[1]}",
                f"--cidr={POD_CIDR}",
                "--node-ip=127.0.0.1",
                f"--server-address=127.0.0.1:{state.ports['kwok']}",
                "--node-lease-duration-seconds=40",
            ],
            dwp,
        )

    def ensure_nodes(self, pool: NodePool) -> None:
        """Create the pool's fake nodes that do not exist yet (existing ones are left alone)."""
        api = self.api()
        for name in pool.names():
            status, body = api.request("GET", f"/api/v1/nodes/{name}")
            if status == 200:
                continue
            status, body = api.request("POST", "/api/v1/nodes", fake_node(name, pool))
            if status not in (200, 201, 409):
                raise ClusterError(f"creating node {name} failed: HTTP {status}: {body.get('message', body)}")

    def _wait_ready(self, state: State, pool: NodePool, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        api = self.api(state)
        for name, port in (
            ("kube-controller-manager", "kube-controller-manager"),
            ("kube-scheduler", "kube-scheduler"),
        ):
            url = f"https://127.0.0.1:{state.ports[port]}/healthz"
            self._wait_component(state, name, lambda url=url: _https_ok(url), timeout=left())  # type: ignore[misc]
        self._wait_component(
            state, "kwok", lambda: _http_ok(f"http://127.0.0.1:{state.ports['kwok']}/healthz"), timeout=left()
        )
        self.ensure_nodes(pool)

        def nodes_ready() -> bool:
            for name in COMPONENTS:
                self._check_alive(state, name)
            status, body = api.request(
                "GET", f"/api/v1/nodes?labelSelector={FAKE_NODE_LABEL[0]}%3D{FAKE_NODE_LABEL[1]}"
            )
            if status != 200:
                return False
            ready = [
                n["metadata"]["name"]
                for n in body.get("items", [])
                if any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in n.get("status", {}).get("conditions", [])
                )
                and not any(
                    t.get("key") == "node.kubernetes.io/not-ready"
                    for t in n.get("spec", {}).get("taints", [])
                )
            ]
            return set(pool.names()) <= set(ready)

        wait_until(
            f"{pool.count} fake nodes Ready and untainted",
            nodes_ready,
            timeout=left(),
            interval=0.5,
            hint=lambda: f"kwok log ({self.log_of('kwok')}):\n{_tail(self.log_of('kwok'))}",
        )

        def default_sa() -> bool:
            status, _ = api.request("GET", "/api/v1/namespaces/default/serviceaccounts/default")
            return status == 200

        wait_until(
            "the default ServiceAccount (created by kube-controller-manager)",
            default_sa,
            timeout=left(),
            interval=0.5,
            hint=lambda: (
                f"last lines of {self.log_of('kube-controller-manager')}:\n{_tail(self.log_of('kube-controller-manager'))}"
            ),
        )

    def _strays(self) -> list[int]:
        """Pids of processes whose command line points into this state directory (ours, orphaned)."""
        marker = str(self.state_dir) + os.sep
        mine = {os.getpid(), os.getppid()}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            cmd = _cmdline(int(entry.name))
            if cmd and Path(cmd[0]).name in {*COMPONENTS, "prometheus"} and any(marker in a for a in cmd[1:]):
                found.append(int(entry.name))
        return found

    def down(self, *, quiet: bool = False, keep_logs: bool = True) -> None:
        """Stop every component (process groups), also strays from a lost state file; drop etcd data."""
        import shutil

        state = self.read_state()
        stopped = []
        if state is not None:
            for name in reversed(list(state.processes)):
                pid = int(state.processes[name]["pid"])
                cmd = _cmdline(pid)
                if _pid_alive(pid) and cmd and cmd[0] == state.processes[name]["cmd"][0]:
                    stop_process_group(pid)
                    stopped.append(name)
        for pid in self._strays():
            stop_process_group(pid)
            stopped.append(f"stray pid {pid}")
        with contextlib.suppress(FileNotFoundError):
            self.state_file.unlink()
        shutil.rmtree(self.state_dir / "etcd", ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            self.kubeconfig.unlink()
        if not keep_logs:
            shutil.rmtree(self.logs_dir, ignore_errors=True)
        if not quiet:
            self._log(f"stopped {', '.join(stopped) if stopped else 'nothing (no cluster was running)'}")

    def status(self) -> str:
        state = self.read_state()
        if state is None:
            return f"no cluster in {self.state_dir}"
        alive = self._alive(state)
        rows = [
            f"state dir: {self.state_dir}",
            f"server:    {state.server}",
            f"kubeconfig: {self.kubeconfig}",
        ]
        for name in COMPONENTS:
            proc = state.processes.get(name)
            if proc is None:
                rows.append(f"  {name:<24} not started")
            else:
                rows.append(
                    f"  {name:<24} pid {proc['pid']:<8} {'running' if alive[name] else 'DEAD'}  log {proc['log']}"
                )
        rows.append("ready" if self.is_running() else "NOT ready")
        return "\n".join(rows)


@contextlib.contextmanager
def running(state_dir: Path, pool: NodePool | None = None) -> Iterator[Cluster]:
    """A cluster for the duration of a ``with`` block (stopped even when the block fails)."""
    cluster = Cluster(state_dir)
    try:
        cluster.up(pool, die_with_parent=True)
        yield cluster
    finally:
        cluster.down(quiet=True)
