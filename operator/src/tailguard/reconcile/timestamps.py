"""Time as the operator carries it: Unix seconds (a float) everywhere, RFC 3339 only in status."""

from __future__ import annotations

import datetime as dt
import functools
import math
import zlib
from collections.abc import Callable

#: Where the operator reads the time from: Unix seconds (``time.time`` in production).
Clock = Callable[[], float]

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@functools.lru_cache(maxsize=64)
def iso(ts: float) -> str:
    """A Unix time as RFC 3339 (UTC, whole seconds), as status and conditions carry it.

    Cached: every service decided in a cycle stamps its conditions and observed block with the
    cycle's one ``now`` (``strftime`` is slow)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime(_FORMAT)


def seconds_since(timestamp: str | None, now: float) -> float:
    """Seconds from an RFC 3339 ``timestamp`` (as :func:`iso` writes it) to ``now``; infinite when
    there is none or it cannot be read."""
    if not timestamp:
        return math.inf
    return now - _parse(timestamp)


@functools.lru_cache(maxsize=4096)
def _parse(timestamp: str) -> float:
    """Unix seconds of an RFC 3339 ``timestamp``; infinitely far in the past when unreadable.

    Cached: every decision reads its service's last status time, and services written in the
    same cycle share one (``strptime`` is slow).
    """
    try:
        return dt.datetime.strptime(timestamp, _FORMAT).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return -math.inf


def in_turn(key: tuple[str, str], now: float, interval_s: float, period_s: float) -> bool:
    """Whether the decision at ``now`` is service ``key``'s turn in a ``period_s`` period.

    Decisions fall on an ``interval_s`` grid; each service gets one grid slot per period, at a
    phase fixed by its name. A periodic write (a status refresh, the policy state) made in its
    turn is spread over the period across services instead of landing on one cycle for all.
    """
    slots = max(1, round(period_s / interval_s))
    phase = zlib.crc32(f"{key[0]}/{key[1]}".encode()) % slots
    return math.floor(now / interval_s) % slots == phase
