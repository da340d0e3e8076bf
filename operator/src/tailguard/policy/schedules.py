"""Declared expectations: windows of known load in which at least some replicas run.

A window opens at each instant its cron ``start`` names (wall-clock time in its zone) and stays
open for ``duration_s`` seconds of elapsed time. While windows are open, the floor is the largest
``min_replicas`` among them. Plain data in, plain data out: the operator and the simulator turn
their own settings into :class:`ScheduleWindow` records.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailguard.cron import latest_start, parse_cron, zone


@dataclass(frozen=True)
class ScheduleWindow:
    """One declared window, as the policy reads it."""

    name: str
    #: Five-field cron expression of the openings (see :mod:`tailguard.cron`).
    start: str
    duration_s: float
    min_replicas: int
    #: IANA zone the start is read in.
    time_zone: str = "UTC"

    def opened_at(self, now: float) -> float | None:
        """When the window open at ``now`` last opened (UNIX seconds), or ``None`` if it is closed."""
        return latest_start(parse_cron(self.start), zone(self.time_zone), now - self.duration_s, now)


@dataclass(frozen=True)
class ScheduledFloor:
    """The replicas the open windows hold, and which windows they are."""

    #: The largest ``min_replicas`` of the open windows; 0 when none is open.
    replicas: int = 0
    #: Names of the open windows, in declared order.
    active: tuple[str, ...] = ()
    #: Names of the open windows whose ``min_replicas`` is the floor.
    holding: tuple[str, ...] = ()


def scheduled_floor(windows: tuple[ScheduleWindow, ...], now: float) -> ScheduledFloor:
    """The floor the windows hold at ``now`` (UNIX seconds, UTC)."""
    open_windows = [w for w in windows if w.opened_at(now) is not None]
    if not open_windows:
        return ScheduledFloor()
    floor = max(0, max(w.min_replicas for w in open_windows))
    return ScheduledFloor(
        replicas=floor,
        active=tuple(w.name for w in open_windows),
        holding=tuple(w.name for w in open_windows if w.min_replicas == floor),
    )
