"""Fixtures for the image tier (marker ``images``): the operator image, built on the local base, run
in Docker as the chart runs it.

The tier is opt-in, like the engine tier: it needs a Docker engine and builds images, so a plain
``pytest`` skips it with the reason. It runs with ``make test-images`` (``TAILGUARD_REQUIRE_IMAGES=1``:
no engine is then a failure), or with ``TAILGUARD_IMAGES=1`` or ``-m images`` (then no engine is a
skip, with the reason). When asked, the fixtures build what is missing (the base with debootstrap,
the operator image); both are cached, so a warm run builds nothing but the operator image's changed
layers.
"""

from __future__ import annotations

import os
from typing import Final

import pytest

from containers import base, engine, operator_image
from lib.opt_in import OptInTier

REQUIRE_ENV: Final = "TAILGUARD_REQUIRE_IMAGES"
OPT_IN_ENV: Final = "TAILGUARD_IMAGES"


def unavailable_reason() -> str | None:
    """Why the tier cannot run here, or None. Starts and installs nothing."""
    if engine.running() is None:
        return "no Docker engine answers (`make docker-up` installs Debian's docker.io and starts dockerd)"
    cli = engine.docker_cli()
    if base.image_recipe(cli) is None and os.geteuid() != 0:
        return f"{base.IMAGE} is missing and debootstrap needs root to make it"
    return None


TIER: Final = OptInTier("image", "images", "test-images", OPT_IN_ENV, REQUIRE_ENV)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    TIER.skip_unless_asked(config, items, unavailable_reason)


@pytest.fixture(scope="session")
def docker() -> str:
    """The docker client, with an engine that answers."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.fail(f"the image tier cannot run: {reason}", pytrace=False)
    return engine.docker_cli()


@pytest.fixture(scope="session")
def operator_image_tag(docker: str) -> str:
    """The operator image on the local base (built when missing or stale: layers are cached)."""
    try:
        return operator_image.build()
    except engine.EngineError as exc:
        pytest.fail(f"building the operator image failed: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def standin_image_tag(operator_image_tag: str) -> str:
    """The engine stand-in image (the operator image with the stand-in's entrypoint)."""
    try:
        return operator_image.build_standin(operator=operator_image_tag)
    except engine.EngineError as exc:
        pytest.fail(f"building the engine stand-in image failed: {exc}", pytrace=False)
