"""The operator image built from ``images/operator/Dockerfile`` on the locally made base.

The Dockerfile keeps ``PYTHON_IMAGE`` as a build argument (the official Python image by default);
here it points at :data:`containers.base.IMAGE`. The build reaches PyPI through the machine's network;
when that path needs an extra CA (a TLS-intercepting proxy), the machine's CA bundle is passed as
the BuildKit secret ``pip-ca``, which pip reads during the build and which stays out of every layer.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from containers import base, engine
from containers.engine import EngineError, Progress, say

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "operator" / "Dockerfile"
REPOSITORY = "tailguard/operator"


def version() -> str:
    m = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert m, "no version in pyproject.toml"
    return m.group(1)


def default_tag() -> str:
    """``$TAILGUARD_OPERATOR_IMAGE``, else ``tailguard/operator:<version>``."""
    return os.environ.get("TAILGUARD_OPERATOR_IMAGE") or f"{REPOSITORY}:{version()}"


def ca_bundle() -> Path | None:
    """The CA bundle this machine's pip trusts (``TAILGUARD_BUILD_CA``, ``PIP_CERT``, ...), if any."""
    for name in ("TAILGUARD_BUILD_CA", "PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        value = os.environ.get(name)
        if value and Path(value).is_file():
            return Path(value)
    default = Path("/etc/ssl/certs/ca-certificates.crt")
    return default if default.is_file() else None


def _git(*args: str) -> str:
    out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def build_command(cli: str, tag: str, base_image: str, ca: Path | None) -> list[str]:
    cmd = [
        cli,
        "build",
        "--progress=plain",
        "-f",
        str(DOCKERFILE),
        "--build-arg",
        f"PYTHON_IMAGE={base_image}",
        "--build-arg",
        f"VERSION={version()}",
        "--build-arg",
        f"REVISION={_git('rev-parse', 'HEAD')}",
        "--build-arg",
        f"SOURCE={_git('config', '--get', 'remote.origin.url')}",
    ]
    if ca is not None:
        cmd += ["--secret", f"id=pip-ca,src={ca}"]
    return [*cmd, "-t", tag, str(REPO)]


def size_bytes(cli: str, image: str) -> int:
    out = subprocess.run(
        [cli, "image", "inspect", "-f", "{{.Size}}", image], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def run_build(cmd: list[str], tag: str, log: Path) -> None:
    """Run a ``docker build`` command line with BuildKit, its output in ``log``; on failure raise
    :class:`EngineError` with the log's last lines."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        rc = subprocess.run(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ, DOCKER_BUILDKIT="1"), check=False
        ).returncode
    if rc != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise EngineError(f"building {tag} failed (exit {rc}); last lines of {log}:\n{tail}")


def build(progress: Progress = say, *, tag: str | None = None) -> str:
    """Build the operator image on the local base (built first when missing). Its tag."""
    base_image = base.ensure(progress)
    tag = tag or default_tag()
    cli = engine.build_cli()
    log = base.images_dir() / "operator-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = build_command(cli, tag, base_image, ca_bundle())
    progress(f"building {tag} on {base_image} (log {log})")
    started = time.monotonic()
    run_build(cmd, tag, log)
    size = size_bytes(engine.docker_cli(), tag)
    progress(f"{tag}: {size / 1e6:.1f} MB ({size} bytes), built in {time.monotonic() - started:.0f}s")
    return tag


STANDIN_DOCKERFILE = REPO / "images" / "engine-standin" / "Dockerfile"
STANDIN_REPOSITORY = "tailguard/engine-standin"


def standin_tag() -> str:
    """``$TAILGUARD_STANDIN_IMAGE``, else ``tailguard/engine-standin:<version>``."""
    return os.environ.get("TAILGUARD_STANDIN_IMAGE") or f"{STANDIN_REPOSITORY}:{version()}"


def build_standin(progress: Progress = say, *, operator: str | None = None, tag: str | None = None) -> str:
    """The engine stand-in image: the operator image (built first) with the stand-in's entrypoint."""
    operator = operator or build(progress)
    tag = tag or standin_tag()
    cli = engine.build_cli()
    cmd = [
        cli,
        "build",
        "--progress=plain",
        "-f",
        str(STANDIN_DOCKERFILE),
        "--build-arg",
        f"OPERATOR_IMAGE={operator}",
        "-t",
        tag,
        str(STANDIN_DOCKERFILE.parent),
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, DOCKER_BUILDKIT="1"), check=False
    )
    if out.returncode != 0:
        raise EngineError(f"building {tag} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    progress(f"{tag}: {size_bytes(engine.docker_cli(), tag) / 1e6:.1f} MB (the operator image's layers)")
    return tag
