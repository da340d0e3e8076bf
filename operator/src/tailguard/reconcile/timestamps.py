"""Time as the operator carries it: Unix seconds (a float) everywhere, RFC 3339 only in status."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable

#: Where the operator reads the time from: Unix seconds (``time.time`` in production).
Clock = Callable[[], float]

_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def iso(ts: float) -> str:
    """A Unix time as RFC 3339 (UTC, whole seconds), as status and conditions carry it."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime(_FORMAT)


def seconds_since(timestamp: str | None, now: float) -> float:
    """Seconds from an RFC 3339 ``timestamp`` (as :func:`iso` writes it) to ``now``; infinite when
    there is none or it cannot be read."""
    if not timestamp:
        return math.inf
    try:
        then = dt.datetime.strptime(timestamp, _FORMAT).replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return math.inf
    return now - then
