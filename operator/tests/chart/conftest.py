"""Fixtures of the chart tests: a helm runner with a private home, skipped when helm is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helm_tool import Helm, require_helm


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    return Helm(require_helm(), tmp_path)
