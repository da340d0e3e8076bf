"""Does a live object still carry everything tailguard set? (Server defaults are not drift.)"""

from __future__ import annotations

from typing import Any


def is_subset(desired: Any, live: Any) -> bool:
    """True when every field of ``desired`` is present with the same value in ``live``.

    Mappings may hold extra keys in ``live`` (defaults, other managers); lists must match
    element by element, since tailguard owns the lists it sets (containers, args, env).
    """
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(
            is_subset(v, live[k]) if k in live else _empty(v) for k, v in desired.items()
        )
    if isinstance(desired, list) and not desired and live is None:
        return True
    if isinstance(desired, list):
        return (
            isinstance(live, list)
            and len(desired) == len(live)
            and all(is_subset(d, v) for d, v in zip(desired, live, strict=True))
        )
    if isinstance(desired, int | float) and isinstance(live, int | float) and not isinstance(desired, bool):
        return float(desired) == float(live)
    return bool(desired == live)


def _empty(value: Any) -> bool:
    """Empty lists and maps are omitted by the API server: their absence is not drift."""
    return isinstance(value, list | dict) and not value
