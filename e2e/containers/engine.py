"""The Docker engine the image tier builds and runs containers with.

An engine that already answers (``docker info``) is used as it is. Otherwise Debian's ``docker.io``
is installed when ``dockerd`` is missing, and ``dockerd`` is started in the background in its own
session, its log and pid file under ``<cache>/docker/``; it keeps running after the command that
started it (the next build and test reuse it) until ``python -m containers engine-down``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from cluster.tools import cache_root

Progress = Callable[[str], None]

#: The socket ``dockerd`` listens on when this harness starts it (Docker's default).
SOCKET = Path("/var/run/docker.sock")
START_TIMEOUT_S = 90.0

#: The runc wrapper that drops the capabilities the machine's bounding set lacks (see its docstring);
#: the kind node image carries the same file for its containerd.
CAPFILTER_SOURCE = Path(__file__).resolve().parents[2] / "images" / "kind-node" / "files" / "runc-capfilter"
#: Its name as a Docker runtime.
CAPFILTER_RUNTIME = "tailguard-runc"


class EngineError(RuntimeError):
    """The engine is missing and could not be installed or started; the message says why."""


def say(msg: str) -> None:
    print(f"[images] {msg}", flush=True)


def state_dir() -> Path:
    return cache_root() / "docker"


def log_file() -> Path:
    return state_dir() / "dockerd.log"


def _sudo() -> list[str]:
    return [] if os.geteuid() == 0 else ["sudo", "-n"]


def docker_cli() -> str:
    """The ``docker`` client on PATH (``TAILGUARD_DOCKER`` names another)."""
    explicit = os.environ.get("TAILGUARD_DOCKER")
    found = explicit or shutil.which("docker")
    if not found:
        raise EngineError("no `docker` client on PATH (install docker.io: make docker-up)")
    return found


def build_cli() -> str:
    """A client that builds with BuildKit: the one on PATH when it has the buildx plugin, else
    Debian's (``/usr/bin/docker`` from docker.io 20.10, whose BuildKit needs no plugin).

    BuildKit, not the legacy builder: it reads ``Dockerfile.dockerignore`` (the legacy builder would
    send the whole checkout, virtualenv included) and passes the CA bundle as a secret that never
    lands in a layer.
    """
    explicit = os.environ.get("TAILGUARD_DOCKER_BUILD")
    if explicit:
        return explicit
    cli = docker_cli()
    probe = subprocess.run([cli, "buildx", "version"], capture_output=True, text=True, check=False)
    if probe.returncode == 0:
        return cli
    debian = Path("/usr/bin/docker")
    if debian.is_file():
        return str(debian)
    raise EngineError(f"{cli} has no buildx plugin and Debian's docker client is missing (make docker-up)")


def running(cli: str | None = None) -> str | None:
    """The engine's version when it answers, else None."""
    try:
        cli = cli or docker_cli()
    except EngineError:
        return None
    try:
        out = subprocess.run(
            [cli, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None
    version = out.stdout.strip()
    return version if out.returncode == 0 and version else None


def apt_install(packages: Sequence[str], progress: Progress = say) -> None:
    """``apt-get install`` of Debian packages (root, or passwordless sudo)."""
    if shutil.which("apt-get") is None:
        raise EngineError(f"install {' '.join(packages)} with your package manager (no apt-get here)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    progress(f"apt-get install {' '.join(packages)}")
    for cmd in (
        [*_sudo(), "apt-get", "update", "-qq"],
        [*_sudo(), "apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages],
    ):
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise EngineError(f"`{' '.join(cmd)}` failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")


@contextlib.contextmanager
def lock(name: str) -> Iterator[None]:
    """One start (or build) at a time per user, across checkouts."""
    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / f".{name}.lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"{name}: another process holds {fh.name}; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _pid_file() -> Path:
    return state_dir() / "dockerd.pid"


def _recorded_pid() -> int | None:
    """The pid of the dockerd this harness started, if it still runs dockerd."""
    try:
        pid = int(_pid_file().read_text().strip())
        exe = Path(f"/proc/{pid}/exe").resolve().name
    except (OSError, ValueError):
        return None
    return pid if exe in ("dockerd", "sudo") else None


def _log_tail(lines: int = 30) -> str:
    try:
        return "\n".join(log_file().read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def missing_capabilities(status: str | None = None, last_cap: int | None = None) -> list[int]:
    """Capability numbers the kernel knows (``cap_last_cap``) that our bounding set lacks.

    A privileged container asks runc for all of them; on a machine without, say, CAP_SYS_RESOURCE
    (bit 24) in its bounding set runc fails with "unable to apply caps: operation not permitted".
    """
    if status is None:
        status = Path("/proc/self/status").read_text()
    if last_cap is None:
        try:
            last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        except OSError:
            last_cap = 40
    bnd = next(int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapBnd:"))
    return [n for n in range(last_cap + 1) if not bnd & (1 << n)]


def capfilter_path() -> Path:
    """The wrapper installed for dockerd (a copy, so a checkout moving does not break the engine)."""
    return state_dir() / "runc-capfilter"


def _install_capfilter() -> Path:
    dest = capfilter_path()
    dest.parent.mkdir(parents=True, exist_ok=True)
    text = CAPFILTER_SOURCE.read_text()
    if not dest.is_file() or dest.read_text() != text:
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(dest)
    return dest


def dockerd_runtime_args() -> list[str]:
    """The capability filter as dockerd's default runtime, only where a capability is missing."""
    if not missing_capabilities():
        return []
    return [
        f"--add-runtime={CAPFILTER_RUNTIME}={_install_capfilter()}",
        f"--default-runtime={CAPFILTER_RUNTIME}",
    ]


def default_runtime(cli: str | None = None) -> str:
    out = subprocess.run(
        [cli or docker_cli(), "info", "--format", "{{.DefaultRuntime}}"],
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    return out.stdout.strip()


def ensure_privileged(progress: Progress = say) -> str:
    """An engine that can run ``--privileged`` containers here (kind's nodes); its version.

    Where the bounding set lacks a capability, that is an engine whose default runtime is the
    capability filter. An engine this harness started without it is restarted with it, but only
    while it runs no container; any other engine must be configured by hand (the message says how).
    """
    version = ensure(progress)
    if not missing_capabilities() or default_runtime() == CAPFILTER_RUNTIME:
        return version
    with lock("dockerd"):
        if default_runtime() == CAPFILTER_RUNTIME:
            return version
        busy = subprocess.run(
            [docker_cli(), "ps", "-q"], capture_output=True, text=True, check=False
        ).stdout.split()
        if _recorded_pid() is None or busy:
            raise EngineError(
                "this machine's capability bounding set lacks "
                f"{missing_capabilities()} (numbers from linux/capability.h), so privileged containers "
                f"need the runtime wrapper {CAPFILTER_SOURCE} as Docker's default runtime: start dockerd "
                f"with --add-runtime={CAPFILTER_RUNTIME}=<a copy of it> --default-runtime={CAPFILTER_RUNTIME}"
                + (f" ({len(busy)} containers run now, so the harness does not restart it)" if busy else "")
            )
        progress("restarting the harness's dockerd with the capability filter as its default runtime")
    stop()
    return ensure(progress)


def ensure(progress: Progress = say) -> str:
    """A running engine: the one that answers, else Debian's dockerd started here. Its version."""
    version = running()
    if version:
        return version
    with lock("dockerd"):
        version = running()
        if version:
            return version
        if shutil.which("dockerd") is None or not Path("/usr/bin/docker").is_file():
            apt_install(["docker.io"], progress)
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            raise EngineError("dockerd is not on PATH after installing docker.io")
        if _recorded_pid() is None:
            log_file().parent.mkdir(parents=True, exist_ok=True)
            progress(f"starting {dockerd} (log {log_file()})")
            with open(log_file(), "a") as fh:
                fh.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} {dockerd}\n")
                fh.flush()
                proc = subprocess.Popen(
                    [
                        *_sudo(),
                        dockerd,
                        f"--host=unix://{SOCKET}",
                        f"--pidfile={state_dir() / 'dockerd.run.pid'}",
                        *dockerd_runtime_args(),
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # outlives make; stopped by engine-down
                )
            _pid_file().write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            version = running()
            if version:
                progress(f"docker engine {version} on {SOCKET}")
                return version
            if _recorded_pid() is None:
                raise EngineError(f"dockerd exited at start; last lines of {log_file()}:\n{_log_tail()}")
            time.sleep(0.5)
        raise EngineError(
            f"dockerd did not answer within {START_TIMEOUT_S:.0f}s; {log_file()}:\n{_log_tail()}"
        )


def stop(grace_s: float = 20.0) -> bool:
    """Stop the dockerd this harness started (SIGTERM, SIGKILL after ``grace_s``); False if none."""
    pid = _recorded_pid()
    if pid is None:
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _recorded_pid() is not None:
        time.sleep(0.2)
    if _recorded_pid() is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _pid_file().unlink(missing_ok=True)
    return True
