"""The operator image, run the way the chart runs it: UID 65532:65532 (no passwd entry), a read-only
root filesystem with a writable /tmp, no capabilities, HOME=/ and no USER. It must answer
``--help``, render an example exactly as the checkout does, stay small, and — against the local API
server, as the operator's ServiceAccount — create an InferenceService's Deployment and serve
``/healthz`` and ``/metrics``. Guards the start-up crash of kopf's ``getpass.getuser()`` for a UID
without a passwd entry, in the image itself.
"""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lib.kube import Kube
from lib.operator import CHART_UID, Identity
from lib.wait import wait_for

pytestmark = pytest.mark.images

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = "llama-8b-chat.yaml"
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")
#: The size the operator image must stay within (docker image inspect's .Size, bytes).
MAX_IMAGE_BYTES = 200_000_000

#: What the chart's pod and container securityContext amount to under plain Docker.
CHART_LIKE = (
    f"--user={CHART_UID}:{CHART_UID}",
    "--read-only",
    "--tmpfs=/tmp:rw,nosuid,nodev,size=64m",
    "--cap-drop=ALL",
    "--security-opt=no-new-privileges",
    "--env=HOME=/",
)


def _run(
    docker: str, image: str, args: Sequence[str], *, extra: Sequence[str] = ()
) -> subprocess.CompletedProcess[str]:
    """``docker run --rm`` with the chart's restrictions and no network."""
    return subprocess.run(
        [docker, "run", "--rm", "--network=none", *CHART_LIKE, *extra, image, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _python(docker: str, image: str, code: str) -> subprocess.CompletedProcess[str]:
    return _run(docker, image, ["-c", code], extra=["--entrypoint=/opt/tailguard/bin/python"])


def test_image_is_within_its_size_budget(docker: str, operator_image_tag: str) -> None:
    out = subprocess.run(
        [docker, "image", "inspect", "-f", "{{.Size}}", operator_image_tag],
        capture_output=True,
        text=True,
        check=True,
    )
    size = int(out.stdout.strip())
    print(f"{operator_image_tag}: {size} bytes ({size / 1e6:.1f} MB)")
    assert size <= MAX_IMAGE_BYTES, f"{size / 1e6:.1f} MB > {MAX_IMAGE_BYTES / 1e6:.0f} MB"


def test_runs_as_the_charts_user_without_a_passwd_entry(docker: str, operator_image_tag: str) -> None:
    code = (
        "import os, pwd, getpass\n"
        "print(os.getuid(), os.getgid(), os.environ.get('HOME'), os.environ.get('USER'))\n"
        "try:\n    pwd.getpwuid(os.getuid())\nexcept KeyError:\n    print('no passwd entry')\n"
        "from tailguard.handlers.main import operator_identity\n"
        "print(operator_identity(os.environ))\n"
    )
    proc = _python(docker, operator_image_tag, code)
    assert proc.returncode == 0, proc.stderr
    ids, passwd, identity = proc.stdout.splitlines()
    assert ids == f"{CHART_UID} {CHART_UID} / None"
    assert passwd == "no passwd entry"  # the condition that crashed kopf's getpass.getuser()
    assert identity.startswith(f"uid-{CHART_UID}@"), identity


def test_runtime_has_no_simulator_packages(docker: str, operator_image_tag: str) -> None:
    code = (
        "import importlib.util\n"
        "print(' '.join(n for n in ('numpy', 'matplotlib', 'pandas', 'prometheus_api_client')"
        " if importlib.util.find_spec(n)))\n"
    )
    proc = _python(docker, operator_image_tag, code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"in the operator image: {proc.stdout.strip()}"
    simulate = _run(docker, operator_image_tag, ["simulate", "--synthetic", "poisson"])
    assert simulate.returncode == 2
    assert simulate.stderr.count("\n") == 1, simulate.stderr
    assert "pip install 'tailguard[sim]'" in simulate.stderr


def test_run_help_and_render_as_the_chart_runs_it(docker: str, operator_image_tag: str) -> None:
    helped = _run(docker, operator_image_tag, ["run", "--help"])
    assert helped.returncode == 0, helped.stderr
    assert "--prometheus-url" in helped.stdout
    assert "--liveness-port" in helped.stdout

    examples = REPO / "examples"
    rendered = _run(
        docker,
        operator_image_tag,
        ["render", "-f", f"/examples/{EXAMPLE}"],
        extra=[f"--volume={examples}:/examples:ro"],
    )
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stderr == ""
    here = subprocess.run(
        [sys.executable, "-m", "tailguard.cli", "render", "-f", str(examples / EXAMPLE)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert rendered.stdout == here.stdout, "the image renders differently from this checkout"

    invalid = _run(docker, operator_image_tag, ["render", "-f", "/nonexistent.yaml"])
    assert invalid.returncode == 2
    assert "Traceback" not in invalid.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> tuple[int, str] | None:
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return int(resp.status), resp.read().decode(errors="replace")
    except (urllib.error.URLError, OSError):
        return None


class OperatorContainer:
    """``tailguard run`` in the image, on the host's network (the API server listens on loopback)."""

    def __init__(self, docker: str, image: str, kubeconfig: Path) -> None:
        self.docker = docker
        self.image = image
        self.kubeconfig = kubeconfig
        self.name = f"tailguard-operator-{uuid.uuid4().hex[:8]}"
        self.liveness_port = _free_port()
        self.metrics_port = _free_port()

    def start(self) -> None:
        cmd = [
            self.docker,
            "run",
            "--detach",
            f"--name={self.name}",
            "--network=host",
            *CHART_LIKE,
            f"--volume={self.kubeconfig}:/etc/tailguard/kubeconfig:ro",
            "--env=KUBECONFIG=/etc/tailguard/kubeconfig",
            f"--env=POD_NAME={self.name}",  # the chart passes the pod's name
            self.image,
            "run",
            "--all-namespaces",
            "--listen-address=127.0.0.1",
            f"--liveness-port={self.liveness_port}",
            f"--metrics-port={self.metrics_port}",
            "--prometheus-url=http://127.0.0.1:9",
            "--verbose",
        ]
        subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60)

    def state(self) -> dict[str, Any]:
        out = subprocess.run(
            [self.docker, "inspect", "-f", "{{json .State}}", self.name],
            capture_output=True,
            text=True,
            check=True,
        )
        state: dict[str, Any] = json.loads(out.stdout)
        return state

    def assert_running(self) -> None:
        state = self.state()
        assert state["Running"], f"the operator container exited ({state['ExitCode']}):\n{self.logs()}"

    def logs(self, lines: int = 80) -> str:
        out = subprocess.run(
            [self.docker, "logs", "--tail", str(lines), self.name],
            capture_output=True,
            text=True,
            check=False,
        )
        return out.stdout + out.stderr

    def stop(self) -> int:
        """``docker stop`` (SIGTERM, as a kubelet sends); the exit code."""
        subprocess.run([self.docker, "stop", "--time=20", self.name], capture_output=True, check=False)
        code: int = self.state()["ExitCode"]
        return code

    def remove(self) -> None:
        subprocess.run([self.docker, "rm", "--force", self.name], capture_output=True, check=False)


@pytest.fixture
def operator_container(
    docker: str, operator_image_tag: str, operator_identity: Identity, namespace: str, tmp_path: Path
) -> Iterator[OperatorContainer]:
    """The operator in its container; removed before the test's ``namespace`` is deleted."""
    # Readable by the container's UID (the identity's kubeconfig is 0600, owned by the test's user).
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copyfile(operator_identity.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o644)
    container = OperatorContainer(docker, operator_image_tag, kubeconfig)
    container.start()
    try:
        yield container
    finally:
        with contextlib.suppress(Exception):
            print(container.logs(200))
        container.remove()


def test_operator_in_the_image_reconciles_against_the_api_server(
    operator_container: OperatorContainer,
    kube: Kube,
    crd: dict[str, Any],
    namespace: str,
    examples: dict[str, dict[str, Any]],
) -> None:
    op = operator_container

    def healthy() -> bool:
        op.assert_running()
        answer = _get(f"http://127.0.0.1:{op.liveness_port}/healthz")
        return answer is not None and answer[0] == 200

    wait_for("the container's /healthz", healthy, timeout=90, details=op.logs)

    manifest = copy.deepcopy(examples["llama-8b-chat"])
    name = manifest["metadata"]["name"]
    manifest["metadata"]["namespace"] = namespace
    kube.create(manifest, namespace)
    deployment = wait_for(
        "the operator in the container to create the Deployment",
        lambda: kube.get("apps/v1", "Deployment", name, namespace),
        timeout=60,
        details=op.logs,
    )
    assert deployment["metadata"]["ownerReferences"][0]["name"] == name
    wait_for(
        "the operator in the container to create the Service",
        lambda: kube.get("v1", "Service", name, namespace),
        timeout=60,
        details=op.logs,
    )
    observed = wait_for(
        "the operator to write the status",
        lambda: (kube.get(*ISVC, name, namespace) or {}).get("status", {}).get("observedGeneration"),
        timeout=60,
        details=op.logs,
    )
    assert observed >= 1

    metrics = _get(f"http://127.0.0.1:{op.metrics_port}/metrics")
    assert metrics is not None
    assert metrics[0] == 200
    assert "tailguard_" in metrics[1]

    op.assert_running()
    log = op.logs(2000)
    assert "Traceback" not in log, log

    # Deleting the service while the operator runs releases kopf's finalizer. (Not asserted free of
    # tracebacks: a control step racing the deletion can still log a 404 on its status patch.)
    kube.delete(*ISVC, name, namespace)
    wait_for("the operator to release its finalizer", lambda: not kube.list(*ISVC, namespace), timeout=30)
    op.assert_running()
    log = op.logs(4000)
    for symptom in ("Read-only file system", "getpwuid", "Permission denied"):
        assert symptom not in log, log
    # SIGTERM, as a kubelet stops the pod: kopf shuts down cleanly as PID 1.
    assert op.stop() == 0, op.logs()
