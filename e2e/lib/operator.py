"""Running tailguard against the test cluster with its own identity, as the chart will deploy it.

:func:`provision_identity` creates the operator's ServiceAccount, binds it to the ClusterRole that
``tailguard.k8s.rbac`` renders (the same rules the chart ships, *not* cluster-admin) and writes a
kubeconfig holding a token from the TokenRequest API. :class:`OperatorProcess` runs ``tailguard run``
with that kubeconfig as a subprocess; :class:`InProcessOperator` runs the same kopf operator in a
thread of the test process (faster to start, shares the debugger, but shares the process too).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cluster.control_plane import _die_with_parent
from lib.kube import Kube
from lib.wait import wait_for

OPERATOR_NAMESPACE = "tailguard-system"
OPERATOR_NAME = "tailguard-operator"
TOKEN_SECONDS = 24 * 3600

#: How the API server words an RBAC denial ("... is forbidden: User \"system:serviceaccount:...\"
#: cannot create resource \"deployments\" ..."). A bare 403 is not enough: writing into a namespace
#: that is being deleted is a 403 too.
FORBIDDEN = re.compile(r'cannot [a-z]+ resource \\?"')


@dataclass(frozen=True)
class Identity:
    """The operator's ServiceAccount, its RBAC and a kubeconfig that authenticates as it."""

    namespace: str
    service_account: str
    cluster_role: str
    kubeconfig: Path

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"


def _cluster_of(kubeconfig: Path) -> tuple[str, str | None, str | None]:
    """(server, certificate-authority-data, certificate-authority file) of the current context."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    ctx_name = cfg.get("current-context")
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    return cluster["server"], cluster.get("certificate-authority-data"), cluster.get("certificate-authority")


def token_kubeconfig(admin_kubeconfig: Path, token: str, user: str, namespace: str | None = None) -> str:
    """A kubeconfig for the same cluster as ``admin_kubeconfig`` that authenticates with ``token``."""
    server, ca_data, ca_file = _cluster_of(admin_kubeconfig)
    if ca_data is None and ca_file is not None:
        ca_data = base64.b64encode(Path(ca_file).expanduser().read_bytes()).decode()
    cluster: dict[str, Any] = {"server": server}
    if ca_data is not None:
        cluster["certificate-authority-data"] = ca_data
    context: dict[str, Any] = {"cluster": "e2e", "user": user}
    if namespace:
        context["namespace"] = namespace
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": context}],
        "current-context": "e2e",
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def request_token(kube: Kube, namespace: str, service_account: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bound token for the ServiceAccount from the TokenRequest API."""
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": seconds},
    }
    sa = kube.resource("v1", "ServiceAccount")
    result = sa.subresources["token"].create(body=body, name=service_account, namespace=namespace)
    token: str = result.to_dict()["status"]["token"]
    return token


def provision_identity(
    kube: Kube,
    directory: Path,
    *,
    namespace: str = OPERATOR_NAMESPACE,
    name: str = OPERATOR_NAME,
    rules: Sequence[dict[str, Any]] | None = None,
) -> Identity:
    """Create (or update) the operator's ServiceAccount and RBAC; write its kubeconfig under ``directory``.

    ``rules`` replaces the ClusterRole's rules (for a test that withholds a permission on purpose);
    by default they come from ``tailguard.k8s.rbac.cluster_role``.
    """
    from tailguard.k8s.rbac import cluster_role

    kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    )
    role = cluster_role(name)
    if rules is not None:
        role = {**role, "rules": list(rules)}
    kube.apply(role)
    kube.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "tailguard"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
    )
    token = request_token(kube, namespace, name)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.kubeconfig"
    path.write_text(token_kubeconfig(kube.kubeconfig, token, user=name, namespace=namespace))
    path.chmod(0o600)
    return Identity(namespace=namespace, service_account=name, cluster_role=name, kubeconfig=path)


def _free_ports(n: int) -> list[int]:
    from cluster.control_plane import free_ports

    return free_ports(n)


def _tailguard_command() -> list[str]:
    """``tailguard`` from the interpreter's environment (the console script), else ``-m tailguard.cli``."""
    script = Path(sys.executable).parent / "tailguard"
    if script.is_file():
        return [str(script)]
    found = shutil.which("tailguard")
    return [found] if found else [sys.executable, "-m", "tailguard.cli"]


#: The user the chart runs the operator image as (``podSecurityContext.runAsUser``); no passwd entry.
CHART_UID = 65532

#: Inside a new user and mount namespace (root there), before dropping to the chart's UID: keep /tmp
#: writable (the chart's emptyDir) as its own mount, then make the root filesystem read-only.
_RESTRICT = (
    "set -e; mount --bind /tmp /tmp; mount -o remount,bind,ro /; "
    'exec unshare --user --map-user={uid} --map-group={uid} "$@"'
)


def restricted_unavailable() -> str | None:
    """Why :func:`restricted_command` cannot run here (unprivileged user namespaces refused), or None."""
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    probe = subprocess.run(
        restricted_command(["true"]),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return None if probe.returncode == 0 else f"user namespaces unavailable: {probe.stderr.strip()}"


def restricted_command(command: Sequence[str], uid: int = CHART_UID) -> list[str]:
    """``command`` run as the chart runs the image: as ``uid`` (a UID with no passwd entry), on a
    read-only root filesystem with only /tmp writable. Uses unprivileged user and mount namespaces
    (util-linux ``unshare``): no container runtime needed, files stay readable through the mapping."""
    shell = ["sh", "-c", _RESTRICT.format(uid=uid), "-"]
    return ["unshare", "--user", "--map-root-user", "--mount", *shell, *command]


class OperatorProcess:
    """``tailguard run`` as a subprocess authenticated as the operator's ServiceAccount."""

    def __init__(
        self,
        identity: Identity,
        log_file: Path,
        *,
        namespaces: Sequence[str] = (),
        prometheus_url: str = "http://127.0.0.1:9",
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        restricted: bool = False,
    ) -> None:
        self.identity = identity
        self.restricted = restricted
        self.log_file = log_file
        self.namespaces = list(namespaces)
        self.prometheus_url = prometheus_url
        self.extra_args = list(extra_args)
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.liveness_port = 0
        self.metrics_port = 0
        self.starts = 0

    @property
    def liveness_url(self) -> str:
        return f"http://127.0.0.1:{self.liveness_port}/healthz"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        cmd = [*_tailguard_command(), "run"]
        for ns in self.namespaces:
            cmd += ["--namespace", ns]
        cmd += [
            "--listen-address=127.0.0.1",
            f"--liveness-port={self.liveness_port}",
            f"--metrics-port={self.metrics_port}",
            f"--prometheus-url={self.prometheus_url}",
            "--verbose",
            *self.extra_args,
        ]
        return cmd

    def start(self, *, timeout: float = 60) -> None:
        if self.running:
            return
        self.liveness_port, self.metrics_port = _free_ports(2)
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILGUARD_")}
        env.update({"KUBECONFIG": str(self.identity.kubeconfig), "PYTHONUNBUFFERED": "1", **self.env})
        command = self.command()
        if self.restricted:
            command = restricted_command(command)
            # What a kubelet gives a user without a passwd entry: HOME=/, no USER or LOGNAME.
            for name in ("USER", "LOGNAME", "LNAME", "USERNAME"):
                env.pop(name, None)
            env["HOME"] = "/"
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "a") as fh:
            fh.write(f"\n===== start #{self.starts}: {' '.join(command)}\n")
            fh.flush()
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=fh,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                # Killed with its parent (a demo or test run stopped hard leaves no operator acting).
                preexec_fn=_die_with_parent,
            )
        wait_for(
            f"the operator's liveness endpoint {self.liveness_url}",
            self._healthy,
            timeout=timeout,
            interval=0.25,
            details=lambda: f"operator log {self.log_file}:\n{self.log_tail()}",
        )

    def _healthy(self) -> bool:
        self.assert_running()
        try:
            with urllib.request.urlopen(self.liveness_url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def assert_running(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(
                f"the operator exited with {self.proc.returncode}; log {self.log_file}:\n{self.log_tail()}"
            )

    def stop(self, *, timeout: float = 20) -> int | None:
        """SIGTERM (kopf shuts down gracefully), SIGKILL after ``timeout``; returns the exit code."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would end it."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_text(self) -> str:
        try:
            return self.log_file.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def forbidden_lines(self, since: int = 0) -> list[str]:
        """Log lines (from character ``since`` on) where RBAC refused the operator something."""
        return [line for line in self.log_text()[since:].splitlines() if FORBIDDEN.search(line)]


class InProcessOperator:
    """The operator in a thread of the test process: ``tailguard.handlers.main.run_async`` with the
    settings ``tailguard run`` parses from its arguments, stopped through its stop event.

    It authenticates as the operator's ServiceAccount: the client library's default configuration
    and ``KUBECONFIG`` (read by kopf's login) point at its kubeconfig while it runs.
    :class:`lib.kube.Kube` and kubectl calls in the tests name their kubeconfig explicitly, so they
    are unaffected. Faster to start than :class:`OperatorProcess` and debuggable in place, but it
    shares the process: use the subprocess for restart and crash tests.
    """

    def __init__(
        self,
        identity: Identity,
        *,
        namespaces: Sequence[str] = (),
        prometheus_url: str = "http://127.0.0.1:9",
    ) -> None:
        self.identity = identity
        self.namespaces = list(namespaces)
        self.prometheus_url = prometheus_url
        self.liveness_port = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._saved_kubeconfig: str | None = None
        self._saved_default = ""

    def _settings(self) -> Any:
        from tailguard.cli import build_parser, operator_settings

        argv = [
            "run",
            f"--liveness-port={self.liveness_port}",
            "--metrics-port=0",
            "--listen-address=127.0.0.1",
        ]
        argv += [f"--prometheus-url={self.prometheus_url}"]
        for ns in self.namespaces:
            argv += ["--namespace", ns]
        return operator_settings(build_parser().parse_args(argv))

    def _main(self) -> None:
        from kubernetes import config

        from tailguard.handlers.main import run_async

        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_async(self._settings(), stop=self._stop)

        try:
            config.load_kube_config(config_file=str(self.identity.kubeconfig))  # type: ignore[no-untyped-call]
            asyncio.run(run())
        except BaseException as exc:  # reported by assert_running / stop
            self._error = exc

    def start(self, *, timeout: float = 60) -> None:
        from kubernetes.config import kube_config

        self._saved_kubeconfig = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(self.identity.kubeconfig)
        # kopf's login calls load_kube_config() without a path; the client read KUBECONFIG at import.
        self._saved_default = kube_config.KUBE_CONFIG_DEFAULT_LOCATION
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(self.identity.kubeconfig)
        self.liveness_port = _free_ports(1)[0]
        self._error = None
        self._thread = threading.Thread(target=self._main, name="tailguard-operator", daemon=True)
        self._thread.start()
        url = f"http://127.0.0.1:{self.liveness_port}/healthz"

        def healthy() -> bool:
            self.assert_running()
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(f"the in-process operator's liveness endpoint {url}", healthy, timeout=timeout, interval=0.2)

    def assert_running(self) -> None:
        if self._error is not None:
            raise AssertionError(f"the in-process operator failed: {self._error!r}") from self._error

    def stop(self, *, timeout: float = 30) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise AssertionError(f"the in-process operator did not stop within {timeout}s")
        self._thread = self._loop = self._stop = None
        from kubernetes.config import kube_config

        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = self._saved_default
        if self._saved_kubeconfig is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = self._saved_kubeconfig

    def restart(self) -> None:
        self.stop()
        self.start()


def wait_gone(
    kube: Kube, api_version: str, kind: str, name: str, namespace: str | None, timeout: float = 60
) -> None:
    wait_for(
        f"{kind} {namespace}/{name} to be gone",
        lambda: kube.get(api_version, kind, name, namespace) is None,
        timeout=timeout,
    )
