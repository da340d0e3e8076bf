"""Prometheus as an image, from Debian's ``prometheus`` package on the local base, for the kind tier.

The kind tier runs Prometheus inside the cluster, where it discovers the engine pods through the API
server and scrapes them on the pod network, as a user's Prometheus does; the operator reads it
through its Service. The image is ``images/prometheus/Dockerfile`` on :data:`containers.base.IMAGE`;
Docker's layer cache makes a second build a no-op.
"""

from __future__ import annotations

import time
from pathlib import Path

from containers import base, engine
from containers.engine import Progress, say
from containers.operator_image import run_build

REPO = Path(__file__).resolve().parents[2]
CONTEXT = REPO / "images" / "prometheus"
TAG = "tailguard/prometheus:bookworm"


def build(progress: Progress = say, *, tag: str = TAG) -> str:
    """Build the image (the base first when missing); returns its tag."""
    base_image = base.ensure(progress)
    cli = engine.build_cli()
    cmd = [
        cli,
        "build",
        "--progress=plain",
        "--build-arg",
        f"BASE_IMAGE={base_image}",
        "-t",
        tag,
        str(CONTEXT),
    ]
    started = time.monotonic()
    log = base.images_dir() / "prometheus-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    run_build(cmd, tag, log)
    progress(f"{tag}: built in {time.monotonic() - started:.0f}s (log {log})")
    return tag
