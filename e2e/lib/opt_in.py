"""Opt-in test tiers (the engine tier, the image tier): skipped with a reason unless asked for,
and a failure instead of a skip when their ``TAILGUARD_REQUIRE_…`` variable is set."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest


@dataclass(frozen=True)
class OptInTier:
    """A tier's name and marker, its make target and the variables that ask for it or require it."""

    name: str
    marker: str
    make_target: str
    opt_in_env: str
    require_env: str

    def asked_for(self, config: pytest.Config) -> bool:
        """Asked by its variable or by a marker expression that selects it."""
        markexpr = str(config.getoption("markexpr", "") or "")
        selected = self.marker in markexpr and f"not {self.marker}" not in markexpr
        return bool(os.environ.get(self.opt_in_env)) or selected

    def skip_unless_asked(
        self, config: pytest.Config, items: list[pytest.Item], unavailable: Callable[[], str | None]
    ) -> None:
        """Mark the tier's items skipped when it was not asked for or cannot run here."""
        tier_items = [i for i in items if i.get_closest_marker(self.marker)]
        if not tier_items or os.environ.get(self.require_env):
            return  # with the require variable the session fixture fails with the reason instead
        reason = unavailable()
        if reason is None and self.asked_for(config):
            return
        if reason is None:
            reason = (
                f"the {self.name} tier runs only when asked: `make {self.make_target}`, "
                f"{self.opt_in_env}=1 or -m {self.marker}"
            )
        else:
            reason += f" ({self.require_env}=1 turns this skip into a failure)"
        skip = pytest.mark.skip(reason=reason)
        for item in tier_items:
            item.add_marker(skip)
